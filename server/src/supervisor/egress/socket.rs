//! The caller's socket, as far as the supervisor can reach it: taken with
//! `pidfd_getfd` (the same open socket), or, where that is refused, known
//! from `/proc` (`tracee::netproc`: its inode in the caller's fd table, its
//! family and type in the caller's network namespace).
//!
//! Failure modes: an fd that is not an open socket is answered as the
//! kernel would (EBADF, ENOTSOCK); a socket that can be reached neither way
//! is [`Found::Unreachable`] with the reason.

use super::call::{errno_of, Answer};
use super::copy::Copied;
use crate::policy::egress::Protocol;
use crate::supervisor::seam::Stop;
use crate::tracee::netproc;
use agentsh_proto::netabi::NetCall;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

/// The caller's socket, as far as the supervisor can reach it.
pub(super) enum Socket {
    /// Taken with `pidfd_getfd`: the same open socket.
    Taken(OwnedFd),
    /// Known only from `/proc` (pidfd_getfd is refused here).
    Remote { cloexec: bool, nonblock: bool },
}

impl Socket {
    /// Whether the call returns at once: the socket is non-blocking, or
    /// every message asks for `MSG_DONTWAIT`.
    pub(super) fn nonblocking(&self, messages: &[Copied]) -> bool {
        let fl_nonblock = match self {
            Socket::Taken(sock) => {
                // SAFETY: F_GETFL takes no pointer.
                let fl = unsafe { libc::fcntl(sock.as_raw_fd(), libc::F_GETFL) };
                fl >= 0 && fl & libc::O_NONBLOCK != 0
            }
            Socket::Remote { nonblock, .. } => *nonblock,
        };
        fl_nonblock
            || (!messages.is_empty() && messages.iter().all(|m| m.flags & libc::MSG_DONTWAIT != 0))
    }
}

/// What [`find_socket`] found at the caller's fd.
pub(super) enum Found {
    /// Answer the caller with this (the fd is not an open socket).
    Answer(Answer),
    /// The call no longer waits.
    Gone,
    /// A Unix socket, and how to check later that the fd still is it.
    Unix(Box<dyn Fn() -> io::Result<bool>>),
    /// An inet socket of another type (raw): why it cannot be judged.
    Other(String),
    /// A socket that cannot be reached at all: why.
    Unreachable(String),
    /// An inet socket: its domain and transport.
    Inet(Socket, i32, Protocol),
}

/// Finds the socket at the caller's fd `fd`: taken with `pidfd_getfd`, or,
/// where that is refused, known from `/proc` (its inode in the caller's
/// fd table, its family and type in the caller's network namespace).
pub(super) fn find_socket(tid: u32, fd: i32, call: NetCall, stop: &dyn Stop) -> Found {
    match take_socket(tid, fd) {
        Ok(sock) => {
            // The pid could have been reused between the notification and
            // the pidfd: the socket counts only if the call still waits.
            if !stop.still_waiting() {
                return Found::Gone;
            }
            let domain = match sockopt(&sock, libc::SO_DOMAIN) {
                Ok(d) => d,
                Err(e) => return Found::Answer(errno_of(&e)),
            };
            if domain != libc::AF_INET && domain != libc::AF_INET6 {
                let sock = std::sync::Arc::new(sock);
                return Found::Unix(Box::new(move || {
                    take_socket(tid, fd)
                        .map(|now| same_file(&now, &sock))
                        .map_err(|_| io::Error::other("not taken"))
                }));
            }
            match sockopt(&sock, libc::SO_TYPE) {
                Ok(libc::SOCK_STREAM) => Found::Inet(Socket::Taken(sock), domain, Protocol::Tcp),
                Ok(libc::SOCK_DGRAM) => Found::Inet(Socket::Taken(sock), domain, Protocol::Udp),
                Ok(t) => Found::Other(format!(
                    "an inet socket of type {t} (the filter allows stream and datagram only)"
                )),
                Err(e) => Found::Unreachable(format!("socket type unreadable: {e}")),
            }
        }
        Err(Taken::Answer(v)) => Found::Answer(v),
        Err(Taken::Refuse(why)) => from_proc(tid, fd, call, stop, why),
    }
}

/// Where `pidfd_getfd` is refused: the socket as `/proc` shows it (`why`
/// says why it could not be taken).
fn from_proc(tid: u32, fd: i32, call: NetCall, stop: &dyn Stop, why: String) -> Found {
    if stop.verifies_every_exec() {
        // The ptrace backend cannot put a socket into the caller.
        return Found::Unreachable(why);
    }
    // Read as the owner of the caller's /proc entries where this
    // server has no CAP_SYS_PTRACE (as its memory is).
    let seen = crate::tracee::access::with_owner(tid, || netproc::socket_of(tid, fd));
    match seen {
        Err(e) if e.raw_os_error() == Some(libc::EBADF) => Found::Answer(-i64::from(libc::EBADF)),
        Err(e) => Found::Unreachable(format!("{why}; and /proc does not say: {e}")),
        Ok(None) => Found::Answer(-i64::from(libc::ENOTSOCK)),
        Ok(Some(s)) => {
            if !stop.still_waiting() {
                return Found::Gone;
            }
            match s.kind {
                netproc::Kind::Unix => {
                    let ino = s.inode;
                    Found::Unix(Box::new(move || {
                        crate::tracee::access::with_owner(tid, || netproc::inode_at(tid, fd))
                            .map(|now| now == Some(ino))
                    }))
                }
                netproc::Kind::Inet {
                    domain,
                    udp,
                    bound,
                    state,
                } => {
                    // A connect again on a TCP socket connected (or
                    // connecting) already: what the kernel says.
                    if call == NetCall::Connect && !udp && state == 1 {
                        return Found::Answer(-i64::from(libc::EISCONN));
                    }
                    if call == NetCall::Connect && !udp && state == 2 {
                        return Found::Answer(-i64::from(libc::EALREADY));
                    }
                    if bound {
                        return Found::Unreachable(format!(
                            "{why}; and the socket is bound to a local address, which \
                             a socket of the supervisor's own cannot take over"
                        ));
                    }
                    let protocol = if udp { Protocol::Udp } else { Protocol::Tcp };
                    Found::Inet(
                        Socket::Remote {
                            cloexec: s.cloexec,
                            nonblock: s.nonblock,
                        },
                        domain,
                        protocol,
                    )
                }
                netproc::Kind::Unknown => Found::Unreachable(format!(
                    "{why}; and the socket (inode {}) is neither TCP, UDP nor Unix \
                     (its sockprotoname)",
                    s.inode
                )),
            }
        }
    }
}

/// A fresh socket like the caller's.
pub(super) fn new_socket(domain: i32, protocol: Protocol, nonblock: bool) -> io::Result<OwnedFd> {
    let ty = match protocol {
        Protocol::Udp => libc::SOCK_DGRAM,
        _ => libc::SOCK_STREAM,
    } | libc::SOCK_CLOEXEC
        | if nonblock { libc::SOCK_NONBLOCK } else { 0 };
    // SAFETY: plain integers.
    let fd = unsafe { libc::socket(domain, ty, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a new fd we own.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Whether two fds are the same open socket (socket inodes are unique).
pub(super) fn same_file(a: &OwnedFd, b: &OwnedFd) -> bool {
    let stat = |f: &OwnedFd| {
        // SAFETY: fstat writes one struct stat.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: a valid fd and a valid out pointer.
        (unsafe { libc::fstat(f.as_raw_fd(), &mut st) } == 0).then_some((st.st_dev, st.st_ino))
    };
    matches!((stat(a), stat(b)), (Some(x), Some(y)) if x == y)
}

pub(super) enum Taken {
    /// Answer the caller with this (its fd is not a socket, or not open).
    Answer(Answer),
    Refuse(String),
}

/// The caller's `fd`, taken from thread `tid`'s fd table.
pub(super) fn take_socket(tid: u32, fd: i32) -> Result<OwnedFd, Taken> {
    if fd < 0 {
        return Err(Taken::Answer(-i64::from(libc::EBADF)));
    }
    let _owner = crate::tracee::as_owner(tid);
    crate::tracee::pidfd::get_fd(tid, fd).map_err(|e| match e {
        crate::tracee::pidfd::GetFd::Open(e) if e.raw_os_error() == Some(libc::ESRCH) => {
            Taken::Answer(-i64::from(libc::ESRCH))
        }
        crate::tracee::pidfd::GetFd::Open(e) => Taken::Refuse(format!("pidfd_open({tid}): {e}")),
        crate::tracee::pidfd::GetFd::Get(e) => match e.raw_os_error() {
            Some(libc::EBADF) => Taken::Answer(-i64::from(libc::EBADF)),
            Some(libc::ESRCH) => Taken::Answer(-i64::from(libc::ESRCH)),
            _ => Taken::Refuse(format!(
                "cannot take the caller's socket (pidfd_getfd: {e}); without it the destination \
                 could change after the decision"
            )),
        },
    })
}

fn sockopt(sock: &OwnedFd, opt: libc::c_int) -> io::Result<i32> {
    let mut v: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: `v` and `len` are valid for the sizes given.
    let rc = unsafe {
        libc::getsockopt(
            sock.as_raw_fd(),
            libc::SOL_SOCKET,
            opt,
            (&mut v as *mut libc::c_int).cast(),
            &mut len,
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(v)
}
