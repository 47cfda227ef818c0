//! A DNS upstream for tests of agentsh's DNS stub (`egress.dns: stub`).

// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

use std::io::{Read, Write};
use std::net::{Ipv4Addr, TcpListener, UdpSocket};
use std::sync::{Arc, Mutex};

/// A test's upstream resolver on 127.0.0.1 (UDP and TCP, one port): names
/// ending in its suffix get one A record (its address, TTL 60), others
/// NXDOMAIN; every name asked is logged, in order.
pub struct Upstream {
    pub port: u16,
    asked: Arc<Mutex<Vec<String>>>,
}

fn qname(m: &[u8]) -> Option<(String, usize)> {
    let mut at = 12;
    let mut labels = Vec::new();
    loop {
        let len = *m.get(at)? as usize;
        if len == 0 {
            return Some((labels.join(".").to_ascii_lowercase(), at + 1));
        }
        labels.push(String::from_utf8_lossy(m.get(at + 1..at + 1 + len)?).to_string());
        at += 1 + len;
    }
}

/// The answer to query `q`: a name ending in `suffix` gets `addr` (for
/// A; no record for other types), anything else NXDOMAIN.
fn respond(q: &[u8], suffix: &str, addr: Ipv4Addr) -> Option<Vec<u8>> {
    let (name, end) = qname(q)?;
    let qtype = u16::from_be_bytes([*q.get(end)?, *q.get(end + 1)?]);
    let mut r = q.get(..end + 4)?.to_vec();
    r[2] = 0x81;
    r[4..12].copy_from_slice(&[0, 1, 0, 0, 0, 0, 0, 0]);
    if name.ends_with(suffix) {
        r[3] = 0x80;
        if qtype == 1 {
            r[7] = 1;
            r.extend_from_slice(&[0xc0, 12, 0, 1, 0, 1, 0, 0, 0, 60, 0, 4]);
            r.extend_from_slice(&addr.octets());
        }
    } else {
        r[3] = 0x83;
    }
    Some(r)
}

impl Upstream {
    pub fn start(suffix: &str, addr: Ipv4Addr) -> Upstream {
        // One port for both: a free UDP port whose TCP twin may be taken,
        // so try again until both are ours.
        let (udp, tcp, port) = (0..100)
            .find_map(|_| {
                let udp = UdpSocket::bind((Ipv4Addr::LOCALHOST, 0)).ok()?;
                let port = udp.local_addr().ok()?.port();
                let tcp = TcpListener::bind((Ipv4Addr::LOCALHOST, port)).ok()?;
                Some((udp, tcp, port))
            })
            .expect("a port free for both UDP and TCP");
        let asked = Arc::new(Mutex::new(Vec::new()));
        let log = asked.clone();
        let (sfx, sfx2) = (suffix.to_string(), suffix.to_string());
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok((n, from)) = udp.recv_from(&mut buf) {
                if let Some((name, _)) = qname(&buf[..n]) {
                    log.lock().unwrap().push(name);
                }
                if let Some(r) = respond(&buf[..n], &sfx, addr) {
                    let _ = udp.send_to(&r, from);
                }
            }
        });
        let log = asked.clone();
        std::thread::spawn(move || {
            for mut c in tcp.incoming().flatten() {
                let mut len = [0u8; 2];
                if c.read_exact(&mut len).is_err() {
                    continue;
                }
                let mut q = vec![0u8; usize::from(u16::from_be_bytes(len))];
                if c.read_exact(&mut q).is_err() {
                    continue;
                }
                if let Some((name, _)) = qname(&q) {
                    log.lock().unwrap().push(name);
                }
                if let Some(r) = respond(&q, &sfx2, addr) {
                    let mut out = (r.len() as u16).to_be_bytes().to_vec();
                    out.extend_from_slice(&r);
                    let _ = c.write_all(&out);
                }
            }
        });
        Upstream { port, asked }
    }

    /// Every name asked so far.
    pub fn asked(&self) -> Vec<String> {
        self.asked.lock().unwrap().clone()
    }
}
