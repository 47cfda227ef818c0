//! The processes whose death ends the sandbox besides the server: the
//! reaper and the command the server runs (`agentsh server -- CMD`, which
//! `agentsh entrypoint` uses). The daemon registers them as it starts them;
//! every tree's filter refuses signals naming them on register arguments
//! (`Filters::for_tree`) and the supervisor's signal guard refuses the rest
//! (`supervisor::signals`). PID 1 needs no registration: every tree's
//! filter protects it (`FilterSpec::for_tree`).
//!
//! Failure modes: none; a poisoned lock is taken as it stands.

use std::sync::{Mutex, PoisonError};

static KEEPERS: Mutex<Vec<u32>> = Mutex::new(Vec::new());

/// Registers `pid`: every tree started from now on may not signal it.
pub fn keep(pid: u32) {
    let mut k = KEEPERS.lock().unwrap_or_else(PoisonError::into_inner);
    if pid > 1 && !k.contains(&pid) {
        k.push(pid);
    }
}

/// `pid` is no keeper any more (it exited: its number may be reused).
pub fn unkeep(pid: u32) {
    KEEPERS
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .retain(|&p| p != pid);
}

/// The keepers registered now, but `root` (a tree is never protected from
/// itself: under `agentsh wrap` the command may be the tree's root).
pub fn keepers_but(root: Option<u32>) -> Vec<u32> {
    KEEPERS
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .iter()
        .copied()
        .filter(|&p| Some(p) != root)
        .collect()
}
