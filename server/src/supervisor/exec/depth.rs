//! Depth: how far below the SDK's command an exec happens, from the server's
//! own view of the process tree (never from anything the tracee controls).
//!
//! Failure modes: a lineage that cannot be followed (an orphan reparented
//! outside the tree, a parent that exited) counts as depth 1, the conservative
//! reading for the shipped policies ("nested").

use crate::tracee;
use std::collections::HashMap;

/// Depth bookkeeping from the server's own view of the process tree.
///
/// A process's current program has a depth. An exec in place (same process)
/// keeps it: `sh -c X` where sh execs X leaves X direct, like the SDK's
/// command itself. A process that has not exec'd yet is a fork of its
/// nearest recorded ancestor, and its exec is one deeper. Processes are keyed
/// by (pid, start time) so a reused pid is never mistaken for an old one.
#[derive(Debug, Default)]
pub struct DepthBook {
    images: HashMap<u32, (u64, u32)>,
}

/// The most ancestors a depth lookup walks before giving up.
const MAX_WALK: usize = 256;

impl DepthBook {
    /// Depth of an exec by `pid` (stat already read), in a tree rooted at `root`.
    /// `stat_of` reads other processes' stat (injected for tests).
    pub fn depth_of(
        &self,
        pid: u32,
        stat: &tracee::ProcStat,
        root: u32,
        stat_of: impl Fn(u32) -> Option<tracee::ProcStat>,
    ) -> u32 {
        if let Some(&(st, d)) = self.images.get(&pid) {
            if st == stat.starttime {
                return d;
            }
        }
        if pid == root {
            return 0;
        }
        let mut parent = stat.ppid;
        for _ in 0..MAX_WALK {
            if parent <= 1 {
                break;
            }
            let Some(ps) = stat_of(parent) else { break };
            if let Some(&(st, d)) = self.images.get(&parent) {
                if st == ps.starttime {
                    return d + 1;
                }
            }
            if parent == root {
                return 1;
            }
            parent = ps.ppid;
        }
        // Lineage lost (orphan reparented outside the tree): nested is the
        // conservative reading for the shipped policies.
        tracing::debug!(pid, "exec with unknown lineage: counted as depth 1");
        1
    }

    pub fn record(&mut self, pid: u32, starttime: u64, depth: u32) {
        self.images.insert(pid, (starttime, depth));
        if self.images.len() > 8192 {
            self.prune();
        }
    }

    /// Forgets processes that exited (or whose pid was reused).
    fn prune(&mut self) {
        self.images
            .retain(|&pid, &mut (st, _)| tracee::proc_stat(pid).is_ok_and(|s| s.starttime == st));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tracee::ProcStat;

    fn st(ppid: u32, starttime: u64) -> ProcStat {
        ProcStat {
            state: b'S',
            ppid,
            pgrp: ppid,
            session: ppid,
            num_threads: 1,
            starttime,
        }
    }

    #[test]
    fn depth_follows_forks_and_keeps_in_place_execs() {
        // root 100 execs sh (0); sh forks 101 which execs ls (1); 101's fork 102 execs (2).
        let procs: HashMap<u32, ProcStat> = [
            (100, st(50, 1)),
            (101, st(100, 2)),
            (102, st(101, 3)),
            (103, st(100, 4)),
        ]
        .into_iter()
        .collect();
        let lookup = |p: u32| procs.get(&p).copied();
        let mut b = DepthBook::default();
        assert_eq!(b.depth_of(100, &procs[&100], 100, lookup), 0);
        b.record(100, 1, 0);
        // exec in place by the root keeps depth 0
        assert_eq!(b.depth_of(100, &procs[&100], 100, lookup), 0);
        assert_eq!(b.depth_of(101, &procs[&101], 100, lookup), 1);
        b.record(101, 2, 1);
        assert_eq!(b.depth_of(102, &procs[&102], 100, lookup), 2);
        assert_eq!(b.depth_of(103, &procs[&103], 100, lookup), 1);
    }

    #[test]
    fn reused_pid_is_not_the_old_process() {
        let procs: HashMap<u32, ProcStat> =
            [(100, st(50, 1)), (101, st(100, 9))].into_iter().collect();
        let lookup = |p: u32| procs.get(&p).copied();
        let mut b = DepthBook::default();
        b.record(100, 1, 0);
        b.record(101, 2, 5); // an older process that had pid 101
        assert_eq!(b.depth_of(101, &procs[&101], 100, lookup), 1);
    }

    #[test]
    fn lost_lineage_counts_as_nested() {
        let b = DepthBook::default();
        assert_eq!(b.depth_of(300, &st(1, 7), 100, |_| None), 1);
    }
}
