//! The sharing set of an exec's caller: the caller's process, the parents
//! above it that share its memory, and their threads ([`sharing`]); or
//! `Exclusive` when nothing else can write the caller's strings.
//!
//! Why: one `kcmp` answers the common case (a single-threaded caller whose
//! parent does not share its memory), and a vfork child whose lone parent
//! thread waits for it is exclusive too, so most execs stop nobody.
//!
//! Failure modes: `kcmp` failing on the caller's own parent is
//! [`FreezeError::Kcmp`] (no way to tell); a parent that cannot be read ends
//! the walk up (it is gone); the walk stops at `MAX_PROCESSES`.

use super::error::{FreezeError, MAX_PROCESSES};
use super::shares::{in_vfork_wait, shares, Relation};
use super::threads::{own_threads, threads_of};
use crate::supervisor::procfiles::ProcFiles;
use crate::tracee;
use std::collections::BTreeMap;

/// The tasks that share the caller's memory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Sharing {
    /// Nothing else can write it. `parent`: the caller's parent shares it
    /// all the same (a vfork child whose lone parent thread waits for it).
    Exclusive { parent: bool },
    /// These can.
    Shared(Members),
}

/// Who shares the caller's memory, as far as enumerated.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Members {
    /// The processes (the caller's first).
    pub procs: Vec<u32>,
    /// Their threads but the caller: tid → its process.
    pub tasks: BTreeMap<u32, u32>,
}

/// The sharing set of thread `tid` of process `pid` (its stat already read).
///
/// # Errors
/// `kcmp` failed on the caller's own parent (ENOSYS: no way to tell), or
/// the set is absurdly large.
pub fn sharing(
    pid: u32,
    tid: u32,
    stat: &tracee::ProcStat,
    files: &mut ProcFiles,
) -> Result<Sharing, FreezeError> {
    let parent_shares = stat.ppid > 1 && shares(tid, Relation::Ancestor(stat.ppid), files)?;
    if stat.num_threads <= 1 && !parent_shares {
        return Ok(Sharing::Exclusive { parent: false });
    }
    if stat.num_threads <= 1 && vfork_of_a_lone_thread(tid, stat.ppid, files)? {
        return Ok(Sharing::Exclusive { parent: true });
    }
    let mut set = Members {
        procs: vec![pid],
        tasks: BTreeMap::new(),
    };
    let mut p = stat.ppid;
    let mut up_shares = parent_shares;
    while up_shares && set.procs.len() < MAX_PROCESSES {
        set.procs.push(p);
        p = match files.stat(p) {
            Ok(s) => s.ppid,
            Err(_) => break,
        };
        up_shares = p > 1 && shares(tid, Relation::Ancestor(p), files)?;
    }
    for t in own_threads(pid, tid, stat.num_threads) {
        if t != tid {
            set.tasks.insert(t, pid);
        }
    }
    for &q in &set.procs[1..] {
        for t in threads_of(q, files) {
            set.tasks.insert(t, q);
        }
    }
    if set.tasks.is_empty() {
        Ok(Sharing::Exclusive {
            parent: parent_shares,
        })
    } else {
        Ok(Sharing::Shared(set))
    }
}

/// Is the caller `tid` (single-threaded, sharing its parent's memory) the
/// vfork child of a single-threaded parent that waits in `vfork` for it,
/// with no other process sharing that memory above it? Then nothing else can
/// run on the memory until this exec completes or the caller dies: the
/// parent's one thread returns from `vfork` only then (dash, and posix_spawn
/// from a single-threaded program, spawn this way). A single thread has one
/// vfork child outstanding, and the only process that shares its memory and
/// has it as parent is that child: the caller.
///
/// `/proc/<ppid>/syscall` names the call the thread is blocked in; only the
/// native ABI's numbers are believed (a compat task blocked in a call of the
/// same number is not in vfork, and is then frozen like any other). The
/// parent's files are kept open between execs (`files`).
fn vfork_of_a_lone_thread(tid: u32, ppid: u32, files: &mut ProcFiles) -> Result<bool, FreezeError> {
    let Ok(ps) = files.stat_now(ppid) else {
        return Ok(false);
    };
    if ps.num_threads != 1 || (ps.ppid > 1 && shares(tid, Relation::Ancestor(ps.ppid), files)?) {
        return Ok(false);
    }
    let Ok(text) = files.syscall_line(ppid) else {
        return Ok(false);
    };
    Ok(in_vfork_wait(&text))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_threaded_process_shares_with_its_threads() {
        let me = std::process::id();
        let stat = tracee::proc_stat(me).unwrap();
        // The test harness runs tests on threads: this process has several.
        if stat.num_threads > 1 {
            match sharing(me, me, &stat, &mut ProcFiles::default()).unwrap() {
                Sharing::Shared(s) => {
                    assert!(!s.tasks.contains_key(&me) && !s.tasks.is_empty());
                    assert_eq!(s.procs, vec![me]);
                }
                Sharing::Exclusive { .. } => panic!("threads share memory"),
            }
        }
    }
}
