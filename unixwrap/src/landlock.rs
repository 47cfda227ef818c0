//! Landlock: the filesystem, TCP and scope restrictions from `seccomp_config.landlock`.
//!
//! Landlock is the hard floor under the argv policy (a tracee can rewrite its
//! argv after the supervisor read it; it cannot widen its Landlock domain).
//!
//! Mapping of [`FsAccess`] to Landlock rights (handled = denied unless a rule
//! grants it; granted = what a rule with that access allows):
//!
//! | FsAccess | handled | granted by a rule |
//! |---|---|---|
//! | read    | ReadFile, ReadDir | same |
//! | write   | WriteFile, Truncate | same |
//! | create  | MakeReg, MakeDir, MakeSym, MakeFifo, MakeSock, Refer, MakeChar, MakeBlock | all but MakeChar, MakeBlock |
//! | delete  | RemoveFile, RemoveDir | same |
//! | execute | Execute | same |
//! | list    | ReadDir | same |
//!
//! Why: device nodes are never grantable (a tree that may create files must
//! not mint `/dev/sda` look-alikes), but they are denied whenever creation is
//! handled. Refer rides with create because the kernel denies cross-directory
//! rename/link whenever any fs right is handled unless Refer is granted, which
//! would break `mv a/x b/`. For the same reason, when fs rights are handled but
//! `create` is not, Refer is handled and granted on `/`: the policy did not ask
//! to restrict creation, so reparenting stays allowed (the kernel still refuses
//! any rename that would give a file rights it lacks at its source).
//! IoctlDev is left unhandled: shells need terminal
//! ioctls and it is not "write" in any sense a policy author means.
//! On a non-directory the rule is narrowed to the rights a file can carry.
//!
//! Compatibility follows rust-landlock: `best_effort` enforces what the kernel
//! supports; `required` is HardRequirement and anything less than full
//! enforcement is an error. The returned report says what is enforced now.
//!
//! `max_abi` (the operator's `landlock.max_abi`) makes unixwrap behave as on
//! a kernel that stops at that ABI: rights and scopes of later ABIs are not
//! asked for (Refer needs 2, Truncate 3, TCP 4, IoctlDev 5, scopes 6), the
//! `required` check compares against the capped ABI, and the report names the
//! cap.
//!
//! Applied after the ACK and after the relay is reaped: unixwrap may have to
//! SIGKILL a stuck relay, which a signal-scoped domain would forbid (the relay
//! is outside the domain). Nothing unixwrap does afterwards (close, execve)
//! needs more than the command needs.
//!
//! Failure modes: a rule path that does not exist or cannot be opened is
//! skipped with a log line (skipping only removes access); any ruleset error
//! is returned, and the caller refuses to run (the filter is already loaded).

use agentsh_proto::{FsAccess, LandlockCompat, LandlockConfig};
use landlock::{
    Access, AccessFs, AccessNet, BitFlags, CompatLevel, Compatible, LandlockStatus, NetPort,
    PathBeneath, PathFd, Ruleset, RulesetAttr, RulesetCreatedAttr, RulesetStatus, Scope, ABI,
};

use crate::log;
use crate::log::Log;

/// Rights the ruleset handles for one [`FsAccess`].
pub fn handled_rights(a: FsAccess) -> BitFlags<AccessFs> {
    match a {
        FsAccess::Read => AccessFs::ReadFile | AccessFs::ReadDir,
        FsAccess::Write => AccessFs::WriteFile | AccessFs::Truncate,
        FsAccess::Create => granted_rights(a) | AccessFs::MakeChar | AccessFs::MakeBlock,
        FsAccess::Delete => AccessFs::RemoveFile | AccessFs::RemoveDir,
        FsAccess::Execute => AccessFs::Execute.into(),
        FsAccess::List => AccessFs::ReadDir.into(),
    }
}

/// Rights a rule with one [`FsAccess`] grants.
pub fn granted_rights(a: FsAccess) -> BitFlags<AccessFs> {
    match a {
        FsAccess::Create => {
            AccessFs::MakeReg
                | AccessFs::MakeDir
                | AccessFs::MakeSym
                | AccessFs::MakeFifo
                | AccessFs::MakeSock
                | AccessFs::Refer
        }
        FsAccess::Read
        | FsAccess::Write
        | FsAccess::Delete
        | FsAccess::Execute
        | FsAccess::List => handled_rights(a),
    }
}

/// Rights that apply to a non-directory (the kernel's ACCESS_FILE).
fn file_rights() -> BitFlags<AccessFs> {
    AccessFs::Execute | AccessFs::WriteFile | AccessFs::ReadFile | AccessFs::Truncate
}

fn union<T: Copy>(items: &[T], f: fn(T) -> BitFlags<AccessFs>) -> BitFlags<AccessFs> {
    items.iter().fold(BitFlags::empty(), |acc, a| acc | f(*a))
}

fn names<T: std::fmt::Debug>(flags: impl Iterator<Item = T>) -> String {
    let v: Vec<String> = flags.map(|f| format!("{f:?}")).collect();
    if v.is_empty() {
        "none".into()
    } else {
        v.join("|")
    }
}

pub use agentsh_proto::wire::kernel_landlock_abi as kernel_abi;

/// The landlock crate's ABI for a number (above the crate's newest: its newest).
fn abi_of(n: i64) -> ABI {
    match n {
        i64::MIN..=0 => ABI::Unsupported,
        1 => ABI::V1,
        2 => ABI::V2,
        3 => ABI::V3,
        4 => ABI::V4,
        5 => ABI::V5,
        6 => ABI::V6,
        7 => ABI::V7,
        8 => ABI::V8,
        _ => ABI::V9,
    }
}

/// Under `compat: required`, checked *before* the seccomp filter is loaded,
/// so a kernel that cannot enforce the ruleset is a refusal "before anything
/// was installed" (auto falls through, on refuses) rather than after.
///
/// # Errors
/// What the kernel lacks.
pub fn precheck(cfg: &LandlockConfig, kernel_abi: i64) -> Result<(), String> {
    if cfg.compat != LandlockCompat::Required {
        return Ok(());
    }
    let need = cfg.required_abi();
    if kernel_abi < need {
        return Err(format!(
            "landlock.compat is required and the ruleset needs Landlock ABI {need}, \
             but this kernel offers {}",
            if kernel_abi == 0 {
                "none".to_string()
            } else {
                format!("ABI {kernel_abi}")
            }
        ));
    }
    Ok(())
}

/// Builds and enforces the ruleset on this thread. `no_new_privs` mirrors the
/// seccomp decision (false only when we hold CAP_SYS_ADMIN).
///
/// # Errors
/// A message saying what failed; under `required`, also any enforcement
/// below "fully enforced".
pub fn apply(cfg: &LandlockConfig, no_new_privs: bool, log: &Log) -> Result<String, String> {
    let level = match cfg.compat {
        LandlockCompat::BestEffort => CompatLevel::BestEffort,
        LandlockCompat::Required => CompatLevel::HardRequirement,
    };
    // What the (possibly capped) ABI offers; a kernel below the cap still
    // decides for itself through the compatibility level.
    let cap = cfg.max_abi.filter(|c| *c > 0).map(abi_of);
    let fs_offered = cap.map_or(BitFlags::all(), AccessFs::from_all);
    let mut handled_fs = union(&cfg.handled_fs, handled_rights) & fs_offered;
    // See the module doc: keep reparenting allowed when creation is not handled.
    let refer_everywhere = !handled_fs.is_empty() && !cfg.handled_fs.contains(&FsAccess::Create);
    if refer_everywhere {
        handled_fs |= BitFlags::from(AccessFs::Refer) & fs_offered;
    }
    let net_offered = cap.map_or(true, |a| !AccessNet::from_all(a).is_empty());
    let mut handled_net: BitFlags<AccessNet> = BitFlags::empty();
    if cfg.tcp_connect_ports.is_some() && net_offered {
        handled_net |= AccessNet::ConnectTcp;
    }
    if cfg.tcp_bind_ports.is_some() && net_offered {
        handled_net |= AccessNet::BindTcp;
    }
    let scopes_offered = cap.map_or(true, |a| !Scope::from_all(a).is_empty());
    let mut scopes: BitFlags<Scope> = BitFlags::empty();
    if cfg.scope_signals && scopes_offered {
        scopes |= Scope::Signal;
    }
    if cfg.scope_abstract_unix && scopes_offered {
        scopes |= Scope::AbstractUnixSocket;
    }
    if handled_fs.is_empty() && handled_net.is_empty() && scopes.is_empty() {
        if !cfg.fs_rules.is_empty() {
            log!(
                log,
                "landlock: fs_rules given but handled_fs is empty; rules ignored"
            );
        }
        return Ok("landlock: nothing handled, no ruleset applied".into());
    }

    let err = |what: &str, e: landlock::RulesetError| format!("landlock {what}: {e}");
    let mut rs = Ruleset::default().set_compatibility(level);
    if !handled_fs.is_empty() {
        rs = rs
            .handle_access(handled_fs)
            .map_err(|e| err("handling fs rights", e))?;
    }
    if !handled_net.is_empty() {
        rs = rs
            .handle_access(handled_net)
            .map_err(|e| err("handling TCP rights", e))?;
    }
    if !scopes.is_empty() {
        rs = rs.scope(scopes).map_err(|e| err("scoping", e))?;
    }
    let mut created = rs
        .create()
        .map_err(|e| err("creating the ruleset", e))?
        .no_new_privs(no_new_privs);

    let (mut fs_added, mut fs_skipped) = (0usize, 0usize);
    if refer_everywhere {
        let root = PathFd::new("/").map_err(|e| format!("landlock: opening /: {e}"))?;
        created = created
            .add_rule(PathBeneath::new(root, AccessFs::Refer))
            .map_err(|e| err("allowing reparenting under /", e))?;
    }
    for rule in &cfg.fs_rules {
        let mut granted = union(&rule.access, granted_rights) & handled_fs;
        if granted.is_empty() {
            log!(
                log,
                "landlock: rule for {:?} grants nothing that is handled; skipped",
                rule.path
            );
            fs_skipped += 1;
            continue;
        }
        let fd = match PathFd::new(&rule.path) {
            Ok(fd) => fd,
            Err(e) => {
                log!(log, "landlock: rule path {:?} skipped: {e}", rule.path);
                fs_skipped += 1;
                continue;
            }
        };
        let is_dir = std::fs::metadata(&rule.path).is_ok_and(|m| m.is_dir());
        if !is_dir {
            granted &= file_rights();
        }
        // A grant that cannot be added (its directory vanished after the server
        // listed it, say) only removes access: skip it under best_effort.
        created = match created.try_clone() {
            Ok(c) => match c.add_rule(PathBeneath::new(fd, granted)) {
                Ok(c) => {
                    fs_added += 1;
                    c
                }
                Err(e) if cfg.compat == LandlockCompat::BestEffort => {
                    log!(log, "landlock: rule for {:?} skipped: {e}", rule.path);
                    fs_skipped += 1;
                    created
                }
                Err(e) => return Err(err(&format!("adding the rule for {:?}", rule.path), e)),
            },
            Err(e) => return Err(format!("landlock: cloning the ruleset fd: {e}")),
        };
    }
    // Ports of a direction that is not handled (an ABI capped below 4) add nothing.
    let ports = |p: &Option<Vec<u16>>, right: AccessNet| {
        if handled_net.contains(right) {
            p.clone().unwrap_or_default()
        } else {
            Vec::new()
        }
    };
    for port in ports(&cfg.tcp_connect_ports, AccessNet::ConnectTcp) {
        created = created
            .add_rule(NetPort::new(port, AccessNet::ConnectTcp))
            .map_err(|e| err(&format!("allowing TCP connect to port {port}"), e))?;
    }
    for port in ports(&cfg.tcp_bind_ports, AccessNet::BindTcp) {
        created = created
            .add_rule(NetPort::new(port, AccessNet::BindTcp))
            .map_err(|e| err(&format!("allowing TCP bind on port {port}"), e))?;
    }

    let status = created
        .restrict_self()
        .map_err(|e| err("restrict_self", e))?;
    let abi = match status.landlock {
        LandlockStatus::Available { effective_abi, .. } => format!("{effective_abi}"),
        LandlockStatus::NotEnabled => "not enabled".into(),
        LandlockStatus::NotImplemented => "not implemented".into(),
    };
    let enforced = match status.ruleset {
        RulesetStatus::FullyEnforced => "fully_enforced",
        RulesetStatus::PartiallyEnforced => "partially_enforced",
        RulesetStatus::NotEnforced => "not_enforced",
    };
    let abi = match cfg.max_abi.filter(|c| *c > 0) {
        Some(c) => format!("{abi} (capped to {c} by landlock.max_abi)"),
        None => abi,
    };
    let report = format!(
        "landlock: abi={abi} status={enforced} compat={:?} handled_fs={} handled_net={} scopes={} \
         fs_rules={fs_added} skipped={fs_skipped} connect_ports={:?} bind_ports={:?} no_new_privs={}",
        cfg.compat,
        names(handled_fs.iter()),
        names(handled_net.iter()),
        names(scopes.iter()),
        cfg.tcp_connect_ports,
        cfg.tcp_bind_ports,
        status.no_new_privs,
    );
    if cfg.compat == LandlockCompat::Required && status.ruleset != RulesetStatus::FullyEnforced {
        return Err(format!(
            "landlock is required but only {enforced} ({report})"
        ));
    }
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(compat: LandlockCompat) -> LandlockConfig {
        LandlockConfig {
            compat,
            handled_fs: vec![FsAccess::Read, FsAccess::Write],
            fs_rules: vec![],
            tcp_connect_ports: Some(vec![443]),
            tcp_bind_ports: None,
            scope_signals: true,
            scope_abstract_unix: false,
            max_abi: None,
        }
    }

    #[test]
    fn required_ruleset_on_an_older_kernel_is_refused_before_install() {
        let c = cfg(LandlockCompat::Required);
        assert_eq!(c.required_abi(), 6);
        assert!(precheck(&c, 0).unwrap_err().contains("offers none"));
        assert!(precheck(&c, 4)
            .unwrap_err()
            .contains("needs Landlock ABI 6"));
        assert!(precheck(&c, 6).is_ok());
        // best_effort never refuses up front.
        assert!(precheck(&cfg(LandlockCompat::BestEffort), 0).is_ok());
    }

    #[test]
    fn a_cap_is_a_kernel_that_stops_there() {
        let mut c = cfg(LandlockCompat::Required);
        c.max_abi = Some(2);
        assert!(precheck(&c, c.effective_abi(7))
            .unwrap_err()
            .contains("offers ABI 2"));
        assert_eq!(abi_of(2), ABI::V2);
        assert!(AccessNet::from_all(abi_of(2)).is_empty());
        assert!(Scope::from_all(abi_of(5)).is_empty());
        assert!(!Scope::from_all(abi_of(6)).is_empty());
    }

    #[test]
    fn this_kernel_reports_its_abi() {
        // Landlock is expected on the test machines (ABI 7 on the reference kernel).
        if std::env::var("CI").as_deref() == Ok("true") {
            assert!(kernel_abi() >= 6, "abi {}", kernel_abi());
        }
    }

    const ALL: [FsAccess; 6] = [
        FsAccess::Read,
        FsAccess::Write,
        FsAccess::Create,
        FsAccess::Delete,
        FsAccess::Execute,
        FsAccess::List,
    ];

    #[test]
    fn granted_is_always_within_handled() {
        for a in ALL {
            assert_eq!(
                granted_rights(a) & handled_rights(a),
                granted_rights(a),
                "{a:?}"
            );
        }
    }

    #[test]
    fn device_nodes_are_handled_but_never_granted() {
        let handled = union(&ALL, handled_rights);
        let granted = union(&ALL, granted_rights);
        assert!(handled.contains(AccessFs::MakeChar | AccessFs::MakeBlock));
        assert!(!granted.intersects(AccessFs::MakeChar | AccessFs::MakeBlock));
    }

    #[test]
    fn read_does_not_imply_write() {
        assert!(!handled_rights(FsAccess::Read).intersects(handled_rights(FsAccess::Write)));
        assert!(!handled_rights(FsAccess::Read).contains(AccessFs::Execute));
    }
}
