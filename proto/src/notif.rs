//! Thin, safe wrappers over the seccomp user-notify ioctls.
//!
//! Raw ioctls rather than libseccomp: libseccomp 2.5.4 turns most failures
//! into ECANCELED, and the supervisor must tell "tracee gone" (ENOENT) from
//! real errors. Used by the server's supervisor and by the tests' responders.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};

/// One notification, as the kernel reported it.
#[derive(Debug, Clone, Copy)]
pub struct Notification {
    /// The notification's id (for the answer and `id_valid`).
    pub id: u64,
    /// The calling *thread's* id (a tid, not necessarily the tgid).
    pub pid: u32,
    /// The syscall number (in `arch`'s numbering).
    pub nr: i32,
    /// The `AUDIT_ARCH_*` of the call.
    pub arch: u32,
    /// Where the call was made.
    pub instruction_pointer: u64,
    /// The six register arguments.
    pub args: [u64; 6],
}

/// Blocks until a notification arrives on `fd`.
///
/// # Errors
/// ENOENT when the tracee died between the kernel queueing the notification
/// and this read (callers retry); EINTR; ENOTTY/EBADF for a wrong fd.
pub fn recv(fd: BorrowedFd<'_>) -> io::Result<Notification> {
    // SAFETY: seccomp_notif is plain data; the kernel requires it zeroed.
    let mut n: libc::seccomp_notif = unsafe { std::mem::zeroed() };
    // SAFETY: the pointer is valid for the struct's size, which matches the ioctl's.
    let rc = unsafe { libc::ioctl(fd.as_raw_fd(), libc::SECCOMP_IOCTL_NOTIF_RECV, &mut n) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(Notification {
        id: n.id,
        pid: n.pid,
        nr: n.data.nr,
        arch: n.data.arch,
        instruction_pointer: n.data.instruction_pointer,
        args: n.data.args,
    })
}

/// Asks the kernel to wake the tracee synchronously when it is answered
/// (`SECCOMP_USER_NOTIF_FD_SYNC_WAKE_UP`, Linux 6.6): the tracee then runs on
/// the CPU the supervisor answered from instead of waiting for a scheduler
/// wake-up elsewhere, which shortens every supervised exec.
///
/// # Errors
/// EINVAL on kernels without the flag (callers go on without it).
pub fn set_sync_wakeup(fd: BorrowedFd<'_>) -> io::Result<()> {
    const SECCOMP_USER_NOTIF_FD_SYNC_WAKE_UP: libc::c_ulong = 1;
    // SAFETY: this ioctl takes the flags by value; no memory is passed.
    let rc = unsafe {
        libc::ioctl(
            fd.as_raw_fd(),
            libc::SECCOMP_IOCTL_NOTIF_SET_FLAGS,
            SECCOMP_USER_NOTIF_FD_SYNC_WAKE_UP,
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Is the notification `id` still pending (its tracee alive and still waiting)?
pub fn id_valid(fd: BorrowedFd<'_>, id: u64) -> bool {
    let mut id = id;
    // SAFETY: the ioctl reads one u64 through a valid pointer.
    let rc = unsafe { libc::ioctl(fd.as_raw_fd(), libc::SECCOMP_IOCTL_NOTIF_ID_VALID, &mut id) };
    rc == 0
}

/// Lets the trapped syscall proceed in the kernel.
///
/// # Errors
/// ENOENT when the tracee is gone (nothing to do).
pub fn respond_continue(fd: BorrowedFd<'_>, id: u64) -> io::Result<()> {
    send(fd, id, 0, libc::SECCOMP_USER_NOTIF_FLAG_CONTINUE as u32)
}

/// Fails the trapped syscall with `errno` (positive, e.g. `libc::EACCES`).
///
/// # Errors
/// ENOENT when the tracee is gone (nothing to do).
pub fn respond_errno(fd: BorrowedFd<'_>, id: u64, errno: i32) -> io::Result<()> {
    send(fd, id, -errno, 0)
}

/// Answers the trapped syscall (not run) with its return value: `val >= 0`
/// is the value, `val < 0` is `-errno`.
///
/// # Errors
/// ENOENT when the tracee is gone (nothing to do).
pub fn respond_value(fd: BorrowedFd<'_>, id: u64, val: i64) -> io::Result<()> {
    if val < 0 {
        send_val(fd, id, 0, val as i32, 0)
    } else {
        send_val(fd, id, val, 0, 0)
    }
}

/// Puts `src` (an fd of ours) into the process of notification `id` at
/// its lowest free fd number (nothing of the caller's is replaced),
/// close-on-exec if `cloexec`; returns that number. The notification must
/// still be waiting.
///
/// # Errors
/// ENOENT when it no longer waits; EMFILE when its table is full.
pub fn add_fd(fd: BorrowedFd<'_>, id: u64, src: BorrowedFd<'_>, cloexec: bool) -> io::Result<i32> {
    let mut a = libc::seccomp_notif_addfd {
        id,
        flags: 0,
        srcfd: src.as_raw_fd() as u32,
        newfd: 0,
        newfd_flags: if cloexec { libc::O_CLOEXEC as u32 } else { 0 },
    };
    // SAFETY: the pointer is valid for the struct's size, which matches the ioctl's.
    let rc = unsafe { libc::ioctl(fd.as_raw_fd(), libc::SECCOMP_IOCTL_NOTIF_ADDFD, &mut a) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(rc)
}

/// Puts `src` (an fd of ours) into the process of notification `id` at fd
/// number `at`, replacing what was there (`SECCOMP_ADDFD_FLAG_SETFD`),
/// close-on-exec if `cloexec`. The notification must still be waiting.
///
/// # Errors
/// ENOENT when it no longer waits; EMFILE/EBADF when `at` is out of the
/// process's limits.
pub fn install_fd(
    fd: BorrowedFd<'_>,
    id: u64,
    src: BorrowedFd<'_>,
    at: i32,
    cloexec: bool,
) -> io::Result<()> {
    const SECCOMP_ADDFD_FLAG_SETFD: u32 = 1;
    let mut a = libc::seccomp_notif_addfd {
        id,
        flags: SECCOMP_ADDFD_FLAG_SETFD,
        srcfd: src.as_raw_fd() as u32,
        newfd: at as u32,
        newfd_flags: if cloexec { libc::O_CLOEXEC as u32 } else { 0 },
    };
    // SAFETY: the pointer is valid for the struct's size, which matches the ioctl's.
    let rc = unsafe { libc::ioctl(fd.as_raw_fd(), libc::SECCOMP_IOCTL_NOTIF_ADDFD, &mut a) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

fn send(fd: BorrowedFd<'_>, id: u64, error: i32, flags: u32) -> io::Result<()> {
    send_val(fd, id, 0, error, flags)
}

fn send_val(fd: BorrowedFd<'_>, id: u64, val: i64, error: i32, flags: u32) -> io::Result<()> {
    let mut r = libc::seccomp_notif_resp {
        id,
        val,
        error,
        flags,
    };
    // SAFETY: the pointer is valid for the struct's size, which matches the ioctl's.
    let rc = unsafe { libc::ioctl(fd.as_raw_fd(), libc::SECCOMP_IOCTL_NOTIF_SEND, &mut r) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}
