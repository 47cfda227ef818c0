//! Why the tasks sharing the caller's memory cannot be known or stopped, and
//! the bounds a freeze keeps to (its deadline, its rounds, the size of its
//! set), which the messages name.
//!
//! Failure modes: each variant refuses the exec (or the Unix-socket call)
//! it arose in, with the message as its reason; none lets it through.

use std::io;
use std::time::Duration;

/// How long members may take to stop before the exec is denied.
pub(super) const FREEZE_DEADLINE: Duration = Duration::from_secs(2);
/// Rounds of stopping newly found members before giving up on a set that
/// keeps growing.
pub(super) const MAX_ROUNDS: usize = 8;
/// The most processes a set may have (a fork bomb of vfork children).
pub(super) const MAX_PROCESSES: usize = 256;

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
