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
    /// Makes the sessions an operator creates at run time.
    pub maker: crate::session::Maker,
    pub trees: Arc<Trees>,
    pub limits: Arc<Limits>,
    /// The operator token (`<state_dir>/approval.token`): TCP routes need it.
    pub token: String,
    /// What the host offered at start (`agentsh detect`).
    pub detected: crate::detect::Report,
    /// Whether shells can be supervised now, and which (see `readiness`).
    pub gate: Arc<Gate>,
}
