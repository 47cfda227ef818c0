//! The ways a server config can be wrong, each saying which key, what is
//! wrong with it and what to write instead (the texts the server prints at
//! start and `agentsh detect --config` and `agentsh ready --config` print).
//!
//! Failure modes: none of its own; these are values.

use std::path::PathBuf;

/// A config that cannot be used: the server does not start on it.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config {}: {source}", path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("invalid config {origin}: {source}")]
    Parse {
        origin: String,
        source: serde_yaml_ng::Error,
    },
    #[error("invalid config {origin}: {source}")]
    Invalid { origin: String, source: Invalid },
    /// A session's env rules, with their place in the file (`L:C: `).
    #[error("invalid config {origin}: {place}sessions.{id}.env.{message}")]
    SessionEnv {
        origin: String,
        place: String,
        id: String,
        message: String,
    },
}

/// A value the YAML parser accepts but the server cannot use.
#[derive(Debug, thiserror::Error)]
pub enum Invalid {
    #[error("server.http.addr {0:?} is not an address such as 127.0.0.1:18080 (or \"\" for none)")]
    HttpAddr(String),
    #[error("server.http.wrap_init needs server.http.addr")]
    WrapInitWithoutAddr,
    #[error(
        "server.socket {0:?} must be an absolute path of at most 107 bytes, in a directory of \
         its own (such as /run/agentsh/api.sock)"
    )]
    Socket(String),
    #[error("execve.max_argc and execve.max_argv_bytes must be above 0")]
    ArgvLimits,
    #[error("execve.approval_timeout must be above 0 and at most 24h")]
    ApprovalTimeout,
    #[error("landlock.max_abi {0} is not a Landlock ABI (0 for the kernel's, or 1, 2, ...)")]
    LandlockAbi(u32),
    #[error(transparent)]
    Egress(#[from] EgressAddrError),
    #[error("policy must name a policy or a file")]
    NoPolicy,
    #[error("workspace {0:?} must be an absolute path (or empty)")]
    Workspace(String),
    #[error(
        "sessions.default: the default session's policy and workspace are the top-level \
         `policy` and `workspace`; name other sessions here"
    )]
    DefaultSession,
    #[error("sessions.{0:?}: not a session id (1-64 letters, digits, '-', '_', '.')")]
    SessionId(String),
    #[error("sessions.{0:?}: the id is reserved for the server's own rehearsal shell")]
    ReservedSession(String),
}

/// `egress.stub` or `egress.resolvers` is not an address the stub can use.
#[derive(Debug, thiserror::Error)]
pub enum EgressAddrError {
    #[error(
        "egress.stub {0:?} is not IP:PORT (e.g. 127.0.0.153:53; a resolv.conf can only name \
         port 53)"
    )]
    Stub(String),
    #[error("egress.resolvers: {0:?} is not IP:PORT (e.g. 10.0.0.2:53)")]
    Resolver(String),
    #[error("egress.resolvers: {0} is the stub itself (egress.stub): it would ask itself")]
    ResolverIsStub(String),
}

/// One of agentsh's own files in a directory anyone can write (see
/// `Config::check_own_locations`).
#[derive(Debug, thiserror::Error)]
#[error(
    "{key} {} is inside {}, which anyone can write: agentsh keeps trees out of its own files, \
     and would have to take create rights on {} away from every tree to do it there; use a \
     directory such as {instead} (or, if {} is writable by mistake, `chmod o-w {}`)",
    path.display(),
    shared.display(),
    shared.display(),
    shared.display(),
    shared.display()
)]
pub struct SharedLocation {
    /// The setting (`state_dir`, `audit.jsonl`, ...).
    pub key: &'static str,
    pub path: PathBuf,
    /// The world-writable directory it is in.
    pub shared: PathBuf,
    /// Where to put it instead.
    pub instead: &'static str,
}
