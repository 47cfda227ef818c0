//! Every pending approval of the server: the table of requests the API
//! lists, long-polls and decides, and what the waiters share with it.
//!
//! Failure modes: a decision for a request that is unknown, finished or
//! already decided is a [`DecideError`]; a lock a panicking thread held is
//! taken over, not propagated.

use super::request::ApprovalRequest;
use crate::audit::ApprovalOutcome as Outcome;
use crate::config::{ExecveSection, TimeoutAction};
use crate::supervisor::retry::Refusals;
use crate::trees::Trees;
use std::collections::BTreeMap;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Duration;

/// An operator's answer.
#[derive(Debug, Clone)]
pub(super) struct Verdict {
    pub(super) outcome: Outcome,
    pub(super) approver: String,
    pub(super) reason: Option<String>,
}

pub(super) struct Entry {
    pub(super) request: ApprovalRequest,
    /// Notification ids of this exec; more than one when a signal made the
    /// kernel re-issue it. The last one is the live one.
    pub(super) notif_ids: Vec<u64>,
    pub(super) starttime: u64,
    pub(super) verdict: Option<Verdict>,
}

#[derive(Default)]
pub(super) struct State {
    pub(super) pending: BTreeMap<String, Entry>,
    pub(super) seq: u64,
    /// Requests that ended in a refusal, for the retries of the same lookup
    /// (`supervisor::retry`): answered the same, without a new request.
    pub(super) refused: Refusals<Finished>,
}

/// How a refused request ended, as its retries repeat it.
#[derive(Debug, Clone)]
pub(super) struct Finished {
    pub(super) id: String,
    pub(super) verdict: Verdict,
}

/// Why a decision was not taken.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum DecideError {
    #[error("no pending approval {0:?} (unknown, or already finished)")]
    NotFound(String),
    #[error("approval {0:?} was already decided")]
    AlreadyDecided(String),
}

/// Every pending approval of the server, and who may decide them.
pub struct Approvals {
    pub(super) timeout: Duration,
    pub(super) timeout_action: TimeoutAction,
    pub(super) state: Mutex<State>,
    pub(super) changed: Condvar,
    /// Bumped on every change, for the API's async long-polls.
    version: tokio::sync::watch::Sender<u64>,
    pub(super) trees: Arc<Trees>,
}

/// Locks `m`, taking it over if a thread panicked holding it.
pub(super) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Approvals {
    pub fn new(limits: &ExecveSection, trees: Arc<Trees>) -> Approvals {
        Approvals {
            timeout: limits.approval_timeout,
            timeout_action: limits.approval_timeout_action,
            state: Mutex::new(State::default()),
            changed: Condvar::new(),
            version: tokio::sync::watch::Sender::new(0),
            trees,
        }
    }

    /// Wakes every waiter: the blocking ones and the API's long-polls.
    pub(super) fn notify_changed(&self) {
        self.changed.notify_all();
        self.version.send_modify(|v| *v += 1);
    }

    /// Pending (undecided) requests with `seq > after`, oldest first.
    pub fn pending(&self, after: u64) -> Vec<ApprovalRequest> {
        let st = lock(&self.state);
        Self::pending_of(&st, after)
    }

    fn pending_of(st: &State, after: u64) -> Vec<ApprovalRequest> {
        let mut v: Vec<ApprovalRequest> = st
            .pending
            .values()
            .filter(|e| e.verdict.is_none() && e.request.seq > after)
            .map(|e| e.request.clone())
            .collect();
        v.sort_by_key(|r| r.seq);
        v
    }

    /// Like [`Approvals::pending`], but waits up to `wait` for at least one
    /// (a parked future: a long-poll holds no thread).
    pub async fn wait_pending(&self, after: u64, wait: Duration) -> Vec<ApprovalRequest> {
        let deadline = tokio::time::Instant::now() + wait;
        let mut rx = self.version.subscribe();
        loop {
            let found = self.pending(after);
            if !found.is_empty() {
                return found;
            }
            match tokio::time::timeout_at(deadline, rx.changed()).await {
                Ok(Ok(())) => continue,
                _ => return self.pending(after),
            }
        }
    }

    /// Records an operator's decision; the waiter answers the kernel.
    ///
    /// # Errors
    /// The request is unknown, finished, or already decided.
    pub fn decide(
        &self,
        id: &str,
        approve: bool,
        approver: String,
        reason: Option<String>,
    ) -> Result<(), DecideError> {
        let mut st = lock(&self.state);
        let e = st
            .pending
            .get_mut(id)
            .ok_or_else(|| DecideError::NotFound(id.to_string()))?;
        if e.verdict.is_some() {
            return Err(DecideError::AlreadyDecided(id.to_string()));
        }
        e.verdict = Some(Verdict {
            outcome: if approve {
                Outcome::Approved
            } else {
                Outcome::Denied
            },
            approver,
            reason,
        });
        drop(st);
        self.notify_changed();
        Ok(())
    }
}
