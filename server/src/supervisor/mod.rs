//! The exec supervisor: rules on every `execve`/`execveat` of a supervised tree.
//!
//! The folder is the architecture. A *backend* catches an exec and answers
//! it: today `notify` (one seccomp user-notify fd per tree, a thread each);
//! a ptrace backend (`SECCOMP_RET_TRACE`, for gVisor) will be a sibling.
//! Everything after the catch is one backend-neutral path, `exec`: gather the
//! facts in the calling thread's view (`crate::tracee`), make sure nothing
//! else can change them (`sharing`: stop every task that shares the caller's
//! memory; `vma`: refuse strings in memory another process could write), ask
//! the pure policy (`policy::judge`), hold for an operator (`approval`),
//! audit, answer, and watch the exec complete (`ptrace`). `depth` keeps the
//! tree's depth book; `signals` is the signal guard's user-notify half.
//!
//! Fail-closed: any fact that cannot be read, decided or frozen is answered
//! EACCES (never CONTINUE) and audited with the reason. A program path that
//! does not exist is answered ENOENT/ENOTDIR without a decision: shells probe
//! every PATH entry, and those probes are not execs. If the server dies, the
//! kernel fails every later trapped syscall of the tree with ENOSYS, and
//! detaches every task the supervisor had stopped.

mod depth;
mod exec;
mod notify;
mod ptrace;
mod sharing;
mod signals;
mod verify;
mod vma;

pub use depth::DepthBook;
pub use exec::RULE_FILELESS_EXEC;
pub use verify::Expected;

use crate::approval::Approvals;
use crate::audit::AuditLog;
use crate::config::ExecveSection;
use crate::policy::Policy;
use std::os::fd::OwnedFd;
use std::sync::Arc;

/// What every tree's supervisor shares.
pub struct SupervisorContext {
    pub policy: Arc<Policy>,
    pub limits: ExecveSection,
    pub audit: Arc<AuditLog>,
    /// Execs held for an operator (`decision: approve`).
    pub approvals: Arc<Approvals>,
}

/// One supervised tree.
pub struct Tree {
    pub session_id: String,
    /// The wrapper's pid: its first exec (of the shell) is depth 0.
    pub root_pid: u32,
    /// Shared with approval waiters, which answer held execs on it.
    pub fd: Arc<OwnedFd>,
}

/// Serves `tree` until every process in it has exited.
pub fn serve(ctx: Arc<SupervisorContext>, tree: Tree) {
    notify::serve(ctx, tree)
}

/// How a held exec ended once an operator approved it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Resumed {
    /// It ran as approved (or failed, or its caller died: nothing else ran).
    AsApproved,
    /// It could not be watched: refused with EACCES instead.
    Refused(String),
    /// What ran was not what the operator approved: killed before its first
    /// instruction. The text says what it was.
    Killed(String),
}

/// Lets an approved exec proceed and makes sure it runs exactly the file and
/// argv the operator saw: the calling thread is seized before CONTINUE and
/// checked at `PTRACE_EVENT_EXEC` (see `verify`). Called on the approval
/// waiter's thread, which is then the tracer (its tracees are detached by the
/// kernel when the thread ends).
pub fn resume_approved(
    fd: std::os::fd::BorrowedFd<'_>,
    id: u64,
    tid: u32,
    pid: u32,
    expected: Option<&Expected>,
) -> Resumed {
    use agentsh_proto::notif;
    if let Err(e) = verify::arm(tid) {
        let _ = notif::respond_errno(fd, id, libc::EACCES);
        return Resumed::Refused(format!(
            "cannot watch the approved exec to verify what runs (ptrace: {e})"
        ));
    }
    // SAFETY ARGUMENT for CONTINUE: the operator approved a file identity and
    // an argv; another thread may have changed the path or argv since, so
    // what the kernel starts is checked at PTRACE_EVENT_EXEC, before its first
    // instruction, and killed if it is not exactly that (`verify::watch`).
    if notif::respond_continue(fd, id).is_err() {
        return Resumed::AsApproved; // the caller is gone: nothing runs
    }
    let mut lingering = ptrace::Lingering::default();
    match verify::watch(tid, pid, expected, None, &mut lingering) {
        verify::Outcome::Killed(what) => Resumed::Killed(what),
        _ => Resumed::AsApproved,
    }
}
