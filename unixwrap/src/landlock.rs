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
    PathBeneath, PathFd, RestrictionStatus, Ruleset, RulesetAttr, RulesetCreated,
    RulesetCreatedAttr, RulesetStatus, Scope, ABI,
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

pub(crate) fn names<T: std::fmt::Debug>(flags: impl Iterator<Item = T>) -> String {
    let v: Vec<String> = flags.map(|f| format!("{f:?}")).collect();
    if v.is_empty() {
        "none".into()
    } else {
        v.join("|")
    }
}

pub use agentsh_proto::wire::kernel_landlock_abi as kernel_abi;

/// Why Landlock was not applied as the config asks.
#[derive(Debug)]
pub enum LandlockError {
    /// `compat: required`, and the kernel (or the cap) offers less than the
    /// ruleset needs; found before anything was installed.
    AbiTooLow {
        /// The ABI the ruleset needs.
        need: i64,
        /// What the kernel offers (0: none).
        offers: i64,
    },
    /// The landlock crate refused a step of building or enforcing the ruleset.
    Ruleset {
        /// The step, in words.
        step: String,
        /// The crate's error.
        source: landlock::RulesetError,
    },
    /// `/` could not be opened for the reparenting rule.
    Root(landlock::PathFdError),
    /// The ruleset fd could not be duplicated.
    Clone(std::io::Error),
    /// `compat: required`, and the kernel enforced less than all of it.
    NotFullyEnforced(Report),
}

impl std::fmt::Display for LandlockError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LandlockError::AbiTooLow { need, offers } => write!(
                f,
                "landlock.compat is required and the ruleset needs Landlock ABI {need}, \
                 but this kernel offers {}",
                if *offers == 0 {
                    "none".to_string()
                } else {
                    format!("ABI {offers}")
                }
            ),
            LandlockError::Ruleset { step, source } => write!(f, "landlock {step}: {source}"),
            LandlockError::Root(e) => write!(f, "landlock: opening /: {e}"),
            LandlockError::Clone(e) => write!(f, "landlock: cloning the ruleset fd: {e}"),
            LandlockError::NotFullyEnforced(r) => {
                write!(f, "landlock is required but only {} ({r})", r.status.name())
            }
        }
    }
}

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
    line: String,
}

impl std::fmt::Display for Report {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.line)
    }
}

/// The landlock crate's ABI for a number (above the crate's newest: its newest).
pub(crate) fn abi_of(n: i64) -> ABI {
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
/// [`LandlockError::AbiTooLow`]: what the kernel lacks.
pub fn precheck(cfg: &LandlockConfig, kernel_abi: i64) -> Result<(), LandlockError> {
    if cfg.compat != LandlockCompat::Required {
        return Ok(());
    }
    let need = cfg.required_abi();
    if kernel_abi < need {
        return Err(LandlockError::AbiTooLow {
            need,
            offers: kernel_abi,
        });
    }
    Ok(())
}

/// What the ruleset handles once the ABI cap is applied. Pure: what is asked
/// of the kernel follows from the config alone.
#[derive(Debug, PartialEq)]
pub(crate) struct Plan {
    pub(crate) handled_fs: BitFlags<AccessFs>,
    /// Refer handled and granted on `/` (fs rights handled, creation not).
    refer_everywhere: bool,
    pub(crate) handled_net: BitFlags<AccessNet>,
    pub(crate) scopes: BitFlags<Scope>,
}

impl Plan {
    pub(crate) fn of(cfg: &LandlockConfig) -> Plan {
        // What the (possibly capped) ABI offers; a kernel below the cap still
        // decides for itself through the compatibility level.
        let cap = cfg.max_abi.filter(|c| *c > 0).map(abi_of);
        let fs_offered = cap.map_or(BitFlags::all(), AccessFs::from_all);
        let mut handled_fs = union(&cfg.handled_fs, handled_rights) & fs_offered;
        // See the module doc: keep reparenting allowed when creation is not handled.
        let refer_everywhere =
            !handled_fs.is_empty() && !cfg.handled_fs.contains(&FsAccess::Create);
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
        Plan {
            handled_fs,
            refer_everywhere,
            handled_net,
            scopes,
        }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.handled_fs.is_empty() && self.handled_net.is_empty() && self.scopes.is_empty()
    }

    /// Ports of a direction that is not handled (an ABI capped below 4) add nothing.
    fn ports(&self, p: Option<&Vec<u16>>, right: AccessNet) -> Vec<u16> {
        if self.handled_net.contains(right) {
            p.cloned().unwrap_or_default()
        } else {
            Vec::new()
        }
    }
}

fn ruleset_err(step: impl Into<String>) -> impl FnOnce(landlock::RulesetError) -> LandlockError {
    let step = step.into();
    move |source| LandlockError::Ruleset { step, source }
}

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

/// Opens a rule's path for Landlock (`O_PATH`) without following any
/// symlink on the way (`RESOLVE_NO_SYMLINKS`): the server lists directories
/// to carve and names only entries that were not symlinks, and the tree may
/// have swapped one for a symlink since (to the very file the carve left
/// out). A path with a symlink now is skipped: that only removes access.
/// `/proc/self/...` is the tree root's own entry, named by its pid
/// (`self_pid`: this process's, or the tree's when the server builds the
/// ruleset ahead). Says whether it is a directory (from the opened fd).
///
/// # Errors
/// It cannot be opened that way (ELOOP for a symlink, ENOENT, ...).
fn open_rule_path(path: &str, self_pid: u32) -> std::io::Result<(std::os::fd::OwnedFd, bool)> {
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
    let path = match path.strip_prefix("/proc/self/") {
        Some(rest) => format!("/proc/{self_pid}/{rest}"),
        None if path == "/proc/self" => format!("/proc/{self_pid}"),
        None => path.to_string(),
    };
    let c = std::ffi::CString::new(path)
        .map_err(|_| std::io::Error::from_raw_os_error(libc::EINVAL))?;
    // SAFETY: open_how is plain data; zero is valid for every field.
    let mut how: libc::open_how = unsafe { std::mem::zeroed() };
    how.flags = (libc::O_PATH | libc::O_CLOEXEC) as u64;
    how.resolve = libc::RESOLVE_NO_SYMLINKS;
    // SAFETY: a valid C string and an open_how of the size passed.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_openat2,
            libc::AT_FDCWD,
            c.as_ptr(),
            &how as *const libc::open_how,
            std::mem::size_of::<libc::open_how>(),
        )
    } as i32;
    let fd = if fd >= 0 {
        // SAFETY: a fresh fd the kernel just returned, owned by nobody else.
        unsafe { OwnedFd::from_raw_fd(fd) }
    } else {
        let e = std::io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::ENOSYS) {
            return Err(e);
        }
        // No openat2 (before 5.6): at least the last component is not followed.
        // SAFETY: a valid C string.
        let fd = unsafe {
            libc::open(
                c.as_ptr(),
                libc::O_PATH | libc::O_CLOEXEC | libc::O_NOFOLLOW,
            )
        };
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: as above.
        unsafe { OwnedFd::from_raw_fd(fd) }
    };
    // SAFETY: fstat writes one struct stat we own.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: a valid fd and a pointer to our struct.
    if unsafe { libc::fstat(fd.as_raw_fd(), &mut st) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    match st.st_mode & libc::S_IFMT {
        libc::S_IFLNK => Err(std::io::Error::from_raw_os_error(libc::ELOOP)),
        libc::S_IFDIR => Ok((fd, true)),
        _ => Ok((fd, false)),
    }
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

fn report(
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

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A config handling reads and writes, TCP connects to 443 and signals.
    pub(crate) fn cfg(compat: LandlockCompat) -> LandlockConfig {
        LandlockConfig {
            compat,
            handled_fs: vec![FsAccess::Read, FsAccess::Write],
            fs_rules: vec![],
            tcp_connect_ports: Some(vec![443]),
            tcp_bind_ports: None,
            scope_signals: true,
            scope_abstract_unix: false,
            max_abi: None,
            noexec_mounts: vec![],
        }
    }

    #[test]
    fn required_ruleset_on_an_older_kernel_is_refused_before_install() {
        let c = cfg(LandlockCompat::Required);
        assert_eq!(c.required_abi(), 6);
        assert!(precheck(&c, 0)
            .unwrap_err()
            .to_string()
            .contains("offers none"));
        assert!(matches!(
            precheck(&c, 4),
            Err(LandlockError::AbiTooLow { need: 6, offers: 4 })
        ));
        assert!(precheck(&c, 4)
            .unwrap_err()
            .to_string()
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
            .to_string()
            .contains("offers ABI 2"));
        assert_eq!(abi_of(2), ABI::V2);
        assert!(AccessNet::from_all(abi_of(2)).is_empty());
        assert!(Scope::from_all(abi_of(5)).is_empty());
        assert!(!Scope::from_all(abi_of(6)).is_empty());
    }

    #[test]
    fn the_plan_asks_only_what_the_capped_abi_offers() {
        let mut c = cfg(LandlockCompat::BestEffort);
        let full = Plan::of(&c);
        assert!(
            full.refer_everywhere,
            "creation is not handled: reparenting stays allowed"
        );
        assert!(full
            .handled_fs
            .contains(AccessFs::Truncate | AccessFs::Refer));
        assert_eq!(full.handled_net, BitFlags::from(AccessNet::ConnectTcp));
        assert_eq!(full.scopes, BitFlags::from(Scope::Signal));
        assert_eq!(
            full.ports(c.tcp_connect_ports.as_ref(), AccessNet::ConnectTcp),
            [443]
        );
        c.max_abi = Some(2);
        let two = Plan::of(&c);
        assert!(
            !two.handled_fs.contains(AccessFs::Truncate),
            "Truncate needs ABI 3"
        );
        assert!(two.handled_fs.contains(AccessFs::Refer));
        assert!(two.handled_net.is_empty() && two.scopes.is_empty());
        assert!(two
            .ports(c.tcp_connect_ports.as_ref(), AccessNet::ConnectTcp)
            .is_empty());
        c.max_abi = Some(1);
        assert!(!Plan::of(&c).handled_fs.contains(AccessFs::Refer));
        c.handled_fs = vec![FsAccess::Read, FsAccess::Create];
        c.max_abi = None;
        assert!(
            !Plan::of(&c).refer_everywhere,
            "creation handled: Refer rides with create"
        );
        let nothing = LandlockConfig {
            handled_fs: vec![],
            tcp_connect_ports: None,
            scope_signals: false,
            ..cfg(LandlockCompat::BestEffort)
        };
        assert!(Plan::of(&nothing).is_empty());
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
