//! The seccomp program on the wire: how the server ships the BPF it compiled
//! to unixwrap, which loads it as is.
//!
//! Format (`SeccompConfig::filter`, config version 2): standard base64 (RFC
//! 4648, `=` padding, no line breaks) of the program's instructions back to
//! back, 8 bytes each, in the **native byte order** of the machine (the server
//! and unixwrap run on the same kernel, so they share it): `code` u16, `jt` u8,
//! `jf` u8, `k` u32 — exactly `struct sock_filter`, as libseccomp exports it.
//!
//! Why base64 in JSON: the config travels in an environment variable (no NUL
//! bytes, any length the kernel allows); 8 bytes per instruction is the kernel's
//! own layout, so nothing is re-encoded on the way in.
//!
//! Failure modes: decoding fails (a message, never a partial program) on
//! anything that is not canonical base64, on a length that is not a whole
//! number of instructions, on an empty program and on one longer than the
//! kernel's `BPF_MAXINSNS` (4096). A program that decodes is not thereby
//! trusted to be agentsh's: unixwrap also checks it traps (USER_NOTIF) and,
//! once loaded, that the marker answers.

/// The kernel's limit on a classic BPF program (`BPF_MAXINSNS`).
pub const MAX_INSNS: usize = 4096;
/// Bytes per instruction on the wire.
pub const INSN_BYTES: usize = 8;

const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/// Standard base64 with padding.
pub fn base64_encode(data: &[u8]) -> String {
    let mut s = String::with_capacity(data.len().div_ceil(3) * 4);
    for chunk in data.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                s.push(ALPHABET[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                s.push('=');
            }
        }
    }
    s
}

/// Decodes standard, padded base64; anything else is an error.
///
/// # Errors
/// A length that is not a multiple of 4, a byte outside the alphabet,
/// misplaced padding, or non-zero bits in the padding.
pub fn base64_decode(text: &str) -> Result<Vec<u8>, String> {
    let t = text.as_bytes();
    if t.len() % 4 != 0 {
        return Err(format!("base64 length {} is not a multiple of 4", t.len()));
    }
    // A table, not a search of the alphabet: the filter is ~8,000
    // characters, decoded by the shim on the hot path of every first shell.
    const VALUE: [u8; 256] = {
        let mut t = [u8::MAX; 256];
        let mut i = 0;
        while i < ALPHABET.len() {
            t[ALPHABET[i] as usize] = i as u8;
            i += 1;
        }
        t
    };
    let value = |c: u8| -> Option<u32> {
        let v = VALUE[c as usize];
        (v != u8::MAX).then_some(u32::from(v))
    };
    let mut out = Vec::with_capacity(t.len() / 4 * 3);
    for (qi, q) in t.chunks(4).enumerate() {
        let last = qi + 1 == t.len() / 4;
        let pad = q.iter().rev().take_while(|c| **c == b'=').count();
        if pad > 2 || (pad > 0 && !last) {
            return Err("misplaced base64 padding".into());
        }
        let mut n = 0u32;
        for (i, c) in q.iter().enumerate() {
            let v = if i >= 4 - pad {
                0
            } else {
                value(*c).ok_or_else(|| format!("byte {:?} is not base64", *c as char))?
            };
            n = (n << 6) | v;
        }
        let bytes = [(n >> 16) as u8, (n >> 8) as u8, n as u8];
        let keep = 3 - pad;
        if bytes[keep..].iter().any(|b| *b != 0) {
            return Err("non-canonical base64 padding".into());
        }
        out.extend_from_slice(&bytes[..keep]);
    }
    Ok(out)
}

/// Encodes a program for [`crate::SeccompConfig::filter`].
pub fn encode_program(prog: &[libc::sock_filter]) -> String {
    let mut raw = Vec::with_capacity(prog.len() * INSN_BYTES);
    for i in prog {
        raw.extend_from_slice(&i.code.to_ne_bytes());
        raw.push(i.jt);
        raw.push(i.jf);
        raw.extend_from_slice(&i.k.to_ne_bytes());
    }
    base64_encode(&raw)
}

/// Decodes [`crate::SeccompConfig::filter`].
///
/// # Errors
/// See the module doc.
pub fn decode_program(text: &str) -> Result<Vec<libc::sock_filter>, String> {
    let raw = base64_decode(text).map_err(|e| format!("the filter is not valid base64: {e}"))?;
    decode_raw(&raw)
}

/// Splits raw bytes (native order) into instructions.
///
/// # Errors
/// Empty, not a whole number of instructions, or longer than [`MAX_INSNS`].
pub fn decode_raw(raw: &[u8]) -> Result<Vec<libc::sock_filter>, String> {
    if raw.is_empty() {
        return Err("the filter is empty".into());
    }
    if raw.len() % INSN_BYTES != 0 {
        return Err(format!(
            "the filter is {} bytes, not a whole number of {INSN_BYTES}-byte instructions",
            raw.len()
        ));
    }
    let n = raw.len() / INSN_BYTES;
    if n > MAX_INSNS {
        return Err(format!(
            "the filter has {n} instructions; the kernel takes at most {MAX_INSNS}"
        ));
    }
    Ok(raw
        .chunks_exact(INSN_BYTES)
        .map(|c| libc::sock_filter {
            code: u16::from_ne_bytes([c[0], c[1]]),
            jt: c[2],
            jf: c[3],
            k: u32::from_ne_bytes([c[4], c[5], c[6], c[7]]),
        })
        .collect())
}

/// `BPF_RET | BPF_K`: a return of a constant action.
const RET_K: u16 = 0x06;

/// Does `prog` ever return `SECCOMP_RET_USER_NOTIF`? A program that never
/// traps cannot be agentsh's (execs would go unsupervised).
pub fn traps_to_user_notif(prog: &[libc::sock_filter]) -> bool {
    returns(prog, libc::SECCOMP_RET_USER_NOTIF)
}

/// Does `prog` ever return `SECCOMP_RET_TRACE`? (The ptrace backend's trap.)
pub fn traps_to_tracer(prog: &[libc::sock_filter]) -> bool {
    returns(prog, libc::SECCOMP_RET_TRACE)
}

fn returns(prog: &[libc::sock_filter], action: u32) -> bool {
    prog.iter()
        .any(|i| i.code == RET_K && i.k & libc::SECCOMP_RET_ACTION_FULL == action)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_round_trips_and_matches_the_reference() {
        for (plain, enc) in [
            (&b""[..], ""),
            (b"f", "Zg=="),
            (b"fo", "Zm8="),
            (b"foo", "Zm9v"),
            (b"foob", "Zm9vYg=="),
            (b"\x00\xff\x10", "AP8Q"),
        ] {
            assert_eq!(base64_encode(plain), enc);
            assert_eq!(base64_decode(enc).unwrap(), plain);
        }
    }

    #[test]
    fn malformed_base64_is_refused() {
        for bad in [
            "Zg=", "Z===", "Zg==Zg==", "Z!==", "Zh==", "Zm9=", "====", " Zg=",
        ] {
            assert!(base64_decode(bad).is_err(), "{bad:?}");
        }
    }

    fn insn(code: u16, k: u32) -> libc::sock_filter {
        libc::sock_filter {
            code,
            jt: 1,
            jf: 2,
            k,
        }
    }

    #[test]
    fn programs_round_trip() {
        let prog = vec![insn(0x20, 4), insn(RET_K, libc::SECCOMP_RET_USER_NOTIF)];
        let text = encode_program(&prog);
        let back = decode_program(&text).unwrap();
        assert_eq!(back.len(), 2);
        for (a, b) in prog.iter().zip(&back) {
            assert_eq!((a.code, a.jt, a.jf, a.k), (b.code, b.jt, b.jf, b.k));
        }
        assert!(traps_to_user_notif(&back));
        assert!(!traps_to_user_notif(&back[..1]));
    }

    #[test]
    fn programs_of_the_wrong_size_are_refused() {
        assert!(decode_program("").unwrap_err().contains("empty"));
        assert!(decode_raw(&[0; 9]).unwrap_err().contains("whole number"));
        assert!(decode_raw(&[0; (MAX_INSNS + 1) * 8])
            .unwrap_err()
            .contains("at most"));
        assert_eq!(decode_raw(&[0; 16]).unwrap().len(), 2);
    }
}
