//! What every tree's supervisor shares: the limits, the audit, where held
//! calls wait for an operator, the DNS stub, the host's egress choice, the
//! HTTP proxy, and what the families ask the kernel and `/proc` through
//! (`host`, `stops`: the real ones in the server, recording doubles in the
//! unit tests).
//!
//! Failure modes: none; a type.

use super::http_proxy::{HttpProxy, ProxyDown, ProxyOnDemand};
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
    /// The HTTP proxy of egress rules with `http:` (`proxy::ProxyCell`).
    pub proxy: Box<dyn ProxyOnDemand>,
    /// What the families ask the kernel and `/proc` about a caller
    /// (`tracee::host::RealHost` in the server).
    pub host: Arc<dyn crate::tracee::host::Host>,
    /// What they ask the kernel to do to a tree's tasks
    /// (`stops::RealStops` in the server).
    pub stops: Arc<dyn super::stops::TaskStops>,
    /// The shims installed here, whose exec in a tree a verifying backend
    /// makes straight to the real one (`exec::hop`).
    pub hops: super::shimhops::ShimHops,
}

impl SupervisorContext {
    /// The HTTP proxy, started now if it is not yet.
    ///
    /// # Errors
    /// It cannot start (why).
    pub fn proxy(&self) -> Result<Arc<dyn HttpProxy>, ProxyDown> {
        self.proxy.running(&self.audit, &self.approvals)
    }
}
