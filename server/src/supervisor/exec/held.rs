//! An exec held for an operator (`decision: approve`): what approvals ask
//! about it, and how its end is audited and answered ([`HeldExec`]
//! implements the seam's `Held`).
//!
//! An approved exec runs exactly the file and argv the operator saw: a
//! verifying backend (ptrace) checks the new image itself; otherwise the
//! calling thread is seized before CONTINUE and checked at
//! `PTRACE_EVENT_EXEC` (`verify`), on the approval waiter's thread, which is
//! then the tracer (its tracees are detached by the kernel when the thread
//! ends).
//!
//! Failure modes: an approved exec whose file identity is unknown, or that
//! cannot be watched, is refused (`unverifiable`); one that turns out to run
//! something else is killed before its first instruction (`exec_mismatch`).
//! Each is a second event after the approval's.

use super::verify;
use crate::audit::{Action, ApprovalOutcome, AuditLog, EventBody, ExecEvent, ExecSubject};
use crate::supervisor::ptrace::Lingering;
use crate::supervisor::retry::Lookup;
use crate::supervisor::seam::{
    Expected, Held, HoldKind, HoldRequest, Holder, Settled, Verification, Waiting,
};
use crate::vocab::Refusal;
use std::sync::mpsc::Sender;
use std::sync::Arc;

/// Everything the supervisor knows about a held exec.
pub struct HeldExec {
    pub session_id: String,
    /// The notification it came with (0 under ptrace).
    pub notif_id: u64,
    pub holder: Holder,
    /// The calling thread (watched through the exec once approved).
    pub tid: u32,
    pub starttime: u64,
    /// What the operator approves: the file (device, inode) and argv that
    /// must run; `None` if the file's identity could not be read (then the
    /// exec is refused when approved).
    pub expected: Option<Expected>,
    pub subject: ExecSubject,
    pub rule: String,
    pub message: Option<String>,
    /// The attempt this exec is (see `supervisor::retry`).
    pub attempt: u64,
    /// Its key for the retries of the same lookup (`None`: not reused).
    pub lookup: Option<Lookup>,
    /// Receives `(pid, starttime, depth)` before an approved exec is let
    /// through, for the tree's depth book (kept by the tree's thread).
    pub allowed: Sender<(u32, u64, u32)>,
    /// `execve.explain: stderr`: the caller is told it waits, and why it
    /// was refused.
    pub explain: bool,
    pub audit: Arc<AuditLog>,
}

/// How a held exec ended once an operator approved it.
enum Resumed {
    /// It ran as approved (or failed, or its caller died: nothing else ran).
    AsApproved,
    /// It could not be watched: refused with EACCES instead.
    Refused(String),
    /// What ran was not what the operator approved: killed before its first
    /// instruction. The text says what it was.
    Killed(String),
}

impl Held for HeldExec {
    fn request(&self) -> HoldRequest {
        HoldRequest {
            kind: HoldKind::Exec,
            session_id: self.session_id.clone(),
            pid: self.subject.pid,
            starttime: self.starttime,
            depth: self.subject.depth,
            filename: self.subject.filename.clone(),
            argv: self.subject.argv.clone(),
            file: self.subject.file.clone(),
            rule: self.rule.clone(),
            message: self.message.clone(),
            destination: None,
        }
    }

    fn waiting(&self) -> &dyn Waiting {
        &self.holder
    }

    fn retry_key(&self) -> Option<(Lookup, u64)> {
        self.lookup.clone().map(|k| (k, self.attempt))
    }

    /// Every answer goes to the live notification id, so one the kernel
    /// re-issued after a signal joins the request of the one it replaces.
    fn rejoinable(&self) -> bool {
        true
    }

    fn on_hold(&self, id: &str, timeout: std::time::Duration) {
        if self.explain {
            // Before the wait: an agent that sees nothing for 10 s retries.
            let line = crate::explain::waiting(id, &self.subject.argv, timeout);
            crate::explain::tell(self.tid, &line);
        }
    }

    fn settle(self: Box<Self>, s: Settled) {
        if let Some(attempt) = s.retry_of {
            tracing::info!(id = %s.id, pid = self.subject.pid, "a retry of a refused exec is refused like it");
            self.write_event(&s, attempt, true, None);
            self.holder.refuse(self.notif_id);
            return;
        }
        tracing::info!(id = %s.id, pid = self.subject.pid, outcome = s.outcome.as_str(), "approval finished");
        // A refusal the caller is still there for is explained before it
        // is answered (and before the event, which says whether it was).
        let explained = (!s.allow && s.live.is_some() && self.explain).then(|| self.explain(&s));
        // Written before the answer, as for every exec.
        self.write_event(&s, self.attempt, false, explained);
        let Some(n) = s.live else { return };
        if !s.allow {
            self.holder.refuse(n);
            return;
        }
        let _ = self
            .allowed
            .send((self.subject.pid, self.starttime, self.subject.depth));
        self.resume(&s.id, n);
    }
}

impl HeldExec {
    /// Tells the caller why its exec was refused; whether it was told.
    fn explain(&self, s: &Settled) -> bool {
        let argv0 = self
            .subject
            .argv
            .first()
            .map_or(self.subject.filename.as_str(), String::as_str);
        let id = &s.id;
        let why = match s.outcome {
            ApprovalOutcome::Timeout => format!(
                "approval {id} timed out after {:.0} s",
                s.timeout.as_secs_f64()
            ),
            _ => format!(
                "approval {id} {} by {}{}",
                s.outcome.as_str(),
                s.approver,
                s.reason
                    .as_deref()
                    .map_or_else(String::new, |r| format!(": {r}"))
            ),
        };
        crate::explain::tell(
            self.tid,
            &crate::explain::line(argv0, &self.rule, Some(&why)),
        )
    }

    /// The approval's event: `decision: approve`, with how it ended.
    fn write_event(&self, s: &Settled, attempt: u64, retry: bool, explained: Option<bool>) {
        let mut event = ExecEvent::new(
            self.subject.clone(),
            crate::policy::Decision::Approve,
            self.rule.clone(),
            if s.allow { Action::Allow } else { Action::Deny },
            self.message.clone(),
        )
        .with_approval(&s.id, s.outcome, s.approver.clone(), s.reason.clone())
        .in_attempt(attempt, retry);
        event.explained = explained;
        self.audit
            .record(&self.session_id, EventBody::Execve(event));
    }

    /// Lets the approved exec of notification `n` proceed. The operator
    /// approved this file and argv: what runs is killed if it is anything
    /// else, and that refusal is audited here.
    fn resume(&self, id: &str, n: u64) {
        let resumed = match self.expected.clone() {
            None => {
                self.holder.refuse(n);
                Resumed::Refused("the approved file's identity could not be read".into())
            }
            Some(expected) if self.holder.verifies_every_exec() => {
                // The backend checks the new image at PTRACE_EVENT_EXEC
                // and audits a mismatch itself.
                let v = Verification {
                    expected,
                    subject: self.subject.clone(),
                    rule: self.rule.clone(),
                };
                let _ = self.holder.proceed(n, Some(v));
                Resumed::AsApproved
            }
            Some(expected) => self.watch(n, &expected),
        };
        let refusal = match resumed {
            Resumed::AsApproved => return,
            Resumed::Refused(why) => (Refusal::Unverifiable.rule(), why),
            Resumed::Killed(what) => (
                Refusal::ExecMismatch.rule(),
                format!("killed before its first instruction: {what} (approval {id})"),
            ),
        };
        tracing::warn!(%id, pid = self.subject.pid, "approved exec refused: {}", refusal.1);
        let event = ExecEvent::new(
            self.subject.clone(),
            crate::policy::Decision::Deny,
            refusal.0,
            Action::Deny,
            Some(refusal.1),
        )
        .in_attempt(self.attempt, false);
        self.audit
            .record(&self.session_id, EventBody::Execve(event));
    }

    /// The calling thread seized before CONTINUE and checked at
    /// `PTRACE_EVENT_EXEC` (see `verify`).
    fn watch(&self, n: u64, expected: &Expected) -> Resumed {
        if let Err(e) = verify::arm(self.tid) {
            self.holder.refuse(n);
            return Resumed::Refused(format!(
                "cannot watch the approved exec to verify what runs (ptrace: {e})"
            ));
        }
        // SAFETY ARGUMENT for CONTINUE: the operator approved a file identity
        // and an argv; another thread may have changed the path or argv
        // since, so what the kernel starts is checked at PTRACE_EVENT_EXEC,
        // before its first instruction, and killed if it is not exactly that
        // (`verify::watch`).
        if self.holder.proceed(n, None).is_err() {
            return Resumed::AsApproved; // the caller is gone: nothing runs
        }
        verify::started(self.tid);
        let mut lingering = Lingering::default();
        match verify::watch(
            self.tid,
            self.subject.pid,
            Some(expected),
            None,
            &mut lingering,
        ) {
            verify::Outcome::Killed(what) => Resumed::Killed(what),
            verify::Outcome::TimedOut => Resumed::Refused(format!(
                "killed: the exec did not finish within {:?}, so what it runs could not be \
                 checked",
                verify::EXEC_DEADLINE
            )),
            verify::Outcome::Ran | verify::Outcome::Failed | verify::Outcome::Gone => {
                Resumed::AsApproved
            }
        }
    }
}
