//! A tracee's seccomp stop, as the families answer it: now, on the tracer
//! thread ([`TraceStop`]), or later from another thread through the
//! tracer's queue ([`TraceHeld`]).
//!
//! Failure modes: an answer the tracee is no longer there for is dropped
//! (the tracer ignores it).

use super::freeze::Freezer;
use super::pinning::{Pins, Ready};
use super::queue::{again, answer, answer_value, still_held};
use super::regs;
use crate::supervisor::seam::{AfterCall, Deferred, Holder, Pinning, Stop, Verification, Waiting};
use std::cell::{Cell, RefCell};
use std::io;
use std::os::fd::OwnedFd;
use std::sync::Arc;

/// A seccomp stop, as the families answer it.
pub struct TraceStop<'a> {
    pub(super) tid: u32,
    pub(super) answered: Cell<bool>,
    pub(super) expect: RefCell<Option<Verification>>,
    /// The thread's start time, read when the stop is deferred (0: not).
    pub(super) starttime: Cell<u64>,
    /// Where the other threads of the caller are held (`hold_still`).
    pub(super) freezer: &'a Freezer,
    /// Whether a thread is stopped already (held for an operator, not yet
    /// claimed): not asked to stop again.
    pub(super) stopped: &'a dyn Fn(u32) -> bool,
    /// The other threads of the caller's process, as the tracer knows them.
    pub(super) siblings: &'a dyn Fn() -> Vec<u32>,
    /// The call changes names: the tracer must see it return (`gate`).
    pub(super) to_exit: bool,
    /// It was let through (`proceed`).
    pub(super) proceeded: Cell<bool>,
    /// The caller's process.
    pub(super) tgid: u32,
    /// Its registers at the stop.
    pub(super) regs: regs::Regs,
    /// The pinned regions (`pinning`).
    pub(super) pins: &'a RefCell<Pins>,
    /// Where this call's copies go, once `pinning` said so.
    pub(super) pin_at: Cell<Option<u64>>,
    /// The kept `/proc/<pid>/mem` fds (`read_cstring`).
    pub(super) mems: &'a RefCell<super::memfds::MemFds>,
}

impl Stop for TraceStop<'_> {
    fn still_waiting(&self) -> bool {
        // Only a stopped tracee has an event message.
        regs::event_msg(self.tid).is_ok()
    }

    fn proceed(&self) -> io::Result<()> {
        self.answered.set(true);
        self.proceeded.set(true);
        if self.freezer.holds(self.tid) {
            // Into the call with the others held; the tracer lets them go
            // at the call's syscall-exit stop.
            self.freezer.run(self.tid);
            return regs::syscall(self.tid);
        }
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

    fn read_cstring(&self, addr: u64, max: usize) -> Option<io::Result<(Vec<u8>, bool)>> {
        self.mems.borrow_mut().cstring(self.tgid, addr, max)
    }

    fn pinning(&self) -> Pinning {
        let ready = self
            .pins
            .borrow_mut()
            .ready(self.tid, self.tgid, &self.regs);
        match ready {
            Ready::At(at) => {
                self.pin_at.set(Some(at));
                Pinning::Ready
            }
            Ready::No => Pinning::Unavailable,
            Ready::Mapping => {
                // Resumed into the region's mmap: it comes back.
                self.answered.set(true);
                Pinning::Again
            }
        }
    }

    fn pin(&self, copies: &[(usize, &[u8])]) -> io::Result<()> {
        self.pin_at
            .get()
            .ok_or_else(|| io::Error::from_raw_os_error(libc::ENOSYS))?;
        let mut pins = self.pins.borrow_mut();
        let given = pins.write(self.tid, copies, self.regs)?;
        pins.pointed(self.tid, given);
        Ok(())
    }

    fn hold_still(&self) -> io::Result<()> {
        self.freezer
            .freeze(self.tid, (self.siblings)(), self.stopped, self.to_exit)
            .map_err(io::Error::other)
    }

    fn proceed_then(&self, after: AfterCall) -> io::Result<()> {
        if !self.freezer.holds(self.tid) {
            // A lone thread held with no exit stop: the tracer must see
            // this call return.
            self.freezer
                .freeze(self.tid, Vec::new(), self.stopped, true)
                .map_err(io::Error::other)?;
        }
        self.freezer.then(self.tid, after);
        self.proceed()
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

impl Waiting for TraceHeld {
    fn notif_id(&self) -> u64 {
        0
    }

    fn live(&self, ids: &[u64]) -> Option<u64> {
        still_held(self.tid, self.starttime).then(|| ids.last().copied().unwrap_or(0))
    }
}

impl Deferred for TraceHeld {
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

    fn restart(&self) -> io::Result<()> {
        again(self.tid, self.starttime);
        Ok(())
    }
}
