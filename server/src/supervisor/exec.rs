//! The backend-neutral exec path: from a caught exec to its answer.
//!
//! A backend (`notify` today, ptrace later) hands over the calling thread's
//! id, the syscall and its register arguments, and an [`ExecStop`] to answer
//! through. Here, in order:
//!
//! 1. who: the thread's stat (kept open: a freeze reads it again) and
//!    thread group;
//! 2. the path (read together with the argv array, one `process_vm_readv`),
//!    resolved in the thread's own view: a path that names nothing is
//!    answered with the kernel's own errno (no decision: a failing errno is
//!    safe whatever was read);
//! 3. the race guard: who else shares the caller's memory (`sharing`); if
//!    anyone, they are stopped before anything is read for the decision, and
//!    the path is read again (`gather::read_path_again`);
//! 4. argv (mostly from the pages already read), and where the strings live
//!    (`vma`: no shared mappings);
//! 5. the notification is still the same waiting thread (`still_waiting`);
//! 6. depth, then the pure decision (`policy::judge`);
//! 7. approve: hand to `approval` (the tasks stopped are released first);
//!    otherwise audit, then answer;
//! 8. after CONTINUE with stopped tasks: watch the caller (seized with
//!    `PTRACE_O_TRACEEXEC` and a pending interrupt) until its exec completed
//!    (`PTRACE_EVENT_EXEC`: the new image has not run an instruction) or
//!    failed (it stops on its way back to user space), then release everyone.
//!
//! Steps 1–4, with the facts step 6 judges (the `#!` interpreters, whether
//! the lookups are stable, what the identity index recognises), are
//! `gather`; the rest is here.
//!
//! A backend that checks every exec it lets through at `PTRACE_EVENT_EXEC`
//! itself (ptrace: it traces every task anyway) says so
//! ([`ExecStop::verifies_every_exec`]): then steps 3, 4's mapping check and 8
//! are skipped, since whatever another task changes after the read, the new
//! image is checked against what was judged before its first instruction
//! ([`ExecStop::expect`] receives it), and the audit says `memory: verified`.
//!
//! This runs for every exec, so it counts system calls: the parents' `/proc`
//! files are kept open between execs (`procfiles`), this exec's are closed
//! after the answer, and `phases` says where the time goes.
//!
//! Failure modes: anything that cannot be read, resolved or frozen is a deny
//! (EACCES) audited with the rule `unreadable`, `unresolvable`,
//! `memory_not_frozen` or `shared_memory` and the reason.

use super::gather::{gather, Gather, Gathered, Undecidable};
use super::phases;
use super::retry::Lookup;
use super::seam::HeldExec;
use super::sharing::Frozen;
use super::verify::{self, Expected};
use super::{SupervisorContext, Tree};
use crate::audit::Refusal;
use crate::audit::{Action, EventBody, ExecEvent, ExecSubject, FileIdentity, Memory};
use crate::config::{AuditOnFailure, OnTruncated};
use crate::policy::{self, Decision, ExecFacts, ProgramFacts, Truncation, Verdict};
use std::time::{Duration, Instant};

pub use super::seam::{ExecRequest, ExecStop, Holder, Verification};
pub use super::state::TreeState;
pub use crate::policy::RULE_FILELESS_EXEC;

/// How long, after the exec, tasks asleep in the kernel get to reach their stop.
const RELEASE_GRACE: Duration = Duration::from_millis(5);

fn subject(pid: u32, g: &Gathered, depth: u32) -> ExecSubject {
    ExecSubject {
        pid,
        parent_pid: g.stat.ppid,
        depth,
        filename: g.target.filename.clone(),
        resolved: g.target.resolved.clone(),
        argv: g.argv.args.clone(),
        truncated: g.argv.truncated,
        anonymous: g.target.anonymous,
        file: Some(FileIdentity {
            dev: g.target.meta.dev,
            ino: g.target.meta.ino,
            sha256: g.recognised.sha256.clone(),
        }),
        interpreters: Vec::new(),
        copy_of: g.recognised.copy_of.clone(),
        loader_payloads: g.payloads.clone(),
        memory: Some(g.memory),
    }
}

/// The `#!` interpreters as the policy and the audit see them.
fn interpreters_of(g: &Gathered) -> Vec<policy::Interpreter> {
    g.chain
        .iter()
        .zip(&g.recognised_chain)
        .map(|(l, r)| policy::Interpreter {
            path: l.path.clone(),
            resolved: l
                .target
                .as_ref()
                .and_then(|t| t.resolved.clone().or_else(|| Some(t.filename.clone())))
                .filter(|r| *r != l.path),
            argv: l.argv.clone(),
            copy_of: r.copy_of.clone(),
        })
        .collect()
}

/// What the exec must turn out to run: the program (or the script's last
/// interpreter) with the argv the kernel builds.
fn expected_of(g: &Gathered) -> Option<Expected> {
    let (file, argv) = match g.chain.last() {
        Some(l) => (l.target.as_ref()?.identity(), l.argv.clone()),
        None => (g.target.identity(), g.argv.args.clone()),
    };
    Some(Expected {
        file,
        argv,
        argv_complete: !g.argv.truncated,
    })
}

/// The facts the policy judges, from what was gathered.
fn ask_policy(
    ctx: &SupervisorContext,
    tree: &Tree,
    g: &Gathered,
    depth: u32,
    interpreters: &[policy::Interpreter],
) -> Verdict {
    let facts = ExecFacts {
        program: ProgramFacts {
            filename: &g.target.filename,
            resolved: g.target.resolved.as_deref(),
            argv: &g.argv.args,
            depth,
        },
        anonymous: g.target.anonymous,
        truncated: g.argv.truncated.then_some(Truncation {
            deny: ctx.limits.on_truncated == OnTruncated::Deny,
            max_argc: ctx.limits.max_argc,
            max_argv_bytes: ctx.limits.max_argv_bytes,
        }),
        interpreters,
        copy_of: &g.recognised.copy_of,
        loader_payloads: &g.payloads,
    };
    exec_sources(tree, g, policy::judge(&tree.rules.policy, &facts))
}

/// `exec_sources: {writable: deny}` as the supervisor checks it: a program,
/// `#!` interpreter or loader payload beneath a place the tree can write is
/// refused with the rule's name. Landlock refuses it too where there is
/// Landlock; under gVisor this is the only check.
fn exec_sources(tree: &Tree, g: &Gathered, verdict: Verdict) -> Verdict {
    if verdict.decision == Decision::Deny || tree.exec_places.denied.is_empty() {
        return verdict;
    }
    let files = std::iter::once(g.target.canonical())
        .chain(
            g.chain
                .iter()
                .filter_map(|l| l.target.as_ref().map(crate::tracee::ExecTarget::canonical)),
        )
        .chain(
            g.payloads
                .iter()
                .map(|p| p.resolved.as_deref().unwrap_or(&p.path)),
        );
    for f in files {
        if tree.exec_places.refuses(f) {
            return Verdict {
                decision: Decision::Deny,
                rule: crate::policy::landlock::RULE_EXEC_SOURCES.into(),
                message: Some(format!(
                    "{f} is in a place the tree can write, and the policy runs nothing from \
                     there (exec_sources: writable: deny)"
                )),
                judged: f.to_string(),
            };
        }
    }
    verdict
}

/// Handles one caught exec: gather, decide, answer, audit (module doc).
///
/// Long because the answer's safety argument reads top to bottom: every way
/// to CONTINUE is in sight of the checks it relies on (the refusals, the
/// hold for an operator and the watch after CONTINUE are calls).
pub fn handle(
    ctx: &SupervisorContext,
    tree: &Tree,
    st: &mut TreeState,
    req: &ExecRequest,
    stop: &dyn ExecStop,
    holder: Holder,
) {
    let started = Instant::now();
    phases::begin();
    let mut frozen: Option<Frozen> = None;
    let verified = stop.verifies_every_exec();
    let (pid, g) = match gather(ctx, tree.rules.index, st, req, &mut frozen, verified) {
        Gather::Ready(pid, g) => (pid, g),
        Gather::Answer(errno) => {
            release(st, frozen, Duration::ZERO);
            let _ = stop.refuse(errno);
            return;
        }
        Gather::Refused {
            pid,
            ppid,
            filename,
            why,
        } => {
            release(st, frozen, Duration::ZERO);
            let subject = ExecSubject {
                pid,
                parent_pid: ppid,
                filename,
                ..ExecSubject::default()
            };
            refuse_undecidable(ctx, tree, st, req, stop, subject, why);
            return;
        }
    };
    // The facts above were read from a pid; prove it still names the tracee
    // that is waiting in this very syscall.
    if !stop.still_waiting() {
        release(st, frozen, Duration::ZERO);
        tracing::debug!(pid, "tracee gone after reading its exec");
        return;
    }
    phases::mark("valid");
    let mut j = decide(ctx, tree, st, pid, &g);
    if j.verdict.decision == Decision::Redirect {
        // Checked first (nothing changed); what cannot be made safely is a
        // refusal like any other, below.
        let plan = match tree.rules.policy.redirect_of(&j.verdict.rule) {
            None => Err(format!("rule {} has no redirect_to", j.verdict.rule)),
            Some(_) if verified => Err(
                "redirect needs seccomp user-notify (the ptrace backend cannot give the caller \
                 the target)"
                    .into(),
            ),
            Some(t) => super::redirect::check(req, &g, t).and_then(|plan| {
                // Seized before anything changes: the exec is watched.
                verify::arm(req.tid).map(|()| plan).map_err(|e| {
                    format!(
                        "redirect refused: the exec cannot be watched to verify what runs \
                         (ptrace: {e})"
                    )
                })
            }),
        };
        match plan {
            Ok(plan) => {
                release(st, frozen, Duration::ZERO);
                return redirect(ctx, tree, st, req, &g, stop, &holder, j, plan, pid);
            }
            Err(why) => {
                tracing::info!(pid, "{why}");
                j.verdict.decision = Decision::Deny;
                j.verdict.message = Some(why);
                j.lookup = Lookup::of(&j.subject, g.stat.starttime);
            }
        }
    }
    if j.verdict.decision == Decision::Approve {
        // Held: a waiter thread answers and audits it; this thread goes on
        // serving the tree. Nothing stays stopped while a human thinks.
        release(st, frozen, Duration::ZERO);
        hold_for_operator(ctx, tree, st, req, &g, holder, j);
        return;
    }
    phases::mark("judge");
    let decision = j.verdict.decision;
    let expected = expected_of(&g);
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
        settle(
            j.verdict,
            req,
            &g,
            verified,
            frozen.is_some(),
            expected.as_ref(),
        )
    };
    if let (true, true, Some(e)) = (a.allow, verified, &expected) {
        // The backend checks the new image.
        stop.expect(Verification {
            expected: e.clone(),
            subject: j.subject.clone(),
            rule: a.rule.clone(),
        });
    }
    let (allow, rule, watched) = (a.allow, a.rule, a.watched);
    // A refusal is explained to the caller before it is answered (and
    // before the event, which says whether it was): once per command, not
    // for a shell's PATH retries of it.
    let explained = (!allow && j.repeat.is_none()).then(|| {
        ctx.limits.explain == crate::config::Explain::Stderr && {
            let argv0 = j
                .subject
                .argv
                .first()
                .map_or(j.subject.filename.as_str(), String::as_str);
            super::explain::tell(
                pid,
                &super::explain::line(argv0, &rule, a.message.as_deref()),
            )
        }
    });
    let mut event = ExecEvent::new(
        j.subject.clone(),
        decision,
        rule.clone(),
        if allow { Action::Allow } else { Action::Deny },
        a.message,
    )
    .in_attempt(j.attempt, j.repeat.is_some());
    event.explained = explained;
    // The event is written before the answer: whatever the exec does next,
    // the audit trail already has it, or (`audit.on_failure: refuse`) it
    // does not run.
    let (_, written) = ctx
        .audit
        .record_checked(&tree.session_id, EventBody::Execve(event));
    // This very event failed: refused too, unless the exec is already armed
    // for a watch or expected by the backend (the next one is refused by the
    // check above).
    let allow = if allow && !written && refuse_unaudited && !watched && !verified {
        tracing::error!(
            pid,
            "exec refused (audit_unavailable): its event cannot be written and \
             audit.on_failure is refuse"
        );
        false
    } else {
        allow
    };
    // The supervisor's own time for this exec (facts, freeze, policy,
    // audit); taken before the answer, which may hand this CPU to the tracee.
    phases::mark("audit");
    let own_us = started.elapsed().as_micros() as u64;
    if !allow {
        release(st, frozen, Duration::ZERO);
        if let (Some(k), Decision::Deny, None) = (j.lookup, decision, j.repeat) {
            st.refused.remember(k, j.attempt, (), Instant::now());
        }
        if let Err(e) = stop.refuse(libc::EACCES) {
            tracing::debug!(pid, "answer not delivered (tracee gone?): {e}");
        }
        tracing::trace!(pid, us = own_us, "exec answered");
        return;
    }
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
    // (`verify`). (d) `still_waiting` proved the thread id still names the
    // thread stopped in this very syscall.
    if frozen.is_some() {
        hold_for_tests();
    }
    let answered = stop.proceed();
    tracing::trace!(pid, us = own_us, watched, memory = ?g.memory, phases = %phases::text(), "exec answered");
    if let Err(e) = &answered {
        tracing::debug!(pid, "answer not delivered (tracee gone?): {e}");
    }
    if answered.is_ok() {
        st.book.record(pid, g.stat.starttime, j.depth);
        // Its address space may be new: kept maps of it no longer answer.
        st.files.exec_seen(pid);
    }
    if !watched {
        return;
    }
    let outcome = watch_through(
        st,
        req.tid,
        pid,
        expected.as_ref(),
        frozen,
        answered.is_ok(),
    );
    match outcome {
        verify::Outcome::Killed(what) => {
            record_mismatch(ctx, &tree.session_id, j.subject, &rule, what);
        }
        verify::Outcome::TimedOut => record_unfinished(ctx, &tree.session_id, j.subject),
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
/// and released only once the exec is over), or a path lookup the tree can
/// change (a symlink or rename swap); the caller is seized before CONTINUE
/// and asked to stop right after it (`PTRACE_EVENT_EXEC` on success, a stop
/// on its way back to user space on failure).
fn settle(
    verdict: Verdict,
    req: &ExecRequest,
    g: &Gathered,
    verified: bool,
    frozen: bool,
    expected: Option<&Expected>,
) -> Answer {
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
    // verify`): this thread watches the exec and checks the new image.
    let checks_here = !verified && g.memory == Memory::Verified;
    if (verified || checks_here) && expected.is_none() {
        // Without an identity to check against, nothing may run.
        return unverifiable(
            "the identity of the file to run cannot be read, so the exec cannot be verified".into(),
        );
    }
    let watched = !verified && (frozen || !g.stable || checks_here);
    if watched {
        if let Err(e) = verify::arm(req.tid) {
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
    st: &mut TreeState,
    req: &ExecRequest,
    stop: &dyn ExecStop,
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
    let repeat = st.last_explained.is_some_and(|(tid, r, at)| {
        tid == req.tid && r == rule && now.duration_since(at) < super::retry::WINDOW
    });
    let explained = (!repeat && ctx.limits.explain == crate::config::Explain::Stderr).then(|| {
        st.last_explained = Some((req.tid, rule, now));
        super::explain::tell(
            req.tid,
            &super::explain::line(&subject.filename, rule, Some(&why.reason)),
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

/// The decision on one exec, and what its audit and answer need.
struct Judged {
    depth: u32,
    verdict: Verdict,
    subject: ExecSubject,
    /// Its key for the retries of the same PATH lookup (`retry`).
    lookup: Option<Lookup>,
    /// The attempt this denied exec repeats, when it is a retry of one.
    repeat: Option<u64>,
    attempt: u64,
}

/// Step 6: the depth, the pure decision, and which attempt this is (a
/// denied exec the same process just tried for the same file and argv, the
/// next PATH entry, is the same attempt: see `retry`).
fn decide(
    ctx: &SupervisorContext,
    tree: &Tree,
    st: &mut TreeState,
    pid: u32,
    g: &Gathered,
) -> Judged {
    let files = std::cell::RefCell::new(&mut st.files);
    let depth = st.book.depth_of(pid, &g.stat, st.root_pid, |p| {
        files.borrow_mut().stat(p).ok()
    });
    let interpreters = interpreters_of(g);
    let mut verdict = ask_policy(ctx, tree, g, depth, &interpreters);
    if tree.session_id == agentsh_proto::shimconf::REHEARSAL_SESSION
        && matches!(verdict.decision, Decision::Approve | Decision::Redirect)
    {
        // The server's rehearsal shell (`daemon::rehearsal`) asks no
        // operator and rewrites nothing.
        verdict.decision = Decision::Deny;
        verdict.message = Some("the server's rehearsal shell waits for no one".into());
    }
    let mut subject = subject(pid, g, depth);
    subject.interpreters = interpreters;
    // Only a refusal is ever reused: an allowed exec needs no key (and no
    // copy of its argv).
    let lookup = match verdict.decision {
        Decision::Deny | Decision::Approve => Lookup::of(&subject, g.stat.starttime),
        Decision::Allow | Decision::Audit | Decision::Redirect => None,
    };
    let repeat = match (&lookup, verdict.decision) {
        (Some(k), Decision::Deny) => st.refused.find(k, Instant::now()).map(|(a, ())| a),
        _ => None,
    };
    let attempt = repeat.unwrap_or_else(|| ctx.audit.next_attempt());
    Judged {
        depth,
        verdict,
        subject,
        lookup,
        repeat,
        attempt,
    }
}

/// `decision: redirect` made (see `redirect`): the target put into the
/// caller, its path pointed there, the event, CONTINUE, and the watch
/// that checks the new image is the target (killed before its first
/// instruction otherwise). The caller is seized already.
#[allow(clippy::too_many_arguments)]
fn redirect(
    ctx: &SupervisorContext,
    tree: &Tree,
    st: &mut TreeState,
    req: &ExecRequest,
    g: &Gathered,
    stop: &dyn ExecStop,
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
        Err(why) => (Decision::Deny, Action::Deny, why.clone()),
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
        st.book.record(pid, g.stat.starttime, j.depth);
        st.files.exec_seen(pid);
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
            record_mismatch(ctx, &tree.session_id, j.subject, &j.verdict.rule, what);
        }
        verify::Outcome::TimedOut => record_unfinished(ctx, &tree.session_id, j.subject),
        verify::Outcome::Ran | verify::Outcome::Failed | verify::Outcome::Gone => {}
    }
}

/// Step 7's approve: hands the exec to `approval`, whose waiter answers and
/// audits it (the tasks stopped are released before).
fn hold_for_operator(
    ctx: &SupervisorContext,
    tree: &Tree,
    st: &mut TreeState,
    req: &ExecRequest,
    g: &Gathered,
    holder: Holder,
    j: Judged,
) {
    st.files.held(j.subject.pid);
    let notif_id = match &holder {
        Holder::Notify { id, .. } => *id,
        Holder::Trace { .. } => 0,
    };
    ctx.approvals.clone().hold(
        holder,
        HeldExec {
            session_id: tree.session_id.clone(),
            notif_id,
            tid: req.tid,
            starttime: g.stat.starttime,
            expected: expected_of(g),
            subject: j.subject,
            rule: j.verdict.rule,
            message: j.verdict.message,
            attempt: j.attempt,
            lookup: j.lookup,
        },
        st.approved_tx.clone(),
    );
}

/// Step 8: after CONTINUE of a watched exec (`answered`: the answer was
/// delivered), waits until the exec completed or failed, then releases the
/// tasks stopped. Says whether what runs was killed for not being what was
/// judged.
fn watch_through(
    st: &mut TreeState,
    tid: u32,
    pid: u32,
    expected: Option<&Expected>,
    mut frozen: Option<Frozen>,
    answered: bool,
) -> verify::Outcome {
    let outcome = if answered {
        verify::started(tid);
        verify::watch(tid, pid, expected, frozen.as_mut(), &mut st.lingering)
    } else {
        st.lingering.add(tid);
        verify::Outcome::Gone
    };
    release(st, frozen, RELEASE_GRACE);
    outcome
}

/// The audit event of an exec whose new image was not what was judged.
pub(super) fn record_mismatch(
    ctx: &SupervisorContext,
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
    ctx.audit.record(session, EventBody::Execve(event));
}

/// The audit event of a watched exec killed for not finishing in time.
fn record_unfinished(ctx: &SupervisorContext, session: &str, subject: ExecSubject) {
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

fn release(st: &mut TreeState, frozen: Option<Frozen>, grace: Duration) {
    if let Some(f) = frozen {
        f.release(&mut st.lingering, grace);
    }
}
