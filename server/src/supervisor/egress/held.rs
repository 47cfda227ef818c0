//! A connect or send held for an operator (an `egress` rule or default
//! `approve`): what approvals ask about it, and how its end is audited and
//! answered ([`HeldConnect`] implements the seam's `Held`).
//!
//! The call is made for the tree only once approved, by the approval's
//! waiter, with the copy judged; its result is the answer. A call judged
//! in place (`in_place`) runs again instead, from its start: it comes back
//! through the filter and is judged anew in the caller's memory as it is
//! then. Approved once, the destination is allowed for the rest of the
//! tree.
//!
//! Failure modes: a caller gone before the answer gets nothing (the call
//! is not made); a call refused or timed out is answered EACCES.

use super::call::{Call, EgressTree};
use super::judge::ToApprove;
use super::state::DestKey;
use crate::audit::{self, Action, ApprovalOutcome, AuditLog, EventBody};
use crate::explain;
use crate::supervisor::seam::{
    Held, HeldDestination, HoldKind, HoldRequest, Holder, Settled, Waiting,
};
use std::collections::HashSet;
use std::sync::{Arc, Mutex};

/// What an approved call does.
pub enum Then {
    /// Made for the tree (on the socket taken from it, with the
    /// supervisor's copy); its answer value.
    Perform(Box<dyn FnOnce() -> i64 + Send>),
    /// The caller's own call runs again from its start and is judged anew
    /// (its destination approved by then): a call judged in place.
    Again,
}

/// A held connect or send.
pub struct HeldConnect {
    pub session_id: String,
    /// The calling thread.
    pub tid: u32,
    /// connect | sendto | sendmsg | sendmmsg
    pub syscall: &'static str,
    pub destination: HeldDestination,
    pub rule: String,
    /// What it does once approved.
    pub then: Then,
    /// The tree's approved destinations, and this one's key.
    pub approved: (Arc<Mutex<HashSet<DestKey>>>, DestKey),
    pub holder: Holder,
    pub audit: Arc<AuditLog>,
    /// `execve.explain: stderr`: the caller is told it waits, and why it
    /// was refused.
    pub explain: bool,
}

impl Held for HeldConnect {
    fn request(&self) -> HoldRequest {
        HoldRequest {
            kind: HoldKind::Connect,
            session_id: self.session_id.clone(),
            pid: self.tid,
            starttime: 0,
            depth: 0,
            filename: self.syscall.to_string(),
            argv: Vec::new(),
            file: None,
            rule: self.rule.clone(),
            message: None,
            destination: Some(self.destination.clone()),
        }
    }

    fn waiting(&self) -> &dyn Waiting {
        &self.holder
    }

    fn on_hold(&self, id: &str, timeout: std::time::Duration) {
        if self.explain {
            // Before the wait: a call that hangs for a minute with nothing
            // said is retried or worked around.
            let line = explain::waiting_destination(id, &self.dest(), timeout);
            explain::tell(self.tid, &line);
        }
    }

    fn settle(self: Box<Self>, s: Settled) {
        tracing::info!(id = %s.id, pid = self.tid, outcome = s.outcome.as_str(), "connect approval finished");
        // Written before the answer, as for every exec.
        self.record(&s);
        if s.live.is_none() {
            return;
        }
        let this = *self;
        if !s.allow {
            if this.explain {
                let why = match s.outcome {
                    ApprovalOutcome::Timeout => format!(
                        "approval {} timed out after {:.0} s",
                        s.id,
                        s.timeout.as_secs_f64()
                    ),
                    _ => format!(
                        "approval {} {} by {}{}",
                        s.id,
                        s.outcome.as_str(),
                        s.approver,
                        s.reason
                            .as_deref()
                            .map_or_else(String::new, |r| format!(": {r}"))
                    ),
                };
                let line = explain::refused_destination(&this.dest(), &this.rule, Some(&why));
                explain::tell(this.tid, &line);
            }
            this.holder.answer_value(-i64::from(libc::EACCES));
            return;
        }
        let (approved, key) = &this.approved;
        approved
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(*key);
        match this.then {
            Then::Perform(perform) => this.holder.answer_value(perform()),
            Then::Again => {
                if let Err(e) = this.holder.restart() {
                    tracing::warn!(pid = this.tid, "an approved call cannot run again: {e}");
                    this.holder.answer_value(-i64::from(libc::EACCES));
                }
            }
        }
    }
}

impl HeldConnect {
    /// Where the call goes, as its lines name it.
    fn dest(&self) -> explain::Destination<'_> {
        let d = &self.destination;
        explain::Destination {
            syscall: self.syscall,
            host: d.host.as_deref(),
            ip: d.ip,
            port: d.port,
            protocol: d.protocol,
        }
    }

    /// The one `connect` event of a held call, when it ends.
    fn record(&self, s: &Settled) {
        let d = &self.destination;
        self.audit.record(
            &self.session_id,
            EventBody::Connect(audit::ConnectEvent {
                pid: self.tid,
                syscall: self.syscall.to_string(),
                host: d.host.clone(),
                ip: Some(d.ip.to_string()),
                port: Some(d.port),
                protocol: Some(d.protocol.to_string()),
                rule: self.rule.clone(),
                decision: crate::policy::Decision::Approve,
                message: None,
                effective_action: Some(if s.allow { Action::Allow } else { Action::Deny }),
                approval: Some(s.record()),
            }),
        );
    }
}

/// Held for an operator (`approve`): the call is made (or, judged in
/// place, runs again) only once approved, by the approval's waiter;
/// approved once, the destination is allowed for the rest of the tree.
pub(super) fn hold(
    k: &Call,
    st: &mut EgressTree,
    (key, rule, host): ToApprove,
    holder: Holder,
    then: Then,
) {
    k.ctx.approvals.clone().hold(Box::new(HeldConnect {
        session_id: k.tree.session_id.clone(),
        tid: k.c.tid,
        syscall: k.call.name(),
        destination: HeldDestination {
            host,
            ip: key.ip,
            port: key.port,
            protocol: key.protocol.as_str(),
        },
        rule,
        then,
        approved: (st.egress.approved.clone(), key),
        holder,
        audit: k.ctx.audit.clone(),
        explain: k.ctx.limits.explain == crate::config::Explain::Stderr,
    }));
}
