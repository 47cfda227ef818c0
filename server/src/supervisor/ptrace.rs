//! The ptrace requests the supervisor makes, as safe functions, for both
//! of its users: the race guard of the exec path (seize without stopping,
//! interrupt, detach, a bounded wait for the next event of the calling
//! thread's tracees) and the ptrace backend (`backend/trace/regs.rs` builds
//! its requests on [`request`] and [`seize`]). This is not the ptrace
//! backend: that is `backend/trace`.
//!
//! Why ptrace at all: seccomp user-notify stops only the calling thread. To
//! make its decision hold, the supervisor stops every other task that shares
//! the caller's memory (`sharing`) and watches the exec complete
//! (`PTRACE_EVENT_EXEC`, `verify`). `PTRACE_SEIZE` (not `ATTACH`) sends no
//! SIGSTOP and changes nothing the tracee can see but the stop itself; no
//! `PTRACE_O_EXITKILL`, so if the server dies the kernel detaches every tracee
//! and they run on (tested).
//!
//! ptrace belongs to the tracer *thread*: every request and wait here must be
//! made by the thread that seized (a tree's thread, or an approval waiter).
//! Waits use `__WNOTHREAD`, so one thread never reaps another's events.
//!
//! Failure modes: every request returns the kernel's errno; a wait that sees
//! nothing by its deadline returns `None` (callers fail closed or keep the
//! tracee on a list to detach once it stops: see `Lingering`).

use std::collections::HashSet;
use std::io;
use std::time::{Duration, Instant};

/// `PTRACE_EVENT_EXEC`.
pub const EVENT_EXEC: i32 = 4;

fn check(rc: libc::c_long) -> io::Result<()> {
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// One ptrace request whose `data` is a value (options, a signal) or a
/// pointer the caller keeps valid for the call.
///
/// # Errors
/// The kernel's errno (ESRCH: not our tracee, not stopped, or gone).
pub(crate) fn request(req: libc::c_uint, tid: u32, addr: usize, data: usize) -> io::Result<()> {
    // SAFETY: requests whose `data` is a value (options, a signal) or a
    // pointer the caller keeps valid for the call.
    check(unsafe {
        libc::ptrace(
            req,
            tid as libc::pid_t,
            addr as *mut libc::c_void,
            data as *mut libc::c_void,
        )
    })
}

/// Seizes thread `tid` with `options` (`PTRACE_O_*`); it keeps running.
///
/// # Errors
/// EPERM (already traced, no capability), ESRCH (gone).
pub fn seize(tid: u32, options: libc::c_int) -> io::Result<()> {
    let _owner = crate::tracee::as_owner(tid);
    // SAFETY: PTRACE_SEIZE takes the options by value; no memory is passed.
    check(unsafe {
        libc::ptrace(
            libc::PTRACE_SEIZE,
            tid as libc::pid_t,
            std::ptr::null_mut::<libc::c_void>(),
            options as libc::c_long as *mut libc::c_void,
        )
    })
}

/// Asks seized thread `tid` to stop. Any return to user space traps first.
///
/// # Errors
/// ESRCH when it is not our tracee (or gone).
pub fn interrupt(tid: u32) -> io::Result<()> {
    // SAFETY: no memory is passed.
    check(unsafe {
        libc::ptrace(
            libc::PTRACE_INTERRUPT,
            tid as libc::pid_t,
            std::ptr::null_mut::<libc::c_void>(),
            std::ptr::null_mut::<libc::c_void>(),
        )
    })
}

/// Detaches stopped tracee `tid`, delivering `signal` (0: none).
///
/// # Errors
/// ESRCH when it is not stopped (or not ours, or gone).
pub fn detach(tid: u32, signal: i32) -> io::Result<()> {
    // SAFETY: the signal is passed by value; no memory is passed.
    check(unsafe {
        libc::ptrace(
            libc::PTRACE_DETACH,
            tid as libc::pid_t,
            std::ptr::null_mut::<libc::c_void>(),
            signal as libc::c_long as *mut libc::c_void,
        )
    })
}

/// What a wait saw.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    /// A ptrace stop: `event` is the `PTRACE_EVENT_*` (0 for a
    /// signal-delivery stop, whose signal must be passed on at detach).
    Stopped { signal: i32, event: i32 },
    /// It exited or was killed: nothing to detach.
    Gone,
}

impl Event {
    /// The signal to pass to `detach` so nothing the tracee was sent is lost.
    pub fn detach_signal(self) -> i32 {
        match self {
            Event::Stopped { signal, event: 0 } => signal,
            _ => 0,
        }
    }
}

fn decode(status: i32) -> Event {
    if libc::WIFSTOPPED(status) {
        Event::Stopped {
            signal: libc::WSTOPSIG(status),
            event: (status >> 16) & 0xff,
        }
    } else {
        Event::Gone
    }
}

/// Waits for the next event of any of this thread's tracees until
/// `deadline`: `(tid, event)`, or `None` at the deadline or when there is no
/// tracee left. Polls (`WNOHANG`) because waits have no timeout: see
/// [`Backoff`].
pub fn wait_any(deadline: Instant) -> Option<(u32, Event)> {
    wait_for(-1, deadline).map(|(t, ev)| (t, ev.unwrap_or(Event::Gone)))
}

/// Waits for an event of `tid` only, until `deadline`.
pub fn wait_one(tid: u32, deadline: Instant) -> Option<Event> {
    wait_for(tid as libc::pid_t, deadline).map(|(_, ev)| ev.unwrap_or(Event::Gone))
}

/// `waitpid(who, WNOHANG)` until an event or the deadline; the event is
/// `None` when there is nothing left to wait for (ECHILD for `who` = -1 is
/// reported as no event at all).
fn wait_for(who: libc::pid_t, deadline: Instant) -> Option<(u32, Option<Event>)> {
    let mut backoff = Backoff::default();
    loop {
        let mut status = 0;
        // SAFETY: a valid pointer to an int the kernel writes.
        let pid = unsafe {
            libc::waitpid(
                who,
                &mut status,
                libc::__WALL | libc::__WNOTHREAD | libc::WNOHANG,
            )
        };
        if pid > 0 {
            return Some((pid as u32, Some(decode(status))));
        }
        if pid < 0 {
            let e = io::Error::last_os_error();
            if e.raw_os_error() != Some(libc::EINTR) {
                // ECHILD: no tracee left (or `who` is not ours).
                return (who > 0).then_some((who as u32, None));
            }
        }
        if Instant::now() >= deadline {
            return None;
        }
        backoff.pause();
    }
}

/// How a poll waits between tries: a few yields (a stop on another CPU
/// arrives within microseconds), then short sleeps. Sleeping, not spinning,
/// is what lets a tracee that waits for a CPU run: this thread's CPU goes
/// idle and takes it. The sleeps grow to half a millisecond only after
/// several milliseconds (a task asleep in the kernel for long).
#[derive(Default)]
struct Backoff {
    tries: u32,
}

impl Backoff {
    fn pause(&mut self) {
        self.tries += 1;
        if self.tries <= 8 {
            std::thread::yield_now();
        } else {
            std::thread::sleep(Duration::from_micros(if self.tries < 400 {
                10
            } else {
                500
            }));
        }
    }
}

/// Asks the kernel to wake this thread's short sleeps on time (the default
/// slack is 50 µs, five times a [`Backoff`] sleep). For the threads that
/// wait for tracees.
pub fn precise_sleeps() {
    // SAFETY: PR_SET_TIMERSLACK takes an integer; no memory is passed.
    unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1000 as libc::c_ulong, 0, 0, 0) };
}

/// Tracees this thread seized that had not stopped when it was done with
/// them (asleep in the kernel, e.g. a vfork parent whose child's exec failed,
/// with a stop pending): detached as soon as they stop. A pending stop means
/// they cannot run a single user instruction before that.
#[derive(Debug, Default)]
pub struct Lingering {
    tids: HashSet<u32>,
}

impl Lingering {
    pub fn add(&mut self, tid: u32) {
        self.tids.insert(tid);
    }

    pub fn is_empty(&self) -> bool {
        self.tids.is_empty()
    }

    /// Takes `tid` back (a new freeze found it again: it is still ours).
    pub fn take(&mut self, tid: u32) -> bool {
        self.tids.remove(&tid)
    }

    /// Detaches every one that has stopped, forgets every one that is gone.
    pub fn sweep(&mut self) {
        self.tids
            .retain(|&tid| match wait_one(tid, Instant::now()) {
                None => true,
                Some(Event::Gone) => false,
                Some(ev @ Event::Stopped { .. }) => {
                    if let Err(e) = detach(tid, ev.detach_signal()) {
                        tracing::debug!(tid, "detach of a lingering tracee: {e}");
                    }
                    false
                }
            });
    }
}
