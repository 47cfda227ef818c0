//! What the exec family keeps of a tree between calls: its depth book, the
//! refusals a PATH retry repeats, the execs approval waiters let through
//! (reported here so the book, owned by the tree's thread, stays right),
//! and the last undecidable refusal explained.
//!
//! Failure modes: none of its own.

use super::depth::DepthBook;
use crate::supervisor::retry::Refusals;
use crate::supervisor::tasks::Tasks;
use std::sync::mpsc::{self, Receiver, Sender};

/// `(pid, starttime, depth)` of an exec an approval waiter let through.
pub type Approved = (u32, u64, u32);

/// The exec family's part of a tree's state.
pub struct ExecState {
    pub(super) book: DepthBook,
    /// Denied execs, for the retries of the same PATH lookup (`retry`).
    pub(super) refused: Refusals<()>,
    pub(super) approved_tx: Sender<Approved>,
    approved_rx: Receiver<Approved>,
    /// The last undecidable refusal explained (task, rule, when): a PATH
    /// retry of it adds no second line.
    pub(super) last_explained: Option<(u32, &'static str, std::time::Instant)>,
}

impl Default for ExecState {
    fn default() -> ExecState {
        let (approved_tx, approved_rx) = mpsc::channel();
        ExecState {
            book: DepthBook::default(),
            refused: Refusals::default(),
            approved_tx,
            approved_rx,
            last_explained: None,
        }
    }
}

impl ExecState {
    /// Records the execs approval waiters let through since the last call.
    pub fn take_approved(&mut self, tasks: &mut Tasks) {
        while let Ok((pid, starttime, depth)) = self.approved_rx.try_recv() {
            self.book.record(pid, starttime, depth);
            tasks.files.approved(pid);
        }
    }
}

/// The exec family's view of a tree's state: its own part and the tasks.
pub(super) struct ExecTree<'a> {
    pub(super) tasks: &'a mut Tasks,
    pub(super) exec: &'a mut ExecState,
}
