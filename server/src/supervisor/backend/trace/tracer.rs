//! The handle other threads have on the tracer thread: it is started with
//! the first ptrace tree, and asked through a queue and an eventfd to seize
//! a tree's root ([`attach`]) or to answer a held stop ([`answer`],
//! [`answer_value`]); [`Trace`] is the backend as the rest of the server
//! sees it.
//!
//! Failure modes: a tracer that cannot start, or does not answer an attach
//! within [`ATTACH_DEADLINE`], refuses the handoff (unixwrap then refuses to
//! run); an answer for a stop that no longer waits is ignored.

use super::super::registry::{Backend, Supervising, TakeOverError};
use super::tracer_loop;
use crate::supervisor::context::SupervisorContext;
use crate::supervisor::seam::Verification;
use crate::supervisor::tree::Tree;
use crate::trees::Trees;
use agentsh_proto::ExecBackend;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::mpsc::{self, Sender};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

/// How long an attach may wait for the tracer thread.
const ATTACH_DEADLINE: Duration = Duration::from_secs(5);

/// What the tracer thread is asked to do.
pub(super) enum Request {
    /// Seize `pid` and supervise it as the root of a new tree.
    Attach {
        tree: Tree,
        trees: Arc<Trees>,
        reply: mpsc::SyncSender<Result<(), TraceError>>,
    },
    /// An operator (or the timeout) answered a held exec: allow and check
    /// that it runs `what`, or (`None`) deny.
    Answer {
        tid: u32,
        starttime: u64,
        what: Option<Box<Verification>>,
    },
    /// A held syscall performed on the tree's behalf is done: skip it with
    /// this return value (`< 0`: `-errno`).
    Value { tid: u32, starttime: u64, val: i64 },
}

/// The handle on the tracer thread: a queue and the eventfd that wakes it.
pub struct Tracer {
    tx: Mutex<Sender<Request>>,
    wake: OwnedFd,
}

static TRACER: OnceLock<Result<Tracer, TraceError>> = OnceLock::new();

/// Why the tracer did not take a tree (or answer a held stop).
#[derive(Debug, Clone, thiserror::Error)]
pub enum TraceError {
    #[error("eventfd: {0}")]
    Eventfd(String),
    #[error("cannot start the tracer thread: {0}")]
    Thread(String),
    #[error("the tracer thread is gone")]
    Gone,
    #[error("the tracer did not answer within {ATTACH_DEADLINE:?}")]
    NoAnswer,
    #[error(
        "PTRACE_SEIZE of pid {pid}: {error} (traced by another process, or no CAP_SYS_PTRACE)"
    )]
    Seize { pid: u32, error: String },
    #[error("attach failed: {0}")]
    Join(String),
}

impl Tracer {
    fn send(&self, r: Request) -> Result<(), TraceError> {
        self.tx
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .send(r)
            .map_err(|_| TraceError::Gone)?;
        let one: u64 = 1;
        // SAFETY: writes 8 bytes from a live u64 to our eventfd.
        unsafe { libc::write(self.wake.as_raw_fd(), (&one as *const u64).cast(), 8) };
        Ok(())
    }
}

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
            std::thread::Builder::new()
                .name("agentsh-tracer".into())
                .spawn(move || tracer_loop::Loop::new(ctx, rx, wake_copy).run())
                .map_err(|e| TraceError::Thread(e.to_string()))?;
            Ok(Tracer {
                tx: Mutex::new(tx),
                wake,
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
    t.send(Request::Attach { tree, trees, reply })?;
    answer
        .recv_timeout(ATTACH_DEADLINE)
        .map_err(|_| TraceError::NoAnswer)?
}

/// ptrace with `SECCOMP_RET_TRACE`: the server seizes each tree's root and
/// traces every task of every tree on one thread (gVisor, restrictive
/// seccomp profiles).
pub struct Trace;

impl Backend for Trace {
    fn kind(&self) -> ExecBackend {
        ExecBackend::Ptrace
    }

    fn describe(&self) -> &'static str {
        "ptrace (SECCOMP_RET_TRACE: the server traces every task of the tree and checks every \
         exec at PTRACE_EVENT_EXEC)"
    }

    fn needs(&self) -> &'static str {
        "SECCOMP_RET_TRACE + ptrace"
    }

    fn unavailable(&self, why: &str) -> String {
        format!("SECCOMP_RET_TRACE + ptrace does not work here ({why})")
    }

    fn can_install_fds(&self) -> bool {
        false
    }

    /// Seizing needs to know whom: only a caller the kernel named.
    fn needs_caller_pid(&self) -> bool {
        true
    }

    /// The seize is made by the tracer thread; this waits for it.
    fn takes_over_blocking(&self) -> bool {
        true
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

/// The answer to a held exec (approval waiters): allow and verify `what`,
/// or deny (`None`). Ignored if `tid` is no longer that held exec.
pub fn answer(tid: u32, starttime: u64, what: Option<Verification>) {
    to_tracer(
        tid,
        Request::Answer {
            tid,
            starttime,
            what: what.map(Box::new),
        },
    );
}

/// The answer to a held syscall performed on the tree's behalf (egress):
/// skip it with `val` (`< 0`: `-errno`). Ignored if `tid` no longer holds it.
pub fn answer_value(tid: u32, starttime: u64, val: i64) {
    to_tracer(
        tid,
        Request::Value {
            tid,
            starttime,
            val,
        },
    );
}

/// Queues the answer to held thread `tid`'s syscall for the tracer.
fn to_tracer(tid: u32, req: Request) {
    let Some(Ok(t)) = TRACER.get() else {
        tracing::error!(tid, "no tracer to answer a held syscall");
        return;
    };
    if let Err(e) = t.send(req) {
        tracing::error!(tid, "held syscall not answered: {e}");
    }
}

/// Whether thread `tid`, started at `starttime`, is alive (a held exec can
/// leave its stop only by dying).
pub fn still_held(tid: u32, starttime: u64) -> bool {
    crate::tracee::proc_stat(tid)
        .is_ok_and(|s| !matches!(s.state, b'Z' | b'X' | b'x') && s.starttime == starttime)
}
