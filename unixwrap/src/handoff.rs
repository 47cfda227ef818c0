//! The notify-fd handoff, unixwrap's side, to one of two peers ([`Up`]).
//!
//! Exec'd by the shim (or `agentsh wrap`): hop 1, unixwrap → relay helper,
//! and back. unixwrap sends one SOCK_SEQPACKET datagram, payload
//! [`WRAPPER_FD_BYTE`], the notify fd in SCM_RIGHTS; the relay answers one
//! [`Ack`] byte once the server took the fd. Then unixwrap reaps the relay (its
//! child): the user's shell, which inherits unixwrap's pid, must not find a
//! zombie child it never started.
//!
//! Run in the shim's own process ([`crate::run_in_place`]): the shim
//! connected to the server's notify socket before anything was installed,
//! so the record goes straight there (`[HANDOFF_MAGIC][pid]`, the process's
//! credentials and the fd) and the server's status byte is the [`Ack`]: no
//! relay, no second hop.
//!
//! Failure modes (all fail closed: the filter is loaded, so the caller exits
//! 126): the send fails; the ACK does not come within the deadline; EOF; a
//! datagram that is not exactly one byte; any byte other than "accepted".
//! A relay that does not exit after acking is killed (it is our unreaped child,
//! so its pid cannot have been reused) and reaped.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::time::{Duration, Instant};

use agentsh_proto::handoff::{Ack, WRAPPER_FD_BYTE};

/// Where the notify fd (or the request to be traced) goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Up {
    /// The relay helper the shim forked, over the socketpair.
    Relay,
    /// The server's notify socket, connected by the shim: the handoff
    /// record naming `pid` (this process), with its credentials.
    Server { pid: u32, ack_timeout: Duration },
}

/// `PR_SET_PTRACER` (Yama's prctl, "Yama" in ASCII).
const PR_SET_PTRACER: libc::c_int = 0x5961_6d61;

/// Names process `tracer` (the server) this process's ptracer, before it
/// asks to be seized: where Yama (real, or gVisor's emulation) lets a
/// process without `CAP_SYS_PTRACE` trace only its descendants, a process
/// may name another that may trace it. The naming lasts across exec and
/// covers only this process; the tree's filter refuses the prctl
/// afterwards, so nothing in the tree can name another or undo it.
///
/// # Errors
/// The prctl's errno: `EINVAL` where there is no Yama (nothing to name:
/// the caller goes on), others where there is.
pub fn name_tracer(tracer: u32) -> io::Result<()> {
    // SAFETY: prctl with integer arguments only.
    let rc = unsafe { libc::prctl(PR_SET_PTRACER, libc::c_ulong::from(tracer), 0, 0, 0) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Asks the relay to have the server trace this process (ptrace backend):
/// one datagram `[TRACE_ME_BYTE]`, no fd (`send`, which the filter lets
/// through; straight to the server the courier sends, see [`Courier`]).
///
/// # Errors
/// send's errno (EPIPE/ECONNRESET when the relay is gone).
pub fn send_trace_request(sock: BorrowedFd<'_>) -> io::Result<()> {
    let payload = [agentsh_proto::handoff::TRACE_ME_BYTE];
    loop {
        // SAFETY: sends one byte from a live buffer.
        let n = unsafe {
            libc::send(
                sock.as_raw_fd(),
                payload.as_ptr().cast(),
                payload.len(),
                libc::MSG_NOSIGNAL,
            )
        };
        if n == 1 {
            return Ok(());
        }
        let e = io::Error::last_os_error();
        if n >= 0 || e.raw_os_error() != Some(libc::EINTR) {
            return Err(if n >= 0 {
                io::Error::other("short send of the trace request")
            } else {
                e
            });
        }
    }
}

/// Sends `notify_fd` up `sock` in one datagram.
///
/// # Errors
/// sendmsg's errno (EPIPE/ECONNRESET when the relay is gone).
pub fn send_notify_fd(sock: BorrowedFd<'_>, notify_fd: BorrowedFd<'_>) -> io::Result<()> {
    let mut payload = [WRAPPER_FD_BYTE];
    let mut iov = libc::iovec {
        iov_base: payload.as_mut_ptr().cast(),
        iov_len: payload.len(),
    };
    // u64 storage keeps the control buffer aligned for cmsghdr.
    let mut cbuf = [0u64; 8];
    // SAFETY: CMSG_SPACE is a pure size computation.
    let space = unsafe { libc::CMSG_SPACE(std::mem::size_of::<RawFd>() as u32) } as usize;
    if space > std::mem::size_of_val(&cbuf) {
        return Err(io::Error::other("control buffer too small"));
    }
    // SAFETY: msghdr is plain data; every field we rely on is set below.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = cbuf.as_mut_ptr().cast();
    msg.msg_controllen = space as _;
    // SAFETY: msg_control points at `space` zeroed, aligned bytes, enough for
    // one cmsghdr carrying one fd, so CMSG_FIRSTHDR is non-null and CMSG_DATA
    // points inside the buffer.
    unsafe {
        let cmsg = libc::CMSG_FIRSTHDR(&msg);
        (*cmsg).cmsg_level = libc::SOL_SOCKET;
        (*cmsg).cmsg_type = libc::SCM_RIGHTS;
        (*cmsg).cmsg_len = libc::CMSG_LEN(std::mem::size_of::<RawFd>() as u32) as _;
        std::ptr::write_unaligned(libc::CMSG_DATA(cmsg).cast::<RawFd>(), notify_fd.as_raw_fd());
    }
    loop {
        // SAFETY: msg and everything it points at are live for the call.
        let n = unsafe { libc::sendmsg(sock.as_raw_fd(), &msg, libc::MSG_NOSIGNAL) };
        if n >= 0 {
            return if n as usize == payload.len() {
                Ok(())
            } else {
                Err(io::Error::other("short send of the notify fd"))
            };
        }
        let e = io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::EINTR) {
            return Err(e);
        }
    }
}

/// A thread started *before* the filter is loaded, which sends the notify
/// fd once there is one.
///
/// Why: with `egress:` the filter traps every `sendmsg` (the destination is
/// behind a pointer no BPF program can read), and a trapped call of this
/// thread would wait on a listener nobody holds yet: the fd it is sending.
/// Filters are per thread and inherited at clone (unixwrap loads without
/// TSYNC), so a thread cloned before the load is not under the filter; it
/// runs only [`send_notify_fd`] and is joined before anything else happens,
/// so nothing of the tree ever runs unfiltered (the exec that follows is the
/// main thread's, and the courier is gone by then). Straight to the server
/// ([`Up::Server`]) the courier also carries the ptrace backend's request
/// to be traced: that record goes with the process's credentials, by
/// `sendmsg`, which the filter sends to a tracer not yet attached (ENOSYS).
pub struct Courier {
    /// `Some(fd)`: the notify fd; `None`: the request to be traced.
    tx: Option<std::sync::mpsc::Sender<Option<RawFd>>>,
    thread: Option<std::thread::JoinHandle<io::Result<()>>>,
}

impl Courier {
    /// Starts the courier for `sock_fd` (unixwrap's end of the socketpair,
    /// or the shim's connection to the server: `up` says which). Must be
    /// called after the last `unshare` (a second thread makes
    /// `unshare(CLONE_NEWNS)` fail) and before the filter is loaded.
    ///
    /// # Errors
    /// The thread could not be started.
    pub fn start(sock_fd: RawFd, up: Up) -> io::Result<Courier> {
        let (tx, rx) = std::sync::mpsc::channel::<Option<RawFd>>();
        let thread = std::thread::Builder::new()
            .name("notify-courier".into())
            .spawn(move || {
                let Ok(what) = rx.recv() else {
                    return Ok(());
                };
                // SAFETY: both fds stay open until the main thread has joined
                // this thread (it waits in `send`).
                let sock = unsafe { BorrowedFd::borrow_raw(sock_fd) };
                // SAFETY: as above.
                let notify = what.map(|fd| unsafe { BorrowedFd::borrow_raw(fd) });
                match (up, notify) {
                    (Up::Relay, Some(notify)) => send_notify_fd(sock, notify),
                    (Up::Relay, None) => send_trace_request(sock),
                    (Up::Server { pid, ack_timeout }, notify) => {
                        let record = match notify {
                            Some(_) => agentsh_proto::handoff::encode_handoff(pid),
                            None => agentsh_proto::handoff::encode_trace(pid),
                        };
                        // Where the kernel names the sender by its thread
                        // (gVisor, which answers SO_PEERCRED with this
                        // process's own credentials), the server checks that
                        // thread is one of this process: it stays alive
                        // until the answer is there. Elsewhere the kernel
                        // names the process, and the main thread waits
                        // alone (one thread wake-up less per first shell).
                        // Unsure: it stays.
                        let by_thread = agentsh_proto::seqpacket::peer_cred(sock)
                            .map_or(true, |p| p.pid == std::process::id());
                        agentsh_proto::seqpacket::send_with_creds(sock, &record, notify)?;
                        if by_thread {
                            let _ = poll_in(sock_fd, ack_timeout);
                        }
                        Ok(())
                    }
                }
            })?;
        Ok(Courier {
            tx: Some(tx),
            thread: Some(thread),
        })
    }

    /// Has the courier send `notify_fd` and waits for it to finish.
    ///
    /// # Errors
    /// sendmsg's errno; or the courier died.
    pub fn send(self, notify_fd: BorrowedFd<'_>) -> io::Result<()> {
        self.carry(Some(notify_fd.as_raw_fd()))
    }

    /// Has the courier send the request to be traced (ptrace backend) and
    /// waits for it to finish.
    ///
    /// # Errors
    /// As [`Courier::send`].
    pub fn send_trace(self) -> io::Result<()> {
        self.carry(None)
    }

    fn carry(mut self, what: Option<RawFd>) -> io::Result<()> {
        let tx = self
            .tx
            .take()
            .ok_or_else(|| io::Error::other("courier already used"))?;
        tx.send(what)
            .map_err(|_| io::Error::other("the courier thread is gone"))?;
        drop(tx);
        match self.thread.take().map(std::thread::JoinHandle::join) {
            Some(Ok(r)) => r,
            Some(Err(_)) => Err(io::Error::other("the courier thread panicked")),
            None => Err(io::Error::other("courier already used")),
        }
    }
}

impl Drop for Courier {
    fn drop(&mut self) {
        // Unused (the load failed): the closed channel ends the thread.
        drop(self.tx.take());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Why there is no accepted ACK.
#[derive(Debug)]
pub enum AckError {
    TimedOut(Duration),
    Eof,
    /// A datagram that is not exactly one byte.
    Malformed(usize),
    Refused(u8),
    Io(io::Error),
}

impl std::fmt::Display for AckError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AckError::TimedOut(d) => {
                write!(f, "no ACK from the relay or server within {}s", d.as_secs())
            }
            AckError::Eof => write!(f, "the relay or server closed the socket without an ACK"),
            AckError::Malformed(n) => {
                write!(
                    f,
                    "the relay or server sent a {n}-byte reply instead of a 1-byte ACK"
                )
            }
            AckError::Refused(b) => write!(f, "the server refused the notify fd (ACK byte {b})"),
            AckError::Io(e) => write!(f, "reading the ACK: {e}"),
        }
    }
}

/// Waits up to `timeout` for the one-byte ACK (the relay's, or the
/// server's own status byte).
///
/// # Errors
/// Anything but an accepted ACK, see [`AckError`].
pub fn wait_ack(sock: BorrowedFd<'_>, timeout: Duration) -> Result<(), AckError> {
    wait_ack_with(sock, timeout, false).map(|_| ())
}

/// [`wait_ack`] from the server itself, which may send the tree's Landlock
/// ruleset with an accepting ACK (built ahead: see `ahead`): the fd, if it
/// came (close-on-exec). More than one fd, or one with a refusal, is not an
/// accepted ACK (every fd received is closed).
///
/// # Errors
/// As [`wait_ack`].
pub fn wait_ack_from_server(
    sock: BorrowedFd<'_>,
    timeout: Duration,
) -> Result<Option<OwnedFd>, AckError> {
    wait_ack_with(sock, timeout, true)
}

fn wait_ack_with(
    sock: BorrowedFd<'_>,
    timeout: Duration,
    take_fd: bool,
) -> Result<Option<OwnedFd>, AckError> {
    let deadline = Instant::now() + timeout;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(AckError::TimedOut(timeout));
        }
        match poll_in(sock.as_raw_fd(), left) {
            Ok(false) => continue,
            Ok(true) => {}
            Err(e) if e.raw_os_error() == Some(libc::EINTR) => continue,
            Err(e) => return Err(AckError::Io(e)),
        }
        let mut buf = [0u8; 2];
        let (n, mut fds) = if take_fd {
            match agentsh_proto::seqpacket::recv_with_fds(sock.as_raw_fd(), &mut buf, 1) {
                Ok((n, fds, _)) => (n as isize, fds),
                Err(e) => match e.raw_os_error() {
                    Some(libc::EINTR | libc::EAGAIN) => continue,
                    _ => return Err(AckError::Io(e)),
                },
            }
        } else {
            // SAFETY: buf is valid for its length; MSG_TRUNC makes the return
            // the datagram's real length, so an oversized reply is detected.
            let n = unsafe {
                libc::recv(
                    sock.as_raw_fd(),
                    buf.as_mut_ptr().cast(),
                    buf.len(),
                    libc::MSG_DONTWAIT | libc::MSG_TRUNC,
                )
            };
            if n < 0 {
                let e = io::Error::last_os_error();
                match e.raw_os_error() {
                    Some(libc::EINTR | libc::EAGAIN) => continue,
                    _ => return Err(AckError::Io(e)),
                }
            }
            (n, Vec::new())
        };
        return match n {
            0 => Err(AckError::Eof),
            1 => match Ack::from_byte(buf[0]) {
                Ack::Accepted => Ok(fds.pop()),
                Ack::Refused => Err(AckError::Refused(buf[0])),
            },
            n => Err(AckError::Malformed(n as usize)),
        };
    }
}

/// poll(POLLIN) on one fd for at most `timeout`; true if readable or hung up.
fn poll_in(fd: RawFd, timeout: Duration) -> io::Result<bool> {
    let mut pfd = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    let ms = timeout.as_millis().clamp(1, i32::MAX as u128) as libc::c_int;
    // SAFETY: one valid pollfd.
    let rc = unsafe { libc::poll(&mut pfd, 1, ms) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(rc > 0)
}

/// How long a relay may take to exit after it acked (or after fd 3 closed).
pub const RELAY_EXIT_DEADLINE: Duration = Duration::from_secs(2);

/// Reaps the relay helper `pid` (our child). Returns what happened, for the log.
pub fn reap_relay(pid: libc::pid_t, deadline: Duration) -> String {
    match waitpid(pid, libc::WNOHANG) {
        Ok(Some(st)) => return format!("relay {pid} reaped ({})", describe_status(st)),
        Ok(None) => {}
        Err(e) if e.raw_os_error() == Some(libc::ECHILD) => {
            return format!("relay {pid} is not a child of this process; nothing to reap")
        }
        Err(e) => return format!("relay {pid}: waitpid: {e}"),
    }
    // Still running: wait on a pidfd, bounded.
    // SAFETY: pidfd_open only creates an fd referring to `pid`.
    let raw = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    let exited = if raw >= 0 {
        // SAFETY: a fresh fd we own.
        let pidfd = unsafe { OwnedFd::from_raw_fd(raw as RawFd) };
        let end = Instant::now() + deadline;
        loop {
            let left = end.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break false;
            }
            match poll_in(pidfd.as_raw_fd(), left) {
                Ok(true) => break true,
                Ok(false) => {}
                Err(e) if e.raw_os_error() == Some(libc::EINTR) => {}
                Err(_) => break false,
            }
        }
    } else {
        // No pidfd (kernel < 5.3): poll waitpid.
        let end = Instant::now() + deadline;
        loop {
            match waitpid(pid, libc::WNOHANG) {
                Ok(Some(st)) => return format!("relay {pid} reaped ({})", describe_status(st)),
                Ok(None) if Instant::now() < end => std::thread::sleep(Duration::from_millis(2)),
                _ => break false,
            }
        }
    };
    let mut note = String::new();
    if !exited {
        // SAFETY: `pid` is our child and not yet reaped, so it still names it.
        unsafe { libc::kill(pid, libc::SIGKILL) };
        note = format!(
            " after it failed to exit within {}s and was killed",
            deadline.as_secs()
        );
    }
    match waitpid(pid, 0) {
        Ok(Some(st)) => format!("relay {pid} reaped ({}){note}", describe_status(st)),
        Ok(None) => format!("relay {pid}: still running{note}"),
        Err(e) => format!("relay {pid}: waitpid: {e}{note}"),
    }
}

fn waitpid(pid: libc::pid_t, flags: libc::c_int) -> io::Result<Option<libc::c_int>> {
    loop {
        let mut st = 0;
        // SAFETY: waitpid writes one c_int through a valid pointer.
        let rc = unsafe { libc::waitpid(pid, &mut st, flags) };
        if rc == pid {
            return Ok(Some(st));
        }
        if rc == 0 {
            return Ok(None);
        }
        let e = io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::EINTR) {
            return Err(e);
        }
    }
}

fn describe_status(st: libc::c_int) -> String {
    if libc::WIFEXITED(st) {
        format!("exit status {}", libc::WEXITSTATUS(st))
    } else if libc::WIFSIGNALED(st) {
        format!("killed by signal {}", libc::WTERMSIG(st))
    } else {
        format!("wait status {st:#x}")
    }
}

/// Closes a raw fd we were handed (fd 3). Errors are irrelevant: either it
/// is closed now or it never was open.
pub fn close_raw(fd: RawFd) {
    // SAFETY: closing an fd number; this process does not use it afterwards.
    unsafe { libc::close(fd) };
}
