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

/// The listeners of the server's network namespace: from the kernel's
/// socket diagnostics ([`diag`]), which hand over only listening and
/// unconnected sockets, so another user holding thousands of connections
/// does not make every wrap-init read and parse them all; else (a kernel
/// or sandbox without `NETLINK_SOCK_DIAG`: gVisor) from `/proc/net/unix`.
pub fn read() -> Vec<Listener> {
    match diag::listeners() {
        Ok(l) => return l,
        Err(e) => tracing::debug!(
            "daemon sockets: socket diagnostics unavailable ({e}); reading /proc/net/unix"
        ),
    }
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

/// The socket table through netlink (`NETLINK_SOCK_DIAG`,
/// `SOCK_DIAG_BY_FAMILY` for `AF_UNIX`, as `ss -x` asks): the kernel
/// filters by state (listening, or unconnected) before a byte is copied.
/// A connected datagram socket is left out where `/proc/net/unix` listed
/// it: it takes datagrams from its peer only, so nothing of a tree can
/// reach it through its path.
pub mod diag {
    use crate::policy::unix_listeners::{Listener, DGRAM};
    use std::io;
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

    const SOCK_DIAG_BY_FAMILY: u16 = 20;
    const NLMSG_ERROR: u16 = 2;
    const NLMSG_DONE: u16 = 3;
    const UDIAG_SHOW_NAME: u32 = 1;
    const UNIX_DIAG_NAME: u16 = 0;
    const TCP_CLOSE: u8 = 7;
    const TCP_LISTEN: u8 = 10;
    /// `struct nlmsghdr`, `struct unix_diag_msg`.
    const NLMSG_HDR: usize = 16;
    const DIAG_MSG: usize = 16;

    fn align(n: usize) -> usize {
        (n + 3) & !3
    }

    /// The dump request: every listening or unconnected `AF_UNIX` socket,
    /// with its name.
    fn request() -> [u8; 40] {
        let mut r = [0u8; 40];
        r[0..4].copy_from_slice(&40u32.to_ne_bytes());
        r[4..6].copy_from_slice(&SOCK_DIAG_BY_FAMILY.to_ne_bytes());
        let flags = (libc::NLM_F_REQUEST | libc::NLM_F_DUMP) as u16;
        r[6..8].copy_from_slice(&flags.to_ne_bytes());
        r[8..12].copy_from_slice(&1u32.to_ne_bytes());
        r[16] = libc::AF_UNIX as u8;
        let states = (1u32 << TCP_LISTEN) | (1u32 << TCP_CLOSE);
        r[20..24].copy_from_slice(&states.to_ne_bytes());
        r[28..32].copy_from_slice(&UDIAG_SHOW_NAME.to_ne_bytes());
        r
    }

    fn u16_at(b: &[u8], at: usize) -> Option<u16> {
        Some(u16::from_ne_bytes(b.get(at..at + 2)?.try_into().ok()?))
    }

    fn u32_at(b: &[u8], at: usize) -> Option<u32> {
        Some(u32::from_ne_bytes(b.get(at..at + 4)?.try_into().ok()?))
    }

    /// One `unix_diag_msg` (after its netlink header): the listener it
    /// names, if it is one bound to an absolute path.
    ///
    /// # Errors
    /// A message cut short, an attribute that overruns it, a name that is
    /// not UTF-8: the whole table is then read another way, never a
    /// listener silently left out (it would go unhidden).
    pub fn listener(msg: &[u8]) -> Result<Option<Listener>, &'static str> {
        let short = "a socket diagnostics message cut short";
        let (kind, state) = (*msg.get(1).ok_or(short)?, *msg.get(2).ok_or(short)?);
        let inode = u64::from(u32_at(msg, 4).ok_or(short)?);
        if state != TCP_LISTEN && u32::from(kind) != DGRAM {
            return Ok(None);
        }
        let mut at = DIAG_MSG;
        while let (Some(len), Some(ty)) = (u16_at(msg, at), u16_at(msg, at + 2)) {
            let len = usize::from(len);
            if len < 4 || at + len > msg.len() {
                return Err("a socket diagnostics attribute overruns its message");
            }
            if ty == UNIX_DIAG_NAME {
                let name = &msg[at + 4..at + len];
                let end = name.iter().position(|b| *b == 0).unwrap_or(name.len());
                let path = std::str::from_utf8(&name[..end])
                    .map_err(|_| "a socket's name is not UTF-8")?;
                return Ok(path.starts_with('/').then(|| Listener {
                    inode,
                    path: path.to_string(),
                }));
            }
            at += align(len);
        }
        Ok(None)
    }

    /// The listeners, sorted.
    ///
    /// # Errors
    /// The kernel refuses the netlink socket or the dump, or answers
    /// something malformed.
    pub fn listeners() -> io::Result<Vec<Listener>> {
        // SAFETY: plain syscall; the fd is owned at once.
        let fd = unsafe {
            libc::socket(
                libc::AF_NETLINK,
                libc::SOCK_RAW | libc::SOCK_CLOEXEC,
                libc::NETLINK_SOCK_DIAG,
            )
        };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: a fresh fd nobody else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        agentsh_proto::seqpacket::set_timeouts(
            std::os::fd::AsFd::as_fd(&fd),
            std::time::Duration::from_secs(2),
        )?;
        let req = request();
        // SAFETY: req is valid for its length; a netlink socket sends to
        // the kernel by default.
        if unsafe { libc::send(fd.as_raw_fd(), req.as_ptr().cast(), req.len(), 0) } < 0 {
            return Err(io::Error::last_os_error());
        }
        let mut out = Vec::new();
        let mut buf = vec![0u8; 32 * 1024];
        let bad = |what: &str| io::Error::new(io::ErrorKind::InvalidData, what.to_string());
        loop {
            // SAFETY: buf is valid for its length.
            let n = unsafe { libc::recv(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), 0) };
            if n < 0 {
                return Err(io::Error::last_os_error());
            }
            let b = &buf[..n as usize];
            if b.is_empty() {
                return Err(bad("socket diagnostics ended without NLMSG_DONE"));
            }
            let mut at = 0;
            while at + NLMSG_HDR <= b.len() {
                let len = u32_at(b, at).ok_or_else(|| bad("short netlink header"))? as usize;
                let ty = u16_at(b, at + 4).ok_or_else(|| bad("short netlink header"))?;
                if len < NLMSG_HDR || at + len > b.len() {
                    return Err(bad("a netlink message overruns its datagram"));
                }
                let body = &b[at + NLMSG_HDR..at + len];
                match ty {
                    NLMSG_DONE => {
                        out.sort();
                        out.dedup();
                        return Ok(out);
                    }
                    NLMSG_ERROR => {
                        let errno = u32_at(body, 0).map_or(libc::EIO, |e| -(e as i32));
                        return Err(io::Error::from_raw_os_error(errno));
                    }
                    SOCK_DIAG_BY_FAMILY => out.extend(listener(body).map_err(bad)?),
                    _ => {}
                }
                at += align(len);
            }
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
    fn the_diagnostics_list_listeners_not_connections() {
        use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
        use std::os::linux::net::SocketAddrExt;
        let dir = std::env::temp_dir().join(format!("agentsh-diag-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("l.sock");
        let l = agentsh_proto::seqpacket::bind_listen(&path, 64).unwrap();
        // Connections (both ends), by the hundred: none is a listener.
        let mut held = Vec::new();
        for _ in 0..200 {
            held.push(
                agentsh_proto::seqpacket::connect(&path, std::time::Duration::from_secs(1))
                    .unwrap(),
            );
            // SAFETY: accept4 on our listener; no address wanted.
            let a = unsafe {
                libc::accept4(
                    l.as_raw_fd(),
                    std::ptr::null_mut(),
                    std::ptr::null_mut(),
                    libc::SOCK_CLOEXEC,
                )
            };
            assert!(a >= 0);
            // SAFETY: a fresh fd nobody else owns.
            held.push(unsafe { OwnedFd::from_raw_fd(a) });
        }
        let want = path.to_string_lossy().into_owned();
        let by_diag = diag::listeners().unwrap();
        let ours: Vec<&Listener> = by_diag.iter().filter(|l| l.path == want).collect();
        assert_eq!(ours.len(), 1, "{by_diag:?}");
        // The same listener, inode and all, as /proc/net/unix says.
        let by_proc = parse(&std::fs::read_to_string("/proc/net/unix").unwrap());
        assert!(by_proc.contains(ours[0]), "{by_proc:?}");
        // A bound datagram socket is one too; an abstract name is not.
        let d = std::os::unix::net::UnixDatagram::bind(dir.join("d.sock")).unwrap();
        let a = std::os::unix::net::UnixListener::bind_addr(
            &std::os::unix::net::SocketAddr::from_abstract_name(b"agentsh-diag-test").unwrap(),
        )
        .unwrap();
        let again = diag::listeners().unwrap();
        assert!(
            again.iter().any(|l| l.path.ends_with("/d.sock")),
            "{again:?}"
        );
        assert!(
            !again.iter().any(|l| l.path.contains("agentsh-diag-test")),
            "{again:?}"
        );
        assert!(again.len() < by_proc.len() + 3, "{again:?}");
        drop((d, a, held));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_malformed_diagnostics_message_is_an_error_not_a_missing_listener() {
        // A listening socket whose name attribute overruns the message.
        let mut m = vec![1u8, 5, 10, 0, 7, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0];
        m.extend_from_slice(&200u16.to_ne_bytes());
        m.extend_from_slice(&0u16.to_ne_bytes());
        m.extend_from_slice(b"/x\0\0");
        assert!(diag::listener(&m).is_err());
        // Cut short before its inode.
        assert!(diag::listener(&m[..6]).is_err());
        // The same, well formed.
        let n = m.len() - 16;
        m[16..18].copy_from_slice(&(n as u16).to_ne_bytes());
        assert_eq!(
            diag::listener(&m),
            Ok(Some(Listener {
                inode: 7,
                path: "/x".into()
            }))
        );
        // A name that is not UTF-8.
        m[21] = 0xff;
        assert!(diag::listener(&m).is_err());
        // A connected stream socket is none.
        m[21] = 0;
        m[2] = 1;
        assert_eq!(diag::listener(&m), Ok(None));
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
