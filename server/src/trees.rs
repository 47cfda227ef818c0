//! The live supervised trees, and "is this process inside one?".
//!
//! A tree is registered when the server takes its notify fd (`handoff`) and
//! forgotten when its last process has exited (`supervisor::serve` returns).
//! The question "is pid P in a tree?" is asked of every API peer, of every
//! operator decision and of every signal the server receives.
//!
//! Two tests, in order:
//! 1. lineage: an ancestor of P is a live tree root (keyed by pid and start
//!    time, so a reused pid is not mistaken for the root). Exact while the
//!    lineage holds;
//! 2. (only where asked, see [`Trees::in_tree_or_filtered`]) a process
//!    reparented away from its tree (double fork, setsid) keeps its seccomp
//!    filters: more filters than the server itself means "inside". This can
//!    misjudge a process outside every tree that runs under filters of its
//!    own, so it is used only where a false "inside" merely refuses an
//!    operator action.
//!
//! Failure modes: a process that cannot be read counts as inside for
//! [`Trees::in_tree_or_filtered`] (fail closed); lineage alone never fails
//! closed on an unreadable ancestor (the peer may have exited), which is why
//! the API does not rely on it: trees cannot open the API socket at all
//! (SEQPACKET, see `agentsh_proto::seqpacket`).

use crate::tracee;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

/// The most ancestors a lineage walk reads.
const MAX_WALK: usize = 128;

struct Root {
    starttime: u64,
    session: String,
    /// The policy its filter and ruleset were made from (what a reload
    /// cannot change for it).
    started_with: Arc<crate::policy::Policy>,
}

/// Every live tree of the server.
pub struct Trees {
    roots: Mutex<HashMap<u32, Root>>,
    /// What runs when a tree has finished (its cgroup's end), by root pid.
    at_end: Mutex<HashMap<u32, Box<dyn FnOnce() + Send>>>,
    /// The server's own `Seccomp_filters` count at start.
    own_filters: u32,
}

impl Default for Trees {
    fn default() -> Self {
        Trees::new()
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The `Seccomp_filters:` count of `pid` (`self` for this process).
pub fn seccomp_filters(pid: &str) -> Option<u32> {
    let status = crate::tracee::ProcStatus::read(pid).ok()?;
    // gVisor shows only the mode: 0 is "no filter"; a filter mode without a
    // count is unknown (the caller fails closed).
    status
        .number("Seccomp_filters")
        .or_else(|| status.number("Seccomp").filter(|m| *m == 0))
}

impl Trees {
    pub fn new() -> Trees {
        Trees {
            roots: Mutex::new(HashMap::new()),
            at_end: Mutex::new(HashMap::new()),
            own_filters: seccomp_filters("self").unwrap_or(0),
        }
    }

    /// Records a live tree rooted at `root_pid`, started under `policy`.
    pub fn started(&self, root_pid: u32, session: &str, policy: Arc<crate::policy::Policy>) {
        if let Ok(st) = tracee::proc_stat(root_pid) {
            lock(&self.roots).insert(
                root_pid,
                Root {
                    starttime: st.starttime,
                    session: session.to_string(),
                    started_with: policy,
                },
            );
        }
    }

    pub fn finished(&self, root_pid: u32) {
        lock(&self.roots).remove(&root_pid);
        let end = lock(&self.at_end).remove(&root_pid);
        if let Some(end) = end {
            end();
        }
    }

    /// Runs `end` when the tree rooted at `root_pid` has finished
    /// ([`Trees::finished`]), on the thread that saw it finish.
    pub fn at_end(&self, root_pid: u32, end: Box<dyn FnOnce() + Send>) {
        lock(&self.at_end).insert(root_pid, end);
    }

    /// `root_pid`'s end, taken back for a tree that never started.
    pub fn take_end(&self, root_pid: u32) -> Option<Box<dyn FnOnce() + Send>> {
        lock(&self.at_end).remove(&root_pid)
    }

    /// Live trees of `session`.
    pub fn count(&self, session: &str) -> usize {
        lock(&self.roots)
            .values()
            .filter(|r| r.session == session)
            .count()
    }

    /// The root pids of `session`'s live trees.
    pub fn roots_of(&self, session: &str) -> Vec<u32> {
        let mut v: Vec<u32> = lock(&self.roots)
            .iter()
            .filter(|(_, r)| r.session == session)
            .map(|(p, _)| *p)
            .collect();
        v.sort_unstable();
        v
    }

    /// `session`'s live trees: each root pid and the policy it started
    /// under.
    pub fn started_with(&self, session: &str) -> Vec<(u32, Arc<crate::policy::Policy>)> {
        let mut v: Vec<_> = lock(&self.roots)
            .iter()
            .filter(|(_, r)| r.session == session)
            .map(|(p, r)| (*p, r.started_with.clone()))
            .collect();
        v.sort_unstable_by_key(|(p, _)| *p);
        v
    }

    /// Kills every process descending from one of `session`'s tree roots
    /// (the roots too); returns how many. Each is opened as a pidfd, its
    /// lineage read again through it (a reused pid is never signalled), and
    /// stopped (SIGSTOP) before anything is killed, pass after pass until a
    /// pass finds no new one: a stopped process cannot fork, and its
    /// children keep their lineage (killing a parent first would reparent
    /// them out of reach). Then every one is killed. A process that left
    /// the lineage before (double fork, reparented) is not found here: the
    /// supervisor kills it at its next supervised call.
    pub fn kill_session(&self, session: &str) -> usize {
        const PASSES: usize = 50;
        let roots: HashMap<u32, u64> = lock(&self.roots)
            .iter()
            .filter(|(_, r)| r.session == session)
            .map(|(p, r)| (*p, r.starttime))
            .collect();
        let mut held: HashMap<u32, std::os::fd::OwnedFd> = HashMap::new();
        for _ in 0..PASSES {
            let Ok(dir) = std::fs::read_dir("/proc") else {
                break;
            };
            let mut found = 0;
            for e in dir.flatten() {
                let Some(pid) = e.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else {
                    continue;
                };
                if held.contains_key(&pid) || !descends(pid, &roots) {
                    continue;
                }
                let Ok(fd) = tracee::pidfd::open(pid) else {
                    continue;
                };
                // Opened, so the pid stays this process: check it again.
                if !descends(pid, &roots) {
                    continue;
                }
                let _ = tracee::pidfd::send_signal(&fd, libc::SIGSTOP);
                held.insert(pid, fd);
                found += 1;
            }
            if found == 0 {
                break;
            }
        }
        held.values()
            .filter(|fd| tracee::pidfd::send_signal(fd, libc::SIGKILL).is_ok())
            .count()
    }

    /// Why `pid` is inside a live tree by lineage, if it is.
    pub fn by_lineage(&self, pid: u32) -> Option<String> {
        let roots: HashMap<u32, u64> = lock(&self.roots)
            .iter()
            .map(|(p, r)| (*p, r.starttime))
            .collect();
        if roots.is_empty() {
            return None;
        }
        let mut p = pid;
        for _ in 0..MAX_WALK {
            if p <= 1 {
                break;
            }
            let Ok(st) = tracee::proc_stat(p) else { break };
            if roots.get(&p) == Some(&st.starttime) {
                return Some(format!("pid {pid} descends from tree root {p}"));
            }
            p = st.ppid;
        }
        None
    }

    /// Lineage, then the filter count (see the module doc). An unreadable
    /// process counts as inside.
    pub fn in_tree_or_filtered(&self, pid: u32) -> Option<String> {
        if let Some(why) = self.by_lineage(pid) {
            return Some(why);
        }
        match seccomp_filters(&pid.to_string()) {
            Some(n) if n > self.own_filters => Some(format!(
                "pid {pid} has {n} seccomp filters, the server {}",
                self.own_filters
            )),
            Some(_) => None,
            None => Some(format!("pid {pid}: /proc/{pid}/status unreadable")),
        }
    }
}

/// Whether `pid` or an ancestor is one of `roots` (pid, start time). A
/// zombie (killed, not yet reaped) counts as not: it runs nothing.
fn descends(pid: u32, roots: &HashMap<u32, u64>) -> bool {
    let mut p = pid;
    for _ in 0..MAX_WALK {
        if p <= 1 {
            return false;
        }
        let Ok(st) = tracee::proc_stat(p) else {
            return false;
        };
        if p == pid && st.state == b'Z' {
            return false;
        }
        if roots.get(&p) == Some(&st.starttime) {
            return true;
        }
        p = st.ppid;
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_child_of_a_live_root_is_inside_and_counted() {
        let t = Trees::new();
        let me = std::process::id();
        assert!(t.by_lineage(me).is_none());
        // The test process's parent plays a tree root: we descend from it.
        let parent = std::os::unix::process::parent_id();
        let policy = crate::policy::Policy::from_yaml("name: t\ndefault: allow\n", "test")
            .expect("a policy");
        t.started(parent, "s", Arc::new(policy));
        assert_eq!(t.count("s"), 1);
        assert_eq!(t.count("other"), 0);
        assert!(t.by_lineage(me).is_some());
        t.finished(parent);
        assert!(t.by_lineage(me).is_none());
        assert_eq!(t.count("s"), 0);
    }

    #[test]
    fn a_vanished_process_counts_as_inside_where_failing_closed() {
        let t = Trees::new();
        assert!(t.in_tree_or_filtered(u32::MAX - 7).is_some());
        assert!(t.in_tree_or_filtered(std::process::id()).is_none());
    }
}
