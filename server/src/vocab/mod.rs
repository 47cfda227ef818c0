//! Vocabularies shared by rooms that must not import each other: the rule
//! names the mechanism itself writes (`rules`: what the policy engine, the
//! supervisor's families, the DNS stub, the proxy and the audit trail all
//! name the same way) and the `limits:` document with its units (`limits`:
//! what a policy, the config and the cgroup room read and apply). At the
//! bottom of the house with `hex`: it imports no room of the crate, so any
//! room may use it.
//!
//! Failure modes: none at run time; a `limits:` value that cannot be parsed
//! is an error that names the key and the value.

pub mod duration;
pub mod limits;
pub mod rules;

pub use duration::parse_duration;
pub use limits::{merge as merge_limits, Limits, LimitsCompat, LimitsDoc, LimitsError};
pub use rules::{Builtin, DocRow, Passage, Refusal};
