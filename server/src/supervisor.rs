//! The exec supervisor: serves one seccomp notify fd per supervised tree.
//!
//! For every trapped `execve`/`execveat` it gathers the facts (who, at what
//! depth, which program, which argv), asks the pure policy, answers the kernel
//! and writes one audit event. Each tree has its own thread, so trees never
//! wait on each other; an exec held for an operator (`decision: approve`)
//! waits on a thread of its own (see `approval`), so the tree does not either.
//!
//! Fail-closed: any fact that cannot be read or decided is answered EACCES
//! (never CONTINUE) and audited with the reason. A program path that does not
//! exist is answered ENOENT/ENOTDIR without a decision: shells probe every
//! PATH entry, and those probes are not execs. If the server dies, the kernel
//! fails every later trapped syscall of the tree with ENOSYS.
//!
//! What CONTINUE guarantees: the facts were read while the tracee was stopped
//! in the syscall, and NOTIF_ID_VALID afterwards proves the pid still named
//! that tracee (no pid reuse between reading and answering). It does not stop
//! another thread of the tracee from rewriting the path or argv after the read
//! (a TOCTOU inherent to user-notify): the argv policy is best effort on top
//! of Landlock, the hard floor. Multi-threaded callers are logged.

mod signals;

use crate::approval::{Approvals, HeldExec};
use crate::audit::{AuditLog, EventBody, ExecEvent};
use crate::config::{ExecveSection, OnTruncated};
use crate::policy::{self, Decision, ExecFacts, Policy, Verdict};
use crate::tracee::{self, ExecTarget, ResolveError};
use agentsh_proto::notif::{self, Notification};
use std::collections::HashMap;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::sync::mpsc::{self, Sender};
use std::sync::Arc;

/// The rule that denies exec of a memfd or deleted file, for every policy.
pub const RULE_FILELESS_EXEC: &str = "fileless_exec";

/// What every tree's supervisor shares.
pub struct SupervisorContext {
    pub policy: Arc<Policy>,
    pub limits: ExecveSection,
    pub audit: Arc<AuditLog>,
    /// Execs held for an operator (`decision: approve`).
    pub approvals: Arc<Approvals>,
}

/// One supervised tree.
pub struct Tree {
    pub session_id: String,
    /// The wrapper's pid: its first exec (of the shell) is depth 0.
    pub root_pid: u32,
    /// Shared with approval waiters, which answer held execs on it.
    pub fd: Arc<OwnedFd>,
}

/// Which exec syscall, and how to read its arguments.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ExecCall {
    Execve { ptr_size: usize },
    Execveat { ptr_size: usize },
}

const AUDIT_ARCH_X86_64: u32 = 0xC000_003E;
const AUDIT_ARCH_I386: u32 = 0x4000_0003;
const AUDIT_ARCH_AARCH64: u32 = 0xC000_00B7;
const X32_SYSCALL_BIT: i32 = 0x4000_0000;

fn classify_call(arch: u32, nr: i32) -> Option<ExecCall> {
    match (arch, nr) {
        (AUDIT_ARCH_X86_64, 59) => Some(ExecCall::Execve { ptr_size: 8 }),
        (AUDIT_ARCH_X86_64, 322) => Some(ExecCall::Execveat { ptr_size: 8 }),
        (AUDIT_ARCH_X86_64, n) if n == X32_SYSCALL_BIT | 520 => {
            Some(ExecCall::Execve { ptr_size: 4 })
        }
        (AUDIT_ARCH_X86_64, n) if n == X32_SYSCALL_BIT | 545 => {
            Some(ExecCall::Execveat { ptr_size: 4 })
        }
        (AUDIT_ARCH_I386, 11) => Some(ExecCall::Execve { ptr_size: 4 }),
        (AUDIT_ARCH_I386, 358) => Some(ExecCall::Execveat { ptr_size: 4 }),
        (AUDIT_ARCH_AARCH64, 221) => Some(ExecCall::Execve { ptr_size: 8 }),
        (AUDIT_ARCH_AARCH64, 281) => Some(ExecCall::Execveat { ptr_size: 8 }),
        _ => None,
    }
}

/// Depth bookkeeping from the server's own view of the process tree.
///
/// A process's current program has a depth. An exec in place (same process)
/// keeps it: `sh -c X` where sh execs X leaves X direct, like the SDK's
/// command itself. A process that has not exec'd yet is a fork of its
/// nearest recorded ancestor, and its exec is one deeper. Processes are keyed
/// by (pid, start time) so a reused pid is never mistaken for an old one.
#[derive(Debug, Default)]
pub struct DepthBook {
    images: HashMap<u32, (u64, u32)>,
}

/// The most ancestors a depth lookup walks before giving up.
const MAX_WALK: usize = 256;

impl DepthBook {
    /// Depth of an exec by `pid` (stat already read), in a tree rooted at `root`.
    /// `stat_of` reads other processes' stat (injected for tests).
    pub fn depth_of(
        &self,
        pid: u32,
        stat: &tracee::ProcStat,
        root: u32,
        stat_of: impl Fn(u32) -> Option<tracee::ProcStat>,
    ) -> u32 {
        if let Some(&(st, d)) = self.images.get(&pid) {
            if st == stat.starttime {
                return d;
            }
        }
        if pid == root {
            return 0;
        }
        let mut parent = stat.ppid;
        for _ in 0..MAX_WALK {
            if parent <= 1 {
                break;
            }
            let Some(ps) = stat_of(parent) else { break };
            if let Some(&(st, d)) = self.images.get(&parent) {
                if st == ps.starttime {
                    return d + 1;
                }
            }
            if parent == root {
                return 1;
            }
            parent = ps.ppid;
        }
        // Lineage lost (orphan reparented outside the tree): nested is the
        // conservative reading for the shipped policies.
        tracing::debug!(pid, "exec with unknown lineage: counted as depth 1");
        1
    }

    pub fn record(&mut self, pid: u32, starttime: u64, depth: u32) {
        self.images.insert(pid, (starttime, depth));
        if self.images.len() > 8192 {
            self.prune();
        }
    }

    /// Forgets processes that exited (or whose pid was reused).
    fn prune(&mut self) {
        self.images
            .retain(|&pid, &mut (st, _)| tracee::proc_stat(pid).is_ok_and(|s| s.starttime == st));
    }
}

/// Serves `tree` until every process in it has exited.
pub fn serve(ctx: Arc<SupervisorContext>, tree: Tree) {
    let mut book = DepthBook::default();
    // Approved execs are let through by approval waiters; they report here so
    // the book (owned by this thread) stays right for their children.
    let (approved_tx, approved_rx) = mpsc::channel::<(u32, u64, u32)>();
    // Read once, while the tree's root (unixwrap, waiting for the ACK) is
    // surely alive: its parent is the SDK daemon.
    let protected = signals::Protected::for_tree(tree.root_pid);
    tracing::info!(session = %tree.session_id, root_pid = tree.root_pid, "supervising tree");
    if let Err(e) = notif::set_sync_wakeup(tree.fd.as_fd()) {
        // Only a cost: every exec waits for an ordinary wake-up instead.
        tracing::debug!("synchronous wake-up not available on this kernel: {e}");
    }
    loop {
        let mut pfd = libc::pollfd {
            fd: tree.fd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd.
        let rc = unsafe { libc::poll(&mut pfd, 1, -1) };
        if rc < 0 {
            let e = std::io::Error::last_os_error();
            if e.raw_os_error() == Some(libc::EINTR) {
                continue;
            }
            tracing::error!("poll on notify fd failed: {e}; tree abandoned (its execs now fail)");
            break;
        }
        if pfd.revents & libc::POLLIN == 0 {
            // POLLHUP: no process uses the filter any more.
            break;
        }
        let n = match notif::recv(tree.fd.as_fd()) {
            Ok(n) => n,
            Err(e) => match e.raw_os_error() {
                // The tracee died before we read the notification, or a signal.
                Some(libc::ENOENT | libc::EINTR) => continue,
                _ => {
                    tracing::error!("NOTIF_RECV failed: {e}; tree abandoned");
                    break;
                }
            },
        };
        while let Ok((pid, starttime, depth)) = approved_rx.try_recv() {
            book.record(pid, starttime, depth);
        }
        handle(&ctx, &tree, &mut book, &approved_tx, &protected, n);
    }
    tracing::info!(session = %tree.session_id, root_pid = tree.root_pid, "tree finished");
}

/// Facts gathered for one exec before the policy is asked.
struct Gathered {
    pid: u32,
    stat: tracee::ProcStat,
    target: ExecTarget,
    argv: tracee::Argv,
}

/// Why an exec could not be judged.
enum GatherError {
    /// No exec happens: answer the kernel's own errno, no audit event.
    Missing(i32),
    /// The tracee is gone: nothing to answer.
    Vanished,
    /// Deny and audit with this rule and reason.
    Undecidable {
        rule: &'static str,
        reason: String,
        pid: u32,
        ppid: u32,
        filename: String,
    },
}

fn gather(
    limits: &ExecveSection,
    n: &Notification,
    call: ExecCall,
) -> Result<Gathered, GatherError> {
    let tid = n.pid;
    let stat = tracee::proc_stat(tid).map_err(|_| GatherError::Vanished)?;
    let pid = tracee::tgid_of(tid, &stat).map_err(|_| GatherError::Vanished)?;
    let undecidable =
        |rule: &'static str, reason: String, filename: String| GatherError::Undecidable {
            rule,
            reason,
            pid,
            ppid: stat.ppid,
            filename,
        };
    let (dirfd, path_ptr, argv_ptr, flags, ptr_size) = match call {
        ExecCall::Execve { ptr_size } => (libc::AT_FDCWD, n.args[0], n.args[1], 0, ptr_size),
        ExecCall::Execveat { ptr_size } => (
            n.args[0] as i32,
            n.args[1],
            n.args[2],
            n.args[4] as i32,
            ptr_size,
        ),
    };
    let path = if path_ptr == 0 {
        return Err(undecidable(
            "unreadable",
            "exec path pointer is NULL".into(),
            String::new(),
        ));
    } else {
        match tracee::read_cstring(tid, path_ptr, libc::PATH_MAX as usize) {
            Ok((p, true)) => p,
            Ok((_, false)) => {
                return Err(undecidable(
                    "unreadable",
                    "exec path longer than PATH_MAX".into(),
                    String::new(),
                ))
            }
            Err(e) => {
                return Err(undecidable(
                    "unreadable",
                    format!("exec path cannot be read: {e}"),
                    String::new(),
                ))
            }
        }
    };
    let empty_path = flags & libc::AT_EMPTY_PATH != 0;
    let target = match tracee::resolve_exec_target(pid, tid, dirfd, &path, empty_path) {
        Ok(t) => t,
        Err(ResolveError::Missing(errno)) => return Err(GatherError::Missing(errno)),
        Err(ResolveError::Other(e)) => {
            return Err(undecidable(
                "unresolvable",
                format!("exec path cannot be resolved in the tracee's view: {e}"),
                String::from_utf8_lossy(&path).into_owned(),
            ))
        }
    };
    let argv = tracee::read_argv(
        tid,
        argv_ptr,
        ptr_size,
        limits.max_argc,
        limits.max_argv_bytes,
    )
    .map_err(|e| {
        undecidable(
            "unreadable",
            format!("argv cannot be read: {e}"),
            target.filename.clone(),
        )
    })?;
    Ok(Gathered {
        pid,
        stat,
        target,
        argv,
    })
}

fn deny_event(
    pid: u32,
    ppid: u32,
    depth: u32,
    filename: String,
    rule: &str,
    reason: String,
) -> ExecEvent {
    ExecEvent {
        pid,
        parent_pid: ppid,
        depth,
        filename,
        resolved: None,
        argv: Vec::new(),
        truncated: false,
        decision: "deny".into(),
        rule: rule.into(),
        effective_action: "deny".into(),
        message: Some(reason),
        approval_id: None,
        approval_outcome: None,
        approver: None,
        reason: None,
    }
}

fn decision_name(d: Decision) -> &'static str {
    match d {
        Decision::Allow => "allow",
        Decision::Deny => "deny",
        Decision::Approve => "approve",
        Decision::Audit => "audit",
    }
}

/// The policy's verdict on the program and, for a `#!` script, on its
/// interpreter as well (the kernel starts the interpreter without an exec
/// the filter could trap); the stricter stands. Only the first level is
/// read: an interpreter that is itself a script is judged by its name.
fn evaluate_exec(policy: &Policy, facts: &ExecFacts<'_>, target: &ExecTarget) -> Verdict {
    let verdict = policy::evaluate(policy, facts);
    let Some(mut argv) = tracee::shebang(target) else {
        return verdict;
    };
    let interpreter = argv[0].clone();
    argv.push(facts.filename.to_string());
    argv.extend(facts.argv.iter().skip(1).cloned());
    let inner = policy::evaluate(
        policy,
        &ExecFacts {
            filename: &interpreter,
            resolved: None,
            argv: &argv,
            depth: facts.depth,
        },
    );
    if inner.decision.strictness() > verdict.decision.strictness() {
        inner
    } else {
        verdict
    }
}

/// Handles one notification: gather, decide, answer, audit.
fn handle(
    ctx: &SupervisorContext,
    tree: &Tree,
    book: &mut DepthBook,
    approved: &Sender<(u32, u64, u32)>,
    protected: &signals::Protected,
    n: Notification,
) {
    let started = std::time::Instant::now();
    let fd = tree.fd.as_fd();
    let Some(call) = classify_call(n.arch, n.nr) else {
        if let Some(call) = signals::classify(n.arch, n.nr) {
            return signals::handle(ctx, tree, protected, call, &n);
        }
        ctx.audit.record(
            &tree.session_id,
            EventBody::Execve(deny_event(
                n.pid,
                0,
                0,
                String::new(),
                "unexpected_syscall",
                format!("unexpected syscall {} on arch {:#x}", n.nr, n.arch),
            )),
        );
        let _ = notif::respond_errno(fd, n.id, libc::EACCES);
        return;
    };
    let g = match gather(&ctx.limits, &n, call) {
        Ok(g) => g,
        Err(GatherError::Missing(errno)) => {
            let _ = notif::respond_errno(fd, n.id, errno);
            return;
        }
        Err(GatherError::Vanished) => {
            let _ = notif::respond_errno(fd, n.id, libc::EACCES);
            tracing::debug!(tid = n.pid, "tracee vanished before its exec was read");
            return;
        }
        Err(GatherError::Undecidable {
            rule,
            reason,
            pid,
            ppid,
            filename,
        }) => {
            tracing::warn!(pid, "exec denied: {reason}");
            ctx.audit.record(
                &tree.session_id,
                EventBody::Execve(deny_event(pid, ppid, 0, filename, rule, reason)),
            );
            let _ = notif::respond_errno(fd, n.id, libc::EACCES);
            return;
        }
    };
    // The facts above were read from a pid; prove it still names the tracee
    // that is waiting in this very syscall.
    if !notif::id_valid(fd, n.id) {
        tracing::debug!(pid = g.pid, "tracee gone after reading its exec");
        return;
    }
    let depth = book.depth_of(g.pid, &g.stat, tree.root_pid, |p| tracee::proc_stat(p).ok());
    if g.stat.num_threads > 1 {
        tracing::info!(
            pid = g.pid,
            threads = g.stat.num_threads,
            "exec from a multi-threaded process: its argv may change after it was read"
        );
    }
    let facts = ExecFacts {
        filename: &g.target.filename,
        resolved: g.target.resolved.as_deref(),
        argv: &g.argv.args,
        depth,
    };
    let verdict: Verdict = if g.target.anonymous {
        // Whatever the policy says: Landlock does not see these files (a
        // memfd has no path to grant or deny), so nothing else would stop a
        // payload written to memory and run with fexecve.
        Verdict {
            decision: Decision::Deny,
            rule: RULE_FILELESS_EXEC.into(),
            message: Some(
                "running a program from memory (memfd) or from a deleted file is not allowed"
                    .into(),
            ),
            judged: g.target.filename.clone(),
        }
    } else if g.argv.truncated && ctx.limits.on_truncated == OnTruncated::Deny {
        Verdict {
            decision: Decision::Deny,
            rule: "execve_truncated".into(),
            message: Some(format!(
                "argv exceeds execve.max_argc={} or execve.max_argv_bytes={}",
                ctx.limits.max_argc, ctx.limits.max_argv_bytes
            )),
            judged: g.target.filename.clone(),
        }
    } else {
        evaluate_exec(&ctx.policy, &facts, &g.target)
    };
    let allow = match verdict.decision {
        Decision::Allow | Decision::Audit => true,
        Decision::Deny => false,
        Decision::Approve => {
            // Held: a waiter thread answers and audits it; this thread goes
            // on serving the tree.
            ctx.approvals.hold(
                tree.fd.clone(),
                HeldExec {
                    session_id: tree.session_id.clone(),
                    notif_id: n.id,
                    pid: g.pid,
                    parent_pid: g.stat.ppid,
                    starttime: g.stat.starttime,
                    depth,
                    filename: g.target.filename,
                    resolved: g.target.resolved,
                    argv: g.argv.args,
                    truncated: g.argv.truncated,
                    rule: verdict.rule,
                    message: verdict.message,
                },
                approved.clone(),
            );
            return;
        }
    };
    // The event is written before the answer: whatever the exec does next,
    // the audit trail already has it (and a reader that saw the command end
    // sees its last exec).
    let message = verdict.message.clone();
    ctx.audit.record(
        &tree.session_id,
        EventBody::Execve(ExecEvent {
            pid: g.pid,
            parent_pid: g.stat.ppid,
            depth,
            filename: g.target.filename.clone(),
            resolved: g.target.resolved.clone(),
            argv: g.argv.args,
            truncated: g.argv.truncated,
            decision: decision_name(verdict.decision).into(),
            rule: verdict.rule,
            effective_action: if allow { "allow" } else { "deny" }.into(),
            message,
            approval_id: None,
            approval_outcome: None,
            approver: None,
            reason: None,
        }),
    );
    // SAFETY ARGUMENT for CONTINUE: see the module doc. The facts were read
    // while the tracee was stopped in this syscall and id_valid confirmed the
    // notification (hence the pid) is still live.
    // The supervisor's own time for this exec (facts, policy, audit); taken
    // before the answer, which may hand this CPU to the tracee at once.
    let own_us = started.elapsed().as_micros() as u64;
    let answered = if allow {
        notif::respond_continue(fd, n.id)
    } else {
        notif::respond_errno(fd, n.id, libc::EACCES)
    };
    if let Err(e) = &answered {
        tracing::debug!(pid = g.pid, "answer not delivered (tracee gone?): {e}");
    }
    tracing::trace!(pid = g.pid, us = own_us, "exec answered");
    if allow && answered.is_ok() {
        book.record(g.pid, g.stat.starttime, depth);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tracee::ProcStat;

    fn st(ppid: u32, starttime: u64) -> ProcStat {
        ProcStat {
            ppid,
            pgrp: ppid,
            num_threads: 1,
            starttime,
        }
    }

    #[test]
    fn classifies_exec_syscalls() {
        assert_eq!(
            classify_call(AUDIT_ARCH_X86_64, 59),
            Some(ExecCall::Execve { ptr_size: 8 })
        );
        assert_eq!(
            classify_call(AUDIT_ARCH_I386, 11),
            Some(ExecCall::Execve { ptr_size: 4 })
        );
        assert_eq!(classify_call(AUDIT_ARCH_X86_64, 0), None);
    }

    #[test]
    fn depth_follows_forks_and_keeps_in_place_execs() {
        // root 100 execs sh (0); sh forks 101 which execs ls (1); 101's fork 102 execs (2).
        let procs: HashMap<u32, ProcStat> = [
            (100, st(50, 1)),
            (101, st(100, 2)),
            (102, st(101, 3)),
            (103, st(100, 4)),
        ]
        .into_iter()
        .collect();
        let lookup = |p: u32| procs.get(&p).copied();
        let mut b = DepthBook::default();
        assert_eq!(b.depth_of(100, &procs[&100], 100, lookup), 0);
        b.record(100, 1, 0);
        // exec in place by the root keeps depth 0
        assert_eq!(b.depth_of(100, &procs[&100], 100, lookup), 0);
        assert_eq!(b.depth_of(101, &procs[&101], 100, lookup), 1);
        b.record(101, 2, 1);
        assert_eq!(b.depth_of(102, &procs[&102], 100, lookup), 2);
        assert_eq!(b.depth_of(103, &procs[&103], 100, lookup), 1);
    }

    #[test]
    fn reused_pid_is_not_the_old_process() {
        let procs: HashMap<u32, ProcStat> =
            [(100, st(50, 1)), (101, st(100, 9))].into_iter().collect();
        let lookup = |p: u32| procs.get(&p).copied();
        let mut b = DepthBook::default();
        b.record(100, 1, 0);
        b.record(101, 2, 5); // an older process that had pid 101
        assert_eq!(b.depth_of(101, &procs[&101], 100, lookup), 1);
    }

    #[test]
    fn lost_lineage_counts_as_nested() {
        let b = DepthBook::default();
        assert_eq!(b.depth_of(300, &st(1, 7), 100, |_| None), 1);
    }
}
