//! The names gate: while a path call the files family walked runs (from
//! its judgement to its syscall-exit stop), no call of any traced tree may
//! change the names it walked. A call that changes names (`rename`,
//! `unlink`, `rmdir`, `link`, `symlink`) runs alone; any other path call
//! waits while one runs, and runs beside the others. A call that must wait
//! stays in its seccomp stop (parked) and is handled, as it would have
//! been, when the gate lets it in. So the symlink swap (a name the walk
//! found a plain file or nothing turned into a link to a protected file
//! before the kernel's own lookup) cannot happen between a tree's
//! processes: the tracer sees, and holds, every rename and unlink of every
//! tree.
//!
//! A walk of a process with one thread is let run without a second stop
//! (its syscall-exit stop costs more than the rest of the call, in gVisor):
//! it is only *unobserved* until the tracer sees that thread stop again. A
//! change that comes while walks are unobserved first interrupts their
//! threads (`PTRACE_INTERRUPT`): a thread stops once its call has returned,
//! or with its call interrupted, to be restarted through its seccomp stop
//! (and judged again) when it runs on. The change runs when every one of
//! them has been seen stopped.
//!
//! A call that blocks after its lookup (an open of a FIFO waiting for a
//! writer) would keep the gate shut: one that has run [`BLOCKED_AFTER`] and
//! sleeps interruptibly is taken to be past its lookup and no longer holds
//! the gate. What this does not watch: processes that are not traced (an
//! SDK daemon, the server) changing names.
//!
//! Failure modes: none; a thread that vanishes leaves the gate.

use std::collections::{HashMap, HashSet, VecDeque};
use std::time::{Duration, Instant};

/// How long a running call holds the gate before it may be found blocked.
pub const BLOCKED_AFTER: Duration = Duration::from_millis(100);

/// What a call does to names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Walks names (opens, creates, changes metadata).
    Walks,
    /// Changes what names point at (renames, removes, links).
    Changes,
}

/// The gate (see the module doc).
#[derive(Default)]
pub struct NameGate {
    /// Calls let run, until their syscall-exit stop.
    running: HashMap<u32, (Kind, Instant)>,
    /// Calls waiting, in arrival order: (thread, wait status, kind).
    parked: VecDeque<(u32, i32, Kind)>,
    /// Threads let run into a walk without an exit stop, not seen stopped
    /// since (their call may not have returned).
    unobserved: HashSet<u32>,
    /// Those of them asked to stop (`PTRACE_INTERRUPT`) for a change.
    interrupted: HashSet<u32>,
}

impl NameGate {
    /// Whether a call of `kind` may be judged now (else it is parked);
    /// `let_in`: it was parked and is being let in (it queues no more).
    pub fn admits(&self, kind: Kind, let_in: bool) -> bool {
        let changing = self.running.values().any(|(k, _)| *k == Kind::Changes);
        match kind {
            Kind::Changes => self.running.is_empty() && self.unobserved.is_empty(),
            // Behind a waiting change: no change waits forever.
            Kind::Walks => {
                !changing && (let_in || !self.parked.iter().any(|(_, _, k)| *k == Kind::Changes))
            }
        }
    }

    /// `tid`'s call waits in its stop (`status`, replayed later).
    pub fn park(&mut self, tid: u32, status: i32, kind: Kind) {
        self.parked.push_back((tid, status, kind));
    }

    /// Whether `tid` is parked.
    pub fn parks(&self, tid: u32) -> bool {
        self.parked.iter().any(|(t, _, _)| *t == tid)
    }

    /// `tid`'s call was let run.
    pub fn running(&mut self, tid: u32, kind: Kind) {
        self.running.insert(tid, (kind, Instant::now()));
    }

    /// `tid`'s call returned, or `tid` is gone.
    pub fn done(&mut self, tid: u32) {
        self.running.remove(&tid);
        self.parked.retain(|(t, _, _)| *t != tid);
        self.observed(tid);
    }

    /// `tid` was let run into a walk without an exit stop.
    pub fn unobserved(&mut self, tid: u32) {
        self.unobserved.insert(tid);
    }

    /// `tid` was seen stopped: a walk it was let into has returned (or was
    /// interrupted, to come again through its seccomp stop). Whether it
    /// was one of the unobserved.
    pub fn observed(&mut self, tid: u32) -> bool {
        self.interrupted.remove(&tid);
        self.unobserved.remove(&tid)
    }

    /// The unobserved threads a waiting change needs stopped, not yet
    /// asked: each is asked once (the caller interrupts them).
    pub fn walks_to_interrupt(&mut self) -> Vec<u32> {
        let change_waits = self
            .parked
            .front()
            .is_some_and(|(_, _, k)| *k == Kind::Changes);
        if !change_waits {
            return Vec::new();
        }
        let ask: Vec<u32> = self
            .unobserved
            .iter()
            .filter(|t| !self.interrupted.contains(t))
            .copied()
            .collect();
        self.interrupted.extend(ask.iter().copied());
        ask
    }

    /// The next parked call the gate lets in now, taken off the queue.
    pub fn next(&mut self) -> Option<(u32, i32)> {
        let &(tid, status, kind) = self.parked.front()?;
        let changing = self.running.values().any(|(k, _)| *k == Kind::Changes);
        let ok = match kind {
            Kind::Changes => self.running.is_empty() && self.unobserved.is_empty(),
            Kind::Walks => !changing,
        };
        if !ok {
            return None;
        }
        self.parked.pop_front();
        Some((tid, status))
    }

    /// Calls that have run [`BLOCKED_AFTER`] and that `blocked` says sleep:
    /// past their lookup, they leave the gate. Whether any did. Only while
    /// a call waits (a running call keeps out only calls that wait): the
    /// clock is not read between the stops of a tree that never waits (a
    /// syscall under gVisor's ptrace platform).
    pub fn drop_blocked(&mut self, blocked: impl Fn(u32) -> bool) -> bool {
        if self.parked.is_empty() || self.running.is_empty() {
            return false;
        }
        let before = self.running.len();
        let now = Instant::now();
        self.running
            .retain(|&tid, (_, since)| now.duration_since(*since) < BLOCKED_AFTER || !blocked(tid));
        self.running.len() != before
    }

    /// Whether anything waits.
    #[cfg(test)]
    pub fn has_parked(&self) -> bool {
        !self.parked.is_empty()
    }
}

/// A call of `op` changes names or walks them.
pub fn kind_of(op: agentsh_proto::fileabi::FileOp) -> Kind {
    use agentsh_proto::fileabi::FileOp;
    match op {
        FileOp::Unlink | FileOp::Rmdir | FileOp::Rename | FileOp::Link | FileOp::Symlink => {
            Kind::Changes
        }
        FileOp::Open
        | FileOp::Creat
        | FileOp::Truncate
        | FileOp::Mkdir
        | FileOp::Mknod
        | FileOp::Attr => Kind::Walks,
    }
}

/// Whether a call of `c` with arguments `args` may change where a
/// directory's name leads (the walk's remembered directories are then
/// forgotten): removing a directory, any rename (a directory moved, or
/// an empty one replaced). Removing a file, a hard link or a symlink
/// made, leaves every directory's name as it was (a name that exists
/// is never replaced by `link`/`symlink`, and `unlink` of a directory
/// fails).
pub fn moves_directories(c: &agentsh_proto::fileabi::FileSyscall, args: [u64; 6]) -> bool {
    use agentsh_proto::fileabi::FileOp;
    match c.op {
        FileOp::Rmdir | FileOp::Rename => true,
        FileOp::Unlink => c.at_flags.is_some_and(|i| {
            args.get(i)
                .is_some_and(|f| f & libc::AT_REMOVEDIR as u64 != 0)
        }),
        _ => false,
    }
}

/// Whether thread `tid` sleeps interruptibly (`S` in `/proc/<tid>/stat`).
pub fn sleeps(tid: u32) -> bool {
    crate::tracee::proc_stat(tid).is_ok_and(|s| s.state == b'S')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_calls_that_may_move_a_directory_forget_the_walked_ones() {
        let x86 = agentsh_proto::execabi::AUDIT_ARCH_X86_64;
        let call = |nr: i64| agentsh_proto::fileabi::classify(x86, nr as i32).unwrap();
        let rmdir_flag = libc::AT_REMOVEDIR as u64;
        assert!(moves_directories(call(libc::SYS_rmdir), [0; 6]));
        assert!(moves_directories(call(libc::SYS_rename), [0; 6]));
        assert!(moves_directories(call(libc::SYS_renameat2), [0; 6]));
        assert!(moves_directories(
            call(libc::SYS_unlinkat),
            [0, 0, rmdir_flag, 0, 0, 0]
        ));
        assert!(!moves_directories(call(libc::SYS_unlinkat), [0; 6]));
        assert!(!moves_directories(call(libc::SYS_unlink), [0; 6]));
        assert!(!moves_directories(call(libc::SYS_symlinkat), [0; 6]));
        assert!(!moves_directories(call(libc::SYS_linkat), [0; 6]));
        assert!(!moves_directories(call(libc::SYS_openat), [0; 6]));
    }

    #[test]
    fn a_change_runs_alone_and_walks_run_together() {
        let mut g = NameGate::default();
        assert!(g.admits(Kind::Walks, false));
        g.running(1, Kind::Walks);
        assert!(g.admits(Kind::Walks, false));
        assert!(!g.admits(Kind::Changes, false));
        g.park(2, 7, Kind::Changes);
        // A walk behind a waiting change waits too.
        assert!(!g.admits(Kind::Walks, false));
        g.park(3, 8, Kind::Walks);
        assert_eq!(g.next(), None);
        g.done(1);
        assert_eq!(g.next(), Some((2, 7)));
        g.running(2, Kind::Changes);
        assert_eq!(g.next(), None);
        g.done(2);
        assert_eq!(g.next(), Some((3, 8)));
        assert!(!g.has_parked());
    }

    #[test]
    fn a_change_waits_for_unobserved_walks_to_be_seen_stopped() {
        let mut g = NameGate::default();
        g.unobserved(5);
        g.unobserved(6);
        assert!(!g.admits(Kind::Changes, false));
        // Nothing waits: nobody is interrupted.
        assert!(g.walks_to_interrupt().is_empty());
        g.park(9, 1, Kind::Changes);
        let mut ask = g.walks_to_interrupt();
        ask.sort_unstable();
        assert_eq!(ask, vec![5, 6]);
        assert!(g.walks_to_interrupt().is_empty(), "each asked once");
        assert!(g.observed(5));
        assert_eq!(g.next(), None);
        assert!(g.observed(6));
        assert!(!g.observed(6));
        assert_eq!(g.next(), Some((9, 1)));
    }

    #[test]
    fn a_blocked_walk_leaves_the_gate_only_after_a_while() {
        let mut g = NameGate::default();
        g.running(1, Kind::Walks);
        g.running
            .insert(1, (Kind::Walks, Instant::now() - BLOCKED_AFTER * 2));
        assert!(
            !g.drop_blocked(|_| true),
            "nothing waits: nothing to let in"
        );
        g.running(1, Kind::Walks);
        g.park(9, 0, Kind::Changes);
        assert!(!g.admits(Kind::Changes, false));
        assert!(!g.drop_blocked(|_| true));
        g.running
            .insert(1, (Kind::Walks, Instant::now() - BLOCKED_AFTER * 2));
        assert!(!g.drop_blocked(|_| false));
        assert!(g.drop_blocked(|_| true));
        assert!(g.admits(Kind::Changes, false));
    }
}
