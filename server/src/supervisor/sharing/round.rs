//! One round's check of a freeze: the tasks that joined the sharing set
//! before they could be stopped, found without a second enumeration.
//!
//! Why no second enumeration: a stopped thread has no vfork child
//! outstanding (a vforking thread sleeps until its child execs or exits), so
//! vfork children are looked for only under the members still asleep; and a
//! new thread shows in its process's thread count, which must equal the
//! threads held (see the folder's doc).
//!
//! Failure modes: the caller's stat that cannot be read again is
//! [`FreezeError::CallerGone`]; a set over `MAX_PROCESSES` is
//! [`FreezeError::TooMany`]; a `kcmp` error is [`FreezeError::Kcmp`]. A
//! process gone meanwhile adds nothing.

use super::error::{FreezeError, MAX_PROCESSES};
use super::frozen::Frozen;
use super::shares::{shares, Relation};
use super::threads::{children_once, own_threads, threads_of};
use crate::supervisor::procfiles::ProcFiles;
use crate::supervisor::ptrace::Event;
use crate::tracee::{self, StatFile};
use std::collections::BTreeMap;

/// What [`Round::joined`] reads with.
pub(super) struct Round<'a> {
    pub(super) pid: u32,
    pub(super) tid: u32,
    pub(super) caller: &'a StatFile,
    /// The caller was its process's only thread (it is in `execve`).
    pub(super) caller_alone: bool,
    pub(super) parents: &'a [u32],
    pub(super) files: &'a mut ProcFiles,
}

impl Round<'_> {
    /// (thread count, threads) of process `p` of the set, read now; `None`
    /// when it is gone (and its threads with it).
    fn count(&mut self, p: u32) -> Result<Option<u32>, FreezeError> {
        if p == self.pid && self.caller_alone {
            // Only a running thread of the process could add one.
            return Ok(Some(1));
        }
        if p == self.pid {
            return self
                .caller
                .read()
                .map(|s| Some(s.num_threads))
                .map_err(FreezeError::CallerGone);
        }
        if self.parents.contains(&p) {
            return Ok(self.files.stat_now(p).ok().map(|s| s.num_threads));
        }
        Ok(tracee::proc_stat(p).ok().map(|s| s.num_threads))
    }

    fn threads(&mut self, p: u32, num_threads: u32) -> Vec<u32> {
        if p == self.pid || !self.parents.contains(&p) {
            own_threads(p, p, num_threads)
        } else {
            threads_of(p, self.files)
        }
    }

    /// After a round: the tasks that joined the set before they could be
    /// stopped (module doc), to stop in the next round; empty when none did.
    pub(super) fn joined(
        &mut self,
        procs: &mut Vec<u32>,
        frozen: &Frozen,
    ) -> Result<BTreeMap<u32, u32>, FreezeError> {
        let (pid, tid) = (self.pid, self.tid);
        let mut more = BTreeMap::new();
        let held = |p: u32| {
            frozen
                .members
                .values()
                .filter(|(q, ev)| *q == p && *ev != Some(Event::Gone))
                .count()
                + usize::from(p == pid)
        };
        let fresh = |t: &u32| *t != tid && !frozen.members.contains_key(t);
        for &p in procs.iter() {
            let Some(n) = self.count(p)? else { continue };
            if n as usize != held(p) {
                for t in self.threads(p, n) {
                    if fresh(&t) {
                        more.insert(t, p);
                    }
                }
            }
        }
        // vfork children of the members still asleep.
        let asleep: Vec<(u32, u32)> = frozen
            .members
            .iter()
            .filter(|(_, (_, ev))| ev.is_none())
            .map(|(&t, &(p, _))| (t, p))
            .collect();
        for (t, p) in asleep {
            let children = if t == p && self.parents.contains(&p) {
                self.files.children(p, t).unwrap_or_default()
            } else {
                children_once(p, t)
            };
            for child in children {
                if procs.contains(&child)
                    || !shares(
                        tid,
                        Relation::ChildOf {
                            child,
                            pid: p,
                            tid: t,
                        },
                        self.files,
                    )?
                {
                    continue;
                }
                if procs.len() >= MAX_PROCESSES {
                    return Err(FreezeError::TooMany);
                }
                procs.push(child);
                let n = tracee::proc_stat(child).map_or(2, |s| s.num_threads);
                for ct in own_threads(child, child, n) {
                    if fresh(&ct) {
                        more.insert(ct, child);
                    }
                }
            }
        }
        Ok(more)
    }
}
