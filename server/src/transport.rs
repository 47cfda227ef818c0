//! The SOCK_SEQPACKET transport: a listener and its connections, on the
//! tokio runtime. The API serves HTTP on it (`server.socket`), and each
//! wrap-init's notify socket takes its one handoff on it (`handoff`), so it
//! sits below both.
//!
//! HTTP/1.1 runs over SEQPACKET like over a stream, record by record: reads
//! take one whole record (at most [`MAX_RECORD`] bytes; a longer one is an
//! error, never a silent cut), writes send at most [`MAX_RECORD`] bytes per
//! record. Every connection is identified before a byte is read: the
//! kernel's `SO_PEERCRED`, or, where the kernel names this process instead
//! (gVisor), the credentials of the first record ([`SeqpacketConn::identify`]).
//!
//! Failure modes: an accept or a read that fails returns the errno to the
//! caller (the API logs it and goes on, backing off on EMFILE; a notify
//! socket gives up); an oversized or truncated record, or more fds than
//! asked for, is `InvalidData`, and every fd received is owned, so none
//! leaks.

use agentsh_proto::http::MAX_RECORD;
use agentsh_proto::seqpacket::{self, PeerCred};
use std::io;
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};
use std::path::Path;
use std::pin::Pin;
use std::task::{ready, Context, Poll};
use tokio::io::unix::AsyncFd;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// Registers an owned fd with the runtime.
fn register(fd: OwnedFd) -> io::Result<AsyncFd<OwnedFd>> {
    // SAFETY: an OwnedFd is a valid open descriptor that stays open and
    // unchanged until the AsyncFd (its owner) is dropped.
    unsafe { AsyncFd::register(fd) }.map_err(io::Error::from)
}

/// A listening SEQPACKET socket.
pub struct SeqpacketListener {
    fd: AsyncFd<OwnedFd>,
}

impl SeqpacketListener {
    /// Binds `path` (which must not exist) and listens. Must be called
    /// inside a tokio runtime.
    ///
    /// # Errors
    /// bind/listen errors, or registering with the runtime.
    pub fn bind(path: &Path, backlog: i32) -> io::Result<SeqpacketListener> {
        let fd = seqpacket::bind_listen(path, backlog)?;
        Ok(SeqpacketListener { fd: register(fd)? })
    }

    /// Wraps an already listening non-blocking SEQPACKET socket.
    ///
    /// # Errors
    /// Registering with the runtime.
    pub fn from_fd(fd: OwnedFd) -> io::Result<SeqpacketListener> {
        Ok(SeqpacketListener { fd: register(fd)? })
    }

    /// The next connection and who made it, not yet registered with the
    /// runtime ([`SeqpacketConn::new`]): a connection refused at once
    /// costs no buffer and no registration.
    ///
    /// # Errors
    /// accept's errno (EMFILE, ENFILE, ...).
    pub async fn accept(&self) -> io::Result<(OwnedFd, PeerCred)> {
        loop {
            let mut guard = self.fd.readable().await?;
            let res = guard.try_io(|fd| {
                // SAFETY: accept4 on our listening socket; no address wanted.
                let s = unsafe {
                    libc::accept4(
                        fd.as_raw_fd(),
                        std::ptr::null_mut(),
                        std::ptr::null_mut(),
                        libc::SOCK_CLOEXEC | libc::SOCK_NONBLOCK,
                    )
                };
                if s < 0 {
                    return Err(io::Error::last_os_error());
                }
                // SAFETY: a fresh fd nobody else owns.
                Ok(unsafe { OwnedFd::from_raw_fd(s) })
            });
            match res {
                Ok(Ok(fd)) => {
                    let cred = seqpacket::peer_cred(fd.as_fd())?;
                    // Records then say who sent them (see `identify`).
                    seqpacket::enable_passcred(fd.as_fd())?;
                    return Ok((fd, cred));
                }
                Ok(Err(e)) if e.raw_os_error() == Some(libc::ECONNABORTED) => continue,
                Ok(Err(e)) => return Err(e),
                Err(_would_block) => continue,
            }
        }
    }
}

/// The peer of a connection just accepted has already closed it, sending
/// nothing: the connection waited in the accept queue longer than its
/// maker cared (a flood's), and serving it would only cost.
pub fn hung_up(fd: std::os::fd::BorrowedFd<'_>) -> bool {
    let mut b = [0u8; 1];
    // SAFETY: b is valid for its length; a peek takes nothing.
    let n = unsafe {
        libc::recv(
            fd.as_raw_fd(),
            b.as_mut_ptr().cast(),
            b.len(),
            libc::MSG_PEEK | libc::MSG_DONTWAIT,
        )
    };
    n == 0
}

/// One accepted SEQPACKET connection, as a byte stream.
pub struct SeqpacketConn {
    fd: AsyncFd<OwnedFd>,
    buf: Box<[u8]>,
    start: usize,
    end: usize,
}

impl SeqpacketConn {
    /// # Errors
    /// Registering with the runtime.
    pub fn new(fd: OwnedFd) -> io::Result<SeqpacketConn> {
        Ok(SeqpacketConn {
            fd: register(fd)?,
            // Made at the first record: a connection that never sends
            // one (held open, or refused by a route's limit) costs none.
            buf: Box::default(),
            start: 0,
            end: 0,
        })
    }

    /// Who is on the other end: `SO_PEERCRED` (`so`, from `accept`) where
    /// the kernel tells the truth, else (gVisor answers with the listener's
    /// own credentials, i.e. this process) the `SCM_CREDENTIALS` of the first
    /// record, which waits for it. Linux checks those too: nobody can claim
    /// another pid or uid without CAP_SYS_ADMIN / CAP_SETUID.
    ///
    /// # Errors
    /// The peer hung up, or its first record carries no credentials.
    pub async fn identify(&self, so: PeerCred) -> io::Result<PeerCred> {
        if so.pid != std::process::id() {
            return Ok(so);
        }
        loop {
            let mut guard = self.fd.readable().await?;
            match guard.try_io(|fd| seqpacket::peek_creds(fd.as_fd())) {
                Ok(Ok(Some(c))) => return Ok(c),
                Ok(Ok(None)) => {
                    return Err(io::Error::new(
                        io::ErrorKind::PermissionDenied,
                        "the kernel names no peer (SO_PEERCRED is this process) and the \
                         request carries no SCM_CREDENTIALS",
                    ))
                }
                Ok(Err(e)) => return Err(e),
                Err(_would_block) => continue,
            }
        }
    }

    /// Receives one record with the file descriptors it carries (at most
    /// `max_fds`; more is `InvalidData`, and every fd received is owned, so
    /// none leaks) and the credentials it carries, if any.
    ///
    /// # Errors
    /// recvmsg's errno; a truncated record or control message.
    pub async fn recv_with_fds(
        &self,
        data: &mut [u8],
        max_fds: usize,
    ) -> io::Result<(usize, Vec<OwnedFd>, Option<PeerCred>)> {
        loop {
            let mut guard = self.fd.readable().await?;
            match guard.try_io(|fd| seqpacket::recv_with_fds(fd.as_raw_fd(), data, max_fds)) {
                Ok(r) => return r,
                Err(_would_block) => continue,
            }
        }
    }

    /// Sends one record.
    ///
    /// # Errors
    /// send's errno.
    pub async fn send_record(&self, data: &[u8]) -> io::Result<()> {
        loop {
            let mut guard = self.fd.writable().await?;
            match guard.try_io(|fd| send_nb(fd.as_raw_fd(), data)) {
                Ok(Ok(n)) if n == data.len() => return Ok(()),
                Ok(Ok(_)) => return Err(io::Error::new(io::ErrorKind::WriteZero, "short record")),
                Ok(Err(e)) => return Err(e),
                Err(_would_block) => continue,
            }
        }
    }

    /// Sends one record with `pass` in `SCM_RIGHTS` (and this process's
    /// credentials, which the receiver may ignore).
    ///
    /// # Errors
    /// sendmsg's errno; a short send is `WriteZero`.
    pub async fn send_record_with_fd(
        &self,
        data: &[u8],
        pass: std::os::fd::BorrowedFd<'_>,
    ) -> io::Result<()> {
        loop {
            let mut guard = self.fd.writable().await?;
            // The fd is non-blocking: a full socket is EAGAIN, which re-arms.
            match guard
                .try_io(|fd| seqpacket::send_with_creds(fd.get_ref().as_fd(), data, Some(pass)))
            {
                Ok(r) => return r,
                Err(_would_block) => continue,
            }
        }
    }

    /// The raw fd (for `SO_PEERCRED` checks).
    pub fn raw(&self) -> std::os::fd::BorrowedFd<'_> {
        self.fd.get_ref().as_fd()
    }
}

fn send_nb(fd: i32, data: &[u8]) -> io::Result<usize> {
    // SAFETY: data is valid for its length.
    let n = unsafe {
        libc::send(
            fd,
            data.as_ptr().cast(),
            data.len(),
            libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL,
        )
    };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(n as usize)
}

fn recv_nb(fd: i32, buf: &mut [u8]) -> io::Result<usize> {
    // SAFETY: buf is valid for its length; MSG_TRUNC returns the record's
    // real length so an oversized record is detected.
    let n = unsafe {
        libc::recv(
            fd,
            buf.as_mut_ptr().cast(),
            buf.len(),
            libc::MSG_DONTWAIT | libc::MSG_TRUNC,
        )
    };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    let n = n as usize;
    if n > buf.len() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("a {n}-byte record exceeds {} bytes", buf.len()),
        ));
    }
    Ok(n)
}

impl AsyncRead for SeqpacketConn {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        out: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let me = self.get_mut();
        loop {
            if me.start < me.end {
                let n = (me.end - me.start).min(out.remaining());
                out.put_slice(&me.buf[me.start..me.start + n]);
                me.start += n;
                return Poll::Ready(Ok(()));
            }
            let mut guard = ready!(me.fd.poll_read_ready(cx))?;
            if me.buf.is_empty() {
                me.buf = vec![0u8; MAX_RECORD].into_boxed_slice();
            }
            let buf = &mut me.buf;
            match guard.try_io(|fd| recv_nb(fd.as_raw_fd(), buf)) {
                Ok(Ok(0)) => return Poll::Ready(Ok(())),
                Ok(Ok(n)) => {
                    me.start = 0;
                    me.end = n;
                }
                Ok(Err(e)) => return Poll::Ready(Err(e)),
                Err(_would_block) => continue,
            }
        }
    }
}

impl AsyncWrite for SeqpacketConn {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        let me = self.get_mut();
        let data = &data[..data.len().min(MAX_RECORD)];
        loop {
            let mut guard = ready!(me.fd.poll_write_ready(cx))?;
            match guard.try_io(|fd| send_nb(fd.as_raw_fd(), data)) {
                Ok(r) => return Poll::Ready(r),
                Err(_would_block) => continue,
            }
        }
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        // SAFETY: shutdown on our own socket.
        unsafe { libc::shutdown(self.fd.get_ref().as_raw_fd(), libc::SHUT_WR) };
        Poll::Ready(Ok(()))
    }
}
