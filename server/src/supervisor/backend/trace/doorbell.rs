//! The tracer's doorbell: a child process of the tracer thread, traced by
//! it, that does nothing but take signals. Other threads ring it (a signal
//! through its pidfd) when they queue a request, and a timer rings it every
//! [`TICK`]; each ring is a signal-delivery stop, which `waitpid` reports
//! like any tracee's stop. So the tracer blocks in one `waitpid` for tracee
//! events and requests alike, instead of `poll` on a signalfd and an
//! eventfd, a read of each, and a `waitpid` that finds nothing after every
//! event: one syscall per stop where there were four (each a sandbox
//! syscall under gVisor, about 20 µs). No ring is lost: a stop stays until
//! the tracer reaps it, and a request queued before its ring is taken
//! after the ring's stop is seen.
//!
//! The doorbell is one of the processes a tree may not signal (a keeper,
//! `filter::keep`), from the trees started after it.
//!
//! Failure modes: a doorbell that cannot be made (no fork, no seize, no
//! pidfd) or that dies leaves the tracer on its `poll` loop, as before
//! (logged); a ring that fails wakes the tracer through the eventfd.

use std::io;
use std::os::fd::OwnedFd;
use std::sync::{Arc, RwLock};

/// How often the doorbell rings by itself: the tracer's housekeeping (held
/// walkers that went to sleep) needs no event to run.
const TICK: libc::suseconds_t = 250_000;

/// The ring other threads use: the doorbell's pidfd while it lives.
pub(super) type Ring = Arc<RwLock<Option<OwnedFd>>>;

/// Rings the doorbell; whether it rang (`false`: none, or it is gone, and
/// the caller wakes the tracer another way).
pub(super) fn ring(bell: &Ring) -> bool {
    let held = bell
        .read()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    held.as_ref()
        .is_some_and(|fd| crate::tracee::pidfd::send_signal(fd, libc::SIGUSR1).is_ok())
}

/// The doorbell, seen from the tracer thread.
pub(super) struct Doorbell {
    pub(super) pid: u32,
    ring: Ring,
}

impl Doorbell {
    /// Forks the doorbell and seizes it, from the tracer thread; publishes
    /// its pidfd in `ring`.
    ///
    /// # Errors
    /// fork, `PTRACE_SEIZE` or `pidfd_open` failed (the child is killed).
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
        let made = crate::supervisor::ptrace::seize(pid, libc::PTRACE_O_EXITKILL)
            .and_then(|()| crate::tracee::pidfd::open(pid));
        match made {
            Ok(fd) => {
                *ring
                    .write()
                    .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(fd);
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
            if crate::supervisor::ptrace::request(libc::PTRACE_CONT, self.pid, 0, 0).is_ok() {
                return true;
            }
        }
        self.gone();
        false
    }

    /// The doorbell is gone: no one rings it any more.
    fn gone(&self) {
        *self
            .ring
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = None;
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
        if libc::syscall(libc::SYS_close_range, 0u32, u32::MAX, 0u32) != 0 {
            for fd in 0..1024 {
                libc::close(fd);
            }
        }
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = rung as *const () as usize;
        libc::sigemptyset(&mut sa.sa_mask);
        sa.sa_flags = libc::SA_RESTART;
        libc::sigaction(libc::SIGUSR1, &sa, std::ptr::null_mut());
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
