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
//! the tree's `Lingering` list and detached as soon as it stops.
//!
//! The rooms: `shares` (does a process share the caller's memory: `kcmp`,
//! or vfork waits), `threads` (a process's threads and a thread's children),
//! `set` (the sharing set, or `Exclusive`), `freeze` (stopping the set, in
//! rounds), `round` (what joined the set during a round), `frozen` (the
//! members stopped, and their release), `error` (why a freeze fails, and its
//! bounds).

mod error;
mod freeze;
mod frozen;
mod round;
mod set;
mod shares;
mod threads;

pub use error::FreezeError;
pub use freeze::freeze;
pub use frozen::Frozen;
pub use set::{sharing, Members, Sharing};

/// Whether thread `tid` shares its memory with process `ppid`, its
/// parent (a vfork child's parent waits in `vfork`): `kcmp` where the
/// kernel answers it, else the vfork waits (unreadable: yes).
///
/// # Errors
/// `kcmp` failed otherwise than refused or gone.
pub fn shares_with_parent(
    tid: u32,
    ppid: u32,
    files: &mut crate::supervisor::procfiles::ProcFiles,
) -> Result<bool, FreezeError> {
    shares::shares(tid, shares::Relation::Ancestor(ppid), files)
}
