//! A tree's DNS socket, told to agentsh's stub: the stub knows the tree by
//! the socket's address, so it is registered (bound first where it has no
//! address yet) before the query can reach the stub. A call judged in
//! place (`in_place`) has no socket of the supervisor's: its socket is
//! told by the local address `/proc` shows, before a send, or once a
//! connect has given it one ([`Registered::After`]).
//!
//! Failure modes: a socket that cannot be read or bound, or (in place) has
//! no address a table shows, is an error with the reason (the caller
//! refuses the call).

use super::call::{Call, EgressTree};
use super::sockaddr::{domain_of, local_addr, sockaddr_of};
use super::socket::take_socket;
use crate::dns::{Querier, Stub};
use crate::policy::egress::Protocol;
use crate::tracee::netproc::{self, Transport};
use std::io;
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::Arc;

/// Why a DNS socket could not be told to the stub.
#[derive(Debug, thiserror::Error)]
pub(super) enum StubError {
    #[error("getsockname: {0}")]
    Name(io::Error),
    #[error("no wildcard address for the socket's family")]
    NoWildcard,
    #[error("cannot bind the socket before the query: {0}")]
    Bind(io::Error),
    #[error("fd {fd} cannot be read: {error}")]
    Unread { fd: i32, error: io::Error },
    #[error("fd {0} is no longer a socket")]
    NotASocket(i32),
    #[error("fd {0} has no local address after its connect")]
    NoAddress(i32),
    #[error(
        "a DNS query sent from a socket with no local address yet cannot be told to agentsh's \
         stub here (the socket cannot be taken to bind it): bind or connect the socket first, \
         as glibc's and musl's resolvers do"
    )]
    Unbound,
    #[error(
        "a DNS socket whose address no /proc table shows (UDP over IPv6 under gVisor, whose \
         /proc/net/udp6 is empty) cannot be told to agentsh's stub: use an IPv4 resolver"
    )]
    Unlisted,
}

/// Tells the stub that `sock` is this tree's: binds it first where it has
/// no address yet (the kernel would pick one only as the call leaves).
pub(super) fn register_querier(
    k: &Call,
    st: &mut EgressTree,
    sock: &OwnedFd,
    protocol: Protocol,
) -> Result<(), StubError> {
    let Some(stub) = k.tree.rules().stub(k.ctx) else {
        return Ok(());
    };
    let local = bound_local(sock).map_err(|e| match e {
        Unbound::Name(e) => StubError::Name(e),
        Unbound::NoWildcard => StubError::NoWildcard,
        Unbound::Bind(e) => StubError::Bind(e),
    })?;
    stub.book.register(
        protocol == Protocol::Tcp,
        local,
        Querier {
            tree: st.egress.names(k.tree),
            pid: k.c.tid,
        },
    );
    Ok(())
}

/// Why a socket has no local address to be known by.
pub(super) enum Unbound {
    Name(io::Error),
    NoWildcard,
    Bind(io::Error),
}

/// The socket's local address, bound first to its family's wildcard
/// address (port 0) where it has none yet (the kernel would pick one only
/// as the call leaves): how the stub and the HTTP proxy know the tree's
/// socket when it reaches them.
pub(super) fn bound_local(sock: &OwnedFd) -> Result<SocketAddr, Unbound> {
    let local = local_addr(sock).map_err(Unbound::Name)?;
    if local.port() != 0 {
        return Ok(local);
    }
    let any = sockaddr_of(SocketAddr::new(local.ip(), 0), domain_of(&local))
        .ok_or(Unbound::NoWildcard)?;
    // SAFETY: `any` is a sockaddr of its length.
    let rc = unsafe {
        libc::bind(
            sock.as_raw_fd(),
            any.as_ptr().cast(),
            any.len() as libc::socklen_t,
        )
    };
    if rc != 0 {
        let e = io::Error::last_os_error();
        // Bound meanwhile by the tree itself: read it again.
        if e.raw_os_error() != Some(libc::EINVAL) {
            return Err(Unbound::Bind(e));
        }
    }
    local_addr(sock).map_err(Unbound::Name)
}

/// How a socket judged in place is told to the stub.
pub(super) enum Registered {
    /// Told already.
    Now,
    /// To be told once the connect has returned ([`Later::register`]).
    After(Later),
}

/// A connect's socket to tell the stub about once the connect gave it an
/// address.
pub(super) struct Later {
    stub: Arc<Stub>,
    querier: Querier,
    stream: bool,
    tid: u32,
    fd: i32,
}

impl Later {
    /// Tells the stub the socket's address as `/proc` shows it now.
    ///
    /// # Errors
    /// The socket cannot be read, or has no address.
    pub(super) fn register(self) -> Result<SocketAddr, StubError> {
        let (tid, fd) = (self.tid, self.fd);
        let seen = crate::tracee::with_owner(tid, || netproc::transport_of(tid, fd))
            .map_err(|error| StubError::Unread { fd, error })?
            .ok_or(StubError::NotASocket(fd))?;
        let local = has_address(seen.local).ok_or(StubError::NoAddress(fd))?;
        self.stub.book.register(self.stream, local, self.querier);
        Ok(local)
    }
}

/// A send's socket (judged in place) told to the stub now, by the local
/// address `/proc` shows; with none yet, bound first where the socket can
/// be taken (`pidfd_getfd`).
///
/// # Errors
/// The socket has no address and cannot be taken to give it one.
pub(super) fn register_at(
    k: &Call,
    st: &mut EgressTree,
    stub: &Arc<Stub>,
    stream: bool,
    seen: &netproc::Seen,
) -> Result<Registered, StubError> {
    let querier = Querier {
        tree: st.egress.names(k.tree),
        pid: k.c.tid,
    };
    if let Some(local) = has_address(seen.local) {
        stub.book.register(stream, local, querier);
        return Ok(Registered::Now);
    }
    let protocol = if stream { Protocol::Tcp } else { Protocol::Udp };
    match take_socket(k.c.tid, k.c.args[0] as i32) {
        Ok(sock) => register_querier(k, st, &sock, protocol).map(|()| Registered::Now),
        Err(_) => Err(StubError::Unbound),
    }
}

/// A connect's socket (judged in place), to be told to the stub once the
/// connect has given it its address ([`Later::register`]).
///
/// # Errors
/// No table would show its address then (UDP over IPv6 under gVisor).
pub(super) fn register_after(
    k: &Call,
    st: &mut EgressTree,
    stub: &Arc<Stub>,
    stream: bool,
    seen: &netproc::Seen,
) -> Result<Registered, StubError> {
    if seen.transport == Transport::Unlisted {
        return Err(StubError::Unlisted);
    }
    Ok(Registered::After(Later {
        stub: stub.clone(),
        querier: Querier {
            tree: st.egress.names(k.tree),
            pid: k.c.tid,
        },
        stream,
        tid: k.c.tid,
        fd: k.c.args[0] as i32,
    }))
}

/// The address a socket is known by, once it has one.
fn has_address(local: Option<SocketAddr>) -> Option<SocketAddr> {
    local.filter(|a| a.port() != 0)
}
