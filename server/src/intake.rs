//! Notify-fd intake: one unix socket per wrap-init, one accepted handoff.
//!
//! wrap-init creates `<state_dir>/notify/<session>-<n>-<random>.sock`
//! (SOCK_STREAM, mode 0600, owned by the caller's uid). The relay helper
//! connects, sends `[0xA7][wrapper pid u32 LE]` with the notify fd in
//! SCM_RIGHTS, and reads one status byte (1 accepted, 0 refused).
//!
//! Trust: the socket accepts exactly one connection, within a 30 s deadline,
//! and only from the uid that asked for it (SO_PEERCRED); the socket file is
//! removed as soon as that connection is accepted or the deadline passes. The
//! fd must be a seccomp notify fd (checked through /proc/self/fd). Anything
//! else is refused and recorded as a `handoff` audit event.

use crate::audit::{EventBody, HandoffEvent};
use crate::supervisor::{self, SupervisorContext, Tree};
use agentsh_proto::handoff::{decode_handoff, Ack, HANDOFF_LEN};
use sendfd::RecvWithFd;
use std::io::{Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::fs::{chown, DirBuilderExt, PermissionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long a notify socket waits for its one connection.
pub const ACCEPT_DEADLINE: Duration = Duration::from_secs(30);
/// How long the connected relay has to send the handoff.
const HANDOFF_READ_TIMEOUT: Duration = Duration::from_secs(5);

static SOCKET_COUNTER: AtomicU64 = AtomicU64::new(0);

#[derive(Debug, thiserror::Error)]
pub enum IntakeError {
    #[error("cannot create notify socket directory {path}: {source}")]
    Dir {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot create notify socket {path}: {source}")]
    Socket {
        path: PathBuf,
        source: std::io::Error,
    },
}

fn random_token() -> String {
    let mut b = [0u8; 8];
    // SAFETY: getrandom writes at most b.len() bytes into b.
    let n = unsafe { libc::getrandom(b.as_mut_ptr().cast(), b.len(), 0) };
    if n != b.len() as isize {
        // Uniqueness, not secrecy, is what the name needs; the counter gives it.
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .as_nanos() as u64;
        b = t.to_le_bytes();
    }
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// Creates a fresh notify socket for `caller_uid` and starts the thread that
/// waits for its one handoff. Returns the socket path.
///
/// # Errors
/// The directory or the socket cannot be created, or its owner set.
pub fn open_notify_socket(
    ctx: Arc<SupervisorContext>,
    notify_dir: &Path,
    session_id: &str,
    caller_uid: u32,
) -> Result<PathBuf, IntakeError> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o711)
        .create(notify_dir)
        .map_err(|source| IntakeError::Dir {
            path: notify_dir.to_path_buf(),
            source,
        })?;
    // Search-only for others: a non-root relay reaches its socket by name but
    // cannot list the others.
    let _ = std::fs::set_permissions(notify_dir, std::fs::Permissions::from_mode(0o711));
    let n = SOCKET_COUNTER.fetch_add(1, Ordering::Relaxed);
    let path = notify_dir.join(format!("{session_id}-{n}-{}.sock", random_token()));
    let sock_err = |source| IntakeError::Socket {
        path: path.clone(),
        source,
    };
    let listener = UnixListener::bind(&path).map_err(sock_err)?;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).map_err(sock_err)?;
    chown(&path, Some(caller_uid), None).map_err(sock_err)?;
    let session = session_id.to_string();
    let p = path.clone();
    std::thread::Builder::new()
        .name("agentsh-intake".into())
        .spawn(move || accept_one(ctx, listener, &p, &session, caller_uid))
        .map_err(sock_err)?;
    Ok(path)
}

fn accept_one(
    ctx: Arc<SupervisorContext>,
    listener: UnixListener,
    path: &Path,
    session: &str,
    caller_uid: u32,
) {
    let accepted = wait_accept(&listener, ACCEPT_DEADLINE);
    // One connection only: the name goes away whatever happened.
    let _ = std::fs::remove_file(path);
    drop(listener);
    let Some(stream) = accepted else {
        tracing::warn!(socket = %path.display(), "no handoff within {ACCEPT_DEADLINE:?}; socket removed");
        return;
    };
    match take_handoff(&stream, caller_uid) {
        Ok((pid, fd)) => {
            if let Err(e) = (&stream).write_all(&[Ack::Accepted.to_byte()]) {
                // The relay will not ACK unixwrap, which then refuses to run;
                // dropping the fd makes any exec in the tree fail (ENOSYS).
                tracing::warn!(pid, "relay gone before the status byte: {e}");
                return;
            }
            ctx.audit.record(
                session,
                EventBody::Handoff(HandoffEvent {
                    pid,
                    accepted: true,
                    reason: "notify fd taken".into(),
                }),
            );
            let tree = Tree {
                session_id: session.to_string(),
                root_pid: pid,
                fd: Arc::new(fd),
            };
            supervisor::serve(ctx, tree);
        }
        Err(reason) => {
            tracing::warn!(socket = %path.display(), "handoff refused: {reason}");
            let _ = (&stream).write_all(&[Ack::Refused.to_byte()]);
            ctx.audit.record(
                session,
                EventBody::Handoff(HandoffEvent {
                    pid: 0,
                    accepted: false,
                    reason,
                }),
            );
        }
    }
}

fn wait_accept(listener: &UnixListener, deadline: Duration) -> Option<UnixStream> {
    let end = Instant::now() + deadline;
    loop {
        let left = end.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return None;
        }
        let mut pfd = libc::pollfd {
            fd: listener.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd.
        let rc = unsafe { libc::poll(&mut pfd, 1, left.as_millis().min(i32::MAX as u128) as i32) };
        if rc < 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) {
            continue;
        }
        if rc <= 0 {
            return None;
        }
        match listener.accept() {
            Ok((s, _)) => return Some(s),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => {
                tracing::warn!("accept on notify socket failed: {e}");
                return None;
            }
        }
    }
}

fn peer_uid(stream: &UnixStream) -> std::io::Result<u32> {
    let mut cred = libc::ucred {
        pid: 0,
        uid: 0,
        gid: 0,
    };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: getsockopt writes at most `len` bytes into `cred`.
    let rc = unsafe {
        libc::getsockopt(
            stream.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&mut cred as *mut libc::ucred).cast(),
            &mut len,
        )
    };
    if rc < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(cred.uid)
}

/// Reads and checks the handoff; returns the wrapper pid and the notify fd.
fn take_handoff(stream: &UnixStream, caller_uid: u32) -> Result<(u32, OwnedFd), String> {
    stream
        .set_read_timeout(Some(HANDOFF_READ_TIMEOUT))
        .map_err(|e| format!("cannot set read timeout: {e}"))?;
    let mut buf = [0u8; HANDOFF_LEN];
    let mut fds: [RawFd; 2] = [-1; 2];
    let (n, nfds) = stream
        .recv_with_fd(&mut buf, &mut fds)
        .map_err(|e| format!("handoff read failed: {e}"))?;
    // Take ownership of every fd received, so none leaks whatever happens next.
    let owned: Vec<OwnedFd> = fds[..nfds]
        .iter()
        .filter(|&&fd| fd >= 0)
        // SAFETY: the kernel just installed these fds in our table for us.
        .map(|&fd| unsafe { OwnedFd::from_raw_fd(fd) })
        .collect();
    let mut got = n;
    let mut s = stream;
    while got < HANDOFF_LEN && n > 0 {
        match s.read(&mut buf[got..]) {
            Ok(0) => break,
            Ok(k) => got += k,
            Err(e) => return Err(format!("handoff read failed: {e}")),
        }
    }
    // The uid is checked after the message is read (and any fd it carried is
    // closed), so a refused peer reliably gets its status byte instead of EPIPE.
    let uid = peer_uid(stream).map_err(|e| format!("SO_PEERCRED failed: {e}"))?;
    if uid != caller_uid {
        return Err(format!(
            "connection from uid {uid}, but the socket was issued to uid {caller_uid}"
        ));
    }
    let pid = decode_handoff(&buf[..got])
        .ok_or_else(|| format!("malformed handoff ({got} bytes, first {:#04x})", buf[0]))?;
    let mut owned = owned.into_iter();
    let fd = match (owned.next(), owned.next()) {
        (Some(fd), None) => fd,
        (None, _) => return Err("handoff carried no fd".into()),
        (Some(_), Some(_)) => return Err("handoff carried more than one fd".into()),
    };
    let link = std::fs::read_link(format!("/proc/self/fd/{}", fd.as_raw_fd()))
        .map(|p| p.to_string_lossy().into_owned())
        .unwrap_or_default();
    if link != "anon_inode:seccomp notify" {
        return Err(format!("the fd is not a seccomp notify fd ({link:?})"));
    }
    Ok((pid, fd))
}
