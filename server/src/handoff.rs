//! Notify-fd handoff: one abstract SOCK_SEQPACKET socket per wrap-init, one
//! accepted handoff.
//!
//! wrap-init creates `@agentsh-notify-<server pid>-<n>-<random>`: abstract,
//! so no shell leaves a file in a filesystem a tree could fill. The relay
//! helper connects, sends one record `[0xA7][wrapper pid u32 LE]` with the
//! notify fd in SCM_RIGHTS, and reads one status byte (1 accepted, 0
//! refused).
//!
//! Trust: the socket accepts connections within [`ACCEPT_DEADLINE`] until
//! one handoff passes the checks: the uid that asked for it (SO_PEERCRED),
//! the pid in the message is the process that called wrap-init (the shim,
//! which became unixwrap in place), and the connecting relay is its child.
//! The fd must be a seccomp notify fd (checked through /proc/self/fd). A
//! supervised tree cannot create a SEQPACKET socket, so it cannot connect
//! here at all; a process outside every tree can see the name, so a
//! connection that fails is refused and recorded as a `handoff` audit event
//! and the socket waits on for its own relay.
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
use std::path::PathBuf;
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

/// A notify socket waiting for its handoff.
pub struct Pending {
    pub path: PathBuf,
    listener: OwnedFd,
    session: String,
    caller: Caller,
    /// What the handoff must be: a notify fd, or a request to be traced.
    backend: ExecBackend,
    /// Where the tree's programs may not come from (`exec_sources`).
    terms: crate::supervisor::TreeTerms,
}

/// Creates a fresh notify socket for `caller`: an abstract one
/// (`@agentsh-notify-<server pid>-<n>-<random>`), so no shell leaves a file
/// anywhere: a tree that fills the inodes of `/run` (or of whatever
/// filesystem holds the run directory) cannot stop the next wrap-init.
///
/// # Errors
/// The socket cannot be created.
pub fn open_notify_socket(
    session_id: &str,
    caller: Caller,
    backend: ExecBackend,
    terms: crate::supervisor::TreeTerms,
) -> Result<Pending, IntakeError> {
    let n = SOCKET_COUNTER.fetch_add(1, Ordering::Relaxed);
    let path = PathBuf::from(format!(
        "@agentsh-notify-{}-{n}-{}",
        std::process::id(),
        random_token()
    ));
    let listener = seqpacket::bind_listen(&path, 8).map_err(|source| IntakeError::Socket {
        path: path.clone(),
        source,
    })?;
    Ok(Pending {
        path,
        listener,
        session: session_id.to_string(),
        caller,
        backend,
        terms,
    })
}

/// Waits for the one accepted handoff of `pending`, then supervises the
/// tree on a thread of its own. A connection that fails the checks (another
/// uid, a pid that did not call wrap-init, no notify fd) is refused and
/// audited, and the socket keeps waiting for its own relay until
/// [`ACCEPT_DEADLINE`]: an abstract name is visible to every process of
/// the network namespace (`/proc/net/unix`), and one outside every tree
/// must not be able to use up another's socket (trees cannot create
/// SEQPACKET sockets at all). `slot` (the caller's count of unused notify
/// sockets) is given back when this returns.
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
        terms,
    } = pending;
    let listener = match SeqpacketListener::from_fd(listener) {
        Ok(l) => l,
        Err(e) => {
            tracing::error!(socket = %path.display(), "notify socket unusable: {e}");
            return;
        }
    };
    let deadline = tokio::time::Instant::now() + ACCEPT_DEADLINE;
    loop {
        let (conn, cred) = match tokio::time::timeout_at(deadline, listener.accept()).await {
            Ok(Ok(c)) => c,
            Ok(Err(e)) => {
                tracing::warn!(socket = %path.display(), "accept on notify socket failed: {e}");
                return;
            }
            Err(_) => {
                tracing::warn!(socket = %path.display(), "no handoff within {ACCEPT_DEADLINE:?}; socket closed");
                return;
            }
        };
        match handoff(&ctx, &trees, &session, &terms, &conn, cred, caller, backend).await {
            Ok(taken) => {
                drop(listener);
                drop(slot);
                supervise(ctx, trees, &conn, session, terms, taken).await;
                return;
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
}

/// One connection's handoff: received within [`HANDOFF_READ_TIMEOUT`],
/// checked, and under ptrace the wrapper seized before any answer, so
/// nothing of the tree runs untraced.
#[allow(clippy::too_many_arguments)]
async fn handoff(
    ctx: &Arc<SupervisorContext>,
    trees: &Arc<Trees>,
    session: &str,
    terms: &crate::supervisor::TreeTerms,
    conn: &crate::api::transport::SeqpacketConn,
    cred: seqpacket::PeerCred,
    caller: Caller,
    backend: ExecBackend,
) -> Result<Taken, String> {
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
    match checked {
        Ok(Taken::Trace(pid)) => {
            let tree = Tree::new(session.to_string(), pid, terms.clone());
            let (c, t) = (ctx.clone(), trees.clone());
            match tokio::task::spawn_blocking(move || supervisor::trace::attach(&c, t, tree)).await
            {
                Ok(Ok(())) => Ok(Taken::Trace(pid)),
                Ok(Err(e)) => Err(e),
                Err(e) => Err(format!("attach failed: {e}")),
            }
        }
        other => other,
    }
}

/// An accepted handoff: the status byte, the audit event, and the tree's
/// supervisor thread (under ptrace the tracer thread already has it).
async fn supervise(
    ctx: Arc<SupervisorContext>,
    trees: Arc<Trees>,
    conn: &crate::api::transport::SeqpacketConn,
    session: String,
    terms: crate::supervisor::TreeTerms,
    taken: Taken,
) {
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
    let tree = Tree::new(session, pid, terms);
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
