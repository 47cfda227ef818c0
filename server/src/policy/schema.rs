//! The policy file as written: serde types that mirror the YAML one to one.
//!
//! Every mapping denies unknown fields, so a misspelt key (`comands:`) is an
//! error with a line number instead of a rule that silently matches nothing.
//! Values are only checked for shape here; `compile` validates their meaning
//! (regexes, globs, duplicates) and builds the matchers.

use serde::de::{self, value::MapAccessDeserializer, value::SeqAccessDeserializer, Visitor};
use serde::{Deserialize, Deserializer, Serialize};
use std::fmt;

pub use super::decision::Decision;

/// The whole file.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct PolicyDoc {
    pub name: Option<String>,
    pub description: Option<String>,
    pub default: Decision,
    /// What a wrapper whose arguments cannot be parsed gets (default deny).
    pub unparsable_wrapper: Option<Decision>,
    pub internal_bypass: Option<Vec<String>>,
    pub command_rules: Option<Vec<CommandRuleDoc>>,
    pub file_rules: Option<Vec<FileRule>>,
    pub network_rules: Option<Vec<NetworkRule>>,
    pub syscalls: Option<SyscallsDoc>,
    pub daemon_sockets: Option<super::daemon_sockets::DaemonSocketsDoc>,
    pub exec_sources: Option<ExecSources>,
    /// `deny`: memory a program writes never becomes code (the seccomp
    /// filter's `exec_memory` rules). Default `allow`.
    pub exec_memory: Option<Decision>,
    /// More multi-call binaries (file names), judged as the applet argv[0]
    /// picks, as busybox and toybox are.
    pub multi_call: Option<Vec<String>>,
    /// `socket()` families allowed (names; see `egress::FAMILIES`).
    pub socket_families: Option<Vec<String>>,
    /// Network policy by destination (see `egress`).
    pub egress: Option<super::egress::EgressDoc>,
    /// What the tree's shell inherits of the environment (see `env`).
    pub env: Option<super::env::EnvDoc>,
    /// Credential stores kept out of reach (see `credential_files`).
    pub credential_files: Option<super::credential_files::CredentialFilesDoc>,
    /// Files kept read-only in every tree (see `credential_files`).
    pub read_only_files: Option<super::credential_files::ReadOnlyFilesDoc>,
    /// What each tree may use (`vocab::limits`).
    pub limits: Option<crate::vocab::LimitsDoc>,
    /// Under the ptrace backend without Landlock (gVisor): whether an open
    /// for reading only stops at the tracer (`judged`, the default) or
    /// runs unseen (`unjudged`: faster; the policy's read rules, the
    /// hidden credential files and the refusal of other processes' `/proc`
    /// links are then not kept for reads).
    pub tracer_reads: Option<TracerReads>,
}

/// `tracer_reads:` (see [`PolicyDoc::tracer_reads`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum TracerReads {
    Judged,
    Unjudged,
}

/// `exec_sources:`: whether files in places the tree can write may run.
#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct ExecSources {
    /// `deny`: nothing beneath a path a file rule lets the tree write or
    /// create in runs (Landlock's execute right is carved out there).
    /// Absent or `allow`: programs run wherever `execute` rules say.
    pub writable: Option<Decision>,
    /// Paths beneath those where programs still run (literal or `/**`,
    /// `${WORKSPACE}`, `${HOME}`): more specific, so they win.
    #[serde(default)]
    pub except: Vec<String>,
}

impl ExecSources {
    /// Whether files the tree can write are kept from running.
    pub fn writable_denied(&self) -> bool {
        self.writable == Some(Decision::Deny)
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct CommandRuleDoc {
    pub name: String,
    pub commands: Vec<String>,
    pub args_patterns: Option<Vec<String>>,
    pub context: Option<ContextDoc>,
    pub decision: Decision,
    pub message: Option<String>,
    pub examples: Option<ExamplesDoc>,
    /// With `decision: redirect`: what runs instead.
    pub redirect_to: Option<RedirectDoc>,
}

/// `redirect_to:` of a command rule.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RedirectDoc {
    /// The program run instead: absolute, root-owned, in directories only
    /// root can write, not a wrapper.
    pub program: String,
}

/// `examples:` of a command rule: command lines (split on whitespace, the
/// first word the program: a name or an absolute path) the rule must
/// decide (`match`: it is the first rule to match them, at the smallest
/// depth it covers) and must not match (`not_match`). Checked when the
/// policy loads (`agentsh policy check`).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ExamplesDoc {
    #[serde(default, rename = "match")]
    pub matches: Vec<String>,
    #[serde(default)]
    pub not_match: Vec<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct SyscallsDoc {
    #[serde(default)]
    pub block: Vec<String>,
}

/// `direct` is depth 0 (the command the SDK asked for), `nested` is depth >= 1.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum DepthKind {
    Direct,
    Nested,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct DepthRangeDoc {
    pub min_depth: Option<u32>,
    pub max_depth: Option<u32>,
}

/// `context:` is either a list of kinds (`[nested]`), a single kind
/// (`nested`), or a depth range (`{min_depth: 2, max_depth: 5}`).
#[derive(Debug)]
pub(crate) enum ContextDoc {
    Kinds(Vec<DepthKind>),
    Range(DepthRangeDoc),
}

impl<'de> Deserialize<'de> for ContextDoc {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct ContextVisitor;
        impl<'de> Visitor<'de> for ContextVisitor {
            type Value = ContextDoc;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("[direct], [nested], [direct, nested], or {min_depth: N, max_depth: M}")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<ContextDoc, E> {
                let kind = DepthKind::deserialize(de::value::StrDeserializer::<E>::new(v))?;
                Ok(ContextDoc::Kinds(vec![kind]))
            }
            fn visit_seq<A: de::SeqAccess<'de>>(self, seq: A) -> Result<ContextDoc, A::Error> {
                Vec::<DepthKind>::deserialize(SeqAccessDeserializer::new(seq))
                    .map(ContextDoc::Kinds)
            }
            fn visit_map<A: de::MapAccess<'de>>(self, map: A) -> Result<ContextDoc, A::Error> {
                DepthRangeDoc::deserialize(MapAccessDeserializer::new(map)).map(ContextDoc::Range)
            }
        }
        deserializer.deserialize_any(ContextVisitor)
    }
}

/// A file operation a `file_rules` entry grants or denies.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FileOperation {
    Read,
    Write,
    Create,
    Delete,
    Execute,
}

/// One `file_rules` entry, validated but not yet compiled to Landlock.
///
/// Paths are absolute, or start with a variable the server expands per
/// session (`${WORKSPACE}`, `${HOME}`, `${TMPDIR}`); `/**` means "and
/// everything below". Only `allow` and `deny` are accepted: the kernel
/// cannot ask a human or audit a single file access.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileRule {
    pub name: String,
    pub paths: Vec<String>,
    pub operations: Vec<FileOperation>,
    pub decision: Decision,
}

/// Which side of a TCP connection a `network_rules` entry is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NetworkDirection {
    Connect,
    Bind,
}

/// The ports of a `network_rules` entry: a list, or `any`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PortSet {
    Any,
    List(Vec<u16>),
}

impl PortSet {
    pub fn contains(&self, port: u16) -> bool {
        match self {
            PortSet::Any => true,
            PortSet::List(ports) => ports.contains(&port),
        }
    }
}

impl<'de> Deserialize<'de> for PortSet {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct PortsVisitor;
        impl<'de> Visitor<'de> for PortsVisitor {
            type Value = PortSet;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a list of TCP ports like [443, 80], or `any`")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<PortSet, E> {
                if v == "any" {
                    Ok(PortSet::Any)
                } else {
                    Err(E::invalid_value(de::Unexpected::Str(v), &self))
                }
            }
            fn visit_seq<A: de::SeqAccess<'de>>(self, seq: A) -> Result<PortSet, A::Error> {
                Vec::<u16>::deserialize(SeqAccessDeserializer::new(seq)).map(PortSet::List)
            }
        }
        deserializer.deserialize_any(PortsVisitor)
    }
}

/// One `network_rules` entry, validated but not yet compiled to Landlock.
///
/// Meaning (as Landlock enforces TCP, see `semantics::tcp_ports`): a
/// direction no rule names is unrestricted; once an `allow` lists ports,
/// only those stay usable (first matching rule per port); `ports: any` with
/// `deny` closes the rest. "Every port but these" is refused at load.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NetworkRule {
    pub name: String,
    pub ports: PortSet,
    pub direction: NetworkDirection,
    pub decision: Decision,
}
