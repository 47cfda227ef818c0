//! Who sent a decision: the process behind an API request, and whether it
//! belongs to a supervised tree. A TCP peer's socket is found in
//! `/proc/net/tcp{,6}` and mapped to the processes holding it through
//! `/proc/<pid>/fd`.
//!
//! Failure modes: a loopback peer whose socket or process cannot be found is
//! [`Requester::Unknown`], which the API refuses (fail closed).

use super::pending::Approvals;
use std::net::{IpAddr, SocketAddr};

/// Who sent a decision, as far as the server can tell.
#[derive(Debug, Clone, PartialEq)]
pub enum Requester {
    /// A local process outside every supervised tree.
    Operator { uid: u32, pid: u32, comm: String },
    /// A peer on another host (only possible with a non-loopback listen address).
    Remote(SocketAddr),
    /// A process of a supervised tree: refused.
    InTree { pid: u32, why: String },
    /// A local peer whose process cannot be found: refused (fail closed).
    Unknown(String),
}

impl Requester {
    /// The `approver` recorded in the audit event.
    pub fn label(&self) -> String {
        match self {
            Requester::Operator { uid, pid, comm } => format!("uid {uid} pid {pid} ({comm})"),
            Requester::Remote(a) => format!("remote {a}"),
            Requester::InTree { pid, .. } => format!("in-tree pid {pid}"),
            Requester::Unknown(_) => "unknown".into(),
        }
    }
}

impl Approvals {
    /// Identifies the process behind an HTTP request from `peer` to the
    /// server's `server_port`, and whether it belongs to a supervised tree.
    pub fn identify(&self, peer: SocketAddr, server_port: u16) -> Requester {
        let peer = normalize(peer);
        let Some((uid, inode)) = find_tcp_socket(peer, server_port) else {
            if peer.ip().is_loopback() {
                return Requester::Unknown(format!(
                    "no local socket {peer} -> port {server_port} found in /proc/net/tcp"
                ));
            }
            return Requester::Remote(peer);
        };
        let owners = socket_owners(inode);
        if owners.is_empty() {
            return Requester::Unknown(format!("no process holds socket inode {inode}"));
        }
        for &pid in &owners {
            if let Some(why) = self.in_tree(pid) {
                return Requester::InTree { pid, why };
            }
        }
        let pid = owners[0];
        let comm = std::fs::read_to_string(format!("/proc/{pid}/comm"))
            .map(|s| s.trim().to_string())
            .unwrap_or_default();
        Requester::Operator { uid, pid, comm }
    }

    /// Why `pid` counts as part of a supervised tree, if it does.
    fn in_tree(&self, pid: u32) -> Option<String> {
        self.trees.in_tree_or_filtered(pid)
    }
}

fn normalize(a: SocketAddr) -> SocketAddr {
    match a.ip() {
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => SocketAddr::new(IpAddr::V4(v4), a.port()),
            None => a,
        },
        IpAddr::V4(_) => a,
    }
}

/// Parses one `/proc/net/tcp{,6}` address (`0100007F:1F90`).
fn parse_proc_addr(s: &str) -> Option<SocketAddr> {
    let (ip, port) = s.split_once(':')?;
    let port = u16::from_str_radix(port, 16).ok()?;
    let ip = match ip.len() {
        8 => {
            let v = u32::from_str_radix(ip, 16).ok()?;
            IpAddr::from(v.to_ne_bytes())
        }
        32 => {
            let mut b = [0u8; 16];
            for i in 0..4 {
                let w = u32::from_str_radix(&ip[i * 8..i * 8 + 8], 16).ok()?;
                b[i * 4..i * 4 + 4].copy_from_slice(&w.to_ne_bytes());
            }
            IpAddr::from(b)
        }
        _ => return None,
    };
    Some(normalize(SocketAddr::new(ip, port)))
}

/// The socket whose local end is `peer` and remote port is `server_port`:
/// (owner uid, inode).
fn find_tcp_socket(peer: SocketAddr, server_port: u16) -> Option<(u32, u64)> {
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let Ok(text) = std::fs::read_to_string(table) else {
            continue;
        };
        if let Some(hit) = find_in_table(&text, peer, server_port) {
            return Some(hit);
        }
    }
    None
}

fn find_in_table(text: &str, peer: SocketAddr, server_port: u16) -> Option<(u32, u64)> {
    text.lines().skip(1).find_map(|line| {
        let f: Vec<&str> = line.split_ascii_whitespace().collect();
        let local = parse_proc_addr(f.get(1)?)?;
        let remote = parse_proc_addr(f.get(2)?)?;
        if local != peer || remote.port() != server_port {
            return None;
        }
        let uid = f.get(7)?.parse().ok()?;
        let inode = f.get(9)?.parse().ok()?;
        (inode != 0).then_some((uid, inode))
    })
}

/// Every process that holds socket `inode` open.
fn socket_owners(inode: u64) -> Vec<u32> {
    let want = format!("socket:[{inode}]");
    let mut owners = Vec::new();
    let Ok(procs) = std::fs::read_dir("/proc") else {
        return owners;
    };
    for p in procs.flatten() {
        let Some(pid) = p.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        let Ok(fds) = std::fs::read_dir(p.path().join("fd")) else {
            continue;
        };
        if fds
            .flatten()
            .any(|fd| std::fs::read_link(fd.path()).is_ok_and(|l| l.as_os_str() == want.as_str()))
        {
            owners.push(pid);
        }
    }
    owners
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_proc_net_addresses() {
        assert_eq!(
            parse_proc_addr("0100007F:1F90"),
            Some("127.0.0.1:8080".parse().unwrap())
        );
        assert_eq!(
            parse_proc_addr("00000000000000000000000001000000:0016"),
            Some("[::1]:22".parse().unwrap())
        );
        // ::ffff:127.0.0.1 becomes 127.0.0.1
        assert_eq!(
            parse_proc_addr("0000000000000000FFFF00000100007F:0050"),
            Some("127.0.0.1:80".parse().unwrap())
        );
        assert_eq!(parse_proc_addr("zz:1"), None);
    }

    #[test]
    fn finds_the_client_socket_of_a_connection() {
        let table = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n\
   0: 0100007F:46A0 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 111 1 0 100 0 0 10 0\n\
   1: 0100007F:46A0 0100007F:D431 01 00000000:00000000 00:00000000 00000000     0        0 222 1 0 20 4 30 10 -1\n\
   2: 0100007F:D431 0100007F:46A0 01 00000000:00000000 00:00000000 00000000  1000        0 333 1 0 20 4 30 10 -1\n";
        let peer: SocketAddr = "127.0.0.1:54321".parse().unwrap();
        assert_eq!(find_in_table(table, peer, 18080), Some((1000, 333)));
        assert_eq!(find_in_table(table, peer, 18081), None);
    }
}
