//! The queue to the tracer thread: what other threads ask of it
//! ([`Request`]), the handle that sends and wakes it ([`Tracer`], made once
//! in [`TRACER`] by `tracer`), and the answers to held stops ([`answer`],
//! [`answer_value`], [`again`]).
//!
//! Failure modes: an answer when there is no tracer, or the tracer is gone,
//! is logged and dropped (the held stop stays held; its tree dies with the
//! server); an answer for a stop that no longer waits is ignored by the
//! tracer.

use crate::supervisor::seam::Verification;
use crate::supervisor::tree::Tree;
use crate::trees::Trees;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::mpsc::{self, Sender};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

/// How long an attach may wait for the tracer thread.
pub(super) const ATTACH_DEADLINE: Duration = Duration::from_secs(5);

/// What the tracer thread is asked to do.
pub(super) enum Request {
    /// Seize `pid` and supervise it as the root of a new tree.
    Attach {
        tree: Box<Tree>,
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
    /// A held syscall is to run again from its start (back through the
    /// filter, judged anew).
    Again { tid: u32, starttime: u64 },
}

/// The handle on the tracer thread: a queue, and what wakes it: its
/// doorbell while there is one (`doorbell`), else the eventfd.
pub struct Tracer {
    pub(super) tx: Mutex<Sender<Request>>,
    pub(super) wake: OwnedFd,
    pub(super) bell: super::doorbell::Ring,
}

pub(super) static TRACER: OnceLock<Result<Tracer, TraceError>> = OnceLock::new();

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
    pub(super) fn send(&self, r: Request) -> Result<(), TraceError> {
        self.tx
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .send(r)
            .map_err(|_| TraceError::Gone)?;
        if super::doorbell::ring(&self.bell) {
            return Ok(());
        }
        let one: u64 = 1;
        // SAFETY: writes 8 bytes from a live u64 to our eventfd.
        unsafe { libc::write(self.wake.as_raw_fd(), (&one as *const u64).cast(), 8) };
        Ok(())
    }
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

/// Held thread `tid`'s syscall runs again from its start (it comes back
/// through the filter). Ignored if `tid` no longer holds it.
pub fn again(tid: u32, starttime: u64) {
    to_tracer(tid, Request::Again { tid, starttime });
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
