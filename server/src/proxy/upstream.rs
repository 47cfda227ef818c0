//! The connection onwards: to the destination the tree connected to (never
//! another), over TLS verified against the system's store and
//! `egress.upstream_roots` for the name the client asked, or plain; then
//! HTTP/2 or HTTP/1.1 as the upstream's ALPN chose.
//!
//! Failure modes: no root certificate at all is a start error; an
//! upstream that cannot be reached in [`CONNECT_TIMEOUT`], refuses TLS, or
//! shows a certificate not trusted for the name: an error with the reason
//! (the client gets a 502 that says it).

use super::state::ProxyError;
use hyper::body::Incoming;
use hyper::client::conn::{http1, http2};
use hyper_util::rt::{TokioExecutor, TokioIo};
use rustls::pki_types::{CertificateDer, ServerName};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpStream;

/// How long a connect onwards may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(15);

/// The roots upstreams are verified against.
///
/// # Errors
/// None could be read.
pub(crate) fn roots(extra: &[PathBuf]) -> Result<rustls::RootCertStore, ProxyError> {
    use rustls::pki_types::pem::PemObject;
    let mut store = rustls::RootCertStore::empty();
    let system = super::ca::SYSTEM_ROOTS
        .iter()
        .find(|p| std::path::Path::new(p).exists());
    let mut files: Vec<PathBuf> = system.into_iter().map(PathBuf::from).collect();
    files.extend(extra.iter().cloned());
    let mut problems = Vec::new();
    for f in &files {
        match CertificateDer::pem_file_iter(f) {
            Ok(certs) => {
                let certs: Vec<_> = certs.filter_map(Result::ok).collect();
                let (added, _) = store.add_parsable_certificates(certs);
                if added == 0 {
                    problems.push(format!("{}: no certificate", f.display()));
                }
            }
            Err(e) => problems.push(format!("{}: {e}", f.display())),
        }
    }
    for p in &problems {
        tracing::warn!("egress proxy roots: {p}");
    }
    if store.is_empty() {
        return Err(ProxyError::Roots(if problems.is_empty() {
            format!("none of {} exists", super::ca::SYSTEM_ROOTS.join(", "))
        } else {
            problems.join("; ")
        }));
    }
    Ok(store)
}

/// What requests are sent on.
pub(crate) enum Sender {
    H1(tokio::sync::Mutex<http1::SendRequest<Incoming>>),
    H2(http2::SendRequest<Incoming>),
}

/// Connects to `dest` (TCP).
async fn tcp(dest: SocketAddr) -> Result<TcpStream, String> {
    match tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(dest)).await {
        Ok(Ok(s)) => {
            let _ = s.set_nodelay(true);
            Ok(s)
        }
        Ok(Err(e)) => Err(format!("cannot connect to {dest}: {e}")),
        Err(_) => Err(format!(
            "cannot connect to {dest}: no answer in {} s",
            CONNECT_TIMEOUT.as_secs()
        )),
    }
}

/// A TLS connection to `dest` for `name`, offering `alpn`; with the
/// protocol the upstream chose.
pub(crate) async fn tls(
    roots: &Arc<rustls::RootCertStore>,
    dest: SocketAddr,
    name: &str,
    alpn: Vec<Vec<u8>>,
) -> Result<(tokio_rustls::client::TlsStream<TcpStream>, Option<Vec<u8>>), String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS: {e}"))?
        .with_root_certificates(roots.clone())
        .with_no_client_auth();
    config.alpn_protocols = alpn;
    let server = ServerName::try_from(name.to_string())
        .map_err(|e| format!("{name:?} is not a name TLS can verify: {e}"))?;
    let s = tcp(dest).await?;
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let t = tokio::time::timeout(CONNECT_TIMEOUT, connector.connect(server, s))
        .await
        .map_err(|_| format!("TLS with {name} at {dest}: no handshake in 15 s"))?
        .map_err(|e| format!("TLS with {name} at {dest}: {e}"))?;
    let chosen = t.get_ref().1.alpn_protocol().map(<[u8]>::to_vec);
    Ok((t, chosen))
}

/// A plain connection to `dest`.
pub(crate) async fn plain(dest: SocketAddr) -> Result<TcpStream, String> {
    tcp(dest).await
}

/// The HTTP handshake on `io`: HTTP/2 when `h2`, else HTTP/1.1 (with
/// upgrades); the connection is driven on the runtime.
pub(crate) async fn handshake<T>(io: T, h2: bool) -> Result<Sender, String>
where
    T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let io = TokioIo::new(io);
    if h2 {
        let (send, conn) = http2::handshake(TokioExecutor::new(), io)
            .await
            .map_err(|e| format!("HTTP/2 with the upstream: {e}"))?;
        tokio::spawn(async move {
            if let Err(e) = conn.await {
                tracing::debug!("egress proxy: upstream HTTP/2 connection: {e}");
            }
        });
        Ok(Sender::H2(send))
    } else {
        let (send, conn) = http1::handshake(io)
            .await
            .map_err(|e| format!("HTTP/1.1 with the upstream: {e}"))?;
        tokio::spawn(async move {
            if let Err(e) = conn.with_upgrades().await {
                tracing::debug!("egress proxy: upstream HTTP/1.1 connection: {e}");
            }
        });
        Ok(Sender::H1(tokio::sync::Mutex::new(send)))
    }
}

impl Sender {
    /// Sends `req` and waits for the response head.
    pub(crate) async fn send(
        &self,
        req: hyper::Request<Incoming>,
    ) -> Result<hyper::Response<Incoming>, String> {
        match self {
            Sender::H1(s) => {
                let mut s = s.lock().await;
                s.ready()
                    .await
                    .map_err(|e| format!("the upstream connection closed: {e}"))?;
                s.send_request(req)
                    .await
                    .map_err(|e| format!("the upstream failed the request: {e}"))
            }
            Sender::H2(s) => {
                let mut s = s.clone();
                s.ready()
                    .await
                    .map_err(|e| format!("the upstream connection closed: {e}"))?;
                s.send_request(req)
                    .await
                    .map_err(|e| format!("the upstream failed the request: {e}"))
            }
        }
    }

    pub(crate) fn is_h2(&self) -> bool {
        matches!(self, Sender::H2(_))
    }
}
