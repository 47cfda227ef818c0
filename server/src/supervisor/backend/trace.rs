//! The ptrace backend: for hosts without seccomp user notification (gVisor,
//! which Modal runs; container platforms whose seccomp profile refuses
//! `NEW_LISTENER`).
//!
//! The tree's filter answers `execve`/`execveat` (and, without Landlock's
//! signal scope, the signal guard's calls) with `SECCOMP_RET_TRACE`. Before
//! unixwrap runs anything, the server seizes it ([`attach`]: `PTRACE_SEIZE`
//! with `TRACESECCOMP | TRACEEXEC | TRACEFORK | TRACEVFORK | TRACECLONE |
//! EXITKILL`), so the shell it becomes, and every task that shell starts at
//! any depth, is a tracee of one thread of the server, the tracer. ptrace
//! belongs to a thread: every request and every wait here is made by that
//! thread, which serves every ptrace tree ([`Tracer`]). Its loop is
//! `tracer_loop`; this file holds what other threads call ([`attach`],
//! [`answer`], [`still_held`]) and the [`TraceStop`] `exec` answers
//! through; `regs` reads and writes a tracee's registers.
//!
//! At each seccomp stop the tracer reads the registers and hands the exec to
//! the backend-neutral path (`exec::handle`) with a [`TraceStop`]: deny is
//! the syscall skipped with `-EACCES` (exactly what the caller sees under
//! notify), allow is `PTRACE_CONT`. Every allowed exec is checked at
//! `PTRACE_EVENT_EXEC`, before the new image runs one instruction: its file
//! (device, inode) and argv must be what was judged, or it is killed there
//! and `exec_mismatch` is audited. So no freeze is needed: whatever another
//! thread rewrites after the read, or whatever file a swapped symlink names,
//! only gets the exec killed. An exec held for an operator stays in its
//! seccomp stop (the rest of the tree runs on); the approval waiter's answer
//! reaches the tracer through [`answer`].
//!
//! Signals and job control pass through: a signal-delivery stop is resumed
//! with its signal, a group-stop with `PTRACE_LISTEN` (the task stays stopped
//! until SIGCONT, as without agentsh), every other stop with `PTRACE_CONT`.
//!
//! If the server dies, `PTRACE_O_EXITKILL` kills every tracee: the tree dies.
//! This is the fail-closed choice: a tracee detached in its seccomp stop
//! would run the exec it was stopped in, judged or not (the kernel rechecks
//! the filter after a trace stop, and `SECCOMP_RET_TRACE` then allows).
//!
//! Failure modes: a tracee whose registers cannot be read is killed (it is
//! stopped in a syscall nobody can judge); an exec whose facts cannot be read
//! is denied by `exec`; a `PTRACE_EVENT_EXEC` with nothing judged to compare
//! against is killed and audited (`unverified_exec`); a seize that fails
//! refuses the handoff (unixwrap then refuses to run).

mod regs;
mod tracer_loop;

use crate::supervisor::context::SupervisorContext;
use crate::supervisor::seam::{Deferred, Holder, Stop, Verification};
use crate::supervisor::tree::Tree;
use crate::trees::Trees;
use std::cell::{Cell, RefCell};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::mpsc::{self, Sender};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

/// How long an attach may wait for the tracer thread.
const ATTACH_DEADLINE: Duration = Duration::from_secs(5);

/// What the tracer thread is asked to do.
enum Request {
    /// Seize `pid` and supervise it as the root of a new tree.
    Attach {
        tree: Tree,
        trees: Arc<Trees>,
        reply: mpsc::SyncSender<Result<(), String>>,
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

static TRACER: OnceLock<Result<Tracer, String>> = OnceLock::new();

impl Tracer {
    fn send(&self, r: Request) -> Result<(), String> {
        self.tx
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .send(r)
            .map_err(|_| "the tracer thread is gone".to_string())?;
        let one: u64 = 1;
        // SAFETY: writes 8 bytes from a live u64 to our eventfd.
        unsafe { libc::write(self.wake.as_raw_fd(), (&one as *const u64).cast(), 8) };
        Ok(())
    }
}

/// The tracer thread (started with the first ptrace tree).
fn tracer(ctx: &Arc<SupervisorContext>) -> Result<&'static Tracer, String> {
    TRACER
        .get_or_init(|| {
            // SAFETY: eventfd takes two integers; the fd is ours.
            let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
            if fd < 0 {
                return Err(format!("eventfd: {}", io::Error::last_os_error()));
            }
            // SAFETY: a fresh fd nothing else owns.
            let wake = unsafe { OwnedFd::from_raw_fd(fd) };
            let wake_copy = wake.try_clone().map_err(|e| format!("eventfd dup: {e}"))?;
            let (tx, rx) = mpsc::channel();
            let ctx = ctx.clone();
            std::thread::Builder::new()
                .name("agentsh-tracer".into())
                .spawn(move || tracer_loop::Loop::new(ctx, rx, wake_copy).run())
                .map_err(|e| format!("cannot start the tracer thread: {e}"))?;
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
pub fn attach(ctx: &Arc<SupervisorContext>, trees: Arc<Trees>, tree: Tree) -> Result<(), String> {
    let t = tracer(ctx)?;
    let (reply, answer) = mpsc::sync_channel(1);
    t.send(Request::Attach { tree, trees, reply })?;
    answer
        .recv_timeout(ATTACH_DEADLINE)
        .map_err(|_| format!("the tracer did not answer within {ATTACH_DEADLINE:?}"))?
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

/// A seccomp stop, as the families answer it.
pub struct TraceStop {
    tid: u32,
    answered: Cell<bool>,
    expect: RefCell<Option<Verification>>,
    /// The thread's start time, read when the stop is deferred (0: not).
    starttime: Cell<u64>,
}

impl Stop for TraceStop {
    fn still_waiting(&self) -> bool {
        // Only a stopped tracee has an event message.
        regs::event_msg(self.tid).is_ok()
    }

    fn proceed(&self) -> io::Result<()> {
        self.answered.set(true);
        regs::cont(self.tid, 0)
    }

    fn refuse(&self, errno: i32) -> io::Result<()> {
        self.answered.set(true);
        regs::skip_syscall(self.tid, errno)?;
        regs::cont(self.tid, 0)
    }

    fn answer(&self, val: i64) -> io::Result<()> {
        self.answered.set(true);
        regs::skip_with(self.tid, val)?;
        regs::cont(self.tid, 0)
    }

    fn verifies_every_exec(&self) -> bool {
        true
    }

    fn expect(&self, what: Verification) {
        *self.expect.borrow_mut() = Some(what);
    }

    fn defer(&self) -> Holder {
        let starttime = crate::tracee::proc_stat(self.tid).map_or(0, |s| s.starttime);
        self.starttime.set(starttime);
        Arc::new(TraceHeld {
            tid: self.tid,
            starttime,
        })
    }
}

/// Thread `tid` (started at `starttime`) waiting in its seccomp stop,
/// answered by the tracer thread through its queue.
struct TraceHeld {
    tid: u32,
    starttime: u64,
}

impl Deferred for TraceHeld {
    fn notif_id(&self) -> u64 {
        0
    }

    fn live(&self, ids: &[u64]) -> Option<u64> {
        still_held(self.tid, self.starttime).then(|| ids.last().copied().unwrap_or(0))
    }

    fn answer_value(&self, val: i64) {
        answer_value(self.tid, self.starttime, val);
    }

    fn refuse(&self, _id: u64) {
        answer(self.tid, self.starttime, None);
    }

    /// The tracer checks the new image at `PTRACE_EVENT_EXEC` and audits a
    /// mismatch itself. A proceed without an expectation is refused: the
    /// tracer lets no exec run unchecked.
    fn proceed(&self, _id: u64, expect: Option<Verification>) -> io::Result<()> {
        answer(self.tid, self.starttime, expect);
        Ok(())
    }

    fn verifies_every_exec(&self) -> bool {
        true
    }

    fn install_fd(&self, _sock: &OwnedFd, _at: i32, _cloexec: bool) -> io::Result<()> {
        Err(io::Error::from_raw_os_error(libc::ENOSYS))
    }

    fn add_fd(&self, _file: &OwnedFd, _cloexec: bool) -> io::Result<i32> {
        Err(io::Error::from_raw_os_error(libc::ENOSYS))
    }
}
