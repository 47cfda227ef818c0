//! The accept loops: each connection identified and counted against its
//! peer's limits before a byte of its request is read, then served as
//! HTTP/1.1 by `routes`, on a task of its own.
//!
//! Failure modes: an accept that fails is logged and the loop goes on
//! (after a short pause, so EMFILE does not spin); a Unix peer that cannot
//! be identified, is over its connection limit or belongs to a supervised
//! tree is closed before its request is read (logged); a connection that
//! fails mid-request is dropped (logged at debug).

use super::peer::Peer;
use super::routes;
use super::state::Api;
use crate::limits::{Bucket, Kind, LimitKey};
use crate::transport::{SeqpacketConn, SeqpacketListener};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// How long a client may take to send its request headers.
const HEADER_TIMEOUT: Duration = Duration::from_secs(5);

fn http() -> http1::Builder {
    let mut b = http1::Builder::new();
    b.timer(TokioTimer::new())
        .header_read_timeout(HEADER_TIMEOUT)
        .max_buf_size(agentsh_proto::http::MAX_RECORD * 4);
    b
}

/// Connections refused over a peer's limit, said at most once a second
/// (a flood of them would otherwise cost a log line each).
struct Refused {
    count: AtomicU64,
    said_at: AtomicU64,
}

static REFUSED: Refused = Refused {
    count: AtomicU64::new(0),
    said_at: AtomicU64::new(0),
};

fn too_many(uid: u32, pid: u32) {
    let n = REFUSED.count.fetch_add(1, Ordering::Relaxed) + 1;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    if REFUSED.said_at.swap(now, Ordering::Relaxed) != now {
        tracing::warn!(
            uid,
            pid,
            refused_so_far = n,
            "API connection refused: too many at once"
        );
    }
}

/// Connections a listener refuses over their peers' limits, per second, at
/// most (after a burst of [`REFUSAL_BURST`]). A flood beyond it is not
/// accepted as fast as it is made: the accept queue fills and the
/// flooder's own `connect`s wait in the kernel, so neither it nor the
/// server spends the CPU the shells being served need. Root's shells do
/// not wait behind it: they come through the owner's door, an accept queue
/// of their own (`agentsh_proto::seqpacket::owner_socket`). Other users'
/// connections to the shared socket do (the queue is first come, first
/// served): the price of a flood, paid by the shared socket only.
const REFUSALS_PER_SEC: f64 = 2000.0;
const REFUSAL_BURST: f64 = 256.0;

/// Waits out the listener's pace after one more refusal.
async fn refused(pace: &mut Bucket) {
    let wait = pace.take(REFUSALS_PER_SEC, REFUSAL_BURST, std::time::Instant::now());
    if let Some(wait) = wait {
        tokio::time::sleep(wait).await;
    }
}

/// Serves the Unix socket until it fails.
///
/// Long because the accept loop and a connection's first steps share the
/// peer and its slot; each step is a call.
pub async fn serve_unix(api: Arc<Api>, listener: SeqpacketListener) {
    let mut pace = Bucket::full(REFUSAL_BURST, std::time::Instant::now());
    loop {
        let (fd, cred) = match listener.accept().await {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!("accept on the API socket failed: {e}");
                // EMFILE and friends: do not spin.
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        // Given up on while it waited in the queue: closed as cheaply as
        // a refusal, and paced like one.
        if crate::transport::hung_up(fd.as_fd()) {
            drop(fd);
            refused(&mut pace).await;
            continue;
        }
        // Where the kernel names the peer at accept (everywhere but gVisor),
        // it is counted here, before anything is made for the connection: a
        // flood of connections over its limit costs an accept and a close
        // each, and other askers' connections are not queued behind it.
        let named = cred.pid != std::process::id();
        let early = if named {
            match api.limits.take(Kind::Connection, LimitKey::Uid(cred.uid)) {
                Ok(s) => Some(s),
                Err(_) => {
                    too_many(cred.uid, cred.pid);
                    drop(fd);
                    refused(&mut pace).await;
                    continue;
                }
            }
        } else {
            None
        };
        let conn = match SeqpacketConn::new(fd) {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!("API connection dropped: {e}");
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
            let _slot = match early {
                Some(s) => s,
                None => match api.limits.take(Kind::Connection, peer.key()) {
                    Ok(s) => s,
                    Err(_) => return too_many(cred.uid, cred.pid),
                },
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
