//! DNS messages, as far as the stub needs them: the question of a query,
//! a refusal built from it, and the addresses (with their TTLs) in an
//! answer.
//!
//! Failure modes: a message that is not a query with exactly one question,
//! or whose names run past the end, loop or use reserved label types, is a
//! [`Malformed`] naming what was wrong; nothing here panics on any input.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Why a message could not be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Malformed(pub String);

/// The question of a query.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Question {
    pub id: u16,
    /// Lowercase, dot-separated, without the root's trailing dot.
    pub name: String,
    pub qtype: u16,
    /// Where the question ends in the message.
    end: usize,
}

/// `A`, `AAAA`, or the number.
pub fn type_name(t: u16) -> String {
    match t {
        1 => "A".into(),
        28 => "AAAA".into(),
        5 => "CNAME".into(),
        15 => "MX".into(),
        16 => "TXT".into(),
        33 => "SRV".into(),
        65 => "HTTPS".into(),
        12 => "PTR".into(),
        2 => "NS".into(),
        6 => "SOA".into(),
        n => format!("TYPE{n}"),
    }
}

fn u16_at(m: &[u8], at: usize) -> Result<u16, Malformed> {
    m.get(at..at + 2)
        .map(|b| u16::from_be_bytes([b[0], b[1]]))
        .ok_or_else(|| {
            Malformed(format!(
                "the message ends at byte {} inside a field",
                m.len()
            ))
        })
}

/// Reads a name at `at`; returns it and where it ends in the message (after
/// the first pointer, when compressed). At most 128 labels and 255 bytes;
/// a pointer must point backwards.
fn name_at(m: &[u8], mut at: usize) -> Result<(String, usize), Malformed> {
    let mut labels: Vec<String> = Vec::new();
    let mut end = None;
    let mut total = 0usize;
    let mut jumps = 0;
    loop {
        let len = *m
            .get(at)
            .ok_or_else(|| Malformed("a name runs past the end of the message".into()))?
            as usize;
        match len & 0xc0 {
            0x00 => {
                if len == 0 {
                    if end.is_none() {
                        end = Some(at + 1);
                    }
                    break;
                }
                let label = m
                    .get(at + 1..at + 1 + len)
                    .ok_or_else(|| Malformed("a label runs past the end of the message".into()))?;
                total += len + 1;
                if total > 255 || labels.len() >= 127 {
                    return Err(Malformed("a name longer than 255 bytes".into()));
                }
                labels.push(
                    label
                        .iter()
                        .map(|&b| {
                            let c = (b as char).to_ascii_lowercase();
                            if c.is_ascii_graphic() && c != '.' {
                                c.to_string()
                            } else {
                                format!("\\{b:03}")
                            }
                        })
                        .collect(),
                );
                at += 1 + len;
            }
            0xc0 => {
                let target = usize::from(u16_at(m, at)? & 0x3fff);
                if end.is_none() {
                    end = Some(at + 2);
                }
                jumps += 1;
                if target >= at || jumps > 64 {
                    return Err(Malformed(
                        "a compression pointer that does not point back".into(),
                    ));
                }
                at = target;
            }
            _ => return Err(Malformed("a label of a reserved type".into())),
        }
    }
    Ok((labels.join("."), end.unwrap_or(at + 1)))
}

/// The question of a query: one question, QR clear, opcode QUERY.
pub fn question(m: &[u8]) -> Result<Question, Malformed> {
    if m.len() < 12 {
        return Err(Malformed(format!(
            "{} bytes: shorter than a DNS header (12)",
            m.len()
        )));
    }
    let id = u16_at(m, 0)?;
    let flags = u16_at(m, 2)?;
    if flags & 0x8000 != 0 {
        return Err(Malformed("a response where a query was expected".into()));
    }
    let opcode = (flags >> 11) & 0xf;
    if opcode != 0 {
        return Err(Malformed(format!("opcode {opcode} (only QUERY is served)")));
    }
    let qd = u16_at(m, 4)?;
    if qd != 1 {
        return Err(Malformed(format!("{qd} questions (one is served)")));
    }
    // A name in a question is never compressed (nothing precedes it).
    if m.get(12).is_none_or(|b| b & 0xc0 != 0) {
        return Err(Malformed("no question, or a compressed one".into()));
    }
    let (name, at) = name_at(m, 12)?;
    let qtype = u16_at(m, at)?;
    let _class = u16_at(m, at + 2)?;
    Ok(Question {
        id,
        name,
        qtype,
        end: at + 4,
    })
}

/// A response to `query` (whose question is `q`) with `rcode` and no
/// records: REFUSED (5), SERVFAIL (2), FORMERR (1).
pub fn reply(query: &[u8], q: &Question, rcode: u8) -> Vec<u8> {
    let mut r = query[..q.end].to_vec();
    // QR, the query's opcode and RD, RA; the rcode.
    let rd = query[2] & 0x01;
    r[2] = 0x80 | rd;
    r[3] = 0x80 | (rcode & 0x0f);
    // One question, nothing else (an EDNS record of the query is dropped).
    r[4..12].copy_from_slice(&[0, 1, 0, 0, 0, 0, 0, 0]);
    r
}

/// FORMERR for a message whose header could be read but not its question.
pub fn formerr(query: &[u8]) -> Option<Vec<u8>> {
    let h = query.get(..12)?;
    let mut r = h.to_vec();
    r[2] = 0x80 | (h[2] & 0x01);
    r[3] = 0x80 | 1;
    r[4..12].fill(0);
    Some(r)
}

/// The response's id and the addresses of its A and AAAA answers, with
/// their TTLs in seconds.
pub fn answers(m: &[u8]) -> Result<(u16, Vec<(IpAddr, u32)>), Malformed> {
    if m.len() < 12 {
        return Err(Malformed("a response shorter than a DNS header".into()));
    }
    let id = u16_at(m, 0)?;
    let qd = u16_at(m, 4)?;
    let an = u16_at(m, 6)?;
    let mut at = 12;
    for _ in 0..qd {
        let (_, end) = name_at(m, at)?;
        at = end + 4;
    }
    let mut out = Vec::new();
    for _ in 0..an {
        let (_, end) = name_at(m, at)?;
        let rtype = u16_at(m, end)?;
        let ttl_hi = u16_at(m, end + 4)?;
        let ttl_lo = u16_at(m, end + 6)?;
        let ttl = (u32::from(ttl_hi) << 16) | u32::from(ttl_lo);
        let rdlen = usize::from(u16_at(m, end + 8)?);
        let rdata = m
            .get(end + 10..end + 10 + rdlen)
            .ok_or_else(|| Malformed("a record runs past the end of the message".into()))?;
        match (rtype, rdlen) {
            (1, 4) => out.push((
                IpAddr::V4(Ipv4Addr::new(rdata[0], rdata[1], rdata[2], rdata[3])),
                ttl,
            )),
            (28, 16) => {
                let mut b = [0u8; 16];
                b.copy_from_slice(rdata);
                out.push((IpAddr::V6(Ipv6Addr::from(b)), ttl));
            }
            _ => {}
        }
        at = end + 10 + rdlen;
    }
    Ok((id, out))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn query(name: &str, qtype: u16) -> Vec<u8> {
        let mut m = vec![0x12, 0x34, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0];
        for l in name.split('.') {
            m.push(l.len() as u8);
            m.extend_from_slice(l.as_bytes());
        }
        m.push(0);
        m.extend_from_slice(&qtype.to_be_bytes());
        m.extend_from_slice(&[0, 1]);
        m
    }

    #[test]
    fn a_query_reads_and_refuses() {
        let m = query("Pypi.ORG", 1);
        let q = question(&m).unwrap();
        assert_eq!((q.id, q.name.as_str(), q.qtype), (0x1234, "pypi.org", 1));
        let r = reply(&m, &q, 5);
        assert_eq!(r[3] & 0x0f, 5);
        assert_eq!(r[2] & 0x80, 0x80);
        assert_eq!(&r[12..], &m[12..]);
    }

    #[test]
    fn malformed_queries_are_errors_not_panics() {
        let good = query("a.example", 28);
        // Every truncation, and every single-byte corruption, is read or
        // refused without a panic.
        for n in 0..good.len() {
            let _ = question(&good[..n]);
        }
        for i in 0..good.len() {
            for v in [0u8, 0x3f, 0x40, 0xc0, 0xff] {
                let mut m = good.clone();
                m[i] = v;
                let _ = question(&m);
                let _ = answers(&m);
            }
        }
        assert!(question(&good[..11]).is_err());
        let mut looped = good.clone();
        looped[12] = 0xc0;
        looped[13] = 12;
        assert!(question(&looped).is_err());
    }

    #[test]
    fn answers_give_addresses_through_compressed_names() {
        let mut m = query("x.test", 1);
        m[2] = 0x81;
        m[3] = 0x80;
        m[7] = 2; // two answers
                  // x.test A 10.1.2.3 ttl 300, via a pointer to the question's name.
        m.extend_from_slice(&[0xc0, 12, 0, 1, 0, 1, 0, 0, 1, 44, 0, 4, 10, 1, 2, 3]);
        // x.test AAAA ::1 ttl 7
        m.extend_from_slice(&[0xc0, 12, 0, 28, 0, 1, 0, 0, 0, 7, 0, 16]);
        m.extend_from_slice(&Ipv6Addr::LOCALHOST.octets());
        let (id, got) = answers(&m).unwrap();
        assert_eq!(id, 0x1234);
        assert_eq!(
            got,
            vec![
                (IpAddr::V4(Ipv4Addr::new(10, 1, 2, 3)), 300),
                (IpAddr::V6(Ipv6Addr::LOCALHOST), 7)
            ]
        );
    }
}
