//! Taking one of a tree task's fds into the supervisor (`pidfd_open`, then
//! `pidfd_getfd`): the same open file, not a copy of its state. Egress
//! takes a caller's socket this way; the refusal explanation its stderr.
//! Also a process's pidfd and a signal through it (killing a session's
//! trees: the pid cannot be reused between the check and the signal).
//!
//! Failure modes: `pidfd_getfd` is refused where the seccomp profile lacks
//! `CAP_SYS_PTRACE` (Docker's default) and does not exist under gVisor; the
//! caller says what that means for it.

use std::io;
use std::os::fd::{FromRawFd, OwnedFd, RawFd};

/// Which step failed.
pub enum GetFd {
    /// `pidfd_open` of the task.
    Open(io::Error),
    /// `pidfd_getfd` of its fd.
    Get(io::Error),
}

/// Task `tid`'s fd `fd`, as a new fd of ours.
///
/// # Errors
/// See [`GetFd`].
pub fn get_fd(tid: u32, fd: i32) -> Result<OwnedFd, GetFd> {
    let pidfd = pidfd_of(tid).map_err(GetFd::Open)?;
    // SAFETY: pidfd_getfd takes a pidfd we own, an fd number and flags 0.
    let got = unsafe {
        libc::syscall(
            libc::SYS_pidfd_getfd,
            std::os::fd::AsRawFd::as_raw_fd(&pidfd) as libc::c_long,
            fd as libc::c_long,
            0 as libc::c_long,
        )
    };
    if got < 0 {
        return Err(GetFd::Get(io::Error::last_os_error()));
    }
    // SAFETY: a fresh fd pidfd_getfd installed in our table; we own it.
    Ok(unsafe { OwnedFd::from_raw_fd(got as RawFd) })
}

/// A pidfd of thread `tid` (its own fd table, which `unshare(CLONE_FILES)`
/// may have made differ from its process's); on kernels without
/// `PIDFD_THREAD` (< 6.9), of its process when `tid` leads it.
pub fn pidfd_of(tid: u32) -> io::Result<OwnedFd> {
    const PIDFD_THREAD: libc::c_long = libc::O_EXCL as libc::c_long;
    for flags in [PIDFD_THREAD, 0] {
        // SAFETY: pidfd_open takes two integers.
        let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, tid as libc::c_long, flags) };
        if fd >= 0 {
            // SAFETY: a fresh fd we own.
            return Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) });
        }
        let e = io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::EINVAL) {
            return Err(e);
        }
    }
    Err(io::Error::from_raw_os_error(libc::EINVAL))
}

/// A pidfd of process `pid`.
///
/// # Errors
/// `pidfd_open`'s (ESRCH: it has exited).
pub fn open(pid: u32) -> io::Result<OwnedFd> {
    // SAFETY: pidfd_open takes two integers.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::c_long, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a fresh fd we own.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
}

/// Sends `sig` to the process `pidfd` refers to.
///
/// # Errors
/// `pidfd_send_signal`'s (ESRCH: it has exited).
pub fn send_signal(pidfd: &OwnedFd, sig: i32) -> io::Result<()> {
    // SAFETY: pidfd_send_signal takes a pidfd we own, a signal number, no
    // siginfo (NULL) and flags 0.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_pidfd_send_signal,
            std::os::fd::AsRawFd::as_raw_fd(pidfd) as libc::c_long,
            sig as libc::c_long,
            std::ptr::null::<libc::siginfo_t>(),
            0 as libc::c_long,
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}
