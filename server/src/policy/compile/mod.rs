//! From the parsed document to a `Policy`: validate every value and compile
//! the matchers (globs, regexes) once, so evaluation is only matching.
//!
//! One room per part of the document: `document` (the whole, section by
//! section, and its top-level values), `commands` (command rules),
//! `examples` (their `examples:`), `redirect` (a redirect's target),
//! `files` (file rules and `exec_sources`), `network` (network rules),
//! `egress` (`egress:` and `socket_families:`); `context` holds what they
//! share: where an error points and how a rule's error reads.
//!
//! Failure modes: every check that can fail names the rule and, via
//! `locate`, points at the line of the offending value. The first error
//! found is reported.

mod commands;
mod context;
mod document;
mod egress;
mod examples;
mod files;
mod network;
mod redirect;

pub(crate) use commands::{first_match, CommandRule, DepthRange};
pub(crate) use context::{RULE_DEFAULT, RULE_INTERNAL_BYPASS, RULE_UNPARSABLE_WRAPPER};
pub(crate) use document::{check_policy_name, compile};
pub use files::FILE_PATH_VARIABLES;

#[cfg(test)]
mod tests;
