//! The running server: the API's runtime, its listeners, the `active`
//! marker, the rehearsal shell, the command below the server, and serving
//! until stopped.
//!
//! Failure modes: a socket that cannot be bound (`server.socket`,
//! `server.http.addr`), a runtime that cannot start, or an API that stops:
//! a [`StartError`] (the server exits non-zero, its socket is not left to
//! `auto` shims). A rehearsal that fails is logged and the server becomes
//! ready all the same.

use super::error::{Result, StartError};
use super::{command, outsiders, rehearsal, rundir, signals, warm};
use crate::api::{self, Api};
use crate::audit::AuditLog;
use crate::config::Config;
use crate::readiness::{Gate, Readiness};
use crate::transport::SeqpacketListener;
use std::path::PathBuf;
use std::sync::Arc;

/// How long an idle thread of the API runtime's blocking pool is kept.
const BLOCKING_KEEP_ALIVE: std::time::Duration = std::time::Duration::from_secs(3600);

/// The API's runtime: two workers, and a blocking pool whose threads stay.
pub(super) fn api_runtime() -> Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("agentsh-api")
        // A wrap-init's blocking part runs on this pool: the thread a shell
        // after a quiet spell finds is one already made (issue 20).
        .thread_keep_alive(BLOCKING_KEEP_ALIVE)
        .enable_all()
        .build()
        .map_err(StartError::Runtime)
}

/// What serving needs besides the [`Api`] itself.
pub(super) struct Serving {
    pub(super) run_dir: PathBuf,
    /// A standalone `agentsh wrap`'s server.
    pub(super) private: bool,
    pub(super) policy_name: String,
    pub(super) audit: Arc<AuditLog>,
    /// `-- CMD`, started once the server is ready (an empty command: none).
    pub(super) command: command::Spawn,
    pub(super) report: command::Report,
    pub(super) gate: Arc<Gate>,
}

/// Binds, marks agentsh active, rehearses one shell, starts the command and
/// serves until stopped.
pub(super) async fn serve(api: Api, s: Serving) -> Result<()> {
    let (unix, owner, tcp) = listen(&api.config).await?;
    // The first wrap-init's threads, made now: a blocking-pool thread
    // and (its stack cached by libc when it ends) a tree's.
    let _ = tokio::task::spawn_blocking(warm::tree_thread).await;
    // Not a wrap's: the machine's shims are not its business.
    rundir::write_marker(&s.run_dir, !s.private)?;
    rundir::ingest_unsupervised(&s.run_dir, &s.audit);
    outsiders::spawn(s.audit.clone(), s.private);
    let config = api.config.clone();
    let api = Arc::new(api);
    let reloading = api.clone();
    signals::spawn_waiter(
        api.trees.clone(),
        config.server.socket.clone(),
        s.audit.clone(),
        Box::new(move |sender| {
            let by = api::reload::By {
                how: "sighup",
                uid: signals::uid_of(sender),
                pid: sender,
            };
            match api::reload::reload(&reloading, by) {
                Ok(done) => tracing::info!(
                    sender,
                    sessions = done.sessions.len(),
                    "SIGHUP: policies reloaded"
                ),
                Err(e) => tracing::error!(
                    sender,
                    "SIGHUP: policy reload refused, nothing changed: {e}"
                ),
            }
        }),
    );
    // One shell the whole way before `ready` (503 until it is over).
    let rehearsal = rehearsal::prepare(&api);
    if let Some(tcp) = tcp {
        tokio::spawn(api::serve_tcp(api.clone(), tcp));
    }
    if let Some(owner) = owner {
        tokio::spawn(api::serve_unix(api.clone(), owner));
    }
    let serving = tokio::spawn(api::serve_unix(api.clone(), unix));
    rehearsal::run(&api, rehearsal).await;
    if !s.command.command.is_empty() && s.gate.get() == Readiness::Ready {
        start_command(s.command, s.report, &config, &s.audit, api.limits.clone());
    }
    tracing::info!(
        socket = %config.server.socket.display(),
        tcp = %config.server.http.addr,
        policy = %s.policy_name,
        audit = %config.audit.jsonl.display(),
        wrapper = %config.wrapper_binary_path().display(),
        "agentsh server ready"
    );
    serving.await.map_err(StartError::ApiStopped)?;
    Ok(())
}

/// The accept queue of the socket every local user shares: short, so a
/// connection another user's flood has queued ahead of one waits little
/// (a flood's refusals are paced: `api::serve`), and a burst longer than it
/// waits in `connect`, not refused. Root's shells have a queue of their own,
/// the owner's door ([`OWNER_BACKLOG`]: an SDK starting many at once).
const SHARED_BACKLOG: i32 = 64;
const OWNER_BACKLOG: i32 = 1024;

/// The API socket (open to every uid), its owner's door and the optional
/// TCP listener.
async fn listen(config: &Config) -> Result<Listeners> {
    let unix =
        SeqpacketListener::bind(&config.server.socket, SHARED_BACKLOG).map_err(|source| {
            StartError::Listen {
                socket: config.server.socket.clone(),
                source,
            }
        })?;
    rundir::open_socket_mode(&config.server.socket)?;
    let owner = owner_door(&config.server.socket);
    let tcp = match config.server.http.addr.as_str() {
        "" => None,
        addr => Some(
            tokio::net::TcpListener::bind(addr)
                .await
                .map_err(|source| StartError::ListenTcp {
                    addr: addr.to_string(),
                    source,
                })?,
        ),
    };
    Ok((unix, owner, tcp))
}

type Listeners = (
    SeqpacketListener,
    Option<SeqpacketListener>,
    Option<tokio::net::TcpListener>,
);

/// The owner's door ([`agentsh_proto::seqpacket::owner_socket`]): root's
/// (and this server's user's) own accept queue, which no other local user
/// can fill. Without it (a name too long, a bind that fails) those clients
/// use the shared socket, as everyone else does: said in the log.
fn owner_door(socket: &std::path::Path) -> Option<SeqpacketListener> {
    let Some(path) = agentsh_proto::seqpacket::owner_socket(socket) else {
        tracing::warn!(socket = %socket.display(), "no owner's door beside the API socket (its name is too long): root's shells share the accept queue with every local user");
        return None;
    };
    let made = agentsh_proto::seqpacket::bind_listen_owner_only(&path, OWNER_BACKLOG)
        .and_then(SeqpacketListener::from_fd);
    match made {
        Ok(l) => Some(l),
        Err(e) => {
            tracing::warn!(door = %path.display(), "cannot open the owner's door beside the API socket: {e}; root's shells share the accept queue with every local user");
            None
        }
    }
}

/// Starts `-- CMD` below the server; when it ends, the socket goes and the
/// export is flushed before the server exits with its status.
fn start_command(
    spawn: command::Spawn,
    report: command::Report,
    config: &Config,
    audit: &Arc<AuditLog>,
    limits: Arc<crate::limits::Limits>,
) {
    let socket = config.server.socket.clone();
    let audit = audit.clone();
    command::start(spawn, report, move || {
        rundir::remove_sockets(&socket);
        // An answer being written is finished first (an approval that let
        // the command end is answered), for at most a moment: a client
        // that keeps its connection (a long-poll) does not hold the stop.
        let deadline = std::time::Instant::now() + DRAIN;
        while limits.connections() > 0 && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        audit.flush_export();
    });
}

/// How long a stopping server waits for its open API connections.
const DRAIN: std::time::Duration = std::time::Duration::from_secs(2);
