//! The relay helper: carries the notify fd from unixwrap to the server.
//!
//! The shim forks it *before* exec'ing unixwrap, so it carries no filter. It
//! receives the notify fd on its end of the SOCK_SEQPACKET socketpair, connects
//! to the server's `notify_socket`, sends `[0xA7][shim pid u32 LE]` with the fd
//! in SCM_RIGHTS, reads the server's status byte and writes the ACK to unixwrap:
//! 1 only if the server said 1, 0 on every failure (fail closed). Under the
//! ptrace backend unixwrap sends [`agentsh_proto::handoff::TRACE_ME_BYTE`]
//! without an fd and the relay sends `[0xA8][shim pid u32 LE]` alone: the
//! server seizes the wrapper before it answers. It closes its
//! copy of the notify fd *before* the ACK (a copy held anywhere would make the
//! tree's execs block forever once the server is gone), then `_exit`s; unixwrap
//! reaps it, so nothing is left for PID 1.
//!
//! Failure modes: unixwrap dies → PR_SET_PDEATHSIG kills the relay; unixwrap
//! runs the command unsupervised (`--on-kernel-refusal exec`) → it closes its
//! end, the relay reads EOF and exits; everything is bounded by a deadline.
//!
//! The child runs only raw syscalls on memory prepared before fork (no
//! allocation), so a lock held by another thread at fork time cannot bite.

use std::io;
use std::os::fd::RawFd;

/// Everything the relay child needs, prepared before fork.
pub struct RelayPlan {
    socket_addr: libc::sockaddr_un,
    socket_addr_len: libc::socklen_t,
    handoff: [u8; agentsh_proto::handoff::HANDOFF_LEN],
    trace: [u8; agentsh_proto::handoff::HANDOFF_LEN],
    deadline_ms: i32,
    shim_pid: libc::pid_t,
}

impl RelayPlan {
    /// # Errors
    /// `InvalidInput` if `notify_socket` does not fit a `sockaddr_un`.
    pub fn new(notify_socket: &str, deadline_secs: u32) -> io::Result<RelayPlan> {
        // A path, or `@name` (abstract): what the server issues.
        let (addr, len) = agentsh_proto::seqpacket::sockaddr(std::path::Path::new(notify_socket))?;
        // SAFETY: getpid cannot fail.
        let shim_pid = unsafe { libc::getpid() };
        Ok(RelayPlan {
            socket_addr: addr,
            socket_addr_len: len,
            handoff: agentsh_proto::handoff::encode_handoff(shim_pid as u32),
            trace: agentsh_proto::handoff::encode_trace(shim_pid as u32),
            deadline_ms: (deadline_secs.clamp(1, 60) * 1000) as i32,
            shim_pid,
        })
    }
}

/// A started relay: the wrapper's end of the socketpair (close-on-exec
/// cleared, to become unixwrap's `AGENTSH_NOTIFY_SOCK_FD`) and the relay's pid.
pub struct Relay {
    pub wrapper_fd: RawFd,
    pub pid: libc::pid_t,
}

impl Relay {
    /// Undo after a failed exec of unixwrap: nothing was installed yet.
    pub fn abandon(self) {
        // SAFETY: plain syscalls on our own child and fd.
        unsafe {
            libc::close(self.wrapper_fd);
            libc::kill(self.pid, libc::SIGKILL);
            let mut status = 0;
            libc::waitpid(self.pid, &mut status, 0);
        }
    }
}

/// Creates the socketpair and forks the relay helper.
///
/// # Errors
/// socketpair, fcntl or fork failures (EMFILE, EAGAIN, ENOMEM).
pub fn start(plan: &RelayPlan) -> io::Result<Relay> {
    use std::os::fd::IntoRawFd;
    let (a, b) = agentsh_proto::seqpacket::pair()?;
    // Raw from here: the fork below must not run destructors in the child.
    let (wrapper_fd, relay_fd) = (a.into_raw_fd(), b.into_raw_fd());
    // SAFETY: fork in a process whose child only runs `relay_main` (raw
    // syscalls on pre-built data) and then `_exit`s.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        let e = io::Error::last_os_error();
        // SAFETY: closing our own fds.
        unsafe {
            libc::close(wrapper_fd);
            libc::close(relay_fd);
        }
        return Err(e);
    }
    if pid == 0 {
        // SAFETY: we are the freshly forked child.
        unsafe { relay_main(plan, relay_fd, wrapper_fd) }
    }
    // SAFETY: closing our copy of the relay's end.
    unsafe { libc::close(relay_fd) };
    match inheritable_above_stdio(wrapper_fd) {
        Ok(wrapper_fd) => Ok(Relay { wrapper_fd, pid }),
        Err(e) => {
            Relay { wrapper_fd, pid }.abandon();
            Err(e)
        }
    }
}

/// unixwrap inherits the fd (FD_CLOEXEC cleared). An fd below 3 (the SDK
/// started us with stdin, stdout or stderr closed) is moved to 3 or above:
/// 0-2 belong to the command, and the slot is closed again, as it was.
fn inheritable_above_stdio(fd: RawFd) -> io::Result<RawFd> {
    // SAFETY: fcntl/close on an fd this process owns.
    unsafe {
        if fd < 3 {
            let moved = libc::fcntl(fd, libc::F_DUPFD, 3);
            if moved < 0 {
                return Err(io::Error::last_os_error());
            }
            libc::close(fd);
            // F_DUPFD leaves FD_CLOEXEC clear on the new fd.
            return Ok(moved);
        }
        if libc::fcntl(fd, libc::F_SETFD, 0) < 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(fd)
}

/// The relay child. Never returns.
///
/// # Safety
/// Only to be called in the child right after fork.
unsafe fn relay_main(plan: &RelayPlan, relay_fd: RawFd, wrapper_fd: RawFd) -> ! {
    // SAFETY: called in the freshly forked child (the caller's contract); raw syscalls on our own fds and the plan prepared before fork.
    unsafe {
        libc::prctl(
            libc::PR_SET_PDEATHSIG,
            libc::SIGKILL as libc::c_ulong,
            0,
            0,
            0,
        );
        if libc::getppid() != plan.shim_pid {
            libc::_exit(1);
        }
        libc::close(wrapper_fd);
        // Hold none of the command's fds: a pipe's write end kept open here would
        // delay the reader's EOF until the relay exits.
        close_all_but(relay_fd);
        let ok = relay_once(plan, relay_fd);
        let ack = if ok {
            agentsh_proto::handoff::Ack::Accepted
        } else {
            agentsh_proto::handoff::Ack::Refused
        }
        .to_byte();
        libc::send(relay_fd, (&ack as *const u8).cast(), 1, libc::MSG_NOSIGNAL);
        libc::_exit(i32::from(!ok));
    }
}

/// What unixwrap sent up the socketpair.
enum Received {
    /// The notify fd.
    Fd(RawFd),
    /// "Have the server trace me" (no fd).
    Trace,
}

/// Receives the notify fd (or the trace request) and hands it to the
/// server; true only on the server's ACK.
///
/// # Safety
/// Only in the relay child after fork (async-signal-safe calls only);
/// `relay_fd` is its end of the socketpair.
unsafe fn relay_once(plan: &RelayPlan, relay_fd: RawFd) -> bool {
    // SAFETY: raw syscalls on the relay's own socketpair end, in the forked child.
    unsafe {
        let mut pfd = libc::pollfd {
            fd: relay_fd,
            events: libc::POLLIN,
            revents: 0,
        };
        if libc::poll(&mut pfd, 1, plan.deadline_ms) != 1 {
            return false;
        }
        match recv_fd(relay_fd) {
            Some(Received::Fd(notify_fd)) => {
                let ok = hand_to_server(plan, &plan.handoff, notify_fd);
                libc::close(notify_fd);
                ok
            }
            Some(Received::Trace) => hand_to_server(plan, &plan.trace, -1),
            None => false,
        }
    }
}

/// One datagram `[WRAPPER_FD_BYTE]` + one fd in SCM_RIGHTS, or
/// `[TRACE_ME_BYTE]` with no fd; anything else is refused.
///
/// # Safety
/// `sock` is an open SEQPACKET socket owned by the caller; only in the relay
/// child (no allocation).
unsafe fn recv_fd(sock: RawFd) -> Option<Received> {
    // SAFETY: recvmsg into buffers we own, sized for the control messages; every fd received is either returned or closed.
    unsafe {
        let mut byte = 0u8;
        let mut iov = libc::iovec {
            iov_base: (&mut byte as *mut u8).cast(),
            iov_len: 1,
        };
        // Room for a few fds, so a sender passing more than one is detected.
        let mut cbuf = [0u64; 16];
        let mut msg: libc::msghdr = std::mem::zeroed();
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = cbuf.as_mut_ptr().cast();
        msg.msg_controllen = std::mem::size_of_val(&cbuf) as _;
        let n = libc::recvmsg(sock, &mut msg, libc::MSG_CMSG_CLOEXEC);
        let mut fds = [-1; 8];
        let mut count = 0;
        let mut c = libc::CMSG_FIRSTHDR(&msg);
        while !c.is_null() {
            if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SCM_RIGHTS {
                let data = libc::CMSG_DATA(c) as *const RawFd;
                let payload = (*c).cmsg_len as usize - libc::CMSG_LEN(0) as usize;
                for i in 0..payload / std::mem::size_of::<RawFd>() {
                    if count < fds.len() {
                        fds[count] = std::ptr::read_unaligned(data.add(i));
                        count += 1;
                    }
                }
            }
            c = libc::CMSG_NXTHDR(&msg, c);
        }
        let whole = n == 1 && msg.msg_flags & libc::MSG_CTRUNC == 0;
        if whole && byte == agentsh_proto::handoff::WRAPPER_FD_BYTE && count == 1 {
            return Some(Received::Fd(fds[0]));
        }
        if whole && byte == agentsh_proto::handoff::TRACE_ME_BYTE && count == 0 {
            return Some(Received::Trace);
        }
        for fd in &fds[..count] {
            libc::close(*fd);
        }
        None
    }
}

/// Sends `record` (with `notify_fd` in SCM_RIGHTS unless it is -1) and
/// reads the server's status byte.
///
/// # Safety
/// `notify_fd` is -1 or an fd the caller owns; only in the relay child.
unsafe fn hand_to_server(
    plan: &RelayPlan,
    record: &[u8; agentsh_proto::handoff::HANDOFF_LEN],
    notify_fd: RawFd,
) -> bool {
    // SAFETY: the message and its control buffer live for the call; the fd sent is the one received from unixwrap.
    unsafe {
        let sock = connect(plan);
        if sock < 0 {
            return false;
        }
        let mut iov = libc::iovec {
            iov_base: record.as_ptr() as *mut libc::c_void,
            iov_len: record.len(),
        };
        // The credentials (the server's proof of who sends: gVisor answers
        // SO_PEERCRED with the listener's own) and, for notify, the fd.
        let mut cbuf = [0u64; 8];
        let cred_space = libc::CMSG_SPACE(std::mem::size_of::<libc::ucred>() as u32) as usize;
        let fd_space = libc::CMSG_SPACE(std::mem::size_of::<RawFd>() as u32) as usize;
        let mut msg: libc::msghdr = std::mem::zeroed();
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = cbuf.as_mut_ptr().cast();
        msg.msg_controllen = (cred_space + if notify_fd >= 0 { fd_space } else { 0 }) as _;
        let c = libc::CMSG_FIRSTHDR(&msg);
        (*c).cmsg_level = libc::SOL_SOCKET;
        (*c).cmsg_type = libc::SCM_CREDENTIALS;
        (*c).cmsg_len = libc::CMSG_LEN(std::mem::size_of::<libc::ucred>() as u32) as _;
        let me = libc::ucred {
            pid: libc::getpid(),
            uid: libc::geteuid(),
            gid: libc::getegid(),
        };
        std::ptr::write_unaligned(libc::CMSG_DATA(c).cast::<libc::ucred>(), me);
        if notify_fd >= 0 {
            let c = libc::CMSG_NXTHDR(&msg, c);
            if c.is_null() {
                libc::close(sock);
                return false;
            }
            (*c).cmsg_level = libc::SOL_SOCKET;
            (*c).cmsg_type = libc::SCM_RIGHTS;
            (*c).cmsg_len = libc::CMSG_LEN(std::mem::size_of::<RawFd>() as u32) as _;
            std::ptr::write_unaligned(libc::CMSG_DATA(c) as *mut RawFd, notify_fd);
        }
        let sent = libc::sendmsg(sock, &msg, libc::MSG_NOSIGNAL);
        let mut status = 0u8;
        let ok = sent == record.len() as isize
            && libc::recv(sock, (&mut status as *mut u8).cast(), 1, 0) == 1
            && agentsh_proto::handoff::Ack::from_byte(status)
                == agentsh_proto::handoff::Ack::Accepted;
        libc::close(sock);
        ok
    }
}

/// A SEQPACKET socket connected to the notify socket, or -1.
///
/// # Safety
/// Only in the relay child (raw syscalls, no allocation).
unsafe fn connect(plan: &RelayPlan) -> RawFd {
    // SAFETY: a socket of our own connected to the prepared sockaddr_un.
    unsafe {
        let s = libc::socket(libc::AF_UNIX, libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC, 0);
        if s < 0 {
            return -1;
        }
        let tv = libc::timeval {
            tv_sec: (plan.deadline_ms / 1000) as libc::time_t,
            tv_usec: 0,
        };
        let tvp = (&tv as *const libc::timeval).cast();
        let tvlen = std::mem::size_of::<libc::timeval>() as libc::socklen_t;
        libc::setsockopt(s, libc::SOL_SOCKET, libc::SO_SNDTIMEO, tvp, tvlen);
        libc::setsockopt(s, libc::SOL_SOCKET, libc::SO_RCVTIMEO, tvp, tvlen);
        let rc = libc::connect(
            s,
            (&plan.socket_addr as *const libc::sockaddr_un).cast(),
            plan.socket_addr_len,
        );
        if rc == 0 {
            return s;
        }
        libc::close(s);
        -1
    }
}

/// Closes every fd except `keep` (close_range, with a bounded loop as fallback).
///
/// # Safety
/// Closes fds other code may hold: only in the relay child, where nothing
/// else runs.
unsafe fn close_all_but(keep: RawFd) {
    // SAFETY: closing fds of this forked child only.
    unsafe {
        let keep = keep as u32;
        if keep > 0 {
            close_range(0, keep - 1);
        }
        close_range(keep + 1, u32::MAX);
    }
}

/// `close_range(lo, hi)`, or a loop of `close` where the kernel lacks it.
///
/// # Safety
/// As [`close_all_but`].
unsafe fn close_range(lo: u32, hi: u32) {
    // SAFETY: closing fds of this forked child only.
    unsafe {
        if libc::syscall(libc::SYS_close_range, lo, hi, 0) != 0 {
            // Kernels before 5.9: close what a process plausibly holds.
            for fd in lo..=hi.min(4096) {
                libc::close(fd as RawFd);
            }
        }
    }
}
