//! Which tree asked the stub, and which names each tree resolved to which
//! addresses.
//!
//! The supervisor registers a tree's socket (its local address) whenever it
//! makes a call to the stub for the tree, before the query can leave; the
//! stub looks the querier up by the query's source. A name the stub
//! answered for a tree is bound to each address of the answer for the
//! record's TTL (at least [`TTL_FLOOR`]), so a later connect of that tree
//! to the address matches `hosts` rules by that name.
//!
//! Failure modes: none; a querier the book does not know is an outsider
//! (not a supervised tree: see `stub`).

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The shortest a binding lasts: resolvers that do not cache connect right
/// after the answer, and a TTL of 0 must still reach that connect.
pub const TTL_FLOOR: Duration = Duration::from_secs(30);
/// The longest a binding lasts.
pub const TTL_CEILING: Duration = Duration::from_secs(24 * 3600);
/// The most addresses one tree keeps names for (then the oldest go).
const NAMES_MAX: usize = 16_384;

/// Where a tree's policy is read from when it is needed: its session's
/// rules as the last policy reload left them (the supervisor's), or one
/// fixed policy.
pub trait PolicyNow: Send + Sync {
    fn policy(&self) -> Arc<crate::policy::Policy>;
}

impl PolicyNow for Arc<crate::policy::Policy> {
    fn policy(&self) -> Arc<crate::policy::Policy> {
        self.clone()
    }
}

/// One tree's resolved names.
pub struct TreeNames {
    pub session_id: String,
    /// The tree's policy: its `egress` decides which names the stub asks.
    rules: Arc<dyn PolicyNow>,
    names: Mutex<HashMap<IpAddr, Vec<(String, Instant)>>>,
}

impl TreeNames {
    pub fn new(session_id: &str, rules: Arc<dyn PolicyNow>) -> Arc<TreeNames> {
        Arc::new(TreeNames {
            session_id: session_id.to_string(),
            rules,
            names: Mutex::new(HashMap::new()),
        })
    }

    /// The tree's policy now (a reload may have replaced it).
    pub fn policy(&self) -> Arc<crate::policy::Policy> {
        self.rules.policy()
    }

    /// Binds `name` to `ip` for `ttl` seconds (floored, capped).
    pub fn bind(&self, ip: IpAddr, name: &str, ttl: u32) {
        let until =
            Instant::now() + Duration::from_secs(u64::from(ttl)).clamp(TTL_FLOOR, TTL_CEILING);
        let ip = crate::policy::egress::canonical(ip);
        let mut names = self
            .names
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if names.len() >= NAMES_MAX {
            let now = Instant::now();
            names.retain(|_, v| {
                v.retain(|(_, u)| *u > now);
                !v.is_empty()
            });
            if names.len() >= NAMES_MAX {
                names.clear();
            }
        }
        let v = names.entry(ip).or_default();
        match v.iter_mut().find(|(n, _)| n == name) {
            Some(e) => e.1 = e.1.max(until),
            None => v.push((name.to_string(), until)),
        }
    }

    /// The names bound to `ip` now.
    pub fn names_of(&self, ip: IpAddr) -> Vec<String> {
        let ip = crate::policy::egress::canonical(ip);
        let now = Instant::now();
        let names = self
            .names
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        names
            .get(&ip)
            .map(|v| {
                v.iter()
                    .filter(|(_, u)| *u > now)
                    .map(|(n, _)| n.clone())
                    .collect()
            })
            .unwrap_or_default()
    }
}

/// A querier: the tree and the thread that made the call.
#[derive(Clone)]
pub struct Querier {
    pub tree: Arc<TreeNames>,
    pub pid: u32,
}

/// Queriers by (stream?, local address of their socket).
#[derive(Default)]
pub struct Book {
    queriers: Mutex<HashMap<(bool, SocketAddr), Querier>>,
}

impl Book {
    /// `local` (a socket's address; a wildcard address stands for every
    /// local address) belongs to `q` from now on.
    pub fn register(&self, stream: bool, local: SocketAddr, q: Querier) {
        let mut m = self
            .queriers
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if m.len() >= 65_536 {
            // Trees that ended hold their names only through here.
            m.retain(|_, q| Arc::strong_count(&q.tree) > 1);
        }
        m.insert((stream, local), q);
    }

    /// Who sent from `source`.
    pub fn querier(&self, stream: bool, source: SocketAddr) -> Option<Querier> {
        let m = self
            .queriers
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let wildcard = match source {
            SocketAddr::V4(a) => {
                SocketAddr::new(IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED), a.port())
            }
            SocketAddr::V6(a) => {
                SocketAddr::new(IpAddr::V6(std::net::Ipv6Addr::UNSPECIFIED), a.port())
            }
        };
        let mapped = match source.ip() {
            IpAddr::V4(v4) => Some(SocketAddr::new(
                IpAddr::V6(v4.to_ipv6_mapped()),
                source.port(),
            )),
            IpAddr::V6(_) => None,
        };
        let v6_wildcard =
            SocketAddr::new(IpAddr::V6(std::net::Ipv6Addr::UNSPECIFIED), source.port());
        m.get(&(stream, source))
            .or_else(|| m.get(&(stream, wildcard)))
            .or_else(|| mapped.and_then(|a| m.get(&(stream, a))))
            .or_else(|| m.get(&(stream, v6_wildcard)))
            .cloned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy() -> Arc<crate::policy::Policy> {
        let text = crate::policy::shipped("agent-default").unwrap();
        Arc::new(crate::policy::Policy::from_yaml(text, "agent-default").unwrap())
    }

    #[test]
    fn names_bind_and_expire_per_tree() {
        let t = TreeNames::new("s", Arc::new(policy()));
        let ip: IpAddr = "10.0.0.1".parse().unwrap();
        assert!(t.names_of(ip).is_empty());
        t.bind(ip, "pypi.org", 0);
        assert_eq!(t.names_of(ip), vec!["pypi.org".to_string()]);
        assert_eq!(
            t.names_of("::ffff:10.0.0.1".parse().unwrap()),
            vec!["pypi.org".to_string()]
        );
        let other = TreeNames::new("s", Arc::new(policy()));
        assert!(other.names_of(ip).is_empty());
    }

    #[test]
    fn queriers_are_found_by_their_source() {
        let b = Book::default();
        let t = TreeNames::new("s", Arc::new(policy()));
        b.register(
            false,
            "0.0.0.0:4000".parse().unwrap(),
            Querier {
                tree: t.clone(),
                pid: 7,
            },
        );
        assert_eq!(
            b.querier(false, "127.0.0.1:4000".parse().unwrap())
                .unwrap()
                .pid,
            7
        );
        assert!(b.querier(true, "127.0.0.1:4000".parse().unwrap()).is_none());
        assert!(b
            .querier(false, "127.0.0.1:4001".parse().unwrap())
            .is_none());
        b.register(
            true,
            "[::]:5000".parse().unwrap(),
            Querier { tree: t, pid: 8 },
        );
        assert_eq!(
            b.querier(true, "127.0.0.1:5000".parse().unwrap())
                .unwrap()
                .pid,
            8
        );
    }
}
