//! Notify-fd intake: one SOCK_SEQPACKET socket per wrap-init, one accepted
//! handoff.
//!
//! wrap-init creates `<run_dir>/notify/<session>-<n>-<random>.sock` (mode
//! 0600, owned by the caller's uid, in a directory trees cannot list or
//! create in). The relay helper connects, sends one record
//! `[0xA7][wrapper pid u32 LE]` with the notify fd in SCM_RIGHTS, and reads
//! one status byte (1 accepted, 0 refused).
//!
//! Trust: the socket accepts exactly one connection, within
//! [`ACCEPT_DEADLINE`], and only from the uid that asked for it
//! (SO_PEERCRED). The handoff is bound to the process that called
//! wrap-init: the pid in the message must be that process (the shim, which
//! became unixwrap in place), and the connecting relay must be its child.
//! The fd must be a seccomp notify fd (checked through /proc/self/fd). A
//! supervised tree cannot create a SEQPACKET socket, so it cannot connect
//! here at all. Anything else is refused and recorded as a `handoff` audit
//! event; the socket file is removed as soon as its one connection is
//! accepted or the deadline passes.
//!
//! Failure modes: every refusal leaves the wrapped shell refusing to run
//! (unixwrap waits for an accepted ACK), never running unsupervised.

use crate::api::peer::Slot;
use crate::api::transport::SeqpacketListener;
use crate::audit::{EventBody, HandoffEvent};
use crate::supervisor::{self, SupervisorContext, Tree};
use crate::trees::Trees;
use agentsh_proto::handoff::{decode_handoff, Ack, Handoff, HANDOFF_LEN};
use agentsh_proto::seqpacket;
use agentsh_proto::ExecBackend;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::{chown, DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// How long a notify socket waits for its one connection.
pub const ACCEPT_DEADLINE: Duration = Duration::from_secs(30);
/// How long the connected relay has to send the handoff.
const HANDOFF_READ_TIMEOUT: Duration = Duration::from_secs(5);

static SOCKET_COUNTER: AtomicU64 = AtomicU64::new(0);

/// Whom a notify socket is for: taken from the transport, never the body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Caller {
    pub uid: u32,
    /// The shim's pid, when the transport says (always on the Unix socket).
    pub pid: Option<u32>,
}

/// Where a process stands: its parent (the SDK daemon, for a shim) and
/// process groups. Read from /proc; `None` where it cannot be read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lineage {
    pub pid: u32,
    pub parent: Option<u32>,
    pub pgrp: Option<u32>,
    pub parent_pgrp: Option<u32>,
}

impl Lineage {
    pub fn of(pid: u32) -> Lineage {
        let stat = crate::tracee::proc_stat(pid).ok();
        let parent = stat.map(|s| s.ppid).filter(|&p| p > 0);
        Lineage {
            pid,
            parent,
            pgrp: stat.map(|s| s.pgrp),
            parent_pgrp: parent
                .and_then(|p| crate::tracee::proc_stat(p).ok())
                .map(|s| s.pgrp),
        }
    }
}

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

/// Creates the notify directory: search-only for others (a non-root relay
/// reaches its socket by name but cannot list the others).
///
/// # Errors
/// It cannot be created or its mode set.
pub fn prepare_notify_dir(notify_dir: &Path) -> Result<(), IntakeError> {
    let dir_err = |source| IntakeError::Dir {
        path: notify_dir.to_path_buf(),
        source,
    };
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o711)
        .create(notify_dir)
        .map_err(dir_err)?;
    std::fs::set_permissions(notify_dir, std::fs::Permissions::from_mode(0o711)).map_err(dir_err)
}

/// A notify socket waiting for its handoff.
pub struct Pending {
    pub path: PathBuf,
    listener: OwnedFd,
    session: String,
    caller: Caller,
    /// What the handoff must be: a notify fd, or a request to be traced.
    backend: ExecBackend,
}

/// Creates a fresh notify socket for `caller` (blocking: filesystem work).
///
/// # Errors
/// The directory or the socket cannot be created, or its owner set.
pub fn open_notify_socket(
    notify_dir: &Path,
    session_id: &str,
    caller: Caller,
    backend: ExecBackend,
) -> Result<Pending, IntakeError> {
    let n = SOCKET_COUNTER.fetch_add(1, Ordering::Relaxed);
    let path = notify_dir.join(format!("{session_id}-{n}-{}.sock", random_token()));
    let sock_err = |source| IntakeError::Socket {
        path: path.clone(),
        source,
    };
    let listener = match seqpacket::bind_listen(&path, 1) {
        Ok(l) => l,
        // The directory is made at start; made again if someone removed it.
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            prepare_notify_dir(notify_dir)?;
            seqpacket::bind_listen(&path, 1).map_err(sock_err)?
        }
        Err(e) => return Err(sock_err(e)),
    };
    let undo = |e| {
        let _ = std::fs::remove_file(&path);
        sock_err(e)
    };
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).map_err(undo)?;
    chown(&path, Some(caller.uid), None).map_err(undo)?;
    Ok(Pending {
        path,
        listener,
        session: session_id.to_string(),
        caller,
        backend,
    })
}

/// Waits for the one handoff of `pending`, then supervises the tree on a
/// thread of its own. `slot` (the caller's count of unused notify sockets)
/// is given back when this returns.
///
/// Long because the handoff is one sequence against one deadline (accept,
/// identify the peer, receive the fd, check it, ACK, audit) and every early
/// return must audit a refusal before the status byte; split, each piece
/// would carry the whole state.
pub async fn take_handoff(
    ctx: Arc<SupervisorContext>,
    trees: Arc<Trees>,
    pending: Pending,
    slot: Slot,
) {
    let Pending {
        path,
        listener,
        session,
        caller,
        backend,
    } = pending;
    let listener = match SeqpacketListener::from_fd(listener) {
        Ok(l) => l,
        Err(e) => {
            tracing::error!(socket = %path.display(), "notify socket unusable: {e}");
            let _ = std::fs::remove_file(&path);
            return;
        }
    };
    let accepted = tokio::time::timeout(ACCEPT_DEADLINE, listener.accept()).await;
    // One connection only: the name goes away whatever happened.
    let _ = std::fs::remove_file(&path);
    drop(listener);
    drop(slot);
    let (conn, cred) = match accepted {
        Ok(Ok(c)) => c,
        Ok(Err(e)) => {
            tracing::warn!(socket = %path.display(), "accept on notify socket failed: {e}");
            return;
        }
        Err(_) => {
            tracing::warn!(socket = %path.display(), "no handoff within {ACCEPT_DEADLINE:?}; socket removed");
            return;
        }
    };
    let mut buf = [0u8; HANDOFF_LEN + 1];
    let received =
        tokio::time::timeout(HANDOFF_READ_TIMEOUT, conn.recv_with_fds(&mut buf, 1)).await;
    let checked = match received {
        Err(_) => Err(format!("no handoff within {HANDOFF_READ_TIMEOUT:?}")),
        Ok(Err(e)) => Err(format!("handoff read failed: {e}")),
        Ok(Ok((n, fds, scm))) => {
            // SO_PEERCRED unless the kernel answers it with our own (gVisor).
            let cred = match scm {
                Some(c) if cred.pid == std::process::id() => c,
                _ => cred,
            };
            check_handoff(&buf[..n], fds, cred, caller, backend)
        }
    };
    // ptrace: the wrapper is seized before the status byte, so nothing of
    // the tree runs untraced.
    let checked = match checked {
        Ok(Taken::Trace(pid)) => {
            let tree = Tree {
                session_id: session.clone(),
                root_pid: pid,
            };
            let (c, t) = (ctx.clone(), trees.clone());
            match tokio::task::spawn_blocking(move || supervisor::trace::attach(&c, t, tree)).await
            {
                Ok(Ok(())) => Ok(Taken::Trace(pid)),
                Ok(Err(e)) => Err(e),
                Err(e) => Err(format!("attach failed: {e}")),
            }
        }
        other => other,
    };
    match checked {
        Ok(taken) => {
            let pid = taken.pid();
            if let Err(e) = conn.send_record(&[Ack::Accepted.to_byte()]).await {
                // The relay will not ACK unixwrap, which then refuses to run;
                // dropping the fd makes any exec in the tree fail (ENOSYS);
                // a traced wrapper is killed with the tracer's tracees (it
                // exits, refusing to run, and the tree ends with it).
                tracing::warn!(pid, "relay gone before the status byte: {e}");
                return;
            }
            ctx.audit.record(
                &session,
                EventBody::Handoff(HandoffEvent {
                    pid,
                    accepted: true,
                    reason: match taken {
                        Taken::Notify(..) => "notify fd taken".into(),
                        Taken::Trace(_) => "wrapper seized (ptrace backend)".into(),
                    },
                }),
            );
            let Taken::Notify(pid, fd) = taken else {
                return; // the tracer thread supervises it from here
            };
            let tree = Tree {
                session_id: session,
                root_pid: pid,
            };
            let spawned = std::thread::Builder::new()
                .name("agentsh-tree".into())
                .spawn(move || {
                    trees.started(tree.root_pid, &tree.session_id);
                    let root = tree.root_pid;
                    supervisor::serve(ctx, tree, Arc::new(fd));
                    trees.finished(root);
                });
            if let Err(e) = spawned {
                // The fd is dropped with the closure: the tree's execs fail (closed).
                tracing::error!(pid, "cannot start the tree's supervisor thread: {e}");
            }
        }
        Err(reason) => {
            tracing::warn!(socket = %path.display(), "handoff refused: {reason}");
            // Recorded before the answer, as every decision is.
            ctx.audit.record(
                &session,
                EventBody::Handoff(HandoffEvent {
                    pid: 0,
                    accepted: false,
                    reason,
                }),
            );
            let _ = conn.send_record(&[Ack::Refused.to_byte()]).await;
        }
    }
}

/// What an accepted handoff gives.
enum Taken {
    /// The wrapper's pid and its notify fd.
    Notify(u32, OwnedFd),
    /// The wrapper's pid, to be seized.
    Trace(u32),
}

impl Taken {
    fn pid(&self) -> u32 {
        match self {
            Taken::Notify(pid, _) | Taken::Trace(pid) => *pid,
        }
    }
}

/// The checks of the module doc: who connected, which pid the message
/// names, and what it carries (a seccomp notify fd, or nothing for ptrace).
fn check_handoff(
    msg: &[u8],
    fds: Vec<OwnedFd>,
    cred: seqpacket::PeerCred,
    caller: Caller,
    backend: ExecBackend,
) -> Result<Taken, String> {
    if cred.uid != caller.uid {
        return Err(format!(
            "connection from uid {}, but the socket was issued to uid {}",
            cred.uid, caller.uid
        ));
    }
    let handoff = decode_handoff(msg).ok_or_else(|| {
        format!(
            "malformed handoff ({} bytes, first {:#04x})",
            msg.len(),
            msg.first().copied().unwrap_or(0)
        )
    })?;
    let pid = match (handoff, backend) {
        (Handoff::Notify(pid), ExecBackend::Notify)
        | (Handoff::Trace(pid), ExecBackend::Ptrace) => pid,
        (h, b) => {
            return Err(format!(
                "a {} handoff, but this tree's backend is {}",
                match h {
                    Handoff::Notify(_) => "notify-fd",
                    Handoff::Trace(_) => "trace-me",
                },
                b.name()
            ))
        }
    };
    match caller.pid {
        Some(shim) => {
            if pid != shim {
                return Err(format!(
                    "handoff names pid {pid}, but wrap-init was called by pid {shim}"
                ));
            }
            let relay_parent = crate::tracee::proc_stat(cred.pid).map(|s| s.ppid);
            if relay_parent.as_ref().ok() != Some(&shim) {
                return Err(format!(
                    "the relay (pid {}) is not a child of pid {shim} ({relay_parent:?})",
                    cred.pid
                ));
            }
        }
        // Seizing needs to know whom: only a caller the kernel named.
        None if backend == ExecBackend::Ptrace => {
            return Err("a trace handoff from a caller whose pid is unknown".into())
        }
        None => {}
    }
    let mut fds = fds.into_iter();
    if backend == ExecBackend::Ptrace {
        return match fds.next() {
            None => Ok(Taken::Trace(pid)),
            Some(_) => Err("a trace handoff carried an fd".into()),
        };
    }
    let fd = match (fds.next(), fds.next()) {
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
    Ok(Taken::Notify(pid, fd))
}
