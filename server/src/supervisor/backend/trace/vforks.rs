//! Which processes of the traced trees share memory through `vfork`: a
//! vfork child shares its parent's address space until it execs or exits,
//! and only the parent's vforking thread waits meanwhile; its other threads
//! run on, and can write the child's memory (and the child theirs). The
//! filter refuses every other way to share memory between processes
//! (`CLONE_VM` without `CLONE_THREAD|CLONE_VFORK`), so a caller's memory is
//! held still (`freeze`) only once the threads of every process in
//! its vfork relation are held too, but for the vforking threads, which
//! sleep in the kernel until the child is done.
//!
//! The tracer learns a relation from the parent's `PTRACE_EVENT_VFORK`; a
//! child that stops before that event (claimed through `/proc`) is taken as
//! a possible vfork child of its parent process until the event says which
//! it was, so no order of events leaves a sharer out.
//!
//! Failure modes: none; a relation whose end is missed (a child gone
//! unseen) only makes later freezes stop more threads than needed.

use std::collections::HashMap;

/// A vfork child's parent: its process, and the thread that vforked it
/// (`None`: the parent's event has not come yet).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Parent {
    process: u32,
    waiting: Option<u32>,
}

/// The vfork relations of the traced processes, by child process.
#[derive(Debug, Default)]
pub(super) struct Vforks {
    parent_of: HashMap<u32, Parent>,
}

impl Vforks {
    /// Thread `tid` of process `process` vforked process `child`.
    pub(super) fn vforked(&mut self, child: u32, tid: u32, process: u32) {
        self.parent_of.insert(
            child,
            Parent {
                process,
                waiting: Some(tid),
            },
        );
    }

    /// Process `child` of process `parent` stopped before its parent's
    /// event: it may be a vfork child.
    pub(super) fn maybe(&mut self, child: u32, parent: u32) {
        self.parent_of.entry(child).or_insert(Parent {
            process: parent,
            waiting: None,
        });
    }

    /// `child` was forked or cloned (its parent's event says so), or it
    /// exec'd or exited: it shares no memory with its parent (any more).
    /// Its own vfork children keep the memory it shared: with its parent
    /// (whose vforking thread, no longer waiting for `child`, runs), or,
    /// where it had none, with nobody (the memory was `child`'s alone).
    /// A vfork grandchild whose vfork parent was killed thus stays held
    /// with the process it still shares memory with.
    pub(super) fn apart(&mut self, child: u32) {
        let up = self.parent_of.remove(&child);
        let orphans: Vec<u32> = self
            .parent_of
            .iter()
            .filter(|(_, p)| p.process == child)
            .map(|(c, _)| *c)
            .collect();
        for c in orphans {
            match up {
                Some(u) => {
                    self.parent_of.insert(
                        c,
                        Parent {
                            process: u.process,
                            waiting: None,
                        },
                    );
                }
                None => {
                    self.parent_of.remove(&c);
                }
            }
        }
    }

    /// Every process that shares process `tgid`'s memory through vfork
    /// (up to its parents, down to their children), and the threads that
    /// wait in `vfork` meanwhile (asleep in the kernel: not to be stopped).
    pub(super) fn sharers(&self, tgid: u32) -> (Vec<u32>, Vec<u32>) {
        let mut processes = vec![tgid];
        let mut waiting = Vec::new();
        let mut i = 0;
        while i < processes.len() {
            let p = processes[i];
            i += 1;
            let up = self.parent_of.get(&p).map(|parent| (p, *parent));
            let down = self
                .parent_of
                .iter()
                .filter(|(_, parent)| parent.process == p)
                .map(|(child, parent)| (*child, *parent));
            for (child, parent) in up.into_iter().chain(down) {
                for q in [child, parent.process] {
                    if !processes.contains(&q) {
                        processes.push(q);
                    }
                }
                if let Some(t) = parent.waiting.filter(|t| !waiting.contains(t)) {
                    waiting.push(t);
                }
            }
        }
        (processes, waiting)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_vfork_chain_shares_up_and_down() {
        let mut v = Vforks::default();
        // 100 (threads 100, 101) vforked 200 from thread 101; 200 vforked 300.
        v.vforked(200, 101, 100);
        v.vforked(300, 300 - 100, 200);
        for from in [100, 200, 300] {
            let (mut p, mut w) = v.sharers(from);
            p.sort_unstable();
            w.sort_unstable();
            assert_eq!((p, w), (vec![100, 200, 300], vec![101, 200]), "from {from}");
        }
        // A process of its own shares with nobody.
        assert_eq!(v.sharers(400), (vec![400], vec![]));
        // 300 exec'd: 200 and 100 still share; 300 is apart.
        v.apart(300);
        assert_eq!(v.sharers(300), (vec![300], vec![]));
        let (mut p, _) = v.sharers(100);
        p.sort_unstable();
        assert_eq!(p, vec![100, 200]);
    }

    #[test]
    fn a_vfork_grandchild_whose_vfork_parent_is_killed_still_shares_with_the_top() {
        let mut v = Vforks::default();
        // 100 (threads 100, 101) vforked 200 from 101; 200 vforked 300.
        v.vforked(200, 101, 100);
        v.vforked(300, 200, 200);
        // 200 is killed: 101 wakes and runs, 300 still has 100's memory.
        v.apart(200);
        for from in [100, 300] {
            let (mut p, w) = v.sharers(from);
            p.sort_unstable();
            assert_eq!((p, w), (vec![100, 300], vec![]), "from {from}");
        }
        // 300 exits: nobody shares any more.
        v.apart(300);
        assert_eq!(v.sharers(100), (vec![100], vec![]));
        // A vfork child of a process that execs or exits, with no parent of
        // its own: the memory was that process's alone.
        v.vforked(500, 400, 400);
        v.apart(400);
        assert_eq!(v.sharers(500), (vec![500], vec![]));
    }

    #[test]
    fn a_child_seen_before_its_parents_event_is_taken_as_sharing() {
        let mut v = Vforks::default();
        v.maybe(500, 400);
        assert_eq!(v.sharers(500), (vec![500, 400], vec![]));
        // The event: a vfork from thread 401; a maybe does not undo it.
        v.vforked(500, 401, 400);
        v.maybe(500, 400);
        assert_eq!(v.sharers(500), (vec![500, 400], vec![401]));
        // Another child, forked: apart.
        v.maybe(600, 400);
        v.apart(600);
        assert_eq!(v.sharers(600), (vec![600], vec![]));
    }
}
