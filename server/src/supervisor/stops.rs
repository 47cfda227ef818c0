//! What the supervisor asks the kernel to do to a tree's tasks, where a
//! failure is a refusal, behind one trait ([`TaskStops`]): find who shares
//! a caller's memory and stop them (`sharing`), seize a caller to watch its
//! exec through (`PTRACE_SEIZE`), hold a caller's fd table or address
//! space still through one call (`fdhold`). The reads of a caller are
//! `tracee::host::Host`'s; this is their supervisor-side half, with the
//! supervisor's types. The context holds one: [`RealStops`] in the server,
//! [`recording::RecordingStops`] (tests only) in the unit tests, which
//! answers as scripted and records what it was asked.
//!
//! Failure modes: those of `sharing`, `ptrace` and `fdhold` (said there);
//! the trait adds none. One virtual call per question, no allocation.

use super::fdhold::{FdHoldError, Scope};
use super::procfiles::ProcFiles;
use super::ptrace::Lingering;
use super::seam::Stop;
use super::sharing::{FreezeError, Frozen, Members, Sharing};
use super::tasks::Tasks;
use crate::tracee::{ProcStat, StatFile};
use std::io;

/// What the supervisor asks the kernel to do to a tree's tasks (module doc).
pub trait TaskStops: Send + Sync {
    /// Who shares the memory of thread `tid` of process `pid`
    /// (`sharing::sharing`).
    ///
    /// # Errors
    /// As `sharing::sharing`.
    fn sharing(
        &self,
        pid: u32,
        tid: u32,
        stat: &ProcStat,
        files: &mut ProcFiles,
    ) -> Result<Sharing, FreezeError>;
    /// Stops every task of `set` (`sharing::freeze`).
    ///
    /// # Errors
    /// As `sharing::freeze`.
    fn freeze(
        &self,
        pid: u32,
        tid: u32,
        caller: &StatFile,
        set: Members,
        lingering: &mut Lingering,
        files: &mut ProcFiles,
    ) -> Result<Frozen, FreezeError>;
    /// Seizes thread `tid` before CONTINUE so its exec can be watched
    /// (`PTRACE_O_TRACEEXEC`; `exec::verify` says the rest).
    ///
    /// # Errors
    /// The kernel's reason (EPERM: no `CAP_SYS_PTRACE`, or traced by another).
    fn arm_watch(&self, tid: u32) -> io::Result<()>;
    /// Runs `decide` with thread `tid`'s fd table or address space held
    /// still (`fdhold::with_fds_still`).
    ///
    /// # Errors
    /// As `fdhold::with_fds_still`: `decide` has not run.
    fn hold_still(
        &self,
        stop: &dyn Stop,
        tasks: &mut Tasks,
        tid: u32,
        scope: Scope,
        decide: &mut dyn FnMut() -> io::Result<()>,
    ) -> Result<io::Result<()>, FdHoldError>;
}

/// The kernel itself.
#[derive(Debug, Clone, Copy, Default)]
pub struct RealStops;

impl TaskStops for RealStops {
    fn sharing(
        &self,
        pid: u32,
        tid: u32,
        stat: &ProcStat,
        files: &mut ProcFiles,
    ) -> Result<Sharing, FreezeError> {
        super::sharing::sharing(pid, tid, stat, files)
    }

    fn freeze(
        &self,
        pid: u32,
        tid: u32,
        caller: &StatFile,
        set: Members,
        lingering: &mut Lingering,
        files: &mut ProcFiles,
    ) -> Result<Frozen, FreezeError> {
        super::sharing::freeze(pid, tid, caller, set, lingering, files)
    }

    fn arm_watch(&self, tid: u32) -> io::Result<()> {
        super::ptrace::seize(tid, libc::PTRACE_O_TRACEEXEC)
    }

    fn hold_still(
        &self,
        stop: &dyn Stop,
        tasks: &mut Tasks,
        tid: u32,
        scope: Scope,
        decide: &mut dyn FnMut() -> io::Result<()>,
    ) -> Result<io::Result<()>, FdHoldError> {
        super::fdhold::with_fds_still(stop, tasks, tid, scope, decide)
    }
}

#[cfg(test)]
pub mod recording {
    //! The recording double of [`TaskStops`]: each question gets the next
    //! answer scripted for it, else a default that touches no task (alone
    //! in its memory; a freeze or a watch that cannot be had, as for a
    //! server without `CAP_SYS_PTRACE`; a hold that holds nothing and
    //! decides), and every question asked is recorded in order.

    use super::*;
    use crate::tracee::recording::Script;
    use std::collections::BTreeMap;

    /// A question of [`TaskStops`], as the double records it.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub enum Asked {
        Sharing,
        Freeze,
        ArmWatch,
        HoldStill,
    }

    /// One scripted answer.
    #[derive(Debug, Clone, Copy)]
    pub enum Answer {
        /// The default (module doc).
        Default,
        /// The question fails with this errno.
        Fails(i32),
        /// `sharing`: another task (a made-up thread) shares the memory.
        Shared,
        /// `hold_still`: the caller is gone.
        Gone,
    }

    /// The recording double (module doc).
    #[derive(Debug, Default)]
    pub struct RecordingStops {
        script: Script<Asked, Answer>,
    }

    impl RecordingStops {
        pub fn new() -> RecordingStops {
            RecordingStops::default()
        }

        /// The next call of `q` not yet scripted gets `answer`.
        pub fn script(&self, q: Asked, answer: Answer) -> &RecordingStops {
            self.script.push(q, answer);
            self
        }

        /// Every question asked so far, in order.
        pub fn calls(&self) -> Vec<Asked> {
            self.script.calls()
        }

        fn next(&self, q: Asked) -> Answer {
            self.script.next(q).unwrap_or(Answer::Default)
        }
    }

    fn errno(e: i32) -> io::Error {
        io::Error::from_raw_os_error(e)
    }

    fn unfit(q: Asked, a: Answer) -> ! {
        panic!("{a:?} is no answer to {q:?}")
    }

    impl TaskStops for RecordingStops {
        fn sharing(
            &self,
            pid: u32,
            _tid: u32,
            _stat: &ProcStat,
            _files: &mut ProcFiles,
        ) -> Result<Sharing, FreezeError> {
            match self.next(Asked::Sharing) {
                Answer::Default => Ok(Sharing::Exclusive { parent: false }),
                Answer::Fails(e) => Err(FreezeError::Kcmp(errno(e))),
                Answer::Shared => Ok(Sharing::Shared(Members {
                    procs: vec![pid],
                    tasks: BTreeMap::from([(u32::MAX, pid)]),
                })),
                a => unfit(Asked::Sharing, a),
            }
        }

        fn freeze(
            &self,
            _pid: u32,
            _tid: u32,
            _caller: &StatFile,
            set: Members,
            _lingering: &mut Lingering,
            _files: &mut ProcFiles,
        ) -> Result<Frozen, FreezeError> {
            let tid = set.tasks.keys().next().copied().unwrap_or_default();
            match self.next(Asked::Freeze) {
                Answer::Default => Err(FreezeError::Seize {
                    tid,
                    error: errno(libc::EPERM),
                }),
                Answer::Fails(e) => Err(FreezeError::Seize {
                    tid,
                    error: errno(e),
                }),
                a => unfit(Asked::Freeze, a),
            }
        }

        fn arm_watch(&self, _tid: u32) -> io::Result<()> {
            match self.next(Asked::ArmWatch) {
                Answer::Default => Err(errno(libc::EPERM)),
                Answer::Fails(e) => Err(errno(e)),
                a => unfit(Asked::ArmWatch, a),
            }
        }

        fn hold_still(
            &self,
            _stop: &dyn Stop,
            _tasks: &mut Tasks,
            _tid: u32,
            _scope: Scope,
            decide: &mut dyn FnMut() -> io::Result<()>,
        ) -> Result<io::Result<()>, FdHoldError> {
            match self.next(Asked::HoldStill) {
                Answer::Default => Ok(decide()),
                Answer::Fails(e) => Err(FdHoldError::Threads(errno(e))),
                Answer::Gone => Err(FdHoldError::Gone),
                a => unfit(Asked::HoldStill, a),
            }
        }
    }
}
