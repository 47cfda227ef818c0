//! Building the ruleset and enforcing it: the handled rights and scopes,
//! the path rules, the TCP port rules, then `landlock_restrict_self`.
//!
//! Compatibility follows rust-landlock: `best_effort` enforces what the kernel
//! supports; `required` is HardRequirement and anything less than full
//! enforcement is an error. [`build`] is shared with the ruleset the server
//! builds ahead (`crate::ahead`), which names `/proc/self` by the tree's pid.
//!
//! Failure modes: a rule path that does not exist or cannot be opened is
//! skipped with a log line (skipping only removes access); a grant the kernel
//! refuses under `best_effort` is skipped too (the build starts again with a
//! copy of the ruleset per rule); any other ruleset error is returned, and the
//! caller refuses to run (the filter is already loaded).

use agentsh_proto::{LandlockCompat, LandlockConfig};
use landlock::{
    AccessFs, AccessNet, CompatLevel, Compatible, NetPort, PathBeneath, PathFd, Ruleset,
    RulesetAttr, RulesetCreated, RulesetCreatedAttr,
};

use super::error::{ruleset_err, LandlockError};
use super::plan::Plan;
use super::report::{report, Enforcement, Report};
use super::rights::{file_rights, granted_rights, union};
use super::rule_path::open_rule_path;
use crate::log;
use crate::log::Log;

/// Builds and enforces the ruleset on this thread. `no_new_privs` mirrors the
/// seccomp decision (false only when we hold CAP_SYS_ADMIN).
///
/// # Errors
/// What failed; under `required`, also any enforcement below "fully enforced".
pub fn apply(cfg: &LandlockConfig, no_new_privs: bool, log: &Log) -> Result<Report, LandlockError> {
    let plan = Plan::of(cfg);
    if plan.is_empty() {
        if !cfg.fs_rules.is_empty() {
            log!(
                log,
                "landlock: fs_rules given but handled_fs is empty; rules ignored"
            );
        }
        return Ok(Report {
            status: Enforcement::NothingHandled,
            line: "landlock: nothing handled, no ruleset applied".into(),
        });
    }
    let (created, fs_added, fs_skipped) = build(cfg, &plan, no_new_privs, log, std::process::id())?;
    let status = created
        .restrict_self()
        .map_err(ruleset_err("restrict_self"))?;
    let report = report(cfg, &plan, &status, fs_added, fs_skipped);
    if cfg.compat == LandlockCompat::Required && report.status != Enforcement::Full {
        return Err(LandlockError::NotFullyEnforced(report));
    }
    Ok(report)
}

/// The whole ruleset, not yet enforced: created, its path rules (`/proc/self`
/// named by `self_pid`) and its ports; how many path rules were added and
/// skipped. One pass without a copy per rule; a grant the kernel refuses
/// under best_effort starts again, the careful way (see `add_fs_rules`).
///
/// # Errors
/// A step of building it failed.
pub(crate) fn build(
    cfg: &LandlockConfig,
    plan: &Plan,
    no_new_privs: bool,
    log: &Log,
    self_pid: u32,
) -> Result<(RulesetCreated, usize, usize), LandlockError> {
    let created = create(cfg, plan, no_new_privs)?;
    let (created, added, skipped) = match add_fs_rules(cfg, plan, created, log, false, self_pid) {
        Err(Added::Again(_)) => {
            let created = create(cfg, plan, no_new_privs)?;
            add_fs_rules(cfg, plan, created, log, true, self_pid).map_err(Added::into_error)?
        }
        r => r.map_err(Added::into_error)?,
    };
    Ok((add_port_rules(cfg, plan, created)?, added, skipped))
}

/// The ruleset with its handled rights and scopes, not yet enforced.
fn create(
    cfg: &LandlockConfig,
    plan: &Plan,
    no_new_privs: bool,
) -> Result<RulesetCreated, LandlockError> {
    let level = match cfg.compat {
        LandlockCompat::BestEffort => CompatLevel::BestEffort,
        LandlockCompat::Required => CompatLevel::HardRequirement,
    };
    let mut rs = Ruleset::default().set_compatibility(level);
    if !plan.handled_fs.is_empty() {
        rs = rs
            .handle_access(plan.handled_fs)
            .map_err(ruleset_err("handling fs rights"))?;
    }
    if !plan.handled_net.is_empty() {
        rs = rs
            .handle_access(plan.handled_net)
            .map_err(ruleset_err("handling TCP rights"))?;
    }
    if !plan.scopes.is_empty() {
        rs = rs.scope(plan.scopes).map_err(ruleset_err("scoping"))?;
    }
    Ok(rs
        .create()
        .map_err(ruleset_err("creating the ruleset"))?
        .no_new_privs(no_new_privs))
}

/// Why the path rules were not all added.
enum Added {
    Failed(LandlockError),
    /// A grant failed in the pass without copies under `best_effort` (the
    /// kernel's refusal): the ruleset it consumed is gone, start again with
    /// a copy per rule.
    Again(landlock::RulesetError),
}

impl Added {
    fn into_error(self) -> LandlockError {
        match self {
            Added::Failed(e) => e,
            Added::Again(source) => LandlockError::Ruleset {
                step: "adding the path rules".into(),
                source,
            },
        }
    }
}

/// The path rules; returns the ruleset and how many rules were added and
/// skipped. Adding a rule consumes the ruleset, so keeping it across a
/// grant the kernel refuses (its directory vanished after the server listed
/// it, say), which under `best_effort` only removes access, takes a copy of
/// the ruleset fd per rule: `careful` does that; otherwise a refused grant
/// under `best_effort` is [`Added::Again`] (the common case pays no copy).
///
/// Long because the two passes share every step but the copy.
fn add_fs_rules(
    cfg: &LandlockConfig,
    plan: &Plan,
    mut created: RulesetCreated,
    log: &Log,
    careful: bool,
    self_pid: u32,
) -> Result<(RulesetCreated, usize, usize), Added> {
    let (mut fs_added, mut fs_skipped) = (0usize, 0usize);
    if plan.refer_everywhere {
        let root = PathFd::new("/").map_err(|e| Added::Failed(LandlockError::Root(e)))?;
        created = created
            .add_rule(PathBeneath::new(root, AccessFs::Refer))
            .map_err(|e| Added::Failed(ruleset_err("allowing reparenting under /")(e)))?;
    }
    for rule in &cfg.fs_rules {
        let mut granted = union(&rule.access, granted_rights) & plan.handled_fs;
        if granted.is_empty() {
            log!(
                log,
                "landlock: rule for {:?} grants nothing that is handled; skipped",
                rule.path
            );
            fs_skipped += 1;
            continue;
        }
        let (fd, is_dir) = match open_rule_path(&rule.path, self_pid) {
            Ok(x) => x,
            Err(e) => {
                log!(log, "landlock: rule path {:?} skipped: {e}", rule.path);
                fs_skipped += 1;
                continue;
            }
        };
        if !is_dir {
            granted &= file_rights();
        }
        let best_effort = cfg.compat == LandlockCompat::BestEffort;
        let fallback = if careful && best_effort {
            Some(
                created
                    .try_clone()
                    .map_err(|e| Added::Failed(LandlockError::Clone(e)))?,
            )
        } else {
            None
        };
        created = match (created.add_rule(PathBeneath::new(fd, granted)), fallback) {
            (Ok(c), _) => {
                fs_added += 1;
                c
            }
            (Err(e), Some(kept)) => {
                log!(log, "landlock: rule for {:?} skipped: {e}", rule.path);
                fs_skipped += 1;
                kept
            }
            (Err(e), None) if best_effort => return Err(Added::Again(e)),
            (Err(e), None) => {
                return Err(Added::Failed(ruleset_err(format!(
                    "adding the rule for {:?}",
                    rule.path
                ))(e)))
            }
        };
    }
    Ok((created, fs_added, fs_skipped))
}

/// The TCP port rules of the handled directions.
fn add_port_rules(
    cfg: &LandlockConfig,
    plan: &Plan,
    mut created: RulesetCreated,
) -> Result<RulesetCreated, LandlockError> {
    for port in plan.ports(cfg.tcp_connect_ports.as_ref(), AccessNet::ConnectTcp) {
        created = created
            .add_rule(NetPort::new(port, AccessNet::ConnectTcp))
            .map_err(ruleset_err(format!("allowing TCP connect to port {port}")))?;
    }
    for port in plan.ports(cfg.tcp_bind_ports.as_ref(), AccessNet::BindTcp) {
        created = created
            .add_rule(NetPort::new(port, AccessNet::BindTcp))
            .map_err(ruleset_err(format!("allowing TCP bind on port {port}")))?;
    }
    Ok(created)
}
