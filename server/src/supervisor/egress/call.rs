//! One trapped network call as the egress family handles it: who made it,
//! which call, how to answer it ([`Call`]), and the family's view of the
//! tree's state ([`EgressTree`]): short argument lists for every step.
//!
//! Failure modes: none; types.

use super::state::EgressState;
use crate::supervisor::context::SupervisorContext;
use crate::supervisor::seam::{Caught, Stop};
use crate::supervisor::tasks::Tasks;
use crate::supervisor::tree::Tree;
use agentsh_proto::netabi::{NetCall, Width};
use std::io;

/// One trapped network call of `c.tid`.
pub(super) struct Call<'a> {
    pub(super) ctx: &'a SupervisorContext,
    pub(super) tree: &'a Tree,
    pub(super) c: &'a Caught,
    pub(super) call: NetCall,
    pub(super) width: Width,
    pub(super) stop: &'a dyn Stop,
    /// How a refused caller is told why on its stderr (`execve.explain:
    /// stderr`): `explain::tell`, which takes the caller's stderr (the one
    /// thing judging asks of the kernel); tests record the line instead.
    pub(super) tell: Tell,
}

/// Writes one line to a thread's stderr; whether it was taken.
pub(super) type Tell = fn(u32, &str) -> bool;

/// The egress family's view of a tree's state: its own part and the tasks
/// (which a Unix-socket call from a threaded process stops).
pub(super) struct EgressTree<'a> {
    pub(super) tasks: &'a mut Tasks,
    pub(super) egress: &'a mut EgressState,
}

/// An answer value: the call's result or `-errno`.
pub(super) type Answer = i64;

pub(super) fn errno_of(e: &io::Error) -> i64 {
    -i64::from(e.raw_os_error().unwrap_or(libc::EIO))
}
