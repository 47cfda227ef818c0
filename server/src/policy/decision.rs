//! The one word every rule ends in: allow, deny, approve or audit (and, for
//! a command rule only, redirect).
//!
//! Its own room so that the policy file's types (`schema`) and the network
//! rules (`egress`) share it without importing each other.

use serde::{Deserialize, Serialize};
use std::fmt;

/// What the policy says about an exec (or a file access, or a port).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Decision {
    Allow,
    Deny,
    /// Ask a human; the supervisor maps it (a timeout is a deny).
    Approve,
    /// Allow, and mark the audit event as worth a look.
    Audit,
    /// Command rules only: run the rule's `redirect_to` program instead,
    /// with the same argv, in the same process.
    Redirect,
}

impl Decision {
    /// Rank for "the stricter result stands": deny > approve > redirect >
    /// audit > allow.
    pub fn strictness(self) -> u8 {
        match self {
            Decision::Allow => 0,
            Decision::Audit => 1,
            Decision::Redirect => 2,
            Decision::Approve => 3,
            Decision::Deny => 4,
        }
    }

    /// The stricter of two decisions (`self` on a tie).
    pub fn stricter(self, other: Decision) -> Decision {
        if other.strictness() > self.strictness() {
            other
        } else {
            self
        }
    }

    /// The YAML spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Decision::Allow => "allow",
            Decision::Deny => "deny",
            Decision::Approve => "approve",
            Decision::Audit => "audit",
            Decision::Redirect => "redirect",
        }
    }
}

impl fmt::Display for Decision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}
