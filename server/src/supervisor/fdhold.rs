//! One call on an fd, with the caller's fd table held still from the
//! supervisor's look at the fd until the kernel's own lookup: what the
//! supervisor judged (a Unix socket egress lets through, a file mapped
//! executable) is what the call uses. Or one call on the caller's address
//! space (`mprotect` to executable), with every task sharing it held still
//! the same way (`Scope::Memory`: `sharing` finds them).
//!
//! Within a tree the fd table is shared only by the threads of one process
//! (the filter refuses `clone` with `CLONE_FILES` and without
//! `CLONE_THREAD`; io_uring, which installs fds from kernel workers, is
//! refused). So: a lone thread (the caller, stopped in its call) needs
//! nothing. Several: under the ptrace backend the tracer holds the others
//! (`Stop::hold_still`) until the call has returned; under user-notify
//! they are frozen (`PTRACE_SEIZE` and `PTRACE_INTERRUPT`, as the exec race
//! guard does: unlike a `SIGSTOP`, no `SIGCONT` from another process of the
//! tree can end it), the decision is made once they hold, and all are let
//! go once the caller has stopped too, i.e. its call is over (or was
//! interrupted, and comes back through the filter).
//!
//! Failure modes: the caller gone ([`FdHoldError::Gone`]); threads that
//! cannot be read, frozen, held or watched: the error says which, and the
//! family refuses the call with it. Nothing was decided then.

use super::seam::Stop;
use super::sharing::FreezeError;
use super::tasks::Tasks;
use std::io;

/// Why a call cannot be held still (it is refused with this reason).
#[derive(Debug, thiserror::Error)]
pub enum FdHoldError {
    #[error("the caller is gone")]
    Gone,
    #[error("the caller's threads are unreadable: {0}")]
    Threads(io::Error),
    #[error("the caller's stat is unreadable: {0}")]
    Stat(io::Error),
    #[error("its other threads cannot be held by the tracer: {0}")]
    Held(io::Error),
    #[error("its other threads cannot be stopped: {0}")]
    Freeze(FreezeError),
    #[error("the caller cannot be watched through its call (PTRACE_SEIZE)")]
    Seize,
}

/// How long a caller let through may take to come back from its call
/// while its process's other threads are held.
const CALLER_DEADLINE: std::time::Duration = std::time::Duration::from_secs(30);

/// What must hold still through the call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// The fd table: the threads of the caller's process.
    Fds,
    /// The address space: every task that shares it (the threads, and
    /// vfork parents and children: `sharing`), for a call judged by what is
    /// mapped where.
    Memory,
}

/// Runs `decide` with the fd table (or the address space) of thread `tid`
/// held still (see the module doc); `decide` answers the call through
/// `stop` (proceed or refuse) and says whether the answer was delivered.
///
/// # Errors
/// It cannot be held: `decide` has not run, the call is unanswered.
pub fn with_fds_still(
    stop: &dyn Stop,
    tasks: &mut Tasks,
    tid: u32,
    scope: Scope,
    decide: impl FnOnce() -> io::Result<()>,
) -> Result<io::Result<()>, FdHoldError> {
    let Ok(st) = crate::tracee::proc_stat(tid) else {
        return Err(FdHoldError::Gone);
    };
    let tgid = crate::tracee::tgid_of(tid, &st).map_err(FdHoldError::Stat)?;
    let members = match scope {
        Scope::Fds if st.num_threads <= 1 => return Ok(decide()),
        Scope::Fds => None,
        Scope::Memory => {
            match super::sharing::sharing(tgid, tid, &st, &mut tasks.files)
                .map_err(FdHoldError::Freeze)?
            {
                // Alone, or a vfork child whose parent's one thread waits.
                super::sharing::Sharing::Exclusive { .. } => return Ok(decide()),
                super::sharing::Sharing::Shared(set) => Some(set),
            }
        }
    };
    match stop.hold_still() {
        Ok(()) => return Ok(decide()),
        Err(e) if e.raw_os_error() == Some(libc::ENOSYS) => {}
        Err(e) => return Err(FdHoldError::Held(e)),
    }
    let members = match members {
        Some(m) => m,
        None => super::sharing::Members {
            procs: vec![tgid],
            tasks: threads(tgid)?
                .into_iter()
                .filter(|&t| t != tid)
                .map(|t| (t, tgid))
                .collect(),
        },
    };
    stopped_while(tgid, tid, tasks, members, decide)
}

/// Freezes `members` (the tasks but `tid`), runs `decide` once they hold,
/// then stops `tid` too on its way back from its call (so the kernel has
/// looked its fd up, or changed its mappings) and lets them all go.
fn stopped_while(
    tgid: u32,
    tid: u32,
    st: &mut Tasks,
    members: super::sharing::Members,
    decide: impl FnOnce() -> io::Result<()>,
) -> Result<io::Result<()>, FdHoldError> {
    use super::ptrace as pt;
    let caller = crate::tracee::StatFile::open(tid).map_err(FdHoldError::Stat)?;
    let frozen = super::sharing::freeze(
        tgid,
        tid,
        &caller,
        members,
        &mut st.lingering,
        &mut st.files,
    )
    .map_err(FdHoldError::Freeze)?;
    // Seized before the answer (seizing changes nothing the caller sees);
    // interrupted after it, so it stops once its call has run. Not seized:
    // there would be no knowing when the others may run again, so no.
    let seized = st.lingering.take(tid) || pt::seize(tid, 0).is_ok();
    if !seized {
        frozen.release(&mut st.lingering, std::time::Duration::from_millis(50));
        return Err(FdHoldError::Seize);
    }
    let went = decide();
    let _ = pt::interrupt(tid);
    let mut detached = false;
    if went.is_ok() {
        // Until the caller is back from its call (the kernel looked its fd
        // up as the call began), the others stay held: a caller not yet run
        // on a busy machine must not find them running.
        match pt::wait_one(tid, std::time::Instant::now() + CALLER_DEADLINE) {
            Some(pt::Event::Gone) => detached = true,
            // A signal-delivery stop's signal is passed on at the detach.
            Some(ev) => detached = pt::detach(tid, ev.detach_signal()).is_ok(),
            None => tracing::warn!(
                tid,
                "a call let through with its fd table held has not returned within \
                 {CALLER_DEADLINE:?}: the process's other threads run again"
            ),
        }
    }
    if !detached {
        // It stops once back in user space (the interrupt is pending), and
        // is let go then.
        st.lingering.add(tid);
    }
    frozen.release(&mut st.lingering, std::time::Duration::from_millis(50));
    Ok(went)
}

/// The thread ids of process `tgid`.
fn threads(tgid: u32) -> Result<Vec<u32>, FdHoldError> {
    let dir = std::fs::read_dir(format!("/proc/{tgid}/task")).map_err(FdHoldError::Threads)?;
    Ok(dir
        .flatten()
        .filter_map(|t| t.file_name().to_str().and_then(|n| n.parse().ok()))
        .collect())
}
