//! Socket addresses, read and written byte by byte (pure, but for the
//! socket's own address): what a sockaddr names, a destination as a
//! sockaddr for a socket's family, and a socket's local address.
//!
//! Failure modes: a sockaddr too short or of another family is
//! [`Parsed::Other`] (the kernel refuses it: performing the call gives the
//! caller that answer).

use agentsh_proto::netabi::NetCall;
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::os::fd::{AsRawFd, OwnedFd};

/// The most a sockaddr may be (`sizeof(struct sockaddr_storage)`).
pub(super) const SOCKADDR_MAX: usize = 128;

pub(super) enum Parsed {
    Inet(IpAddr, u16),
    /// `AF_UNSPEC`: a datagram socket's destination dissolved.
    Unspec,
    /// Another family, or too short: the kernel refuses it.
    Other,
}

/// A sockaddr's destination. Pure.
pub(super) fn parse_sockaddr(b: &[u8]) -> Parsed {
    if b.len() < 2 {
        return Parsed::Other;
    }
    let family = i32::from(u16::from_ne_bytes([b[0], b[1]]));
    match family {
        libc::AF_UNSPEC => Parsed::Unspec,
        libc::AF_INET if b.len() >= 8 => {
            let port = u16::from_be_bytes([b[2], b[3]]);
            Parsed::Inet(IpAddr::V4(Ipv4Addr::new(b[4], b[5], b[6], b[7])), port)
        }
        libc::AF_INET6 if b.len() >= 24 => {
            let port = u16::from_be_bytes([b[2], b[3]]);
            let mut a = [0u8; 16];
            a.copy_from_slice(&b[8..24]);
            Parsed::Inet(IpAddr::V6(Ipv6Addr::from(a)), port)
        }
        _ => Parsed::Other,
    }
}

/// What a call's sockaddr sends to, as the kernel reads it: as
/// [`parse_sockaddr`], but a send's `AF_UNSPEC` sockaddr of a
/// `sockaddr_in`'s length is the IPv4 destination it holds (Linux's
/// `udp_sendmsg` takes `AF_UNSPEC` as `AF_INET`, for BSD's sake, and sends
/// there; so does gVisor's netstack; IPv6 UDP takes it as "no
/// destination", where judging the bytes as an IPv4 one is only
/// stricter), and an unspecified address (`0.0.0.0`, `::`) is this host's
/// loopback, where the kernel sends it. A shorter `AF_UNSPEC` send the
/// kernel refuses (`EINVAL`); a connect's dissolves the association.
/// Pure.
pub(super) fn parse_destination(b: &[u8], call: NetCall) -> Parsed {
    let parsed = match parse_sockaddr(b) {
        Parsed::Unspec if call != NetCall::Connect && b.len() >= 16 => Parsed::Inet(
            IpAddr::V4(Ipv4Addr::new(b[4], b[5], b[6], b[7])),
            u16::from_be_bytes([b[2], b[3]]),
        ),
        p => p,
    };
    match parsed {
        Parsed::Inet(IpAddr::V4(v4), port) if v4.is_unspecified() => {
            Parsed::Inet(IpAddr::V4(Ipv4Addr::LOCALHOST), port)
        }
        Parsed::Inet(IpAddr::V6(v6), port) if v6.is_unspecified() => {
            Parsed::Inet(IpAddr::V6(Ipv6Addr::LOCALHOST), port)
        }
        p => p,
    }
}

/// `a`, written over the caller's own sockaddr `original` (same family and
/// length, so the kernel reads it as it would have read the caller's): the
/// bytes to write at its start. `None`: the family cannot say `a` (an IPv6
/// address for a `sockaddr_in`) or the sockaddr is too short. Pure.
pub(super) fn sockaddr_over(a: SocketAddr, original: &[u8]) -> Option<Vec<u8>> {
    let family = if original.len() >= 2 {
        i32::from(u16::from_ne_bytes([original[0], original[1]]))
    } else {
        return None;
    };
    let (domain, natural) = match family {
        // A send's AF_UNSPEC is read as AF_INET (above).
        libc::AF_INET | libc::AF_UNSPEC if original.len() >= 16 => (libc::AF_INET, 16),
        libc::AF_INET6 if original.len() >= 24 => (libc::AF_INET6, 24),
        _ => return None,
    };
    let mut b = sockaddr_of(a, domain)?;
    // The scope id (bytes 24..28) only where the caller's length has it.
    b.truncate(natural.max(original.len().min(b.len())));
    if domain == libc::AF_INET6 {
        // Keep the caller's flow info; the scope id is the stub's (none).
        b[4..8].copy_from_slice(&original[4..8]);
    }
    Some(b)
}

/// The socket's own address.
pub(super) fn local_addr(sock: &OwnedFd) -> io::Result<SocketAddr> {
    let mut b = [0u8; SOCKADDR_MAX];
    let mut len = SOCKADDR_MAX as libc::socklen_t;
    // SAFETY: getsockname writes at most `len` bytes into `b`.
    let rc = unsafe { libc::getsockname(sock.as_raw_fd(), b.as_mut_ptr().cast(), &mut len) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    match parse_sockaddr(&b[..(len as usize).min(SOCKADDR_MAX)]) {
        Parsed::Inet(ip, port) => Ok(SocketAddr::new(ip, port)),
        _ => Err(io::Error::from_raw_os_error(libc::EAFNOSUPPORT)),
    }
}

/// `a` as a sockaddr for a socket of `domain` (an IPv4 address on an inet6
/// socket: its mapped form). Pure.
pub(super) fn sockaddr_of(a: SocketAddr, domain: i32) -> Option<Vec<u8>> {
    let port = a.port().to_be_bytes();
    match (domain, a.ip()) {
        (libc::AF_INET, IpAddr::V4(v4)) => {
            let mut b = vec![0u8; 16];
            b[..2].copy_from_slice(&(libc::AF_INET as u16).to_ne_bytes());
            b[2..4].copy_from_slice(&port);
            b[4..8].copy_from_slice(&v4.octets());
            Some(b)
        }
        (libc::AF_INET6, ip) => {
            let v6 = match ip {
                IpAddr::V4(v4) => v4.to_ipv6_mapped(),
                IpAddr::V6(v6) => v6,
            };
            let mut b = vec![0u8; 28];
            b[..2].copy_from_slice(&(libc::AF_INET6 as u16).to_ne_bytes());
            b[2..4].copy_from_slice(&port);
            b[8..24].copy_from_slice(&v6.octets());
            Some(b)
        }
        _ => None,
    }
}

pub(super) fn domain_of(a: &SocketAddr) -> i32 {
    if a.is_ipv4() {
        libc::AF_INET
    } else {
        libc::AF_INET6
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sockaddrs_parse_to_their_destination() {
        let mut v4 = vec![0u8; 16];
        v4[..2].copy_from_slice(&(libc::AF_INET as u16).to_ne_bytes());
        v4[2..4].copy_from_slice(&443u16.to_be_bytes());
        v4[4..8].copy_from_slice(&[10, 1, 2, 3]);
        assert!(
            matches!(parse_sockaddr(&v4), Parsed::Inet(ip, 443) if ip == IpAddr::from([10, 1, 2, 3]))
        );
        let mut v6 = vec![0u8; 28];
        v6[..2].copy_from_slice(&(libc::AF_INET6 as u16).to_ne_bytes());
        v6[2..4].copy_from_slice(&53u16.to_be_bytes());
        v6[23] = 1;
        assert!(
            matches!(parse_sockaddr(&v6), Parsed::Inet(ip, 53) if ip == IpAddr::from(Ipv6Addr::LOCALHOST))
        );
        assert!(matches!(parse_sockaddr(&v6[..20]), Parsed::Other));
        assert!(matches!(parse_sockaddr(&[0, 0]), Parsed::Unspec));
        let unix = (libc::AF_UNIX as u16).to_ne_bytes();
        assert!(matches!(parse_sockaddr(&unix), Parsed::Other));
        assert!(matches!(parse_sockaddr(&[2]), Parsed::Other));
    }

    #[test]
    fn destinations_are_what_the_kernel_sends_to() {
        let mut unspec = vec![0u8; 16];
        unspec[2..4].copy_from_slice(&53u16.to_be_bytes());
        unspec[4..8].copy_from_slice(&[10, 0, 0, 1]);
        let ten = IpAddr::from([10, 0, 0, 1]);
        assert!(
            matches!(parse_destination(&unspec, NetCall::Sendto), Parsed::Inet(ip, 53) if ip == ten)
        );
        assert!(matches!(
            parse_destination(&unspec, NetCall::Connect),
            Parsed::Unspec
        ));
        assert!(matches!(
            parse_destination(&unspec[..8], NetCall::Sendmsg),
            Parsed::Unspec
        ));
        let mut any = vec![0u8; 16];
        any[..2].copy_from_slice(&(libc::AF_INET as u16).to_ne_bytes());
        any[2..4].copy_from_slice(&22u16.to_be_bytes());
        assert!(matches!(
            parse_destination(&any, NetCall::Connect),
            Parsed::Inet(ip, 22) if ip == IpAddr::V4(Ipv4Addr::LOCALHOST)
        ));
        let mut any6 = vec![0u8; 28];
        any6[..2].copy_from_slice(&(libc::AF_INET6 as u16).to_ne_bytes());
        assert!(matches!(
            parse_destination(&any6, NetCall::Sendto),
            Parsed::Inet(ip, 0) if ip == IpAddr::V6(Ipv6Addr::LOCALHOST)
        ));
    }

    #[test]
    fn the_stub_is_written_in_the_callers_own_family_and_length() {
        let stub: SocketAddr = "127.0.0.153:53".parse().unwrap();
        let mut v4 = vec![0u8; 16];
        v4[..2].copy_from_slice(&(libc::AF_INET as u16).to_ne_bytes());
        let b = sockaddr_over(stub, &v4).unwrap();
        assert_eq!(b.len(), 16);
        assert!(matches!(parse_sockaddr(&b), Parsed::Inet(ip, 53) if ip == stub.ip()));
        // An IPv6 sockaddr of the RFC 2133 length: the mapped stub, 24 bytes.
        let mut v6 = vec![0u8; 24];
        v6[..2].copy_from_slice(&(libc::AF_INET6 as u16).to_ne_bytes());
        v6[4] = 7;
        let b = sockaddr_over(stub, &v6).unwrap();
        assert_eq!((b.len(), b[4]), (24, 7));
        assert!(
            matches!(parse_sockaddr(&b), Parsed::Inet(IpAddr::V6(ip), 53) if ip.to_ipv4_mapped() == Some(Ipv4Addr::new(127, 0, 0, 153)))
        );
        let mut v6full = vec![0u8; 28];
        v6full[..2].copy_from_slice(&(libc::AF_INET6 as u16).to_ne_bytes());
        assert_eq!(sockaddr_over(stub, &v6full).unwrap().len(), 28);
        // A send's AF_UNSPEC is written as the AF_INET it is read as.
        let b = sockaddr_over(stub, &[0u8; 16]).unwrap();
        assert_eq!(i32::from(u16::from_ne_bytes([b[0], b[1]])), libc::AF_INET);
        // What cannot be said in the caller's family or length.
        let stub6: SocketAddr = "[fd00::53]:53".parse().unwrap();
        assert!(sockaddr_over(stub6, &v4).is_none());
        assert!(sockaddr_over(stub, &v4[..8]).is_none());
        let unix = (libc::AF_UNIX as u16).to_ne_bytes();
        assert!(sockaddr_over(stub, &unix).is_none());
    }
}
