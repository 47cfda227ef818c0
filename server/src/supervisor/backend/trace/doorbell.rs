//! The tracer's doorbell: a child process of the tracer thread, traced by
//! it, that does nothing but take signals. Other threads ring it (SIGURG)
//! when they queue a request, and its own timer rings it every [`TICK`];
//! each ring is a signal-delivery stop, which `waitpid` reports like any
//! tracee's stop. So the tracer blocks in one `waitpid` for tracee events
//! and requests alike, instead of `poll` on a signalfd and an eventfd, a
//! read of each, and a `waitpid` that finds nothing after every event: one
//! syscall per stop where there were four (each a sandbox syscall under
//! gVisor, about 25 µs). No ring is lost: a stop stays until the tracer
//! reaps it, and a request queued before its ring is taken after the ring's
//! stop is seen.
//!
//! Rung by pid (gVisor has no `pidfd_send_signal`): the pid cannot be
//! reused while the doorbell lives or is a zombie, and only the tracer reaps
//! it, then forgets the pid. A ring sent in the moment between the reaping
//! and the forgetting could reach a new process given that pid (after a
//! wrap-around of the pid space), and SIGURG is a signal whose default is to
//! be ignored. The doorbell is one of the processes a tree may not signal
//! (a keeper, `filter::keep`), from the trees started after it: only a
//! process outside every tree can kill it.
//!
//! Failure modes: a doorbell that cannot be made (no fork, no seize) or
//! that dies leaves the tracer on its `poll` loop, as before (logged); a
//! ring that fails (`kill` refused to a thread that holds a tree owner's
//! ids for a moment) writes the eventfd instead, which the tracer takes
//! at the doorbell's next tick (at most [`TICK`] later) or, polling, at
//! once.

use std::io;
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::Arc;

/// How often the doorbell rings by itself: the tracer's housekeeping (held
/// walkers that went to sleep) needs no event to run.
const TICK: libc::suseconds_t = 250_000;

/// The signal that rings it: ignored by default wherever it lands.
const RING: libc::c_int = libc::SIGURG;

/// The ring other threads use: the doorbell's pid while it lives (0: none).
pub(super) type Ring = Arc<AtomicI32>;

/// Rings the doorbell; whether it rang (`false`: none, or it is gone, and
/// the caller wakes the tracer another way).
pub(super) fn ring(bell: &Ring) -> bool {
    let pid = bell.load(Ordering::Acquire);
    // SAFETY: kill takes integers.
    pid > 0 && unsafe { libc::kill(pid, RING) } == 0
}

/// The doorbell, seen from the tracer thread.
pub(super) struct Doorbell {
    pub(super) pid: u32,
    ring: Ring,
}

impl Doorbell {
    /// Forks the doorbell and seizes it, from the tracer thread; publishes
    /// its pid in `ring`.
    ///
    /// # Errors
    /// fork or `PTRACE_SEIZE` failed (the child is killed).
    pub(super) fn start(ring: Ring) -> io::Result<Doorbell> {
        // SAFETY: the child calls only async-signal-safe syscalls
        // (`doorbell_child`) and never returns.
        let pid = unsafe { libc::fork() };
        if pid < 0 {
            return Err(io::Error::last_os_error());
        }
        if pid == 0 {
            doorbell_child();
        }
        let pid = pid as u32;
        match crate::supervisor::ptrace::seize(pid, libc::PTRACE_O_EXITKILL) {
            Ok(()) => {
                ring.store(pid as i32, Ordering::Release);
                crate::filter::keep(pid);
                Ok(Doorbell { pid, ring })
            }
            Err(e) => {
                // SAFETY: signals and reaps our own child.
                unsafe {
                    libc::kill(pid as i32, libc::SIGKILL);
                    libc::waitpid(pid as i32, std::ptr::null_mut(), libc::__WALL);
                }
                Err(e)
            }
        }
    }

    /// The doorbell's event (`status` from `waitpid`): a ring is resumed
    /// without its signal; `false` when the doorbell is gone (killed), and
    /// so no longer rung.
    pub(super) fn event(&self, status: i32) -> bool {
        if libc::WIFSTOPPED(status) {
            // Every stop of the doorbell is a ring (or a stop signal someone
            // sent it): none is delivered.
            if super::regs::cont(self.pid, 0).is_ok() {
                return true;
            }
        }
        self.gone();
        false
    }

    /// The doorbell is gone: no one rings it any more.
    pub(super) fn gone(&self) {
        self.ring.store(0, Ordering::Release);
        crate::filter::unkeep(self.pid);
        tracing::warn!(
            pid = self.pid,
            "tracer: its doorbell is gone; it polls again (each stop costs three more syscalls)"
        );
    }
}

/// No-op handler: a ring that reaches the doorbell untraced (before the
/// seize) ends nothing.
extern "C" fn rung(_: libc::c_int) {}

/// The doorbell's life: named, dies with the tracer thread, no fd of the
/// server's, the rings' handler, the timer, then asleep for good.
fn doorbell_child() -> ! {
    // SAFETY: raw syscalls on our own process and values built here; all
    // async-signal-safe, as a child of a threaded process must be.
    unsafe {
        libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0);
        libc::prctl(libc::PR_SET_NAME, c"agentsh-bell".as_ptr(), 0, 0, 0);
        // Up to i32::MAX: gVisor refuses a larger bound. Without
        // close_range, each fd below the limit.
        if libc::syscall(libc::SYS_close_range, 0u32, i32::MAX as u32, 0u32) != 0 {
            let mut lim: libc::rlimit = std::mem::zeroed();
            let top = if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) == 0 {
                lim.rlim_cur.min(1 << 16) as i32
            } else {
                1 << 16
            };
            for fd in 0..top {
                libc::close(fd);
            }
        }
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = rung as *const () as usize;
        libc::sigemptyset(&mut sa.sa_mask);
        sa.sa_flags = libc::SA_RESTART;
        libc::sigaction(RING, &sa, std::ptr::null_mut());
        libc::sigaction(libc::SIGALRM, &sa, std::ptr::null_mut());
        let tick = libc::timeval {
            tv_sec: 0,
            tv_usec: TICK,
        };
        let timer = libc::itimerval {
            it_interval: tick,
            it_value: tick,
        };
        libc::setitimer(libc::ITIMER_REAL, &timer, std::ptr::null_mut());
        let mut none: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut none);
        libc::pthread_sigmask(libc::SIG_SETMASK, &none, std::ptr::null_mut());
        loop {
            libc::pause();
        }
    }
}
