//! The config document: the top-level keys and the sections they hold
//! ([`Config`]), a session's own keys ([`SessionSection`]), and what follows
//! from them alone (where the CA key and unixwrap are, the run directory,
//! the TCP port).
//!
//! Why one type with defaults: every key is optional (`serde(default)`),
//! and unknown keys are errors (`deny_unknown_fields`): a misspelt limit
//! must not silently fall back to a default.
//!
//! Failure modes: none here; parsing and checking are `load`'s.

use super::audit::AuditSection;
use super::egress::EgressSection;
use super::execve::ExecveSection;
use super::landlock::LandlockSection;
use super::secrets;
use super::server::ServerSection;
use serde::Deserialize;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    pub server: ServerSection,
    pub policy: String,
    pub policies_dir: PathBuf,
    pub state_dir: PathBuf,
    pub audit: AuditSection,
    pub wrapper_binary: String,
    pub execve: ExecveSection,
    pub workspace: String,
    pub landlock: LandlockSection,
    pub egress: EgressSection,
    /// Sessions besides `default` (whose policy and workspace are the
    /// top-level ones), made at start.
    pub sessions: std::collections::BTreeMap<String, SessionSection>,
    /// Values added to requests `http:` rules allow (`${secret:NAME}`).
    pub secrets: std::collections::BTreeMap<String, secrets::SecretSource>,
}

/// `sessions.<id>`: one task's policy, workspace and environment rules.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct SessionSection {
    /// A shipped name, a name under `policies_dir`, or a path (default: the
    /// top-level `policy`).
    #[serde(default)]
    pub policy: Option<String>,
    /// What `${WORKSPACE}` (and `${SESSION_ROOT}`) mean for this session:
    /// an existing directory (default: none, rules naming it are skipped).
    #[serde(default)]
    pub workspace: Option<String>,
    /// Removed, kept and set in the environment of the session's shells,
    /// besides the policy's own `env:` (both apply).
    #[serde(default)]
    pub env: Option<agentsh_proto::env::EnvDoc>,
    /// What each of its trees may use (processes, memory, CPU, wall time),
    /// over its policy's `limits:` key by key (`vocab::limits`).
    #[serde(default)]
    pub limits: Option<crate::vocab::LimitsDoc>,
}

/// The CA key's file name in `state_dir` (the proxy writes it there; the
/// config says where it is).
pub const CA_KEY_FILE: &str = "ca.key";

impl Config {
    /// Where agentsh's CA key is (`egress.ca_key`, else in `state_dir`).
    pub fn ca_key_path(&self) -> PathBuf {
        if self.egress.ca_key.is_empty() {
            self.state_dir.join(CA_KEY_FILE)
        } else {
            PathBuf::from(&self.egress.ca_key)
        }
    }
}

impl Default for Config {
    fn default() -> Self {
        Config {
            server: ServerSection::default(),
            policy: "agent-default".into(),
            policies_dir: "/etc/agentsh/policies".into(),
            state_dir: "/var/lib/agentsh".into(),
            audit: AuditSection::default(),
            wrapper_binary: String::new(),
            execve: ExecveSection::default(),
            workspace: String::new(),
            landlock: LandlockSection::default(),
            egress: EgressSection::default(),
            sessions: std::collections::BTreeMap::new(),
            secrets: std::collections::BTreeMap::new(),
        }
    }
}

impl Config {
    /// The unixwrap path handed to shims.
    pub fn wrapper_binary_path(&self) -> PathBuf {
        if !self.wrapper_binary.is_empty() {
            return PathBuf::from(&self.wrapper_binary);
        }
        std::env::current_exe()
            .ok()
            .and_then(|p| p.parent().map(|d| d.join("agentsh-unixwrap")))
            .unwrap_or_else(|| PathBuf::from("/usr/bin/agentsh-unixwrap"))
    }

    /// The directory of the API socket: notify sockets, the `active` marker.
    pub fn run_dir(&self) -> PathBuf {
        self.server
            .socket
            .parent()
            .map_or_else(|| PathBuf::from("/run/agentsh"), Path::to_path_buf)
    }

    /// The TCP listener's port, if there is one.
    pub fn tcp_port(&self) -> Option<u16> {
        self.server
            .http
            .addr
            .parse::<SocketAddr>()
            .ok()
            .map(|a| a.port())
    }
}
