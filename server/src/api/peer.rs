//! Who is asking, and how much each asker may hold at once.
//!
//! Every connection is identified before its request is read:
//! * Unix peers by `SO_PEERCRED` (taken by the kernel at `connect`). A
//!   process of a supervised tree cannot create the SEQPACKET socket the API
//!   listens on (the tree's seccomp filter), so no tree process is ever a
//!   Unix peer; the lineage check here is a second line that logs and
//!   refuses if one somehow were. uid 0 outside every tree is an operator.
//! * TCP peers by address; every route but `/healthz` needs the operator
//!   token, and operator decisions additionally map the socket to its
//!   processes (`approval::Approvals::identify`).
//!
//! Limits, per peer uid (TCP peers: per address), hold no matter how many
//! connections one asker opens: concurrent connections, long-polls
//! (`?wait=`), and notify sockets issued but not yet used. root's limits
//! are high (an SDK starting many commands at once runs as root); everyone
//! else's are low, so another local user's flood cannot crowd out the SDK.
//!
//! Failure modes: over a limit, the connection is closed at once or the
//! request gets 429 with a message naming the limit.

use agentsh_proto::seqpacket::PeerCred;
use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};

/// The asker of one connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Peer {
    /// A local process on the Unix socket, outside every tree.
    Local(PeerCred),
    /// A TCP client.
    Tcp(SocketAddr),
}

impl Peer {
    /// The key limits are counted under.
    pub fn key(&self) -> LimitKey {
        match self {
            Peer::Local(c) => LimitKey::Uid(c.uid),
            Peer::Tcp(a) => LimitKey::Ip(a.ip()),
        }
    }

    /// For logs and the `approver` of audit events.
    pub fn describe(&self) -> String {
        match self {
            Peer::Local(c) => {
                let comm = std::fs::read_to_string(format!("/proc/{}/comm", c.pid))
                    .map(|s| s.trim().to_string())
                    .unwrap_or_default();
                format!("uid {} pid {} ({comm})", c.uid, c.pid)
            }
            Peer::Tcp(a) => format!("tcp {a}"),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LimitKey {
    Uid(u32),
    Ip(IpAddr),
}

impl LimitKey {
    fn privileged(&self) -> bool {
        matches!(self, LimitKey::Uid(0))
    }
}

/// What is counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    Connection,
    LongPoll,
    NotifySocket,
}

impl Kind {
    /// (root, everyone else).
    fn caps(self) -> (usize, usize) {
        match self {
            Kind::Connection => (4096, 64),
            Kind::LongPoll => (64, 8),
            Kind::NotifySocket => (4096, 64),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Kind::Connection => "concurrent connections",
            Kind::LongPoll => "concurrent long-polls",
            Kind::NotifySocket => "notify sockets not yet used",
        }
    }
}

/// The counters.
#[derive(Debug, Default)]
pub struct Limits {
    held: Mutex<HashMap<(Kind, LimitKey), usize>>,
}

/// One unit of a limit, given back on drop.
#[derive(Debug)]
pub struct Slot {
    limits: Arc<Limits>,
    kind: Kind,
    key: LimitKey,
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut held = self
            .limits
            .held
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(n) = held.get_mut(&(self.kind, self.key)) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                held.remove(&(self.kind, self.key));
            }
        }
    }
}

impl Limits {
    /// Takes one unit of `kind` for `key`; `Err` with a message when the cap is reached.
    ///
    /// # Errors
    /// The cap, named.
    pub fn take(self: &Arc<Self>, kind: Kind, key: LimitKey) -> Result<Slot, String> {
        let (root, other) = kind.caps();
        let cap = if key.privileged() { root } else { other };
        let mut held = self
            .held
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let n = held.entry((kind, key)).or_insert(0);
        if *n >= cap {
            return Err(format!(
                "too many {} for this peer (limit {cap}); retry later",
                kind.name()
            ));
        }
        *n += 1;
        Ok(Slot {
            limits: self.clone(),
            kind,
            key,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn caps_are_per_key_and_slots_come_back() {
        let l = Arc::new(Limits::default());
        let user = LimitKey::Uid(1000);
        let mut held = Vec::new();
        for _ in 0..8 {
            held.push(l.take(Kind::LongPoll, user).unwrap());
        }
        let e = l.take(Kind::LongPoll, user).unwrap_err();
        assert!(e.contains("long-polls") && e.contains('8'), "{e}");
        // Another uid and root are not affected.
        assert!(l.take(Kind::LongPoll, LimitKey::Uid(1001)).is_ok());
        assert!(l.take(Kind::LongPoll, LimitKey::Uid(0)).is_ok());
        held.pop();
        assert!(l.take(Kind::LongPoll, user).is_ok());
    }
}
