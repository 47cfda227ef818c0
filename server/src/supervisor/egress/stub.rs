//! A tree's DNS socket, told to agentsh's stub: the stub knows the tree by
//! the socket's address, so it is registered (bound first where it has no
//! address yet) before the query can reach the stub.
//!
//! Failure modes: a socket that cannot be read or bound is an error with
//! the reason (the caller refuses the call).

use super::call::{Call, EgressTree};
use super::sockaddr::{domain_of, local_addr, sockaddr_of};
use crate::dns::Querier;
use crate::policy::egress::Protocol;
use std::io;
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, OwnedFd};

/// Why a DNS socket could not be told to the stub.
#[derive(Debug, thiserror::Error)]
pub(super) enum StubError {
    #[error("getsockname: {0}")]
    Name(io::Error),
    #[error("no wildcard address for the socket's family")]
    NoWildcard,
    #[error("cannot bind the socket before the query: {0}")]
    Bind(io::Error),
}

/// Tells the stub that `sock` is this tree's: binds it first where it has
/// no address yet (the kernel would pick one only as the call leaves).
pub(super) fn register_querier(
    k: &Call,
    st: &mut EgressTree,
    sock: &OwnedFd,
    protocol: Protocol,
) -> Result<(), StubError> {
    let Some(stub) = k.tree.rules.stub(k.ctx) else {
        return Ok(());
    };
    let mut local = local_addr(sock).map_err(StubError::Name)?;
    if local.port() == 0 {
        let any = sockaddr_of(SocketAddr::new(local.ip(), 0), domain_of(&local))
            .ok_or(StubError::NoWildcard)?;
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
                return Err(StubError::Bind(e));
            }
        }
        local = local_addr(sock).map_err(StubError::Name)?;
    }
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
