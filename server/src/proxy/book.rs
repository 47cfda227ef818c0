//! Bookings: which tree's connect, judged for which destination, will
//! arrive from which local address. Taken once, when the connection
//! arrives; a booking nobody took for [`BOOKING_TTL`] is dropped.
//!
//! Failure modes: none; a connection with no booking is an outsider (the
//! proxy closes it).

/// What the egress family books a connect with (the supervisor's seam).
pub(super) use crate::supervisor::Booking;
use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How long a booking waits for its connection.
const BOOKING_TTL: Duration = Duration::from_secs(120);
/// Past this many bookings, the stale ones are dropped.
const BOOKINGS_MAX: usize = 4096;

/// Bookings by the local address of the tree's socket.
#[derive(Default)]
pub(crate) struct Book {
    booked: Mutex<HashMap<SocketAddr, (Booking, Instant)>>,
}

fn canonical(a: SocketAddr) -> SocketAddr {
    SocketAddr::new(crate::policy::egress::canonical(a.ip()), a.port())
}

impl Book {
    pub(crate) fn insert(&self, local: SocketAddr, b: Booking) {
        let mut m = self
            .booked
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if m.len() >= BOOKINGS_MAX {
            m.retain(|_, (_, at)| at.elapsed() < BOOKING_TTL);
        }
        m.insert(canonical(local), (b, Instant::now()));
    }

    /// The booking of a connection from `peer`: by its address, or by the
    /// wildcard address of its port (a socket bound to it).
    pub(crate) fn take(&self, peer: SocketAddr) -> Option<Booking> {
        let peer = canonical(peer);
        let mut m = self
            .booked
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let wild4 = SocketAddr::new(IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED), peer.port());
        let wild6 = SocketAddr::new(IpAddr::V6(std::net::Ipv6Addr::UNSPECIFIED), peer.port());
        for k in [peer, wild4, wild6] {
            if let Some((b, at)) = m.remove(&k) {
                if at.elapsed() < BOOKING_TTL {
                    return Some(b);
                }
            }
        }
        None
    }
}

/// Whether `name` is one the egress rule names (any, for a rule by
/// address alone).
pub(crate) fn names_host(hosts: &[crate::policy::egress::HostPattern], name: &str) -> bool {
    hosts.is_empty() || hosts.iter().any(|h| h.matches(name))
}
