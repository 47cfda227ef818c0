//! One session's ruleset: the file operations carved into path rules, the
//! TCP ports per direction, and what the kernel will enforce of it
//! ([`LandlockSummary`], for the wrap-init event); the operator's ABI cap.
//!
//! Failure modes: none at compile time; what cannot be expressed is left
//! out in the stricter direction and listed in
//! [`CompiledLandlock::warnings`] (see `landlock`).

use super::carve::{carve_all, CarveFailure};
use super::operations::{file_operations, ExecPlaces};
use super::paths::{FsView, SessionVars};
use super::protect::SelfProtection;
use crate::policy::loaded::Policy;
use crate::policy::schema::{NetworkDirection, NetworkRule};
use agentsh_proto::{FsAccess, LandlockCompat, LandlockConfig};
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;

/// What the server asked unixwrap to enforce, for the wrap-init audit event.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LandlockSummary {
    pub compat: LandlockCompat,
    pub handled_fs: Vec<FsAccess>,
    pub fs_rules: usize,
    pub tcp_connect_ports: Option<Vec<u16>>,
    pub tcp_bind_ports: Option<Vec<u16>>,
    pub scope_signals: bool,
    pub scope_abstract_unix: bool,
    /// TCP connect is not restricted, so the tree can reach the API port.
    pub api_port_reachable: bool,
    pub workspace: Option<String>,
    pub home: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
    /// The Landlock ABI the ruleset needs and the one this kernel (shared
    /// with the tree) offers.
    pub required_abi: i64,
    pub kernel_abi: i64,
    /// The operator's cap (`landlock.max_abi`), when set: `kernel_abi` is
    /// then the capped value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_abi: Option<i64>,
    /// What the kernel enforces of it: `full`, `partial` (best_effort on an
    /// older kernel), or `refused` (required on an older kernel: unixwrap
    /// refuses before installing anything). unixwrap logs its own status too.
    pub enforcement: String,
}

/// The result of [`compile`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompiledLandlock {
    pub config: LandlockConfig,
    pub summary: LandlockSummary,
    pub warnings: Vec<String>,
    /// Grants that could not be carved (also among the warnings).
    pub carve_failures: Vec<CarveFailure>,
    /// `exec_sources` places, for the supervisor's own check.
    pub exec_places: ExecPlaces,
}

const ALL_ACCESS: [FsAccess; 5] = [
    FsAccess::Read,
    FsAccess::Write,
    FsAccess::Create,
    FsAccess::Delete,
    FsAccess::Execute,
];

/// The TCP ports an allow-list keeps open for one direction, or `None` when
/// the direction is not restricted ([`crate::policy::semantics::tcp_ports`]). The
/// loader refuses rules that mean "every port but these"; should such rules
/// reach this point anyway, the direction is closed (fail closed) and
/// `warnings` says why.
pub fn tcp_ports(
    rules: &[NetworkRule],
    direction: NetworkDirection,
    warnings: &mut Vec<String>,
) -> Option<BTreeSet<u16>> {
    match crate::policy::semantics::tcp_ports(rules, direction) {
        Ok(ports) => ports,
        Err(r) => {
            warnings.push(format!(
                "network rule {:?}: {}; TCP {direction:?} is closed instead",
                rules[r.index].name, r.message
            ));
            Some(BTreeSet::new())
        }
    }
}

/// Compiles the policy's file and network rules for one session: the grants
/// and denies per operation, carved into path rules, then the TCP ports.
pub fn compile(
    policy: &Policy,
    vars: &SessionVars,
    protect: &SelfProtection,
    compat: LandlockCompat,
    fs: &dyn FsView,
) -> CompiledLandlock {
    let mut warnings = Vec::new();
    let ops = file_operations(policy, vars, protect, fs, &mut warnings);
    let (fs_rules, carve_failures) = carve_all(&ops, fs, &mut warnings);
    let mut connect = tcp_ports(
        policy.network_rules(),
        NetworkDirection::Connect,
        &mut warnings,
    );
    let bind = tcp_ports(
        policy.network_rules(),
        NetworkDirection::Bind,
        &mut warnings,
    );
    if let (Some(ports), Some(api)) = (connect.as_mut(), protect.api_port) {
        ports.remove(&api);
    }
    let api_port_reachable = protect.api_port.is_some() && connect.is_none();

    let handled_fs: Vec<FsAccess> = ALL_ACCESS
        .into_iter()
        .filter(|a| ops.handled.contains(a))
        .collect();
    let config = LandlockConfig {
        compat,
        handled_fs: handled_fs.clone(),
        fs_rules,
        tcp_connect_ports: connect.map(|s| s.into_iter().collect()),
        tcp_bind_ports: bind.map(|s| s.into_iter().collect()),
        scope_signals: true,
        scope_abstract_unix: true,
        max_abi: None,
        noexec_mounts: ops.noexec.clone(),
    };
    let required_abi = config.required_abi();
    let kernel_abi = agentsh_proto::wire::kernel_landlock_abi();
    let summary = LandlockSummary {
        compat,
        handled_fs,
        fs_rules: config.fs_rules.len(),
        tcp_connect_ports: config.tcp_connect_ports.clone(),
        tcp_bind_ports: config.tcp_bind_ports.clone(),
        scope_signals: config.scope_signals,
        scope_abstract_unix: config.scope_abstract_unix,
        api_port_reachable,
        workspace: vars.workspace.clone(),
        home: vars.home.clone(),
        warnings: warnings.clone(),
        required_abi,
        kernel_abi,
        max_abi: None,
        enforcement: enforcement(kernel_abi, required_abi, compat).to_string(),
    };
    CompiledLandlock {
        config,
        summary,
        warnings,
        carve_failures,
        exec_places: ops.exec_places.clone(),
    }
}

/// Applies the operator's `landlock.max_abi` to a compiled ruleset: the
/// config tells unixwrap not to use rights or scopes of a later ABI (it then
/// behaves as on a kernel that stops there), and the summary reports the
/// capped ABI as the kernel's and the enforcement that follows from it.
/// `None` or 0 changes nothing.
pub fn cap_abi(compiled: &mut CompiledLandlock, max_abi: Option<i64>) {
    let Some(cap) = max_abi.filter(|c| *c > 0) else {
        return;
    };
    compiled.config.max_abi = Some(cap);
    let s = &mut compiled.summary;
    s.kernel_abi = agentsh_proto::wire::effective_landlock_abi(s.kernel_abi, Some(cap));
    s.enforcement = enforcement(s.kernel_abi, s.required_abi, s.compat).to_string();
    s.max_abi = Some(cap);
}

/// What the kernel enforces of a ruleset that needs `required_abi`:
/// `full`, `partial` (best effort on an older kernel) or `refused`
/// (required on an older kernel: unixwrap refuses before installing
/// anything).
fn enforcement(kernel_abi: i64, required_abi: i64, compat: LandlockCompat) -> &'static str {
    match (kernel_abi >= required_abi, compat) {
        (true, _) => "full",
        (false, LandlockCompat::BestEffort) => "partial",
        (false, LandlockCompat::Required) => "refused",
    }
}
