//! A compiled program as the server ships it (the BPF, its wire encoding)
//! and what the wrap-init audit event records of it ([`FilterSummary`]).
//!
//! Failure modes: see [`FilterError`]: the program cannot be built.

use super::build;
use super::error::FilterError;
use super::spec::{FilterSpec, SignalGuard};
use agentsh_proto::ExecBackend;
use serde::{Deserialize, Serialize};

/// What the wrap-init audit event records of the filter a tree got.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FilterSummary {
    pub instructions: usize,
    /// Where the exec (and signal-guard) traps go.
    #[serde(default)]
    pub backend: ExecBackend,
    pub signal_guard: SignalGuard,
    pub protected_pids: Vec<u32>,
    pub protected_pgids: Vec<u32>,
    pub refuse_kill_own_group: bool,
    /// The policy's additions to the base blocklist.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub policy_blocked: Vec<String>,
    /// The policy's `exec_memory: deny` is in the program.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub refuse_exec_memory: bool,
    /// Files mapped executable go to the supervisor (`exec_memory: deny` or
    /// `exec_sources: {writable: deny}`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub judge_exec_maps: bool,
    /// The `socket()` families allowed (absent: any).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub socket_families: Option<Vec<u32>>,
    /// Destinations go to the supervisor (the policy's `egress`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub egress: bool,
}

/// A compiled program, ready to ship.
#[derive(Debug)]
pub struct CompiledFilter {
    pub program: Vec<libc::sock_filter>,
    /// `agentsh_proto::bpf::encode_program(&program)`.
    pub encoded: String,
    pub summary: FilterSummary,
}

/// Compiles `spec` (no cache).
///
/// # Errors
/// See [`FilterError`].
pub fn compile(spec: &FilterSpec) -> Result<CompiledFilter, FilterError> {
    Ok(compiled(spec, build::program(spec)?))
}

/// The [`CompiledFilter`] of `spec` whose program is `program`.
pub(super) fn compiled(spec: &FilterSpec, program: Vec<libc::sock_filter>) -> CompiledFilter {
    let encoded = agentsh_proto::bpf::encode_program(&program);
    CompiledFilter {
        summary: FilterSummary {
            instructions: program.len(),
            backend: spec.backend,
            signal_guard: spec.signal_guard,
            protected_pids: spec.protected_pids.iter().copied().collect(),
            protected_pgids: spec.protected_pgids.iter().copied().collect(),
            refuse_kill_own_group: spec.refuse_kill_own_group,
            policy_blocked: spec.blocked.iter().cloned().collect(),
            refuse_exec_memory: spec.refuse_exec_memory,
            judge_exec_maps: spec.judge_exec_maps,
            socket_families: spec
                .net
                .families
                .as_ref()
                .map(|f| f.iter().copied().collect()),
            egress: spec.net.egress,
        },
        program,
        encoded,
    }
}
