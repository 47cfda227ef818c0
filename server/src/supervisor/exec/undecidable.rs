//! Why an exec cannot be judged: the refusal gathering (and what it calls)
//! hands back instead of facts, answered EACCES and audited with its rule
//! and reason by `handle`.
//!
//! Failure modes: none; a type.

use crate::vocab::Refusal;

/// Why the exec cannot be judged: deny and audit with this rule and reason.
pub(super) struct Undecidable {
    pub(super) rule: Refusal,
    pub(super) reason: String,
}

pub(super) fn undecidable(rule: Refusal, reason: String) -> Undecidable {
    Undecidable { rule, reason }
}
