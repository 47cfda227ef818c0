//! Whether `SECCOMP_RET_TRACE` reaches a tracer here (the ptrace backend's
//! trap): a child stops itself, loads a filter answering `getppid` with
//! `RET_TRACE` and calls it; this process seizes it and must see
//! `PTRACE_EVENT_SECCOMP`.
//!
//! Why for real: gVisor and seccomp profiles differ in what they let a
//! tracer see, and `uname` says nothing of it.
//!
//! Failure modes: a fork, wait or seize that fails, or a child that ends or
//! stops without the seccomp stop, reports the backend as not available with
//! the reason ([`TraceProbeError`]); every path kills and reaps the child.

use super::report::Probe;
use super::syscalls::load;
use std::io;

/// A child asks to be traced (it stops itself), loads a filter answering
/// `getppid` with `RET_TRACE` and calls it; the parent seizes it and must
/// see `PTRACE_EVENT_SECCOMP`. Every path reaps the child here.
pub(super) fn probe_trace() -> Probe {
    // SAFETY: the child only makes raw syscalls, then _exits.
    let child = unsafe { libc::fork() };
    if child < 0 {
        return Probe::no(format!("fork: {}", io::Error::last_os_error()));
    }
    if child == 0 {
        traced_child();
    }
    let outcome = await_seccomp_stop(child);
    // SAFETY: our child; EXITKILL would also end it.
    unsafe {
        libc::kill(child, libc::SIGKILL);
        let mut st = 0;
        libc::waitpid(child, &mut st, libc::__WALL);
    }
    match outcome {
        Ok(()) => Probe::yes(),
        Err(e) => Probe::no(e.to_string()),
    }
}

/// Why [`probe_trace`] saw no seccomp stop.
#[derive(Debug, thiserror::Error)]
enum TraceProbeError {
    #[error("waitpid: {0}")]
    Wait(#[source] io::Error),
    #[error("PTRACE_SEIZE: {0}")]
    Seize(#[source] io::Error),
    #[error("the traced child ended without a seccomp stop")]
    Ended,
    #[error("no seccomp stop")]
    NoStop,
}

/// [`probe_trace`]'s child, after fork (async-signal-safe calls only):
/// stops itself, loads `getppid -> TRACE`, calls getppid.
fn traced_child() -> ! {
    // BPF: load nr; if getppid -> TRACE else ALLOW.
    let prog = [
        libc::sock_filter {
            code: (libc::BPF_LD | libc::BPF_W | libc::BPF_ABS) as u16,
            jt: 0,
            jf: 0,
            k: 0,
        },
        libc::sock_filter {
            code: (libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K) as u16,
            jt: 0,
            jf: 1,
            k: libc::SYS_getppid as u32,
        },
        libc::sock_filter {
            code: (libc::BPF_RET | libc::BPF_K) as u16,
            jt: 0,
            jf: 0,
            k: libc::SECCOMP_RET_TRACE,
        },
        libc::sock_filter {
            code: (libc::BPF_RET | libc::BPF_K) as u16,
            jt: 0,
            jf: 0,
            k: libc::SECCOMP_RET_ALLOW,
        },
    ];
    // SAFETY: raw syscalls in the child.
    unsafe {
        libc::raise(libc::SIGSTOP);
        if load(&prog, 0) < 0 {
            libc::_exit(2);
        }
        libc::syscall(libc::SYS_getppid);
        libc::_exit(0);
    }
}

/// [`probe_trace`]'s parent: seizes the stopped child, resumes it and waits
/// (a few stops at most) for its seccomp stop.
fn await_seccomp_stop(child: libc::pid_t) -> Result<(), TraceProbeError> {
    let mut st = 0;
    // SAFETY: waiting for our own child's stop.
    if unsafe { libc::waitpid(child, &mut st, libc::WUNTRACED) } < 0 {
        return Err(TraceProbeError::Wait(io::Error::last_os_error()));
    }
    let opts = libc::PTRACE_O_TRACESECCOMP | libc::PTRACE_O_EXITKILL;
    // SAFETY: seizing our own stopped child.
    if unsafe { libc::ptrace(libc::PTRACE_SEIZE, child, 0, opts as libc::c_ulong) } < 0 {
        return Err(TraceProbeError::Seize(io::Error::last_os_error()));
    }
    // SAFETY: resume it (SIGCONT ends the stop; the tracer sees it).
    unsafe { libc::kill(child, libc::SIGCONT) };
    for _ in 0..16 {
        // SAFETY: waiting for our tracee.
        if unsafe { libc::waitpid(child, &mut st, libc::__WALL) } < 0 {
            return Err(TraceProbeError::Wait(io::Error::last_os_error()));
        }
        if libc::WIFEXITED(st) || libc::WIFSIGNALED(st) {
            return Err(TraceProbeError::Ended);
        }
        let event = (st >> 16) & 0xff;
        if libc::WIFSTOPPED(st) && event == libc::PTRACE_EVENT_SECCOMP {
            return Ok(());
        }
        let sig = if libc::WIFSTOPPED(st) && event == 0 {
            let s = libc::WSTOPSIG(st);
            if s == libc::SIGSTOP || s == libc::SIGCONT {
                0
            } else {
                s
            }
        } else {
            0
        };
        // SAFETY: continue our tracee (re-injecting an ordinary signal).
        unsafe { libc::ptrace(libc::PTRACE_CONT, child, 0, sig as libc::c_ulong) };
    }
    Err(TraceProbeError::NoStop)
}
