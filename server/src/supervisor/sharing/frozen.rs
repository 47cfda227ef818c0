//! The members a freeze stopped, and their release: each stopped member
//! detached, each still asleep handed to the tree's [`Lingering`] list.
//!
//! Why a type: the members stay stopped across the decision and the exec
//! (`supervisor::exec` holds a [`Frozen`] until the new image is checked or
//! the exec failed), and must be released exactly once whatever happens.
//!
//! Failure modes: a member that will not detach is logged (it is gone, or
//! detaches when it next stops); a sleeper not stopped within the grace is
//! left to `Lingering`, never detached while running.

use crate::supervisor::ptrace::{self, Event, Lingering};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// The members a freeze stopped (or left asleep with a stop pending).
#[derive(Debug)]
pub struct Frozen {
    /// tid → its process and its stop (None: asleep in the kernel, not
    /// stopped yet).
    pub(super) members: BTreeMap<u32, (u32, Option<Event>)>,
}

impl Frozen {
    pub(super) fn new() -> Frozen {
        Frozen {
            members: BTreeMap::new(),
        }
    }

    /// Records an event a wait saw for one of the members.
    pub fn saw(&mut self, tid: u32, ev: Event) -> bool {
        match self.members.get_mut(&tid) {
            Some((_, slot)) => {
                *slot = Some(ev);
                true
            }
            None => false,
        }
    }

    fn pending(&self) -> impl Iterator<Item = u32> + '_ {
        self.members
            .iter()
            .filter(|(_, (_, ev))| ev.is_none())
            .map(|(&t, _)| t)
    }

    /// Detaches every stopped member; a member still asleep goes to `lingering`,
    /// to be detached when it stops. Waits `grace` for the sleepers first
    /// (after an exec they wake at once).
    pub fn release(mut self, lingering: &mut Lingering, grace: Duration) {
        let deadline = Instant::now() + grace;
        while self.pending().next().is_some() {
            let Some((tid, ev)) = ptrace::wait_any(deadline) else {
                break;
            };
            if !self.saw(tid, ev) {
                stray(tid, ev, lingering);
            }
        }
        for (tid, (_, ev)) in std::mem::take(&mut self.members) {
            match ev {
                Some(Event::Gone) => {}
                Some(ev @ Event::Stopped { .. }) => {
                    if let Err(e) = ptrace::detach(tid, ev.detach_signal()) {
                        tracing::debug!(tid, "detach after the exec: {e}");
                    }
                }
                None => lingering.add(tid),
            }
        }
    }
}

/// An event of a tracee that is not a member of this freeze (a lingering
/// one from an earlier exec): detach it if it stopped.
pub(super) fn stray(tid: u32, ev: Event, lingering: &mut Lingering) {
    if let Event::Stopped { .. } = ev {
        let _ = ptrace::detach(tid, ev.detach_signal());
        lingering.take(tid);
    }
}
