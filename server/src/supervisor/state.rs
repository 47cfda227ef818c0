//! What a tree's supervisor thread keeps between the syscalls it handles:
//! the tasks every family may stop or read ([`Tasks`]), and one part per
//! family, each handed only to its family by the one dispatch.
//!
//! Failure modes: none of its own.

use super::egress::EgressState;
use super::exec::ExecState;
use super::signals::SignalState;
use super::tasks::Tasks;

/// What the tree's thread keeps between calls.
pub struct TreeState {
    pub tasks: Tasks,
    pub exec: ExecState,
    pub egress: EgressState,
    pub signals: SignalState,
    pub files: super::files::FilesState,
    pub maps: super::maps::MapsState,
}

impl TreeState {
    pub fn new(root_pid: u32) -> TreeState {
        TreeState {
            tasks: Tasks::new(root_pid),
            exec: ExecState::default(),
            egress: EgressState::default(),
            // Read once, while the tree's root (unixwrap, waiting for the
            // ACK) is surely alive: its parent is the SDK daemon.
            signals: SignalState::for_tree(root_pid),
            files: super::files::FilesState::default(),
            maps: super::maps::MapsState::default(),
        }
    }
}
