//! From `file_rules` and `network_rules` to the Landlock ruleset unixwrap applies.
//!
//! Landlock is an allow-list: a handled right is denied everywhere except
//! beneath a path a rule grants it on, and a grant always covers the whole
//! subtree. So the compiler works per operation, by its kind
//! ([`super::semantics`]):
//!
//! * an operation is *handled* when any file rule names it; `write`, `create`
//!   and `delete` are always handled, and `read` when agentsh has state to
//!   hide (self-protection, below). An operation nothing handles is not
//!   restricted;
//! * an allow-list operation (an `allow` names it) is granted beneath each
//!   `allow` path; a handled operation no `allow` names (deny-only, or named
//!   by no rule at all) is granted on `/`. Every `deny` path *strictly
//!   beneath* a grant is carved out of it: the grant is replaced by grants on
//!   the grant's children, recursively, minus the denied path. The carved
//!   directories themselves get nothing (their own entries can then not be
//!   created, removed or renamed), and an entry created in them later is not
//!   covered. An allow beneath a deny is more specific and wins; at the same
//!   path, deny wins;
//! * paths are literal, or end in `/**` (the same thing for Landlock); other
//!   globs are refused when the policy is loaded;
//! * `${WORKSPACE}` comes from the server config, `${HOME}` from the caller
//!   uid's passwd entry, `${TMPDIR}` is `/tmp` (the environment of the tree is
//!   not trusted). An `allow` path whose variable has no value is skipped
//!   (that only removes access); a `deny` path whose variable has no value
//!   leaves its operation granted nowhere (skipping it would add access).
//!   Both are reported.
//!
//! Self-protection, whatever the policy says (threat: a tree, root included,
//! that turns enforcement off for the next command): no write, create or
//! delete beneath [`SelfProtection::no_write`] — the shim and real shells,
//! the system binaries and libraries the shim and unixwrap load before any
//! filter exists, `/etc` (`ld.so.preload`, `shim.conf`), agentsh's binaries,
//! policies, state and audit. Those are denials no allow can override. TCP
//! connect to the API port is removed from every allow-list, but Landlock
//! cannot deny one port while allowing all others (short of listing the
//! 65,534 others, which the loader refuses as too costly per shell): a policy
//! that leaves connect open (no connect rule, or `ports: any` allowed) leaves
//! the API port reachable, and the compiled summary says so
//! (`api_port_reachable`). When an explicit `allow` grant (not `/`) has to
//! be split around a protected path, a warning names it.
//! Signals and abstract unix sockets are always scoped to the tree, and any
//! Landlock domain already stops ptrace of processes outside it.
//!
//! Failure modes: none at compile time; what cannot be expressed is left out
//! in the stricter direction and listed in [`CompiledLandlock::warnings`]: a
//! carve that cannot list a directory (or would grant more than
//! [`MAX_CARVE_CHILDREN`] entries one by one) grants nothing there (also in
//! [`CompiledLandlock::carve_failures`], which `agentsh policy check`
//! reports), and a `deny` whose variable has no value for this tree makes its
//! operation granted nowhere rather than everywhere.

use super::loaded::Policy;
use super::schema::{Decision, FileOperation, NetworkDirection, NetworkRule};
use super::semantics::FileOpKind;
use agentsh_proto::{FsAccess, FsRule, LandlockCompat, LandlockConfig};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// A directory with more entries than this is not carved (nothing is
/// granted beneath it): the rules would cost every shell start.
pub const MAX_CARVE_CHILDREN: usize = 256;
/// The most filesystem rules one ruleset gets; beyond, grants are dropped.
pub const MAX_FS_RULES: usize = 1024;

/// System paths no tree may write, create or delete beneath.
///
/// `/usr/local/bin` and `/usr/local/sbin` come before `/usr/bin` on every
/// default PATH: whoever can create `sh` there replaces the shim for every
/// SDK that spawns `sh` by name.
/// The shim and unixwrap are dynamically linked and run before any filter
/// exists: whoever can change `/etc/ld.so.preload`, a library or a shell
/// binary owns every later command. `/etc` also holds `shim.conf`.
pub const SYSTEM_NO_WRITE: &[&str] = &[
    "/etc",
    "/bin",
    "/sbin",
    "/lib",
    "/lib32",
    "/lib64",
    "/libx32",
    "/usr/bin",
    "/usr/sbin",
    "/usr/lib",
    "/usr/lib32",
    "/usr/lib64",
    "/usr/libx32",
    "/usr/libexec",
    // First on every default PATH: a `sh` dropped here would be the next
    // SDK command's shell, unsupervised.
    "/usr/local/bin",
    "/usr/local/sbin",
];

/// The kernel's own file systems no tree may write, whatever the policy, but
/// where an explicit `allow` beneath (the shipped policies' tree root's
/// `/proc/self/oom_score_adj`, which E2B writes) still holds. Threats: a
/// process writing another's memory through `/proc/<pid>/mem` (a parent
/// rewriting its child's exec path after the supervisor read it: issue 21),
/// and a root tree changing the kernel's behaviour for everyone
/// (`/proc/sys/kernel/core_pattern`'s crash hook and `kernel.modprobe` run
/// as root outside every tree; cgroup v1 `release_agent`, binfmt_misc,
/// `/proc/sysrq-trigger`).
pub const KERNEL_NO_WRITE: &[&str] = &["/proc", "/sys"];

/// The one file under [`KERNEL_NO_WRITE`] every tree may write, whatever the
/// policy: its root's own `oom_score_adj` (`/proc/self` is resolved by
/// unixwrap, in the process that becomes the tree's shell), which E2B's
/// wrapper writes before every command (`echo 100 > /proc/$$/oom_score_adj`).
pub const OWN_OOM_SCORE_ADJ: &str = "/proc/self/oom_score_adj";

/// The per-session values of the path variables.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SessionVars {
    pub workspace: Option<String>,
    pub home: Option<String>,
    pub tmpdir: String,
}

/// What agentsh protects whatever the policy says.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SelfProtection {
    /// Canonical absolute paths; no write, create or delete beneath them.
    pub no_write: Vec<String>,
    /// Canonical absolute paths no tree may read (the server's state: its
    /// approval token and notify sockets).
    pub no_read: Vec<String>,
    /// The server's API port, removed from every TCP connect allow-list.
    pub api_port: Option<u16>,
}

impl SelfProtection {
    /// [`SYSTEM_NO_WRITE`] plus `extra` (agentsh's own files), canonicalized
    /// through `fs` and deduplicated; a path that does not exist is kept as
    /// written (it may be created later).
    pub fn new(
        extra: &[&Path],
        no_read: &[&Path],
        api_port: Option<u16>,
        fs: &dyn FsView,
    ) -> SelfProtection {
        let canon = |paths: Vec<String>| {
            let mut set = BTreeSet::new();
            for p in paths {
                let Some(p) = normalize(&p) else { continue };
                set.insert(fs.canonical(&p).unwrap_or_else(|| p.clone()));
                set.insert(p);
            }
            set.into_iter().collect::<Vec<_>>()
        };
        let show = |p: &&Path| p.display().to_string();
        let mut no_write: Vec<String> = SYSTEM_NO_WRITE
            .iter()
            .map(std::string::ToString::to_string)
            .collect();
        no_write.extend(extra.iter().map(show));
        SelfProtection {
            no_write: canon(no_write),
            no_read: canon(no_read.iter().map(show).collect()),
            api_port,
        }
    }
}

/// The filesystem as the compiler needs it (injected, so tests need no disk).
pub trait FsView {
    /// The canonical path (symlinks followed), `None` if it does not exist.
    fn canonical(&self, path: &str) -> Option<String>;
    /// The entries of a directory that are not symlinks, as full paths;
    /// `None` if it is not a readable directory.
    fn children(&self, dir: &str) -> Option<Vec<String>>;
}

/// The server's own view of the filesystem.
pub struct HostFs;

impl FsView for HostFs {
    fn canonical(&self, path: &str) -> Option<String> {
        std::fs::canonicalize(path)
            .ok()
            .map(|p| p.to_string_lossy().into_owned())
    }

    fn children(&self, dir: &str) -> Option<Vec<String>> {
        let mut out = Vec::new();
        for entry in std::fs::read_dir(dir).ok()? {
            let entry = entry.ok()?;
            if entry.file_type().ok()?.is_symlink() {
                continue;
            }
            out.push(join(dir, &entry.file_name().to_string_lossy()));
        }
        out.sort();
        Some(out)
    }
}

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

fn access_of(op: FileOperation) -> FsAccess {
    match op {
        FileOperation::Read => FsAccess::Read,
        FileOperation::Write => FsAccess::Write,
        FileOperation::Create => FsAccess::Create,
        FileOperation::Delete => FsAccess::Delete,
        FileOperation::Execute => FsAccess::Execute,
    }
}

const ALL_ACCESS: [FsAccess; 5] = [
    FsAccess::Read,
    FsAccess::Write,
    FsAccess::Create,
    FsAccess::Delete,
    FsAccess::Execute,
];

/// The operations that modify the filesystem: always handled.
const MODIFY: [FsAccess; 3] = [FsAccess::Write, FsAccess::Create, FsAccess::Delete];

/// `/a//b/` → `/a/b`; `None` if not absolute or if it has `.`/`..` parts.
fn normalize(p: &str) -> Option<String> {
    if !p.starts_with('/') {
        return None;
    }
    let mut parts = Vec::new();
    for part in p.split('/') {
        match part {
            "" => {}
            "." | ".." => return None,
            x => parts.push(x),
        }
    }
    Some(format!("/{}", parts.join("/")))
}

fn join(dir: &str, name: &str) -> String {
    if dir == "/" {
        format!("/{name}")
    } else {
        format!("{dir}/{name}")
    }
}

/// `p` is `ancestor` or lies beneath it.
fn at_or_beneath(p: &str, ancestor: &str) -> bool {
    ancestor == "/"
        || p == ancestor
        || (p.starts_with(ancestor) && p.as_bytes().get(ancestor.len()) == Some(&b'/'))
}

pub use super::semantics::landlock_base;

/// Why a rule path names no path for this session (the loader refuses
/// these, so only a path that bypassed it gets here).
#[derive(Debug, thiserror::Error)]
enum ExpandError {
    #[error(transparent)]
    NotEnforceable(#[from] super::semantics::NotEnforceable),
    #[error("{0:?}: unterminated ${{")]
    Unterminated(String),
    #[error("{pattern:?}: unknown variable ${{{var}}}")]
    UnknownVariable { pattern: String, var: String },
    #[error("{pattern:?} expands to {text:?}, which is not a clean absolute path")]
    NotClean { pattern: String, text: String },
}

/// Expands a validated rule path; `Ok(None)` when its variable is unset.
fn expand(pattern: &str, vars: &SessionVars) -> Result<Option<String>, ExpandError> {
    let base = landlock_base(pattern)?;
    let text = if let Some(after) = base.strip_prefix("${") {
        let (var, rest) = after
            .split_once('}')
            .ok_or_else(|| ExpandError::Unterminated(pattern.to_string()))?;
        let value = match var {
            "WORKSPACE" | "SESSION_ROOT" => vars.workspace.clone(),
            "HOME" => vars.home.clone(),
            "TMPDIR" => Some(vars.tmpdir.clone()),
            other => {
                return Err(ExpandError::UnknownVariable {
                    pattern: pattern.to_string(),
                    var: other.to_string(),
                })
            }
        };
        match value {
            Some(v) if !v.is_empty() => format!("{v}{rest}"),
            _ => return Ok(None),
        }
    } else {
        base.to_string()
    };
    match normalize(&text) {
        Some(path) => Ok(Some(path)),
        None => Err(ExpandError::NotClean {
            pattern: pattern.to_string(),
            text,
        }),
    }
}

/// The path as the check sees it: canonical, except under `/proc` (whose
/// `self` would resolve to the server) and when it does not exist.
fn resolve(p: &str, fs: &dyn FsView) -> String {
    if at_or_beneath(p, "/proc") {
        return p.to_string();
    }
    fs.canonical(p).unwrap_or_else(|| p.to_string())
}

/// The TCP ports an allow-list keeps open for one direction, or `None` when
/// the direction is not restricted ([`super::semantics::tcp_ports`]). The
/// loader refuses rules that mean "every port but these"; should such rules
/// reach this point anyway, the direction is closed (fail closed) and
/// `warnings` says why.
pub fn tcp_ports(
    rules: &[NetworkRule],
    direction: NetworkDirection,
    warnings: &mut Vec<String>,
) -> Option<BTreeSet<u16>> {
    match super::semantics::tcp_ports(rules, direction) {
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
    let enforcement = match (kernel_abi >= required_abi, compat) {
        (true, _) => "full",
        (false, LandlockCompat::BestEffort) => "partial",
        (false, LandlockCompat::Required) => "refused",
    };
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
        enforcement: enforcement.to_string(),
    };
    CompiledLandlock {
        config,
        summary,
        warnings,
        carve_failures,
        exec_places: ops.exec_places.clone(),
    }
}

/// What the file rules ask, per operation, before carving.
struct FileOperations {
    /// The operations the ruleset handles.
    handled: BTreeSet<FsAccess>,
    grants: BTreeMap<FsAccess, Vec<Grant>>,
    denies: BTreeMap<FsAccess, Vec<Deny>>,
    /// `exec_sources` places that can also be mounted `noexec`.
    noexec: Vec<String>,
    /// `exec_sources`: where nothing runs, and the exceptions.
    exec_places: ExecPlaces,
}

/// Where a tree's `exec_sources: {writable: deny}` keeps programs from (the
/// places it can write, canonical) and the `except` paths beneath them: the
/// supervisor checks them too, so the promise holds where Landlock does not
/// (gVisor) and a refusal is audited with its rule, not only `EACCES`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ExecPlaces {
    pub denied: Vec<String>,
    pub except: Vec<String>,
}

impl ExecPlaces {
    /// Whether a program at `path` (canonical) may not run.
    pub fn refuses(&self, path: &str) -> bool {
        self.denied.iter().any(|d| at_or_beneath(path, d))
            && !self.except.iter().any(|e| at_or_beneath(path, e))
    }
}

/// The policy's file rules and agentsh's self-protection as grants and
/// denies per operation. Fail closed: an operation with a deny that names
/// nothing resolvable is granted nowhere.
///
/// Long because the three sources (the rules, the default grant on `/`,
/// the self-protection) fill the same maps and the fail-closed removal
/// must come after all of them.
fn file_operations(
    policy: &Policy,
    vars: &SessionVars,
    protect: &SelfProtection,
    fs: &dyn FsView,
    warnings: &mut Vec<String>,
) -> FileOperations {
    let mut always: Vec<(FsAccess, &[String])> = MODIFY
        .iter()
        .map(|op| (*op, protect.no_write.as_slice()))
        .collect();
    if !protect.no_read.is_empty() {
        always.push((FsAccess::Read, protect.no_read.as_slice()));
    }
    let mut handled: BTreeSet<FsAccess> = always.iter().map(|(op, _)| *op).collect();
    let mut grants: BTreeMap<FsAccess, Vec<Grant>> = BTreeMap::new();
    let mut denies: BTreeMap<FsAccess, Vec<Deny>> = BTreeMap::new();
    // Operations with a deny that names nothing resolvable: granted nowhere.
    let mut unresolved: BTreeMap<FsAccess, String> = BTreeMap::new();
    for rule in policy.file_rules() {
        let ops: Vec<FsAccess> = rule.operations.iter().map(|o| access_of(*o)).collect();
        handled.extend(ops.iter().copied());
        for pattern in &rule.paths {
            let why = match expand(pattern, vars) {
                Ok(Some(p)) => {
                    let path = resolve(&p, fs);
                    for op in &ops {
                        match rule.decision {
                            Decision::Allow => grants.entry(*op).or_default().push(Grant {
                                path: path.clone(),
                                rule: Some(rule.name.clone()),
                            }),
                            // Only allow and deny pass the compiler for file rules.
                            Decision::Deny
                            | Decision::Approve
                            | Decision::Audit
                            | Decision::Redirect => {
                                denies.entry(*op).or_default().push(Deny {
                                    path: path.clone(),
                                    protected: false,
                                    rule: Some(rule.name.clone()),
                                });
                            }
                        }
                    }
                    continue;
                }
                Ok(None) => format!("{pattern}: its variable has no value"),
                Err(e) => e.to_string(),
            };
            if rule.decision == Decision::Allow {
                // Skipping a grant only removes access.
                warnings.push(format!(
                    "file rule {:?}: {why}; skipped (set `workspace` in the config if it \
                     names ${{WORKSPACE}})",
                    rule.name
                ));
            } else {
                for op in &ops {
                    unresolved
                        .entry(*op)
                        .or_insert_with(|| format!("file rule {:?}: {why}", rule.name));
                }
            }
        }
    }
    let (noexec, exec_places) = exec_sources(
        policy,
        vars,
        fs,
        &mut handled,
        &mut grants,
        &mut denies,
        warnings,
    );
    // An operation no allow names stays allowed on `/`, minus what is denied.
    for op in super::semantics::FILE_OPERATIONS {
        let a = access_of(op);
        if handled.contains(&a)
            && super::semantics::file_op_kind(policy.file_rules(), op) != FileOpKind::AllowList
        {
            grants.entry(a).or_default().push(Grant {
                path: "/".into(),
                rule: None,
            });
        }
    }
    grants.entry(FsAccess::Write).or_default().push(Grant {
        path: OWN_OOM_SCORE_ADJ.into(),
        rule: None,
    });
    for op in MODIFY {
        let d = denies.entry(op).or_default();
        for p in KERNEL_NO_WRITE {
            d.push(Deny {
                path: (*p).to_string(),
                protected: false,
                rule: None,
            });
        }
    }
    for (op, protected) in always {
        let d = denies.entry(op).or_default();
        for p in protected {
            d.push(Deny {
                path: p.clone(),
                protected: true,
                rule: None,
            });
        }
    }
    // Fail closed: a deny that cannot be placed must not become "allowed everywhere".
    for (op, why) in &unresolved {
        grants.remove(op);
        warnings.push(format!(
            "{why}, so it cannot be denied: {op:?} is granted nowhere rather than everywhere"
        ));
    }
    FileOperations {
        handled,
        grants,
        denies,
        noexec,
        exec_places,
    }
}

/// The rule name the audit and `policy check` show for `exec_sources`.
pub const RULE_EXEC_SOURCES: &str = "exec_sources";

/// `exec_sources: {writable: deny}`: execute is handled, and denied beneath
/// every path the policy's own rules grant write or create on (the places
/// the tree can put a file), so nothing the tree wrote runs, modified copies
/// included; `except` paths are granted execute again (more specific, they
/// win). A deny at the same path as an execute grant wins, as for any file
/// rule.
fn exec_sources(
    policy: &Policy,
    vars: &SessionVars,
    fs: &dyn FsView,
    handled: &mut BTreeSet<FsAccess>,
    grants: &mut BTreeMap<FsAccess, Vec<Grant>>,
    denies: &mut BTreeMap<FsAccess, Vec<Deny>>,
    warnings: &mut Vec<String>,
) -> (Vec<String>, ExecPlaces) {
    let sources = policy.exec_sources();
    if !sources.writable_denied() {
        return (Vec::new(), ExecPlaces::default());
    }
    handled.insert(FsAccess::Execute);
    let writable: BTreeSet<String> = [FsAccess::Write, FsAccess::Create]
        .iter()
        .flat_map(|op| grants.get(op).into_iter().flatten())
        .filter(|g| g.rule.is_some())
        .map(|g| g.path.clone())
        .collect();
    let d = denies.entry(FsAccess::Execute).or_default();
    for path in &writable {
        d.push(Deny {
            path: path.clone(),
            protected: false,
            rule: Some(RULE_EXEC_SOURCES.into()),
        });
    }
    let mut excepted = Vec::new();
    for pattern in &sources.except {
        match expand(pattern, vars) {
            Ok(Some(p)) => {
                let path = resolve(&p, fs);
                excepted.push(path.clone());
                grants.entry(FsAccess::Execute).or_default().push(Grant {
                    path,
                    rule: Some(format!("{RULE_EXEC_SOURCES}.except")),
                });
            }
            // Skipping an exception only removes access.
            Ok(None) => warnings.push(format!(
                "exec_sources.except: {pattern}: its variable has no value; skipped"
            )),
            Err(e) => warnings.push(format!("exec_sources.except: {e}; skipped")),
        }
    }
    let places = ExecPlaces {
        denied: writable.iter().cloned().collect(),
        except: excepted.clone(),
    };
    let noexec = writable
        .into_iter()
        .filter(|w| !excepted.iter().any(|e| at_or_beneath(e, w)))
        .collect();
    (noexec, places)
}

/// Each operation's grants minus its denies, as path rules (at most
/// [`MAX_FS_RULES`]), and the paths that could not be carved.
fn carve_all(
    ops: &FileOperations,
    fs: &dyn FsView,
    warnings: &mut Vec<String>,
) -> (Vec<FsRule>, Vec<CarveFailure>) {
    let mut carver = Carver {
        fs,
        warnings: Vec::new(),
        failures: Vec::new(),
        split: Vec::new(),
    };
    let mut by_path: BTreeMap<String, BTreeSet<FsAccess>> = BTreeMap::new();
    for (op, list) in &ops.grants {
        let d = ops.denies.get(op).map(Vec::as_slice).unwrap_or_default();
        let mut out = Vec::new();
        for g in list {
            if let (Some(name), Some(inner)) = (&g.rule, split_by_protection(&g.path, d)) {
                warnings.push(format!(
                    "file rule {name:?}: {op:?} on {} is split around {inner}, which no tree \
                     may change (agentsh's own or system files): {} and the directories down \
                     to {inner} keep no {op:?} right of their own (nothing can be created in or \
                     removed from them directly); keep agentsh's state and audit log outside \
                     the directories trees work in",
                    g.path, g.path
                ));
            }
            carver.carve(&g.path, d, *op, &mut out);
        }
        for p in out {
            by_path.entry(p).or_default().insert(*op);
        }
        // A directory split for read stays listable (`ls /`); the files of
        // the denied paths stay unreadable (their names do not).
        for p in carver.split.drain(..) {
            if *op == FsAccess::Read {
                by_path.entry(p).or_default().insert(FsAccess::List);
            }
        }
    }
    warnings.append(&mut carver.warnings);
    if by_path.len() > MAX_FS_RULES {
        warnings.push(format!(
            "{} filesystem rules exceed {MAX_FS_RULES}; the rest are dropped",
            by_path.len()
        ));
    }
    let fs_rules = by_path
        .into_iter()
        .take(MAX_FS_RULES)
        .map(|(path, ops)| FsRule {
            path,
            access: ops.into_iter().collect(),
        })
        .collect();
    (fs_rules, carver.failures)
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
    s.enforcement = match (s.kernel_abi >= s.required_abi, s.compat) {
        (true, _) => "full",
        (false, LandlockCompat::BestEffort) => "partial",
        (false, LandlockCompat::Required) => "refused",
    }
    .to_string();
    s.max_abi = Some(cap);
}

mod carve;
mod session;
pub(crate) use super::stamp::{stamp, Stamp, SETTLE};
pub use carve::CarveFailure;
use carve::{split_by_protection, Carver, Deny, Grant};
pub use session::{home_of, SessionLandlock, CACHED_UIDS};

#[cfg(test)]
#[path = "landlock_tests.rs"]
mod tests;
