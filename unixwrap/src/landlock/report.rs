//! What was enforced, said once: the enforcement level the kernel reports
//! for the ruleset, and the log line that details it (the effective and
//! capped ABI, what is handled, how many path rules were added and skipped).
//!
//! Following rust-landlock, the report says *what is enforced now*; the
//! caller turns anything short of full enforcement under `compat: required`
//! into an error (see `ruleset::apply`).
//!
//! Failure modes: none; it formats what the kernel answered.

use agentsh_proto::LandlockConfig;
use landlock::{LandlockStatus, RestrictionStatus, RulesetStatus};

use super::plan::Plan;

/// How much of the ruleset the kernel enforces.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Enforcement {
    /// The config handles nothing: no ruleset was applied.
    NothingHandled,
    /// All of it.
    Full,
    /// Part of it (an older kernel under best effort).
    Partial,
    /// None of it (no Landlock in this kernel, best effort).
    None,
}

impl Enforcement {
    /// The name in the log line.
    pub fn name(self) -> &'static str {
        match self {
            Enforcement::NothingHandled => "nothing_handled",
            Enforcement::Full => "fully_enforced",
            Enforcement::Partial => "partially_enforced",
            Enforcement::None => "not_enforced",
        }
    }
}

/// What was applied: the enforcement and the log line that details it.
#[derive(Debug)]
pub struct Report {
    /// How much the kernel enforces.
    pub status: Enforcement,
    pub(crate) line: String,
}

impl std::fmt::Display for Report {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.line)
    }
}

pub(crate) fn report(
    cfg: &LandlockConfig,
    plan: &Plan,
    status: &RestrictionStatus,
    fs_added: usize,
    fs_skipped: usize,
) -> Report {
    let abi = match status.landlock {
        LandlockStatus::Available { effective_abi, .. } => format!("{effective_abi}"),
        LandlockStatus::NotEnabled => "not enabled".into(),
        LandlockStatus::NotImplemented => "not implemented".into(),
    };
    let enforced = match status.ruleset {
        RulesetStatus::FullyEnforced => Enforcement::Full,
        RulesetStatus::PartiallyEnforced => Enforcement::Partial,
        RulesetStatus::NotEnforced => Enforcement::None,
    };
    let abi = match cfg.max_abi.filter(|c| *c > 0) {
        Some(c) => format!("{abi} (capped to {c} by landlock.max_abi)"),
        None => abi,
    };
    let line = format!(
        "landlock: abi={abi} status={} {} fs_rules={fs_added} skipped={fs_skipped} \
         no_new_privs={}",
        enforced.name(),
        handled(cfg, plan),
        status.no_new_privs,
    );
    Report {
        status: enforced,
        line,
    }
}

/// What a ruleset handles and its ports, for the log.
pub(crate) fn handled(cfg: &LandlockConfig, plan: &Plan) -> String {
    format!(
        "compat={:?} handled_fs={} handled_net={} scopes={} connect_ports={:?} bind_ports={:?}",
        cfg.compat,
        names(plan.handled_fs.iter()),
        names(plan.handled_net.iter()),
        names(plan.scopes.iter()),
        cfg.tcp_connect_ports,
        cfg.tcp_bind_ports,
    )
}

/// The flags' names joined by `|` (`none` when empty).
pub(crate) fn names<T: std::fmt::Debug>(flags: impl Iterator<Item = T>) -> String {
    let v: Vec<String> = flags.map(|f| format!("{f:?}")).collect();
    if v.is_empty() {
        "none".into()
    } else {
        v.join("|")
    }
}
