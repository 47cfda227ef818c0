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

use super::schema::{Decision, FileOperation, NetworkDirection, NetworkRule};
use super::semantics::FileOpKind;
use super::Policy;
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
        let mut no_write: Vec<String> = SYSTEM_NO_WRITE.iter().map(|s| s.to_string()).collect();
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

/// What a rule path means as a Landlock path-beneath rule, or why it cannot.
///
/// # Errors
/// A glob other than a trailing `/**`.
pub fn landlock_base(pattern: &str) -> Result<&str, String> {
    let base = pattern.strip_suffix("/**").unwrap_or(pattern);
    let base = if base.is_empty() { "/" } else { base };
    let literal = match base.strip_prefix("${").and_then(|a| a.split_once('}')) {
        Some((_, rest)) => rest,
        None => base,
    };
    if literal.contains(['*', '?', '[', ']', '{', '}']) {
        return Err(format!(
            "{pattern:?}: Landlock grants a path and everything beneath it, so only a \
             literal path or one ending in /** can be enforced"
        ));
    }
    Ok(base)
}

/// Expands a validated rule path; `Ok(None)` when its variable is unset.
fn expand(pattern: &str, vars: &SessionVars) -> Result<Option<String>, String> {
    let base = landlock_base(pattern)?;
    let text = if let Some(after) = base.strip_prefix("${") {
        let (var, rest) = after
            .split_once('}')
            .ok_or_else(|| format!("{pattern:?}: unterminated ${{"))?;
        let value = match var {
            "WORKSPACE" => vars.workspace.clone(),
            "HOME" => vars.home.clone(),
            "TMPDIR" => Some(vars.tmpdir.clone()),
            other => return Err(format!("{pattern:?}: unknown variable ${{{other}}}")),
        };
        match value {
            Some(v) if !v.is_empty() => format!("{v}{rest}"),
            _ => return Ok(None),
        }
    } else {
        base.to_string()
    };
    normalize(&text).map(Some).ok_or_else(|| {
        format!("{pattern:?} expands to {text:?}, which is not a clean absolute path")
    })
}

/// The path as the check sees it: canonical, except under `/proc` (whose
/// `self` would resolve to the server) and when it does not exist.
fn resolve(p: &str, fs: &dyn FsView) -> String {
    if at_or_beneath(p, "/proc") {
        return p.to_string();
    }
    fs.canonical(p).unwrap_or_else(|| p.to_string())
}

/// A path an operation is granted beneath, and the file rule that granted
/// it (`None`: the operation is open there because no allow restricts it).
struct Grant {
    path: String,
    rule: Option<String>,
}

struct Deny {
    path: String,
    /// Self-protection: no allow overrides it, however specific.
    protected: bool,
    /// The file rule that denied it (`None` for self-protection).
    rule: Option<String>,
}

/// A directory a grant could not be carved in: nothing is granted beneath it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CarveFailure {
    pub access: FsAccess,
    pub dir: String,
    /// How many entries it has (`None`: it could not be listed).
    pub entries: Option<usize>,
    /// The policy's denied paths beneath it, with their rules (empty when
    /// only agentsh's own protection split it).
    pub denied_by_policy: Vec<(String, String)>,
}

struct Carver<'a> {
    fs: &'a dyn FsView,
    warnings: Vec<String>,
    failures: Vec<CarveFailure>,
    /// Directories split into their children (they keep no grant themselves).
    split: Vec<String>,
}

impl Carver<'_> {
    /// The paths a grant on `p` becomes once every deny is carved out.
    fn carve(&mut self, p: &str, denies: &[Deny], what: FsAccess, out: &mut Vec<String>) {
        for d in denies {
            if at_or_beneath(p, &d.path) && (d.protected || d.path == p) {
                return;
            }
        }
        if !denies
            .iter()
            .any(|d| d.path != p && at_or_beneath(&d.path, p))
        {
            out.push(p.to_string());
            return;
        }
        let children = self.fs.children(p);
        let entries = children.as_ref().map(Vec::len);
        if entries.is_none_or(|n| n > MAX_CARVE_CHILDREN) {
            self.warnings.push(match entries {
                None => format!(
                    "{what:?} on {p}: cannot list it to carve out a denied path; nothing granted there"
                ),
                Some(n) => format!(
                    "{what:?} on {p}: {n} entries is too many to carve out a denied path; \
                     nothing granted there"
                ),
            });
            self.failures.push(CarveFailure {
                access: what,
                dir: p.to_string(),
                entries,
                denied_by_policy: denies
                    .iter()
                    .filter(|d| d.path != p && at_or_beneath(&d.path, p))
                    .filter_map(|d| d.rule.clone().map(|r| (d.path.clone(), r)))
                    .collect(),
            });
            return;
        }
        self.split.push(p.to_string());
        for child in children.unwrap_or_default() {
            self.carve(&child, denies, what, out);
        }
    }
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

/// A protected path strictly beneath `grant` (other than `/`), if any: the
/// grant will be split around it.
fn split_by_protection<'a>(grant: &str, denies: &'a [Deny]) -> Option<&'a str> {
    if grant == "/" {
        return None;
    }
    denies
        .iter()
        .find(|d| d.protected && d.path != grant && at_or_beneath(&d.path, grant))
        .map(|d| d.path.as_str())
}

/// Compiles the policy's file and network rules for one session.
pub fn compile(
    policy: &Policy,
    vars: &SessionVars,
    protect: &SelfProtection,
    compat: LandlockCompat,
    fs: &dyn FsView,
) -> CompiledLandlock {
    let mut warnings = Vec::new();
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
                            Decision::Deny | Decision::Approve | Decision::Audit => {
                                denies.entry(*op).or_default().push(Deny {
                                    path: path.clone(),
                                    protected: false,
                                    rule: Some(rule.name.clone()),
                                })
                            }
                        }
                    }
                    continue;
                }
                Ok(None) => format!("{pattern}: its variable has no value"),
                Err(e) => e,
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

    let mut carver = Carver {
        fs,
        warnings: Vec::new(),
        failures: Vec::new(),
        split: Vec::new(),
    };
    let mut by_path: BTreeMap<String, BTreeSet<FsAccess>> = BTreeMap::new();
    for (op, list) in &grants {
        let d = denies.get(op).map(Vec::as_slice).unwrap_or_default();
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
    let carve_failures = std::mem::take(&mut carver.failures);
    if by_path.len() > MAX_FS_RULES {
        warnings.push(format!(
            "{} filesystem rules exceed {MAX_FS_RULES}; the rest are dropped",
            by_path.len()
        ));
    }
    let fs_rules: Vec<FsRule> = by_path
        .into_iter()
        .take(MAX_FS_RULES)
        .map(|(path, ops)| FsRule {
            path,
            access: ops.into_iter().collect(),
        })
        .collect();

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
        .filter(|a| handled.contains(a))
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
        required_abi: config.required_abi(),
        kernel_abi: agentsh_proto::wire::kernel_landlock_abi(),
        max_abi: None,
        enforcement: String::new(),
    };
    let mut summary = summary;
    summary.enforcement = match (summary.kernel_abi >= summary.required_abi, compat) {
        (true, _) => "full",
        (false, LandlockCompat::BestEffort) => "partial",
        (false, LandlockCompat::Required) => "refused",
    }
    .to_string();
    CompiledLandlock {
        config,
        summary,
        warnings,
        carve_failures,
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
    s.enforcement = match (s.kernel_abi >= s.required_abi, s.compat) {
        (true, _) => "full",
        (false, LandlockCompat::BestEffort) => "partial",
        (false, LandlockCompat::Required) => "refused",
    }
    .to_string();
    s.max_abi = Some(cap);
}

/// Everything the server needs to compile a ruleset at each wrap-init.
pub struct SessionLandlock {
    policy: std::sync::Arc<Policy>,
    workspace: Option<String>,
    protect: SelfProtection,
    compat: LandlockCompat,
    /// The last ruleset compiled, reused while nothing it was built from
    /// has changed (see [`RulesetCache`]).
    cache: std::sync::Mutex<Option<RulesetCache>>,
}

/// A compiled ruleset and the directories it was built from.
///
/// Compiling lists directories and follows symlinks (≈ 0.6 ms, on every
/// wrap-init, i.e. every new tree). What it read can only change if an entry
/// of one of those directories is added, removed, renamed or replaced, or a
/// directory's mode changes, and each of those changes the directory's ctime
/// (or, for a mount on it, its device and inode). So the result is reused
/// while every directory it depended on has the stamp it had, checked with
/// one stat each. A directory changed less than [`SETTLE`] before the compile
/// started might have changed during it: such a result is not kept.
struct RulesetCache {
    uid: u32,
    home: Option<String>,
    deps: Vec<(String, Option<Stamp>)>,
    result: CompiledLandlock,
}

/// What a directory looked like: any entry added, removed, renamed or
/// replaced, or a mount on it, changes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Stamp {
    dev: u64,
    ino: u64,
    ctime: (i64, i64),
    mtime: (i64, i64),
}

/// A directory changed this recently might have changed during a compile
/// that read it: such a result is not kept.
pub(crate) const SETTLE: std::time::Duration = std::time::Duration::from_millis(100);

pub(crate) fn stamp(dir: &str) -> Option<Stamp> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(dir).ok()?;
    Some(Stamp {
        dev: m.dev(),
        ino: m.ino(),
        ctime: (m.ctime(), m.ctime_nsec()),
        mtime: (m.mtime(), m.mtime_nsec()),
    })
}

/// [`HostFs`], noting every directory whose entries an answer depended on:
/// each ancestor of a path it canonicalized (and of the result), and each
/// directory it listed.
struct RecordingFs {
    deps: std::cell::RefCell<BTreeSet<String>>,
}

impl RecordingFs {
    fn note_ancestors(&self, path: &str) {
        let mut deps = self.deps.borrow_mut();
        let mut p = std::path::Path::new(path);
        while let Some(parent) = p.parent() {
            deps.insert(parent.to_string_lossy().into_owned());
            p = parent;
        }
    }
}

impl FsView for RecordingFs {
    fn canonical(&self, path: &str) -> Option<String> {
        self.note_ancestors(path);
        let r = HostFs.canonical(path);
        if let Some(c) = &r {
            self.note_ancestors(c);
        }
        r
    }

    fn children(&self, dir: &str) -> Option<Vec<String>> {
        self.note_ancestors(dir);
        self.deps.borrow_mut().insert(dir.to_string());
        HostFs.children(dir)
    }
}

impl SessionLandlock {
    /// From the server's config: the workspace, `landlock.compat`, and the
    /// paths agentsh protects (its binaries, config, policies, state, audit
    /// log, and the API port).
    pub fn for_server(
        policy: std::sync::Arc<Policy>,
        config: &crate::config::Config,
        config_file: Option<&Path>,
    ) -> SessionLandlock {
        let mut own: Vec<std::path::PathBuf> = vec![
            "/etc/agentsh".into(),
            config.policies_dir.clone(),
            config.state_dir.clone(),
            // The API socket, notify sockets and the `active` marker.
            config.run_dir(),
        ];
        let parent = |p: &Path| p.parent().map(Path::to_path_buf);
        own.extend(parent(&config.audit.jsonl));
        own.extend(config_file.and_then(parent));
        own.extend(std::env::current_exe().ok().as_deref().and_then(parent));
        own.extend(parent(&config.wrapper_binary_path()));
        let own: Vec<&Path> = own.iter().map(|p| p.as_path()).collect();
        let api_port = config
            .server
            .http
            .addr
            .parse::<std::net::SocketAddr>()
            .ok()
            .map(|a| a.port());
        let protect = SelfProtection::new(&own, &[config.state_dir.as_path()], api_port, &HostFs);
        SessionLandlock {
            policy,
            workspace: (!config.workspace.is_empty()).then(|| config.workspace.clone()),
            protect,
            compat: config.landlock.compat,
            cache: std::sync::Mutex::new(None),
        }
    }

    pub fn protection(&self) -> &SelfProtection {
        &self.protect
    }

    /// The ruleset for a tree run by `uid` (its home from `/etc/passwd`).
    pub fn compile(&self, uid: u32) -> CompiledLandlock {
        let home = std::fs::read_to_string("/etc/passwd")
            .ok()
            .and_then(|t| home_of(uid, &t));
        let mut cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(c) = cache.as_ref() {
            if c.uid == uid && c.home == home && c.deps.iter().all(|(d, st)| stamp(d) == *st) {
                return c.result.clone();
            }
        }
        let started = std::time::SystemTime::now();
        let vars = SessionVars {
            workspace: self.workspace.clone(),
            home: home.clone(),
            tmpdir: "/tmp".into(),
        };
        let fs = RecordingFs {
            deps: Default::default(),
        };
        let result = compile(&self.policy, &vars, &self.protect, self.compat, &fs);
        let deps: Vec<(String, Option<Stamp>)> = fs
            .deps
            .into_inner()
            .into_iter()
            .map(|d| {
                let st = stamp(&d);
                (d, st)
            })
            .collect();
        let settled = |st: &Option<Stamp>| {
            st.is_none_or(|s| {
                let changed = std::time::UNIX_EPOCH
                    + std::time::Duration::new(s.ctime.0.max(0) as u64, s.ctime.1.max(0) as u32);
                changed + SETTLE < started
            })
        };
        *cache = deps
            .iter()
            .all(|(_, st)| settled(st))
            .then(|| RulesetCache {
                uid,
                home,
                deps,
                result: result.clone(),
            });
        result
    }
}

/// The home directory of `uid` in a passwd file's text.
pub fn home_of(uid: u32, passwd: &str) -> Option<String> {
    passwd.lines().find_map(|line| {
        let f: Vec<&str> = line.split(':').collect();
        (f.len() >= 7 && f[2].parse::<u32>().ok() == Some(uid) && f[5].starts_with('/'))
            .then(|| f[5].to_string())
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    /// A fake tree: directory → non-symlink children; symlinks → targets.
    struct FakeFs {
        dirs: HashMap<String, Vec<String>>,
        links: HashMap<String, String>,
    }

    impl FakeFs {
        fn new(dirs: &[(&str, &[&str])], links: &[(&str, &str)]) -> FakeFs {
            FakeFs {
                dirs: dirs
                    .iter()
                    .map(|(d, c)| {
                        (
                            d.to_string(),
                            c.iter().map(|n| join(d, n)).collect::<Vec<_>>(),
                        )
                    })
                    .collect(),
                links: links
                    .iter()
                    .map(|(a, b)| (a.to_string(), b.to_string()))
                    .collect(),
            }
        }
    }

    impl FsView for FakeFs {
        fn canonical(&self, path: &str) -> Option<String> {
            for (link, target) in &self.links {
                if at_or_beneath(path, link) {
                    return Some(format!("{target}{}", &path[link.len()..]));
                }
            }
            Some(path.to_string())
        }
        fn children(&self, dir: &str) -> Option<Vec<String>> {
            self.dirs.get(dir).cloned()
        }
    }

    fn fake() -> FakeFs {
        FakeFs::new(
            &[
                ("/", &["etc", "usr", "tmp", "var", "home", "proc", "dev"]),
                ("/usr", &["bin", "lib", "local", "share"]),
                ("/usr/local", &["bin", "lib", "sbin"]),
                ("/var", &["lib", "log", "tmp", "cache"]),
                ("/var/lib", &["agentsh", "apt"]),
                ("/var/log", &["agentsh", "syslog"]),
                ("/dev", &["null", "shm", "pts"]),
                ("/home", &["u"]),
                ("/home/u", &[".ssh", "notes", "proj"]),
                ("/home/u/proj", &["README", "secret.txt", "src"]),
            ],
            &[("/bin", "/usr/bin"), ("/lib", "/usr/lib")],
        )
    }

    fn protect(fs: &dyn FsView) -> SelfProtection {
        SelfProtection::new(
            &[Path::new("/var/lib/agentsh"), Path::new("/var/log/agentsh")],
            &[Path::new("/var/lib/agentsh")],
            Some(18080),
            fs,
        )
    }

    fn vars() -> SessionVars {
        SessionVars {
            workspace: Some("/home/u/proj".into()),
            home: Some("/home/u".into()),
            tmpdir: "/tmp".into(),
        }
    }

    fn pol(yaml: &str) -> Policy {
        Policy::from_yaml(yaml, "t.yaml").unwrap_or_else(|e| panic!("{e}"))
    }

    fn rules_of(c: &CompiledLandlock) -> BTreeMap<String, Vec<FsAccess>> {
        c.config
            .fs_rules
            .iter()
            .map(|r| (r.path.clone(), r.access.clone()))
            .collect()
    }

    /// Some rule at `path` or above it grants `a`.
    fn has(c: &CompiledLandlock, path: &str, a: FsAccess) -> bool {
        c.config
            .fs_rules
            .iter()
            .any(|r| at_or_beneath(path, &r.path) && r.access.contains(&a))
    }

    #[test]
    fn the_cached_ruleset_follows_every_change_of_what_it_was_built_from() {
        // A workspace holding a directory agentsh protects: the workspace is
        // carved, i.e. its other entries are granted one by one, so adding an
        // entry must change the ruleset. Beside the test binary, not in /tmp:
        // /tmp is an ancestor, and other tests keep changing it.
        let exe = std::env::current_exe().unwrap();
        let base = exe
            .parent()
            .unwrap()
            .join(format!("llcache-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        let ws = base.join("ws");
        for d in ["a", "own"] {
            std::fs::create_dir_all(ws.join(d)).unwrap();
        }
        let own = ws.join("own");
        let sl = SessionLandlock {
            policy: std::sync::Arc::new(pol(
                "default: allow\nfile_rules:\n  - name: ws\n    paths: [\"${WORKSPACE}/**\", \"${HOME}/**\"]\n    operations: [read, write, create, delete]\n    decision: allow\n",
            )),
            workspace: Some(ws.display().to_string()),
            protect: SelfProtection::new(&[own.as_path()], &[], None, &HostFs),
            compat: LandlockCompat::BestEffort,
            cache: std::sync::Mutex::new(None),
        };
        let cached = |sl: &SessionLandlock| sl.cache.lock().unwrap().is_some();
        // Compiles until the result is kept (its directories have settled).
        let settle = |sl: &SessionLandlock, uid: u32| {
            for _ in 0..50 {
                let c = sl.compile(uid);
                if cached(sl) {
                    return c;
                }
                std::thread::sleep(SETTLE);
            }
            panic!("the ruleset was never kept");
        };
        let a = ws.join("a").display().to_string();
        let b = ws.join("b").display().to_string();
        let first = sl.compile(0);
        // Just created: not trusted yet.
        assert!(!cached(&sl));
        assert!(has(&first, &a, FsAccess::Write), "{:?}", rules_of(&first));
        assert!(!has(&first, &own.display().to_string(), FsAccess::Write));
        assert_eq!(settle(&sl, 0), first);
        assert_eq!(sl.compile(0), first);
        assert!(cached(&sl));
        // A new entry in the carved workspace: compiled afresh, and granted.
        std::fs::create_dir(ws.join("b")).unwrap();
        let second = sl.compile(0);
        assert!(has(&second, &b, FsAccess::Write), "{:?}", rules_of(&second));
        assert!(!has(&first, &b, FsAccess::Write));
        // Another uid (another home) is never served the cached one.
        let home0 = home_of(
            0,
            &std::fs::read_to_string("/etc/passwd").unwrap_or_default(),
        );
        if let Some(h) = home0 {
            assert_eq!(settle(&sl, 0), second);
            assert!(has(&second, &h, FsAccess::Write));
            let other = sl.compile(4_000_017);
            assert!(!has(&other, &h, FsAccess::Write), "{:?}", rules_of(&other));
        }
        std::fs::remove_dir_all(&base).unwrap();
    }

    #[test]
    fn no_file_rules_still_protects_agentsh_and_system_files() {
        let fs = fake();
        let c = compile(
            &pol("default: allow\n"),
            &vars(),
            &protect(&fs),
            LandlockCompat::BestEffort,
            &fs,
        );
        assert_eq!(
            c.config.handled_fs,
            vec![
                FsAccess::Read,
                FsAccess::Write,
                FsAccess::Create,
                FsAccess::Delete
            ]
        );
        let r = rules_of(&c);
        assert!(has(&c, "/var/lib/apt", FsAccess::Read));
        assert!(has(&c, "/etc", FsAccess::Read));
        assert!(!has(&c, "/var/lib/agentsh", FsAccess::Read), "{r:?}");
        assert!(has(&c, "/var/lib/agentsh", FsAccess::List), "{r:?}");
        for open in [
            "/tmp",
            "/home",
            "/proc",
            "/usr/local/lib",
            "/var/cache",
            "/var/lib/apt",
        ] {
            assert!(r.contains_key(open), "{open} must stay writable: {r:?}");
        }
        for shut in [
            "/",
            "/etc",
            "/usr",
            "/usr/bin",
            "/usr/lib",
            "/var",
            "/var/lib",
            "/var/lib/agentsh",
            "/var/log/agentsh",
            "/usr/local/bin",
            "/usr/local/sbin",
        ] {
            assert!(
                !has(&c, shut, FsAccess::Write),
                "{shut} must not be writable: {r:?}"
            );
        }
        assert!(c.config.scope_signals && c.config.scope_abstract_unix);
        assert!(c.summary.api_port_reachable);
        assert_eq!(c.config.tcp_connect_ports, None);
    }

    #[test]
    fn an_allow_cannot_reopen_protected_paths() {
        let fs = fake();
        let c = compile(
            &pol(
                "default: allow\nfile_rules:\n  - {name: all, paths: [\"/**\", /etc/agentsh, /bin], operations: [write, create, delete, read], decision: allow}\n",
            ),
            &vars(),
            &protect(&fs),
            LandlockCompat::BestEffort,
            &fs,
        );
        let r = rules_of(&c);
        // `/` loses read (the state dir is beneath it) and the modifying rights.
        assert_eq!(r.get("/"), Some(&vec![FsAccess::List]), "{r:?}");
        assert!(has(&c, "/usr/bin", FsAccess::Read), "{r:?}");
        assert!(!has(&c, "/etc/agentsh", FsAccess::Write), "{r:?}");
        assert!(has(&c, "/etc/agentsh", FsAccess::Read), "{r:?}");
        assert!(!has(&c, "/usr/bin", FsAccess::Write), "{r:?}");
        assert!(has(&c, "/tmp", FsAccess::Write));
    }

    #[test]
    fn deny_beneath_allow_is_carved_and_allow_beneath_deny_wins() {
        let fs = fake();
        let c = compile(
            &pol(r#"default: allow
file_rules:
  - {name: run, paths: ["/**"], operations: [execute], decision: allow}
  - {name: no-run-scratch, paths: [/tmp/**, /var/tmp, /dev/shm], operations: [execute], decision: deny}
  - {name: ws, paths: ["${WORKSPACE}/**", "${TMPDIR}/ok/**"], operations: [execute, write], decision: allow}
"#),
            &vars(),
            &protect(&fs),
            LandlockCompat::BestEffort,
            &fs,
        );
        let r = rules_of(&c);
        assert!(!has(&c, "/", FsAccess::Execute), "{r:?}");
        for yes in [
            "/usr",
            "/etc",
            "/home",
            "/var/lib",
            "/var/cache",
            "/dev/null",
            "/tmp/ok",
        ] {
            assert!(has(&c, yes, FsAccess::Execute), "{yes}: {r:?}");
        }
        for no in ["/tmp", "/var/tmp", "/dev/shm", "/var", "/dev"] {
            assert!(!has(&c, no, FsAccess::Execute), "{no}: {r:?}");
        }
        assert!(has(&c, "/home/u/proj", FsAccess::Write));
        // write is named by the policy: only what it grants.
        assert!(!has(&c, "/home", FsAccess::Write), "{r:?}");
        assert_eq!(
            c.config.handled_fs,
            vec![
                FsAccess::Read,
                FsAccess::Write,
                FsAccess::Create,
                FsAccess::Delete,
                FsAccess::Execute
            ]
        );
    }

    #[test]
    fn unset_workspace_skips_its_rules_and_says_so() {
        let fs = fake();
        let v = SessionVars {
            workspace: None,
            ..vars()
        };
        let c = compile(
            &pol("default: allow\nfile_rules:\n  - {name: ws, paths: [\"${WORKSPACE}/**\"], operations: [write], decision: allow}\n"),
            &v,
            &protect(&fs),
            LandlockCompat::Required,
            &fs,
        );
        assert!(!c
            .config
            .fs_rules
            .iter()
            .any(|r| r.access.contains(&FsAccess::Write)));
        assert!(
            c.warnings.iter().any(|w| w.contains("WORKSPACE")),
            "{:?}",
            c.warnings
        );
        assert_eq!(c.config.compat, LandlockCompat::Required);
    }

    #[test]
    fn symlinked_grants_are_judged_by_their_target() {
        let fs = fake();
        let c = compile(
            &pol("default: allow\nfile_rules:\n  - {name: b, paths: [/bin/**, /lib], operations: [write], decision: allow}\n"),
            &vars(),
            &protect(&fs),
            LandlockCompat::BestEffort,
            &fs,
        );
        assert!(
            !c.config
                .fs_rules
                .iter()
                .any(|r| r.access.contains(&FsAccess::Write)),
            "{:?}",
            c.config.fs_rules
        );
    }

    #[test]
    fn tcp_allow_lists_drop_the_api_port() {
        let fs = fake();
        let c = compile(
            &pol(
                "default: allow\nnetwork_rules:\n  - {name: a, ports: [443, 18080], direction: connect, decision: allow}\n  - {name: b, ports: any, direction: bind, decision: deny}\n",
            ),
            &vars(),
            &protect(&fs),
            LandlockCompat::BestEffort,
            &fs,
        );
        assert_eq!(c.config.tcp_connect_ports, Some(vec![443]));
        assert_eq!(c.config.tcp_bind_ports, Some(vec![]));
        assert!(!c.summary.api_port_reachable);
    }

    /// What one compiled ruleset must grant (`true`) or withhold.
    type Expect = (&'static str, FsAccess, bool);

    fn check(what: &str, c: &CompiledLandlock, expect: &[Expect]) {
        for (path, access, granted) in expect {
            assert_eq!(
                has(c, path, *access),
                *granted,
                "{what}: {access:?} on {path}: {:?}",
                rules_of(c)
            );
        }
    }

    #[test]
    fn deny_only_operations_stay_allowed_everywhere_but_the_denied_paths() {
        use FsAccess::*;
        let fs = fake();
        #[rustfmt::skip]
        let cases: Vec<(&str, &str, Vec<Expect>)> = vec![
            ("deny-only read: everything else readable, the state still not",
             "- {name: s, paths: [/home/u/proj/secret.txt], operations: [read], decision: deny}",
             vec![("/home/u/proj/secret.txt", Read, false), ("/home/u/proj/README", Read, true),
                  ("/home/u/proj/src", Read, true), ("/home/u/notes", Read, true),
                  ("/usr/bin", Read, true), ("/etc", Read, true), ("/var/lib/apt", Read, true),
                  ("/var/lib/agentsh", Read, false), ("/", Read, false),
                  ("/home/u/proj", Read, false),
                  // Writes keep their default: open but for protected paths.
                  ("/home/u/proj/secret.txt", Write, true), ("/etc", Write, false)]),
            ("deny-only write: other files writable, protected paths still not",
             "- {name: s, paths: [/home/u/proj/secret.txt], operations: [write], decision: deny}",
             vec![("/home/u/proj/secret.txt", Write, false), ("/home/u/proj/README", Write, true),
                  ("/tmp", Write, true), ("/home/u/notes", Write, true),
                  ("/etc", Write, false), ("/usr/bin", Write, false),
                  ("/var/lib/agentsh", Write, false),
                  ("/home/u/proj", Create, true), ("/home/u/proj/secret.txt", Read, true)]),
            ("deny-only create: nothing new beneath /tmp, elsewhere as before",
             "- {name: s, paths: [/tmp/**], operations: [create], decision: deny}",
             vec![("/tmp", Create, false), ("/home", Create, true), ("/var/cache", Create, true),
                  ("/", Create, false), ("/etc", Create, false), ("/tmp", Write, true),
                  ("/tmp", Delete, true)]),
            ("deny-only delete: a directory's contents kept, its parent split",
             "- {name: s, paths: [/home/u/.ssh/**], operations: [delete], decision: deny}",
             vec![("/home/u/.ssh", Delete, false), ("/home/u/proj", Delete, true),
                  ("/home/u", Delete, false), ("/tmp", Delete, true), ("/home/u/.ssh", Write, true)]),
            ("deny-only execute: handled, open everywhere but the denied paths",
             "- {name: s, paths: [/tmp/**, /dev/shm], operations: [execute], decision: deny}",
             vec![("/tmp", Execute, false), ("/dev/shm", Execute, false),
                  ("/usr/bin", Execute, true), ("/home/u/proj", Execute, true),
                  ("/dev/null", Execute, true), ("/var/tmp", Execute, true)]),
            ("allow + deny for one operation: an allow-list minus the deny",
             "- {name: a, paths: [\"/home/u/proj/**\"], operations: [write], decision: allow}\n\
              - {name: d, paths: [/home/u/proj/secret.txt], operations: [write], decision: deny}",
             vec![("/home/u/proj/README", Write, true), ("/home/u/proj/secret.txt", Write, false),
                  ("/tmp", Write, false), ("/home/u/notes", Write, false),
                  ("/tmp", Create, true)]),
            ("an allow-list for one operation, deny-only for another",
             "- {name: a, paths: [\"/home/u/proj/**\"], operations: [write], decision: allow}\n\
              - {name: d, paths: [/home/u/proj/secret.txt], operations: [read], decision: deny}",
             vec![("/home/u/proj/README", Write, true), ("/tmp", Write, false),
                  ("/home/u/proj/secret.txt", Read, false), ("/tmp", Read, true),
                  ("/home/u/proj/README", Read, true)]),
            ("allow everything, deny a tree, allow an exception beneath it",
             "- {name: a, paths: [\"/**\"], operations: [read], decision: allow}\n\
              - {name: d, paths: [\"/home/u/proj/**\"], operations: [read], decision: deny}\n\
              - {name: e, paths: [/home/u/proj/README], operations: [read], decision: allow}",
             vec![("/home/u/proj/README", Read, true), ("/home/u/proj/secret.txt", Read, false),
                  ("/home/u/proj/src", Read, false), ("/usr", Read, true),
                  ("/var/lib/agentsh", Read, false)]),
            ("deny-only beside self-protection: both carved out of /var/lib",
             "- {name: s, paths: [/var/lib/apt], operations: [read, write], decision: deny}",
             vec![("/var/lib/apt", Read, false), ("/var/lib/agentsh", Read, false),
                  ("/var/cache", Read, true), ("/var/log/syslog", Read, true),
                  ("/var/lib/apt", Write, false), ("/var/lib/agentsh", Write, false),
                  ("/var/cache", Write, true), ("/var/log/agentsh", Write, false)]),
            ("an allow cannot reopen a protected path; deny-only beside it",
             "- {name: a, paths: [\"/var/lib/agentsh/**\", \"/etc/**\"], operations: [read, write], decision: allow}\n\
              - {name: d, paths: [/home/u/notes], operations: [delete], decision: deny}",
             vec![("/var/lib/agentsh", Read, false), ("/etc", Read, true), ("/usr", Read, false),
                  ("/var/lib/agentsh", Write, false), ("/etc", Write, false),
                  ("/home/u/proj", Delete, true), ("/home/u", Delete, false),
                  ("/var/lib/agentsh", Delete, false), ("/etc", Delete, false)]),
        ];
        for (what, rules, expect) in cases {
            let c = compile(
                &pol(&format!("default: allow\nfile_rules:\n{rules}\n")),
                &vars(),
                &protect(&fs),
                LandlockCompat::BestEffort,
                &fs,
            );
            check(what, &c, &expect);
            assert!(
                c.carve_failures.is_empty(),
                "{what}: {:?}",
                c.carve_failures
            );
        }
    }

    #[test]
    fn split_directories_keep_only_a_listing_for_read() {
        let fs = fake();
        let c = compile(
            &pol("default: allow\nfile_rules:\n- {name: s, paths: [/home/u/proj/secret.txt], operations: [read], decision: deny}\n"),
            &vars(),
            &protect(&fs),
            LandlockCompat::BestEffort,
            &fs,
        );
        let r = rules_of(&c);
        for split in ["/", "/home", "/home/u", "/home/u/proj"] {
            let a = r.get(split).cloned().unwrap_or_default();
            assert!(
                a.contains(&FsAccess::List) && !a.contains(&FsAccess::Read),
                "{split}: {r:?}"
            );
        }
        assert!(c.config.handled_fs.contains(&FsAccess::Read));
        assert!(!c.config.handled_fs.contains(&FsAccess::Execute));
    }

    #[test]
    fn a_deny_whose_variable_is_unset_grants_its_operation_nowhere() {
        let fs = fake();
        let v = SessionVars {
            workspace: None,
            ..vars()
        };
        let c = compile(
            &pol("default: allow\nfile_rules:\n- {name: s, paths: [\"${WORKSPACE}/.env\"], operations: [read], decision: deny}\n"),
            &v,
            &protect(&fs),
            LandlockCompat::BestEffort,
            &fs,
        );
        assert!(
            !c.config
                .fs_rules
                .iter()
                .any(|r| r.access.contains(&FsAccess::Read)),
            "{:?}",
            rules_of(&c)
        );
        assert!(c.config.handled_fs.contains(&FsAccess::Read));
        assert!(
            c.warnings.iter().any(|w| w.contains("granted nowhere")),
            "{:?}",
            c.warnings
        );
        // Writes are untouched by it.
        assert!(has(&c, "/tmp", FsAccess::Write));
    }

    #[test]
    fn a_denied_path_in_a_directory_too_big_to_carve_is_reported() {
        let mut fs = fake();
        let many: Vec<String> = (0..300).map(|i| format!("/usr/share/f{i}")).collect();
        fs.dirs.insert("/usr/share".into(), many);
        let c = compile(
            &pol("default: allow\nfile_rules:\n- {name: no-f7, paths: [/usr/share/f7], operations: [read], decision: deny}\n- {name: no-curl, paths: [/usr/bin/curl], operations: [execute], decision: deny}\n"),
            &vars(),
            &protect(&fs),
            LandlockCompat::BestEffort,
            &fs,
        );
        let f = &c.carve_failures;
        assert_eq!(f.len(), 2, "{f:?}");
        assert_eq!(
            (f[0].access, f[0].dir.as_str(), f[0].entries),
            (FsAccess::Read, "/usr/share", Some(300))
        );
        assert_eq!(
            f[0].denied_by_policy,
            vec![("/usr/share/f7".into(), "no-f7".into())]
        );
        // /usr/bin cannot be listed (the fake does not know it).
        assert_eq!(
            (f[1].access, f[1].dir.as_str(), f[1].entries),
            (FsAccess::Execute, "/usr/bin", None)
        );
        // Stricter, never looser: nothing granted beneath them.
        assert!(!has(&c, "/usr/share/f8", FsAccess::Read));
        assert!(!has(&c, "/usr/bin/ls", FsAccess::Execute));
        assert!(has(&c, "/usr/lib", FsAccess::Execute));
    }

    #[test]
    fn an_allow_split_around_agentshs_files_is_named_in_a_warning() {
        let fs = fake();
        let own = SelfProtection::new(&[Path::new("/home/u/proj/src")], &[], None, &fs);
        let c = compile(
            &pol("default: allow\nfile_rules:\n- {name: ws, paths: [\"${WORKSPACE}/**\"], operations: [create], decision: allow}\n"),
            &vars(),
            &own,
            LandlockCompat::BestEffort,
            &fs,
        );
        assert!(has(&c, "/home/u/proj/README", FsAccess::Create));
        assert!(!has(&c, "/home/u/proj", FsAccess::Create));
        assert!(
            c.warnings
                .iter()
                .any(|w| w.contains("file rule \"ws\"")
                    && w.contains("split around /home/u/proj/src")),
            "{:?}",
            c.warnings
        );
        // The implicit grant on / is split too, and that is no news.
        let c = compile(
            &pol("default: allow\n"),
            &vars(),
            &own,
            LandlockCompat::BestEffort,
            &fs,
        );
        assert!(
            c.warnings.iter().all(|w| !w.contains("split around")),
            "{:?}",
            c.warnings
        );
    }

    #[test]
    fn landlock_bases() {
        assert_eq!(landlock_base("/**"), Ok("/"));
        assert_eq!(landlock_base("/usr/**"), Ok("/usr"));
        assert_eq!(landlock_base("${WORKSPACE}/**"), Ok("${WORKSPACE}"));
        assert_eq!(landlock_base("/dev/null"), Ok("/dev/null"));
        assert!(landlock_base("/home/*/x").is_err());
        assert!(landlock_base("/tmp/*.sh").is_err());
        assert!(landlock_base("/a/**/b").is_err());
    }

    #[test]
    fn home_from_passwd() {
        let p = "root:x:0:0:root:/root:/bin/bash\nuser:x:1000:1000::/home/user:/bin/sh\nbad:x:7\n";
        assert_eq!(home_of(0, p).as_deref(), Some("/root"));
        assert_eq!(home_of(1000, p).as_deref(), Some("/home/user"));
        assert_eq!(home_of(7, p), None);
        assert_eq!(home_of(5, p), None);
    }

    #[test]
    fn shipped_policies_protect_agentsh_and_keep_agent_work_open() {
        let fs = fake();
        for (name, text) in crate::policy::SHIPPED {
            let p = Policy::from_yaml(text, name).unwrap_or_else(|e| panic!("{e}"));
            let c = compile(&p, &vars(), &protect(&fs), LandlockCompat::BestEffort, &fs);
            let r = rules_of(&c);
            for shut in [
                "/etc",
                "/usr/bin",
                "/var/lib/agentsh",
                "/var/log/agentsh",
                "/",
            ] {
                assert!(!has(&c, shut, FsAccess::Write), "{name}: {shut} writable");
            }
            for open in ["/home/u/proj", "/tmp"] {
                assert!(has(&c, open, FsAccess::Write), "{name}: {open}: {r:?}");
            }
            if let Some(ports) = &c.config.tcp_connect_ports {
                assert!(!ports.contains(&18080), "{name}");
            }
        }
    }
}
