//! The policy engine: what may run in a supervised tree.
//!
//! A policy is a YAML file (one per name under `/etc/agentsh/policies/`):
//! `command_rules` decide every `execve` the supervisor traps, `file_rules`
//! and `network_rules` are for Landlock (what they mean: `semantics`; how
//! they compile: `landlock`), `syscalls.block` extends the seccomp
//! blocklist, and `default` decides an exec no rule matches. The file is
//! parsed strictly (unknown keys are errors, so a typo cannot silently turn a
//! rule off), validated, and compiled once into a [`Policy`]; after that,
//! [`evaluate`] is a pure function of the policy and the [`ExecFacts`] the
//! supervisor gathered. See `judge` for the order of judgement and
//! `pattern` for how program names match.
//!
//! Failure modes: loading fails with a [`PolicyError`] that names the
//! origin and, where it can, the line and column (the server refuses to start
//! rather than run with a policy it could not read). Evaluation cannot fail:
//! what it cannot judge (a wrapper with options it does not know) is denied.
//! The argv the policy sees is what the tracee passed; it is a best-effort
//! layer over Landlock, not a boundary by itself (see the supervisor).
//!
//! Shipped policies are embedded in the binary, so a name resolves even on a
//! host without `/etc/agentsh/policies/`; a file of the same name there wins.

mod compile;
pub mod daemon_sockets;
mod decision;
pub mod egress;
pub mod env;
mod error;
mod judge;
pub mod landlock;
mod locate;
mod pattern;
mod schema;
pub mod semantics;
mod stamp;
pub(crate) mod wrappers;

#[cfg(test)]
mod tests;

pub use compile::FILE_PATH_VARIABLES;
pub use error::{Location, PolicyError, PolicyNameError};
pub use judge::{
    evaluate, judge, ExecFacts, Interpreter, ProgramFacts, Truncation, Verdict, RULE_FILELESS_EXEC,
    RULE_TRUNCATED,
};
pub use schema::{
    Decision, ExecSources, FileOperation, FileRule, NetworkDirection, NetworkRule, PortSet,
};

use compile::{CommandRule, DepthRange};
use pattern::Matcher;
use std::fmt::Write as _;
use std::path::Path;

/// The policies shipped in `etc/agentsh/policies/`, by name.
pub const SHIPPED: &[(&str, &str)] = &[
    (
        "agent-default",
        include_str!("../../../etc/agentsh/policies/agent-default.yaml"),
    ),
    (
        "agent-strict",
        include_str!("../../../etc/agentsh/policies/agent-strict.yaml"),
    ),
    (
        "agent-observe",
        include_str!("../../../etc/agentsh/policies/agent-observe.yaml"),
    ),
];

/// A validated, compiled policy.
#[derive(Debug, Clone)]
pub struct Policy {
    name: String,
    description: Option<String>,
    origin: String,
    default: Decision,
    unparsable_wrapper: Decision,
    internal_bypass: Vec<Matcher>,
    command_rules: Vec<CommandRule>,
    file_rules: Vec<FileRule>,
    network_rules: Vec<NetworkRule>,
    blocked_syscalls: Vec<String>,
    daemon_sockets: daemon_sockets::DaemonSocketsDoc,
    exec_sources: schema::ExecSources,
    exec_memory_denied: bool,
    /// `multi_call:`: more multi-call binaries, by file name.
    multi_call: Vec<String>,
    /// `socket_families:` as numbers (with `egress` and no list: unix,
    /// inet, inet6); `None`: any family.
    socket_families: Option<std::collections::BTreeSet<u32>>,
    /// `egress:`; `None`: destinations are not judged.
    egress: Option<egress::Egress>,
    /// `env:`; `None`: the environment is inherited as is.
    env: Option<agentsh_proto::env::EnvRules>,
}

impl Policy {
    /// Parse, validate and compile. `origin` names the source in errors (a
    /// file path or `embedded:NAME`); without `name:` in the text, the
    /// policy is named after the origin's file stem.
    ///
    /// # Errors
    /// `Syntax` for YAML or schema errors, `Invalid` for bad values.
    pub fn from_yaml(text: &str, origin: &str) -> Result<Policy, PolicyError> {
        let doc: schema::PolicyDoc =
            serde_yaml_ng::from_str(text).map_err(|e| PolicyError::from_yaml(origin, &e))?;
        compile::compile(doc, text, origin)
    }

    /// Read and compile a policy file.
    ///
    /// # Errors
    /// `Read` if the file cannot be read, else as [`Policy::from_yaml`].
    pub fn load(path: &Path) -> Result<Policy, PolicyError> {
        let origin = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|source| PolicyError::Read {
            origin: origin.clone(),
            source,
        })?;
        Policy::from_yaml(&text, &origin)
    }

    /// A policy by name or path. A path (it contains `/` or ends in `.yaml`
    /// or `.yml`) is loaded as is. A name loads `{policies_dir}/{name}.yaml`
    /// when that file exists, else the shipped policy of that name.
    ///
    /// # Errors
    /// `BadName`, `NotFound`, or any error of [`Policy::load`]. A file that
    /// exists but cannot be read is an error, never a silent fallback.
    pub fn resolve(name_or_path: &str, policies_dir: &Path) -> Result<Policy, PolicyError> {
        if name_or_path.contains('/')
            || name_or_path.ends_with(".yaml")
            || name_or_path.ends_with(".yml")
        {
            return Policy::load(Path::new(name_or_path));
        }
        compile::check_policy_name(name_or_path).map_err(|reason| PolicyError::BadName {
            origin: name_or_path.to_string(),
            reason,
        })?;
        let path = policies_dir.join(format!("{name_or_path}.yaml"));
        match std::fs::read_to_string(&path) {
            Ok(text) => Policy::from_yaml(&text, &path.display().to_string()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => match shipped(name_or_path) {
                Some(text) => Policy::from_yaml(text, &format!("embedded:{name_or_path}")),
                None => Err(PolicyError::NotFound {
                    origin: name_or_path.to_string(),
                    searched: path,
                    shipped: SHIPPED.iter().map(|(n, _)| n.to_string()).collect(),
                }),
            },
            Err(source) => Err(PolicyError::Read {
                origin: path.display().to_string(),
                source,
            }),
        }
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn description(&self) -> Option<&str> {
        self.description.as_deref()
    }

    /// Where it was loaded from: a path or `embedded:NAME`.
    pub fn origin(&self) -> &str {
        &self.origin
    }

    /// The decision for an exec no command rule matches.
    pub fn default_decision(&self) -> Decision {
        self.default
    }

    /// Validated; compiled to Landlock by the caller.
    pub fn file_rules(&self) -> &[FileRule] {
        &self.file_rules
    }

    /// `exec_memory: deny`: no executable memory a program wrote itself.
    pub fn exec_memory_denied(&self) -> bool {
        self.exec_memory_denied
    }

    /// `exec_sources:` as written (default: files the tree writes may run).
    pub fn exec_sources(&self) -> &schema::ExecSources {
        &self.exec_sources
    }

    /// Validated; compiled to Landlock by the caller.
    pub fn network_rules(&self) -> &[NetworkRule] {
        &self.network_rules
    }

    /// The `socket()` families a tree may create (`None`: any).
    pub fn socket_families(&self) -> Option<&std::collections::BTreeSet<u32>> {
        self.socket_families.as_ref()
    }

    /// `egress:` compiled (`None`: destinations are not judged).
    pub fn egress(&self) -> Option<&egress::Egress> {
        self.egress.as_ref()
    }

    /// `env:` compiled (`None`: the environment is inherited as is).
    /// The program command rule `rule` redirects to (`decision: redirect`).
    pub fn redirect_of(&self, rule: &str) -> Option<&str> {
        self.command_rules
            .iter()
            .find(|r| r.name == rule)
            .and_then(|r| r.redirect_to.as_deref())
    }

    /// Whether its trees' DNS goes to the stub (`egress.dns: stub`).
    pub fn wants_dns_stub(&self) -> bool {
        self.egress()
            .is_some_and(|e| e.dns == egress::DnsMode::Stub)
    }

    pub fn env(&self) -> Option<&agentsh_proto::env::EnvRules> {
        self.env.as_ref()
    }

    /// `daemon_sockets: {allow, deny}` (the built-in list is in `daemon_sockets`).
    pub fn daemon_sockets(&self) -> &daemon_sockets::DaemonSocketsDoc {
        &self.daemon_sockets
    }

    /// Every entry of every command rule's `commands:`, as written, then
    /// the wrappers known by content whatever the rules name (the dynamic
    /// loaders, busybox, toybox): for the supervisor's identity index, which
    /// programs to recognise by content.
    pub fn command_entries(&self) -> Vec<String> {
        self.command_rules
            .iter()
            .flat_map(|r| r.commands_text.iter().cloned())
            .chain(wrappers::ALWAYS_INDEXED.iter().map(|p| (*p).to_string()))
            .collect()
    }

    /// Extra seccomp blocklist names from `syscalls: { block: [...] }`.
    pub fn blocked_syscalls(&self) -> &[String] {
        &self.blocked_syscalls
    }

    /// A human summary, as `agentsh policy check` prints it.
    /// Rules that can never decide anything: an earlier rule (first match
    /// wins) matches every program they name, at every depth they apply
    /// to, whatever the arguments. Conservative: a warning means the later
    /// rule is unreachable for every input; a rule not listed may still be.
    pub fn shadowed_rules(&self) -> Vec<String> {
        let mut out = Vec::new();
        if let Some(e) = &self.egress {
            out.extend(e.unbuilt());
        }
        for (j, later) in self.command_rules.iter().enumerate() {
            let shadow = self.command_rules[..j].iter().find(|earlier| {
                earlier.args_patterns.is_empty()
                    && earlier.depth.min <= later.depth.min
                    && later.depth.max <= earlier.depth.max
                    && later
                        .commands_text
                        .iter()
                        .all(|c| covers(&earlier.commands, &earlier.commands_text, c))
            });
            if let Some(earlier) = shadow {
                out.push(format!(
                    "rule {:?} is never reached: the earlier rule {:?} ({}) matches every \
                     program it names ({}), at every depth, whatever the arguments; move it \
                     above {:?} or narrow {:?}",
                    later.name,
                    earlier.name,
                    earlier.decision,
                    later.commands_text.join(" "),
                    earlier.name,
                    earlier.name
                ));
            }
        }
        out
    }

    pub fn summary(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(s, "policy {:?} ({}): OK", self.name, self.origin);
        if let Some(d) = &self.description {
            let _ = writeln!(s, "  {}", d.trim());
        }
        let _ = writeln!(s, "  default: {}", self.default);
        let _ = writeln!(s, "  unparsable wrappers: {}", self.unparsable_wrapper);
        let _ = writeln!(
            s,
            "  internal_bypass: {} pattern(s)",
            self.internal_bypass.len()
        );
        let _ = writeln!(
            s,
            "  command_rules: {} (first match wins)",
            self.command_rules.len()
        );
        for (i, r) in self.command_rules.iter().enumerate() {
            let args = if r.args_patterns.is_empty() {
                String::new()
            } else {
                format!(", {} args pattern(s)", r.args_patterns.len())
            };
            let depth = if r.depth == DepthRange::ANY {
                String::new()
            } else {
                format!(", {}", r.depth.describe())
            };
            let to = r
                .redirect_to
                .as_deref()
                .map_or_else(String::new, |t| format!(" -> {t}"));
            let _ = writeln!(
                s,
                "    {:>2}. {:<7} {} [{}{depth}{args}]{to}",
                i + 1,
                r.decision.as_str(),
                r.name,
                r.commands_text.join(" "),
            );
        }
        self.summarize_files(&mut s);
        self.summarize_network(&mut s);
        let _ = writeln!(
            s,
            "  socket_families: {}",
            match &self.socket_families {
                None => "not restricted".to_string(),
                Some(f) => format!(
                    "{} (others fail with EAFNOSUPPORT)",
                    f.iter()
                        .map(|&n| egress::family_name(n).map_or(n.to_string(), str::to_string))
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            }
        );
        if let Some(e) = &self.env {
            let _ = writeln!(s, "  {}", env::describe(e));
        }
        match &self.egress {
            None => {
                let _ = writeln!(s, "  egress: none (destinations are not judged)");
            }
            Some(e) => {
                for l in e.describe() {
                    let _ = writeln!(s, "  {l}");
                }
            }
        }
        let _ = writeln!(
            s,
            "  daemon_sockets: the built-in list{}{}",
            if self.daemon_sockets.deny.is_empty() {
                String::new()
            } else {
                format!(" + {}", self.daemon_sockets.deny.join(", "))
            },
            if self.daemon_sockets.allow.is_empty() {
                String::new()
            } else {
                format!(", except {}", self.daemon_sockets.allow.join(", "))
            }
        );
        let _ = write!(
            s,
            "  syscalls.block: {}",
            if self.blocked_syscalls.is_empty() {
                "-".to_string()
            } else {
                self.blocked_syscalls.join(", ")
            }
        );
        s
    }

    /// `summary`'s file section: what each operation compiles to.
    fn summarize_files(&self, s: &mut String) {
        let _ = writeln!(
            *s,
            "  file_rules: {} (Landlock; write/create/delete beneath agentsh's own and system \
             files are always denied)",
            self.file_rules.len()
        );
        for op in semantics::FILE_OPERATIONS {
            let paths = |d: Decision| {
                self.file_rules
                    .iter()
                    .filter(|r| r.decision == d && r.operations.contains(&op))
                    .flat_map(|r| r.paths.iter().map(String::as_str))
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            let (allowed, denied) = (paths(Decision::Allow), paths(Decision::Deny));
            let text = match semantics::file_op_kind(&self.file_rules, op) {
                semantics::FileOpKind::Open => "not restricted by the policy".to_string(),
                semantics::FileOpKind::AllowList if denied.is_empty() => {
                    format!("allowed only beneath {allowed}")
                }
                semantics::FileOpKind::AllowList => {
                    format!("allowed only beneath {allowed}, except beneath {denied}")
                }
                semantics::FileOpKind::DenyList => {
                    format!("allowed everywhere except beneath {denied} (deny-only)")
                }
            };
            let _ = writeln!(*s, "    {}: {text}", semantics::op_name(op));
        }
    }

    /// `summary`'s network section: what each TCP direction compiles to.
    fn summarize_network(&self, s: &mut String) {
        let _ = writeln!(*s, "  network_rules: {}", self.network_rules.len());
        let mut warnings = Vec::new();
        for (what, dir) in [
            ("connect", NetworkDirection::Connect),
            ("bind", NetworkDirection::Bind),
        ] {
            let ports = landlock::tcp_ports(&self.network_rules, dir, &mut warnings);
            let text = match ports {
                None if what == "connect" => {
                    "unrestricted (the server's API port stays reachable)".to_string()
                }
                None => "unrestricted".to_string(),
                Some(p) if p.is_empty() => "closed".to_string(),
                Some(p) => format!("only {p:?}"),
            };
            let _ = writeln!(*s, "    TCP {what}: {text}");
        }
        for w in warnings {
            let _ = writeln!(*s, "    warning: {w}");
        }
    }
}

/// The text of a shipped policy.
pub fn shipped(name: &str) -> Option<&'static str> {
    SHIPPED.iter().find(|(n, _)| *n == name).map(|(_, t)| *t)
}

/// Whether the patterns `earlier` (their texts `texts`) match every
/// program the command entry `entry` matches: an absolute path is matched
/// as that program; a bare name (which matches that name in any directory,
/// and a payload named so) only by the same name or a basename glob that
/// matches it; a glob or a digest only by the same text.
fn covers(earlier: &[pattern::CommandPattern], texts: &[String], entry: &str) -> bool {
    if texts.iter().any(|t| t == entry) {
        return true;
    }
    let is_glob = entry.contains(['*', '?', '[']);
    if is_glob || entry.starts_with("sha256:") {
        return texts.iter().any(|t| t == "*");
    }
    if entry.starts_with('/') {
        return earlier
            .iter()
            .any(|p| p.matches(&pattern::ProgramName::exec(entry)));
    }
    earlier
        .iter()
        .zip(texts)
        .any(|(p, t)| !t.contains('/') && p.matches(&pattern::ProgramName::exec(entry)))
}

/// For `agentsh policy check FILE`: the summary, or the error to print.
///
/// Besides loading it, compiles its Landlock rules on this machine's
/// filesystem (with the default config's self-protection, for the calling
/// uid): a denied path that cannot be carved out here (its directory is too
/// big or unreadable, so its operation would be granted nowhere beneath that
/// directory) is an error saying what to write instead.
///
/// # Errors
/// Any error of [`Policy::load`], or `Invalid` for such a path.
pub fn check_file(path: &Path) -> Result<String, PolicyError> {
    let policy = Policy::load(path)?;
    carvable_here(&policy)?;
    let mut s = policy.summary();
    for w in policy.shadowed_rules() {
        let _ = write!(s, "\n  warning: {w}");
    }
    Ok(s)
}

fn carvable_here(policy: &Policy) -> Result<(), PolicyError> {
    let config = crate::config::Config::default();
    let ruleset =
        landlock::SessionLandlock::for_server(std::sync::Arc::new(policy.clone()), &config, None);
    // SAFETY: geteuid has no preconditions.
    let uid = unsafe { libc::geteuid() };
    let compiled = ruleset.compile(uid);
    let Some((failure, (denied, rule))) = compiled
        .carve_failures
        .iter()
        .find_map(|f| f.denied_by_policy.first().map(|d| (f, d)))
    else {
        return Ok(());
    };
    let op = format!("{:?}", failure.access).to_lowercase();
    let dir = &failure.dir;
    let why = match failure.entries {
        Some(n) => format!(
            "it has {n} entries and at most {} are granted one by one (each is a rule every \
             shell pays for)",
            landlock::MAX_CARVE_CHILDREN
        ),
        None => "it cannot be listed".to_string(),
    };
    let program = Path::new(denied)
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    Err(PolicyError::Invalid {
        origin: policy.origin().to_string(),
        location: None,
        rule: Some(rule.clone()),
        message: format!(
            "file_rules {rule:?}: on this machine, denying {op} on {denied} means granting {op} \
             on every other entry of {dir}, and {why}: {op} would be granted nowhere beneath \
             {dir}. Deny the whole directory (\"{dir}/**\") or a path in a smaller one instead; \
             to keep a program from running, deny it with a command rule \
             (`commands: [{program}]`, `decision: deny`)"
        ),
    })
}
