//! agentsh's HTTP proxy for egress rules with `http:`: every request to
//! those destinations is judged by method and path, refused with a 403
//! that says why, held for an operator, or sent on with the headers the
//! rule injects (credentials the tree never holds).
//!
//! The tree does not choose to use it: a connect the egress family allows
//! by a rule with `http:` is made by the supervisor to this proxy's
//! loopback address instead (on the tree's own socket), after booking the
//! socket's local address with what was judged (the original destination,
//! the name, the rule, the session). The proxy takes the booking when the
//! connection arrives (once; a connection nobody booked is closed), so
//! `HTTP_PROXY`, `NO_PROXY` and connecting by IP change nothing.
//!
//! TLS (a first byte of 0x16) is terminated with a certificate agentsh's
//! CA signs for the name the client asks (SNI), after the upstream at the
//! original destination has shown a certificate for that name that the
//! system's store (and `egress.upstream_roots`) trusts; ALPN offers the
//! client only what the upstream chose (h2 or http/1.1). Plain HTTP is
//! HTTP/1.1. Rooms: `ca` (the CA and its leaves), `book` (bookings),
//! `serve` (one connection), `upstream` (the connection onwards),
//! `request` (one request), `hold` (a request held for an operator).
//!
//! Failure modes: a CA or listener that cannot be had: the proxy does not
//! start and every connect that needs it is refused (`egress_unenforceable`,
//! with the reason). A name the rule does not name (SNI or Host), an
//! upstream that cannot be reached or whose certificate is not trusted:
//! the client gets a 403 or 502 whose body says why (never a connection
//! to an unverified upstream). A client that does not trust agentsh's CA
//! fails its own handshake (closed, never open).

mod book;
pub mod ca;
mod hold;
mod request;
mod serve;
mod upstream;

pub use book::Booking;

use crate::audit::AuditLog;
use crate::config::secrets::SecretSource;
use crate::supervisor::Hold;
use std::collections::BTreeMap;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;

/// Why the proxy did not start.
#[derive(Debug, thiserror::Error)]
pub enum ProxyError {
    #[error("agentsh's egress CA: {0}")]
    Ca(#[from] ca::CaError),
    #[error("the HTTP proxy cannot listen on {addr}: {error}")]
    Listen {
        addr: SocketAddr,
        error: std::io::Error,
    },
    #[error("the HTTP proxy's runtime cannot start: {0}")]
    Runtime(std::io::Error),
    #[error("no root certificate for upstreams could be read ({0})")]
    Roots(String),
}

/// What the proxy needs from the server's config.
#[derive(Clone)]
pub struct ProxySetup {
    pub state_dir: PathBuf,
    pub ca: PathBuf,
    pub upstream_roots: Vec<PathBuf>,
    pub secrets: BTreeMap<String, SecretSource>,
    /// `execve.explain: stderr`: a held request's caller is told it waits.
    pub explain: bool,
}

impl ProxySetup {
    pub fn of(config: &crate::config::Config) -> ProxySetup {
        ProxySetup {
            state_dir: config.state_dir.clone(),
            ca: config.egress.ca.clone(),
            upstream_roots: config.egress.upstream_roots.clone(),
            secrets: config.secrets.clone(),
            explain: config.execve.explain == crate::config::Explain::Stderr,
        }
    }
}

/// The running proxy.
pub struct Proxy {
    /// Where it listens (loopback), per family.
    pub v4: SocketAddr,
    pub v6: Option<SocketAddr>,
    pub(crate) book: book::Book,
    pub(crate) ca: ca::Ca,
    pub(crate) roots: Arc<rustls::RootCertStore>,
    pub(crate) secrets: BTreeMap<String, SecretSource>,
    pub(crate) audit: Arc<AuditLog>,
    pub(crate) approvals: Arc<dyn Hold>,
    pub(crate) explain: bool,
    runtime: tokio::runtime::Runtime,
}

impl Proxy {
    /// Makes (or loads) the CA, listens on loopback (an ephemeral port,
    /// IPv4 and, where the host has it, IPv6) and serves on a runtime of
    /// its own.
    ///
    /// # Errors
    /// See the module's failure modes.
    pub fn start(
        setup: &ProxySetup,
        audit: Arc<AuditLog>,
        approvals: Arc<dyn Hold>,
    ) -> Result<Arc<Proxy>, ProxyError> {
        let ca = ca::Ca::load_or_make(&setup.state_dir, &setup.ca)?;
        let roots = Arc::new(upstream::roots(&setup.upstream_roots)?);
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("agentsh-proxy")
            .enable_all()
            .build()
            .map_err(ProxyError::Runtime)?;
        let listen = |addr: SocketAddr| {
            let l = std::net::TcpListener::bind(addr)
                .map_err(|error| ProxyError::Listen { addr, error })?;
            l.set_nonblocking(true)
                .map_err(|error| ProxyError::Listen { addr, error })?;
            let local = l
                .local_addr()
                .map_err(|error| ProxyError::Listen { addr, error })?;
            Ok::<_, ProxyError>((l, local))
        };
        let (l4, v4) = listen(SocketAddr::new(Ipv4Addr::LOCALHOST.into(), 0))?;
        let six = listen(SocketAddr::new(Ipv6Addr::LOCALHOST.into(), 0)).ok();
        let proxy = Arc::new(Proxy {
            v4,
            v6: six.as_ref().map(|(_, a)| *a),
            book: book::Book::default(),
            ca,
            roots,
            secrets: setup.secrets.clone(),
            audit,
            approvals,
            explain: setup.explain,
            runtime,
        });
        let mut listeners = vec![l4];
        listeners.extend(six.map(|(l, _)| l));
        for l in listeners {
            let me = proxy.clone();
            let _guard = proxy.runtime.enter();
            let l = tokio::net::TcpListener::from_std(l)
                .map_err(|error| ProxyError::Listen { addr: v4, error })?;
            proxy.runtime.spawn(serve::accept_loop(me, l));
        }
        tracing::info!(
            v4 = %proxy.v4,
            v6 = ?proxy.v6,
            ca = %proxy.ca.cert_path.display(),
            "egress HTTP proxy listening (for egress rules with http:)"
        );
        Ok(proxy)
    }

    /// Where a socket of `domain` is connected to reach the proxy.
    pub fn addr_for(&self, domain: i32) -> SocketAddr {
        match (domain, self.v6) {
            (libc::AF_INET6, Some(v6)) => v6,
            (libc::AF_INET6, None) => {
                SocketAddr::new(Ipv4Addr::LOCALHOST.to_ipv6_mapped().into(), self.v4.port())
            }
            _ => self.v4,
        }
    }

    /// Books the connection that will come from `local` (a tree's socket's
    /// address) with what was judged.
    pub fn book(&self, local: SocketAddr, b: Booking) {
        self.book.insert(local, b);
    }
}

/// Whether `name` is one the egress rule names (any, for a rule by
/// address alone).
pub(crate) fn names_host(hosts: &[crate::policy::egress::HostPattern], name: &str) -> bool {
    hosts.is_empty() || hosts.iter().any(|h| h.matches(name))
}

/// The proxy of a server: started at first need (or at start, when a
/// policy has `http:`), once; a start that failed stays failed (said in
/// the log, and in every refusal it causes).
pub struct ProxyCell {
    setup: ProxySetup,
    started: std::sync::OnceLock<Result<Arc<Proxy>, String>>,
}

impl ProxyCell {
    pub fn new(setup: ProxySetup) -> ProxyCell {
        ProxyCell {
            setup,
            started: std::sync::OnceLock::new(),
        }
    }

    /// The running proxy, started now if it is not yet.
    ///
    /// # Errors
    /// It cannot start (why).
    pub fn get(
        &self,
        audit: &Arc<AuditLog>,
        approvals: &Arc<dyn Hold>,
    ) -> Result<Arc<Proxy>, String> {
        self.started
            .get_or_init(|| {
                Proxy::start(&self.setup, audit.clone(), approvals.clone()).map_err(|e| {
                    tracing::error!(
                        "egress HTTP proxy: {e}: every connect an egress rule with http: \
                         allows is refused"
                    );
                    e.to_string()
                })
            })
            .clone()
    }
}
