//! What a tree's supervisor thread keeps between the syscalls it handles.
//!
//! Failure modes: none of its own.

use super::procfiles::ProcFiles;
use super::ptrace::Lingering;
use super::retry::Refusals;
use super::{signals, DepthBook};
use crate::policy::egress::Protocol;
use std::net::IpAddr;
use std::sync::mpsc::{self, Receiver, Sender};

/// What one judged destination is, for the cache and the audit (`egress`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct DestKey {
    pub ip: IpAddr,
    pub port: u16,
    pub protocol: Protocol,
}

/// A destination's decision, its rule, and the names it was judged with.
pub(super) type Seen = (crate::policy::Decision, String, Vec<String>);

/// What the tree's thread keeps between execs.
pub struct TreeState {
    pub root_pid: u32,
    pub book: DepthBook,
    pub protected: signals::Protected,
    /// Tasks stopped for an exec that had not reached their stop when it ended.
    pub lingering: Lingering,
    /// `/proc` files of the parents the tree's execs ask about, kept open.
    pub(super) files: ProcFiles,
    /// Denied execs, for the retries of the same PATH lookup (`retry`).
    pub(super) refused: Refusals<()>,
    pub(super) approved_tx: Sender<(u32, u64, u32)>,
    approved_rx: Receiver<(u32, u64, u32)>,
    /// Destinations judged in this tree, and what was decided (`egress`).
    /// Blocking network calls of this tree being made (`egress`).
    pub(super) egress_blocking: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    /// With each, the names the tree had resolved to it then: a decision
    /// holds while they are the same.
    pub(super) egress_seen: std::collections::HashMap<DestKey, Seen>,
    /// Destinations an operator approved for this tree (`egress`).
    pub(super) egress_approved:
        std::sync::Arc<std::sync::Mutex<std::collections::HashSet<DestKey>>>,
    /// The names this tree resolved through the DNS stub (`egress`).
    pub(super) names: Option<std::sync::Arc<crate::dns::TreeNames>>,
    /// The last undecidable refusal explained (task, rule, when): a PATH
    /// retry of it adds no second line.
    pub(super) last_explained: Option<(u32, &'static str, std::time::Instant)>,
}

impl TreeState {
    pub fn new(root_pid: u32) -> TreeState {
        // Approved execs are let through by approval waiters; they report
        // here so the book (owned by the tree's thread) stays right.
        let (approved_tx, approved_rx) = mpsc::channel();
        TreeState {
            root_pid,
            book: DepthBook::default(),
            // Read once, while the tree's root (unixwrap, waiting for the
            // ACK) is surely alive: its parent is the SDK daemon.
            protected: signals::Protected::for_tree(root_pid),
            lingering: Lingering::default(),
            files: ProcFiles::default(),
            refused: Refusals::default(),
            approved_tx,
            approved_rx,
            egress_seen: std::collections::HashMap::new(),
            egress_blocking: std::sync::Arc::default(),
            names: None,
            last_explained: None,
            egress_approved: std::sync::Arc::default(),
        }
    }

    /// Records the execs approval waiters let through since the last call.
    pub fn take_approved(&mut self) {
        while let Ok((pid, starttime, depth)) = self.approved_rx.try_recv() {
            self.book.record(pid, starttime, depth);
            self.files.approved(pid);
        }
    }
}
