//! Landlock: the filesystem, TCP and scope restrictions from `seccomp_config.landlock`.
//!
//! Landlock is the hard floor under the argv policy (a tracee can rewrite its
//! argv after the supervisor read it; it cannot widen its Landlock domain).
//!
//! The rooms, in the order a ruleset goes through them:
//!
//! * `rights`: which Landlock rights each `FsAccess` handles and grants;
//! * `plan`: what the ruleset asks of the kernel once `landlock.max_abi` is
//!   applied, and whether a `required` ruleset can be enforced here;
//! * `rule_path`: a path rule's file opened without following a symlink;
//! * `ruleset`: the ruleset built (handled rights, path and port rules) and
//!   enforced;
//! * `report`: what is enforced now, and the log line that says it;
//! * `error`: why Landlock was not applied as the config asks.
//!
//! Applied after the ACK and after the relay is reaped: unixwrap may have to
//! SIGKILL a stuck relay, which a signal-scoped domain would forbid (the relay
//! is outside the domain). Nothing unixwrap does afterwards (close, execve)
//! needs more than the command needs.
//!
//! Failure modes: a rule path that does not exist or cannot be opened is
//! skipped with a log line (skipping only removes access); any ruleset error
//! is returned, and the caller refuses to run (the filter is already loaded).

mod error;
mod plan;
mod report;
mod rights;
mod rule_path;
mod ruleset;
#[cfg(test)]
pub(crate) mod tests;

pub use agentsh_proto::wire::kernel_landlock_abi as kernel_abi;
pub use error::LandlockError;
pub use plan::precheck;
pub(crate) use plan::{abi_of, Plan};
pub(crate) use report::handled;
pub use report::{Enforcement, Report};
pub use rights::{granted_rights, handled_rights};
pub use ruleset::apply;
pub(crate) use ruleset::build;
