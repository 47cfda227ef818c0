//! The running proxy: its setup from the config, its start (the CA, the
//! loopback listeners, a runtime of its own), and the cell a server keeps
//! it in (started once, at first need).
//!
//! Failure modes: see the family's doc (`proxy`).

use super::book::Book;
use super::ca;
use super::serve;
use super::state::{Proxy, ProxyError};
use super::upstream;
use crate::audit::AuditLog;
use crate::config::secrets::SecretSource;
use crate::supervisor::{Hold, HttpProxy, ProxyDown, ProxyOnDemand};
use std::collections::BTreeMap;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;

/// What the proxy needs from the server's config.
#[derive(Clone)]
pub struct ProxySetup {
    pub ca_key: PathBuf,
    pub ca: PathBuf,
    pub upstream_roots: Vec<PathBuf>,
    pub secrets: BTreeMap<String, SecretSource>,
    /// `execve.explain: stderr`: a held request's caller is told it waits.
    pub explain: bool,
}

impl ProxySetup {
    pub fn of(config: &crate::config::Config) -> ProxySetup {
        ProxySetup {
            ca_key: config.ca_key_path(),
            ca: config.egress.ca.clone(),
            upstream_roots: config.egress.upstream_roots.clone(),
            secrets: config.secrets.clone(),
            explain: config.execve.explain == crate::config::Explain::Stderr,
        }
    }
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
        let ca = ca::Ca::load_or_make(&setup.ca_key, &setup.ca)?;
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
            book: Book::default(),
            ca,
            roots,
            secrets: setup.secrets.clone(),
            audit,
            approvals,
            explain: setup.explain,
            runtime,
            open: std::sync::Mutex::new(std::collections::HashMap::new()),
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
}

/// The proxy of a server: started at first need (or at start, when a
/// policy has `http:`), once; a start that failed stays failed (said in
/// the log, and in every refusal it causes).
pub struct ProxyCell {
    setup: ProxySetup,
    started: std::sync::OnceLock<Result<Arc<Proxy>, ProxyDown>>,
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
    ) -> Result<Arc<Proxy>, ProxyDown> {
        self.started
            .get_or_init(|| {
                Proxy::start(&self.setup, audit.clone(), approvals.clone()).map_err(|e| {
                    tracing::error!(
                        "egress HTTP proxy: {e}: every connect an egress rule with http: \
                         allows is refused"
                    );
                    ProxyDown(e.to_string())
                })
            })
            .clone()
    }
}

impl ProxyOnDemand for ProxyCell {
    fn running(
        &self,
        audit: &Arc<AuditLog>,
        approvals: &Arc<dyn Hold>,
    ) -> Result<Arc<dyn HttpProxy>, ProxyDown> {
        let proxy: Arc<dyn HttpProxy> = self.get(audit, approvals)?;
        Ok(proxy)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::supervisor::Held;

    /// Where nothing is held: the proxy does not start far enough to hold.
    struct NoHold;

    impl Hold for NoHold {
        fn hold(self: Arc<Self>, _held: Box<dyn Held>) {
            unreachable!("a proxy that did not start held a request");
        }
    }

    /// A proxy whose CA cannot be made does not start, says why, and stays
    /// down: every connect that needs it is refused with that reason.
    #[test]
    fn a_proxy_that_cannot_start_says_why_and_stays_down() {
        let cell: Box<dyn ProxyOnDemand> = Box::new(ProxyCell::new(ProxySetup {
            ca_key: PathBuf::from("/proc/self/agentsh-no-such-dir/ca.key"),
            ca: PathBuf::from("/proc/self/agentsh-no-such-dir/ca.pem"),
            upstream_roots: Vec::new(),
            secrets: BTreeMap::new(),
            explain: false,
        }));
        let audit = Arc::new(AuditLog::in_memory(4));
        let approvals: Arc<dyn Hold> = Arc::new(NoHold);
        let Err(first) = cell.running(&audit, &approvals) else {
            panic!("a proxy without its CA started");
        };
        assert!(
            first.0.contains("agentsh-no-such-dir"),
            "the reason names the CA's place: {first}"
        );
        let Err(again) = cell.running(&audit, &approvals) else {
            panic!("a failed start was tried again and succeeded");
        };
        assert_eq!(again.0, first.0);
    }
}
