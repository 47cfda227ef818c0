//! `execve.*`: how a tree's execs reach the supervisor and are held: the
//! backend, the race guard and which execs are watched, the argv limits,
//! approvals' timeout, and whether a refused caller is told why.
//!
//! Failure modes: a duration that does not parse is a parse error naming
//! the forms taken; zero limits and a timeout of zero or over a day are
//! refused at load (`load`).

use crate::vocab::parse_duration;
use serde::Deserialize;

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ExecveSection {
    pub backend: BackendChoice,
    pub race_guard: RaceGuard,
    pub watch: ExecWatch,
    pub max_argc: usize,
    pub max_argv_bytes: usize,
    pub on_truncated: OnTruncated,
    #[serde(deserialize_with = "deserialize_duration")]
    pub approval_timeout: std::time::Duration,
    pub approval_timeout_action: TimeoutAction,
    pub explain: Explain,
}

impl Default for ExecveSection {
    fn default() -> Self {
        ExecveSection {
            backend: BackendChoice::Auto,
            race_guard: RaceGuard::Verify,
            watch: ExecWatch::Shared,
            max_argc: 131_072,
            max_argv_bytes: 2_097_152,
            on_truncated: OnTruncated::Deny,
            approval_timeout: std::time::Duration::from_secs(10),
            approval_timeout_action: TimeoutAction::Deny,
            explain: Explain::Stderr,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OnTruncated {
    /// Deny any exec whose argv could not be read whole.
    Deny,
    /// Judge the exec on the part that was read (audited as truncated).
    Evaluate,
}

/// What an approval nobody answered in time gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TimeoutAction {
    Deny,
    Allow,
}

/// `execve.backend`: how a tree's execs reach the supervisor.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BackendChoice {
    /// notify where the kernel has seccomp user-notify, else ptrace.
    Auto,
    Notify,
    Ptrace,
}

impl BackendChoice {
    /// The one backend chosen (`None`: `auto`, the first the host offers).
    pub fn only(self) -> Option<agentsh_proto::ExecBackend> {
        match self {
            BackendChoice::Auto => None,
            BackendChoice::Notify => Some(agentsh_proto::ExecBackend::Notify),
            BackendChoice::Ptrace => Some(agentsh_proto::ExecBackend::Ptrace),
        }
    }
}

/// `execve.race_guard`: what makes an exec hold when other tasks share the
/// caller's memory (see `docs/security-model.md`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RaceGuard {
    /// Watch the exec and check the new image (file and argv) at
    /// `PTRACE_EVENT_EXEC`, before its first instruction.
    Verify,
    /// The same, and stop every task sharing the memory while the exec is
    /// read and runs.
    Freeze,
}

/// `execve.watch`: which allowed execs the notify backend watches to their
/// new image (see `docs/security-model.md`, "Command rules: what holds").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ExecWatch {
    /// Those whose caller shares its memory with tasks it can find (its
    /// threads, its vfork parents and their threads), and those whose
    /// lookups the tree can change.
    Shared,
    /// Every one (the ptrace backend checks every exec anyway).
    Every,
}

/// `execve.explain`: whether a refused exec's caller is told why.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Explain {
    /// One line on the caller's stderr, where it takes it without waiting.
    Stderr,
    Off,
}

/// A duration as a number of seconds or a text such as "10s" (`vocab`'s
/// `parse_duration`).
fn deserialize_duration<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<std::time::Duration, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Raw {
        Number(f64),
        Text(String),
    }
    let bad = || {
        serde::de::Error::custom(
            "expected a duration such as \"10s\", \"500ms\", \"2m\" or a number of seconds",
        )
    };
    match Raw::deserialize(d)? {
        Raw::Number(n) => std::time::Duration::try_from_secs_f64(n).map_err(|_| bad()),
        Raw::Text(t) => parse_duration(&t).ok_or_else(bad),
    }
}
