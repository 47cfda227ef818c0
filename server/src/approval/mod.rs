//! Approvals: a call under a `decision: approve` rule (an exec, a connect or
//! send) waits for an operator.
//!
//! The supervisor's tree thread never waits for a human. It hands the held
//! call (`supervisor::Held`, whichever family held it) to the `Hold` seam,
//! which registers a pending request and starts one waiter thread for it;
//! the tree thread goes back to serving the rest of the tree. The waiter
//! waits for an operator's decision, the timeout
//! (`execve.approval_timeout_action`, deny by default) or the caller going
//! away (`cancelled`), then hands the end to the family that held the call
//! (`Held::settle`), which audits it (exactly one event per outcome) and
//! answers the kernel through the call's backend (`supervisor::Holder`).
//! This module knows no family: one waiter, one way to settle.
//!
//! Who may decide: the operator (see the `api` module: uid 0 on the Unix
//! socket, the root-only token on TCP) *and* not a process of a supervised
//! tree. The second check covers a tree running as root, which could read
//! the token file unless Landlock hides it: a TCP peer's socket is mapped to
//! its owning processes through `/proc/net/tcp{,6}` and `/proc/<pid>/fd`, and
//! each owner (like a Unix peer) is refused if it is inside a tree
//! (`trees::Trees::in_tree_or_filtered`). See docs/approvals.md for what this
//! does not cover.
//!
//! Failure modes: a waiter that cannot answer (tracee gone) records
//! `cancelled`; a decision whose requester cannot be identified is refused.

use crate::audit;
use crate::config::{ExecveSection, TimeoutAction};
use crate::supervisor::retry::Refusals;
use crate::supervisor::{Held, Hold, HoldRequest, Holder, Settled};
use crate::trees::Trees;
use serde::Serialize;
use std::collections::BTreeMap;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime};

mod peer;
mod token;

pub use peer::Requester;
pub use token::{create_token_file, TOKEN_FILE};

/// How often a waiter checks that its tracee is still waiting.
const LIVENESS_POLL: Duration = Duration::from_millis(150);
/// How long a request may have no live notification before it is cancelled:
/// long enough for a signal-restarted execve to be re-issued and re-attached.
const REISSUE_GRACE: Duration = Duration::from_millis(300);

/// How a request ended (the audit's enum).
pub use crate::audit::ApprovalOutcome as Outcome;

/// One exec held for an operator, as the API lists it.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct ApprovalRequest {
    pub id: String,
    /// `exec`, or `connect` (a destination: `destination` says which).
    pub kind: &'static str,
    /// Increases with every new request (for `?after=`).
    pub seq: u64,
    pub session_id: String,
    pub pid: u32,
    pub depth: u32,
    pub filename: String,
    pub argv: Vec<String>,
    /// The file the operator approves (device, inode): what runs must be it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub file: Option<crate::audit::FileIdentity>,
    pub rule: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    pub waiting_since: String,
    pub expires_at: String,
    /// What a held connect or send would reach.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub destination: Option<ApprovalDestination>,
}

/// An operator's answer.
#[derive(Debug, Clone)]
struct Verdict {
    outcome: Outcome,
    approver: String,
    reason: Option<String>,
}

struct Entry {
    request: ApprovalRequest,
    /// Notification ids of this exec; more than one when a signal made the
    /// kernel re-issue it. The last one is the live one.
    notif_ids: Vec<u64>,
    starttime: u64,
    verdict: Option<Verdict>,
}

#[derive(Default)]
struct State {
    pending: BTreeMap<String, Entry>,
    seq: u64,
    /// Requests that ended in a refusal, for the retries of the same lookup
    /// (`supervisor::retry`): answered the same, without a new request.
    refused: Refusals<Finished>,
}

/// How a refused request ended, as its retries repeat it.
#[derive(Debug, Clone)]
struct Finished {
    id: String,
    verdict: Verdict,
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
    timeout: Duration,
    timeout_action: TimeoutAction,
    state: Mutex<State>,
    changed: Condvar,
    /// Bumped on every change, for the API's async long-polls.
    version: tokio::sync::watch::Sender<u64>,
    trees: Arc<Trees>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Hold for Approvals {
    fn hold(self: Arc<Self>, held: Box<dyn Held>) {
        self.hold_call(held);
    }
}

/// The destination of a held connect, as the API lists it.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct ApprovalDestination {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    pub ip: String,
    pub port: u16,
    pub protocol: String,
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
    fn notify_changed(&self) {
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

    /// Holds `held` until it is decided, times out or its caller goes away.
    /// Never blocks: the waiting happens on a new thread, which settles it
    /// (the family that held it audits and answers).
    ///
    /// A notification for the same process, program and argv as a request
    /// that is still open (a signal made the kernel re-issue it) joins that
    /// request instead of prompting twice, where the call allows it; one
    /// with the same retry key as a request refused moments ago (the next
    /// PATH entry) is refused the same way at once, as a retry of it.
    fn hold_call(self: &Arc<Self>, held: Box<dyn Held>) {
        let now = SystemTime::now();
        let request = held.request();
        let notif_id = held.holder().notif_id();
        let id = {
            let mut st = lock(&self.state);
            let repeat = held
                .retry_key()
                .and_then(|(k, _)| st.refused.find(&k, Instant::now()));
            if let Some((attempt, f)) = repeat {
                drop(st);
                held.settle(Settled {
                    id: f.id,
                    outcome: f.verdict.outcome,
                    approver: f.verdict.approver,
                    reason: f.verdict.reason,
                    allow: false,
                    live: Some(notif_id),
                    retry_of: Some(attempt),
                    timeout: self.timeout,
                });
                return;
            }
            if held.rejoinable() && Self::join_open_request(&mut st, &request, notif_id) {
                drop(st);
                self.notify_changed();
                return;
            }
            self.new_request(&mut st, request, notif_id, now)
        };
        self.notify_changed();
        held.on_hold(&id, self.timeout);
        self.start_waiter(id, held);
    }

    /// A re-issued notification (same process, program and argv as a
    /// request still open) joins that request: whether it did.
    fn join_open_request(st: &mut State, r: &HoldRequest, notif_id: u64) -> bool {
        let Some(e) = st.pending.values_mut().find(|e| {
            e.request.pid == r.pid
                && e.starttime == r.starttime
                && e.request.kind == r.kind.as_str()
                && e.request.session_id == r.session_id
                && e.request.filename == r.filename
                && e.request.argv == r.argv
        }) else {
            return false;
        };
        tracing::info!(
            id = %e.request.id,
            pid = r.pid,
            "re-issued call joins its pending approval"
        );
        e.notif_ids.push(notif_id);
        true
    }

    /// Registers a new pending request for `r` (held since `now`) and
    /// returns its id.
    fn new_request(
        &self,
        st: &mut State,
        r: HoldRequest,
        notif_id: u64,
        now: SystemTime,
    ) -> String {
        st.seq += 1;
        let seq = st.seq;
        let id = format!(
            "ap-{seq}-{}",
            token::random_hex(4).unwrap_or_else(|_| format!("{:08x}", notif_id as u32 ^ r.pid))
        );
        match &r.destination {
            None => {
                tracing::info!(%id, pid = r.pid, filename = %r.filename, "{} waits for approval", r.kind.as_str());
            }
            Some(d) => {
                tracing::info!(%id, pid = r.pid, ip = %d.ip, port = d.port, "{} waits for approval", r.kind.as_str());
            }
        }
        let request = ApprovalRequest {
            id: id.clone(),
            kind: r.kind.as_str(),
            seq,
            session_id: r.session_id,
            pid: r.pid,
            depth: r.depth,
            filename: r.filename,
            argv: r.argv,
            file: r.file,
            rule: r.rule,
            message: r.message,
            waiting_since: audit::rfc3339_at(now),
            expires_at: audit::rfc3339_at(now + self.timeout),
            destination: r.destination.map(|d| ApprovalDestination {
                host: d.host,
                ip: d.ip.to_string(),
                port: d.port,
                protocol: d.protocol.to_string(),
            }),
        };
        st.pending.insert(
            id.clone(),
            Entry {
                request,
                notif_ids: vec![notif_id],
                starttime: r.starttime,
                verdict: None,
            },
        );
        id
    }

    /// Starts the waiter of request `id`; without one, the call is refused
    /// (fail closed: no thread to wait, so no approval).
    fn start_waiter(self: &Arc<Self>, id: String, held: Box<dyn Held>) {
        let me = self.clone();
        let notif_id = held.holder().notif_id();
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
        let holder = held.holder().clone();
        let Some((verdict, live)) = self.wait_for_verdict(id, &holder) else {
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
        let live = live.and_then(|n| holder.live(&[n]));
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
    fn wait_for_verdict(&self, id: &str, holder: &Holder) -> Option<(Verdict, Option<u64>)> {
        let expires = Instant::now() + self.timeout;
        let mut lost_since: Option<Instant> = None;
        let mut st = lock(&self.state);
        let (verdict, live) = loop {
            let e = st.pending.get(id)?;
            // The last id still valid is the one to answer.
            let live = holder.live(&e.notif_ids);
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

#[cfg(test)]
mod tests;
