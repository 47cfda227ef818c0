//! Socket addresses, read and written byte by byte (pure, but for the
//! socket's own address): what a sockaddr names, a destination as a
//! sockaddr for a socket's family, and a socket's local address.
//!
//! Failure modes: a sockaddr too short or of another family is
//! [`Parsed::Other`] (the kernel refuses it: performing the call gives the
//! caller that answer).

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
}
