//! What every request handler shares: the [`Api`], made once at start by
//! the daemon and held behind an `Arc` by every connection.
//!
//! Failure modes: none; it holds what start-up made, each part with its
//! own.

use crate::audit::AuditLog;
use crate::config::Config;
use crate::limits::Limits;
use crate::readiness::Gate;
use crate::session::Sessions;
use crate::supervisor::SupervisorContext;
use crate::trees::Trees;
use agentsh_proto::SeccompConfig;
use std::sync::Arc;

/// Reads and checks a config file (the daemon's start-up check).
pub type ConfigLoader = Box<dyn Fn(&std::path::Path) -> Result<Config, String> + Send + Sync>;

/// Everything a request handler needs.
pub struct Api {
    pub config: Config,
    pub sessions: Sessions,
    pub audit: Arc<AuditLog>,
    pub supervisor: Arc<SupervisorContext>,
    /// Execs held for an operator (the supervisor reaches them through its
    /// `Hold` seam; the routes list and decide them here).
    pub approvals: Arc<crate::approval::Approvals>,
    /// Flags and deadlines of every tree's config (its filter, ruleset and
    /// env rules come from its session's `Setup`).
    pub seccomp_config: SeccompConfig,
    /// Makes the sessions an operator creates at run time (a policy reload
    /// replaces it: [`Api::maker`]).
    pub maker: std::sync::RwLock<Arc<crate::session::Maker>>,
    /// Reads the config file again, trusted as at start (a policy reload).
    pub load_config: ConfigLoader,
    pub trees: Arc<Trees>,
    pub limits: Arc<Limits>,
    /// The operator token (`<state_dir>/approval.token`): TCP routes need it.
    pub token: String,
    /// What the host offered at start (`agentsh detect`).
    pub detected: crate::detect::Report,
    /// Whether shells can be supervised now, and which (see `readiness`).
    pub gate: Arc<Gate>,
    /// Where trees with limits get their cgroups (made at the first).
    pub cgroups: crate::cgroup::Cgroups,
}

impl Api {
    /// What makes sessions now (the config's policies as last reloaded).
    pub fn maker(&self) -> Arc<crate::session::Maker> {
        self.maker
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }
}
