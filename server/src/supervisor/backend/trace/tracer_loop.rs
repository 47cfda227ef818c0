//! The tracer thread: every ptrace request and every wait of the ptrace
//! backend is made here (ptrace belongs to a thread). One loop waits for
//! tracee events (SIGCHLD through a signalfd) and for requests (an eventfd),
//! attaches new trees and answers held stops. Each event is handled by
//! `events` (which task belongs to which tree: fork, vfork and clone events;
//! a task that stops before its parent's event is claimed through `/proc`;
//! signals and group-stops pass through), and each seccomp stop and
//! `PTRACE_EVENT_EXEC` by `stops` (dispatched to its family, the new image
//! checked against what was judged).
//!
//! Failure modes: a tracee whose registers cannot be read at a seccomp stop
//! is killed; a new image that is not what was judged, or that nothing
//! judged, is killed before its first instruction and audited; without a
//! signalfd, events are found by polling every [`POLL_MS`] ms; a request for
//! a stop that no longer waits is ignored (logged).

use super::freeze::Freezer;
use super::gate::{self, NameGate};
use super::pinning::Pins;
use super::queue::{Request, TraceError};
use super::regs;
use super::vforks::Vforks;
use crate::supervisor::context::SupervisorContext;
use crate::supervisor::seam::Verification;
use crate::supervisor::state::TreeState;
use crate::supervisor::tree::Tree;
use crate::trees::Trees;
use std::collections::HashMap;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::mpsc::Receiver;
use std::sync::Arc;

/// The options every tracee gets (children inherit them). `TRACESYSGOOD`:
/// the syscall-exit stop of a call run with others held (`freeze`) is
/// `SIGTRAP | 0x80`, never taken for a signal.
const OPTIONS: libc::c_int = libc::PTRACE_O_TRACESYSGOOD
    | libc::PTRACE_O_TRACESECCOMP
    | libc::PTRACE_O_TRACEEXEC
    | libc::PTRACE_O_TRACEFORK
    | libc::PTRACE_O_TRACEVFORK
    | libc::PTRACE_O_TRACECLONE
    | libc::PTRACE_O_EXITKILL;

/// The tracer's poll timeout: a lost wake-up costs at most this.
const POLL_MS: i32 = 250;

/// One ptrace tree.
pub(super) struct TraceTree {
    pub(super) tree: Tree,
    pub(super) st: TreeState,
    pub(super) trees: Arc<Trees>,
    /// Live tracees of this tree.
    pub(super) members: usize,
}

/// One traced task.
pub(super) struct Tracee {
    /// The tree's root pid (its key).
    pub(super) root: u32,
    /// Its process (thread-group id): the threads held still together.
    pub(super) tgid: u32,
    /// What its last allowed exec must run.
    pub(super) expect: Option<Verification>,
    /// Its parent's fork, vfork or clone event was seen (`false`: claimed
    /// at a stop that came first, `events::claim`).
    pub(super) adopted: bool,
}

/// The tracer thread's state.
pub(super) struct Loop {
    pub(super) ctx: Arc<SupervisorContext>,
    pub(super) rx: Receiver<Request>,
    pub(super) wake: OwnedFd,
    pub(super) trees: HashMap<u32, TraceTree>,
    pub(super) tracees: HashMap<u32, Tracee>,
    /// New tasks whose first stop came before their parent's fork event.
    pub(super) unclaimed: HashMap<u32, i32>,
    /// Threads held in their seccomp stop for an operator: their start time.
    pub(super) held: HashMap<u32, u64>,
    /// Threads stopped while another of their process makes a call whose
    /// strings were judged (`freeze`).
    pub(super) freezer: Freezer,
    /// Path calls running, and those waiting for names to hold still (`gate`).
    pub(super) gate: NameGate,
    /// The parked call being let in (it does not queue again behind others).
    pub(super) replaying: Option<u32>,
    /// `unpark` runs (a replayed stop does not start another).
    pub(super) unparking: bool,
    /// A stop was seen that may let a parked change in: the loop unparks.
    pub(super) unpark_later: bool,
    /// Which processes share memory through vfork: held still together.
    pub(super) vforks: Vforks,
    /// Tasks claimed before their parent's event that were gone before it
    /// came: that event adds nothing (an entry for a task gone would stay,
    /// and put the next task of that number in the wrong tree).
    pub(super) gone_unadopted: std::collections::HashSet<u32>,
    /// The pinned region of each process, and each thread's slot in it.
    pub(super) pins: std::cell::RefCell<Pins>,
    /// Each process's kept `/proc/<pid>/mem` fd (`memfds`).
    pub(super) mems: std::cell::RefCell<super::memfds::MemFds>,
    /// The tracer's time over each seccomp stop (logged at debug).
    pub(super) clock: super::stopclock::StopClock,
}

impl Loop {
    pub(super) fn new(ctx: Arc<SupervisorContext>, rx: Receiver<Request>, wake: OwnedFd) -> Loop {
        Loop {
            ctx,
            rx,
            wake,
            trees: HashMap::new(),
            tracees: HashMap::new(),
            unclaimed: HashMap::new(),
            held: HashMap::new(),
            freezer: Freezer::default(),
            gate: NameGate::default(),
            replaying: None,
            unparking: false,
            unpark_later: false,
            vforks: Vforks::default(),
            gone_unadopted: std::collections::HashSet::new(),
            pins: std::cell::RefCell::new(Pins::default()),
            mems: std::cell::RefCell::default(),
            clock: super::stopclock::StopClock::default(),
        }
    }

    /// Waits for tracee events and requests, forever: in one `waitpid`
    /// where the doorbell rings for requests (`doorbell`), else polling a
    /// signalfd for SIGCHLD and the eventfd.
    pub(super) fn run(mut self, ring: super::doorbell::Ring) {
        match super::doorbell::Doorbell::start(ring) {
            Ok(bell) => self.run_rung(&bell),
            Err(e) => tracing::warn!(
                "tracer: no doorbell ({e}); it polls (each stop costs three more syscalls)"
            ),
        }
        self.run_polling();
    }

    /// The loop while the doorbell rings: one blocking `waitpid` per event;
    /// returns when the doorbell is gone.
    fn run_rung(&mut self, bell: &super::doorbell::Doorbell) {
        loop {
            self.take_requests();
            self.housekeep();
            let mut status = 0;
            // SAFETY: a valid pointer to an int the kernel writes.
            let tid = unsafe { libc::waitpid(-1, &mut status, libc::__WALL | libc::__WNOTHREAD) };
            if tid == bell.pid as i32 {
                if !bell.event(status) {
                    return;
                }
            } else if tid > 0 {
                self.event(tid as u32, status);
            } else if io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
                // ECHILD: the doorbell is gone and was reaped unseen.
                bell.gone();
                return;
            }
        }
    }

    /// The loop without a doorbell: `poll` on the eventfd and a SIGCHLD
    /// signalfd, every event ready taken after each wake-up.
    fn run_polling(mut self) {
        let sigfd = match chld_signalfd() {
            Ok(fd) => Some(fd),
            Err(e) => {
                // Only a cost: events are then found by the poll timeout.
                tracing::warn!("tracer: no SIGCHLD signalfd ({e}); polling every {POLL_MS} ms");
                None
            }
        };
        loop {
            self.take_requests();
            self.drain_events();
            self.housekeep();
            let mut fds = [
                libc::pollfd {
                    fd: self.wake.as_raw_fd(),
                    events: libc::POLLIN,
                    revents: 0,
                },
                libc::pollfd {
                    fd: sigfd.as_ref().map_or(-1, AsRawFd::as_raw_fd),
                    events: libc::POLLIN,
                    revents: 0,
                },
            ];
            // SAFETY: two valid pollfds (a negative fd is ignored by poll).
            unsafe { libc::poll(fds.as_mut_ptr(), 2, POLL_MS) };
            // Each read only where poll said so, once: an eventfd's one
            // read takes its whole count, a signalfd's SIGCHLD is pending
            // once (events themselves are taken by `waitpid` until none
            // is left). Every syscall counts under gVisor.
            if fds[0].revents & libc::POLLIN != 0 {
                read_once(self.wake.as_raw_fd(), 8);
            }
            if let Some(fd) = &sigfd {
                if fds[1].revents & libc::POLLIN != 0 {
                    read_once(
                        fd.as_raw_fd(),
                        std::mem::size_of::<libc::signalfd_siginfo>(),
                    );
                }
            }
        }
    }

    /// Every request queued.
    fn take_requests(&mut self) {
        while let Ok(r) = self.rx.try_recv() {
            self.request(r);
        }
    }

    /// Between events: parked calls let in where a walker went to sleep
    /// or a stop may let a change in.
    fn housekeep(&mut self) {
        if self.gate.drop_blocked(gate::sleeps) || std::mem::take(&mut self.unpark_later) {
            self.unpark();
        }
    }

    fn request(&mut self, r: Request) {
        match r {
            Request::Attach { tree, trees, reply } => {
                let _ = reply.send(self.attach(*tree, trees));
            }
            Request::Answer {
                tid,
                starttime,
                what,
            } => self.answer(tid, starttime, what),
            Request::Value {
                tid,
                starttime,
                val,
            } => self.answer_value(tid, starttime, val),
            Request::Again { tid, starttime } => self.again(tid, starttime),
        }
    }

    /// A held call runs again from its start (it is judged anew).
    fn again(&mut self, tid: u32, starttime: u64) {
        if self.held.get(&tid) != Some(&starttime) {
            tracing::debug!(tid, "restart for a syscall that no longer waits; ignored");
            return;
        }
        self.held.remove(&tid);
        if let Err(e) = regs::restart(tid).and_then(|()| regs::cont(tid, 0)) {
            tracing::debug!(tid, "held syscall not restarted (gone?): {e}");
        }
    }

    fn answer_value(&mut self, tid: u32, starttime: u64, val: i64) {
        if self.held.get(&tid) != Some(&starttime) {
            tracing::debug!(tid, "answer for a syscall that no longer waits; ignored");
            return;
        }
        self.held.remove(&tid);
        if let Err(e) = regs::skip_with(tid, val).and_then(|()| regs::cont(tid, 0)) {
            tracing::debug!(tid, "held syscall not resumed (gone?): {e}");
        }
    }

    fn attach(&mut self, tree: Tree, trees: Arc<Trees>) -> Result<(), TraceError> {
        let pid = tree.root_pid;
        // With the root's owner's ids where this server has no
        // CAP_SYS_PTRACE (`tracee::access`): attaching to another uid's
        // process needs matching real ids; once attached, ptrace requests
        // need none (and the tasks the root starts are attached with it).
        crate::tracee::access::with_owner(pid, || regs::seize(pid, OPTIONS)).map_err(|e| {
            TraceError::Seize {
                pid,
                error: e.to_string(),
            }
        })?;
        tracing::info!(session = %tree.session_id, root_pid = pid, "supervising tree (ptrace)");
        trees.started(pid, &tree.session_id, tree.started_with.clone());
        self.tracees.insert(
            pid,
            Tracee {
                root: pid,
                tgid: pid,
                expect: None,
                adopted: true,
            },
        );
        self.trees.insert(
            pid,
            TraceTree {
                st: TreeState::new(pid),
                tree,
                trees,
                members: 1,
            },
        );
        Ok(())
    }

    fn answer(&mut self, tid: u32, starttime: u64, what: Option<Box<Verification>>) {
        if self.held.get(&tid) != Some(&starttime) {
            tracing::debug!(tid, "answer for an exec that no longer waits; ignored");
            return;
        }
        self.held.remove(&tid);
        let done = match what {
            Some(v) => {
                if let Some(t) = self.tracees.get_mut(&tid) {
                    t.expect = Some(*v);
                }
                regs::cont(tid, 0)
            }
            None => regs::skip_syscall(tid, libc::EACCES).and_then(|()| regs::cont(tid, 0)),
        };
        if let Err(e) = done {
            tracing::debug!(tid, "held exec not resumed (gone?): {e}");
        }
    }

    /// Every event that is ready, without blocking.
    fn drain_events(&mut self) {
        loop {
            let mut status = 0;
            // SAFETY: a valid pointer to an int the kernel writes.
            let tid = unsafe {
                libc::waitpid(
                    -1,
                    &mut status,
                    libc::__WALL | libc::__WNOTHREAD | libc::WNOHANG,
                )
            };
            if tid > 0 {
                self.event(tid as u32, status);
                continue;
            }
            if tid < 0 && io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) {
                continue;
            }
            return; // 0: nothing ready; ECHILD: no tracee at all
        }
    }
}

/// A signalfd for SIGCHLD, blocked in this thread (the server blocks every
/// signal in every thread; this makes the tracer independent of that).
fn chld_signalfd() -> io::Result<OwnedFd> {
    // SAFETY: sigset_t is plain data, initialised by sigemptyset.
    let mut set: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: valid pointers to our own sigset and no old-set out-parameter.
    let fd = unsafe {
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGCHLD);
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        libc::signalfd(-1, &set, libc::SFD_CLOEXEC | libc::SFD_NONBLOCK)
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a fresh fd nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// One read of a non-blocking fd (what poll said is there).
fn read_once(fd: i32, size: usize) {
    let mut buf = [0u8; 256];
    let size = size.min(buf.len());
    // SAFETY: reads at most `size` bytes into our buffer.
    unsafe { libc::read(fd, buf.as_mut_ptr().cast(), size) };
}
