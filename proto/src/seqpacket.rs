//! Unix `SOCK_SEQPACKET` sockets: the only socket type agentsh's control
//! plane uses (the API socket, the per-wrap-init notify sockets, the shim's
//! socketpair with unixwrap).
//!
//! Why SEQPACKET: the seccomp filter of every supervised tree fails
//! `socket(AF_UNIX, SOCK_SEQPACKET, ..)` with EPERM (a register argument, so
//! no race), and a SEQPACKET listener accepts only SEQPACKET clients. So no
//! process of a tree can connect to agentsh, bind a look-alike of its
//! sockets, or talk to the server at all — on every kernel, whatever
//! Landlock offers. `socketpair` stays allowed (a connected pair cannot be
//! pointed at a path).
//!
//! Who is on the other end: every client sends its first record with an
//! explicit `SCM_CREDENTIALS` of its own pid, uid and gid
//! ([`send_record_with_creds`]), which the kernel checks (no process may
//! claim another pid or uid without CAP_SYS_ADMIN / CAP_SETUID), and the
//! server reads them ([`enable_passcred`], [`peek_creds`]). `SO_PEERCRED`
//! says the same on Linux, but gVisor answers it with the *listener's*
//! credentials; the credentials a record carries are right on both.
//!
//! Failure modes: every function returns the kernel's error; paths that do
//! not fit a `sockaddr_un` are `InvalidInput`.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::path::Path;

/// What `SO_PEERCRED` says about the other end of a connected socket: the
/// credentials of the process that called `connect` (or `listen`), taken by
/// the kernel at that moment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PeerCred {
    /// The peer's process (the thread group of the caller of `connect`).
    pub pid: u32,
    /// Its effective uid at `connect`.
    pub uid: u32,
    /// Its effective gid at `connect`.
    pub gid: u32,
}

fn last() -> io::Error {
    io::Error::last_os_error()
}

/// A new SEQPACKET socket, close-on-exec (and non-blocking if asked).
///
/// # Errors
/// socket(2)'s errno (EPERM inside a supervised tree).
pub fn socket(nonblocking: bool) -> io::Result<OwnedFd> {
    let mut ty = libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC;
    if nonblocking {
        ty |= libc::SOCK_NONBLOCK;
    }
    // SAFETY: plain syscall; the result is checked.
    let fd = unsafe { libc::socket(libc::AF_UNIX, ty, 0) };
    if fd < 0 {
        return Err(last());
    }
    // SAFETY: a fresh fd nobody else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// A connected SEQPACKET pair, both ends close-on-exec.
///
/// # Errors
/// socketpair(2)'s errno (EMFILE, ENFILE).
pub fn pair() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [-1 as RawFd; 2];
    // SAFETY: fds points to two ints as socketpair requires.
    let rc = unsafe {
        libc::socketpair(
            libc::AF_UNIX,
            libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC,
            0,
            fds.as_mut_ptr(),
        )
    };
    if rc < 0 {
        return Err(last());
    }
    // SAFETY: both fds were just created and are owned by nobody else.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// `path` as a `sockaddr_un` and its length. A path that starts with `@`
/// names an abstract socket (`@name`: no file, the name after a NUL byte),
/// as `ss` prints them.
///
/// # Errors
/// `InvalidInput` for a path with a NUL or longer than `sun_path`.
pub fn sockaddr(path: &Path) -> io::Result<(libc::sockaddr_un, libc::socklen_t)> {
    use std::os::unix::ffi::OsStrExt;
    // SAFETY: sockaddr_un is plain data; all-zero is a valid value.
    let mut addr: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    addr.sun_family = libc::AF_UNIX as libc::sa_family_t;
    if let Some(name) = path.as_os_str().as_bytes().strip_prefix(b"@") {
        if name.is_empty() || name.contains(&0) || name.len() + 1 > addr.sun_path.len() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "abstract socket name {} is empty, has a NUL or is too long",
                    path.display()
                ),
            ));
        }
        // sun_path[0] stays 0: the abstract namespace.
        for (d, s) in addr.sun_path[1..].iter_mut().zip(name) {
            *d = *s as libc::c_char;
        }
        let len = std::mem::size_of::<libc::sa_family_t>() + 1 + name.len();
        return Ok((addr, len as libc::socklen_t));
    }
    let c = CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "NUL in socket path"))?;
    let bytes = c.as_bytes_with_nul();
    if bytes.len() > addr.sun_path.len() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "socket path {} is longer than {} bytes",
                path.display(),
                addr.sun_path.len() - 1
            ),
        ));
    }
    for (d, s) in addr.sun_path.iter_mut().zip(bytes) {
        *d = *s as libc::c_char;
    }
    let len = std::mem::size_of::<libc::sa_family_t>() + bytes.len();
    Ok((addr, len as libc::socklen_t))
}

/// Binds a new (non-blocking) SEQPACKET socket to `path` and listens.
///
/// # Errors
/// EADDRINUSE when the path exists, EACCES, ENOENT for a missing directory.
pub fn bind_listen(path: &Path, backlog: i32) -> io::Result<OwnedFd> {
    bind_mode_listen(path, backlog, None)
}

/// Binds `path` like [`bind_listen`], made mode 0600 before it listens:
/// only its owner (this process's user) and root may connect, and nobody
/// can have connected before (a socket that does not listen refuses).
///
/// # Errors
/// As [`bind_listen`], and chmod's.
pub fn bind_listen_owner_only(path: &Path, backlog: i32) -> io::Result<OwnedFd> {
    bind_mode_listen(path, backlog, Some(0o600))
}

/// Bind, the mode set if one is given (the path removed again if that or
/// the listen fails), listen.
fn bind_mode_listen(path: &Path, backlog: i32, mode: Option<u32>) -> io::Result<OwnedFd> {
    use std::os::unix::fs::PermissionsExt;
    let (addr, len) = sockaddr(path)?;
    let fd = socket(true)?;
    // SAFETY: addr is a valid sockaddr_un of `len` bytes.
    let rc = unsafe {
        libc::bind(
            fd.as_raw_fd(),
            (&addr as *const libc::sockaddr_un).cast(),
            len,
        )
    };
    if rc < 0 {
        return Err(last());
    }
    let undo = |e: io::Error| {
        if mode.is_some() {
            let _ = std::fs::remove_file(path);
        }
        e
    };
    if let Some(mode) = mode {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).map_err(undo)?;
    }
    // SAFETY: plain syscall on our own socket.
    if unsafe { libc::listen(fd.as_raw_fd(), backlog) } < 0 {
        return Err(undo(last()));
    }
    Ok(fd)
}

/// The owner's door of an API socket: a sibling (`api.sock` →
/// `api.owner.sock`, `agentsh` → `agentsh.owner`) that only the server's
/// own user and root may connect to (mode 0600). Its accept queue is its
/// own, so another local user's flood of connections to the shared socket
/// cannot queue ahead of root's shells (or, under `agentsh wrap`, the
/// developer's). `None` where the name would not fit a `sockaddr_un`.
pub fn owner_socket(path: &Path) -> Option<std::path::PathBuf> {
    let name = path.file_name()?.to_str()?;
    let owner = match name.rsplit_once('.') {
        Some((stem, ext)) if !stem.is_empty() => format!("{stem}.owner.{ext}"),
        _ => format!("{name}.owner"),
    };
    let p = path.with_file_name(owner);
    (p.as_os_str().len() < 108).then_some(p)
}

/// Connects to the API socket at `path`: through its owner's door
/// ([`owner_socket`]) when there is one this process may use (a socket
/// owned by the same user as `path`, and this process root or that user),
/// else (or if that connect fails) through `path` itself. Whoever answers
/// on either is checked by the caller as always (`SO_PEERCRED`, or the
/// first record's credentials).
///
/// # Errors
/// As [`connect`], for `path`.
pub fn connect_api(path: &Path, timeout: std::time::Duration) -> io::Result<OwnedFd> {
    use std::os::unix::fs::{FileTypeExt, MetadataExt};
    if let Some(owner) = owner_socket(path) {
        // SAFETY: geteuid cannot fail.
        let euid = unsafe { libc::geteuid() };
        let usable = match (
            std::fs::symlink_metadata(&owner),
            std::fs::symlink_metadata(path),
        ) {
            (Ok(o), Ok(p)) => {
                o.file_type().is_socket() && o.uid() == p.uid() && (euid == 0 || euid == o.uid())
            }
            _ => false,
        };
        if usable {
            if let Ok(fd) = connect(&owner, timeout) {
                return Ok(fd);
            }
        }
    }
    connect(path, timeout)
}

/// Connects a new blocking SEQPACKET socket to `path`, with `timeout` on
/// every later send and receive.
///
/// # Errors
/// ENOENT (no socket), ECONNREFUSED (nobody listening), EPROTOTYPE (the
/// socket there is not SEQPACKET), EPERM (inside a supervised tree).
pub fn connect(path: &Path, timeout: std::time::Duration) -> io::Result<OwnedFd> {
    let (addr, len) = sockaddr(path)?;
    let fd = socket(false)?;
    set_timeouts(fd.as_fd(), timeout)?;
    loop {
        // SAFETY: addr is a valid sockaddr_un of `len` bytes.
        let rc = unsafe {
            libc::connect(
                fd.as_raw_fd(),
                (&addr as *const libc::sockaddr_un).cast(),
                len,
            )
        };
        if rc == 0 {
            return Ok(fd);
        }
        let e = last();
        if e.raw_os_error() != Some(libc::EINTR) {
            return Err(e);
        }
    }
}

/// SO_SNDTIMEO and SO_RCVTIMEO.
///
/// # Errors
/// setsockopt's errno.
pub fn set_timeouts(fd: BorrowedFd<'_>, timeout: std::time::Duration) -> io::Result<()> {
    let tv = libc::timeval {
        tv_sec: timeout.as_secs() as libc::time_t,
        tv_usec: timeout.subsec_micros() as libc::suseconds_t,
    };
    for opt in [libc::SO_SNDTIMEO, libc::SO_RCVTIMEO] {
        // SAFETY: tv is a valid timeval of the size passed.
        let rc = unsafe {
            libc::setsockopt(
                fd.as_raw_fd(),
                libc::SOL_SOCKET,
                opt,
                (&tv as *const libc::timeval).cast(),
                std::mem::size_of::<libc::timeval>() as libc::socklen_t,
            )
        };
        if rc < 0 {
            return Err(last());
        }
    }
    Ok(())
}

/// The credentials of the peer of a connected Unix socket.
///
/// # Errors
/// getsockopt's errno.
pub fn peer_cred(fd: BorrowedFd<'_>) -> io::Result<PeerCred> {
    let mut cred = libc::ucred {
        pid: 0,
        uid: 0,
        gid: 0,
    };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: getsockopt writes at most `len` bytes into `cred`.
    let rc = unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&mut cred as *mut libc::ucred).cast(),
            &mut len,
        )
    };
    if rc < 0 {
        return Err(last());
    }
    Ok(PeerCred {
        pid: cred.pid.max(0) as u32,
        uid: cred.uid,
        gid: cred.gid,
    })
}

/// Asks the kernel to attach the sender's credentials to every record read
/// from `fd` (`SO_PASSCRED`).
///
/// # Errors
/// setsockopt's errno.
pub fn enable_passcred(fd: BorrowedFd<'_>) -> io::Result<()> {
    let one: libc::c_int = 1;
    // SAFETY: setsockopt reads one c_int through a valid pointer.
    let rc = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PASSCRED,
            (&one as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc < 0 {
        return Err(last());
    }
    Ok(())
}

/// The `SCM_CREDENTIALS` of the next record on `fd` (which needs
/// [`enable_passcred`]), without consuming it: `Ok(None)` when the record
/// carries none. Non-blocking: `WouldBlock` when no record is there yet.
///
/// # Errors
/// recvmsg's errno; end of stream is `UnexpectedEof`.
pub fn peek_creds(fd: BorrowedFd<'_>) -> io::Result<Option<PeerCred>> {
    let mut byte = 0u8;
    let mut iov = libc::iovec {
        iov_base: (&mut byte as *mut u8).cast(),
        iov_len: 1,
    };
    let mut cbuf = [0u64; 8];
    // SAFETY: msghdr is plain data; the fields used are set below.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = cbuf.as_mut_ptr().cast();
    msg.msg_controllen = std::mem::size_of_val(&cbuf) as _;
    // SAFETY: recvmsg into buffers we own; MSG_PEEK leaves the record (and
    // any fd it carries) queued.
    let n = unsafe {
        libc::recvmsg(
            fd.as_raw_fd(),
            &mut msg,
            libc::MSG_PEEK | libc::MSG_DONTWAIT,
        )
    };
    if n < 0 {
        return Err(last());
    }
    if n == 0 {
        return Err(io::Error::from(io::ErrorKind::UnexpectedEof));
    }
    Ok(creds_of(&msg))
}

/// The `SCM_CREDENTIALS` among the control messages of a received `msg`.
pub fn creds_of(msg: &libc::msghdr) -> Option<PeerCred> {
    // SAFETY: walks the control buffer the kernel filled, within
    // msg_controllen, with the libc macros.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(msg);
        while !c.is_null() {
            if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SCM_CREDENTIALS {
                let u: libc::ucred = std::ptr::read_unaligned(libc::CMSG_DATA(c).cast());
                return Some(PeerCred {
                    pid: u.pid.max(0) as u32,
                    uid: u.uid,
                    gid: u.gid,
                });
            }
            c = libc::CMSG_NXTHDR(msg, c);
        }
    }
    None
}

/// Sends one record carrying this process's own credentials
/// (`SCM_CREDENTIALS`: pid, effective uid and gid, which the kernel checks),
/// retrying on EINTR. Clients send their first record this way.
///
/// # Errors
/// sendmsg's errno; a short send is `WriteZero`.
pub fn send_record_with_creds(fd: BorrowedFd<'_>, data: &[u8]) -> io::Result<()> {
    send_with_creds(fd, data, None)
}

/// [`send_record_with_creds`], with `pass` (when given) in `SCM_RIGHTS` in
/// the same record: the notify-fd handoff, whose receiver needs to know
/// who sent the fd (gVisor answers `SO_PEERCRED` with the listener's own).
///
/// # Errors
/// sendmsg's errno; a short send is `WriteZero`.
pub fn send_with_creds(
    fd: BorrowedFd<'_>,
    data: &[u8],
    pass: Option<BorrowedFd<'_>>,
) -> io::Result<()> {
    // SAFETY: getpid/geteuid/getegid cannot fail.
    let me = unsafe {
        libc::ucred {
            pid: libc::getpid(),
            uid: libc::geteuid(),
            gid: libc::getegid(),
        }
    };
    let mut iov = libc::iovec {
        iov_base: data.as_ptr() as *mut libc::c_void,
        iov_len: data.len(),
    };
    let mut cbuf = [0u64; 8];
    // SAFETY: msghdr is plain data; the fields used are set below.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = cbuf.as_mut_ptr().cast();
    // SAFETY: CMSG_SPACE/CMSG_LEN are size computations; both headers and
    // their data fit the zeroed, aligned control buffer (64 bytes: 32 for
    // the credentials, 24 for one fd).
    unsafe {
        let cred_space = libc::CMSG_SPACE(std::mem::size_of::<libc::ucred>() as u32) as usize;
        let fd_space = libc::CMSG_SPACE(std::mem::size_of::<RawFd>() as u32) as usize;
        msg.msg_controllen = (cred_space + if pass.is_some() { fd_space } else { 0 }) as _;
        let c = libc::CMSG_FIRSTHDR(&msg);
        (*c).cmsg_level = libc::SOL_SOCKET;
        (*c).cmsg_type = libc::SCM_CREDENTIALS;
        (*c).cmsg_len = libc::CMSG_LEN(std::mem::size_of::<libc::ucred>() as u32) as _;
        std::ptr::write_unaligned(libc::CMSG_DATA(c).cast::<libc::ucred>(), me);
        if let Some(p) = pass {
            let c = libc::CMSG_NXTHDR(&msg, c);
            if c.is_null() {
                return Err(io::Error::other("control buffer too small"));
            }
            (*c).cmsg_level = libc::SOL_SOCKET;
            (*c).cmsg_type = libc::SCM_RIGHTS;
            (*c).cmsg_len = libc::CMSG_LEN(std::mem::size_of::<RawFd>() as u32) as _;
            std::ptr::write_unaligned(libc::CMSG_DATA(c).cast::<RawFd>(), p.as_raw_fd());
        }
    }
    whole_record(data.len(), || {
        // SAFETY: msg and everything it points at are live for the call.
        unsafe { libc::sendmsg(fd.as_raw_fd(), &msg, libc::MSG_NOSIGNAL) }
    })
}

/// Receives one record (`MSG_DONTWAIT`) with the file descriptors it
/// carries (close-on-exec; at most `max_fds`, more is `InvalidData`; every
/// fd received is owned, so none leaks) and the credentials it carries, if
/// any.
///
/// # Errors
/// recvmsg's errno; a truncated record or control message; too many fds.
pub fn recv_with_fds(
    fd: RawFd,
    data: &mut [u8],
    max_fds: usize,
) -> io::Result<(usize, Vec<OwnedFd>, Option<PeerCred>)> {
    let mut iov = libc::iovec {
        iov_base: data.as_mut_ptr().cast(),
        iov_len: data.len(),
    };
    // Room for the credentials and 8 fds: a sender passing more than
    // `max_fds` is detected.
    let mut cbuf = [0u64; 16];
    // SAFETY: msghdr is plain data; the fields used are set below.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = cbuf.as_mut_ptr().cast();
    msg.msg_controllen = std::mem::size_of_val(&cbuf) as _;
    // SAFETY: msg points at valid buffers for the call.
    let n = unsafe { libc::recvmsg(fd, &mut msg, libc::MSG_DONTWAIT | libc::MSG_CMSG_CLOEXEC) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    let mut fds = Vec::new();
    // SAFETY: walking the control buffer the kernel just filled, with the
    // CMSG_* accessors; each fd found is owned at once.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(&msg);
        while !c.is_null() {
            if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SCM_RIGHTS {
                let p = libc::CMSG_DATA(c) as *const i32;
                let count = ((*c).cmsg_len as usize - libc::CMSG_LEN(0) as usize)
                    / std::mem::size_of::<i32>();
                for i in 0..count {
                    fds.push(OwnedFd::from_raw_fd(std::ptr::read_unaligned(p.add(i))));
                }
            }
            c = libc::CMSG_NXTHDR(&msg, c);
        }
    }
    if msg.msg_flags & (libc::MSG_CTRUNC | libc::MSG_TRUNC) != 0 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "truncated record or control message",
        ));
    }
    if fds.len() > max_fds {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("{} fds where at most {max_fds} belong", fds.len()),
        ));
    }
    Ok((n as usize, fds, creds_of(&msg)))
}

/// Runs `send` until it is not interrupted (EINTR); a record sent short of
/// its `len` bytes is `WriteZero`.
fn whole_record(len: usize, mut send: impl FnMut() -> isize) -> io::Result<()> {
    loop {
        let n = send();
        if n >= 0 {
            return if n as usize == len {
                Ok(())
            } else {
                Err(io::Error::new(io::ErrorKind::WriteZero, "short record"))
            };
        }
        let e = last();
        if e.raw_os_error() != Some(libc::EINTR) {
            return Err(e);
        }
    }
}

/// Is `fd` a SEQPACKET socket?
///
/// # Errors
/// A message saying what `fd` is instead.
pub fn check_type(fd: RawFd) -> Result<(), String> {
    let mut ty: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: SO_TYPE writes one c_int through a valid pointer with its length.
    let rc = unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_TYPE,
            (&mut ty as *mut libc::c_int).cast(),
            &mut len,
        )
    };
    if rc < 0 {
        let e = last();
        return Err(match e.raw_os_error() {
            Some(libc::EBADF) => format!("fd {fd} is not open"),
            Some(libc::ENOTSOCK) => format!("fd {fd} is not a socket"),
            _ => format!("fd {fd}: {e}"),
        });
    }
    if ty != libc::SOCK_SEQPACKET {
        return Err(format!(
            "fd {fd} is not a SOCK_SEQPACKET socket (type {ty})"
        ));
    }
    Ok(())
}

/// Sends one record, retrying on EINTR.
///
/// # Errors
/// send's errno; a short send is `WriteZero`.
pub fn send_record(fd: BorrowedFd<'_>, data: &[u8]) -> io::Result<()> {
    whole_record(data.len(), || {
        // SAFETY: data is valid for its length.
        unsafe {
            libc::send(
                fd.as_raw_fd(),
                data.as_ptr().cast(),
                data.len(),
                libc::MSG_NOSIGNAL,
            )
        }
    })
}

/// Receives one record into `buf`; `Ok(0)` is end of stream.
///
/// # Errors
/// recv's errno; a record longer than `buf` is `InvalidData` (its tail
/// would be lost).
pub fn recv_record(fd: BorrowedFd<'_>, buf: &mut [u8]) -> io::Result<usize> {
    loop {
        // SAFETY: buf is valid for its length; MSG_TRUNC makes the result the
        // record's real length, so truncation is detected.
        let n = unsafe {
            libc::recv(
                fd.as_raw_fd(),
                buf.as_mut_ptr().cast(),
                buf.len(),
                libc::MSG_TRUNC,
            )
        };
        if n >= 0 {
            let n = n as usize;
            if n > buf.len() {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("a {n}-byte record does not fit {} bytes", buf.len()),
                ));
            }
            return Ok(n);
        }
        let e = last();
        if e.raw_os_error() != Some(libc::EINTR) {
            return Err(e);
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_owners_door_is_a_sibling_only_its_owner_may_use() {
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(
            owner_socket(Path::new("/run/agentsh/api.sock")).unwrap(),
            Path::new("/run/agentsh/api.owner.sock")
        );
        assert_eq!(
            owner_socket(Path::new("/run/x/agentsh")).unwrap(),
            Path::new("/run/x/agentsh.owner")
        );
        let long = format!("/{}/a.sock", "d".repeat(100));
        assert_eq!(owner_socket(Path::new(&long)), None);
        let dir = std::env::temp_dir().join(format!("agentsh-door-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let shared = dir.join("api.sock");
        let _s = bind_listen(&shared, 4).unwrap();
        // No door: the shared socket.
        let c = connect_api(&shared, std::time::Duration::from_secs(1)).unwrap();
        assert!(peer_cred(c.as_fd()).is_ok());
        let door = owner_socket(&shared).unwrap();
        let d = bind_listen_owner_only(&door, 4).unwrap();
        let mode = std::fs::metadata(&door).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600, "{mode:o}");
        // A door: through it (the connection waits in the door's queue).
        let _c = connect_api(&shared, std::time::Duration::from_secs(1)).unwrap();
        // SAFETY: accept4 on our listener; no address wanted.
        let a = unsafe {
            libc::accept4(
                d.as_raw_fd(),
                std::ptr::null_mut(),
                std::ptr::null_mut(),
                libc::SOCK_NONBLOCK,
            )
        };
        assert!(
            a >= 0,
            "nothing came through the door: {}",
            io::Error::last_os_error()
        );
        // SAFETY: a fresh fd nobody else owns.
        drop(unsafe { OwnedFd::from_raw_fd(a) });
        // A door nobody listens at any more: the shared socket again.
        drop(d);
        assert!(connect_api(&shared, std::time::Duration::from_secs(1)).is_ok());
        let _ = std::fs::remove_dir_all(&dir);
    }

    use super::*;

    #[test]
    fn pair_carries_records_whole() {
        let (a, b) = pair().unwrap();
        send_record(a.as_fd(), b"one").unwrap();
        send_record(a.as_fd(), b"two!").unwrap();
        let mut buf = [0u8; 16];
        assert_eq!(recv_record(b.as_fd(), &mut buf).unwrap(), 3);
        assert_eq!(&buf[..3], b"one");
        assert_eq!(recv_record(b.as_fd(), &mut buf).unwrap(), 4);
        check_type(a.as_raw_fd()).unwrap();
        let me = peer_cred(b.as_fd()).unwrap();
        assert_eq!(me.pid, std::process::id());
        enable_passcred(b.as_fd()).unwrap();
        send_record_with_creds(a.as_fd(), b"three").unwrap();
        let c = peek_creds(b.as_fd())
            .unwrap()
            .expect("credentials on the record");
        assert_eq!(c, me);
        assert_eq!(
            recv_record(b.as_fd(), &mut buf).unwrap(),
            5,
            "peek left the record"
        );
        assert!(peek_creds(b.as_fd()).is_err(), "nothing queued: WouldBlock");
    }

    /// `@name` binds and connects in the abstract namespace: no file.
    #[test]
    fn an_at_name_is_an_abstract_socket() {
        let name = format!("@agentsh-proto-test-{}", std::process::id());
        let l = bind_listen(Path::new(&name), 1).unwrap();
        assert!(!Path::new(&name).exists());
        let c = connect(Path::new(&name), std::time::Duration::from_secs(5)).unwrap();
        send_record(c.as_fd(), b"hi").unwrap();
        // SAFETY: accept on our own listening socket.
        let a = unsafe { libc::accept(l.as_raw_fd(), std::ptr::null_mut(), std::ptr::null_mut()) };
        assert!(a >= 0, "accept: {}", io::Error::last_os_error());
        // SAFETY: a is a fresh fd accept just returned.
        let a = unsafe { OwnedFd::from_raw_fd(a) };
        let mut buf = [0u8; 4];
        assert_eq!(recv_record(a.as_fd(), &mut buf).unwrap(), 2);
        for bad in ["@", "@a\0b"] {
            assert!(sockaddr(Path::new(bad)).is_err(), "{bad:?}");
        }
        assert!(sockaddr(Path::new(&format!("@{}", "x".repeat(108)))).is_err());
    }

    #[test]
    fn an_oversized_record_is_an_error_not_a_silent_cut() {
        let (a, b) = pair().unwrap();
        send_record(a.as_fd(), &[7u8; 32]).unwrap();
        let mut buf = [0u8; 8];
        let e = recv_record(b.as_fd(), &mut buf).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidData);
    }

    #[test]
    fn overlong_paths_are_refused() {
        let long = format!("/{}", "x".repeat(200));
        assert!(sockaddr(Path::new(&long)).is_err());
        assert!(sockaddr(Path::new("/run/agentsh/api.sock")).is_ok());
    }

    #[test]
    fn listener_and_client() {
        let dir = std::env::temp_dir().join(format!("agentsh-sp-{}", std::process::id()));
        let _ = std::fs::create_dir_all(&dir);
        let path = dir.join("s.sock");
        let _ = std::fs::remove_file(&path);
        let l = bind_listen(&path, 4).unwrap();
        let c = connect(&path, std::time::Duration::from_secs(2)).unwrap();
        // SAFETY: accept on our listener; the peer is queued, so no wait.
        let s = unsafe {
            libc::accept4(
                l.as_raw_fd(),
                std::ptr::null_mut(),
                std::ptr::null_mut(),
                libc::SOCK_CLOEXEC,
            )
        };
        assert!(s >= 0);
        // SAFETY: fresh fd.
        let s = unsafe { OwnedFd::from_raw_fd(s) };
        assert_eq!(peer_cred(s.as_fd()).unwrap().pid, std::process::id());
        send_record(c.as_fd(), b"hi").unwrap();
        let mut buf = [0u8; 4];
        assert_eq!(recv_record(s.as_fd(), &mut buf).unwrap(), 2);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
