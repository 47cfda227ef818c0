//! Approvals: an exec under a `decision: approve` rule waits for an operator.
//!
//! The supervisor's tree thread never waits for a human. It hands the held
//! notification to [`Approvals::hold`], which registers a pending request and
//! starts one waiter thread for it; the tree thread goes back to serving the
//! rest of the tree. The waiter answers the kernel through the exec's backend
//! (`supervisor::Holder`: the tree's notify fd, shared through `Arc<OwnedFd>`
//! since the notify ioctls are thread-safe; or the ptrace tracer thread) when an
//! operator decides, when the timeout expires (`execve.approval_timeout_action`,
//! deny by default) or when the tracee goes away (`cancelled`). Every outcome
//! is exactly one audit event.
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

use crate::audit::Refusal;
use crate::audit::{self, Action, AuditLog, EventBody, ExecEvent};
use crate::config::{ExecveSection, TimeoutAction};
use crate::supervisor::retry::Refusals;
use crate::supervisor::{HeldConnect, HeldExec, Holder, Verification};
use crate::trees::Trees;
use serde::Serialize;
use std::collections::BTreeMap;
use std::sync::mpsc::Sender;
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
    /// `execve.explain: stderr`: the held exec's caller is told it waits,
    /// and why it was refused.
    explain: bool,
    timeout: Duration,
    timeout_action: TimeoutAction,
    audit: Arc<AuditLog>,
    state: Mutex<State>,
    changed: Condvar,
    /// Bumped on every change, for the API's async long-polls.
    version: tokio::sync::watch::Sender<u64>,
    trees: Arc<Trees>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl crate::supervisor::Hold for Approvals {
    fn hold(self: Arc<Self>, holder: Holder, exec: HeldExec, allowed: Sender<(u32, u64, u32)>) {
        self.hold_exec(holder, exec, allowed);
    }

    fn hold_connect(self: Arc<Self>, holder: Holder, call: HeldConnect) {
        self.hold_destination(holder, call);
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
    pub fn new(limits: &ExecveSection, audit: Arc<AuditLog>, trees: Arc<Trees>) -> Approvals {
        Approvals {
            explain: limits.explain == crate::config::Explain::Stderr,
            timeout: limits.approval_timeout,
            timeout_action: limits.approval_timeout_action,
            audit,
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

    /// Holds `exec` until it is decided, times out or its tracee goes away.
    /// Never blocks: the waiting happens on a new thread. `allowed` receives
    /// (pid, start time, depth) before an approved exec is let through, so the
    /// tree thread can keep its depth book.
    ///
    /// A notification for the same pid, program and argv as a request that is
    /// still open (a signal made the kernel re-issue it) joins that request
    /// instead of prompting twice; one for the same process, file and argv as
    /// a request refused moments ago (the next PATH entry) is refused the same
    /// way at once, audited as a retry of it.
    pub fn hold_exec(
        self: &Arc<Self>,
        holder: Holder,
        exec: HeldExec,
        allowed: Sender<(u32, u64, u32)>,
    ) {
        let now = SystemTime::now();
        let id = {
            let mut st = lock(&self.state);
            let repeat = exec
                .lookup
                .as_ref()
                .and_then(|k| st.refused.find(k, Instant::now()));
            if let Some((attempt, f)) = repeat {
                drop(st);
                self.refuse_retry(&holder, HeldExec { attempt, ..exec }, f);
                return;
            }
            if Self::join_open_request(&mut st, &exec) {
                drop(st);
                self.notify_changed();
                return;
            }
            self.new_request(&mut st, &exec, now)
        };
        self.notify_changed();
        tracing::info!(%id, pid = exec.subject.pid, filename = %exec.subject.filename, "exec waits for approval");
        if self.explain {
            // Before the wait: an agent that sees nothing for 10 s retries.
            let line = crate::supervisor::explain::waiting(&id, &exec.subject.argv, self.timeout);
            crate::supervisor::explain::tell(exec.tid, &line);
        }
        self.start_waiter(id, holder, exec, allowed);
    }

    /// A retry of the exec refused as `f`: refused the same way at once,
    /// audited as a retry of it.
    fn refuse_retry(&self, holder: &Holder, exec: HeldExec, f: Finished) {
        tracing::info!(id = %f.id, pid = exec.subject.pid, "a retry of a refused exec is refused like it");
        self.record(&exec, &f.id, f.verdict, false, true);
        holder.refuse(exec.notif_id);
    }

    /// A re-issued notification (same pid, program and argv as a request
    /// still open) joins that request: whether it did.
    fn join_open_request(st: &mut State, exec: &HeldExec) -> bool {
        let Some(e) = st.pending.values_mut().find(|e| {
            e.request.pid == exec.subject.pid
                && e.starttime == exec.starttime
                && e.request.session_id == exec.session_id
                && e.request.filename == exec.subject.filename
                && e.request.argv == exec.subject.argv
        }) else {
            return false;
        };
        tracing::info!(
            id = %e.request.id,
            pid = exec.subject.pid,
            "re-issued exec joins its pending approval"
        );
        e.notif_ids.push(exec.notif_id);
        true
    }

    /// Registers a new pending request for `exec` (held since `now`) and
    /// returns its id.
    fn new_request(&self, st: &mut State, exec: &HeldExec, now: SystemTime) -> String {
        st.seq += 1;
        let seq = st.seq;
        let id = format!(
            "ap-{seq}-{}",
            token::random_hex(4).unwrap_or_else(|_| format!("{:08x}", exec.notif_id as u32))
        );
        let request = ApprovalRequest {
            id: id.clone(),
            kind: "exec",
            seq,
            session_id: exec.session_id.clone(),
            pid: exec.subject.pid,
            depth: exec.subject.depth,
            filename: exec.subject.filename.clone(),
            argv: exec.subject.argv.clone(),
            file: exec.subject.file.clone(),
            rule: exec.rule.clone(),
            message: exec.message.clone(),
            waiting_since: audit::rfc3339_at(now),
            expires_at: audit::rfc3339_at(now + self.timeout),
            destination: None,
        };
        st.pending.insert(
            id.clone(),
            Entry {
                request,
                notif_ids: vec![exec.notif_id],
                starttime: exec.starttime,
                verdict: None,
            },
        );
        id
    }

    /// Holds a connect or send until it is decided, times out or its
    /// thread goes away; never blocks (the waiting is on a thread of its
    /// own). Approved: the call is made for the tree and its result is the
    /// answer; otherwise EACCES. One `connect` event, when it ends.
    pub fn hold_destination(self: &Arc<Self>, holder: Holder, call: HeldConnect) {
        let now = SystemTime::now();
        let id = {
            let mut st = lock(&self.state);
            st.seq += 1;
            let seq = st.seq;
            let id = format!(
                "ap-{seq}-{}",
                token::random_hex(4).unwrap_or_else(|_| format!("{:08x}", call.tid))
            );
            let dest = ApprovalDestination {
                host: call.host.clone(),
                ip: call.ip.to_string(),
                port: call.port,
                protocol: call.protocol.to_string(),
            };
            let request = ApprovalRequest {
                id: id.clone(),
                kind: "connect",
                seq,
                session_id: call.session_id.clone(),
                pid: call.tid,
                depth: 0,
                filename: call.syscall.to_string(),
                argv: Vec::new(),
                file: None,
                rule: call.rule.clone(),
                message: None,
                waiting_since: audit::rfc3339_at(now),
                expires_at: audit::rfc3339_at(now + self.timeout),
                destination: Some(dest),
            };
            st.pending.insert(
                id.clone(),
                Entry {
                    request,
                    notif_ids: vec![holder.notif_id()],
                    starttime: 0,
                    verdict: None,
                },
            );
            id
        };
        self.notify_changed();
        tracing::info!(%id, pid = call.tid, ip = %call.ip, port = call.port, "connect waits for approval");
        let me = self.clone();
        let (waiter_id, waiter_holder) = (id.clone(), holder.clone());
        let parked = Arc::new(Mutex::new(Some(call)));
        let for_waiter = parked.clone();
        let spawned = std::thread::Builder::new()
            .name("agentsh-approval".into())
            .spawn(move || {
                if let Some(call) = lock(&for_waiter).take() {
                    me.wait_and_connect(&waiter_id, waiter_holder, call);
                }
            });
        if let Err(e) = spawned {
            tracing::error!(%id, "cannot start approval waiter: {e}; connect refused");
            lock(&self.state).pending.remove(&id);
            holder.answer_value(-i64::from(libc::EACCES));
            if let Some(call) = lock(&parked).take() {
                let verdict = Verdict {
                    outcome: Outcome::Denied,
                    approver: "server".into(),
                    reason: Some(format!("cannot wait for approval: {e}")),
                };
                self.record_connect(&call, &id, verdict, false);
            }
        }
    }

    /// The waiter of one held connect.
    fn wait_and_connect(&self, id: &str, holder: Holder, call: HeldConnect) {
        let Some((verdict, live)) = self.wait_for_verdict(id, &holder) else {
            return;
        };
        let allow = match verdict.outcome {
            Outcome::Approved => true,
            Outcome::Denied | Outcome::Cancelled => false,
            Outcome::Timeout => self.timeout_action == TimeoutAction::Allow,
        };
        let live = live.and_then(|n| holder.live(&[n]));
        let (outcome, reason) = if live.is_some() || verdict.outcome == Outcome::Cancelled {
            (verdict.outcome, verdict.reason)
        } else {
            (
                Outcome::Cancelled,
                Some("the thread stopped waiting before the answer".into()),
            )
        };
        let effective = allow && live.is_some();
        tracing::info!(%id, pid = call.tid, outcome = outcome.as_str(), "connect approval finished");
        let verdict = Verdict {
            outcome,
            approver: verdict.approver,
            reason,
        };
        // Written before the answer, as for every exec.
        self.record_connect(&call, id, verdict, effective);
        if live.is_none() {
            return;
        }
        if effective {
            holder.answer_value((call.perform)());
        } else {
            holder.answer_value(-i64::from(libc::EACCES));
        }
    }

    fn record_connect(&self, call: &HeldConnect, id: &str, verdict: Verdict, allowed: bool) {
        self.audit.record(
            &call.session_id,
            EventBody::Connect(audit::ConnectEvent {
                pid: call.tid,
                syscall: call.syscall.to_string(),
                host: call.host.clone(),
                ip: Some(call.ip.to_string()),
                port: Some(call.port),
                protocol: Some(call.protocol.to_string()),
                rule: call.rule.clone(),
                decision: crate::policy::Decision::Approve,
                message: None,
                effective_action: Some(if allowed { Action::Allow } else { Action::Deny }),
                approval_id: Some(id.to_string()),
                approval_outcome: Some(verdict.outcome),
                approver: Some(verdict.approver),
                reason: verdict.reason,
            }),
        );
    }

    /// Starts the waiter of request `id`; without one, the exec is denied
    /// (fail closed: no thread to wait, so no approval).
    fn start_waiter(
        self: &Arc<Self>,
        id: String,
        holder: Holder,
        exec: HeldExec,
        allowed: Sender<(u32, u64, u32)>,
    ) {
        let me = self.clone();
        let spawned = std::thread::Builder::new()
            .name("agentsh-approval".into())
            .spawn({
                let id = id.clone();
                let holder = holder.clone();
                let exec = exec.clone();
                move || me.wait_and_answer(&id, &holder, exec, allowed)
            });
        if let Err(e) = spawned {
            // Fail closed: no thread to wait, so no approval.
            tracing::error!(%id, "cannot start approval waiter: {e}; exec denied");
            lock(&self.state).pending.remove(&id);
            holder.refuse(exec.notif_id);
            let verdict = Verdict {
                outcome: Outcome::Denied,
                approver: "server".into(),
                reason: Some(format!("cannot wait for approval: {e}")),
            };
            self.record(&exec, &id, verdict, false, false);
        }
    }

    /// The waiter: one per request.
    fn wait_and_answer(
        &self,
        id: &str,
        holder: &Holder,
        exec: HeldExec,
        allowed: Sender<(u32, u64, u32)>,
    ) {
        let Some((verdict, live)) = self.wait_for_verdict(id, holder) else {
            // Cannot happen (only this thread removes its entry); fail closed.
            return;
        };
        let allow = match verdict.outcome {
            Outcome::Approved => true,
            Outcome::Denied | Outcome::Cancelled => false,
            Outcome::Timeout => self.timeout_action == TimeoutAction::Allow,
        };
        // Re-check right before answering: the notification must still name
        // the tracee whose facts were judged. The event is written before the
        // answer, as for every exec (see supervisor::handle).
        let live = live.and_then(|n| holder.live(&[n]));
        let (outcome, reason) = if live.is_some() || verdict.outcome == Outcome::Cancelled {
            (verdict.outcome, verdict.reason)
        } else {
            (
                Outcome::Cancelled,
                Some("the process stopped waiting before the answer".into()),
            )
        };
        let effective_allow = allow && live.is_some();
        tracing::info!(%id, pid = exec.subject.pid, outcome = outcome.as_str(), "approval finished");
        let verdict = Verdict {
            outcome,
            approver: verdict.approver,
            reason,
        };
        // A refusal the caller is still there for is explained before it
        // is answered (and before the event, which says whether it was).
        let explained = (!effective_allow && live.is_some() && self.explain).then(|| {
            let argv0 = exec
                .subject
                .argv
                .first()
                .map_or(exec.subject.filename.as_str(), String::as_str);
            let why = match verdict.outcome {
                Outcome::Timeout => format!(
                    "approval {id} timed out after {:.0} s",
                    self.timeout.as_secs_f64()
                ),
                _ => format!(
                    "approval {id} {} by {}{}",
                    verdict.outcome.as_str(),
                    verdict.approver,
                    verdict
                        .reason
                        .as_deref()
                        .map_or_else(String::new, |r| format!(": {r}"))
                ),
            };
            crate::supervisor::explain::tell(
                exec.tid,
                &crate::supervisor::explain::line(argv0, &exec.rule, Some(&why)),
            )
        });
        self.record_explained(&exec, id, verdict.clone(), effective_allow, explained);
        let Some(n) = live else { return };
        if !effective_allow {
            // Remembered before the answer: the retry it may cause finds it.
            if let Some(k) = exec.lookup.clone() {
                let finished = Finished {
                    id: id.to_string(),
                    verdict,
                };
                lock(&self.state)
                    .refused
                    .remember(k, exec.attempt, finished, Instant::now());
            }
            holder.refuse(n);
            return;
        }
        let _ = allowed.send((exec.subject.pid, exec.starttime, exec.subject.depth));
        self.resume_approved(id, holder, &exec, n);
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

    /// Lets the approved exec of notification `n` proceed. The operator
    /// approved this file and argv: the supervisor kills what runs if it is
    /// anything else, and that refusal is audited here.
    fn resume_approved(&self, id: &str, holder: &Holder, exec: &HeldExec, n: u64) {
        let what = exec.expected.clone().map(|expected| Verification {
            expected,
            subject: exec.subject.clone(),
            rule: exec.rule.clone(),
        });
        let resumed = holder.resume(n, exec.tid, exec.subject.pid, what);
        let refusal = match resumed {
            crate::supervisor::Resumed::AsApproved => return,
            crate::supervisor::Resumed::Refused(why) => (Refusal::Unverifiable.rule(), why),
            crate::supervisor::Resumed::Killed(what) => (
                Refusal::ExecMismatch.rule(),
                format!("killed before its first instruction: {what} (approval {id})"),
            ),
        };
        tracing::warn!(%id, pid = exec.subject.pid, "approved exec refused: {}", refusal.1);
        let event = ExecEvent::new(
            exec.subject.clone(),
            crate::policy::Decision::Deny,
            refusal.0,
            Action::Deny,
            Some(refusal.1),
        )
        .in_attempt(exec.attempt, false);
        self.audit
            .record(&exec.session_id, EventBody::Execve(event));
    }

    fn record(&self, exec: &HeldExec, id: &str, verdict: Verdict, allowed: bool, retry: bool) {
        self.write_event(exec, id, verdict, allowed, retry, None);
    }

    /// [`Approvals::record`] of a finished wait, with whether its caller was
    /// told (`execve.explain`).
    fn record_explained(
        &self,
        exec: &HeldExec,
        id: &str,
        verdict: Verdict,
        allowed: bool,
        explained: Option<bool>,
    ) {
        self.write_event(exec, id, verdict, allowed, false, explained);
    }

    fn write_event(
        &self,
        exec: &HeldExec,
        id: &str,
        verdict: Verdict,
        allowed: bool,
        retry: bool,
        explained: Option<bool>,
    ) {
        let mut event = ExecEvent::new(
            exec.subject.clone(),
            crate::policy::Decision::Approve,
            exec.rule.clone(),
            if allowed { Action::Allow } else { Action::Deny },
            exec.message.clone(),
        )
        .with_approval(id, verdict.outcome, verdict.approver, verdict.reason)
        .in_attempt(exec.attempt, retry);
        event.explained = explained;
        self.audit
            .record(&exec.session_id, EventBody::Execve(event));
    }
}

#[cfg(test)]
mod tests;
