//! The DNS stub of `egress.dns: stub`: which names a tree may resolve, and
//! which names each tree resolved to which addresses (so `hosts` rules can
//! match a connect by the name the tree itself asked for).
//!
//! Failure modes: see [`stub`]; nothing here panics on a packet.

pub mod book;
pub mod packet;
pub mod stub;

pub use book::{Book, PolicyNow, Querier, TreeNames};
pub use stub::{Stub, StubError};

use crate::audit::AuditLog;
use crate::config::Config;
use std::sync::Arc;

/// Why the stub did not start.
#[derive(Debug, thiserror::Error)]
pub enum DnsError {
    /// `egress.stub` or `egress.resolvers` is not an address (the config's
    /// own error, which names the key).
    #[error("{0}")]
    Config(Box<dyn std::error::Error + Send + Sync>),
    #[error(transparent)]
    Stub(#[from] StubError),
}

/// Starts the stub on `egress.stub`, forwarding to `egress.resolvers` (or
/// the nameservers of `/etc/resolv.conf`).
///
/// # Errors
/// The config names no address, or the stub cannot listen there (the
/// caller says what that means: the trees' DNS is refused, never sent
/// around the policy).
pub fn start(config: &Config, audit: &Arc<AuditLog>) -> Result<Arc<Stub>, DnsError> {
    let addr = config
        .egress
        .stub_addr()
        .map_err(|e| DnsError::Config(e.into()))?;
    let resolv = std::fs::read_to_string("/etc/resolv.conf").unwrap_or_default();
    let upstream = config
        .egress
        .upstream(&resolv)
        .map_err(|e| DnsError::Config(e.into()))?;
    if upstream.is_empty() {
        tracing::error!(
            "egress dns stub: no upstream resolver (egress.resolvers is empty and \
             /etc/resolv.conf names no nameserver but the stub): every name a tree asks for \
             gets SERVFAIL"
        );
    }
    let explain = config.execve.explain == crate::config::Explain::Stderr;
    let stub = match Stub::start(addr, upstream.clone(), audit.clone(), explain) {
        // Taken (another sandbox sharing this network namespace: runsc
        // with host networking), or not ours to bind (port 53 without
        // CAP_NET_BIND_SERVICE: the packaged unit's bounding set). Any
        // free port of the same address serves as well: every query a tree
        // sends to a resolver is sent to the stub's address as it listens.
        Err(StubError::Listen { source, .. })
            if matches!(
                source.kind(),
                std::io::ErrorKind::AddrInUse | std::io::ErrorKind::PermissionDenied
            ) && addr.port() != 0 =>
        {
            let free = std::net::SocketAddr::new(addr.ip(), 0);
            let stub = Stub::start(free, upstream.clone(), audit.clone(), explain)?;
            tracing::warn!(
                "egress dns stub: cannot listen on {addr} ({source}: another agentsh sharing \
                 this network namespace, or no right to bind the port); listening on {} \
                 instead: the trees' queries to any resolver are sent there",
                stub.addr
            );
            stub
        }
        r => r?,
    };
    let names_stub = resolv.lines().any(|l| {
        l.split_whitespace().collect::<Vec<_>>() == ["nameserver", &addr.ip().to_string()]
    });
    tracing::info!(
        stub = %stub.addr,
        upstream = ?upstream,
        "egress dns stub listening; {}",
        if names_stub {
            "/etc/resolv.conf names it"
        } else {
            "/etc/resolv.conf does not name it: a tree's queries to the resolvers it names \
             are sent to it instead (docs/policy.md#dns)"
        }
    );
    Ok(stub)
}
