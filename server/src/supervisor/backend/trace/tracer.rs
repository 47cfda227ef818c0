//! The tracer thread's start and the backend as the rest of the server
//! sees it ([`Trace`]): the thread is started with the first ptrace tree
//! and asked (through `queue`) to seize each tree's root ([`attach`]).
//!
//! Failure modes: a tracer that cannot start, or does not answer an attach
//! in time, refuses the handoff (unixwrap then refuses to run).

use super::super::interface::{Backend, Facts, Supervising, TakeOverError};
use super::queue::{Request, TraceError, Tracer, ATTACH_DEADLINE, TRACER};
use super::tracer_loop;
use crate::supervisor::context::SupervisorContext;
use crate::supervisor::tree::Tree;
use crate::trees::Trees;
use agentsh_proto::ExecBackend;
use std::io;
use std::os::fd::{FromRawFd, OwnedFd};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};

/// The tracer thread (started with the first ptrace tree).
fn tracer(ctx: &Arc<SupervisorContext>) -> Result<&'static Tracer, TraceError> {
    TRACER
        .get_or_init(|| {
            // SAFETY: eventfd takes two integers; the fd is ours.
            let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
            if fd < 0 {
                return Err(TraceError::Eventfd(io::Error::last_os_error().to_string()));
            }
            // SAFETY: a fresh fd nothing else owns.
            let wake = unsafe { OwnedFd::from_raw_fd(fd) };
            let wake_copy = wake
                .try_clone()
                .map_err(|e| TraceError::Eventfd(format!("dup: {e}")))?;
            let (tx, rx) = mpsc::channel();
            let ctx = ctx.clone();
            let bell = super::doorbell::Ring::default();
            let ring = bell.clone();
            std::thread::Builder::new()
                .name("agentsh-tracer".into())
                .spawn(move || tracer_loop::Loop::new(ctx, rx, wake_copy).run(ring))
                .map_err(|e| TraceError::Thread(e.to_string()))?;
            Ok(Tracer {
                tx: Mutex::new(tx),
                wake,
                bell,
            })
        })
        .as_ref()
        .map_err(Clone::clone)
}

/// Seizes `tree.root_pid` (unixwrap, waiting for its ACK) and supervises
/// it and everything it starts. Returns once the seize is done, so the ACK
/// that follows lets nothing run untraced. Blocking.
///
/// # Errors
/// The tracer cannot start, or the seize failed (EPERM: traced already, or
/// no CAP_SYS_PTRACE).
pub fn attach(
    ctx: &Arc<SupervisorContext>,
    trees: Arc<Trees>,
    tree: Tree,
) -> Result<(), TraceError> {
    let t = tracer(ctx)?;
    let (reply, answer) = mpsc::sync_channel(1);
    t.send(Request::Attach {
        tree: Box::new(tree),
        trees,
        reply,
    })?;
    answer
        .recv_timeout(ATTACH_DEADLINE)
        .map_err(|_| TraceError::NoAnswer)?
}

/// ptrace with `SECCOMP_RET_TRACE`: the server seizes each tree's root and
/// traces every task of every tree on one thread (gVisor, restrictive
/// seccomp profiles).
pub struct Trace;

/// What ptrace with `SECCOMP_RET_TRACE` is and can do: it cannot put a
/// file into a tracee; seizing needs to know whom (only a caller the kernel
/// named); the seize is made by the tracer thread, which the take-over
/// waits for.
static TRACE: Facts = Facts {
    kind: ExecBackend::Ptrace,
    describe: "ptrace (SECCOMP_RET_TRACE: the server traces every task of the tree and checks \
               every exec at PTRACE_EVENT_EXEC)",
    needs: "SECCOMP_RET_TRACE + ptrace",
    unavailable: "SECCOMP_RET_TRACE + ptrace does not work here",
    can_install_fds: false,
    judges_in_place: true,
    judges_files_without_landlock: true,
    needs_caller_pid: true,
    takes_over_blocking: true,
    seizes_root: true,
};

impl Backend for Trace {
    fn facts(&self) -> &'static Facts {
        &TRACE
    }

    /// The handoff carries nothing; the root is seized now, so the answer
    /// that follows lets nothing run untraced.
    fn take_over(
        &self,
        ctx: &Arc<SupervisorContext>,
        trees: &Arc<Trees>,
        tree: Tree,
        fds: Vec<OwnedFd>,
    ) -> Result<Box<dyn Supervising>, TakeOverError> {
        if !fds.is_empty() {
            return Err(TakeOverError::UnexpectedFd);
        }
        attach(ctx, trees.clone(), tree)?;
        Ok(Box::new(Seized))
    }
}

/// A tree whose root the tracer seized: the tracer thread supervises it.
struct Seized;

impl Supervising for Seized {
    fn note(&self) -> &'static str {
        "wrapper seized (ptrace backend)"
    }

    fn start(self: Box<Self>) {}
}
