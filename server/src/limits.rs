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
//! Besides the counts, each asker other than root gets turns at wrap-init
//! ([`Limits::turn`]): one at a time, so one user's flood of shells takes
//! one of the server's threads, not all of them.
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
    /// Each asker's turn at wrap-init ([`Limits::turn`]).
    turns: Mutex<HashMap<LimitKey, Arc<tokio::sync::Semaphore>>>,
    /// Each asker's pace of requests ([`Limits::pace`]).
    paces: Mutex<HashMap<LimitKey, Bucket>>,
}

/// Root and the server's own user: never gated nor paced (the SDK's
/// shells; a developer's under `agentsh wrap`, whose server runs as the
/// developer).
fn ungated(key: LimitKey) -> bool {
    // SAFETY: geteuid has no preconditions.
    key.privileged() || key == LimitKey::Uid(unsafe { libc::geteuid() })
}

/// Wrap-inits an asker other than root may have in progress at once. The
/// work of a wrap-init (its `/proc` reads, the ruleset, the notify socket)
/// takes a thread of the server; a flood of them from one local user thus
/// takes at most one, whatever its number of connections, and every other
/// asker's shells are served beside it (each asker's own in the order they
/// came: the semaphore is first come, first served).
pub const WRAP_INITS_AT_ONCE: usize = 1;

/// The most askers whose turn gates are kept while idle.
const TURNS_KEPT: usize = 1024;

/// Requests an asker other than root (and the server's own user) is served
/// per second, after a burst of [`REQUEST_BURST`]: a request beyond the
/// pace waits its turn (its connection held, nothing read), it is not
/// refused. A flood of requests thus costs the server a bounded share of
/// its CPU, and the flooder waits in its own `recv`s instead of spinning;
/// root's shells, the SDK's, are never paced. (Wrap-inits are also one at
/// a time per asker: [`WRAP_INITS_AT_ONCE`].)
pub const REQUESTS_PER_SEC: f64 = 200.0;
pub const REQUEST_BURST: f64 = 100.0;

/// A pace: a token bucket whose tokens may go negative (the takers already
/// waiting), filled at `rate` a second up to `burst`. One asker's requests
/// ([`Limits::pace`]) and one listener's refusals (`api::serve`).
#[derive(Debug, Clone, Copy)]
pub struct Bucket {
    tokens: f64,
    at: std::time::Instant,
}

impl Bucket {
    /// Full at `now`.
    pub fn full(burst: f64, now: std::time::Instant) -> Bucket {
        Bucket {
            tokens: burst,
            at: now,
        }
    }

    /// Whether it is full again at `now` (nobody waits, nothing to keep).
    fn refilled(&self, rate: f64, burst: f64, now: std::time::Instant) -> bool {
        self.tokens + now.duration_since(self.at).as_secs_f64() * rate >= burst
    }

    /// One more taker at `now`: how long it waits, `None` for at once.
    pub fn take(
        &mut self,
        rate: f64,
        burst: f64,
        now: std::time::Instant,
    ) -> Option<std::time::Duration> {
        let refill = now.duration_since(self.at).as_secs_f64() * rate;
        self.tokens = (self.tokens + refill).min(burst) - 1.0;
        self.at = now;
        (self.tokens < 0.0).then(|| std::time::Duration::from_secs_f64(-self.tokens / rate))
    }
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
    /// Waits for `key`'s turn at a wrap-init (see [`WRAP_INITS_AT_ONCE`];
    /// root's and the server's own user's are not gated: the SDK's shells,
    /// a developer's under `agentsh wrap`). The turn lasts while the
    /// permit is held. `None`: no turn needed.
    pub async fn turn(&self, key: LimitKey) -> Option<tokio::sync::OwnedSemaphorePermit> {
        if ungated(key) {
            return None;
        }
        let gate = {
            let mut turns = self
                .turns
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            if turns.len() >= TURNS_KEPT {
                // Forget the idle ones (nobody waits on or holds them).
                turns.retain(|_, g| Arc::strong_count(g) > 1);
            }
            turns
                .entry(key)
                .or_insert_with(|| Arc::new(tokio::sync::Semaphore::new(WRAP_INITS_AT_ONCE)))
                .clone()
        };
        gate.acquire_owned().await.ok()
    }

    /// One more request from `key`: how long it waits before it is served
    /// ([`REQUESTS_PER_SEC`]), `None` for at once. The wait of requests
    /// already waiting is counted: they are served in the order they came,
    /// at the pace, and their number is bounded by the asker's connections.
    pub fn pace(&self, key: LimitKey) -> Option<std::time::Duration> {
        self.pace_at(key, std::time::Instant::now())
    }

    /// [`Limits::pace`] at `now`.
    fn pace_at(&self, key: LimitKey, now: std::time::Instant) -> Option<std::time::Duration> {
        if ungated(key) {
            return None;
        }
        let mut paces = self
            .paces
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if paces.len() >= TURNS_KEPT {
            // Forget the askers whose bucket has filled again.
            paces.retain(|_, b| !b.refilled(REQUESTS_PER_SEC, REQUEST_BURST, now));
        }
        paces
            .entry(key)
            .or_insert(Bucket::full(REQUEST_BURST, now))
            .take(REQUESTS_PER_SEC, REQUEST_BURST, now)
    }

    /// Open API connections, every asker's.
    pub fn connections(&self) -> usize {
        self.held
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .iter()
            .filter(|((kind, _), _)| *kind == Kind::Connection)
            .map(|(_, n)| *n)
            .sum()
    }

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
    fn another_users_wrap_inits_take_turns_and_root_never_waits() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap();
        rt.block_on(async {
            let l = Arc::new(Limits::default());
            let user = LimitKey::Uid(4242);
            let first = l.turn(user).await;
            assert!(first.is_some());
            // The same user's next waits for the first to end...
            let waiting =
                tokio::time::timeout(std::time::Duration::from_millis(20), l.turn(user)).await;
            assert!(waiting.is_err(), "a second turn at once");
            // ...another user's and root's do not.
            assert!(l.turn(LimitKey::Uid(4243)).await.is_some());
            assert!(l.turn(LimitKey::Uid(0)).await.is_none());
            drop(first);
            assert!(l.turn(user).await.is_some());
        });
    }

    #[test]
    fn another_users_requests_are_paced_after_a_burst_and_roots_never() {
        let l = Limits::default();
        let user = LimitKey::Uid(4242);
        // One instant for all (a loaded machine refills nothing meanwhile).
        let now = std::time::Instant::now();
        // The burst at once...
        for _ in 0..REQUEST_BURST as usize {
            assert_eq!(l.pace_at(user, now), None);
        }
        // ...then each one more waits longer: those before it are counted.
        let a = l.pace_at(user, now).expect("paced");
        let b = l.pace_at(user, now).expect("paced");
        assert!(b > a, "{a:?} {b:?}");
        let step = 1.0 / REQUESTS_PER_SEC;
        assert!((b - a).as_secs_f64() > step * 0.5, "{a:?} {b:?}");
        // Another user, root and this process's own user are not.
        assert_eq!(l.pace_at(LimitKey::Uid(4243), now), None);
        // SAFETY: geteuid has no preconditions.
        let own = LimitKey::Uid(unsafe { libc::geteuid() });
        for _ in 0..1000 {
            assert_eq!(l.pace_at(LimitKey::Uid(0), now), None);
            assert_eq!(l.pace_at(own, now), None);
        }
    }

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
