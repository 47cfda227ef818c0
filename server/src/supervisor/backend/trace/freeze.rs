//! Holding a caller's memory still through its call, under the ptrace
//! backend: every other thread of the caller's process, and of every
//! process sharing its memory through vfork (`vforks`; but the threads
//! asleep in `vfork` until the child is done), is stopped (they are all
//! tracees of this thread: `PTRACE_INTERRUPT`, then the stop they come to
//! is taken and kept) before the call's strings are read, and kept
//! stopped until the call has returned (the caller resumed with
//! `PTRACE_SYSCALL`: its syscall-exit stop says so; gVisor reports a
//! syscall-entry stop first, after which the call has not run yet). So the bytes judged are
//! the bytes the kernel uses: nothing else can write them meanwhile (other
//! processes cannot: `ptrace`, `process_vm_writev` and writes to
//! `/proc/<pid>/mem` are refused to trees, and strings in shared mappings
//! are refused by the families).
//!
//! The stops taken are replayed through the tracer's own event handling
//! when the threads are let go, so each continues exactly as it would have
//! (a signal delivered, a group-stop kept, a seccomp stop judged).
//!
//! Failure modes: a thread that does not stop within [`STOP_DEADLINE`]
//! (asleep uninterruptibly) fails the freeze: the caller refuses its call;
//! the threads already stopped are let go the same way.

use super::regs;
use crate::supervisor::seam::AfterCall;
use std::cell::RefCell;
use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

/// How long the other threads get to reach their stop.
const STOP_DEADLINE: Duration = Duration::from_secs(2);

/// Why a caller's memory cannot be held still.
#[derive(Debug, thiserror::Error)]
pub enum FreezeError {
    #[error("thread {0} shares the caller's memory and did not stop within {STOP_DEADLINE:?}")]
    NotStopped(u32),
}

/// The threads stopped for each caller, and the callers whose call runs
/// with them held.
#[derive(Default)]
pub(super) struct Freezer {
    /// Per caller: each thread stopped for it, with the wait status of the
    /// stop it came to (replayed when it is let go).
    held: RefCell<HashMap<u32, Vec<(u32, i32)>>>,
    /// Callers resumed into their call with the others held: let go at the
    /// caller's syscall-exit stop.
    running: RefCell<HashSet<u32>>,
    /// Callers whose syscall-entry stop came (gVisor reports one after the
    /// seccomp stop; Linux does not): their next syscall stop is the exit.
    entered: RefCell<HashSet<u32>>,
    /// What runs at a caller's syscall-exit stop, before anything is let
    /// go (`Stop::proceed_then`).
    after: RefCell<HashMap<u32, AfterCall>>,
}

impl Freezer {
    /// Stops `siblings` (every other thread of `caller`'s process, as the
    /// tracer follows them), but those `stopped` says are stopped already
    /// (held for an operator, waiting to be claimed, parked: they stay
    /// held through the call too, as the others).
    /// A caller with no other thread is held through its call only when
    /// `to_exit` (the tracer must see the call return: a change of names);
    /// else nothing holds it and it runs on with one stop.
    pub(super) fn freeze(
        &self,
        caller: u32,
        siblings: Vec<u32>,
        stopped: &dyn Fn(u32) -> bool,
        to_exit: bool,
    ) -> Result<(), FreezeError> {
        if siblings.is_empty() && !to_exit {
            return Ok(());
        }
        let threads: Vec<u32> = siblings.into_iter().filter(|&t| !stopped(t)).collect();
        let mut took = Vec::new();
        let mut asked = Vec::with_capacity(threads.len());
        for t in threads {
            match regs::interrupt(t) {
                Ok(()) => asked.push(t),
                // Gone (its exit not yet reaped): nothing of it to hold.
                Err(e) if e.raw_os_error() == Some(libc::ESRCH) && gone(t) => {}
                Err(e) => {
                    tracing::debug!(caller, thread = t, "PTRACE_INTERRUPT failed: {e}");
                    self.held.borrow_mut().insert(caller, took);
                    return Err(FreezeError::NotStopped(t));
                }
            }
        }
        tracing::trace!(caller, ?asked, "freezing");
        let deadline = Instant::now() + STOP_DEADLINE;
        let mut failed = None;
        for t in asked {
            match wait_stop(t, deadline) {
                Some(status) => {
                    tracing::trace!(caller, thread = t, status = format!("{status:#x}"), "held");
                    took.push((t, status));
                }
                None => {
                    failed = Some(t);
                    break;
                }
            }
        }
        self.held.borrow_mut().insert(caller, took);
        match failed {
            Some(t) => Err(FreezeError::NotStopped(t)),
            None => Ok(()),
        }
    }

    /// Whether `caller` holds others stopped.
    pub(super) fn holds(&self, caller: u32) -> bool {
        self.held.borrow().contains_key(&caller)
    }

    /// `caller` goes into its call with the others held.
    pub(super) fn run(&self, caller: u32) {
        self.running.borrow_mut().insert(caller);
    }

    /// `after` runs at `caller`'s syscall-exit stop.
    pub(super) fn then(&self, caller: u32, after: AfterCall) {
        self.after.borrow_mut().insert(caller, after);
    }

    /// What is to run at `caller`'s syscall-exit stop, taken.
    pub(super) fn take_after(&self, caller: u32) -> Option<AfterCall> {
        self.after.borrow_mut().remove(&caller)
    }

    /// Whether `caller`'s call runs with the others held.
    pub(super) fn running(&self, caller: u32) -> bool {
        self.running.borrow().contains(&caller)
    }

    /// `caller`'s syscall stop is its call's entry (the first one, once):
    /// the call has not run yet, the others stay held.
    pub(super) fn entering(&self, caller: u32) -> bool {
        self.running(caller)
            && !self.entered.borrow().contains(&caller)
            && regs::at_syscall_entry(caller)
            && self.entered.borrow_mut().insert(caller)
    }

    /// Lets go what `caller` holds: the stops to replay.
    pub(super) fn release(&self, caller: u32) -> Vec<(u32, i32)> {
        self.running.borrow_mut().remove(&caller);
        self.entered.borrow_mut().remove(&caller);
        // Gone before its exit stop: nothing of it to put back.
        self.after.borrow_mut().remove(&caller);
        self.held.borrow_mut().remove(&caller).unwrap_or_default()
    }
}

/// Whether thread `t` no longer runs (its `/proc` entry gone, or a zombie).
fn gone(t: u32) -> bool {
    crate::tracee::proc_stat(t).map_or(true, |s| s.state == b'Z' || s.state == b'X')
}

/// The wait status of `tid`'s next stop (or exit), waiting until
/// `deadline`; `None` if none came.
fn wait_stop(tid: u32, deadline: Instant) -> Option<i32> {
    loop {
        let mut status = 0;
        // SAFETY: a valid pointer to an int the kernel writes.
        let r = unsafe {
            libc::waitpid(
                tid as libc::pid_t,
                &mut status,
                libc::__WALL | libc::WNOHANG,
            )
        };
        if r == tid as libc::pid_t {
            return Some(status);
        }
        let err = std::io::Error::last_os_error();
        if r < 0 && err.raw_os_error() != Some(libc::EINTR) {
            tracing::debug!(tid, "waitpid for the held thread failed: {err}");
            // Not ours any more (gone and reaped): nothing to hold.
            return Some(0);
        }
        if Instant::now() >= deadline {
            return None;
        }
        std::thread::sleep(Duration::from_micros(200));
    }
}
