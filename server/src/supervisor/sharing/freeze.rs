//! Stopping every member of a sharing set ([`freeze`]): each seized and
//! interrupted, then waited for until stopped, gone or asleep in the kernel,
//! in rounds until no member joined before it could be stopped (`round`).
//!
//! Why rounds: a member may create a thread or vfork a child between the
//! enumeration and its stop; what joined is found without a second
//! enumeration (see the folder's doc) and stopped in the next round.
//!
//! Failure modes: a member that cannot be seized or interrupted, one still
//! running at the deadline, a caller that vanished, a set over
//! `MAX_PROCESSES` or still growing after `MAX_ROUNDS` rounds: the freeze
//! fails with the [`FreezeError`] and whatever was stopped is released.

use super::error::{FreezeError, FREEZE_DEADLINE, MAX_ROUNDS};
use super::frozen::{stray, Frozen};
use super::round::Round;
use super::set::Members;
use crate::supervisor::procfiles::ProcFiles;
use crate::supervisor::ptrace::{self, Lingering};
use crate::tracee::{self, StatFile};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// How long to collect stops before reading the state of those still
/// missing (a running task stops within microseconds of the interrupt).
const SETTLE_SPIN: Duration = Duration::from_micros(10);

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
    crate::supervisor::phases::mark("enum");
    for _ in 0..MAX_ROUNDS {
        let done = stop_all(&mut frozen, &todo, lingering)
            .and_then(|()| {
                crate::supervisor::phases::mark("stop");
                settle(&mut frozen, lingering, &mut |t, p| {
                    if parents.contains(&p) {
                        files.thread_state(p, t)
                    } else {
                        tracee::proc_stat(t).ok().map(|s| s.state)
                    }
                })
            })
            .and_then(|()| {
                crate::supervisor::phases::mark("settle");
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
        crate::supervisor::phases::mark("joined");
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
