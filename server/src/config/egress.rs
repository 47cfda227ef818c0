//! `egress.*`: where the DNS stub listens, the upstreams it asks, how much
//! of a policy's egress must hold on this host, and the CA's files.
//!
//! Why the addresses are checked at load: a stub or resolver that does not
//! parse, or a resolver that is the stub itself (a loop), would only show
//! when the first tree asks a name.
//!
//! Failure modes: [`EgressAddrError`], naming the value; an empty resolver
//! list takes `/etc/resolv.conf`'s nameservers other than the stub.

use super::error::EgressAddrError;
use serde::Deserialize;
use std::net::SocketAddr;
use std::path::PathBuf;

/// `egress.*`: the DNS stub and how much of a policy's `egress` must hold.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct EgressSection {
    /// Where the DNS stub listens (UDP and TCP), `IP:PORT`.
    pub stub: String,
    /// The upstreams the stub asks, `IP:PORT` (empty: the nameservers of
    /// the server's `/etc/resolv.conf`, except the stub).
    pub resolvers: Vec<String>,
    pub compat: EgressCompat,
    /// Where agentsh's CA certificate is published (`ca-bundle.pem`
    /// beside it: the system's roots and it); its key is
    /// `<state_dir>/ca.key`.
    pub ca: PathBuf,
    /// Where the CA's key is kept (empty: `<state_dir>/ca.key`); its
    /// directory is never a tree's to read.
    pub ca_key: String,
    /// PEM files whose certificates the proxy also trusts for upstreams,
    /// besides the system's store.
    pub upstream_roots: Vec<PathBuf>,
}

/// `egress.compat`: what a tree gets where its policy's egress cannot be
/// enforced on this host.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EgressCompat {
    /// It runs; every call egress would judge is refused (EACCES,
    /// audited), and wrap-init lists `egress` under `not_enforced`.
    #[default]
    BestEffort,
    /// It does not start (exit 126).
    Required,
    /// It runs, and a call egress cannot judge here runs as the tree made
    /// it, its destination audited from the caller's memory (`rule:
    /// allow_unjudged`). The one fail-open choice: an operator's, said at
    /// start and in every such event.
    AllowUnjudged,
}

impl EgressCompat {
    pub fn as_str(self) -> &'static str {
        match self {
            EgressCompat::BestEffort => "best_effort",
            EgressCompat::Required => "required",
            EgressCompat::AllowUnjudged => "allow_unjudged",
        }
    }
}

/// The nameservers `resolv_conf` names, except `stub` (port 53).
pub fn nameservers(resolv_conf: &str, stub: SocketAddr) -> Vec<SocketAddr> {
    resolv_conf
        .lines()
        .filter_map(|l| {
            let mut w = l.split_whitespace();
            (w.next() == Some("nameserver")).then(|| w.next()).flatten()
        })
        .filter_map(|ip| ip.split('%').next()?.parse::<std::net::IpAddr>().ok())
        .map(|ip| SocketAddr::new(ip, 53))
        .filter(|a| *a != stub)
        .collect()
}

impl Default for EgressSection {
    fn default() -> Self {
        EgressSection {
            stub: "127.0.0.153:53".into(),
            resolvers: Vec::new(),
            compat: EgressCompat::BestEffort,
            ca: "/etc/agentsh/ca.pem".into(),
            ca_key: String::new(),
            upstream_roots: Vec::new(),
        }
    }
}

impl EgressSection {
    /// `stub` as an address.
    pub fn stub_addr(&self) -> Result<SocketAddr, EgressAddrError> {
        self.stub
            .parse()
            .map_err(|_| EgressAddrError::Stub(self.stub.clone()))
    }

    /// `resolvers` as addresses; an empty list: `resolv_conf`'s nameservers
    /// other than the stub.
    pub fn upstream(&self, resolv_conf: &str) -> Result<Vec<SocketAddr>, EgressAddrError> {
        let stub = self.stub_addr()?;
        if self.resolvers.is_empty() {
            return Ok(nameservers(resolv_conf, stub));
        }
        self.resolvers
            .iter()
            .map(|r| {
                let a: SocketAddr = r
                    .parse()
                    .map_err(|_| EgressAddrError::Resolver(r.clone()))?;
                if a == stub {
                    return Err(EgressAddrError::ResolverIsStub(r.clone()));
                }
                Ok(a)
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nameservers_skip_the_stub_and_comments() {
        use std::net::SocketAddr;
        let stub: SocketAddr = "127.0.0.153:53".parse().unwrap();
        let got = nameservers(
            "# x\nnameserver 127.0.0.153\nnameserver 10.0.0.2\nsearch a\nnameserver fe80::1%eth0\n",
            stub,
        );
        assert_eq!(
            got,
            vec![
                "10.0.0.2:53".parse::<SocketAddr>().unwrap(),
                "[fe80::1]:53".parse().unwrap()
            ]
        );
    }
}
