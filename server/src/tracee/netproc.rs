//! A caller's socket as `/proc` shows it, where the supervisor cannot take
//! the socket itself (`pidfd_getfd` refused: Docker's default seccomp
//! profile without `CAP_SYS_PTRACE`): its inode from the caller's fd table,
//! its flags from `fdinfo`, its family and transport from sockfs
//! (`system.sockprotoname`), whether it has a local port from the tables of
//! the caller's network namespace (`/proc/TID/net/{tcp,tcp6,udp,udp6}`).
//!
//! The ptrace backend's in-place judging asks less of it, and asks where
//! sockfs has no `system.sockprotoname` (gVisor: `EOPNOTSUPP`):
//! [`transport_of`] names the socket's transport from sockfs where it can,
//! else by finding its inode in `/proc/TID/net/{tcp,tcp6,udp,udp6,unix}`
//! (gVisor lists every socket there, unbound ones too, but for UDP over
//! IPv6: its `udp6` is a header only, measured in runsc 20221219 with
//! both `--network=host` and `none`), with the local address a table shows
//! (what the DNS stub knows a tree's socket by).
//!
//! Failure modes: a file that cannot be read is an error (the caller
//! refuses); a protocol other than TCP, UDP or Unix is [`Kind::Unknown`]
//! ([`Transport::Other`]); a socket in no table where sockfs cannot name
//! it is [`Transport::Unlisted`] (the caller decides what that can be).

use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

/// What kind of socket an inode is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Unix,
    Inet {
        domain: i32,
        udp: bool,
        /// It has a local port (bound, or connected before).
        bound: bool,
        /// Its TCP state in the table (1 established, 2 SYN sent; 0: not
        /// in the table).
        state: u8,
    },
    Unknown,
}

/// One socket of the caller.
#[derive(Debug, Clone, Copy)]
pub struct SockInfo {
    pub inode: u64,
    pub kind: Kind,
    pub cloexec: bool,
    pub nonblock: bool,
}

/// The socket inode at the caller's fd `fd` (`None`: not a socket).
///
/// # Errors
/// EBADF when the fd is not open; others when `/proc` cannot be read.
pub fn inode_at(tid: u32, fd: i32) -> io::Result<Option<u64>> {
    let link = match std::fs::read_link(format!("/proc/{tid}/fd/{fd}")) {
        Ok(l) => l,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            return Err(io::Error::from_raw_os_error(libc::EBADF))
        }
        Err(e) => return Err(e),
    };
    Ok(link
        .to_str()
        .and_then(|l| l.strip_prefix("socket:["))
        .and_then(|l| l.strip_suffix(']'))
        .and_then(|n| n.parse().ok()))
}

/// The socket at the caller's fd `fd` (`None`: not a socket).
///
/// # Errors
/// See [`inode_at`].
pub fn socket_of(tid: u32, fd: i32) -> io::Result<Option<SockInfo>> {
    let Some(inode) = inode_at(tid, fd)? else {
        return Ok(None);
    };
    let info = std::fs::read_to_string(format!("/proc/{tid}/fdinfo/{fd}"))?;
    let flags = info
        .lines()
        .find_map(|l| l.strip_prefix("flags:"))
        .and_then(|v| i64::from_str_radix(v.trim(), 8).ok())
        .ok_or_else(|| io::Error::other("fdinfo has no flags"))?;
    // The socket's protocol, from sockfs itself (a socket that is neither
    // bound nor connected is in none of /proc/net's tables).
    let proto = protocol_name(&format!("/proc/{tid}/fd/{fd}"))?;
    let (domain, udp, table) = match proto.as_str() {
        "TCP" => (libc::AF_INET, false, "tcp"),
        "TCPv6" => (libc::AF_INET6, false, "tcp6"),
        "UDP" => (libc::AF_INET, true, "udp"),
        "UDPv6" => (libc::AF_INET6, true, "udp6"),
        "UNIX" | "UNIX-STREAM" => {
            return Ok(Some(SockInfo {
                inode,
                kind: Kind::Unix,
                cloexec: flags & i64::from(libc::O_CLOEXEC) != 0,
                nonblock: flags & i64::from(libc::O_NONBLOCK) != 0,
            }))
        }
        _ => (0, false, ""),
    };
    let kind = if table.is_empty() {
        Kind::Unknown
    } else {
        // Bound or connected sockets are in the table, with their port.
        let (bound, state) = match std::fs::read_to_string(format!("/proc/{tid}/net/{table}")) {
            Ok(text) => inet_entry(&text, inode).unwrap_or((false, 0)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => (false, 0),
            Err(e) => return Err(e),
        };
        Kind::Inet {
            domain,
            udp,
            bound,
            state,
        }
    };
    Ok(Some(SockInfo {
        inode,
        kind,
        cloexec: flags & i64::from(libc::O_CLOEXEC) != 0,
        nonblock: flags & i64::from(libc::O_NONBLOCK) != 0,
    }))
}

/// In a tcp/udp table: whether the socket `inode` is there, and then
/// whether it has a local port, and its state (1 established, 2 SYN sent,
/// ...). Pure.
fn inet_entry(table: &str, inode: u64) -> Option<(bool, u8)> {
    table.lines().skip(1).find_map(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        (f.get(9)?.parse::<u64>().ok()? == inode).then(|| {
            let bound = f[1]
                .rsplit(':')
                .next()
                .and_then(|p| u16::from_str_radix(p, 16).ok())
                .is_some_and(|p| p != 0);
            let state = f
                .get(3)
                .and_then(|s| u8::from_str_radix(s, 16).ok())
                .unwrap_or(0);
            (bound, state)
        })
    })
}

/// The `system.sockprotoname` of the socket behind `path` (TCP, TCPv6,
/// UDP, UDPv6, UNIX, ...).
fn protocol_name(path: &str) -> io::Result<String> {
    let c = std::ffi::CString::new(path).map_err(io::Error::other)?;
    let mut buf = [0u8; 64];
    // SAFETY: valid C strings and a buffer of the length given.
    let n = unsafe {
        libc::getxattr(
            c.as_ptr(),
            c"system.sockprotoname".as_ptr(),
            buf.as_mut_ptr().cast(),
            buf.len(),
        )
    };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    let name = &buf[..n as usize];
    let name = name.split(|b| *b == 0).next().unwrap_or(name);
    Ok(String::from_utf8_lossy(name).into_owned())
}

/// A socket's transport, as [`transport_of`] tells it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    Unix,
    /// TCP over `domain` (`AF_INET`, `AF_INET6`).
    Tcp(i32),
    /// UDP over `domain`.
    Udp(i32),
    /// Named by sockfs, and none of the above (netlink, packet, ...).
    Other,
    /// sockfs cannot name it and no table lists it.
    Unlisted,
}

/// A socket as [`transport_of`] found it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Seen {
    pub inode: u64,
    pub transport: Transport,
    /// Its local address where a table lists one (a port of 0: none yet).
    pub local: Option<SocketAddr>,
}

/// The transport of the socket at the caller's fd `fd` (`None`: not a
/// socket): from sockfs (`system.sockprotoname`), or, where sockfs cannot
/// say (gVisor), from the tables of the caller's network namespace.
///
/// # Errors
/// EBADF when the fd is not open; others when `/proc` cannot be read.
pub fn transport_of(tid: u32, fd: i32) -> io::Result<Option<Seen>> {
    let Some(inode) = inode_at(tid, fd)? else {
        return Ok(None);
    };
    let named = match protocol_name(&format!("/proc/{tid}/fd/{fd}")) {
        Ok(name) => Some(name),
        Err(e) if matches!(e.raw_os_error(), Some(libc::EOPNOTSUPP | libc::ENODATA)) => None,
        Err(e) => return Err(e),
    };
    let by_name = named.as_deref().map(|n| match n {
        "TCP" => (Transport::Tcp(libc::AF_INET), "tcp"),
        "TCPv6" => (Transport::Tcp(libc::AF_INET6), "tcp6"),
        "UDP" => (Transport::Udp(libc::AF_INET), "udp"),
        "UDPv6" => (Transport::Udp(libc::AF_INET6), "udp6"),
        "UNIX" | "UNIX-STREAM" => (Transport::Unix, ""),
        _ => (Transport::Other, ""),
    });
    let tables: &[(Transport, &str)] = match &by_name {
        Some((_, "")) => &[],
        Some(one) => std::slice::from_ref(one),
        None => &TABLES,
    };
    for (transport, table) in tables {
        let text = match std::fs::read_to_string(format!("/proc/{tid}/net/{table}")) {
            Ok(t) => t,
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            Err(e) => return Err(e),
        };
        let found = if *transport == Transport::Unix {
            unix_listed(&text, inode).then_some(None)
        } else {
            local_in(&text, inode).map(Some)
        };
        if let Some(local) = found {
            return Ok(Some(Seen {
                inode,
                transport: *transport,
                local,
            }));
        }
    }
    Ok(Some(Seen {
        inode,
        transport: by_name.map_or(Transport::Unlisted, |(t, _)| t),
        local: None,
    }))
}

/// Where [`transport_of`] looks when sockfs cannot name a socket.
const TABLES: [(Transport, &str); 5] = [
    (Transport::Tcp(libc::AF_INET), "tcp"),
    (Transport::Tcp(libc::AF_INET6), "tcp6"),
    (Transport::Udp(libc::AF_INET), "udp"),
    (Transport::Udp(libc::AF_INET6), "udp6"),
    (Transport::Unix, "unix"),
];

/// In a tcp/udp table: the local address of the socket `inode`, if the
/// table lists it. Pure.
fn local_in(table: &str, inode: u64) -> Option<SocketAddr> {
    table.lines().skip(1).find_map(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        (f.get(9)?.parse::<u64>().ok()? == inode).then(|| table_addr(f[1]))?
    })
}

/// In the unix table: whether it lists the socket `inode`. Pure.
fn unix_listed(table: &str, inode: u64) -> bool {
    table.lines().skip(1).any(|l| {
        l.split_whitespace()
            .nth(6)
            .and_then(|i| i.parse::<u64>().ok())
            == Some(inode)
    })
}

/// A table's `ADDR:PORT` (the address as the kernel's 32-bit words in
/// memory order, in hex; the port in hex). Pure.
fn table_addr(field: &str) -> Option<SocketAddr> {
    let (addr, port) = field.split_once(':')?;
    let port = u16::from_str_radix(port, 16).ok()?;
    let mut bytes = Vec::with_capacity(16);
    for i in (0..addr.len()).step_by(8) {
        let word = u32::from_str_radix(addr.get(i..i + 8)?, 16).ok()?;
        bytes.extend_from_slice(&word.to_ne_bytes());
    }
    let ip = match bytes.len() {
        4 => IpAddr::V4(Ipv4Addr::new(bytes[0], bytes[1], bytes[2], bytes[3])),
        16 => {
            let mut a = [0u8; 16];
            a.copy_from_slice(&bytes);
            IpAddr::V6(Ipv6Addr::from(a))
        }
        _ => return None,
    };
    Some(SocketAddr::new(ip, port))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Lines as gVisor (runsc 20221219) writes them: unbound sockets too.
    #[test]
    fn gvisor_tables_give_the_local_address() {
        let tcp = "    sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n     6: 0100007F:8339 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0        7 1 0000000000000000 0 0 0 0 -1\n     0: 00000000:0000 00000000:0000 07 00000000:00000000 00:00000000 00000000     0        0        1 1 0000000000000000 0 0 0 0 -1\n";
        assert_eq!(local_in(tcp, 7), Some("127.0.0.1:33593".parse().unwrap()));
        assert_eq!(local_in(tcp, 1), Some("0.0.0.0:0".parse().unwrap()));
        assert_eq!(local_in(tcp, 2), None);
        let tcp6 = "  sl  local_address                         remote_address                        st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n   3: 00000000000000000000000001000000:1F90 00000000000000000000000000000000:0000 07 00000000:00000000 00:00000000 00000000     0        0        4 1 0\n";
        assert_eq!(local_in(tcp6, 4), Some("[::1]:8080".parse().unwrap()));
        let unix = "  Num       RefCount Protocol Flags    Type St Inode Path\n  0000000000000000: 00000001 00000000 00000000 0002 03       11\n  0000000000000000: 00000001 00000000 00010000 0001 01        9 /run/x.sock\n";
        assert!(unix_listed(unix, 9) && unix_listed(unix, 11) && !unix_listed(unix, 1));
    }

    #[test]
    fn a_real_sockets_transport_is_told() {
        use std::os::fd::AsRawFd;
        let tid = std::process::id();
        let u = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let seen = transport_of(tid, u.as_raw_fd()).unwrap().unwrap();
        assert_eq!(seen.transport, Transport::Udp(libc::AF_INET));
        assert_eq!(seen.local, u.local_addr().ok());
        let t = new_tcp6();
        let seen = transport_of(tid, t.as_raw_fd()).unwrap().unwrap();
        assert_eq!(
            (seen.transport, seen.local),
            (Transport::Tcp(libc::AF_INET6), None)
        );
        let (a, _b) = std::os::unix::net::UnixStream::pair().unwrap();
        assert_eq!(
            transport_of(tid, a.as_raw_fd()).unwrap().unwrap().transport,
            Transport::Unix
        );
        let f = std::fs::File::open("/proc/self/status").unwrap();
        assert_eq!(transport_of(tid, f.as_raw_fd()).unwrap(), None);
    }

    #[test]
    fn tables_name_their_sockets() {
        let tcp = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n   0: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 4242 1 0 100 0 0 10 0\n   1: 00000000:0000 00000000:0000 07 00000000:00000000 00:00000000 00000000     0        0 4343 1 0\n";
        assert_eq!(inet_entry(tcp, 4242), Some((true, 0x0a)));
        assert_eq!(inet_entry(tcp, 4343), Some((false, 7)));
        assert_eq!(inet_entry(tcp, 1), None);
    }

    fn new_tcp6() -> std::os::fd::OwnedFd {
        use std::os::fd::FromRawFd;
        // SAFETY: plain integers; the fd is ours.
        let fd = unsafe { libc::socket(libc::AF_INET6, libc::SOCK_STREAM, 0) };
        assert!(fd >= 0);
        // SAFETY: a new fd we own.
        unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) }
    }

    #[test]
    fn a_real_socket_is_found_with_its_flags() {
        let u = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        use std::os::fd::AsRawFd;
        let tid = std::process::id();
        let s = socket_of(tid, u.as_raw_fd()).unwrap().unwrap();
        assert_eq!(
            s.kind,
            Kind::Inet {
                domain: libc::AF_INET,
                udp: true,
                bound: true,
                state: 7
            }
        );
        assert!(s.cloexec);
        assert!(!s.nonblock);
        assert_eq!(inode_at(tid, u.as_raw_fd()).unwrap(), Some(s.inode));
        let (a, _b) = std::os::unix::net::UnixStream::pair().unwrap();
        assert_eq!(
            socket_of(tid, a.as_raw_fd()).unwrap().unwrap().kind,
            Kind::Unix
        );
        // Neither bound nor connected: in no table, known all the same.
        let t = new_tcp6();
        assert_eq!(
            socket_of(tid, t.as_raw_fd()).unwrap().unwrap().kind,
            Kind::Inet {
                domain: libc::AF_INET6,
                udp: false,
                bound: false,
                state: 0
            }
        );
        assert_eq!(
            inode_at(tid, 100_000).unwrap_err().raw_os_error(),
            Some(libc::EBADF)
        );
    }
}
