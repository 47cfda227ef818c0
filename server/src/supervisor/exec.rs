//! The backend-neutral exec path: from a caught exec to its answer.
//!
//! A backend (`notify` today, ptrace later) hands over the calling thread's
//! id, the syscall and its register arguments, and an [`ExecStop`] to answer
//! through. Here, in order:
//!
//! 1. who: the thread's stat and thread group;
//! 2. the path, read and resolved in the thread's own view: a path that
//!    names nothing is answered with the kernel's own errno (no decision: a
//!    failing errno is safe whatever was read);
//! 3. the race guard: who else shares the caller's memory (`sharing`); if
//!    anyone, they are stopped before anything is read for the decision, and
//!    the path is read again;
//! 4. argv, and where the strings live (`vma`: no shared mappings);
//! 5. the notification is still the same waiting thread (`still_waiting`);
//! 6. depth, then the pure decision (`policy::judge`);
//! 7. approve: hand to `approval` (the tasks stopped are released first);
//!    otherwise audit, then answer;
//! 8. after CONTINUE with stopped tasks: watch the caller (seized with
//!    `PTRACE_O_TRACEEXEC` and a pending interrupt) until its exec completed
//!    (`PTRACE_EVENT_EXEC`: the new image has not run an instruction) or
//!    failed (it stops on its way back to user space), then release everyone.
//!
//! Failure modes: anything that cannot be read, resolved or frozen is a deny
//! (EACCES) audited with the rule `unreadable`, `unresolvable`,
//! `memory_not_frozen` or `shared_memory` and the reason.

use super::ptrace::{self, Event, Lingering};
use super::sharing::{self, Frozen, Sharing};
use super::vma;
use super::{signals, DepthBook, SupervisorContext, Tree};
use crate::approval::HeldExec;
use crate::audit::{Action, EventBody, ExecEvent, ExecSubject, FileIdentity, Memory};
use crate::config::OnTruncated;
use crate::policy::{self, Decision, ExecFacts, ProgramFacts, Truncation, Verdict};
use crate::tracee::{self, ExecTarget, ResolveError};
use agentsh_proto::execabi::{ExecArgs, ExecSyscall};
use std::io;
use std::os::fd::OwnedFd;
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::Arc;
use std::time::{Duration, Instant};

pub use crate::policy::RULE_FILELESS_EXEC;

/// How long an allowed exec of a frozen caller may take before the tasks
/// stopped for it are released anyway (the kernel has long copied the strings).
const EXEC_DEADLINE: Duration = Duration::from_secs(10);
/// How long, after the exec, tasks asleep in the kernel get to reach their stop.
const RELEASE_GRACE: Duration = Duration::from_millis(5);

/// A caught exec, as its backend answers it.
pub trait ExecStop {
    /// The exec still waits, and its thread id still names the same thread.
    fn still_waiting(&self) -> bool;
    /// Let the exec proceed (user-notify: CONTINUE).
    fn proceed(&self) -> io::Result<()>;
    /// Fail the exec with `errno`.
    fn refuse(&self, errno: i32) -> io::Result<()>;
}

/// What an approval waiter needs to answer a held exec later.
pub enum Holder {
    Notify { fd: Arc<OwnedFd>, id: u64 },
}

/// One caught exec.
pub struct ExecRequest {
    /// The calling thread.
    pub tid: u32,
    pub call: &'static ExecSyscall,
    pub args: ExecArgs,
}

/// What the tree's thread keeps between execs.
pub struct TreeState {
    pub root_pid: u32,
    pub book: DepthBook,
    pub protected: signals::Protected,
    /// Tasks stopped for an exec that had not reached their stop when it ended.
    pub lingering: Lingering,
    approved_tx: Sender<(u32, u64, u32)>,
    approved_rx: Receiver<(u32, u64, u32)>,
}

impl TreeState {
    pub fn new(root_pid: u32) -> TreeState {
        // Approved execs are let through by approval waiters; they report
        // here so the book (owned by the tree's thread) stays right.
        let (approved_tx, approved_rx) = mpsc::channel();
        TreeState {
            root_pid,
            book: DepthBook::default(),
            // Read once, while the tree's root (unixwrap, waiting for the
            // ACK) is surely alive: its parent is the SDK daemon.
            protected: signals::Protected::for_tree(root_pid),
            lingering: Lingering::default(),
            approved_tx,
            approved_rx,
        }
    }

    /// Records the execs approval waiters let through since the last call.
    pub fn take_approved(&mut self) {
        while let Ok((pid, starttime, depth)) = self.approved_rx.try_recv() {
            self.book.record(pid, starttime, depth);
        }
    }
}

/// Why the exec cannot be judged: deny and audit with this rule and reason.
struct Undecidable {
    rule: &'static str,
    reason: String,
}

fn undecidable(rule: &'static str, reason: String) -> Undecidable {
    Undecidable { rule, reason }
}

/// The facts of one exec, once gathered.
struct Gathered {
    stat: tracee::ProcStat,
    target: ExecTarget,
    argv: tracee::Argv,
    memory: Memory,
}

/// The outcome of reading the path once.
enum PathRead {
    Target(Vec<u8>, ExecTarget),
    /// The kernel would answer this errno: no exec happens.
    Missing(i32),
}

fn read_path(pid: u32, req: &ExecRequest) -> Result<PathRead, Undecidable> {
    let a = &req.args;
    if a.path == 0 {
        return Err(undecidable(
            "unreadable",
            "exec path pointer is NULL".into(),
        ));
    }
    let path = match tracee::read_cstring(req.tid, a.path, libc::PATH_MAX as usize) {
        Ok((p, true)) => p,
        Ok((_, false)) => {
            return Err(undecidable(
                "unreadable",
                "exec path longer than PATH_MAX".into(),
            ))
        }
        Err(e) => {
            return Err(undecidable(
                "unreadable",
                format!("exec path cannot be read: {e}"),
            ))
        }
    };
    let empty_path = a.flags & libc::AT_EMPTY_PATH != 0;
    match tracee::resolve_exec_target(pid, req.tid, a.dirfd, &path, empty_path) {
        Ok(t) => Ok(PathRead::Target(path, t)),
        Err(ResolveError::Missing(errno)) => Ok(PathRead::Missing(errno)),
        Err(ResolveError::Other(e)) => Err(undecidable(
            "unresolvable",
            format!(
                "exec path {:?} cannot be resolved in the calling thread's view: {e}",
                String::from_utf8_lossy(&path)
            ),
        )),
    }
}

/// Every string address the kernel will read again after CONTINUE: the path,
/// the argv pointer array and each argv string.
fn check_mappings(pid: u32, req: &ExecRequest, argv: &tracee::Argv) -> Result<(), Undecidable> {
    let mut maps = vma::Maps::open(pid)
        .map_err(|e| undecidable("unreadable", format!("memory map cannot be read: {e}")))?;
    let own_exe = std::fs::read_link(format!("/proc/{pid}/exe"))
        .map(|p| p.to_string_lossy().into_owned())
        .unwrap_or_default();
    let no_write = crate::policy::landlock::SYSTEM_NO_WRITE;
    let mut addrs = vec![("path", req.args.path)];
    if req.args.argv != 0 {
        addrs.push(("argv", req.args.argv));
        addrs.extend(argv.ptrs.iter().map(|&p| ("an argv string", p)));
    }
    for (what, addr) in addrs {
        let v = maps.find(addr).map_err(|e| {
            undecidable("unreadable", format!("the exec's {what} at {addr:#x}: {e}"))
        })?;
        if let Some(why) = vma::refusal(&v, &own_exe, no_write) {
            return Err(undecidable(
                "shared_memory",
                format!("the exec's {what} lies in {why}"),
            ));
        }
    }
    Ok(())
}

/// What gathering came to.
enum Gather {
    /// Judge these facts of process `pid`.
    Ready(u32, Gathered),
    /// Answer this errno without a decision or an event (no such program,
    /// or the caller vanished).
    Answer(i32),
    /// Deny and audit.
    Refused {
        pid: u32,
        ppid: u32,
        filename: String,
        why: Undecidable,
    },
}

/// Steps 1–5 of the module doc. `frozen` receives the tasks stopped, which
/// the caller releases whatever the outcome.
fn gather(
    ctx: &SupervisorContext,
    st: &mut TreeState,
    req: &ExecRequest,
    frozen: &mut Option<Frozen>,
) -> Gather {
    let tid = req.tid;
    let Ok(stat) = tracee::proc_stat(tid) else {
        return Gather::Answer(libc::EACCES); // vanished: nothing to audit
    };
    let Ok(pid) = tracee::tgid_of(tid, &stat) else {
        return Gather::Answer(libc::EACCES);
    };
    let fail = |filename: &str, why| Gather::Refused {
        pid,
        ppid: stat.ppid,
        filename: filename.to_string(),
        why,
    };
    let first = match read_path(pid, req) {
        Ok(PathRead::Missing(errno)) => return Gather::Answer(errno),
        Ok(PathRead::Target(p, t)) => (p, t),
        Err(u) => return fail("", u),
    };
    let memory = match sharing::sharing(pid, tid, &stat) {
        Ok(Sharing::Exclusive) => Memory::Exclusive,
        Ok(Sharing::Shared(tasks)) => match sharing::freeze(pid, tid, tasks, &mut st.lingering) {
            Ok(f) => {
                *frozen = Some(f);
                Memory::Frozen
            }
            Err(why) => return fail(&first.1.filename, undecidable("memory_not_frozen", why)),
        },
        Err(why) => return fail(&first.1.filename, undecidable("memory_not_frozen", why)),
    };
    let target = if memory == Memory::Frozen {
        // The first read raced with tasks that were still running.
        match read_path(pid, req) {
            Ok(PathRead::Missing(errno)) => return Gather::Answer(errno),
            Ok(PathRead::Target(_, t)) => t,
            Err(u) => return fail(&first.1.filename, u),
        }
    } else {
        first.1
    };
    let argv = match tracee::read_argv(
        tid,
        req.args.argv,
        req.args.ptr_size,
        ctx.limits.max_argc,
        ctx.limits.max_argv_bytes,
    ) {
        Ok(a) => a,
        Err(e) => {
            return fail(
                &target.filename,
                undecidable("unreadable", format!("argv cannot be read: {e}")),
            )
        }
    };
    if let Err(u) = check_mappings(pid, req, &argv) {
        return fail(&target.filename, u);
    }
    Gather::Ready(
        pid,
        Gathered {
            stat,
            target,
            argv,
            memory,
        },
    )
}

fn subject(pid: u32, g: &Gathered, depth: u32) -> ExecSubject {
    ExecSubject {
        pid,
        parent_pid: g.stat.ppid,
        depth,
        filename: g.target.filename.clone(),
        resolved: g.target.resolved.clone(),
        argv: g.argv.args.clone(),
        truncated: g.argv.truncated,
        file: g.target.identity().ok().map(|(dev, ino)| FileIdentity {
            dev,
            ino,
            sha256: None,
        }),
        interpreters: Vec::new(),
        copy_of: Vec::new(),
        memory: Some(g.memory),
    }
}

/// The `#!` interpreter of the program, with the argv the kernel builds.
fn interpreters_of(g: &Gathered) -> Vec<policy::Interpreter> {
    tracee::shebang(&g.target)
        .map(|mut argv| {
            let path = argv[0].clone();
            argv.push(g.target.filename.clone());
            argv.extend(g.argv.args.iter().skip(1).cloned());
            vec![policy::Interpreter {
                path,
                resolved: None,
                argv,
                copy_of: Vec::new(),
            }]
        })
        .unwrap_or_default()
}

/// The facts the policy judges, from what was gathered.
fn judge(
    ctx: &SupervisorContext,
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
        copy_of: &[],
    };
    policy::judge(&ctx.policy, &facts)
}

/// Handles one caught exec: gather, decide, answer, audit (module doc).
pub fn handle(
    ctx: &SupervisorContext,
    tree: &Tree,
    st: &mut TreeState,
    req: &ExecRequest,
    stop: &dyn ExecStop,
    holder: Holder,
) {
    let started = Instant::now();
    let mut frozen: Option<Frozen> = None;
    let (pid, g) = match gather(ctx, st, req, &mut frozen) {
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
            why: u,
        } => {
            release(st, frozen, Duration::ZERO);
            tracing::warn!(pid, abi = req.call.abi, "exec denied: {}", u.reason);
            let event = ExecEvent::new(
                ExecSubject {
                    pid,
                    parent_pid: ppid,
                    filename,
                    ..ExecSubject::default()
                },
                Decision::Deny,
                u.rule,
                Action::Deny,
                Some(u.reason),
            );
            ctx.audit.record(&tree.session_id, EventBody::Execve(event));
            let _ = stop.refuse(libc::EACCES);
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
    let depth = st
        .book
        .depth_of(pid, &g.stat, st.root_pid, |p| tracee::proc_stat(p).ok());
    let interpreters = interpreters_of(&g);
    let verdict = judge(ctx, &g, depth, &interpreters);
    let mut subject = subject(pid, &g, depth);
    subject.interpreters = interpreters;
    let mut allow = match verdict.decision {
        Decision::Allow | Decision::Audit => true,
        Decision::Deny => false,
        Decision::Approve => {
            // Held: a waiter thread answers and audits it; this thread goes
            // on serving the tree. Nothing stays stopped while a human thinks.
            release(st, frozen, Duration::ZERO);
            let Holder::Notify { fd, id } = holder;
            ctx.approvals.hold(
                fd,
                HeldExec {
                    session_id: tree.session_id.clone(),
                    notif_id: id,
                    starttime: g.stat.starttime,
                    subject,
                    rule: verdict.rule,
                    message: verdict.message,
                },
                st.approved_tx.clone(),
            );
            return;
        }
    };
    let mut rule = verdict.rule;
    let mut message = verdict.message;
    // With stopped tasks, the caller is watched through its exec: seized
    // (TRACEEXEC) with a stop pending, so it stops at PTRACE_EVENT_EXEC on
    // success and on its way back to user space on failure.
    if allow && frozen.is_some() {
        if let Err(e) = ptrace::seize(req.tid, libc::PTRACE_O_TRACEEXEC)
            .and_then(|()| ptrace::interrupt(req.tid))
        {
            allow = false;
            rule = "memory_not_frozen".into();
            message = Some(format!("cannot watch the exec of thread {}: {e}", req.tid));
        }
    }
    // The event is written before the answer: whatever the exec does next,
    // the audit trail already has it.
    let event = ExecEvent::new(
        subject,
        verdict.decision,
        rule,
        if allow { Action::Allow } else { Action::Deny },
        message,
    );
    ctx.audit.record(&tree.session_id, EventBody::Execve(event));
    // The supervisor's own time for this exec (facts, freeze, policy,
    // audit); taken before the answer, which may hand this CPU to the tracee.
    let own_us = started.elapsed().as_micros() as u64;
    if !allow {
        release(st, frozen, Duration::ZERO);
        if let Err(e) = stop.refuse(libc::EACCES) {
            tracing::debug!(pid, "answer not delivered (tracee gone?): {e}");
        }
        tracing::trace!(pid, us = own_us, "exec answered");
        return;
    }
    // SAFETY ARGUMENT for CONTINUE. The kernel reads the path and argv again
    // after this answer. (a) Nothing else can write them: either no other
    // task shares the caller's address space (`Sharing::Exclusive`: a single
    // thread whose parent does not share it, and the base filter keeps
    // CLONE_VM children to threads and vfork), or every task that does is
    // ptrace-stopped or asleep in the kernel with a stop pending, and stays so
    // until the exec completed or failed (`watch_exec` below). (b) No other
    // process can write them: `check_mappings` refused strings in shared
    // mappings and in private pages of files a tree may write. (c) The path
    // resolved to the file judged: see the remaining symlink/rename window in
    // docs/security-model.md. (d) `still_waiting` proved the thread id still
    // names the thread stopped in this very syscall.
    if frozen.is_some() {
        hold_for_tests();
    }
    let answered = stop.proceed();
    tracing::trace!(pid, us = own_us, "exec answered");
    if let Err(e) = &answered {
        tracing::debug!(pid, "answer not delivered (tracee gone?): {e}");
    }
    if answered.is_ok() {
        st.book.record(pid, g.stat.starttime, depth);
    }
    if let Some(mut f) = frozen {
        if answered.is_ok() {
            watch_exec(req.tid, pid, &mut f, &mut st.lingering);
        } else {
            st.lingering.add(req.tid);
        }
        f.release(&mut st.lingering, RELEASE_GRACE);
    }
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

/// How a watched exec ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    /// `PTRACE_EVENT_EXEC`: the new image, not yet run, as thread `tid` (the
    /// thread-group id when a non-leader thread exec'd).
    Completed {
        tid: u32,
    },
    /// The caller came back to user space: the exec failed.
    Failed,
    Gone,
    TimedOut,
}

/// Waits for the caller's exec to complete or fail, recording what the other
/// stopped tasks do meanwhile (they die in `de_thread`, or a vfork parent
/// wakes); detaches the caller.
fn watch_exec(tid: u32, pid: u32, frozen: &mut Frozen, lingering: &mut Lingering) -> Outcome {
    let deadline = Instant::now() + EXEC_DEADLINE;
    loop {
        let Some((t, ev)) = ptrace::wait_any(deadline) else {
            tracing::warn!(tid, "exec not finished within {EXEC_DEADLINE:?}; releasing");
            lingering.add(tid);
            return Outcome::TimedOut;
        };
        if (t == tid || t == pid)
            && matches!(
                ev,
                Event::Stopped {
                    event: ptrace::EVENT_EXEC,
                    ..
                }
            )
        {
            let _ = ptrace::detach(t, 0);
            return Outcome::Completed { tid: t };
        }
        if t == tid {
            if let Event::Stopped { .. } = ev {
                let _ = ptrace::detach(t, ev.detach_signal());
                return Outcome::Failed;
            }
            return Outcome::Gone;
        }
        if !frozen.saw(t, ev) {
            if let Event::Stopped { .. } = ev {
                let _ = ptrace::detach(t, ev.detach_signal());
                lingering.take(t);
            }
        }
    }
}
