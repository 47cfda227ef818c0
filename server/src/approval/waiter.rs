//! The waiter: one thread per request. It waits for the operator's
//! verdict, the timeout or the caller going away, checks the call still
//! waits, remembers a refusal for its retries, and hands the end to the
//! family that held the call (`Held::settle`).
//!
//! Failure modes: a waiter thread that cannot start refuses the call (fail
//! closed); a caller gone for longer than [`REISSUE_GRACE`] ends the
//! request `cancelled`.

use super::pending::{lock, Approvals, Finished, Verdict};
use crate::audit::ApprovalOutcome as Outcome;
use crate::config::TimeoutAction;
use crate::supervisor::{Held, Settled, Waiting};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How often a waiter checks that its tracee is still waiting.
const LIVENESS_POLL: Duration = Duration::from_millis(150);
/// How long a request may have no live notification before it is cancelled:
/// long enough for a signal-restarted execve to be re-issued and re-attached.
const REISSUE_GRACE: Duration = Duration::from_millis(300);

impl Approvals {
    /// Starts the waiter of request `id`; without one, the call is refused
    /// (fail closed: no thread to wait, so no approval).
    pub(super) fn start_waiter(self: &Arc<Self>, id: String, held: Box<dyn Held>) {
        let me = self.clone();
        let notif_id = held.waiting().notif_id();
        // Parked where both the waiter and this thread can reach it: a
        // thread that cannot start drops its closure, and the call must
        // still be settled.
        let parked = Arc::new(Mutex::new(Some(held)));
        let for_waiter = parked.clone();
        let waiter_id = id.clone();
        let spawned = std::thread::Builder::new()
            .name("agentsh-approval".into())
            .spawn(move || {
                if let Some(held) = lock(&for_waiter).take() {
                    me.wait_and_settle(&waiter_id, held);
                }
            });
        if let Err(e) = spawned {
            tracing::error!(%id, "cannot start approval waiter: {e}; refused");
            lock(&self.state).pending.remove(&id);
            if let Some(held) = lock(&parked).take() {
                held.settle(Settled {
                    id,
                    outcome: Outcome::Denied,
                    approver: "server".into(),
                    reason: Some(format!("cannot wait for approval: {e}")),
                    allow: false,
                    live: Some(notif_id),
                    retry_of: None,
                    timeout: self.timeout,
                });
            }
        }
    }

    /// The waiter: one per request. Waits for the verdict, checks the call
    /// still waits, remembers a refusal for its retries, and hands the end
    /// to the family that held it.
    fn wait_and_settle(&self, id: &str, held: Box<dyn Held>) {
        let waiting = held.waiting();
        let Some((verdict, live)) = self.wait_for_verdict(id, waiting) else {
            // Cannot happen (only this thread removes its entry); fail closed.
            return;
        };
        let allow = match verdict.outcome {
            Outcome::Approved => true,
            Outcome::Denied | Outcome::Cancelled => false,
            Outcome::Timeout => self.timeout_action == TimeoutAction::Allow,
        };
        // Re-check right before answering: the notification must still name
        // the caller whose facts were judged.
        let live = live.and_then(|n| waiting.live(&[n]));
        let (outcome, reason) = if live.is_some() || verdict.outcome == Outcome::Cancelled {
            (verdict.outcome, verdict.reason)
        } else {
            (
                Outcome::Cancelled,
                Some("the caller stopped waiting before the answer".into()),
            )
        };
        let verdict = Verdict {
            outcome,
            approver: verdict.approver,
            reason,
        };
        let allow = allow && live.is_some();
        if let (false, Some(_), Some((k, attempt))) = (allow, live, held.retry_key()) {
            // Remembered before the answer: the retry it may cause finds it.
            let finished = Finished {
                id: id.to_string(),
                verdict: verdict.clone(),
            };
            lock(&self.state)
                .refused
                .remember(k, attempt, finished, Instant::now());
        }
        held.settle(Settled {
            id: id.to_string(),
            outcome: verdict.outcome,
            approver: verdict.approver,
            reason: verdict.reason,
            allow,
            live,
            retry_of: None,
            timeout: self.timeout,
        });
    }

    /// Waits until request `id` is decided, times out, or its tracee stops
    /// waiting (no live notification for [`REISSUE_GRACE`]), then removes
    /// it. Returns the verdict and the live notification id (`None`: the
    /// tracee is gone); `None` if the request is not there.
    fn wait_for_verdict(&self, id: &str, waiting: &dyn Waiting) -> Option<(Verdict, Option<u64>)> {
        let expires = Instant::now() + self.timeout;
        let mut lost_since: Option<Instant> = None;
        let mut st = lock(&self.state);
        let (verdict, live) = loop {
            let e = st.pending.get(id)?;
            // The last id still valid is the one to answer.
            let live = waiting.live(&e.notif_ids);
            match live {
                Some(_) => lost_since = None,
                None => {
                    let since = *lost_since.get_or_insert_with(Instant::now);
                    if since.elapsed() >= REISSUE_GRACE {
                        break (
                            Verdict {
                                outcome: Outcome::Cancelled,
                                approver: "none".into(),
                                reason: Some(
                                    "the process stopped waiting (killed or exited)".into(),
                                ),
                            },
                            None,
                        );
                    }
                }
            }
            if live.is_some() {
                if let Some(v) = &e.verdict {
                    break (v.clone(), live);
                }
                if Instant::now() >= expires {
                    break (self.timed_out(), live);
                }
            }
            let left = expires.saturating_duration_since(Instant::now());
            let nap = if left.is_zero() {
                LIVENESS_POLL
            } else {
                left.min(LIVENESS_POLL)
            };
            st = self
                .changed
                .wait_timeout(st, nap)
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .0;
        };
        st.pending.remove(id);
        drop(st);
        self.notify_changed();
        Some((verdict, live))
    }

    /// The verdict of a request nobody answered in time.
    fn timed_out(&self) -> Verdict {
        Verdict {
            outcome: Outcome::Timeout,
            approver: "timeout".into(),
            reason: Some(format!(
                "no answer within {:?}; execve.approval_timeout_action={}",
                self.timeout,
                match self.timeout_action {
                    TimeoutAction::Deny => "deny",
                    TimeoutAction::Allow => "allow",
                }
            )),
        }
    }
}
