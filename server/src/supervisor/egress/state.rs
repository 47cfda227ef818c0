//! What the egress family keeps of a tree between calls: every destination
//! judged (and with which names the tree had resolved to it), the ones an
//! operator approved, the blocking calls in flight, and the names the tree
//! resolved through the DNS stub.
//!
//! Failure modes: none of its own; the cache is bounded (cleared past
//! [`SEEN_MAX`] destinations: they are judged again).

use crate::dns::TreeNames;
use crate::policy::egress::Protocol;
use crate::policy::Decision;
use crate::supervisor::tree::Tree;
use std::collections::{HashMap, HashSet};
use std::net::IpAddr;
use std::sync::atomic::AtomicUsize;
use std::sync::{Arc, Mutex};

/// What one judged destination is, for the cache and the audit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct DestKey {
    pub ip: IpAddr,
    pub port: u16,
    pub protocol: Protocol,
}

/// A destination's decision, its rule, and the names it was judged with.
pub(super) type Seen = (Decision, String, Vec<String>);

/// The most destinations remembered per tree.
pub(super) const SEEN_MAX: usize = 4096;

/// The egress family's part of a tree's state.
#[derive(Default)]
pub struct EgressState {
    /// Blocking network calls of this tree being made.
    pub(super) blocking: Arc<AtomicUsize>,
    /// Destinations judged in this tree, and what was decided; with each,
    /// the names the tree had resolved to it then: a decision holds while
    /// they are the same.
    pub(super) seen: HashMap<DestKey, Seen>,
    /// Destinations an operator approved for this tree.
    pub(super) approved: Arc<Mutex<HashSet<DestKey>>>,
    /// The names this tree resolved through the DNS stub.
    names: Option<Arc<TreeNames>>,
    /// The destinations each thread was told are refused.
    pub(super) told: crate::explain::Told<DestKey>,
    /// The policy `seen` and `approved` were decided under: a reload that
    /// replaces it forgets them.
    judged_by: Option<Arc<crate::policy::Policy>>,
}

impl EgressState {
    /// Remembers what `key` got.
    pub(super) fn remember(
        &mut self,
        key: DestKey,
        decision: Decision,
        rule: &str,
        names: Vec<String>,
    ) {
        if self.seen.len() >= SEEN_MAX {
            self.seen.clear();
        }
        self.seen.insert(key, (decision, rule.to_string(), names));
    }

    /// The tree's resolved names (made on first use).
    pub(super) fn names(&mut self, tree: &Tree) -> Arc<TreeNames> {
        self.names
            .get_or_insert_with(|| TreeNames::new(&tree.session_id, tree.live()))
            .clone()
    }

    /// Says which policy this call is judged under: when a reload replaced
    /// the one the cached decisions and approvals were made under, they
    /// are forgotten (each destination is judged again, and audited).
    pub(super) fn judged_by(&mut self, policy: &Arc<crate::policy::Policy>) {
        if self
            .judged_by
            .as_ref()
            .is_some_and(|p| !Arc::ptr_eq(p, policy))
        {
            self.seen.clear();
            self.approved
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .clear();
        }
        self.judged_by = Some(policy.clone());
    }
}
