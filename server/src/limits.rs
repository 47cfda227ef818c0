//! How much each asker may hold at once: concurrent connections,
//! long-polls (`?wait=`), and notify sockets issued but not yet used,
//! counted per peer uid (TCP peers: per address) no matter how many
//! connections one asker opens.
//!
//! root's limits are high (an SDK starting many commands at once runs as
//! root); everyone else's are low, so another local user's flood cannot
//! crowd out the SDK. A unit is a [`Slot`], given back when dropped: the
//! API holds one per connection and long-poll, and a notify socket's
//! (`handoff`) holds one until its handoff is taken or it gives up, which
//! is why this sits below both.
//!
//! Failure modes: over a limit, [`Limits::take`] answers [`LimitReached`]
//! naming the limit (the API closes the connection at once or answers 429
//! with that text).

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};

/// Whom limits are counted for.
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

/// A peer holds all the units of `kind` it may.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("too many {} for this peer (limit {cap}); retry later", kind.name())]
pub struct LimitReached {
    pub kind: Kind,
    pub cap: usize,
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
    /// Takes one unit of `kind` for `key`.
    ///
    /// # Errors
    /// The cap is reached: [`LimitReached`] names it.
    pub fn take(self: &Arc<Self>, kind: Kind, key: LimitKey) -> Result<Slot, LimitReached> {
        let (root, other) = kind.caps();
        let cap = if key.privileged() { root } else { other };
        let mut held = self
            .held
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let n = held.entry((kind, key)).or_insert(0);
        if *n >= cap {
            return Err(LimitReached { kind, cap });
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
        let e = l.take(Kind::LongPoll, user).unwrap_err().to_string();
        assert!(e.contains("long-polls") && e.contains('8'), "{e}");
        // Another uid and root are not affected.
        assert!(l.take(Kind::LongPoll, LimitKey::Uid(1001)).is_ok());
        assert!(l.take(Kind::LongPoll, LimitKey::Uid(0)).is_ok());
        held.pop();
        assert!(l.take(Kind::LongPoll, user).is_ok());
    }
}
