//! What stops `agentsh server` at start: one variant per way of failing,
//! each saying what failed, on what, and what to fix (the CLI prints it and
//! exits non-zero).
//!
//! Failure modes: this is them. Errors of other modules keep their own
//! types as the source; those still in flux are held as [`Foreign`].

use super::rundir::RunDirError;
use crate::config::{ConfigError, SharedLocation};
use crate::policy::PolicyError;
use std::path::PathBuf;

/// Errors from other modules whose error types are their own business (a
/// text today, a typed error tomorrow): kept as the source, said as is.
pub type Foreign = Box<dyn std::error::Error + Send + Sync>;

/// What stops the server at start, each saying what to fix.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("cannot block signals: {0}")]
    BlockSignals(#[source] nix::Error),
    #[error("config {}: {source}", path.display())]
    ConfigUnreadable {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(
        "config {} is owned by uid {uid}: only root (or the server's own user) may own the file \
         that decides what agentsh enforces; `chown root {}`",
        path.display(),
        path.display()
    )]
    ConfigOwner { path: PathBuf, uid: u32 },
    #[error(
        "config {} has mode {mode:o}: group or others could change what agentsh enforces; \
         `chmod go-w {}`",
        path.display(),
        path.display()
    )]
    ConfigMode { path: PathBuf, mode: u32 },
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(transparent)]
    OwnLocation(#[from] SharedLocation),
    #[error("cannot load policy {name:?}: {source}")]
    Policy {
        name: String,
        source: Box<PolicyError>,
    },
    #[error("sessions.{id}: cannot load policy {name:?}: {source}")]
    SessionPolicy {
        id: String,
        name: String,
        source: Box<PolicyError>,
    },
    #[error("cannot open audit log {}: {source} (set audit.jsonl in the config)", path.display())]
    Audit {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(transparent)]
    Otlp(#[from] crate::otlp::EndpointError),
    #[error(
        "cannot write the operator token under {}: {source} (state_dir must be writable by the \
         server)",
        dir.display()
    )]
    Token {
        dir: PathBuf,
        source: std::io::Error,
    },
    /// No exec backend works here (`detect::choose_backend`'s reason).
    #[error(transparent)]
    NoBackend(crate::detect::NoBackend),
    #[error(transparent)]
    RunDir(#[from] RunDirError),
    /// The policies' identity index could not be built.
    #[error("{0}")]
    Indexes(Foreign),
    #[error("the default session: {0}")]
    DefaultSession(#[source] crate::session::MakeError),
    #[error("sessions.{id}: {source}")]
    ConfigSession {
        id: String,
        source: crate::session::MakeError,
    },
    #[error("sessions.{id}: {reason:?}")]
    ConfigSessionNotMade {
        id: String,
        reason: crate::session::NotMade,
    },
    #[error("cannot start the API runtime: {0}")]
    Runtime(#[source] std::io::Error),
    #[error("cannot listen on {} (server.socket): {source}", socket.display())]
    Listen {
        socket: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot listen on {addr} (server.http.addr): {source}")]
    ListenTcp {
        addr: String,
        source: std::io::Error,
    },
    #[error("the API stopped: {0}")]
    ApiStopped(#[source] tokio::task::JoinError),
}

pub(super) type Result<T> = std::result::Result<T, StartError>;
