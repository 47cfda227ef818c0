//! Step 6 of an exec: its depth, the facts the pure policy judges
//! (`policy::judge`), `exec_sources` as the supervisor checks it, and which
//! attempt it is (a PATH retry of a refusal is the same attempt: `retry`).
//! Also what a judged exec must turn out to run ([`expected_of`]).
//!
//! Failure modes: none of its own: the policy decides, and its verdict is
//! the value returned.

use super::gather::Gathered;
use super::state::ExecTree;
use crate::audit::{ExecSubject, FileIdentity};
use crate::config::OnTruncated;
use crate::policy::{self, Decision, ExecFacts, ProgramFacts, Truncation, Verdict};
use crate::supervisor::context::SupervisorContext;
use crate::supervisor::retry::Lookup;
use crate::supervisor::seam::Expected;
use crate::supervisor::tree::Tree;
use std::time::Instant;

/// The audit rules of refusals the supervisor makes whatever the policy
/// says (a program it cannot read, memory it cannot freeze, a program from
/// a place the tree can write...): a replay of such an event through a
/// policy says nothing (`agentsh policy test`).
pub fn mechanism_rules() -> Vec<&'static str> {
    crate::vocab::Refusal::ALL
        .iter()
        .filter(|r| r.of_exec())
        .map(|r| r.rule())
        .filter(|r| *r != crate::policy::RULE_FILELESS_EXEC)
        .chain([crate::policy::landlock::RULE_EXEC_SOURCES])
        .collect()
}

pub(super) fn subject(pid: u32, g: &Gathered, depth: u32) -> ExecSubject {
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
pub(super) fn interpreters_of(g: &Gathered) -> Vec<policy::Interpreter> {
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
pub(super) fn expected_of(g: &Gathered) -> Option<Expected> {
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
    exec_sources(tree, g, policy::judge(&tree.rules().policy, &facts))
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

/// The decision on one exec, and what its audit and answer need.
pub(super) struct Judged {
    pub(super) depth: u32,
    pub(super) verdict: Verdict,
    pub(super) subject: ExecSubject,
    /// Its key for the retries of the same PATH lookup (`retry`).
    pub(super) lookup: Option<Lookup>,
    /// The attempt this denied exec repeats, when it is a retry of one.
    pub(super) repeat: Option<u64>,
    pub(super) attempt: u64,
}

/// Step 6: the depth, the pure decision, and which attempt this is (a
/// denied exec the same process just tried for the same file and argv, the
/// next PATH entry, is the same attempt: see `retry`).
pub(super) fn decide(
    ctx: &SupervisorContext,
    tree: &Tree,
    st: &mut ExecTree<'_>,
    pid: u32,
    g: &Gathered,
) -> Judged {
    let files = std::cell::RefCell::new(&mut st.tasks.files);
    let depth = st.exec.book.depth_of(pid, &g.stat, st.tasks.root_pid, |p| {
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
        (Some(k), Decision::Deny) => st.exec.refused.find(k, Instant::now()).map(|(a, ())| a),
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
