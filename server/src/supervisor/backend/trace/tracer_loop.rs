//! The tracer thread: every ptrace request and every wait of the ptrace
//! backend is made here (ptrace belongs to a thread). One loop waits for
//! tracee events (SIGCHLD through a signalfd) and for requests (an eventfd),
//! keeps which task belongs to which tree (fork, vfork and clone events; a
//! task that stops before its parent's event is claimed through `/proc`),
//! and answers each stop: a seccomp stop goes to `exec` or `signals`, a
//! `PTRACE_EVENT_EXEC` is checked against what was judged, signals and
//! group-stops pass through.
//!
//! Failure modes: a tracee whose registers cannot be read at a seccomp stop
//! is killed; a new image that is not what was judged, or that nothing
//! judged, is killed before its first instruction and audited; without a
//! signalfd, events are found by polling every [`POLL_MS`] ms.

use super::freeze::Freezer;
use super::gate::{self, NameGate};
use super::queue::{Request, TraceError};
use super::regs;
use super::stop::TraceStop;
use super::vforks::Vforks;
use crate::supervisor::context::SupervisorContext;
use crate::supervisor::dispatch::{dispatch, exec_completed};
use crate::supervisor::seam::{Caught, Verification};
use crate::supervisor::state::TreeState;
use crate::supervisor::tree::Tree;
use crate::trees::Trees;
use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::mpsc::Receiver;
use std::sync::Arc;

const EVENT_FORK: i32 = 1;
const EVENT_VFORK: i32 = 2;
const EVENT_CLONE: i32 = 3;
const EVENT_EXEC: i32 = 4;
const EVENT_SECCOMP: i32 = 7;
const EVENT_STOP: i32 = 128;

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
struct TraceTree {
    tree: Tree,
    st: TreeState,
    trees: Arc<Trees>,
    /// Live tracees of this tree.
    members: usize,
}

/// One traced task.
struct Tracee {
    /// The tree's root pid (its key).
    root: u32,
    /// Its process (thread-group id): the threads held still together.
    tgid: u32,
    /// What its last allowed exec must run.
    expect: Option<Verification>,
}

/// The tracer thread's state.
pub(super) struct Loop {
    ctx: Arc<SupervisorContext>,
    rx: Receiver<Request>,
    wake: OwnedFd,
    trees: HashMap<u32, TraceTree>,
    tracees: HashMap<u32, Tracee>,
    /// New tasks whose first stop came before their parent's fork event.
    unclaimed: HashMap<u32, i32>,
    /// Threads held in their seccomp stop for an operator: their start time.
    held: HashMap<u32, u64>,
    /// Threads stopped while another of their process makes a call whose
    /// strings were judged (`freeze`).
    freezer: Freezer,
    /// Path calls running, and those waiting for names to hold still (`gate`).
    gate: NameGate,
    /// The parked call being let in (it does not queue again behind others).
    replaying: Option<u32>,
    /// `unpark` runs (a replayed stop does not start another).
    unparking: bool,
    /// A stop was seen that may let a parked change in: the loop unparks.
    unpark_later: bool,
    /// Which processes share memory through vfork: held still together.
    vforks: Vforks,
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
        }
    }

    /// Waits for tracee events (SIGCHLD through a signalfd) and requests
    /// (the eventfd), forever.
    pub(super) fn run(mut self) {
        let sigfd = match chld_signalfd() {
            Ok(fd) => Some(fd),
            Err(e) => {
                // Only a cost: events are then found by the poll timeout.
                tracing::warn!("tracer: no SIGCHLD signalfd ({e}); polling every {POLL_MS} ms");
                None
            }
        };
        loop {
            while let Ok(r) = self.rx.try_recv() {
                self.request(r);
            }
            self.drain_events();
            if self.gate.drop_blocked(gate::sleeps) || std::mem::take(&mut self.unpark_later) {
                self.unpark();
            }
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
            drain_fd(self.wake.as_raw_fd(), 8);
            if let Some(fd) = &sigfd {
                drain_fd(
                    fd.as_raw_fd(),
                    std::mem::size_of::<libc::signalfd_siginfo>(),
                );
            }
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

    fn event(&mut self, tid: u32, status: i32) {
        tracing::trace!(
            tid,
            stopped = libc::WIFSTOPPED(status),
            signal = libc::WSTOPSIG(status),
            event = (status >> 16) & 0xffff,
            "tracer event"
        );
        if !libc::WIFSTOPPED(status) {
            self.gone(tid);
            return;
        }
        // Seen stopped: a walk it was let into without an exit stop is over.
        if self.gate.observed(tid) {
            self.unpark_later = true;
        }
        if !self.tracees.contains_key(&tid) && !self.claim(tid) {
            // Its parent's fork event names it; until then it waits here.
            self.unclaimed.insert(tid, status);
            return;
        }
        let signal = libc::WSTOPSIG(status);
        if signal == libc::SIGTRAP | 0x80 {
            if self.freezer.entering(tid) {
                // gVisor: the entry of the call resumed from its seccomp
                // stop; it runs now, the others still held.
                if let Err(e) = regs::syscall(tid) {
                    tracing::debug!(tid, "tracee not resumed (gone?): {e}");
                }
                return;
            }
            // The syscall-exit stop of a call run with others held: what
            // its family asked for first, then the others go.
            self.after_call(tid);
            self.let_go(tid);
            self.gate.done(tid);
            if let Err(e) = regs::cont(tid, 0) {
                tracing::debug!(tid, "tracee not resumed (gone?): {e}");
            }
            self.unpark();
            return;
        }
        let resumed = match (status >> 16) & 0xffff {
            EVENT_SECCOMP => {
                self.seccomp_stop(tid, status);
                Ok(())
            }
            EVENT_EXEC => {
                self.exec_stop(tid);
                regs::cont(tid, 0)
            }
            EVENT_FORK | EVENT_VFORK | EVENT_CLONE => {
                if let Ok(child) = regs::event_msg(tid) {
                    let event = (status >> 16) & 0xffff;
                    let thread = event == EVENT_CLONE && clones_thread(tid);
                    self.related(event, child as u32, tid);
                    self.adopt(child as u32, tid, thread);
                }
                regs::cont(tid, 0)
            }
            EVENT_STOP => match signal {
                // A group-stop: stay stopped, but tell us when it ends.
                libc::SIGSTOP | libc::SIGTSTP | libc::SIGTTIN | libc::SIGTTOU => regs::listen(tid),
                _ => regs::cont(tid, 0),
            },
            // A signal on its way: deliver it.
            0 => regs::cont(tid, signal),
            _ => regs::cont(tid, 0),
        };
        if let Err(e) = resumed {
            tracing::debug!(tid, "tracee not resumed (gone?): {e}");
        }
    }

    /// A task that stopped before its parent's fork event: its tree is its
    /// thread group's or its parent's, if either is a tracee. A new process
    /// may be a vfork child sharing its parent's memory: taken so until the
    /// parent's event says (`vforks`).
    fn claim(&mut self, tid: u32) -> bool {
        let Ok(status) = crate::tracee::ProcStatus::read(tid) else {
            return false;
        };
        let tgid = status.number("Tgid").unwrap_or(tid);
        let ppid = status.number("PPid");
        let root = [status.number("Tgid"), ppid]
            .into_iter()
            .flatten()
            .find_map(|p| self.tracees.get(&p).map(|t| t.root));
        match root {
            Some(root) => {
                // A new process may be a vfork child sharing its parent's
                // memory: taken so until the parent's event says.
                if let Some(parent) = ppid.filter(|p| tgid == tid && self.tracees.contains_key(p)) {
                    self.vforks.maybe(tid, parent);
                }
                self.add(tid, root, tgid);
                true
            }
            None => false,
        }
    }

    /// Thread `parent` started `child` (`event`: a fork, vfork or clone):
    /// whether they share memory from now on (a vfork child, until it
    /// execs or exits).
    fn related(&mut self, event: i32, child: u32, parent: u32) {
        if event != EVENT_VFORK {
            self.vforks.apart(child);
            return;
        }
        let process = self.tracees.get(&parent).map_or(parent, |t| t.tgid);
        self.vforks.vforked(child, parent, process);
    }

    /// `child` was started by tracee `parent` (a fork, vfork or clone
    /// event; `thread`: a thread of the parent's process).
    fn adopt(&mut self, child: u32, parent: u32, thread: bool) {
        let Some((root, tgid)) = self.tracees.get(&parent).map(|t| (t.root, t.tgid)) else {
            return;
        };
        if !self.tracees.contains_key(&child) {
            self.add(child, root, if thread { tgid } else { child });
        }
        if let Some(status) = self.unclaimed.remove(&child) {
            self.event(child, status);
        }
    }

    fn add(&mut self, tid: u32, root: u32, tgid: u32) {
        self.tracees.insert(
            tid,
            Tracee {
                root,
                tgid,
                expect: None,
            },
        );
        if let Some(t) = self.trees.get_mut(&root) {
            t.members += 1;
        }
    }

    /// At `caller`'s syscall-exit stop: what its family asked to run then
    /// (`Stop::proceed_then`), with the call's return value.
    fn after_call(&mut self, caller: u32) {
        let Some(after) = self.freezer.take_after(caller) else {
            return;
        };
        let returned = match regs::Regs::get(caller) {
            Ok(r) => r.returned(),
            Err(e) => {
                tracing::debug!(
                    caller,
                    "registers unreadable at a syscall exit (gone?): {e}"
                );
                return;
            }
        };
        if let Some(v) = after(returned) {
            if let Err(e) = regs::set_returned(caller, v) {
                tracing::debug!(caller, "return value not set (gone?): {e}");
            }
        }
    }

    /// Lets go the threads `caller` held stopped: each stop they came to is
    /// handled now, as it would have been.
    fn let_go(&mut self, caller: u32) {
        for (t, status) in self.freezer.release(caller) {
            if self.tracees.contains_key(&t) {
                self.event(t, status);
            }
        }
    }

    /// The path calls the names gate lets in now, handled as they would
    /// have been when they came; then the walks a waiting change needs
    /// stopped are asked to stop.
    fn unpark(&mut self) {
        if self.unparking {
            return; // the outer call goes on with the queue
        }
        self.unparking = true;
        while let Some((t, status)) = self.gate.next() {
            if self.tracees.contains_key(&t) {
                self.replaying = Some(t);
                self.event(t, status);
                self.replaying = None;
            }
        }
        self.unparking = false;
        self.interrupt_walkers();
    }

    /// Interrupts the threads let into walks without an exit stop that a
    /// waiting change needs seen stopped (`gate`); one that is gone is
    /// observed at once.
    fn interrupt_walkers(&mut self) {
        for t in self.gate.walks_to_interrupt() {
            if regs::interrupt(t).is_err() && self.gate.observed(t) {
                self.unpark_later = true;
            }
        }
    }

    /// `tid` exited, was killed, or (the former id of a thread that exec'd)
    /// vanished.
    fn gone(&mut self, tid: u32) {
        self.let_go(tid);
        self.vforks.apart(tid);
        // Out of the gate, whatever it was there: the loop lets in what
        // waited for it.
        self.gate.done(tid);
        self.unpark_later = true;
        self.held.remove(&tid);
        self.unclaimed.remove(&tid);
        let Some(t) = self.tracees.remove(&tid) else {
            return;
        };
        let Some(tree) = self.trees.get_mut(&t.root) else {
            return;
        };
        tree.members = tree.members.saturating_sub(1);
        if tree.members == 0 {
            if let Some(tree) = self.trees.remove(&t.root) {
                tracing::info!(session = %tree.tree.session_id, root_pid = t.root, "tree finished");
                tree.trees.finished(t.root);
            }
        }
    }

    fn seccomp_stop(&mut self, tid: u32, status: i32) {
        let Some(root) = self.tracees.get(&tid).map(|t| t.root) else {
            return;
        };
        let regs = match regs::Regs::get(tid) {
            Ok(r) => r,
            Err(e) => {
                // Stopped in a syscall nobody can judge: it must not go on.
                tracing::warn!(
                    tid,
                    "registers unreadable at a seccomp stop ({e}); killing it"
                );
                kill(tid);
                let _ = regs::cont(tid, 0);
                return;
            }
        };
        let (arch, nr) = regs.arch_nr();
        // A path call waits while names it would walk may change.
        let walks = agentsh_proto::fileabi::classify(arch, nr).map(|c| gate::kind_of(c.op));
        if let Some(kind) = walks {
            if !self.gate.admits(kind, self.replaying == Some(tid)) {
                self.gate.park(tid, status, kind);
                self.interrupt_walkers();
                return;
            }
        }
        let Some(tt) = self.trees.get_mut(&root) else {
            return;
        };
        let (held, unclaimed, gate) = (&self.held, &self.unclaimed, &self.gate);
        let stopped = |t: u32| held.contains_key(&t) || unclaimed.contains_key(&t) || gate.parks(t);
        let tgid = self.tracees.get(&tid).map_or(tid, |t| t.tgid);
        let tracees = &self.tracees;
        let vforks = &self.vforks;
        // Its process's other threads, and those of every process sharing
        // its memory through vfork but the ones asleep in vfork: every one
        // is a tracee (each clone is followed); those not yet claimed are
        // stopped already.
        let siblings = || -> Vec<u32> {
            let (processes, waiting) = vforks.sharers(tgid);
            tracees
                .iter()
                .filter(|(&t, x)| processes.contains(&x.tgid) && t != tid && !waiting.contains(&t))
                .map(|(&t, _)| t)
                .collect()
        };
        let stop = TraceStop {
            tid,
            answered: Cell::new(false),
            expect: RefCell::new(None),
            starttime: Cell::new(0),
            freezer: &self.freezer,
            stopped: &stopped,
            siblings: &siblings,
            to_exit: walks == Some(gate::Kind::Changes),
            proceeded: Cell::new(false),
        };
        let caught = Caught {
            tid,
            tgid: Some(tgid),
            arch,
            nr,
            args: regs.args(),
        };
        dispatch(&self.ctx, &tt.tree, &mut tt.st, &caught, &stop);
        let answer = Answered {
            answered: stop.answered.get(),
            starttime: stop.starttime.get(),
            proceeded: stop.proceeded.get(),
            expect: stop.expect.take(),
        };
        drop(stop);
        self.after_dispatch(tid, walks, answer);
    }

    /// What follows a dispatched stop: the threads held for it, the names
    /// gate, a stop left for an operator, what an exec must turn out to be.
    fn after_dispatch(&mut self, tid: u32, walks: Option<gate::Kind>, a: Answered) {
        let Answered {
            answered,
            starttime,
            proceeded,
            expect,
        } = a;
        // Held for a call that did not go on (refused, answered, deferred):
        // the others go now; for one that did, at its syscall-exit stop.
        if !self.freezer.running(tid) {
            self.let_go(tid);
            if proceeded && walks == Some(gate::Kind::Walks) {
                // One thread, let run with one stop: unobserved until seen.
                self.gate.unobserved(tid);
            }
        } else if let Some(kind) = walks {
            self.gate.running(tid, kind);
        }
        // Whatever the class: a stop its handler did not answer stays
        // stopped, held until an answer comes through the queue.
        if !answered {
            self.held.insert(tid, starttime);
        }
        if let Some(v) = expect {
            if let Some(t) = self.tracees.get_mut(&tid) {
                t.expect = Some(v);
            }
        }
    }

    /// `PTRACE_EVENT_EXEC` of process `pid`: the new image has not run an
    /// instruction. It must be what was judged, or it dies here.
    fn exec_stop(&mut self, pid: u32) {
        // The thread that exec'd, by its id before the exec.
        let former = regs::event_msg(pid).map_or(pid, |m| m as u32);
        // A new image has memory of its own: a vfork child shares no more.
        self.vforks.apart(pid);
        let expect = if former == pid {
            self.tracees.get_mut(&pid).and_then(|t| t.expect.take())
        } else {
            // The former id vanishes without an exit report.
            let e = self.tracees.get_mut(&former).and_then(|t| t.expect.take());
            self.gone(former);
            if let Some(t) = self.tracees.get_mut(&pid) {
                t.expect = None;
            }
            e
        };
        let Some(root) = self.tracees.get(&pid).map(|t| t.root) else {
            return;
        };
        let Some(tt) = self.trees.get(&root) else {
            // Its tree is gone: nothing judged it, and nothing may run.
            kill(pid);
            return;
        };
        if !exec_completed(&self.ctx, &tt.tree, pid, expect) {
            kill(pid);
        }
    }
}

/// How a dispatched stop was answered (read off its [`TraceStop`]).
struct Answered {
    answered: bool,
    starttime: u64,
    proceeded: bool,
    expect: Option<Verification>,
}

/// Whether tracee `tid`, stopped at its clone event, made a thread
/// (`CLONE_THREAD` in `clone`'s flags; `clone3` is refused by the filter).
/// Unreadable registers: not a thread (its own process, frozen alone).
fn clones_thread(tid: u32) -> bool {
    const CLONE_THREAD: u64 = 0x0001_0000;
    regs::Regs::get(tid).is_ok_and(|r| r.args()[0] & CLONE_THREAD != 0)
}

/// SIGKILL to a stopped tracee: it dies as soon as it is resumed.
fn kill(tid: u32) {
    // SAFETY: tkill takes two integers; no memory is passed.
    unsafe { libc::syscall(libc::SYS_tkill, tid as libc::c_long, libc::SIGKILL) };
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

/// Reads a non-blocking fd until it is empty.
fn drain_fd(fd: i32, size: usize) {
    let mut buf = [0u8; 256];
    let size = size.min(buf.len());
    // SAFETY: reads at most `size` bytes into our buffer.
    while unsafe { libc::read(fd, buf.as_mut_ptr().cast(), size) } > 0 {}
}
