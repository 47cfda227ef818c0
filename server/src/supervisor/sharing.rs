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
//! * so the set is: walk up the parents while `kcmp(KCMP_VM)` says they share
//!   the caller's memory, then down the children of every thread of every
//!   process found so far (`/proc/<pid>/task/<tid>/children`), again by
//!   `kcmp`; every thread of those processes but the caller is a member.
//!
//! A single-threaded caller whose parent does not share its memory is
//! `exclusive` (the common case: one `kcmp`): no child can share it either,
//! because a vfork child exists only while a thread of its parent waits in
//! `vfork`, and the one thread is in `execve`. Memory shared with processes
//! outside this relation (`MAP_SHARED`, private file pages) is `vma`'s job.
//!
//! Otherwise every member is seized and interrupted (`PTRACE_SEIZE` +
//! `PTRACE_INTERRUPT`), and the freeze holds once each is stopped, gone, or
//! asleep in the kernel (state other than `R` read after the interrupt): a
//! pending interrupt makes any return to user space stop first, so a sleeper
//! (a vfork parent's waiting thread, a thread whose own exec waits for an
//! operator) cannot run a user instruction either. The set is enumerated
//! again until no new member appears (a thread may have cloned before it
//! stopped). The tree cannot fight this: `ptrace` is on its blocklist.
//!
//! Failure modes: a member that cannot be seized (no CAP_SYS_PTRACE, already
//! traced by someone else) or that stays running past the deadline makes the
//! freeze fail: the exec is denied with the reason. Members are released by
//! [`Frozen::release`]; one that has not stopped by then (asleep) is handed to
//! the tree's [`Lingering`] list and detached as soon as it stops.

use super::ptrace::{self, Event, Lingering};
use crate::tracee;
use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::time::{Duration, Instant};

/// How long members may take to stop before the exec is denied.
const FREEZE_DEADLINE: Duration = Duration::from_secs(2);
/// Enumeration rounds before giving up on a set that keeps growing.
const MAX_ROUNDS: usize = 8;
/// The most processes a set may have (a fork bomb of vfork children).
const MAX_PROCESSES: usize = 256;

const KCMP_VM: libc::c_long = 1;

/// `kcmp(a, b, KCMP_VM)`: do threads `a` and `b` share one address space?
///
/// # Errors
/// ESRCH (one is gone), ENOSYS (kernel without kcmp), EPERM.
pub fn same_vm(a: u32, b: u32) -> io::Result<bool> {
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

/// The tasks that share the caller's memory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Sharing {
    /// Nothing else can write it.
    Exclusive,
    /// These threads (tids) can.
    Shared(BTreeSet<u32>),
}

fn threads_of(pid: u32) -> Vec<u32> {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .map(|d| {
            d.flatten()
                .filter_map(|e| e.file_name().to_str()?.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

fn children_of(pid: u32, tid: u32) -> Vec<u32> {
    std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/children"))
        .map(|s| {
            s.split_whitespace()
                .filter_map(|c| c.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

/// The sharing set of thread `tid` of process `pid` (its stat already read).
///
/// # Errors
/// `kcmp` failed on the caller's own parent (ENOSYS: no way to tell), or
/// the set is absurdly large.
pub fn sharing(pid: u32, tid: u32, stat: &tracee::ProcStat) -> Result<Sharing, String> {
    let parent_shares = |p: u32| match same_vm(tid, p) {
        Ok(b) => Ok(b),
        Err(e) if e.raw_os_error() == Some(libc::ESRCH) => Ok(false),
        Err(e) => Err(format!("cannot compare address spaces (kcmp): {e}")),
    };
    if stat.num_threads <= 1 && (stat.ppid <= 1 || !parent_shares(stat.ppid)?) {
        return Ok(Sharing::Exclusive);
    }
    if stat.num_threads <= 1 && vfork_of_a_lone_thread(stat.ppid, &parent_shares)? {
        return Ok(Sharing::Exclusive);
    }
    let mut procs: Vec<u32> = vec![pid];
    let mut p = stat.ppid;
    while p > 1 && procs.len() < MAX_PROCESSES && parent_shares(p)? {
        procs.push(p);
        p = match tracee::proc_stat(p) {
            Ok(s) => s.ppid,
            Err(_) => break,
        };
    }
    let mut i = 0;
    while i < procs.len() {
        let proc_ = procs[i];
        for t in threads_of(proc_) {
            for child in children_of(proc_, t) {
                if !procs.contains(&child) && parent_shares(child)? {
                    if procs.len() >= MAX_PROCESSES {
                        return Err(format!(
                            "more than {MAX_PROCESSES} processes share the caller's memory"
                        ));
                    }
                    procs.push(child);
                }
            }
        }
        i += 1;
    }
    let tasks: BTreeSet<u32> = procs
        .iter()
        .flat_map(|&p| threads_of(p))
        .filter(|&t| t != tid)
        .collect();
    if tasks.is_empty() {
        Ok(Sharing::Exclusive)
    } else {
        Ok(Sharing::Shared(tasks))
    }
}

/// Is the caller (single-threaded, sharing its parent's memory) the vfork
/// child of a single-threaded parent that waits in `vfork` for it, with no
/// other process sharing that memory above it? Then nothing else can run on
/// the memory until this exec completes or the caller dies: the parent's one
/// thread returns from `vfork` only then (dash, and posix_spawn from a
/// single-threaded program, spawn this way). A single thread has one vfork
/// child outstanding, and the only process that shares its memory and has it
/// as parent is that child: the caller.
///
/// `/proc/<ppid>/syscall` names the call the thread is blocked in; only the
/// native ABI's numbers are believed (a compat task blocked in a call of the
/// same number is not in vfork, and is then frozen like any other).
fn vfork_of_a_lone_thread(
    ppid: u32,
    parent_shares: &dyn Fn(u32) -> Result<bool, String>,
) -> Result<bool, String> {
    let Ok(ps) = tracee::proc_stat(ppid) else {
        return Ok(false);
    };
    if ps.num_threads != 1 || (ps.ppid > 1 && parent_shares(ps.ppid)?) {
        return Ok(false);
    }
    let Ok(text) = std::fs::read_to_string(format!("/proc/{ppid}/syscall")) else {
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
#[derive(Debug, Default)]
pub struct Frozen {
    /// tid → its stop (None: seized, asleep in the kernel, not stopped yet).
    members: BTreeMap<u32, Option<Event>>,
}

impl Frozen {
    /// Records an event a wait saw for one of the members.
    pub fn saw(&mut self, tid: u32, ev: Event) -> bool {
        match self.members.get_mut(&tid) {
            Some(slot) => {
                *slot = Some(ev);
                true
            }
            None => false,
        }
    }

    /// Detaches every stopped member; a member still asleep goes to
    /// `lingering`, to be detached when it stops. Waits `grace` for the
    /// sleepers first (after an exec they wake at once).
    pub fn release(mut self, lingering: &mut Lingering, grace: Duration) {
        let deadline = Instant::now() + grace;
        while self.members.values().any(Option::is_none) {
            let Some((tid, ev)) = ptrace::wait_any(deadline) else {
                break;
            };
            if !self.saw(tid, ev) {
                // Not one of ours in this set (a lingering one): leave it be.
                if let Event::Stopped { .. } = ev {
                    let _ = ptrace::detach(tid, ev.detach_signal());
                    lingering.take(tid);
                }
            }
        }
        for (tid, ev) in std::mem::take(&mut self.members) {
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

/// A task's scheduler state letter from `/proc/<tid>/stat` (`R`, `S`, `D`,
/// `t`, ...); `None` if it is gone.
fn state_of(tid: u32) -> Option<u8> {
    let text = std::fs::read(format!("/proc/{tid}/stat")).ok()?;
    let close = text.iter().rposition(|&b| b == b')')?;
    text.get(close + 2).copied()
}

/// Stops every member of the sharing set of (`pid`, `tid`), starting from
/// `tasks`; see the module doc.
///
/// # Errors
/// The reason the set could not be frozen; whatever was seized is released.
pub fn freeze(
    pid: u32,
    tid: u32,
    tasks: BTreeSet<u32>,
    lingering: &mut Lingering,
) -> Result<Frozen, String> {
    let mut frozen = Frozen::default();
    let mut todo = tasks;
    for _ in 0..MAX_ROUNDS {
        for &t in &todo {
            if !lingering.take(t) {
                match ptrace::seize(t, 0) {
                    Ok(()) => {}
                    Err(e) if e.raw_os_error() == Some(libc::ESRCH) => continue,
                    Err(e) => {
                        frozen.release(lingering, Duration::ZERO);
                        return Err(format!(
                            "cannot stop thread {t} that shares the caller's memory \
                             (PTRACE_SEIZE: {e})"
                        ));
                    }
                }
            }
            frozen.members.insert(t, None);
            if let Err(e) = ptrace::interrupt(t) {
                if e.raw_os_error() != Some(libc::ESRCH) {
                    frozen.release(lingering, Duration::ZERO);
                    return Err(format!("cannot stop thread {t} (PTRACE_INTERRUPT: {e})"));
                }
            }
        }
        if let Err(why) = settle(&mut frozen, lingering) {
            frozen.release(lingering, Duration::ZERO);
            return Err(why);
        }
        let stat = tracee::proc_stat(tid).map_err(|e| format!("the caller vanished: {e}"))?;
        let again = match sharing(pid, tid, &stat) {
            Ok(Sharing::Exclusive) => BTreeSet::new(),
            Ok(Sharing::Shared(s)) => s,
            Err(why) => {
                frozen.release(lingering, Duration::ZERO);
                return Err(why);
            }
        };
        todo = again
            .into_iter()
            .filter(|t| !frozen.members.contains_key(t))
            .collect();
        if todo.is_empty() {
            return Ok(frozen);
        }
    }
    frozen.release(lingering, Duration::ZERO);
    Err(format!(
        "the set of tasks sharing the caller's memory kept growing for {MAX_ROUNDS} rounds"
    ))
}

/// Waits until every member is stopped, gone or asleep in the kernel.
fn settle(frozen: &mut Frozen, lingering: &mut Lingering) -> Result<(), String> {
    let deadline = Instant::now() + FREEZE_DEADLINE;
    loop {
        // Collect what has arrived without waiting.
        while let Some((t, ev)) = ptrace::wait_any(Instant::now()) {
            if !frozen.saw(t, ev) {
                if let Event::Stopped { .. } = ev {
                    let _ = ptrace::detach(t, ev.detach_signal());
                    lingering.take(t);
                }
            }
        }
        let running: Vec<u32> = frozen
            .members
            .iter()
            .filter(|(_, ev)| ev.is_none())
            .map(|(&t, _)| t)
            .filter(|&t| matches!(state_of(t), Some(b'R')))
            .collect();
        if running.is_empty() {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(format!(
                "threads {running:?} share the caller's memory and did not stop within {:?}",
                FREEZE_DEADLINE
            ));
        }
        if let Some((t, ev)) = ptrace::wait_any(Instant::now() + Duration::from_millis(2)) {
            if !frozen.saw(t, ev) {
                if let Event::Stopped { .. } = ev {
                    let _ = ptrace::detach(t, ev.detach_signal());
                    lingering.take(t);
                }
            }
        }
    }
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
            match sharing(me, me, &stat).unwrap() {
                Sharing::Shared(s) => assert!(!s.contains(&me) && !s.is_empty()),
                Sharing::Exclusive => panic!("threads share memory"),
            }
        }
    }
}
