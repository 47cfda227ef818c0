//! Whether another process shares the caller's memory: `kcmp(KCMP_VM)`
//! where the kernel answers it, else the base filter's sharing model read
//! from vfork waits (`/proc/<pid>/task/<tid>/syscall`).
//!
//! Why: the set of tasks to stop before an exec's strings are read is made
//! of the processes that share the caller's memory; `kcmp` answers exactly,
//! but Docker's default seccomp profile refuses it without
//! `CAP_SYS_PTRACE`, and a kernel may lack it.
//!
//! Failure modes: a process that is gone shares nothing; where `kcmp` is
//! refused, whatever cannot be read counts as sharing (the exec is then
//! watched or its sharers stopped, never let through on a guess); any other
//! `kcmp` error is [`FreezeError::Kcmp`], and the exec is refused.

use super::error::FreezeError;
use crate::supervisor::procfiles::ProcFiles;
use std::io;

const KCMP_VM: libc::c_long = 1;

/// `kcmp(a, b, KCMP_VM)`: do threads `a` and `b` share one address space?
///
/// # Errors
/// ESRCH (one is gone), ENOSYS (kernel without kcmp), EPERM.
pub fn same_vm(a: u32, b: u32) -> io::Result<bool> {
    let _owner = crate::tracee::as_owner(b);
    // SAFETY: kcmp takes five integers; no memory is passed.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_kcmp,
            a as libc::c_long,
            b as libc::c_long,
            KCMP_VM,
            0 as libc::c_long,
            0 as libc::c_long,
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(rc == 0)
}

/// How a process is related to the caller, for when `kcmp` is refused.
#[derive(Debug, Clone, Copy)]
pub(super) enum Relation {
    /// An ancestor of the caller (its parent, or a parent's parent that
    /// shares).
    Ancestor(u32),
    /// `child`, a child of thread `tid` of process `pid` (a member of the set
    /// that is asleep).
    ChildOf { child: u32, pid: u32, tid: u32 },
}

/// `tid` shares the memory of the process `rel` names (gone: no).
///
/// `kcmp` answers exactly. Where it is refused (Docker's default seccomp
/// profile refuses it without `CAP_SYS_PTRACE`; kernels without it), the
/// base filter's sharing model answers conservatively: two processes of a
/// tree share memory only through `vfork`, while the vforking thread waits
/// for its child, so a process may share the caller's memory only if a
/// thread it shares through is blocked in `vfork` ([`in_vfork_wait`]).
/// Whatever cannot be read counts as sharing: the exec is then watched
/// (`race_guard: verify`) or its sharers stopped, never let through on a
/// guess.
pub(super) fn shares(tid: u32, rel: Relation, files: &mut ProcFiles) -> Result<bool, FreezeError> {
    let other = match rel {
        Relation::Ancestor(p) => p,
        Relation::ChildOf { child, .. } => child,
    };
    match same_vm(tid, other) {
        Ok(b) => Ok(b),
        Err(e) if e.raw_os_error() == Some(libc::ESRCH) => Ok(false),
        Err(e)
            if matches!(
                e.raw_os_error(),
                Some(libc::EPERM | libc::ENOSYS | libc::EACCES)
            ) =>
        {
            note_kcmp_refused(&e);
            Ok(match rel {
                Relation::Ancestor(p) => any_thread_in_vfork(p, files),
                Relation::ChildOf { pid, tid, .. } => thread_in_vfork(pid, tid),
            })
        }
        Err(e) => Err(FreezeError::Kcmp(e)),
    }
}

/// Says once, in the log, that sharing is judged without `kcmp`.
fn note_kcmp_refused(e: &io::Error) {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        tracing::info!(
            "kcmp refused ({e}): which processes share a caller's memory is judged from vfork \
             waits instead (more execs are watched; none is let through on a guess)"
        );
    });
}

/// Whether any thread of process `pid` is blocked in `vfork` (unreadable:
/// yes; gone: no).
fn any_thread_in_vfork(pid: u32, files: &mut ProcFiles) -> bool {
    let Ok(st) = files.stat_now(pid) else {
        return false;
    };
    if st.num_threads <= 1 {
        return files.syscall_line(pid).map_or(true, |l| in_vfork_wait(&l));
    }
    match files.threads(pid) {
        Ok(threads) if !threads.is_empty() => threads.iter().any(|&t| thread_in_vfork(pid, t)),
        _ => true,
    }
}

/// Whether thread `tid` of `pid` is blocked in `vfork` (unreadable: yes;
/// gone: no).
fn thread_in_vfork(pid: u32, tid: u32) -> bool {
    let _owner = crate::tracee::as_owner(tid);
    match std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/syscall")) {
        Ok(line) => in_vfork_wait(&line),
        Err(e) => e.raw_os_error() != Some(libc::ENOENT) && e.raw_os_error() != Some(libc::ESRCH),
    }
}

/// Whether a `/proc/<tid>/syscall` line shows a thread blocked in `vfork`
/// (or `clone` with `CLONE_VFORK`) on the native ABI. Pure.
pub fn in_vfork_wait(syscall_line: &str) -> bool {
    let mut f = syscall_line.split_whitespace();
    let Some(nr) = f.next().and_then(|n| n.parse::<i64>().ok()) else {
        return false; // "running", or "-1 ..." (not in a syscall)
    };
    let flags = f
        .next()
        .and_then(|a| u64::from_str_radix(a.trim_start_matches("0x"), 16).ok())
        .unwrap_or(0);
    let vfork_flags = (libc::CLONE_VFORK | libc::CLONE_VM) as u64;
    let clone_vfork = flags & vfork_flags == vfork_flags;
    #[cfg(target_arch = "x86_64")]
    {
        nr == libc::SYS_vfork || (nr == libc::SYS_clone && clone_vfork)
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        nr == libc::SYS_clone && clone_vfork
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn kcmp_tells_threads_from_processes() {
        let me = std::process::id();
        assert!(same_vm(me, me).unwrap());
        assert!(!same_vm(me, std::os::unix::process::parent_id()).unwrap());
        let (tx, rx) = std::sync::mpsc::channel();
        let t = std::thread::spawn(move || {
            // SAFETY: gettid has no preconditions.
            tx.send(unsafe { libc::gettid() } as u32).unwrap();
            std::thread::sleep(Duration::from_millis(200));
        });
        let tid = rx.recv().unwrap();
        assert!(same_vm(me, tid).unwrap());
        t.join().unwrap();
    }

    #[test]
    fn vfork_waits_are_recognised_and_nothing_else() {
        #[cfg(target_arch = "x86_64")]
        {
            assert!(in_vfork_wait("58 0x0 0x0 0x0 0x0 0x0 0x0 0x7ffc 0x7f00"));
            assert!(in_vfork_wait("56 0x4111 0x0 0x0 0x0 0x0 0x0 0x7ffc 0x7f00"));
            // fork-like clone, a read, not in a syscall, running.
            assert!(!in_vfork_wait(
                "56 0x1200011 0x0 0x0 0x0 0x0 0x0 0x7ffc 0x7f00"
            ));
            assert!(!in_vfork_wait(
                "0 0x3 0x7ffc 0x100 0x0 0x0 0x0 0x7ffc 0x7f00"
            ));
        }
        assert!(!in_vfork_wait("-1 0x7ffc 0x7f00"));
        assert!(!in_vfork_wait("running"));
    }
}
