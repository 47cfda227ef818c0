//! The probes of single system calls, each tried for real: loading a filter
//! with a user-notify listener (and its flags), the listener's synchronous
//! wake-up, `pidfd_getfd` on this process, a fanotify permission group.
//!
//! Why in a throwaway child ([`in_child`]) where a filter is loaded: a
//! seccomp filter cannot be removed, and the server must not run under one
//! it loaded to find out.
//!
//! Failure modes: a child that cannot be forked, or that dies, reports the
//! capability as not available with the reason; nothing here changes the
//! host.

use super::report::Probe;
use std::io;

/// Runs `f` in a forked child and returns its exit code (or the signal as
/// 128 + N). The child does only raw syscalls.
pub(crate) fn in_child(f: impl FnOnce() -> i32) -> io::Result<i32> {
    // SAFETY: the child runs `f`, which makes only async-signal-safe raw
    // syscalls, then _exits; the parent only waits for it.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(io::Error::last_os_error());
    }
    if pid == 0 {
        let code = f();
        // SAFETY: leaving the forked child without running destructors.
        unsafe { libc::_exit(code) };
    }
    let mut st = 0;
    // SAFETY: waiting for our own child.
    if unsafe { libc::waitpid(pid, &mut st, 0) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(if libc::WIFEXITED(st) {
        libc::WEXITSTATUS(st)
    } else {
        128 + libc::WTERMSIG(st)
    })
}

/// A filter that allows everything (one `RET_ALLOW`).
fn allow_all() -> [libc::sock_filter; 1] {
    [libc::sock_filter {
        code: (libc::BPF_RET | libc::BPF_K) as u16,
        jt: 0,
        jf: 0,
        k: libc::SECCOMP_RET_ALLOW,
    }]
}

/// Loads `prog` with `flags` on this thread (no_new_privs set first): the
/// listener's fd, or below 0 with errno set.
pub(super) fn load(prog: &[libc::sock_filter], flags: libc::c_ulong) -> i64 {
    let fprog = libc::sock_fprog {
        len: prog.len() as u16,
        filter: prog.as_ptr().cast_mut(),
    };
    // SAFETY: a valid program for the call's duration; in a throwaway child.
    unsafe {
        libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0);
        libc::syscall(
            libc::SYS_seccomp,
            libc::SECCOMP_SET_MODE_FILTER,
            flags,
            &fprog as *const libc::sock_fprog,
        )
    }
}

/// A child's exit code as a probe: 0 yes, an errno no, a signal no.
fn errno_probe(code: io::Result<i32>) -> Probe {
    match code {
        Ok(0) => Probe::yes(),
        Ok(c) if c < 128 => Probe::no(format!("{}", io::Error::from_raw_os_error(c))),
        Ok(c) => Probe::no(format!("the probe died (signal {})", c - 128)),
        Err(e) => Probe::no(format!("cannot run the probe: {e}")),
    }
}

/// Whether a filter with `flags` (a listener, and what else is asked) loads.
pub(super) fn probe_notify(flags: libc::c_ulong) -> Probe {
    errno_probe(in_child(|| {
        let prog = allow_all();
        if load(&prog, flags) < 0 {
            // SAFETY: reading this thread's errno.
            return unsafe { *libc::__errno_location() };
        }
        0
    }))
}

/// Whether a listener takes `SECCOMP_USER_NOTIF_FD_SYNC_WAKE_UP`.
pub(super) fn probe_sync_wakeup() -> Probe {
    errno_probe(in_child(|| {
        let prog = allow_all();
        let fd = load(&prog, libc::SECCOMP_FILTER_FLAG_NEW_LISTENER);
        if fd < 0 {
            // SAFETY: reading this thread's errno.
            return unsafe { *libc::__errno_location() };
        }
        // SAFETY: the flags ioctl on the listener we just got.
        let rc = unsafe { libc::ioctl(fd as i32, libc::SECCOMP_IOCTL_NOTIF_SET_FLAGS, 1u64) };
        if rc < 0 {
            // SAFETY: as above.
            return unsafe { *libc::__errno_location() };
        }
        0
    }))
}

/// Can this process take an fd from another with `pidfd_getfd`? Tried on
/// itself: ptrace access to a tree is `tree_access`'s question; this one is
/// whether the syscall itself is refused (a seccomp profile, an old kernel).
pub(super) fn probe_pidfd_getfd() -> Probe {
    // SAFETY: pidfd_open takes two integers.
    let pidfd = unsafe { libc::syscall(libc::SYS_pidfd_open, libc::getpid() as libc::c_long, 0) };
    if pidfd < 0 {
        return Probe::no(format!("pidfd_open: {}", io::Error::last_os_error()));
    }
    // SAFETY: a pidfd we own, fd 0 (or any open fd), flags 0.
    let got = unsafe {
        libc::syscall(
            libc::SYS_pidfd_getfd,
            pidfd,
            0 as libc::c_long,
            0 as libc::c_long,
        )
    };
    let err = io::Error::last_os_error();
    // SAFETY: closing fds we own.
    unsafe {
        libc::close(pidfd as libc::c_int);
        if got >= 0 {
            libc::close(got as libc::c_int);
        }
    }
    match got {
        g if g >= 0 => Probe::yes(),
        // fd 0 closed: the call itself works.
        _ if err.raw_os_error() == Some(libc::EBADF) => Probe::yes(),
        _ => Probe::no(format!("pidfd_getfd: {err}")),
    }
}

/// Whether a fanotify group with permission events can be created.
pub(super) fn probe_fanotify() -> Probe {
    const FAN_CLASS_CONTENT: u32 = 0x04;
    const FAN_CLOEXEC: u32 = 0x01;
    // SAFETY: creates a notification group or fails; closed at once.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_fanotify_init,
            FAN_CLASS_CONTENT | FAN_CLOEXEC,
            libc::O_RDONLY as u32,
        )
    };
    if fd < 0 {
        return Probe::no(format!("{}", io::Error::last_os_error()));
    }
    // SAFETY: our own fd.
    unsafe { libc::close(fd as i32) };
    Probe::yes()
}
