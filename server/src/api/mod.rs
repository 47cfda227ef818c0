//! The API: HTTP/1.1 on the Unix SOCK_SEQPACKET socket (`server.socket`,
//! always) and, for operators who need it, on TCP (`server.http.addr`).
//!
//! Routes: `GET /healthz`, `GET /api/v1/status` (what `agentsh detect`
//! says of this host), `POST /api/v1/sessions`, `GET /api/v1/sessions`,
//! `POST /api/v1/sessions/{id}/wrap-init`, `GET /api/v1/sessions/{id}/events
//! [?after=N&wait=SECS]`, `GET /api/v1/approvals[?after=SEQ&wait=SECS]`,
//! `POST /api/v1/approvals/{id}`.
//!
//! Who may call what (see `peer` for how peers are identified):
//!
//! | route | Unix peer | TCP peer |
//! |---|---|---|
//! | `/healthz` | anyone | anyone |
//! | wrap-init | any uid, for itself | only with `server.http.wrap_init: true`, identified through `/proc` |
//! | everything else | uid 0 (the operator) | the operator token |
//!
//! No route serves a process of a supervised tree: it cannot create the
//! socket type the API listens on, and if it somehow connected, the lineage
//! check refuses it before a byte is read.
//!
//! The transport is async (tokio + hyper): a long-poll is a parked future,
//! not a thread, so no number of long-polls, event streams or slow clients
//! can make wrap-init wait; blocking work (wrap-init's ruleset compile, the
//! `/proc` scans) runs on the blocking pool. Module layout: `transport`
//! (sockets), `peer` (identification and limits), `routes` (the handlers),
//! `answer` (JSON answers, errors, request bodies).
//!
//! Failure modes: errors are JSON `{"error": "..."}` with a 4xx/5xx status;
//! a listener that fails is logged and the server exits non-zero (a server
//! without its socket would leave `auto` shims refusing, which is safe, but
//! an operator must see it).

mod answer;
pub mod peer;
pub mod routes;
mod sessions;
pub mod transport;
mod wrap_init;

use crate::audit::AuditLog;
use crate::config::Config;
use crate::session::Sessions;
use crate::supervisor::SupervisorContext;
use crate::trees::Trees;
use agentsh_proto::SeccompConfig;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use peer::{Kind, Limits, Peer};
use std::sync::Arc;
use std::time::Duration;
use transport::SeqpacketListener;

/// Everything a request handler needs.
pub struct Api {
    pub config: Config,
    pub sessions: Sessions,
    pub audit: Arc<AuditLog>,
    pub supervisor: Arc<SupervisorContext>,
    /// Execs held for an operator (the supervisor reaches them through its
    /// `Hold` seam; the routes list and decide them here).
    pub approvals: Arc<crate::approval::Approvals>,
    /// Flags and deadlines of every tree's config (its filter, ruleset and
    /// env rules come from its session's `Setup`).
    pub seccomp_config: SeccompConfig,
    /// Makes the sessions an operator creates at run time.
    pub maker: crate::session::Maker,
    pub trees: Arc<Trees>,
    pub limits: Arc<Limits>,
    /// The operator token (`<state_dir>/approval.token`): TCP routes need it.
    pub token: String,
    /// What the host offered at start (`agentsh detect`).
    pub detected: crate::detect::Report,
    /// Whether shells can be supervised now, and which (see `daemon::command`).
    pub gate: Arc<crate::daemon::command::Gate>,
}

/// How long a client may take to send its request headers.
const HEADER_TIMEOUT: Duration = Duration::from_secs(5);

fn http() -> http1::Builder {
    let mut b = http1::Builder::new();
    b.timer(TokioTimer::new())
        .header_read_timeout(HEADER_TIMEOUT)
        .max_buf_size(agentsh_proto::http::MAX_RECORD * 4);
    b
}

/// Serves the Unix socket until it fails.
pub async fn serve_unix(api: Arc<Api>, listener: SeqpacketListener) {
    loop {
        let (conn, cred) = match listener.accept().await {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!("accept on the API socket failed: {e}");
                // EMFILE and friends: do not spin.
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let api = api.clone();
        tokio::spawn(async move {
            let cred = match tokio::time::timeout(HEADER_TIMEOUT, conn.identify(cred)).await {
                Ok(Ok(c)) => c,
                Ok(Err(e)) => {
                    tracing::warn!("API connection refused: peer unidentifiable: {e}");
                    return;
                }
                Err(_) => return,
            };
            let peer = Peer::Local(cred);
            let Ok(_slot) = api.limits.take(Kind::Connection, peer.key()) else {
                tracing::warn!(
                    uid = cred.uid,
                    pid = cred.pid,
                    "API connection refused: too many at once"
                );
                return;
            };
            // Second line (module doc): a tree process is refused before any
            // byte of its request is read. A few short /proc reads, done
            // here: a hop to the blocking pool would cost more than they do.
            if let Some(why) = api.trees.by_lineage(cred.pid) {
                tracing::warn!(peer = %peer.describe(), "API connection from a supervised tree refused: {why}");
                return;
            }
            let svc = service_fn(move |req| routes::handle(api.clone(), peer, req));
            if let Err(e) = http().serve_connection(TokioIo::new(conn), svc).await {
                tracing::debug!("API connection ended: {e}");
            }
        });
    }
}

/// Serves TCP until it fails.
pub async fn serve_tcp(api: Arc<Api>, listener: tokio::net::TcpListener) {
    loop {
        let (stream, addr) = match listener.accept().await {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!("accept on the TCP API failed: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let api = api.clone();
        tokio::spawn(async move {
            let peer = Peer::Tcp(addr);
            let Ok(_slot) = api.limits.take(Kind::Connection, peer.key()) else {
                return;
            };
            let svc = service_fn(move |req| routes::handle(api.clone(), peer, req));
            if let Err(e) = http().serve_connection(TokioIo::new(stream), svc).await {
                tracing::debug!("TCP API connection ended: {e}");
            }
        });
    }
}
