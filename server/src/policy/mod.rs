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
//! host without `/etc/agentsh/policies/`; a file of the same name there wins
//! (`loaded`). What `agentsh policy check` prints is `check`'s.

mod check;
mod compile;
pub mod credential_files;
pub mod daemon_sockets;
mod decision;
pub mod egress;
pub mod env;
mod error;
pub mod http;
pub mod http_loose;
mod judge;
pub mod landlock;
mod loaded;
mod locate;
pub mod nested_git;
mod pattern;
mod schema;
pub mod semantics;
mod stamp;
pub mod unix_listeners;
pub(crate) mod wrappers;

#[cfg(test)]
mod tests;

pub use check::check_file;
pub use compile::FILE_PATH_VARIABLES;
pub(crate) use compile::RULE_DEFAULT;
pub use error::{Location, PolicyError, PolicyNameError};
pub use judge::{
    evaluate, judge, ExecFacts, Interpreter, ProgramFacts, Truncation, Verdict, RULE_FILELESS_EXEC,
    RULE_TRUNCATED,
};
pub use loaded::{shipped, Policy, SHIPPED};
pub use schema::{
    Decision, ExecSources, FileOperation, FileRule, NetworkDirection, NetworkRule, PortSet,
};
