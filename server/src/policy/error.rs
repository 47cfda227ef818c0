//! Errors of loading a policy: every one names its origin (a file path or
//! `embedded:NAME`) and, where the text is known, the line and column of the
//! offending value, so `agentsh policy check` reads like a compiler.

use std::fmt;
use std::path::PathBuf;

/// A 1-based line and column in a policy file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Location {
    pub line: usize,
    pub column: usize,
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.line, self.column)
    }
}

/// `":LINE:COL"` when known, else nothing: appended to the origin.
fn at(location: Option<&Location>) -> String {
    match location {
        Some(l) => format!(":{l}"),
        None => String::new(),
    }
}

/// Why a policy could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum PolicyError {
    /// The policy file could not be read.
    #[error("{origin}: cannot read the policy file: {source}")]
    Read {
        origin: String,
        #[source]
        source: std::io::Error,
    },
    /// The text is not YAML, or does not fit the schema (unknown field,
    /// wrong type, unknown decision, missing required field).
    #[error("{origin}{}: {message}", at(.location.as_ref()))]
    Syntax {
        origin: String,
        location: Option<Location>,
        message: String,
    },
    /// The YAML fits the schema but a value is invalid (bad regex or glob,
    /// duplicate rule name, empty list, port 0, ...).
    #[error("{origin}{}: {message}", at(.location.as_ref()))]
    Invalid {
        origin: String,
        location: Option<Location>,
        /// The rule the value belongs to, when it belongs to one.
        rule: Option<String>,
        message: String,
    },
    /// A policy asked for by name exists neither in the policies directory
    /// nor among the shipped ones.
    #[error(
        "{origin}: no policy of that name: neither {} exists nor is it a shipped policy ({}); \
         give a path to a .yaml file or one of those names",
        .searched.display(),
        .shipped.join(", ")
    )]
    NotFound {
        origin: String,
        searched: PathBuf,
        shipped: Vec<String>,
    },
    /// A policy name that cannot name a file in the policies directory.
    #[error("{origin}: invalid policy name: {reason}")]
    BadName {
        origin: String,
        #[source]
        reason: PolicyNameError,
    },
}

/// Why a policy name cannot name a file under the policies directory (it
/// doubles as one).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PolicyNameError {
    #[error("the policy name is empty")]
    Empty,
    /// A hidden file, or one read as an option.
    #[error("policy name {0:?} must not start with '.' or '-'")]
    BadStart(String),
    #[error("policy name {0:?} may only use letters, digits, '-', '_' and '.'")]
    BadCharacter(String),
}

impl PolicyError {
    /// Where the policy came from: a path, `embedded:NAME`, or the name asked for.
    pub fn origin(&self) -> &str {
        match self {
            PolicyError::Read { origin, .. }
            | PolicyError::Syntax { origin, .. }
            | PolicyError::Invalid { origin, .. }
            | PolicyError::NotFound { origin, .. }
            | PolicyError::BadName { origin, .. } => origin,
        }
    }

    /// The line and column of the offending text, when known.
    pub fn location(&self) -> Option<Location> {
        match self {
            PolicyError::Syntax { location, .. } | PolicyError::Invalid { location, .. } => {
                *location
            }
            PolicyError::Read { .. }
            | PolicyError::NotFound { .. }
            | PolicyError::BadName { .. } => None,
        }
    }

    /// The 1-based line of the offending text, when known.
    pub fn line(&self) -> Option<usize> {
        self.location().map(|l| l.line)
    }

    /// Turn a serde_yaml_ng error into a `Syntax` error, without repeating
    /// the location inside the message.
    pub(crate) fn from_yaml(origin: &str, err: &serde_yaml_ng::Error) -> PolicyError {
        let location = err.location().map(|l| Location {
            line: l.line(),
            column: l.column(),
        });
        let mut message = err.to_string();
        if let Some(l) = location {
            let suffix = format!(" at line {} column {}", l.line, l.column);
            if let Some(pos) = message.find(&suffix) {
                message.replace_range(pos..pos + suffix.len(), "");
            }
        }
        PolicyError::Syntax {
            origin: origin.to_string(),
            location,
            message,
        }
    }
}
