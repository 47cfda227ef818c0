//! From a caught exec to its answer: gather, decide, hold or answer,
//! audit, and watch (the family's doc, in `mod.rs`, says each step and why).
//!
//! Failure modes: anything that cannot be read, resolved or frozen is a deny
//! (EACCES) audited with the mechanism's rule and the reason: each
//! `Refusal` `gather` returns (`unreadable`: the path, argv or maps;
//! `unresolvable`, `memory_not_frozen`, `shared_memory`,
//! `interpreter_chain`, `loader_payload`, `fileless_exec`), and here
//! `unverifiable` (no identity to check the new image against; a watch that
//! cannot be armed) and `audit_unavailable`. A caller whose stat cannot be
//! read is gone: EACCES, no event; a path that names nothing gets the
//! kernel's errno, no event. What it asks the kernel goes through the
//! context's `Host` and `TaskStops`, so `exec::tests` checks each of these
//! with recording doubles, without root.

use super::gather::{gather, Gather, Gathered};
use super::held::HeldExec;
use super::hop::Hop;
use super::judge::{decide, expected_of, Judged};
use super::request::ExecRequest;
use super::state::{ExecState, ExecTree};
use super::undecidable::Undecidable;
use super::verify::{self, Expected};
use super::watch::{record_mismatch, record_unfinished, redirect, release, watch_through};
use crate::audit::{Action, EventBody, ExecEvent, ExecSubject, Memory};
use crate::config::{AuditOnFailure, ExecWatch};
use crate::policy::{Decision, Verdict};
use crate::supervisor::context::SupervisorContext;
use crate::supervisor::phases;
use crate::supervisor::retry::Lookup;
use crate::supervisor::seam::{Holder, Stop, Verification, Waiting};
use crate::supervisor::sharing::Frozen;
use crate::supervisor::tasks::Tasks;
use crate::supervisor::tree::Tree;
use crate::vocab::Refusal;
use std::time::{Duration, Instant};

/// Handles one caught exec: gather, decide, answer, audit (module doc).
/// Every way to CONTINUE is in [`let_run`], in sight of the checks it
/// relies on; the refusals, the redirect and the hold for an operator are
/// steps of their own.
pub fn handle(
    ctx: &SupervisorContext,
    tree: &Tree,
    tasks: &mut Tasks,
    state: &mut ExecState,
    req: &ExecRequest,
    stop: &dyn Stop,
) {
    let st = &mut ExecTree { tasks, exec: state };
    let started = Instant::now();
    phases::begin();
    let mut frozen: Option<Frozen> = None;
    let verified = stop.verifies_every_exec();
    let Some((pid, g)) = facts(ctx, tree, st, req, stop, &mut frozen, verified) else {
        return;
    };
    // The facts above were read from a pid; prove it still names the tracee
    // that is waiting in this very syscall.
    if !stop.still_waiting() {
        release(st, frozen, Duration::ZERO);
        tracing::debug!(pid, "tracee gone after reading its exec");
        return;
    }
    phases::mark("valid");
    let j = decide(ctx, tree, st, pid, &g);
    // A shim's exec in a tree: the real one exec'd in its place, where the
    // backend can (`hop`).
    let (pid, g, mut j) = if verified {
        match super::hop::skip(ctx, tree, st, req, stop, &g, &j) {
            Hop::Kept => (pid, g, j),
            Hop::Again => return release(st, frozen, Duration::ZERO),
            Hop::Skipped(real) => *real,
        }
    } else {
        (pid, g, j)
    };
    if j.verdict.decision == Decision::Redirect {
        // Checked first (nothing changed); what cannot be made safely is a
        // refusal like any other, below.
        let rules = tree.rules();
        let target = rules.policy.redirect_of(&j.verdict.rule);
        match super::redirect::plan(req, &g, &j.verdict.rule, target, verified) {
            Ok(plan) => {
                release(st, frozen, Duration::ZERO);
                return redirect(ctx, tree, st, req, &g, stop, &stop.defer(), j, plan, pid);
            }
            Err(why) => {
                tracing::info!(pid, "{why}");
                j.verdict.decision = Decision::Deny;
                j.verdict.message = Some(why.to_string());
                j.lookup = Lookup::of(&j.subject, g.stat.starttime);
            }
        }
    }
    if j.verdict.decision == Decision::Approve {
        // Held: a waiter thread answers and audits it; this thread goes on
        // serving the tree. Nothing stays stopped while a human thinks.
        release(st, frozen, Duration::ZERO);
        hold_for_operator(ctx, tree, st, req, &g, stop.defer(), j);
        return;
    }
    phases::mark("judge");
    let x = Answering {
        ctx,
        tree,
        req,
        stop,
        pid,
        g: &g,
        verified,
        started,
    };
    answer(&x, st, j, frozen);
}

/// Steps 1 to 4 (`gather`): the exec's pid and facts; `None` when it was
/// answered there (a path that names nothing gets the kernel's errno; facts
/// that cannot be read or frozen, a refusal with the reason).
fn facts(
    ctx: &SupervisorContext,
    tree: &Tree,
    st: &mut ExecTree<'_>,
    req: &ExecRequest,
    stop: &dyn Stop,
    frozen: &mut Option<Frozen>,
    verified: bool,
) -> Option<(u32, Box<Gathered>)> {
    match gather(ctx, tree.rules().index, st, req, frozen, verified) {
        Gather::Ready(pid, g) => Some((pid, g)),
        Gather::Answer(errno) => {
            release(st, frozen.take(), Duration::ZERO);
            let _ = stop.refuse(errno);
            None
        }
        Gather::Refused {
            pid,
            ppid,
            filename,
            why,
        } => {
            release(st, frozen.take(), Duration::ZERO);
            let subject = ExecSubject {
                pid,
                parent_pid: ppid,
                filename,
                ..ExecSubject::default()
            };
            refuse_undecidable(ctx, tree, st, req, stop, subject, why);
            None
        }
    }
}

/// One decided exec being answered: what every step after the decision
/// needs.
struct Answering<'a> {
    ctx: &'a SupervisorContext,
    tree: &'a Tree,
    req: &'a ExecRequest,
    stop: &'a dyn Stop,
    pid: u32,
    g: &'a Gathered,
    /// The backend checks every exec it lets through (ptrace).
    verified: bool,
    started: Instant,
}

/// Steps 7 and 8 for an exec the policy allowed or denied: the one answer
/// (the verdict, unless what keeps it cannot be had), the backend told what
/// to expect, the caller told why it was refused, the event, then the
/// refusal or [`let_run`].
fn answer(x: &Answering, st: &mut ExecTree<'_>, j: Judged, frozen: Option<Frozen>) {
    let (ctx, pid) = (x.ctx, x.pid);
    let expected = expected_of(x.g);
    // `audit.on_failure: refuse` with the log failing: nothing runs (decided
    // before anything is armed or expected).
    let refuse_unaudited = ctx.audit_on_failure == AuditOnFailure::Refuse;
    let a = if refuse_unaudited && !ctx.audit.healthy() {
        // Said here too: the refusal's own event may fit where the last
        // one did not, and the operator reads the log.
        tracing::error!(
            pid,
            "exec refused (audit_unavailable): the audit log's last write failed and \
             audit.on_failure is refuse"
        );
        Answer {
            allow: false,
            rule: Refusal::AuditUnavailable.rule().into(),
            message: Some("the audit log cannot be written (audit.on_failure: refuse)".into()),
            watched: false,
        }
    } else {
        settle(&j.verdict, x, frozen.is_some(), expected.as_ref())
    };
    if let (true, true, Some(e)) = (a.allow, x.verified, &expected) {
        // The backend checks the new image.
        x.stop.expect(Verification {
            expected: e.clone(),
            subject: j.subject.clone(),
            rule: a.rule.clone(),
        });
    }
    let watched = a.watched;
    let rule = a.rule.clone();
    // An allowed exec's event waits for the answer unless
    // `audit.on_failure: refuse` needs it written first (`let_run` writes
    // it right after CONTINUE, on this thread, before the tree's next
    // notification is read: the file's order and chain are the same).
    let (allow, after) = if a.allow && !refuse_unaudited {
        (true, Some((a, ctx.audit.owe())))
    } else {
        (record(x, &j, a, refuse_unaudited), None)
    };
    // The supervisor's own time for this exec (facts, freeze, policy,
    // audit); taken before the answer, which may hand this CPU to the tracee.
    phases::mark("audit");
    let own_us = x.started.elapsed().as_micros() as u64;
    if !allow {
        release(st, frozen, Duration::ZERO);
        if let (Some(k), Decision::Deny, None) = (j.lookup, j.verdict.decision, j.repeat) {
            st.exec.refused.remember(k, j.attempt, (), Instant::now());
        }
        if let Err(e) = x.stop.refuse(libc::EACCES) {
            tracing::debug!(pid, "answer not delivered (tracee gone?): {e}");
        }
        tracing::trace!(pid, us = own_us, "exec answered");
        return;
    }
    let ran = Ran {
        watched,
        rule,
        expected,
        own_us,
        after,
    };
    let_run(x, st, j, frozen, ran);
}

/// The event of a decided exec, after the caller was told why it is
/// refused (once per command, not for a shell's PATH retries). A refusal's,
/// and under `audit.on_failure: refuse` an allowed exec's, is written
/// before the answer (with `refuse`, an exec whose event cannot be written
/// does not run); under `continue` an allowed exec's is written right after
/// it (`let_run`), where its write no longer delays the tree. Whether it may
/// still run.
fn record(x: &Answering, j: &Judged, a: Answer, refuse_unaudited: bool) -> bool {
    let explained = (!a.allow && j.repeat.is_none()).then(|| {
        x.ctx.limits.explain == crate::config::Explain::Stderr && {
            let argv0 = j
                .subject
                .argv
                .first()
                .map_or(j.subject.filename.as_str(), String::as_str);
            crate::explain::tell(
                x.pid,
                &crate::explain::line(argv0, &a.rule, a.message.as_deref()),
            )
        }
    });
    let mut event = ExecEvent::new(
        j.subject.clone(),
        j.verdict.decision,
        a.rule,
        if a.allow { Action::Allow } else { Action::Deny },
        a.message,
    )
    .in_attempt(j.attempt, j.repeat.is_some());
    event.explained = explained;
    let (_, written) = x
        .ctx
        .audit
        .record_checked(&x.tree.session_id, EventBody::Execve(event));
    // This very event failed: refused too, unless the exec is already armed
    // for a watch or expected by the backend (the next one is refused by the
    // check in `answer`).
    if a.allow && !written && refuse_unaudited && !a.watched && !x.verified {
        tracing::error!(
            pid = x.pid,
            "exec refused (audit_unavailable): its event cannot be written and \
             audit.on_failure is refuse"
        );
        return false;
    }
    a.allow
}

/// What an allowed exec's CONTINUE and watch need.
struct Ran<'a> {
    /// Watched through the exec here (see [`settle`]).
    watched: bool,
    /// The rule that allowed it.
    rule: String,
    expected: Option<Expected>,
    /// The supervisor's own time for this exec so far.
    own_us: u64,
    /// The answer whose event is written after CONTINUE (`audit.on_failure:
    /// continue`), promised to the log's readers; `None` when it was written
    /// before.
    after: Option<(Answer, crate::audit::Owed<'a>)>,
}

/// CONTINUE for an allowed exec, its depth recorded, and the watch through
/// the exec where it needs one.
fn let_run(x: &Answering, st: &mut ExecTree<'_>, j: Judged, frozen: Option<Frozen>, ran: Ran<'_>) {
    let (pid, g) = (x.pid, x.g);
    // SAFETY ARGUMENT for CONTINUE. The kernel reads the path and argv again
    // after this answer and resolves the path again. (a) Nothing else can
    // write the strings: either no other task shares the caller's address
    // space (`Sharing::Exclusive`: a single thread whose parent does not share
    // it; the base filter keeps CLONE_VM children to threads and vfork), or
    // every task that does is ptrace-stopped or asleep in the kernel with a
    // stop pending, and stays so until the exec completed or failed
    // (`verify::watch`). (b) No other process can write them:
    // `gather::check_mappings` refused strings in shared mappings and in
    // private pages of files a tree may write. (c) The file that runs is the
    // file judged: every lookup went through directories the tree cannot
    // change (`gather::lookups_stable`), or the exec is watched and the new
    // image is checked at PTRACE_EVENT_EXEC, before its first instruction
    // (`verify`), or the backend checks it there itself (`x.verified`, told
    // what to expect in `answer`). (d) `still_waiting` proved the thread id
    // still names the thread stopped in this very syscall. `answer` called
    // this only for an exec the policy allowed; under `audit.on_failure:
    // refuse` its event is written (or its watch or backend check is already
    // armed), under `continue` it is written next, on this thread.
    if frozen.is_some() {
        hold_for_tests();
    }
    let answered = x.stop.proceed();
    tracing::trace!(pid, us = ran.own_us, watched = ran.watched, memory = ?g.memory, phases = %phases::text(), "exec answered");
    if let Err(e) = &answered {
        tracing::debug!(pid, "answer not delivered (tracee gone?): {e}");
    }
    if let Some((a, owed)) = ran.after {
        // Before anything else of this tree is read: its next exec's event
        // follows this one in the file (`record`).
        record(x, &j, a, false);
        drop(owed);
    }
    if answered.is_ok() {
        st.exec.book.record(pid, g.stat.starttime, j.depth);
        // Its address space may be new: kept maps of it no longer answer.
        st.tasks.files.exec_seen(pid);
    }
    if !ran.watched {
        return;
    }
    let outcome = watch_through(
        st,
        x.req.tid,
        pid,
        ran.expected.as_ref(),
        frozen,
        answered.is_ok(),
    );
    match outcome {
        verify::Outcome::Killed(what) => {
            record_mismatch(&x.ctx.audit, &x.tree.session_id, j.subject, &ran.rule, what);
        }
        verify::Outcome::TimedOut => record_unfinished(x.ctx, &x.tree.session_id, j.subject),
        verify::Outcome::Ran | verify::Outcome::Failed | verify::Outcome::Gone => {}
    }
}

/// The one answer to an exec the policy allowed or denied.
struct Answer {
    allow: bool,
    /// The audit event's rule: the verdict's, or `unverifiable`.
    rule: String,
    message: Option<String>,
    /// Watched through the exec here (see [`settle`]).
    watched: bool,
}

/// The verdict, unless what keeps an allowed exec's decision is missing,
/// which turns it into an `unverifiable` refusal: the identity of the file
/// to check the new image against (a verifying backend, or other tasks that
/// share the caller's memory under `race_guard: verify`), or the watch
/// itself. An exec is watched here when anything could change what runs
/// after CONTINUE: tasks sharing the caller's memory (running, or stopped
/// and released only once the exec is over), a path lookup the tree can
/// change (a symlink or rename swap), or any exec at all (`every`:
/// `execve.watch: every`, for a task sharing the memory that the sharing
/// check cannot find: a vfork child whose vfork parent died); the caller is
/// seized before CONTINUE and asked to stop right after it
/// (`PTRACE_EVENT_EXEC` on success, a stop on its way back to user space on
/// failure).
fn settle(verdict: &Verdict, x: &Answering, frozen: bool, expected: Option<&Expected>) -> Answer {
    let (req, g, verified) = (x.req, x.g, x.verified);
    let every = x.ctx.limits.watch == ExecWatch::Every;
    let unverifiable = |message: String| Answer {
        allow: false,
        rule: Refusal::Unverifiable.rule().into(),
        message: Some(message),
        watched: false,
    };
    let allow = matches!(verdict.decision, Decision::Allow | Decision::Audit);
    let as_judged = |watched| Answer {
        allow,
        rule: verdict.rule.clone(),
        message: verdict.message.clone(),
        watched,
    };
    if !allow {
        return as_judged(false);
    }
    // Other tasks share the caller's memory and run on (`race_guard:
    // verify`), or every exec is watched: this thread watches the exec and
    // checks the new image.
    let checks_here = !verified && (g.memory == Memory::Verified || every);
    if (verified || checks_here) && expected.is_none() {
        // Without an identity to check against, nothing may run.
        return unverifiable(
            "the identity of the file to run cannot be read, so the exec cannot be verified".into(),
        );
    }
    let watched = !verified && (frozen || !g.stable || checks_here);
    if watched {
        if let Err(e) = x.ctx.stops.arm_watch(req.tid) {
            return unverifiable(format!(
                "cannot watch the exec of thread {} to verify what runs (ptrace: {e}); \
                 the server needs CAP_SYS_PTRACE",
                req.tid
            ));
        }
    }
    as_judged(watched)
}

/// An exec that cannot be judged (`subject` says what is known of it):
/// audited with the rule and reason, answered EACCES.
fn refuse_undecidable(
    ctx: &SupervisorContext,
    tree: &Tree,
    st: &mut ExecTree<'_>,
    req: &ExecRequest,
    stop: &dyn Stop,
    subject: ExecSubject,
    why: Undecidable,
) {
    tracing::warn!(
        pid = subject.pid,
        abi = req.call.abi,
        "exec denied: {}",
        why.reason
    );
    // Explained like a rule's refusal, once per command: a PATH retry by
    // the same task for the same reason within the retry window adds none.
    let rule = why.rule.rule();
    let now = Instant::now();
    let repeat = st.exec.last_explained.is_some_and(|(tid, r, at)| {
        tid == req.tid && r == rule && now.duration_since(at) < crate::supervisor::retry::WINDOW
    });
    let explained = (!repeat && ctx.limits.explain == crate::config::Explain::Stderr).then(|| {
        st.exec.last_explained = Some((req.tid, rule, now));
        crate::explain::tell(
            req.tid,
            &crate::explain::line(&subject.filename, rule, Some(&why.reason)),
        )
    });
    let mut event = ExecEvent::new(
        subject,
        Decision::Deny,
        rule,
        Action::Deny,
        Some(why.reason),
    )
    .in_attempt(ctx.audit.next_attempt(), false);
    event.explained = explained;
    ctx.audit.record(&tree.session_id, EventBody::Execve(event));
    let _ = stop.refuse(libc::EACCES);
}

/// Step 7's approve: hands the exec to `approval`, whose waiter answers and
/// audits it (the tasks stopped are released before).
fn hold_for_operator(
    ctx: &SupervisorContext,
    tree: &Tree,
    st: &mut ExecTree<'_>,
    req: &ExecRequest,
    g: &Gathered,
    holder: Holder,
    j: Judged,
) {
    st.tasks.files.held(j.subject.pid);
    ctx.approvals.clone().hold(Box::new(HeldExec {
        session_id: tree.session_id.clone(),
        notif_id: holder.notif_id(),
        holder,
        tid: req.tid,
        starttime: g.stat.starttime,
        expected: expected_of(g),
        subject: j.subject,
        rule: j.verdict.rule,
        message: j.verdict.message,
        attempt: j.attempt,
        lookup: j.lookup,
        allowed: st.exec.approved_tx.clone(),
        explain: ctx.limits.explain == crate::config::Explain::Stderr,
        audit: ctx.audit.clone(),
    }));
}

/// Debug builds only: `AGENTSH_TEST_HOLD_FROZEN_MS` keeps stopped tasks
/// stopped that long before CONTINUE, so the tests can kill the caller or
/// the server while a freeze holds. Release builds ignore it.
fn hold_for_tests() {
    #[cfg(debug_assertions)]
    {
        static HOLD: std::sync::OnceLock<Option<u64>> = std::sync::OnceLock::new();
        let hold = HOLD.get_or_init(|| {
            std::env::var("AGENTSH_TEST_HOLD_FROZEN_MS")
                .ok()
                .and_then(|v| v.parse().ok())
        });
        if let Some(ms) = hold {
            std::thread::sleep(Duration::from_millis(*ms));
        }
    }
}
