//! What every tree's supervisor shares: the limits, the audit, where held
//! calls wait for an operator, the DNS stub and the host's egress choice.
//!
//! Failure modes: none; a type.

use super::seam::Hold;
use crate::audit::AuditLog;
use crate::config::ExecveSection;
use std::sync::Arc;

/// What every tree's supervisor shares.
pub struct SupervisorContext {
    pub limits: ExecveSection,
    pub audit: Arc<AuditLog>,
    /// Execs held for an operator (`decision: approve`).
    pub approvals: Arc<dyn Hold>,
    /// `audit.on_failure`.
    pub audit_on_failure: crate::config::AuditOnFailure,
    /// The DNS stub (`egress.dns: stub`), once a session's policy needs it.
    pub dns: std::sync::OnceLock<Arc<crate::dns::Stub>>,
    /// `egress.compat`: what a call egress cannot judge on this host gets.
    pub egress_compat: crate::config::EgressCompat,
    /// The HTTP proxy of egress rules with `http:`.
    pub proxy: crate::proxy::ProxyCell,
}

impl SupervisorContext {
    /// The HTTP proxy, started now if it is not yet.
    ///
    /// # Errors
    /// It cannot start (why).
    pub fn proxy(&self) -> Result<Arc<crate::proxy::Proxy>, crate::proxy::ProxyDown> {
        self.proxy.get(&self.audit, &self.approvals)
    }
}
