//! One connection to the proxy: its booking (none: closed), then TLS or
//! plain, the connection onwards, and HTTP served request by request.
//!
//! Over TLS the client's hello is read first: the name it asks (SNI; none:
//! the name the tree resolved, else the address) must be one the egress
//! rule names, or every request gets a 403 saying so (the upstream is not
//! contacted). Otherwise the upstream is connected first, offered the
//! client's ALPN (h2, http/1.1), and the client is offered only what the
//! upstream chose, so both sides speak the same protocol.
//!
//! Failure modes: a client that sends nothing, or whose handshake fails
//! (it does not trust agentsh's CA), is closed and logged at debug; an
//! upstream that cannot be reached still gets the client's requests
//! answered, with a 502 that says why.

use super::book::{names_host, Booking};
use super::request::{handle, Conn};
use super::state::{Proxy, CONNECTIONS_MAX};
use super::upstream::{self, UpstreamError};
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::{TcpListener, TcpStream};

/// How long a client may take to say anything.
const HELLO_TIMEOUT: Duration = Duration::from_secs(30);

/// Accepts connections for ever.
pub(super) async fn accept_loop(proxy: Arc<Proxy>, l: TcpListener) {
    loop {
        match l.accept().await {
            Ok((s, peer)) => {
                let p = proxy.clone();
                tokio::spawn(async move {
                    // A connect judged where it stops is booked once it has
                    // returned: a moment after the connection arrives.
                    let Some(b) = booked(&p, peer).await else {
                        tracing::warn!(
                            %peer,
                            "egress proxy: a connection no supervised connect booked: closed"
                        );
                        return;
                    };
                    connection(p, s, b).await;
                });
            }
            Err(e) => {
                tracing::warn!("egress proxy: accept: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}

/// How long a connection waits for its booking.
const BOOKING_WAIT: Duration = Duration::from_secs(2);

/// The booking of a connection from `peer`, waiting up to [`BOOKING_WAIT`].
async fn booked(proxy: &Proxy, peer: std::net::SocketAddr) -> Option<Booking> {
    let end = tokio::time::Instant::now() + BOOKING_WAIT;
    loop {
        if let Some(b) = proxy.book.take(peer) {
            return Some(b);
        }
        if tokio::time::Instant::now() >= end {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

/// One open connection of a session, counted while it lives.
struct Counted {
    proxy: Arc<Proxy>,
    session: String,
}

impl Counted {
    /// Counts one more for `session`; `None` past [`CONNECTIONS_MAX`].
    fn new(proxy: &Arc<Proxy>, session: &str) -> Option<Counted> {
        let mut open = proxy
            .open
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let n = open.entry(session.to_string()).or_default();
        if *n >= CONNECTIONS_MAX {
            return None;
        }
        *n += 1;
        Some(Counted {
            proxy: proxy.clone(),
            session: session.to_string(),
        })
    }
}

impl Drop for Counted {
    fn drop(&mut self) {
        let mut open = self
            .proxy
            .open
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(n) = open.get_mut(&self.session) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                open.remove(&self.session);
            }
        }
    }
}

async fn connection(proxy: Arc<Proxy>, s: TcpStream, b: Booking) {
    let Some(_counted) = Counted::new(&proxy, &b.session_id) else {
        tracing::warn!(
            session = %b.session_id,
            "egress proxy: {CONNECTIONS_MAX} connections of this session already open: closed"
        );
        return;
    };
    let _ = s.set_nodelay(true);
    let mut first = [0u8; 1];
    match tokio::time::timeout(HELLO_TIMEOUT, s.peek(&mut first)).await {
        Ok(Ok(1)) => {}
        _ => return,
    }
    if first[0] == 0x16 {
        tls(proxy, s, b).await;
    } else {
        let upstream = match upstream::plain(b.dest).await {
            Ok(u) => upstream::handshake(u, false).await,
            Err(e) => Err(e),
        };
        let conn = Arc::new(Conn {
            proxy,
            booking: b,
            tls_name: None,
            refused_name: None,
            upstream,
            h2: false,
        });
        serve(conn, s, false).await;
    }
}

/// The one certificate of a connection.
#[derive(Debug)]
struct One(Arc<CertifiedKey>);

impl ResolvesServerCert for One {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.0.clone())
    }
}

async fn tls(proxy: Arc<Proxy>, s: TcpStream, b: Booking) {
    let acceptor = tokio_rustls::LazyConfigAcceptor::new(rustls::server::Acceptor::default(), s);
    let start = match tokio::time::timeout(HELLO_TIMEOUT, acceptor).await {
        Ok(Ok(start)) => start,
        Ok(Err(e)) => {
            tracing::debug!("egress proxy: a client hello that cannot be read: {e}");
            return;
        }
        Err(_) => return,
    };
    let hello = start.client_hello();
    let sni = hello.server_name().map(str::to_ascii_lowercase);
    let offered: Vec<Vec<u8>> = hello
        .alpn()
        .map(|a| {
            a.filter(|p| *p == b"h2" || *p == b"http/1.1")
                .map(<[u8]>::to_vec)
                .collect()
        })
        .unwrap_or_default();
    let name = sni
        .clone()
        .or_else(|| b.host.clone())
        .unwrap_or_else(|| b.dest.ip().to_string());
    let refused_name = (!names_host(&b.hosts, &name)).then(|| {
        format!(
            "TLS for {name}, which is not among the hosts of egress rule {}",
            b.rule
        )
    });
    let (upstream, alpn) = onward(&proxy, &b, &name, refused_name.is_some(), offered).await;
    let leaf = match proxy.ca.leaf(&name) {
        Ok(l) => l,
        Err(e) => {
            tracing::warn!("egress proxy: no certificate for {name}: {e}");
            return;
        }
    };
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let Ok(builder) =
        rustls::ServerConfig::builder_with_provider(provider).with_safe_default_protocol_versions()
    else {
        return;
    };
    let mut config = builder
        .with_no_client_auth()
        .with_cert_resolver(Arc::new(One(leaf)));
    config.alpn_protocols = alpn;
    let stream = match start.into_stream(Arc::new(config)).await {
        Ok(s) => s,
        Err(e) => {
            // The client did not trust agentsh's CA, or gave up.
            tracing::debug!("egress proxy: TLS with the client for {name}: {e}");
            return;
        }
    };
    let h2 = stream.get_ref().1.alpn_protocol() == Some(b"h2");
    let conn = Arc::new(Conn {
        proxy,
        booking: b,
        tls_name: Some(name),
        refused_name,
        upstream,
        h2,
    });
    serve(conn, stream, h2).await;
}

/// The TLS connection onwards (none for a refused name), and the ALPN the
/// client is offered: what the upstream chose; without an upstream,
/// HTTP/1.1 where the client offered it (its requests get a 502 that says
/// why).
async fn onward(
    proxy: &Proxy,
    b: &Booking,
    name: &str,
    refused: bool,
    offered: Vec<Vec<u8>>,
) -> (Result<upstream::Sender, UpstreamError>, Vec<Vec<u8>>) {
    let (upstream, chosen) = if refused {
        (Err(UpstreamError::NotContacted), None)
    } else {
        match upstream::tls(&proxy.roots, b.dest, name, offered.clone()).await {
            Ok((t, chosen)) => {
                let h2 = chosen.as_deref() == Some(b"h2");
                (upstream::handshake(t, h2).await, chosen)
            }
            Err(e) => (Err(e), None),
        }
    };
    let alpn = match chosen {
        Some(p) => vec![p],
        None if upstream.is_err() && offered.iter().any(|p| p == b"http/1.1") => {
            vec![b"http/1.1".to_vec()]
        }
        None => Vec::new(),
    };
    (upstream, alpn)
}

/// Serves HTTP on `io` until the client closes it.
async fn serve<T>(conn: Arc<Conn>, io: T, h2: bool)
where
    T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let c = conn.clone();
    let svc = service_fn(move |req| handle(c.clone(), req));
    let io = TokioIo::new(io);
    let r = if h2 {
        hyper::server::conn::http2::Builder::new(TokioExecutor::new())
            .serve_connection(io, svc)
            .await
    } else {
        hyper::server::conn::http1::Builder::new()
            .serve_connection(io, svc)
            .with_upgrades()
            .await
    };
    if let Err(e) = r {
        tracing::debug!(session = %conn.booking.session_id, "egress proxy: a connection ended: {e}");
    }
}
