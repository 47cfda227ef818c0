//! The running proxy as its rooms share it: where it listens, its
//! bookings, its CA, the roots upstreams are verified against, the
//! secrets, the audit and the approvals.
//!
//! Failure modes: none of its own; [`ProxyError`] says why a start failed.

use super::book::{Book, Booking};
use super::ca;
use crate::audit::AuditLog;
use crate::config::secrets::SecretSource;
use crate::supervisor::{Hold, HttpProxy};
use std::collections::BTreeMap;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;

/// Why the proxy did not start.
#[derive(Debug, thiserror::Error)]
pub enum ProxyError {
    #[error("agentsh's egress CA: {0}")]
    Ca(#[from] ca::CaError),
    #[error("the HTTP proxy cannot listen on {addr}: {error}")]
    Listen {
        addr: SocketAddr,
        error: std::io::Error,
    },
    #[error("the HTTP proxy's runtime cannot start: {0}")]
    Runtime(std::io::Error),
    #[error("no root certificate for upstreams could be read ({0})")]
    Roots(String),
}

/// The running proxy.
pub struct Proxy {
    /// Where it listens (loopback), per family.
    pub v4: SocketAddr,
    pub v6: Option<SocketAddr>,
    pub(crate) book: Book,
    pub(crate) ca: ca::Ca,
    pub(crate) roots: Arc<rustls::RootCertStore>,
    pub(crate) secrets: BTreeMap<String, SecretSource>,
    pub(crate) audit: Arc<AuditLog>,
    pub(crate) approvals: Arc<dyn Hold>,
    pub(crate) explain: bool,
    pub(crate) runtime: tokio::runtime::Runtime,
    /// Open connections per session (at most [`CONNECTIONS_MAX`] each).
    pub(crate) open: std::sync::Mutex<std::collections::HashMap<String, usize>>,
}

/// The most connections one session has open through the proxy at once
/// (each holds one onwards): a tree cannot spend the server's memory and
/// sockets.
pub const CONNECTIONS_MAX: usize = 512;

impl Proxy {
    /// Where a socket of `domain` is connected to reach the proxy.
    pub fn addr_for(&self, domain: i32) -> SocketAddr {
        match (domain, self.v6) {
            (libc::AF_INET6, Some(v6)) => v6,
            (libc::AF_INET6, None) => {
                SocketAddr::new(Ipv4Addr::LOCALHOST.to_ipv6_mapped().into(), self.v4.port())
            }
            _ => self.v4,
        }
    }

    /// Books the connection that will come from `local` (a tree's socket's
    /// address) with what was judged.
    pub fn book(&self, local: SocketAddr, b: Booking) {
        self.book.insert(local, b);
    }
}

impl HttpProxy for Proxy {
    fn addr_for(&self, domain: i32) -> SocketAddr {
        Proxy::addr_for(self, domain)
    }
    fn book(&self, local: SocketAddr, b: Booking) {
        Proxy::book(self, local, b);
    }
}
