//! The Unix sockets daemons listen on, wherever they are: read from the
//! kernel's socket table (`/proc/net/unix`, the server's network
//! namespace), not by walking directories, and who holds each (the
//! processes with an fd of it).
//!
//! Confinement: a process of a supervised tree runs under the tree's
//! seccomp filter, stacked on whatever the server itself runs under, and
//! no process can shed a filter. So a holder with more seccomp filters
//! than the server is confined (a tree's own listener: a dev server,
//! started by an earlier command and reparented since); any other holder
//! is not (a root daemon, the SDK's daemon, the server). A daemon that
//! loads seccomp filters of its own counts as confined: the docs say so.
//! (`no_new_privs` is no sign: a root tree with `CAP_SYS_ADMIN` loads its
//! filter without it.) Where the kernel does not report the count
//! (`Seccomp_filters`, Linux 5.9), no holder is confined.
//!
//! Failure modes: an unreadable socket table yields no listeners (logged:
//! the directory walk still hides what lies beneath `/run`); a holder whose
//! status cannot be read is unconfined.

use std::collections::{BTreeMap, BTreeSet};

/// One socket of the table bound to a path: listening (stream, seqpacket)
/// or bound for datagrams.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Listener {
    pub inode: u64,
    pub path: String,
}

/// `__SO_ACCEPTCON`: a listening socket.
const ACCEPTCON: u32 = 0x1_0000;
/// `SOCK_DGRAM`.
const DGRAM: u32 = 2;

/// The listeners of a `/proc/net/unix` text: absolute paths only (an
/// abstract name starts with `@`; a relative one was named from the
/// binder's cwd and cannot be found from here).
pub fn parse(text: &str) -> Vec<Listener> {
    let mut out: Vec<Listener> = text
        .lines()
        .skip(1)
        .filter_map(|line| {
            // Num RefCount Protocol Flags Type St Inode Path: read in place
            // (a socket table holds every connection, thousands under load;
            // most lines end at the flags).
            let mut f = line.split_ascii_whitespace().skip(3);
            let flags = u32::from_str_radix(f.next()?, 16).ok()?;
            let kind = u32::from_str_radix(f.next()?, 16).ok()?;
            if flags & ACCEPTCON == 0 && kind != DGRAM {
                return None;
            }
            let inode = f.nth(1)?.parse().ok()?;
            let path = f.next()?;
            path.starts_with('/').then(|| Listener {
                inode,
                path: path.to_string(),
            })
        })
        .collect();
    out.sort();
    out.dedup();
    out
}

/// The listeners of the server's network namespace.
pub fn read() -> Vec<Listener> {
    match std::fs::read_to_string("/proc/net/unix") {
        Ok(t) => parse(&t),
        Err(e) => {
            tracing::warn!(
                "daemon sockets: /proc/net/unix cannot be read ({e}); only /run is searched"
            );
            Vec::new()
        }
    }
}

/// Who holds a socket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Holders {
    /// At least one holder is not confined (or none was found: the socket
    /// is held where this cannot look, which is no tree).
    Unconfined,
    /// Every holder is a confined process.
    Confined,
}

/// For each of `inodes`, who holds it: one pass over every process's fds.
pub fn holders(inodes: &BTreeSet<u64>) -> BTreeMap<u64, Holders> {
    let ours = own_filters();
    let mut found: BTreeMap<u64, Holders> = BTreeMap::new();
    let Ok(procs) = std::fs::read_dir("/proc") else {
        return inodes.iter().map(|i| (*i, Holders::Unconfined)).collect();
    };
    for p in procs.flatten() {
        let Some(pid) = p.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else {
            continue;
        };
        let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
            continue;
        };
        let mut confined = None;
        for fd in fds.flatten() {
            let Ok(link) = std::fs::read_link(fd.path()) else {
                continue;
            };
            let Some(inode) = socket_inode(&link.to_string_lossy()) else {
                continue;
            };
            if !inodes.contains(&inode) {
                continue;
            }
            let c = *confined.get_or_insert_with(|| is_confined(pid, ours));
            let h = if c {
                Holders::Confined
            } else {
                Holders::Unconfined
            };
            found
                .entry(inode)
                .and_modify(|e| {
                    if h == Holders::Unconfined {
                        *e = h;
                    }
                })
                .or_insert(h);
        }
    }
    inodes
        .iter()
        .map(|i| (*i, found.get(i).copied().unwrap_or(Holders::Unconfined)))
        .collect()
}

/// `socket:[N]` → N.
fn socket_inode(link: &str) -> Option<u64> {
    link.strip_prefix("socket:[")?
        .strip_suffix(']')?
        .parse()
        .ok()
}

/// The server's own seccomp filter count (`None`: the kernel does not say).
fn own_filters() -> Option<u32> {
    filters(&std::fs::read_to_string("/proc/self/status").ok()?)
}

/// More seccomp filters than the server's own.
fn is_confined(pid: u32, ours: Option<u32>) -> bool {
    let Ok(s) = std::fs::read_to_string(format!("/proc/{pid}/status")) else {
        return false;
    };
    match (filters(&s), ours) {
        (Some(theirs), Some(ours)) => theirs > ours,
        _ => false,
    }
}

/// `Seccomp_filters` of a status text.
fn filters(s: &str) -> Option<u32> {
    s.lines()
        .find_map(|l| l.strip_prefix("Seccomp_filters:"))
        .and_then(|v| v.trim().parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listening_and_datagram_sockets_with_absolute_paths_are_listeners() {
        let t = "Num       RefCount Protocol Flags    Type St Inode Path\n\
                 0000: 00000002 00000000 00010000 0001 01 11 /var/lib/incus/unix.socket\n\
                 0000: 00000002 00000000 00010000 0005 01 12 /srv/api.sock\n\
                 0000: 00000002 00000000 00000000 0002 01 13 /srv/dgram.sock\n\
                 0000: 00000003 00000000 00000000 0001 03 14 /var/lib/incus/unix.socket\n\
                 0000: 00000002 00000000 00010000 0001 01 15 @abstract\n\
                 0000: 00000002 00000000 00010000 0001 01 16 relative.sock\n\
                 0000: 00000002 00000000 00000000 0001 03 17\n";
        let l = parse(t);
        let paths: Vec<(u64, &str)> = l.iter().map(|l| (l.inode, l.path.as_str())).collect();
        assert_eq!(
            paths,
            [
                (11, "/var/lib/incus/unix.socket"),
                (12, "/srv/api.sock"),
                (13, "/srv/dgram.sock")
            ]
        );
    }

    #[test]
    fn the_filter_count_is_read() {
        assert_eq!(
            filters("Name:\tx\nNoNewPrivs:\t1\nSeccomp:\t2\nSeccomp_filters:\t3\n"),
            Some(3)
        );
        assert_eq!(filters("NoNewPrivs:\t0\n"), None);
    }

    #[test]
    fn a_socket_this_process_holds_is_found_unconfined() {
        let dir = std::env::temp_dir().join(format!("agentsh-ul-{}", std::process::id()));
        let _ = std::fs::remove_file(&dir);
        let l = std::os::unix::net::UnixListener::bind(&dir).unwrap();
        let found = read()
            .into_iter()
            .find(|x| x.path == dir.to_string_lossy())
            .expect("the listener is in the table");
        let h = holders(&BTreeSet::from([found.inode]));
        assert_eq!(h[&found.inode], Holders::Unconfined);
        drop(l);
        let _ = std::fs::remove_file(&dir);
    }
}
