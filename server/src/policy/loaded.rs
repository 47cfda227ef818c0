//! The compiled [`Policy`] and how one is found: by path, by name in the
//! policies directory, or among the policies shipped in the binary (so a
//! name resolves even on a host without `/etc/agentsh/policies/`; a file of
//! the same name there wins). Its fields are read by the rooms of `policy`
//! (`judge`, `landlock`, `check`) and filled by `compile`.
//!
//! Failure modes: a file that cannot be read, a name that is neither a file
//! there nor a shipped policy, an invalid name, or any error of `compile`:
//! a [`PolicyError`] naming the origin (the server refuses to start rather
//! than run with a policy it could not read).

use super::compile::{self, CommandRule};
use super::error::PolicyError;
use super::pattern::Matcher;
use super::schema::{self, Decision, FileRule, NetworkRule};
use super::{daemon_sockets, egress, wrappers};
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
    pub(super) name: String,
    /// The SHA-256 (hex) of its text.
    pub(super) hash: String,
    pub(super) description: Option<String>,
    pub(super) origin: String,
    pub(super) default: Decision,
    pub(super) unparsable_wrapper: Decision,
    pub(super) internal_bypass: Vec<Matcher>,
    pub(super) command_rules: Vec<CommandRule>,
    pub(super) file_rules: Vec<FileRule>,
    pub(super) network_rules: Vec<NetworkRule>,
    pub(super) blocked_syscalls: Vec<String>,
    pub(super) daemon_sockets: daemon_sockets::DaemonSocketsDoc,
    pub(super) exec_sources: schema::ExecSources,
    pub(super) exec_memory_denied: bool,
    /// `multi_call:`: more multi-call binaries, by file name.
    pub(super) multi_call: Vec<String>,
    /// `socket_families:` as numbers (with `egress` and no list: unix,
    /// inet, inet6); `None`: any family.
    pub(super) socket_families: Option<std::collections::BTreeSet<u32>>,
    /// `egress:`; `None`: destinations are not judged.
    pub(super) egress: Option<egress::Egress>,
    /// `env:`; `None`: the environment is inherited as is.
    pub(super) env: Option<agentsh_proto::env::EnvRules>,
    /// `credential_files:` (empty `hide`: nothing is hidden).
    pub(super) credential_files: super::credential_files::CredentialFilesDoc,
    /// `read_only_files:` (empty `paths`: nothing is kept read-only).
    pub(super) read_only_files: super::credential_files::ReadOnlyFilesDoc,
    /// `limits:` as written (checked), under a session's own.
    pub(super) limits: Option<crate::vocab::LimitsDoc>,
    /// `tracer_reads: unjudged`: under the tracer without Landlock, opens
    /// for reading only do not stop (chosen by the policy, logged).
    pub(super) reads_unjudged: bool,
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

    /// `limits:` as written (a session's own override it key by key).
    pub fn limits(&self) -> Option<&crate::vocab::LimitsDoc> {
        self.limits.as_ref()
    }

    /// The SHA-256 (hex) of the text it was compiled from.
    pub fn hash(&self) -> &str {
        &self.hash
    }

    /// What of this policy the kernel holds for a tree from its start,
    /// which a reload cannot change for a running tree: each part's name
    /// and a text that differs when the part does. `filter`: the calls the
    /// seccomp filter traps or refuses (blocked syscalls, executable
    /// memory, the network calls egress judges, socket families);
    /// `landlock`: the file rules, exec sources, network ports, daemon
    /// sockets, credential and read-only files; `env`: the environment the
    /// tree's first shell got.
    pub fn fixed_at_start(&self) -> [(&'static str, String); 3] {
        [
            (
                "filter",
                format!(
                    "{:?}",
                    (
                        &self.blocked_syscalls,
                        self.exec_memory_denied,
                        self.judges_exec_maps(),
                        &self.socket_families,
                        self.egress.is_some(),
                        self.egress
                            .as_ref()
                            .is_some_and(super::egress::Egress::allows_everything),
                    )
                ),
            ),
            (
                "landlock",
                format!(
                    "{:?}",
                    (
                        &self.file_rules,
                        &self.exec_sources,
                        &self.network_rules,
                        &self.daemon_sockets,
                        &self.credential_files,
                        &self.read_only_files,
                    )
                ),
            ),
            ("env", format!("{:?}", self.env)),
        ]
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

    /// `tracer_reads: unjudged`: where the tracer keeps the file rules
    /// (gVisor), an open for reading only runs without stopping; what that
    /// gives up is said at start ([`Policy::reads_unjudged_cost`]).
    pub fn reads_unjudged(&self) -> bool {
        self.reads_unjudged
    }

    /// What `tracer_reads: unjudged` gives up, for the log.
    pub fn reads_unjudged_cost() -> &'static str {
        "opens for reading only do not stop at the tracer: the policy's read rules, the hidden \
         credential files and the refusal of other processes' /proc links are not kept for \
         them (the files a tree writes, creates or removes are still judged)"
    }

    /// `exec_memory: deny`: no executable memory a program wrote itself.
    pub fn exec_memory_denied(&self) -> bool {
        self.exec_memory_denied
    }

    /// The supervisor judges every file mapped executable: `exec_memory:
    /// deny` (no program image mapped by hand) or `exec_sources: {writable:
    /// deny}` (nothing from a place the tree can write mapped as code).
    pub fn judges_exec_maps(&self) -> bool {
        self.exec_memory_denied || self.exec_sources().writable_denied()
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

    /// `env:` compiled (`None`: the environment is inherited as is).
    pub fn env(&self) -> Option<&agentsh_proto::env::EnvRules> {
        self.env.as_ref()
    }

    /// `credential_files:` (see `credential_files`).
    pub fn credential_files(&self) -> &super::credential_files::CredentialFilesDoc {
        &self.credential_files
    }

    /// `read_only_files:` (see `credential_files`).
    pub fn read_only_files(&self) -> &super::credential_files::ReadOnlyFilesDoc {
        &self.read_only_files
    }

    /// This policy with `rule` added to its file rules (the `carve`
    /// fallback of `credential_files`).
    pub fn with_file_rule(&self, rule: FileRule) -> Policy {
        let mut p = self.clone();
        p.file_rules.push(rule);
        p
    }

    /// `daemon_sockets: {allow, deny}` (the built-in list is in `daemon_sockets`).
    pub fn daemon_sockets(&self) -> &daemon_sockets::DaemonSocketsDoc {
        &self.daemon_sockets
    }

    /// Every entry of every command rule's `commands:`, as written, then
    /// the wrappers known by content whatever the rules name (this
    /// architecture's dynamic loaders, busybox, toybox): for the
    /// supervisor's identity index, which programs to recognise by content.
    pub fn command_entries(&self) -> Vec<String> {
        self.command_rules
            .iter()
            .flat_map(|r| r.commands_text.iter().cloned())
            .chain(wrappers::always_indexed().map(str::to_string))
            .collect()
    }

    /// Extra seccomp blocklist names from `syscalls: { block: [...] }`.
    pub fn blocked_syscalls(&self) -> &[String] {
        &self.blocked_syscalls
    }
}

/// The text of a shipped policy.
pub fn shipped(name: &str) -> Option<&'static str> {
    SHIPPED.iter().find(|(n, _)| *n == name).map(|(_, t)| *t)
}
