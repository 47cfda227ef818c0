//! The floor any user-notify supervisor pays: a bare seccomp user-notify
//! filter on execve/execveat whose listener, a thread of the timer, answers
//! every notification with CONTINUE at once (no policy, no /proc reads, no
//! audit). The timed command loads the filter itself before it execs and
//! hands the listener over a socket pair; if that fails, the command fails
//! to start and so does the timing.

use std::os::fd::AsRawFd;
use std::os::unix::process::CommandExt;
use std::process::Command;

/// Makes `cmd` load a bare user-notify filter on execve/execveat before it
/// execs and send the listener here; the returned thread answers every
/// notification with CONTINUE until the tree has exited, and returns how
/// many it answered.
///
/// Long because the filter, its load and the listener's send all run in
/// the child between fork and exec (async-signal-safe calls only), in one
/// `pre_exec` closure: kept together so that constraint is seen in one place.
pub fn bare_notify(cmd: &mut Command) -> Result<std::thread::JoinHandle<u64>, String> {
    use std::os::fd::{FromRawFd, OwnedFd};
    let mut sv = [0; 2];
    // SAFETY: sv has room for the two fds socketpair writes.
    if unsafe {
        libc::socketpair(
            libc::AF_UNIX,
            libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC,
            0,
            sv.as_mut_ptr(),
        )
    } != 0
    {
        return Err(format!("socketpair: {}", std::io::Error::last_os_error()));
    }
    // SAFETY: both fds were just created and are owned here.
    let (ours, theirs) = unsafe { (OwnedFd::from_raw_fd(sv[0]), OwnedFd::from_raw_fd(sv[1])) };
    let child_end = theirs.as_raw_fd();
    // SAFETY: runs in the forked child before exec: prctl, seccomp, sendmsg
    // and close only, on memory prepared here.
    unsafe {
        cmd.pre_exec(move || {
            const RET_ALLOW: u32 = 0x7fff_0000;
            const RET_USER_NOTIF: u32 = 0x7fc0_0000;
            const AUDIT_ARCH_X86_64: u32 = 0xc000_003e;
            let f = |code: u16, jt: u8, jf: u8, k: u32| libc::sock_filter { code, jt, jf, k };
            let prog = [
                f(0x20, 0, 0, 4), // A = arch
                f(0x15, 0, 3, AUDIT_ARCH_X86_64),
                f(0x20, 0, 0, 0), // A = nr
                f(0x15, 2, 0, libc::SYS_execve as u32),
                f(0x15, 1, 0, libc::SYS_execveat as u32),
                f(0x06, 0, 0, RET_ALLOW),
                f(0x06, 0, 0, RET_USER_NOTIF),
            ];
            let fprog = libc::sock_fprog {
                len: prog.len() as u16,
                filter: prog.as_ptr() as *mut libc::sock_filter,
            };
            if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            let fd = libc::syscall(
                libc::SYS_seccomp,
                libc::SECCOMP_SET_MODE_FILTER,
                libc::SECCOMP_FILTER_FLAG_NEW_LISTENER,
                &fprog as *const libc::sock_fprog,
            ) as i32;
            if fd < 0 {
                return Err(std::io::Error::last_os_error());
            }
            let mut byte = [0u8; 1];
            let mut iov = libc::iovec {
                iov_base: byte.as_mut_ptr().cast(),
                iov_len: 1,
            };
            let mut space = [0u8; 64];
            let mut msg: libc::msghdr = std::mem::zeroed();
            msg.msg_iov = &mut iov;
            msg.msg_iovlen = 1;
            msg.msg_control = space.as_mut_ptr().cast();
            msg.msg_controllen = libc::CMSG_SPACE(4) as usize;
            let c = libc::CMSG_FIRSTHDR(&msg);
            (*c).cmsg_level = libc::SOL_SOCKET;
            (*c).cmsg_type = libc::SCM_RIGHTS;
            (*c).cmsg_len = libc::CMSG_LEN(4) as usize;
            std::ptr::write_unaligned(libc::CMSG_DATA(c).cast::<i32>(), fd);
            let sent = libc::sendmsg(child_end, &msg, 0);
            libc::close(fd);
            if sent < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    Ok(std::thread::spawn(move || {
        let _keep = theirs; // the child's end, open until the child has it
        respond_all(ours)
    }))
}

/// Receives the listener over `sock`, then answers CONTINUE until POLLHUP.
fn respond_all(sock: std::os::fd::OwnedFd) -> u64 {
    use std::os::fd::{AsFd, FromRawFd, OwnedFd};
    let mut byte = [0u8; 1];
    let mut iov = libc::iovec {
        iov_base: byte.as_mut_ptr().cast(),
        iov_len: 1,
    };
    let mut space = [0u8; 64];
    // SAFETY: msghdr is plain data; the buffers outlive the call.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = space.as_mut_ptr().cast();
    msg.msg_controllen = space.len();
    // SAFETY: as above.
    let n = unsafe { libc::recvmsg(sock.as_raw_fd(), &mut msg, libc::MSG_CMSG_CLOEXEC) };
    if n <= 0 {
        return 0;
    }
    // SAFETY: the kernel filled msg; the first header, if any, is ours.
    let fd = unsafe {
        let c = libc::CMSG_FIRSTHDR(&msg);
        if c.is_null() || (*c).cmsg_type != libc::SCM_RIGHTS {
            return 0;
        }
        OwnedFd::from_raw_fd(std::ptr::read_unaligned(libc::CMSG_DATA(c).cast::<i32>()))
    };
    let _ = agentsh_proto::notif::set_sync_wakeup(fd.as_fd());
    let mut answered = 0;
    loop {
        let mut pfd = libc::pollfd {
            fd: fd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd.
        if unsafe { libc::poll(&mut pfd, 1, -1) } < 0 || pfd.revents & libc::POLLIN == 0 {
            return answered;
        }
        if let Ok(n) = agentsh_proto::notif::recv(fd.as_fd()) {
            if agentsh_proto::notif::respond_continue(fd.as_fd(), n.id).is_ok() {
                answered += 1;
            }
        }
    }
}
