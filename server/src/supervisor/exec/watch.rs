//! After CONTINUE: an exec whose decision needs it is watched until it
//! completed (`PTRACE_EVENT_EXEC`: the new image has not run an
//! instruction) or failed, checked against what was judged (`verify`), and
//! the tasks stopped for it are released; `decision: redirect` is made and
//! watched the same way. Also the events of an exec killed for not being
//! what was judged, or for not finishing in time, and the ptrace backend's
//! check at `PTRACE_EVENT_EXEC` ([`completed`]).
//!
//! Failure modes: what cannot be checked is killed (`verify`) and audited
//! here (`exec_mismatch`, `unverifiable`, `unverified_exec`).

use super::gather::Gathered;
use super::judge::Judged;
use super::request::ExecRequest;
use super::state::ExecTree;
use super::verify::{self, Expected};
use crate::audit::{Action, AuditLog, EventBody, ExecEvent, ExecSubject};
use crate::policy::Decision;
use crate::supervisor::context::SupervisorContext;
use crate::supervisor::seam::{Holder, Stop, Verification};
use crate::supervisor::sharing::Frozen;
use crate::supervisor::tree::Tree;
use crate::vocab::Refusal;
use std::time::Duration;

/// How long, after the exec, tasks asleep in the kernel get to reach their stop.
pub(super) const RELEASE_GRACE: Duration = Duration::from_millis(5);

/// `decision: redirect` made (see `redirect`): the target put into the
/// caller, its path pointed there, the event, CONTINUE, and the watch
/// that checks the new image is the target (killed before its first
/// instruction otherwise). The caller is seized already.
#[allow(clippy::too_many_arguments)]
pub(super) fn redirect(
    ctx: &SupervisorContext,
    tree: &Tree,
    st: &mut ExecTree<'_>,
    req: &ExecRequest,
    g: &Gathered,
    stop: &dyn Stop,
    holder: &Holder,
    j: Judged,
    plan: super::redirect::Plan,
    pid: u32,
) {
    let made = super::redirect::apply(plan, req, g, holder);
    let (decision, action, message) = match &made {
        Ok(m) => (
            Decision::Redirect,
            Action::Allow,
            format!("redirected to {} (as fd {} of the caller)", m.target, m.fd),
        ),
        Err(why) => (Decision::Deny, Action::Deny, why.to_string()),
    };
    let event = ExecEvent::new(
        j.subject.clone(),
        decision,
        j.verdict.rule.clone(),
        action,
        Some(message),
    )
    .in_attempt(j.attempt, false);
    ctx.audit.record(&tree.session_id, EventBody::Execve(event));
    let made = match made {
        Ok(m) => m,
        Err(why) => {
            tracing::warn!(pid, "{why}");
            let _ = stop.refuse(libc::EACCES);
            // Seized but not continued: let it go.
            let _ = watch_through(st, req.tid, pid, None, None, false);
            return;
        }
    };
    // SAFETY ARGUMENT for CONTINUE: nothing else shares the caller's
    // memory (`Memory::Exclusive`, checked), so the path the kernel reads
    // again is the one just written; whatever it then opens, the watch
    // checks the new image is the target's file with the caller's argv at
    // PTRACE_EVENT_EXEC, before its first instruction, and kills it
    // otherwise (a shared fd table replacing fd N included).
    let answered = stop.proceed();
    if answered.is_ok() {
        st.exec.book.record(pid, g.stat.starttime, j.depth);
        st.tasks.files.exec_seen(pid);
    }
    let outcome = watch_through(
        st,
        req.tid,
        pid,
        Some(&made.expected),
        None,
        answered.is_ok(),
    );
    match outcome {
        verify::Outcome::Killed(what) => {
            record_mismatch(
                &ctx.audit,
                &tree.session_id,
                j.subject,
                &j.verdict.rule,
                what,
            );
        }
        verify::Outcome::TimedOut => record_unfinished(ctx, &tree.session_id, j.subject),
        verify::Outcome::Ran | verify::Outcome::Failed | verify::Outcome::Gone => {}
    }
}

/// Step 8: after CONTINUE of a watched exec (`answered`: the answer was
/// delivered), waits until the exec completed or failed, then releases the
/// tasks stopped. Says whether what runs was killed for not being what was
/// judged.
pub(super) fn watch_through(
    st: &mut ExecTree<'_>,
    tid: u32,
    pid: u32,
    expected: Option<&Expected>,
    mut frozen: Option<Frozen>,
    answered: bool,
) -> verify::Outcome {
    let outcome = if answered {
        verify::started(tid);
        verify::watch(tid, pid, expected, frozen.as_mut(), &mut st.tasks.lingering)
    } else {
        st.tasks.lingering.add(tid);
        verify::Outcome::Gone
    };
    release(st, frozen, RELEASE_GRACE);
    outcome
}

/// The audit event of an exec whose new image was not what was judged.
pub fn record_mismatch(
    audit: &crate::audit::AuditLog,
    session: &str,
    subject: ExecSubject,
    judged_rule: &str,
    what: String,
) {
    tracing::warn!(
        pid = subject.pid,
        "exec mismatch, killed before its first instruction: {what}"
    );
    let event = ExecEvent::new(
        subject,
        Decision::Deny,
        Refusal::ExecMismatch.rule(),
        Action::Deny,
        Some(format!(
            "killed before its first instruction: {what} (allowed by rule {judged_rule})"
        )),
    );
    audit.record(session, EventBody::Execve(event));
}

/// The audit event of a watched exec killed for not finishing in time.
pub(super) fn record_unfinished(ctx: &SupervisorContext, session: &str, subject: ExecSubject) {
    let event = ExecEvent::new(
        subject,
        Decision::Deny,
        Refusal::Unverifiable.rule(),
        Action::Deny,
        Some(format!(
            "killed: the exec did not finish within {:?}, so what it runs could not be \
             checked",
            verify::EXEC_DEADLINE
        )),
    );
    ctx.audit.record(session, EventBody::Execve(event));
}

/// The ptrace backend's `PTRACE_EVENT_EXEC` of process `pid`: the new image
/// has not run an instruction. It must be what was judged (`expect`), or it
/// is killed there and audited. Returns whether it may run.
pub fn completed(audit: &AuditLog, session: &str, pid: u32, expect: Option<Verification>) -> bool {
    match expect {
        Some(v) => match verify::check(pid, &v.expected) {
            Ok(()) => true,
            Err(what) => {
                record_mismatch(audit, session, v.subject, &v.rule, what.to_string());
                false
            }
        },
        None => {
            tracing::warn!(pid, "an exec nothing judged completed; killed");
            audit.record(
                session,
                EventBody::Execve(ExecEvent::new(
                    ExecSubject {
                        pid,
                        ..ExecSubject::default()
                    },
                    Decision::Deny,
                    Refusal::UnverifiedExec.rule(),
                    Action::Deny,
                    Some(
                        "an exec completed that no seccomp stop judged; killed before its first \
                         instruction"
                            .into(),
                    ),
                )),
            );
            false
        }
    }
}

pub(super) fn release(st: &mut ExecTree<'_>, frozen: Option<Frozen>, grace: Duration) {
    if let Some(f) = frozen {
        f.release(&mut st.tasks.lingering, grace);
    }
}
