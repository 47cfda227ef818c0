//! The seam to agentsh's HTTP proxy (egress rules with `http:`), as the
//! egress family reaches it: what a connect sent there is booked with
//! ([`Booking`]), the running proxy ([`HttpProxy`]: where it listens, how
//! a connection is booked) and the server's proxy, started at its first
//! need ([`ProxyOnDemand`]). `proxy::Proxy` and `proxy::ProxyCell`
//! implement them and the daemon puts the cell in the context, so the
//! supervisor never imports the proxy: the proxy sits above it (it holds
//! requests for an operator through the seam's `Hold`), as approvals do.
//!
//! Failure modes: a proxy that cannot start says why ([`ProxyDown`]); the
//! egress family refuses every connect that needs it with that reason.

use super::seam::Hold;
use crate::audit::AuditLog;
use crate::policy::egress::HostPattern;
use crate::policy::http::Http;
use std::net::SocketAddr;
use std::sync::Arc;

/// What was judged for one connect, for the proxy.
#[derive(Clone)]
pub struct Booking {
    pub session_id: String,
    /// The thread that connected.
    pub pid: u32,
    /// Where the tree connected to.
    pub dest: SocketAddr,
    /// The name the tree resolved to the address, when known.
    pub host: Option<String>,
    /// The egress rule, its hosts and its `http:`.
    pub rule: String,
    pub hosts: Vec<HostPattern>,
    pub http: Arc<Http>,
}

/// The running proxy, as a connect sent to it needs it.
pub trait HttpProxy: Send + Sync {
    /// Where a socket of `domain` is connected to reach the proxy.
    fn addr_for(&self, domain: i32) -> SocketAddr;
    /// Books the connection that will come from `local` (a tree's socket's
    /// address) with what was judged; a connection nobody booked is closed.
    fn book(&self, local: SocketAddr, b: Booking);
}

/// The server's proxy: started at its first need, once; a start that
/// failed stays failed.
pub trait ProxyOnDemand: Send + Sync {
    /// The running proxy, started now (with the server's audit and where
    /// held requests wait) if it is not yet.
    ///
    /// # Errors
    /// It cannot start (why).
    fn running(
        &self,
        audit: &Arc<AuditLog>,
        approvals: &Arc<dyn Hold>,
    ) -> Result<Arc<dyn HttpProxy>, ProxyDown>;
}

/// Why the proxy is not running (its start's error, as logged).
#[derive(Debug, Clone, thiserror::Error)]
#[error("{0}")]
pub struct ProxyDown(pub String);

#[cfg(test)]
pub mod recording {
    //! The recording double of the proxy: it runs (or is down, as
    //! scripted), listens at a fixed loopback address and records every
    //! booking, in order.

    use super::*;
    use std::net::{Ipv4Addr, Ipv6Addr};
    use std::sync::Mutex;

    /// The port the double says it listens on.
    pub const PORT: u16 = 3128;

    #[derive(Default)]
    pub struct RecordingProxy {
        /// Why it does not start (`None`: it runs).
        pub down: Option<ProxyDown>,
        /// Every booking: the socket's local address, what was judged.
        pub booked: Mutex<Vec<(SocketAddr, Booking)>>,
    }

    impl RecordingProxy {
        /// The local addresses and rules booked so far.
        pub fn bookings(&self) -> Vec<(SocketAddr, String)> {
            let booked = self
                .booked
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            booked.iter().map(|(a, b)| (*a, b.rule.clone())).collect()
        }
    }

    impl HttpProxy for RecordingProxy {
        fn addr_for(&self, domain: i32) -> SocketAddr {
            match domain {
                libc::AF_INET6 => SocketAddr::new(Ipv6Addr::LOCALHOST.into(), PORT),
                _ => SocketAddr::new(Ipv4Addr::LOCALHOST.into(), PORT),
            }
        }
        fn book(&self, local: SocketAddr, b: Booking) {
            self.booked
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .push((local, b));
        }
    }

    impl ProxyOnDemand for Arc<RecordingProxy> {
        fn running(
            &self,
            _audit: &Arc<AuditLog>,
            _approvals: &Arc<dyn Hold>,
        ) -> Result<Arc<dyn HttpProxy>, ProxyDown> {
            match &self.down {
                Some(down) => Err(down.clone()),
                None => Ok(self.clone()),
            }
        }
    }
}
