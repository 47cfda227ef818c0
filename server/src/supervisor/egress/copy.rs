//! One call's messages, copied out of the caller once: the destination, the
//! data and the control messages judged are the bytes the supervisor then
//! sends, whatever another thread writes afterwards. Where the call is
//! judged in place (`in_place`), only the destinations are read, with where
//! each byte that decides them lies.
//!
//! Failure modes: memory the caller cannot read either is answered as the
//! kernel would (EFAULT); memory only the supervisor cannot read, or control
//! messages of a 32-bit caller, is a refusal with the reason
//! ([`Copy::Refuse`]).

use super::call::Answer;
use super::sockaddr::SOCKADDR_MAX;
use crate::supervisor::seam::Caught;
use agentsh_proto::netabi::{NetCall, Width};

/// The most bytes one send copies: more is sent as a short write on a
/// stream socket, and refused (EMSGSIZE) on a datagram socket, where no
/// datagram is that large.
pub(super) const SEND_MAX: usize = 1 << 20;
/// The most iovec entries (`UIO_MAXIOV`) and messages (`UIO_MAXIOV`) a call
/// may name, as the kernel allows.
pub(super) const IOV_MAX: usize = 1024;
/// The most control-message bytes copied.
pub(super) const CONTROL_MAX: usize = 64 * 1024;

/// One send or connect, copied out of the caller.
pub(super) struct Copied {
    /// The destination's sockaddr bytes (empty: none named).
    pub(super) addr: Vec<u8>,
    /// The data (sends only).
    pub(super) data: Vec<u8>,
    /// Control messages (native layout), for `sendmsg`.
    pub(super) control: Vec<u8>,
    pub(super) flags: i32,
    /// The caller asked for more than [`SEND_MAX`] bytes.
    pub(super) clipped: bool,
    /// `sendmmsg`: where this message's `msg_len` is in the caller's
    /// memory (the kernel writes the bytes sent there; so does the
    /// supervisor when it sends for the caller).
    pub(super) len_at: Option<(u32, u64)>,
    /// Where the destination's sockaddr lies in the caller's memory (0:
    /// none named).
    pub(super) addr_at: u64,
    /// Where the bytes that decide the destination lie (the sockaddr, and
    /// a message header's name and its length), as (address, length).
    pub(super) places: Vec<Place>,
}

/// Where bytes lie in the caller's memory: (address, length).
pub(super) type Place = (u64, usize);

pub(super) enum Copy {
    Answer(Answer),
    Refuse(String),
}

fn read(tid: u32, addr: u64, len: usize) -> Result<Vec<u8>, Copy> {
    if len == 0 {
        return Ok(Vec::new());
    }
    crate::tracee::read_bytes(tid, addr, len).map_err(|e| match e.raw_os_error() {
        Some(libc::EFAULT) => Copy::Answer(-i64::from(libc::EFAULT)),
        _ => Copy::Refuse(format!("the caller's memory is unreadable: {e}")),
    })
}

fn word(b: &[u8], at: usize, width: Width) -> u64 {
    match width {
        Width::W64 => {
            let mut w = [0u8; 8];
            w.copy_from_slice(&b[at..at + 8]);
            u64::from_ne_bytes(w)
        }
        Width::W32 => {
            let mut w = [0u8; 4];
            w.copy_from_slice(&b[at..at + 4]);
            u64::from(u32::from_ne_bytes(w))
        }
    }
}

/// The messages of the call, copied (one for `connect`, `sendto`,
/// `sendmsg`; up to `vlen` for `sendmmsg`).
pub(super) fn copy_call(c: &Caught, call: NetCall, width: Width) -> Result<Vec<Copied>, Copy> {
    copy(c, call, width, true)
}

/// The destinations of the call only (no data, no control messages), with
/// where their bytes lie.
pub(super) fn copy_names(c: &Caught, call: NetCall, width: Width) -> Result<Vec<Copied>, Copy> {
    copy(c, call, width, false)
}

fn copy(c: &Caught, call: NetCall, width: Width, data: bool) -> Result<Vec<Copied>, Copy> {
    let a = c.args;
    let addr_len = |len: u64| (len as u32 as usize).min(SOCKADDR_MAX);
    let name = |at: u64, len: u64| -> Result<(Vec<u8>, Vec<Place>), Copy> {
        if at == 0 {
            return Ok((Vec::new(), Vec::new()));
        }
        let b = read(c.tid, at, addr_len(len))?;
        let places = vec![(at, b.len())];
        Ok((b, places))
    };
    match call {
        NetCall::Connect => {
            let (addr, places) = name(a[1], a[2])?;
            Ok(vec![Copied {
                addr,
                data: Vec::new(),
                control: Vec::new(),
                flags: 0,
                clipped: false,
                len_at: None,
                addr_at: a[1],
                places,
            }])
        }
        NetCall::Sendto => {
            let want = if data { a[2] as usize } else { 0 };
            let len = want.min(SEND_MAX);
            let (addr, places) = name(a[4], a[5])?;
            Ok(vec![Copied {
                addr,
                data: read(c.tid, a[1], len)?,
                control: Vec::new(),
                flags: a[3] as i32,
                clipped: want > len,
                len_at: None,
                addr_at: a[4],
                places,
            }])
        }
        NetCall::Sendmsg => Ok(vec![copy_msghdr(c.tid, a[1], a[2] as i32, width, data)?]),
        NetCall::Sendmmsg => {
            let vlen = (a[2] as u32 as usize).min(IOV_MAX);
            // struct mmsghdr: a msghdr and an unsigned int (padded).
            let stride = match width {
                Width::W64 => 64,
                Width::W32 => 32,
            };
            // msg_len follows the msghdr (56 bytes, or 28 for a 32-bit caller).
            let len_offset: u64 = match width {
                Width::W64 => 56,
                Width::W32 => 28,
            };
            let mut out = Vec::with_capacity(vlen);
            for i in 0..vlen {
                let at = a[1] + (i * stride) as u64;
                let mut m = copy_msghdr(c.tid, at, a[3] as i32, width, data)?;
                m.len_at = Some((c.tid, at + len_offset));
                out.push(m);
            }
            if out.is_empty() {
                return Err(Copy::Answer(0));
            }
            Ok(out)
        }
    }
}

/// One `struct msghdr` at `at`, with its name, and (`with_data`) its data
/// and control messages.
fn copy_msghdr(
    tid: u32,
    at: u64,
    flags: i32,
    width: Width,
    with_data: bool,
) -> Result<Copied, Copy> {
    let (size, w) = match width {
        Width::W64 => (56, 8),
        Width::W32 => (28, 4),
    };
    let h = read(tid, at, size)?;
    // name, namelen, iov, iovlen, control, controllen, flags: pointer-sized
    // except namelen (int, padded on 64-bit) and flags.
    let (name, namelen, iov, iovlen, control, controllen) = match width {
        Width::W64 => (
            word(&h, 0, width),
            u64::from(u32::from_ne_bytes([h[8], h[9], h[10], h[11]])),
            word(&h, 16, width),
            word(&h, 24, width),
            word(&h, 32, width),
            word(&h, 40, width),
        ),
        Width::W32 => (
            word(&h, 0, width),
            word(&h, 4, width),
            word(&h, 8, width),
            word(&h, 12, width),
            word(&h, 16, width),
            word(&h, 20, width),
        ),
    };
    let iovlen = iovlen as usize;
    if iovlen > IOV_MAX {
        return Err(Copy::Answer(-i64::from(libc::EMSGSIZE)));
    }
    // The name and its length: the pointer and the int after it.
    let mut places = vec![(at, w + 4)];
    let addr = if name == 0 {
        Vec::new()
    } else {
        let b = read(tid, name, (namelen as u32 as usize).min(SOCKADDR_MAX))?;
        places.push((name, b.len()));
        b
    };
    let mut m = Copied {
        addr,
        data: Vec::new(),
        control: Vec::new(),
        flags,
        clipped: false,
        len_at: None,
        addr_at: name,
        places,
    };
    if with_data {
        (m.data, m.clipped) = copy_iov(tid, iov, iovlen, width)?;
        let controllen = controllen as usize;
        if controllen > 0 && width == Width::W32 {
            return Err(Copy::Refuse(
                "control messages of a 32-bit caller are not handled".into(),
            ));
        }
        m.control = read(tid, control, controllen.min(CONTROL_MAX))?;
    }
    Ok(m)
}

/// The data of `iovlen` iovecs at `iov`, up to [`SEND_MAX`] bytes, and
/// whether it was clipped there.
fn copy_iov(tid: u32, iov: u64, iovlen: usize, width: Width) -> Result<(Vec<u8>, bool), Copy> {
    let w = match width {
        Width::W64 => 8,
        Width::W32 => 4,
    };
    let vec = read(tid, iov, iovlen * 2 * w)?;
    let mut data = Vec::new();
    let mut clipped = false;
    for i in 0..iovlen {
        let base = word(&vec, i * 2 * w, width);
        let len = word(&vec, i * 2 * w + w, width) as usize;
        let room = SEND_MAX - data.len();
        if len > room {
            clipped = true;
        }
        data.extend(read(tid, base, len.min(room))?);
        if clipped {
            break;
        }
    }
    Ok((data, clipped))
}
