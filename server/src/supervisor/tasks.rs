//! What every family may need of a tree's tasks between calls: the tree's
//! root process, the root directory its tasks share until one calls
//! `chroot` (`tracee::KeptRoot`), the tasks the supervisor stopped whose stop has not been collected
//! yet (`ptrace::Lingering`: swept by the backend's loop), and the `/proc`
//! files of the tree's processes kept open (`procfiles`).
//!
//! Failure modes: none of its own.

use super::procfiles::ProcFiles;
use super::ptrace::Lingering;

/// The tree's tasks as the supervisor keeps them.
pub struct Tasks {
    /// The wrapper's pid: its first exec (of the shell) is depth 0.
    pub root_pid: u32,
    /// Tasks stopped for a call that had not reached their stop when it ended.
    pub lingering: Lingering,
    /// `/proc` files of the processes the tree's calls ask about, kept open.
    pub files: ProcFiles,
    /// The root directory the tree's execs are resolved in.
    pub root: crate::tracee::KeptRoot,
}

impl Tasks {
    pub fn new(root_pid: u32) -> Tasks {
        Tasks {
            root_pid,
            lingering: Lingering::default(),
            files: ProcFiles::default(),
            root: crate::tracee::KeptRoot::default(),
        }
    }
}
