//! The signal guard's user-notify half: where Landlock cannot scope signals
//! (effective ABI < 6), the filter sends `kill`, `tkill`, `rt_sigqueueinfo`,
//! `pidfd_send_signal` and `pidfd_open(PIDFD_THREAD)` here, because a register
//! cannot say whom they reach: `kill(tid)` of any thread signals its whole
//! process, and a pidfd (or an fd of `/proc/<pid>`) is just a number.
//!
//! For each call the target is resolved from the server's side: a pid or tid
//! → its thread-group id (`/proc/<id>/status`); a negative pid → that process
//! group; 0 → the caller's own group; a pidfd → `Pid:` in the caller thread's
//! `/proc/<tid>/fdinfo/<fd>`, or the pid a `/proc/<pid>` directory fd names.
//! The call is refused (EPERM, audited as a `signal` event with the reason)
//! when the target is a protected process (the server; the SDK daemon, i.e.
//! the tree root's parent; and the processes whose death ends the sandbox:
//! PID 1 of the server's pid namespace, the reaper and the command the
//! server runs, `SignalState::for_tree`) or a group one of them is in, and
//! for `kill(-1)`.
//! Everything else is CONTINUEd.
//!
//! Why CONTINUE holds: the pid, signal and fd are register arguments the
//! kernel copied before the notification, so the caller cannot change them.
//! What is read from /proc can change after the read in two ways, both
//! documented limits: a target pid that exits and is reused by a protected
//! process's new thread in the microseconds before delivery (needs a pid
//! wrap-around), and, for `pidfd_send_signal`, another thread sharing the fd
//! table swapping the fd number for a `/proc/<server>` fd after the read.
//! `kill(0)` is refused outright when the caller shares its session with a
//! protected process, because it could join a protected group (setpgid) after
//! the read.
//!
//! Failure modes: a target that cannot be read (no fdinfo, no status) is a
//! refusal with the reason, never a CONTINUE; a target that does not exist is
//! CONTINUEd (the kernel answers ESRCH).

use super::context::SupervisorContext;
use super::seam::Caught;
use super::seam::Stop;
use crate::audit::{EventBody, SignalEvent};

/// The signal calls the filter sends here, and which call a notification
/// is: one table in `agentsh_proto::sigabi`, every ABI the filter covers.
pub use agentsh_proto::sigabi::{classify, SignalCall};

/// The processes a tree must not signal, as read when the tree started.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SignalState {
    /// Thread-group ids.
    pub pids: Vec<u32>,
}

impl SignalState {
    /// The server; PID 1 of the server's pid namespace (a container's
    /// entrypoint: its death ends the container); the keepers the daemon
    /// registered (the reaper and the command below the server); and the
    /// tree root's parent (the SDK daemon that spawned the shim). The tree's
    /// own root is never among them (`agentsh wrap`: the command is the
    /// tree).
    pub fn for_tree(root_pid: u32) -> SignalState {
        let parent = crate::tracee::proc_stat(root_pid).ok().map(|st| st.ppid);
        let keepers = crate::filter::keepers_but(Some(root_pid));
        SignalState::of(std::process::id(), root_pid, parent, &keepers)
    }

    /// The protected set for a tree rooted at `root` whose root's parent is
    /// `parent`, under server `server` with `keepers`. Pure.
    pub fn of(server: u32, root: u32, parent: Option<u32>, keepers: &[u32]) -> SignalState {
        let mut pids = vec![server];
        let candidates = std::iter::once(1)
            .chain(keepers.iter().copied())
            .chain(parent.filter(|&p| p > 0));
        for p in candidates {
            if p != root && !pids.contains(&p) {
                pids.push(p);
            }
        }
        SignalState { pids }
    }
}

/// Where a process stands: its thread group, process group and session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Standing {
    pub tgid: u32,
    pub pgrp: u32,
    pub session: u32,
}

/// What a signal call aims at, as resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// One process (its thread-group id).
    Process(u32),
    /// Every process of a group.
    Group(u32),
    /// `kill(0)`: the caller's group.
    OwnGroup,
    /// `kill(-1)`: every process the caller may signal.
    Everyone,
    /// Nothing exists by that id: the kernel will say ESRCH.
    Nobody,
}

/// The facts a verdict needs, read from /proc by [`gather`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SignalFacts {
    pub call: SignalCall,
    pub caller: Standing,
    pub target: Target,
    /// The protected processes as they stand now.
    pub protected: Vec<Standing>,
}

/// Why a signal call is refused.
#[derive(Debug, thiserror::Error)]
pub enum SignalRefusal {
    #[error("kill(-1) would signal the server, the SDK daemon and the sandbox's init")]
    Everyone,
    #[error(
        "process {0} is protected (agentsh server, the SDK daemon, or a process whose death ends \
         the sandbox: PID 1, agentsh reaper, the entrypoint's command)"
    )]
    Protected(u32),
    #[error("process group {group} holds protected process {pid}")]
    Group { group: u32, pid: u32 },
    #[error("kill(0): the caller's process group {group} holds protected process {pid}")]
    OwnGroup { group: u32, pid: u32 },
    #[error(
        "kill(0) from session {session} of protected process {pid}: the caller could join its \
         group before the signal is sent"
    )]
    OwnSession { session: u32, pid: u32 },
    /// The facts cannot be read: refused too (fail closed).
    #[error(transparent)]
    Unreadable(#[from] Unreadable),
}

/// What of a signal call's facts cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum Unreadable {
    #[error("cannot read the caller {tid}: {error}")]
    Caller { tid: u32, error: std::io::Error },
    #[error("cannot read /proc/{id}/status: {error}")]
    Status { id: i64, error: std::io::Error },
    #[error("cannot tell what fd {fd} of thread {tid} refers to: {error}")]
    Fd {
        fd: i64,
        tid: u32,
        error: std::io::Error,
    },
    #[error("fd {0}: unreadable Pid in fdinfo")]
    FdinfoPid(i64),
    #[error("{link}: {error}")]
    Link { link: String, error: std::io::Error },
    #[error("fd {fd} is a /proc entry that names no process ({target})")]
    NoProcess { fd: i64, target: String },
}

/// Refuse (with the reason) or let through. Pure.
pub fn rule_on(f: &SignalFacts) -> Result<(), SignalRefusal> {
    let prot =
        |pred: &dyn Fn(&Standing) -> bool| f.protected.iter().find(|p| pred(p)).map(|p| p.tgid);
    match &f.target {
        Target::Nobody => Ok(()),
        Target::Everyone => Err(SignalRefusal::Everyone),
        Target::Process(t) => match prot(&|p| p.tgid == *t) {
            Some(p) => Err(SignalRefusal::Protected(p)),
            None => Ok(()),
        },
        Target::Group(g) => match prot(&|p| p.pgrp == *g) {
            Some(pid) => Err(SignalRefusal::Group { group: *g, pid }),
            None => Ok(()),
        },
        Target::OwnGroup => {
            if let Some(pid) = prot(&|p| p.pgrp == f.caller.pgrp) {
                Err(SignalRefusal::OwnGroup {
                    group: f.caller.pgrp,
                    pid,
                })
            } else if let Some(pid) = prot(&|p| p.session == f.caller.session) {
                Err(SignalRefusal::OwnSession {
                    session: f.caller.session,
                    pid,
                })
            } else {
                Ok(())
            }
        }
    }
}

/// `/proc/<id>/stat`'s pgrp and session, with the tgid from `status`.
fn standing(id: u32) -> std::io::Result<Standing> {
    let stat = crate::tracee::proc_stat(id)?;
    Ok(Standing {
        tgid: tgid(id)?,
        pgrp: stat.pgrp,
        session: stat.session,
    })
}

/// The thread group `id` (a pid or any thread's id) belongs to.
fn tgid(id: u32) -> std::io::Result<u32> {
    crate::tracee::ProcStatus::read(id)?
        .number("Tgid")
        .ok_or_else(|| std::io::Error::other("no Tgid in status"))
}

/// `id` → the process it is part of; gone → [`Target::Nobody`].
fn process_target(id: i64) -> Result<Target, Unreadable> {
    if id <= 0 || id > i64::from(i32::MAX) {
        return Ok(Target::Nobody);
    }
    match tgid(id as u32) {
        Ok(t) => Ok(Target::Process(t)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Target::Nobody),
        Err(error) => Err(Unreadable::Status { id, error }),
    }
}

const PROC_SUPER_MAGIC: i64 = 0x9fa0;

/// The process a pidfd (or `/proc/<pid>` directory fd) of thread `tid` names.
fn pidfd_target(tid: u32, fd: i64) -> Result<Target, Unreadable> {
    if !(0..=i64::from(i32::MAX)).contains(&fd) {
        return Ok(Target::Nobody);
    }
    let _owner = crate::tracee::as_owner(tid);
    let unknown = |error| Unreadable::Fd { fd, tid, error };
    let info = std::fs::read_to_string(format!("/proc/{tid}/fdinfo/{fd}")).map_err(unknown)?;
    if let Some(pid) = info.lines().find_map(|l| l.strip_prefix("Pid:")) {
        let pid: i64 = pid.trim().parse().map_err(|_| Unreadable::FdinfoPid(fd))?;
        return process_target(pid);
    }
    let link = format!("/proc/{tid}/fd/{fd}");
    let c = std::ffi::CString::new(link.clone()).map_err(|e| unknown(std::io::Error::other(e)))?;
    // SAFETY: statfs writes one struct through a valid pointer; the path is NUL-terminated.
    let mut sfs: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    if unsafe { libc::statfs(c.as_ptr(), &mut sfs) } != 0 {
        return Err(unknown(std::io::Error::last_os_error()));
    }
    if sfs.f_type as i64 != PROC_SUPER_MAGIC {
        // Neither a pidfd nor a /proc entry: the kernel refuses it (EBADF).
        return Ok(Target::Nobody);
    }
    let target = std::fs::read_link(&link).map_err(|error| Unreadable::Link {
        link: link.clone(),
        error,
    })?;
    let pid = target
        .file_name()
        .and_then(|n| n.to_str())
        .and_then(|n| n.parse::<i64>().ok())
        .ok_or_else(|| Unreadable::NoProcess {
            fd,
            target: target.display().to_string(),
        })?;
    process_target(pid)
}

/// Reads the facts for notification `n`.
fn read_call(
    call: SignalCall,
    n: &Caught,
    protected: &SignalState,
) -> Result<SignalFacts, Unreadable> {
    let caller = standing(n.tid).map_err(|error| Unreadable::Caller { tid: n.tid, error })?;
    let arg0 = i64::from(n.args[0] as u32 as i32);
    let target = match call {
        SignalCall::Kill => match arg0 {
            0 => Target::OwnGroup,
            -1 => Target::Everyone,
            g if g < 0 => Target::Group((-g) as u32),
            p => process_target(p)?,
        },
        SignalCall::Tkill | SignalCall::RtSigqueueinfo | SignalCall::PidfdOpen => {
            process_target(arg0)?
        }
        SignalCall::PidfdSendSignal => pidfd_target(n.tid, arg0)?,
    };
    let protected = protected
        .pids
        .iter()
        .filter_map(|p| standing(*p).ok())
        .collect();
    Ok(SignalFacts {
        call,
        caller,
        target,
        protected,
    })
}

/// Answers one signal notification (see the module doc) through `stop`
/// (the notify fd, or the tracer).
pub fn handle(
    ctx: &SupervisorContext,
    session_id: &str,
    protected: &SignalState,
    call: SignalCall,
    n: &Caught,
    stop: &dyn Stop,
) {
    let verdict = read_call(call, n, protected)
        .map_err(SignalRefusal::from)
        .and_then(|f| rule_on(&f).map(|()| f));
    match verdict {
        Ok(_) => {
            // SAFETY ARGUMENT for CONTINUE: see the module doc (register
            // arguments; the residual races are documented there).
            if stop.still_waiting() {
                let _ = stop.proceed();
            }
        }
        Err(reason) => {
            tracing::warn!(tid = n.tid, call = call.name(), "signal refused: {reason}");
            ctx.audit.record(
                session_id,
                EventBody::Signal(SignalEvent {
                    pid: n.tid,
                    syscall: call.name().into(),
                    target: n.args[0] as u32 as i32 as i64,
                    signal: signal_arg(call, n),
                    decision: "deny".into(),
                    reason: reason.to_string(),
                }),
            );
            let _ = stop.refuse(libc::EPERM);
        }
    }
}

fn signal_arg(call: SignalCall, n: &Caught) -> Option<i64> {
    match call {
        SignalCall::Kill
        | SignalCall::Tkill
        | SignalCall::RtSigqueueinfo
        | SignalCall::PidfdSendSignal => Some(i64::from(n.args[1] as u32 as i32)),
        SignalCall::PidfdOpen => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SERVER: Standing = Standing {
        tgid: 100,
        pgrp: 100,
        session: 100,
    };
    const DAEMON: Standing = Standing {
        tgid: 200,
        pgrp: 50,
        session: 50,
    };

    fn facts(caller: Standing, target: Target) -> SignalFacts {
        SignalFacts {
            call: SignalCall::Kill,
            caller,
            target,
            protected: vec![SERVER, DAEMON],
        }
    }

    const TREE: Standing = Standing {
        tgid: 300,
        pgrp: 300,
        session: 300,
    };

    #[test]
    fn the_sandbox_keepers_are_protected_but_never_the_tree_itself() {
        // PID 1, the reaper (7) and its command (8), the SDK daemon (9).
        let s = SignalState::of(100, 300, Some(9), &[7, 8]);
        assert_eq!(s.pids, vec![100, 1, 7, 8, 9]);
        // `agentsh wrap`: the command is the tree's root, not protected
        // from its own tree; a root whose parent is PID 1 adds nothing.
        let s = SignalState::of(100, 8, Some(1), &[7, 8]);
        assert_eq!(s.pids, vec![100, 1, 7]);
        // No parent read (the root is gone): what is known still holds.
        assert_eq!(SignalState::of(100, 300, None, &[]).pids, vec![100, 1]);
    }

    #[test]
    fn protected_processes_and_groups_are_refused() {
        assert!(rule_on(&facts(TREE, Target::Process(100))).is_err());
        assert!(rule_on(&facts(TREE, Target::Process(200))).is_err());
        assert!(rule_on(&facts(TREE, Target::Group(50))).is_err());
        assert!(rule_on(&facts(TREE, Target::Group(100))).is_err());
        assert!(rule_on(&facts(TREE, Target::Everyone))
            .unwrap_err()
            .to_string()
            .contains("kill(-1)"));
    }

    #[test]
    fn everything_else_goes_through() {
        assert!(rule_on(&facts(TREE, Target::Process(301))).is_ok());
        assert!(rule_on(&facts(TREE, Target::Group(300))).is_ok());
        assert!(rule_on(&facts(TREE, Target::Nobody)).is_ok());
        assert!(rule_on(&facts(TREE, Target::OwnGroup)).is_ok());
    }

    #[test]
    fn kill_0_is_refused_in_a_protected_group_or_session() {
        let in_daemon_group = Standing { pgrp: 50, ..TREE };
        assert!(rule_on(&facts(in_daemon_group, Target::OwnGroup)).is_err());
        let in_daemon_session = Standing {
            session: 50,
            ..TREE
        };
        assert!(rule_on(&facts(in_daemon_session, Target::OwnGroup))
            .unwrap_err()
            .to_string()
            .contains("could join"));
    }

    #[test]
    fn real_targets_resolve_through_proc() {
        let me = std::process::id();
        assert_eq!(
            process_target(i64::from(me)).ok(),
            Some(Target::Process(me))
        );
        assert_eq!(process_target(0x3fff_fff0).ok(), Some(Target::Nobody));
        let s = standing(me).unwrap();
        assert_eq!(s.tgid, me);
        // A thread's id resolves to its process.
        let (tx, rx) = std::sync::mpsc::channel();
        let h = std::thread::spawn(move || {
            // SAFETY: gettid has no preconditions.
            tx.send(unsafe { libc::gettid() } as u32).unwrap();
            std::thread::sleep(std::time::Duration::from_millis(200));
        });
        let tid = rx.recv().unwrap();
        assert_eq!(
            process_target(i64::from(tid)).ok(),
            Some(Target::Process(me))
        );
        h.join().unwrap();
    }

    #[test]
    fn pidfds_and_proc_dirs_name_their_process() {
        let me = std::process::id();
        // SAFETY: gettid has no preconditions.
        let tid = unsafe { libc::gettid() } as u32;
        // SAFETY: pidfd_open of our own pid; the fd is closed below.
        let pidfd = unsafe { libc::syscall(libc::SYS_pidfd_open, me, 0) };
        assert!(pidfd >= 0);
        assert_eq!(pidfd_target(tid, pidfd).ok(), Some(Target::Process(me)));
        let dir = std::fs::File::open(format!("/proc/{me}")).unwrap();
        let dirfd = std::os::fd::AsRawFd::as_raw_fd(&dir) as i64;
        assert_eq!(pidfd_target(tid, dirfd).ok(), Some(Target::Process(me)));
        let plain = std::fs::File::open("/dev/null").unwrap();
        let plainfd = std::os::fd::AsRawFd::as_raw_fd(&plain) as i64;
        assert_eq!(pidfd_target(tid, plainfd).ok(), Some(Target::Nobody));
        assert!(pidfd_target(tid, 99_999).is_err());
        // SAFETY: closing the pidfd we opened.
        unsafe { libc::close(pidfd as i32) };
    }
}
