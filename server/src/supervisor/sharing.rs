//! Who can write the caller's strings, and stopping them before they are read.
//!
//! The path and argv of an exec live in the caller's memory. seccomp
//! user-notify stops the calling thread only; anything else that shares its
//! memory could rewrite them after the supervisor read them and before the
//! kernel reads them again (CONTINUE). The sharing model:
//!
//! * the base filter refuses `clone` with `CLONE_VM` but neither
//!   `CLONE_THREAD` nor `CLONE_VFORK`, and `CLONE_VM | CLONE_PARENT` without
//!   `CLONE_THREAD` (`clone3` is ENOSYS): so within a tree, memory is shared
//!   only by a thread group and by `vfork` relations (a vfork child shares its
//!   parent's memory until it execs or exits, and only the parent's vforking
//!   thread waits; its other threads run on);
//! * so the set is: the caller's process and the parents above it while
//!   `kcmp(KCMP_VM)` says they share its memory, every thread of those, and
//!   the vfork children of any of them (and their threads, and so on).
//!
//! A single-threaded caller whose parent does not share its memory is
//! `exclusive` (the common case: one `kcmp`): no child can share it either,
//! because a vfork child exists only while a thread of its parent waits in
//! `vfork`, and the one thread is in `execve`. Memory shared with processes
//! outside this relation (`MAP_SHARED`, private file pages) is `vma`'s job.
//!
//! Otherwise every member is stopped: seized and interrupted
//! (`PTRACE_INTERRUPT`). The freeze
//! holds once each is stopped, gone, or asleep in the kernel (state other
//! than `R` read after the interrupt): a pending interrupt makes any return
//! to user space stop first, so a sleeper (a vfork parent's waiting thread, a
//! thread whose own exec waits for an operator) cannot run a user
//! instruction either. Then the set is checked for members that joined
//! before they could be stopped, which costs no second enumeration: a stopped
//! thread has no vfork child outstanding (a vforking thread sleeps until its
//! child execs or exits, and cannot stop meanwhile), so vfork children are
//! looked for only under the members still asleep; and a new thread shows in
//! its process's thread count, which must equal the threads held (the caller
//! and the members not yet reaped: a seized thread that exits stays counted
//! until its tracer, this thread, reaps it). Whatever joined is stopped in
//! the next round. The tree cannot fight this: `ptrace` is on its blocklist.
//!
//! Failure modes: a member that cannot be seized (no CAP_SYS_PTRACE, already
//! traced by someone else) or that stays running past the deadline makes the
//! freeze fail: the exec is denied with the reason. Members are released by
//! [`Frozen::release`]; one that has not stopped by then (asleep) is handed to
//! the tree's [`Lingering`] list and detached as soon as it stops.

use super::procfiles::ProcFiles;
use super::ptrace::{self, Event, Lingering};
use crate::tracee::{self, StatFile};
use std::collections::BTreeMap;
use std::io;
use std::time::{Duration, Instant};

/// How long members may take to stop before the exec is denied.
const FREEZE_DEADLINE: Duration = Duration::from_secs(2);
/// How long to collect stops before reading the state of those still
/// missing (a running task stops within microseconds of the interrupt).
const SETTLE_SPIN: Duration = Duration::from_micros(10);
/// Rounds of stopping newly found members before giving up on a set that
/// keeps growing.
const MAX_ROUNDS: usize = 8;
/// The most processes a set may have (a fork bomb of vfork children).
const MAX_PROCESSES: usize = 256;

const KCMP_VM: libc::c_long = 1;

/// `kcmp(a, b, KCMP_VM)`: do threads `a` and `b` share one address space?
///
/// # Errors
/// ESRCH (one is gone), ENOSYS (kernel without kcmp), EPERM.
pub fn same_vm(a: u32, b: u32) -> io::Result<bool> {
    let _owner = crate::tracee::as_owner(b);
    // SAFETY: kcmp takes five integers; no memory is passed.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_kcmp,
            a as libc::c_long,
            b as libc::c_long,
            KCMP_VM,
            0 as libc::c_long,
            0 as libc::c_long,
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(rc == 0)
}

/// How a process is related to the caller, for when `kcmp` is refused.
#[derive(Debug, Clone, Copy)]
enum Relation {
    /// An ancestor of the caller (its parent, or a parent's parent that
    /// shares).
    Ancestor(u32),
    /// `child`, a child of thread `tid` of process `pid` (a member of the set
    /// that is asleep).
    ChildOf { child: u32, pid: u32, tid: u32 },
}

/// `tid` shares the memory of the process `rel` names (gone: no).
///
/// `kcmp` answers exactly. Where it is refused (Docker's default seccomp
/// profile refuses it without `CAP_SYS_PTRACE`; kernels without it), the
/// base filter's sharing model answers conservatively: two processes of a
/// tree share memory only through `vfork`, while the vforking thread waits
/// for its child, so a process may share the caller's memory only if a
/// thread it shares through is blocked in `vfork` ([`in_vfork_wait`]).
/// Whatever cannot be read counts as sharing: the exec is then watched
/// (`race_guard: verify`) or its sharers stopped, never let through on a
/// guess.
fn shares(tid: u32, rel: Relation, files: &mut ProcFiles) -> Result<bool, FreezeError> {
    let other = match rel {
        Relation::Ancestor(p) => p,
        Relation::ChildOf { child, .. } => child,
    };
    match same_vm(tid, other) {
        Ok(b) => Ok(b),
        Err(e) if e.raw_os_error() == Some(libc::ESRCH) => Ok(false),
        Err(e)
            if matches!(
                e.raw_os_error(),
                Some(libc::EPERM | libc::ENOSYS | libc::EACCES)
            ) =>
        {
            note_kcmp_refused(&e);
            Ok(match rel {
                Relation::Ancestor(p) => any_thread_in_vfork(p, files),
                Relation::ChildOf { pid, tid, .. } => thread_in_vfork(pid, tid),
            })
        }
        Err(e) => Err(FreezeError::Kcmp(e)),
    }
}

/// Says once, in the log, that sharing is judged without `kcmp`.
fn note_kcmp_refused(e: &io::Error) {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        tracing::info!(
            "kcmp refused ({e}): which processes share a caller's memory is judged from vfork \
             waits instead (more execs are watched; none is let through on a guess)"
        );
    });
}

/// Whether any thread of process `pid` is blocked in `vfork` (unreadable:
/// yes; gone: no).
fn any_thread_in_vfork(pid: u32, files: &mut ProcFiles) -> bool {
    let Ok(st) = files.stat_now(pid) else {
        return false;
    };
    if st.num_threads <= 1 {
        return files.syscall_line(pid).map_or(true, |l| in_vfork_wait(&l));
    }
    match files.threads(pid) {
        Ok(threads) if !threads.is_empty() => threads.iter().any(|&t| thread_in_vfork(pid, t)),
        _ => true,
    }
}

/// Whether thread `tid` of `pid` is blocked in `vfork` (unreadable: yes;
/// gone: no).
fn thread_in_vfork(pid: u32, tid: u32) -> bool {
    let _owner = crate::tracee::as_owner(tid);
    match std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/syscall")) {
        Ok(line) => in_vfork_wait(&line),
        Err(e) => e.raw_os_error() != Some(libc::ENOENT) && e.raw_os_error() != Some(libc::ESRCH),
    }
}

/// The tasks that share the caller's memory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Sharing {
    /// Nothing else can write it. `parent`: the caller's parent shares it
    /// all the same (a vfork child whose lone parent thread waits for it).
    Exclusive { parent: bool },
    /// These can.
    Shared(Members),
}

/// Who shares the caller's memory, as far as enumerated.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Members {
    /// The processes (the caller's first).
    pub procs: Vec<u32>,
    /// Their threads but the caller: tid → its process.
    pub tasks: BTreeMap<u32, u32>,
}

/// The threads of the caller's own process (`stat` already read): its tid
/// alone when it is the only one. Otherwise the ids right after the
/// process's are tried first (a thread usually takes the next free id when
/// it is created, and most threaded callers are young): `tgkill(pid, t, 0)`
/// succeeds only for a thread of `pid` (signal 0 sends nothing), and once as
/// many are found as the thread count says, that is all of them (the count
/// is read again after the freeze; a thread missed shows there). Else the
/// task directory is read. The caller's process is new at almost every exec:
/// it is read, not kept.
fn own_threads(pid: u32, tid: u32, num_threads: u32) -> Vec<u32> {
    if num_threads <= 1 {
        return vec![tid];
    }
    let want = num_threads as usize;
    if want <= GUESS_THREADS {
        let mut found = vec![tid];
        let candidates =
            std::iter::once(pid).chain(pid.saturating_add(1)..=pid.saturating_add(GUESS_SPAN));
        for t in candidates {
            if found.len() == want {
                break;
            }
            if !found.contains(&t) && in_thread_group(pid, t) {
                found.push(t);
            }
        }
        if found.len() == want {
            return found;
        }
    }
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .map(|d| {
            d.flatten()
                .filter_map(|e| e.file_name().to_str()?.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

/// Thread counts up to which [`own_threads`] tries ids before reading the
/// task directory, and how many ids after the process's it tries.
const GUESS_THREADS: usize = 4;
const GUESS_SPAN: u32 = 8;

/// `tgkill(pid, tid, 0)`: is `tid` a thread of `pid`?
fn in_thread_group(pid: u32, tid: u32) -> bool {
    // SAFETY: tgkill takes three integers; signal 0 sends nothing.
    unsafe {
        libc::syscall(
            libc::SYS_tgkill,
            pid as libc::c_long,
            tid as libc::c_long,
            0 as libc::c_long,
        ) == 0
    }
}

/// The threads of another process of the set (kept open in `files`).
fn threads_of(pid: u32, files: &mut ProcFiles) -> Vec<u32> {
    match files.stat(pid) {
        Ok(s) if s.num_threads <= 1 => vec![pid],
        Ok(_) => files.threads(pid).unwrap_or_default(),
        Err(_) => Vec::new(), // gone: its threads are gone too
    }
}

/// Why the tasks sharing the caller's memory cannot be known or stopped
/// (the exec, or the Unix-socket call, is refused with it).
#[derive(Debug, thiserror::Error)]
pub enum FreezeError {
    #[error("cannot compare address spaces (kcmp): {0}")]
    Kcmp(io::Error),
    #[error("cannot stop thread {tid} that shares the caller's memory (PTRACE_SEIZE: {error})")]
    Seize { tid: u32, error: io::Error },
    #[error("cannot stop thread {tid} (PTRACE_INTERRUPT: {error})")]
    Interrupt { tid: u32, error: io::Error },
    #[error(
        "threads {running:?} share the caller's memory and did not stop within {FREEZE_DEADLINE:?}"
    )]
    NotStopped { running: Vec<u32> },
    #[error("the caller vanished: {0}")]
    CallerGone(io::Error),
    #[error("more than {MAX_PROCESSES} processes share the caller's memory")]
    TooMany,
    #[error("the set of tasks sharing the caller's memory kept growing for {MAX_ROUNDS} rounds")]
    KeptGrowing,
}

/// The sharing set of thread `tid` of process `pid` (its stat already read).
///
/// # Errors
/// `kcmp` failed on the caller's own parent (ENOSYS: no way to tell), or
/// the set is absurdly large.
pub fn sharing(
    pid: u32,
    tid: u32,
    stat: &tracee::ProcStat,
    files: &mut ProcFiles,
) -> Result<Sharing, FreezeError> {
    let parent_shares = stat.ppid > 1 && shares(tid, Relation::Ancestor(stat.ppid), files)?;
    if stat.num_threads <= 1 && !parent_shares {
        return Ok(Sharing::Exclusive { parent: false });
    }
    if stat.num_threads <= 1 && vfork_of_a_lone_thread(tid, stat.ppid, files)? {
        return Ok(Sharing::Exclusive { parent: true });
    }
    let mut set = Members {
        procs: vec![pid],
        tasks: BTreeMap::new(),
    };
    let mut p = stat.ppid;
    let mut up_shares = parent_shares;
    while up_shares && set.procs.len() < MAX_PROCESSES {
        set.procs.push(p);
        p = match files.stat(p) {
            Ok(s) => s.ppid,
            Err(_) => break,
        };
        up_shares = p > 1 && shares(tid, Relation::Ancestor(p), files)?;
    }
    for t in own_threads(pid, tid, stat.num_threads) {
        if t != tid {
            set.tasks.insert(t, pid);
        }
    }
    for &q in &set.procs[1..] {
        for t in threads_of(q, files) {
            set.tasks.insert(t, q);
        }
    }
    if set.tasks.is_empty() {
        Ok(Sharing::Exclusive {
            parent: parent_shares,
        })
    } else {
        Ok(Sharing::Shared(set))
    }
}

/// Is the caller `tid` (single-threaded, sharing its parent's memory) the
/// vfork child of a single-threaded parent that waits in `vfork` for it,
/// with no other process sharing that memory above it? Then nothing else can
/// run on the memory until this exec completes or the caller dies: the
/// parent's one thread returns from `vfork` only then (dash, and posix_spawn
/// from a single-threaded program, spawn this way). A single thread has one
/// vfork child outstanding, and the only process that shares its memory and
/// has it as parent is that child: the caller.
///
/// `/proc/<ppid>/syscall` names the call the thread is blocked in; only the
/// native ABI's numbers are believed (a compat task blocked in a call of the
/// same number is not in vfork, and is then frozen like any other). The
/// parent's files are kept open between execs (`files`).
fn vfork_of_a_lone_thread(tid: u32, ppid: u32, files: &mut ProcFiles) -> Result<bool, FreezeError> {
    let Ok(ps) = files.stat_now(ppid) else {
        return Ok(false);
    };
    if ps.num_threads != 1 || (ps.ppid > 1 && shares(tid, Relation::Ancestor(ps.ppid), files)?) {
        return Ok(false);
    }
    let Ok(text) = files.syscall_line(ppid) else {
        return Ok(false);
    };
    Ok(in_vfork_wait(&text))
}

/// Whether a `/proc/<tid>/syscall` line shows a thread blocked in `vfork`
/// (or `clone` with `CLONE_VFORK`) on the native ABI. Pure.
pub fn in_vfork_wait(syscall_line: &str) -> bool {
    let mut f = syscall_line.split_whitespace();
    let Some(nr) = f.next().and_then(|n| n.parse::<i64>().ok()) else {
        return false; // "running", or "-1 ..." (not in a syscall)
    };
    let flags = f
        .next()
        .and_then(|a| u64::from_str_radix(a.trim_start_matches("0x"), 16).ok())
        .unwrap_or(0);
    let vfork_flags = (libc::CLONE_VFORK | libc::CLONE_VM) as u64;
    let clone_vfork = flags & vfork_flags == vfork_flags;
    #[cfg(target_arch = "x86_64")]
    {
        nr == libc::SYS_vfork || (nr == libc::SYS_clone && clone_vfork)
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        nr == libc::SYS_clone && clone_vfork
    }
}

/// The members a freeze stopped (or left asleep with a stop pending).
#[derive(Debug)]
pub struct Frozen {
    /// tid → its process and its stop (None: asleep in the kernel, not
    /// stopped yet).
    members: BTreeMap<u32, (u32, Option<Event>)>,
}

impl Frozen {
    fn new() -> Frozen {
        Frozen {
            members: BTreeMap::new(),
        }
    }

    /// Records an event a wait saw for one of the members.
    pub fn saw(&mut self, tid: u32, ev: Event) -> bool {
        match self.members.get_mut(&tid) {
            Some((_, slot)) => {
                *slot = Some(ev);
                true
            }
            None => false,
        }
    }

    fn pending(&self) -> impl Iterator<Item = u32> + '_ {
        self.members
            .iter()
            .filter(|(_, (_, ev))| ev.is_none())
            .map(|(&t, _)| t)
    }

    /// Detaches every stopped member; a member still asleep goes to `lingering`,
    /// to be detached when it stops. Waits `grace` for the sleepers first
    /// (after an exec they wake at once).
    pub fn release(mut self, lingering: &mut Lingering, grace: Duration) {
        let deadline = Instant::now() + grace;
        while self.pending().next().is_some() {
            let Some((tid, ev)) = ptrace::wait_any(deadline) else {
                break;
            };
            if !self.saw(tid, ev) {
                stray(tid, ev, lingering);
            }
        }
        for (tid, (_, ev)) in std::mem::take(&mut self.members) {
            match ev {
                Some(Event::Gone) => {}
                Some(ev @ Event::Stopped { .. }) => {
                    if let Err(e) = ptrace::detach(tid, ev.detach_signal()) {
                        tracing::debug!(tid, "detach after the exec: {e}");
                    }
                }
                None => lingering.add(tid),
            }
        }
    }
}

/// An event of a tracee that is not a member of this freeze (a lingering
/// one from an earlier exec): detach it if it stopped.
fn stray(tid: u32, ev: Event, lingering: &mut Lingering) {
    if let Event::Stopped { .. } = ev {
        let _ = ptrace::detach(tid, ev.detach_signal());
        lingering.take(tid);
    }
}

/// Stops every member of the sharing set of (`pid`, `tid`), starting from
/// `set`; see the module doc. `caller` is the caller's open stat (its thread
/// count is read again after the stop), `files` the tree's kept `/proc`
/// files.
///
/// # Errors
/// The reason the set could not be frozen; whatever was stopped is released.
pub fn freeze(
    pid: u32,
    tid: u32,
    caller: &StatFile,
    set: Members,
    lingering: &mut Lingering,
    files: &mut ProcFiles,
) -> Result<Frozen, FreezeError> {
    let mut frozen = Frozen::new();
    // The parents found above the caller live on between execs: their files
    // are kept; vfork children found later are read, not kept.
    let parents = set.procs[1..].to_vec();
    let caller_alone = !set.tasks.values().any(|&p| p == pid);
    let mut procs = set.procs;
    let mut todo = set.tasks;
    super::phases::mark("enum");
    for _ in 0..MAX_ROUNDS {
        let done = stop_all(&mut frozen, &todo, lingering)
            .and_then(|()| {
                super::phases::mark("stop");
                settle(&mut frozen, lingering, &mut |t, p| {
                    if parents.contains(&p) {
                        files.thread_state(p, t)
                    } else {
                        tracee::proc_stat(t).ok().map(|s| s.state)
                    }
                })
            })
            .and_then(|()| {
                super::phases::mark("settle");
                Round {
                    pid,
                    tid,
                    caller,
                    caller_alone,
                    parents: &parents,
                    files,
                }
                .joined(&mut procs, &frozen)
            });
        super::phases::mark("joined");
        match done {
            Ok(more) if more.is_empty() => return Ok(frozen),
            Ok(more) => todo = more,
            Err(why) => {
                frozen.release(lingering, Duration::ZERO);
                return Err(why);
            }
        }
    }
    frozen.release(lingering, Duration::ZERO);
    Err(FreezeError::KeptGrowing)
}

/// Seizes and interrupts every task of `todo`: all of them
/// are asked to stop before any is waited for.
fn stop_all(
    frozen: &mut Frozen,
    todo: &BTreeMap<u32, u32>,
    lingering: &mut Lingering,
) -> Result<(), FreezeError> {
    for (&t, &p) in todo {
        // A task an earlier exec left lingering is still seized.
        if !lingering.take(t) {
            match ptrace::seize(t, 0) {
                Ok(()) => {}
                Err(e) if e.raw_os_error() == Some(libc::ESRCH) => continue,
                Err(error) => return Err(FreezeError::Seize { tid: t, error }),
            }
        }
        frozen.members.insert(t, (p, None));
        if let Err(e) = ptrace::interrupt(t) {
            if e.raw_os_error() != Some(libc::ESRCH) {
                return Err(FreezeError::Interrupt { tid: t, error: e });
            }
        }
    }
    Ok(())
}

/// Collects the events that have arrived, without waiting.
fn collect(frozen: &mut Frozen, lingering: &mut Lingering) {
    while let Some((t, ev)) = ptrace::wait_any(Instant::now()) {
        if !frozen.saw(t, ev) {
            stray(t, ev, lingering);
        }
    }
}

/// Waits until every member is stopped, gone or asleep in the kernel. The
/// state (`state(tid, pid)`, read after the interrupt) of each member whose
/// stop has not arrived tells which: anything but `R` is asleep with the stop
/// pending (an interruptible sleep cannot last with an interrupt pending, so
/// that is a killable or uninterruptible one, such as a vfork parent's wait).
/// The running ones are waited for: their stops are collected as they come
/// for [`SETTLE_SPIN`], then their states read again, and so on.
fn settle(
    frozen: &mut Frozen,
    lingering: &mut Lingering,
    state: &mut dyn FnMut(u32, u32) -> Option<u8>,
) -> Result<(), FreezeError> {
    let deadline = Instant::now() + FREEZE_DEADLINE;
    collect(frozen, lingering);
    let mut running: Vec<u32> = Vec::new();
    loop {
        running.clear();
        for (&t, &(p, ev)) in &frozen.members {
            if ev.is_none() && state(t, p) == Some(b'R') {
                running.push(t);
            }
        }
        let spin = Instant::now() + SETTLE_SPIN;
        loop {
            collect(frozen, lingering);
            running.retain(|t| matches!(frozen.members.get(t), Some((_, None))));
            if running.is_empty() {
                return Ok(());
            }
            if Instant::now() >= spin {
                break;
            }
            std::hint::spin_loop();
        }
        if Instant::now() >= deadline {
            return Err(FreezeError::NotStopped {
                running: running.clone(),
            });
        }
        if let Some((t, ev)) = ptrace::wait_any(Instant::now() + Duration::from_millis(2)) {
            if !frozen.saw(t, ev) {
                stray(t, ev, lingering);
            }
        }
    }
}

/// What [`Round::joined`] reads with.
struct Round<'a> {
    pid: u32,
    tid: u32,
    caller: &'a StatFile,
    /// The caller was its process's only thread (it is in `execve`).
    caller_alone: bool,
    parents: &'a [u32],
    files: &'a mut ProcFiles,
}

impl Round<'_> {
    /// (thread count, threads) of process `p` of the set, read now; `None`
    /// when it is gone (and its threads with it).
    fn count(&mut self, p: u32) -> Result<Option<u32>, FreezeError> {
        if p == self.pid && self.caller_alone {
            // Only a running thread of the process could add one.
            return Ok(Some(1));
        }
        if p == self.pid {
            return self
                .caller
                .read()
                .map(|s| Some(s.num_threads))
                .map_err(FreezeError::CallerGone);
        }
        if self.parents.contains(&p) {
            return Ok(self.files.stat_now(p).ok().map(|s| s.num_threads));
        }
        Ok(tracee::proc_stat(p).ok().map(|s| s.num_threads))
    }

    fn threads(&mut self, p: u32, num_threads: u32) -> Vec<u32> {
        if p == self.pid || !self.parents.contains(&p) {
            own_threads(p, p, num_threads)
        } else {
            threads_of(p, self.files)
        }
    }

    /// After a round: the tasks that joined the set before they could be
    /// stopped (module doc), to stop in the next round; empty when none did.
    fn joined(
        &mut self,
        procs: &mut Vec<u32>,
        frozen: &Frozen,
    ) -> Result<BTreeMap<u32, u32>, FreezeError> {
        let (pid, tid) = (self.pid, self.tid);
        let mut more = BTreeMap::new();
        let held = |p: u32| {
            frozen
                .members
                .values()
                .filter(|(q, ev)| *q == p && *ev != Some(Event::Gone))
                .count()
                + usize::from(p == pid)
        };
        let fresh = |t: &u32| *t != tid && !frozen.members.contains_key(t);
        for &p in procs.iter() {
            let Some(n) = self.count(p)? else { continue };
            if n as usize != held(p) {
                for t in self.threads(p, n) {
                    if fresh(&t) {
                        more.insert(t, p);
                    }
                }
            }
        }
        // vfork children of the members still asleep.
        let asleep: Vec<(u32, u32)> = frozen
            .members
            .iter()
            .filter(|(_, (_, ev))| ev.is_none())
            .map(|(&t, &(p, _))| (t, p))
            .collect();
        for (t, p) in asleep {
            let children = if t == p && self.parents.contains(&p) {
                self.files.children(p, t).unwrap_or_default()
            } else {
                children_once(p, t)
            };
            for child in children {
                if procs.contains(&child)
                    || !shares(
                        tid,
                        Relation::ChildOf {
                            child,
                            pid: p,
                            tid: t,
                        },
                        self.files,
                    )?
                {
                    continue;
                }
                if procs.len() >= MAX_PROCESSES {
                    return Err(FreezeError::TooMany);
                }
                procs.push(child);
                let n = tracee::proc_stat(child).map_or(2, |s| s.num_threads);
                for ct in own_threads(child, child, n) {
                    if fresh(&ct) {
                        more.insert(ct, child);
                    }
                }
            }
        }
        Ok(more)
    }
}

/// The children of thread `tid` of `pid`, read once: a thread other than
/// the leader is not kept open (its id could be another thread's later).
fn children_once(pid: u32, tid: u32) -> Vec<u32> {
    use std::io::Read;
    let mut text = String::new();
    let _ = std::fs::File::open(format!("/proc/{pid}/task/{tid}/children"))
        .and_then(|mut f| f.read_to_string(&mut text));
    text.split_ascii_whitespace()
        .filter_map(|c| c.parse().ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kcmp_tells_threads_from_processes() {
        let me = std::process::id();
        assert!(same_vm(me, me).unwrap());
        assert!(!same_vm(me, std::os::unix::process::parent_id()).unwrap());
        let (tx, rx) = std::sync::mpsc::channel();
        let t = std::thread::spawn(move || {
            // SAFETY: gettid has no preconditions.
            tx.send(unsafe { libc::gettid() } as u32).unwrap();
            std::thread::sleep(Duration::from_millis(200));
        });
        let tid = rx.recv().unwrap();
        assert!(same_vm(me, tid).unwrap());
        t.join().unwrap();
    }

    #[test]
    fn vfork_waits_are_recognised_and_nothing_else() {
        #[cfg(target_arch = "x86_64")]
        {
            assert!(in_vfork_wait("58 0x0 0x0 0x0 0x0 0x0 0x0 0x7ffc 0x7f00"));
            assert!(in_vfork_wait("56 0x4111 0x0 0x0 0x0 0x0 0x0 0x7ffc 0x7f00"));
            // fork-like clone, a read, not in a syscall, running.
            assert!(!in_vfork_wait(
                "56 0x1200011 0x0 0x0 0x0 0x0 0x0 0x7ffc 0x7f00"
            ));
            assert!(!in_vfork_wait(
                "0 0x3 0x7ffc 0x100 0x0 0x0 0x0 0x7ffc 0x7f00"
            ));
        }
        assert!(!in_vfork_wait("-1 0x7ffc 0x7f00"));
        assert!(!in_vfork_wait("running"));
    }

    #[test]
    fn a_threaded_process_shares_with_its_threads() {
        let me = std::process::id();
        let stat = tracee::proc_stat(me).unwrap();
        // The test harness runs tests on threads: this process has several.
        if stat.num_threads > 1 {
            match sharing(me, me, &stat, &mut ProcFiles::default()).unwrap() {
                Sharing::Shared(s) => {
                    assert!(!s.tasks.contains_key(&me) && !s.tasks.is_empty());
                    assert_eq!(s.procs, vec![me]);
                }
                Sharing::Exclusive { .. } => panic!("threads share memory"),
            }
        }
    }
}
