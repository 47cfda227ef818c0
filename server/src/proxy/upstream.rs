//! The connection onwards: to the destination the tree connected to (never
//! another), over TLS verified against the system's store and
//! `egress.upstream_roots` for the name the client asked, or plain; then
//! HTTP/2 or HTTP/1.1 as the upstream's ALPN chose.
//!
//! Failure modes: no root certificate at all is a start error; an
//! upstream that cannot be reached in [`CONNECT_TIMEOUT`], refuses TLS, or
//! shows a certificate not trusted for the name: an error with the reason
//! (the client gets a 502 that says it): an [`UpstreamError`].

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

/// Why there is no connection onwards, or why it failed a request: the
/// client's 502 says it, the `http` event's message too.
#[derive(Debug, thiserror::Error)]
pub(crate) enum UpstreamError {
    #[error("cannot connect to {dest}: {source}")]
    Connect {
        dest: SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot connect to {dest}: no answer in {} s", CONNECT_TIMEOUT.as_secs())]
    ConnectTimeout { dest: SocketAddr },
    /// The TLS client's configuration (the protocol versions offered).
    #[error("TLS: {0}")]
    TlsConfig(#[source] rustls::Error),
    #[error("{name:?} is not a name TLS can verify: {source}")]
    TlsName {
        name: String,
        #[source]
        source: rustls::pki_types::InvalidDnsNameError,
    },
    #[error("TLS with {name} at {dest}: no handshake in {} s", CONNECT_TIMEOUT.as_secs())]
    HandshakeTimeout { name: String, dest: SocketAddr },
    /// The handshake failed: refused, or a certificate not trusted for
    /// the name.
    #[error("TLS with {name} at {dest}: {source}")]
    Handshake {
        name: String,
        dest: SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error("HTTP/2 with the upstream: {0}")]
    Http2(#[source] hyper::Error),
    #[error("HTTP/1.1 with the upstream: {0}")]
    Http1(#[source] hyper::Error),
    /// A connection whose name is refused: the upstream is never asked.
    #[error("not contacted")]
    NotContacted,
    #[error("the upstream connection closed: {0}")]
    Closed(#[source] hyper::Error),
    #[error("the upstream failed the request: {0}")]
    Failed(#[source] hyper::Error),
}

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
async fn tcp(dest: SocketAddr) -> Result<TcpStream, UpstreamError> {
    match tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(dest)).await {
        Ok(Ok(s)) => {
            let _ = s.set_nodelay(true);
            Ok(s)
        }
        Ok(Err(source)) => Err(UpstreamError::Connect { dest, source }),
        Err(_) => Err(UpstreamError::ConnectTimeout { dest }),
    }
}

/// A TLS connection to `dest` for `name`, offering `alpn`; with the
/// protocol the upstream chose.
pub(crate) async fn tls(
    roots: &Arc<rustls::RootCertStore>,
    dest: SocketAddr,
    name: &str,
    alpn: Vec<Vec<u8>>,
) -> Result<(tokio_rustls::client::TlsStream<TcpStream>, Option<Vec<u8>>), UpstreamError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(UpstreamError::TlsConfig)?
        .with_root_certificates(roots.clone())
        .with_no_client_auth();
    config.alpn_protocols = alpn;
    let server =
        ServerName::try_from(name.to_string()).map_err(|source| UpstreamError::TlsName {
            name: name.to_string(),
            source,
        })?;
    let s = tcp(dest).await?;
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let t = tokio::time::timeout(CONNECT_TIMEOUT, connector.connect(server, s))
        .await
        .map_err(|_| UpstreamError::HandshakeTimeout {
            name: name.to_string(),
            dest,
        })?
        .map_err(|source| UpstreamError::Handshake {
            name: name.to_string(),
            dest,
            source,
        })?;
    let chosen = t.get_ref().1.alpn_protocol().map(<[u8]>::to_vec);
    Ok((t, chosen))
}

/// A plain connection to `dest`.
pub(crate) async fn plain(dest: SocketAddr) -> Result<TcpStream, UpstreamError> {
    tcp(dest).await
}

/// The HTTP handshake on `io`: HTTP/2 when `h2`, else HTTP/1.1 (with
/// upgrades); the connection is driven on the runtime.
pub(crate) async fn handshake<T>(io: T, h2: bool) -> Result<Sender, UpstreamError>
where
    T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let io = TokioIo::new(io);
    if h2 {
        let (send, conn) = http2::handshake(TokioExecutor::new(), io)
            .await
            .map_err(UpstreamError::Http2)?;
        tokio::spawn(async move {
            if let Err(e) = conn.await {
                tracing::debug!("egress proxy: upstream HTTP/2 connection: {e}");
            }
        });
        Ok(Sender::H2(send))
    } else {
        let (send, conn) = http1::handshake(io).await.map_err(UpstreamError::Http1)?;
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
    ) -> Result<hyper::Response<Incoming>, UpstreamError> {
        match self {
            Sender::H1(s) => {
                let mut s = s.lock().await;
                s.ready().await.map_err(UpstreamError::Closed)?;
                s.send_request(req).await.map_err(UpstreamError::Failed)
            }
            Sender::H2(s) => {
                let mut s = s.clone();
                s.ready().await.map_err(UpstreamError::Closed)?;
                s.send_request(req).await.map_err(UpstreamError::Failed)
            }
        }
    }

    pub(crate) fn is_h2(&self) -> bool {
        matches!(self, Sender::H2(_))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run<F: std::future::Future>(f: F) -> F::Output {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime")
            .block_on(f)
    }

    #[test]
    fn a_name_tls_cannot_verify_is_refused_before_any_connect() {
        let roots = Arc::new(rustls::RootCertStore::empty());
        // Nothing listens at port 9 of TEST-NET-1: a connect would time out.
        let dest: SocketAddr = "192.0.2.1:9".parse().unwrap();
        let e = run(tls(&roots, dest, "not a name", Vec::new()))
            .map(|_| ())
            .unwrap_err();
        assert!(
            matches!(&e, UpstreamError::TlsName { name, .. } if name == "not a name"),
            "{e:?}"
        );
        assert!(
            e.to_string()
                .starts_with("\"not a name\" is not a name TLS can verify: "),
            "{e}"
        );
    }

    #[test]
    fn an_upstream_that_refuses_the_connect_is_named_with_the_kernels_error() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let dest = l.local_addr().unwrap();
        drop(l);
        let e = run(plain(dest)).unwrap_err();
        assert!(
            matches!(&e, UpstreamError::Connect { dest: d, source } if *d == dest
                && source.kind() == std::io::ErrorKind::ConnectionRefused),
            "{e:?}"
        );
        assert!(
            e.to_string()
                .starts_with(&format!("cannot connect to {dest}: ")),
            "{e}"
        );
        assert_eq!(UpstreamError::NotContacted.to_string(), "not contacted");
        assert_eq!(
            UpstreamError::ConnectTimeout { dest }.to_string(),
            format!("cannot connect to {dest}: no answer in 15 s")
        );
    }
}
