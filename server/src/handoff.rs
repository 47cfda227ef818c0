//! Notify-fd handoff: one abstract SOCK_SEQPACKET socket per wrap-init, one
//! accepted handoff.
//!
//! wrap-init creates `@agentsh-notify-<server pid>-<n>-<random>`: abstract,
//! so no shell leaves a file in a filesystem a tree could fill. The shim
//! (which runs unixwrap's steps in its own process) or the relay helper
//! (when `agentsh-unixwrap` is exec'd) connects, sends one record
//! `[0xA7][wrapper pid u32 LE]` with the notify fd in SCM_RIGHTS, and reads
//! one status byte (1 accepted, 0 refused).
//!
//! Trust: the socket accepts connections within [`ACCEPT_DEADLINE`] until
//! one handoff passes the checks: the uid that asked for it (SO_PEERCRED),
//! the pid in the message is the process that called wrap-init (the shim,
//! which became unixwrap in place or runs its steps), and the connecting
//! process is that one (any of its threads) or its child (the relay).
//! The fd must be a seccomp notify fd (checked through /proc/self/fd). A
//! supervised tree cannot create a SEQPACKET socket, so it cannot connect
//! here at all; a process outside every tree can see the name, so a
//! connection that fails is refused and recorded as a `handoff` audit event
//! and the socket waits on for its own relay.
//!
//! Failure modes: every refusal leaves the wrapped shell refusing to run
//! (unixwrap waits for an accepted ACK), never running unsupervised.

use crate::audit::{EventBody, HandoffEvent};
use crate::limits::Slot;
use crate::supervisor::backend::{self, Supervising};
use crate::supervisor::{SupervisorContext, Tree};
use crate::transport::{SeqpacketConn, SeqpacketListener};
use crate::trees::Trees;
use agentsh_proto::handoff::{decode_handoff, Ack, HANDOFF_LEN};
use agentsh_proto::seqpacket;
use agentsh_proto::ExecBackend;
use std::os::fd::{AsFd, OwnedFd};
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
    /// The tree's Landlock ruleset to build while the shim loads its
    /// filter, for its root's pid (see [`Pending::build_ahead`]).
    ahead: Option<(agentsh_proto::LandlockConfig, u32)>,
    /// The tree's cgroup (its session's limits), ended with the tree.
    cgroup: Option<crate::cgroup::TreeCgroup>,
}

impl Pending {
    /// Builds the tree's Landlock ruleset (`config`) ahead, on a thread of
    /// its own as soon as the answer is out, for the tree whose root is
    /// `pid`, and sends it with an accepting ACK when the shim itself hands
    /// in (`agentsh_unixwrap::ahead`). The caller checked that `pid`
    /// resolves paths as this process does (`ahead::same_view`).
    pub fn build_ahead(&mut self, config: agentsh_proto::LandlockConfig, pid: u32) {
        self.ahead = Some((config, pid));
    }

    /// The tree's cgroup: its wall-time limit runs from the handoff, and
    /// what the kernel counted is recorded when the tree has ended (or its
    /// handoff never came).
    pub fn limit(&mut self, cgroup: crate::cgroup::TreeCgroup) {
        self.cgroup = Some(cgroup);
    }
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
        ahead: None,
        cgroup: None,
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
/// sockets) is given back when this returns. The tree's cgroup (limits)
/// goes to `trees` with the tree, or ends here when no tree started.
///
/// Long because the accept loop holds the listener, the ruleset being
/// built and the tree's limits across attempts; each step is a call.
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
        mut ahead,
        cgroup,
    } = pending;
    let mut limits = cgroup.map(|cg| LimitedTree::start(cg, ctx.audit.clone(), &session));
    // Built while the shim masks, loads its filter and hands in: from its
    // connection on (the shim connects as soon as it has the answer; before
    // it, the build would compete with writing the answer).
    let mut building = None;
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
            Ok(Ok((fd, cred))) => match crate::transport::SeqpacketConn::new(fd) {
                Ok(conn) => (conn, cred),
                Err(e) => {
                    tracing::warn!(socket = %path.display(), "notify socket connection unusable: {e}");
                    return;
                }
            },
            Ok(Err(e)) => {
                tracing::warn!(socket = %path.display(), "accept on notify socket failed: {e}");
                return;
            }
            Err(_) => {
                tracing::warn!(socket = %path.display(), "no handoff within {ACCEPT_DEADLINE:?}; socket closed");
                return;
            }
        };
        if let Some((config, pid)) = ahead.take() {
            building = Some(tokio::task::spawn_blocking(move || {
                agentsh_unixwrap::ahead::build(&config, pid)
            }));
        }
        match handoff(&ctx, &trees, &session, &terms, &conn, cred, caller, backend).await {
            Ok((pid, taken, from_caller)) => {
                drop(listener);
                drop(slot);
                let ruleset = match building.take() {
                    Some(b) if from_caller => built(b, pid).await,
                    _ => None,
                };
                if let Some(l) = limits.take() {
                    // Ends with the tree (dropped by `Trees::finished`).
                    trees.at_end(pid, Box::new(move || drop(l)));
                }
                if !supervise(ctx, &conn, session, pid, taken, ruleset).await {
                    drop(trees.take_end(pid));
                }
                return;
            }
            Err(refused) => {
                let reason = refused.to_string();
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

/// A tree's cgroup from its wrap-init: the wall-time limit's timer, and
/// when dropped (by `Trees::finished` once the tree's last process is gone,
/// or by the handoff's task when no tree started), what the kernel counted
/// recorded and the cgroup removed, on the blocking pool (the removal may
/// wait for exiting processes).
struct LimitedTree {
    cgroup: Arc<crate::cgroup::TreeCgroup>,
    audit: Arc<crate::audit::AuditLog>,
    session: String,
    wall: Option<tokio::task::JoinHandle<()>>,
    /// The server's runtime: the drop may run on a supervisor's thread.
    runtime: tokio::runtime::Handle,
}

impl LimitedTree {
    fn start(
        cgroup: crate::cgroup::TreeCgroup,
        audit: Arc<crate::audit::AuditLog>,
        session: &str,
    ) -> LimitedTree {
        let cgroup = Arc::new(cgroup);
        let wall = cgroup
            .limits
            .wall
            .map(|w| tokio::spawn(cgroup.clone().wall(audit.clone(), session.to_string(), w)));
        LimitedTree {
            cgroup,
            audit,
            session: session.to_string(),
            wall,
            runtime: tokio::runtime::Handle::current(),
        }
    }
}

impl Drop for LimitedTree {
    fn drop(&mut self) {
        if let Some(t) = self.wall.take() {
            t.abort();
        }
        let (cg, audit, session) = (
            self.cgroup.clone(),
            self.audit.clone(),
            self.session.clone(),
        );
        self.runtime
            .spawn_blocking(move || cg.ended(&audit, &session));
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
    conn: &SeqpacketConn,
    cred: seqpacket::PeerCred,
    caller: Caller,
    kind: ExecBackend,
) -> Result<(u32, Box<dyn Supervising>, bool), Refused> {
    let mut buf = [0u8; HANDOFF_LEN + 1];
    let received =
        tokio::time::timeout(HANDOFF_READ_TIMEOUT, conn.recv_with_fds(&mut buf, 1)).await;
    let checked = match received {
        Err(_) => Err(Refused::Timeout),
        Ok(Err(e)) => Err(Refused::Read(e)),
        // The caller (or anyone) connected and closed: a shim whose kernel
        // refused the filter under `auto` goes on unsupervised that way.
        Ok(Ok((0, _, _))) => Err(Refused::Closed),
        Ok(Ok((n, fds, scm))) => {
            // SO_PEERCRED unless the kernel answers it with our own (gVisor).
            let cred = match scm {
                Some(c) if cred.pid == std::process::id() => c,
                _ => cred,
            };
            check_handoff(&buf[..n], fds, cred, caller, kind)
        }
    };
    let Checked {
        pid,
        fds,
        from_caller,
    } = checked?;
    let tree = Tree::new(session.to_string(), pid, terms.clone());
    let b = backend::of(kind);
    if !b.facts().takes_over_blocking {
        return Ok((pid, b.take_over(ctx, trees, tree, fds)?, from_caller));
    }
    let (c, t) = (ctx.clone(), trees.clone());
    match tokio::task::spawn_blocking(move || b.take_over(&c, &t, tree, fds)).await {
        Ok(taken) => Ok((pid, taken?, from_caller)),
        Err(e) => Err(Refused::Join(e.to_string())),
    }
}

/// The ruleset built ahead for tree `pid`, once built; `None` (logged)
/// where it could not be: the tree then builds its own.
async fn built(
    building: tokio::task::JoinHandle<
        Result<Option<agentsh_unixwrap::ahead::Built>, agentsh_unixwrap::landlock::LandlockError>,
    >,
    pid: u32,
) -> Option<agentsh_unixwrap::ahead::Built> {
    match building.await {
        Ok(Ok(b)) => b,
        Ok(Err(e)) => {
            tracing::warn!(
                pid,
                "the tree's Landlock ruleset was not built ahead ({e}): it builds its own"
            );
            None
        }
        Err(e) => {
            tracing::warn!(
                pid,
                "building the tree's Landlock ruleset ahead failed: {e}"
            );
            None
        }
    }
}

/// An accepted handoff: the status byte (with the ruleset built ahead, if
/// any: the shim enforces it and closes it before the tree runs), the
/// audit event, and the tree's supervision started (under ptrace the
/// tracer thread already has it).
async fn supervise(
    ctx: Arc<SupervisorContext>,
    conn: &SeqpacketConn,
    session: String,
    pid: u32,
    taken: Box<dyn Supervising>,
    ruleset: Option<agentsh_unixwrap::ahead::Built>,
) -> bool {
    let ack = [Ack::Accepted.to_byte()];
    let sent = match &ruleset {
        Some(r) => conn.send_record_with_fd(&ack, r.fd.as_fd()).await,
        None => conn.send_record(&ack).await,
    };
    drop(ruleset);
    if let Err(e) = sent {
        // The relay will not ACK unixwrap, which then refuses to run;
        // dropping the fd makes any exec in the tree fail (ENOSYS);
        // a traced wrapper is killed with the tracer's tracees (it
        // exits, refusing to run, and the tree ends with it).
        tracing::warn!(pid, "relay gone before the status byte: {e}");
        return false;
    }
    ctx.audit.record(
        &session,
        EventBody::Handoff(HandoffEvent {
            pid,
            accepted: true,
            reason: taken.note().into(),
        }),
    );
    taken.start();
    true
}

/// Why a handoff was refused (the `handoff` event's reason).
#[derive(Debug, thiserror::Error)]
enum Refused {
    #[error("no handoff within {HANDOFF_READ_TIMEOUT:?}")]
    Timeout,
    #[error("handoff read failed: {0}")]
    Read(std::io::Error),
    #[error("the connection closed before a handoff (the shell went on without one, or ended)")]
    Closed,
    #[error("connection from uid {got}, but the socket was issued to uid {issued}")]
    Uid { got: u32, issued: u32 },
    #[error("malformed handoff ({len} bytes, first {first:#04x})")]
    Malformed { len: usize, first: u8 },
    #[error("a {what} handoff, but this tree's backend is {backend}")]
    WrongKind {
        what: &'static str,
        backend: &'static str,
    },
    #[error("handoff names pid {pid}, but wrap-init was called by pid {shim}")]
    OtherPid { pid: u32, shim: u32 },
    #[error("the connecting process (pid {relay}) is neither pid {shim} nor its child (its parent: {parent})")]
    NotItsRelay {
        relay: u32,
        shim: u32,
        parent: String,
    },
    #[error("a {what} handoff from a caller whose pid is unknown")]
    NoCallerPid { what: &'static str },
    #[error(transparent)]
    TakeOver(#[from] backend::TakeOverError),
    #[error("attach failed: {0}")]
    Join(String),
}

/// A handoff that passed the checks.
struct Checked {
    /// The wrapper's pid (the tree's root).
    pid: u32,
    /// What it carried.
    fds: Vec<OwnedFd>,
    /// Sent by the wrap-init caller itself (the shim, any thread of it),
    /// not its relay: only it takes a ruleset built ahead.
    from_caller: bool,
}

/// The checks of the module doc: who connected, which pid the message
/// names, and that it is the kind of handoff the tree's backend takes
/// (what it carries is the backend's to check).
fn check_handoff(
    msg: &[u8],
    fds: Vec<OwnedFd>,
    cred: seqpacket::PeerCred,
    caller: Caller,
    kind: ExecBackend,
) -> Result<Checked, Refused> {
    if cred.uid != caller.uid {
        return Err(Refused::Uid {
            got: cred.uid,
            issued: caller.uid,
        });
    }
    let handoff = decode_handoff(msg).ok_or_else(|| Refused::Malformed {
        len: msg.len(),
        first: msg.first().copied().unwrap_or(0),
    })?;
    if handoff.trap() != kind.trap() {
        return Err(Refused::WrongKind {
            what: handoff.what(),
            backend: kind.name(),
        });
    }
    let pid = handoff.pid();
    let mut from_caller = false;
    match caller.pid {
        Some(shim) => {
            if pid != shim {
                return Err(Refused::OtherPid { pid, shim });
            }
            // The shim itself (it connected before anything was installed
            // and runs unixwrap's steps in place: a thread of it sends,
            // which gVisor names by its thread id), or its relay (its child).
            // (There the sending thread waits for the answer: it is alive
            // here.)
            from_caller = cred.pid == shim
                || std::path::Path::new(&format!("/proc/{shim}/task/{}", cred.pid)).exists();
            if !from_caller {
                let parent = crate::tracee::proc_stat(cred.pid).map(|s| s.ppid);
                if parent.as_ref().ok() != Some(&shim) {
                    return Err(Refused::NotItsRelay {
                        relay: cred.pid,
                        shim,
                        parent: format!("{parent:?}"),
                    });
                }
            }
        }
        None if backend::of(kind).facts().needs_caller_pid => {
            return Err(Refused::NoCallerPid {
                what: handoff.what(),
            })
        }
        None => {}
    }
    Ok(Checked {
        pid,
        fds,
        from_caller,
    })
}
