//! Approvals: a call under a `decision: approve` rule (an exec, a connect or
//! send) waits for an operator.
//!
//! The supervisor's tree thread never waits for a human. It hands the held
//! call (`supervisor::Held`, whichever family held it) to the `Hold` seam,
//! which registers a pending request and starts one waiter thread for it;
//! the tree thread goes back to serving the rest of the tree. The waiter
//! waits for an operator's decision, the timeout
//! (`execve.approval_timeout_action`, deny by default) or the caller going
//! away (`cancelled`), then hands the end to the family that held the call
//! (`Held::settle`), which audits it (exactly one event per outcome) and
//! answers the call its own way (a syscall through its backend, an HTTP
//! request through the proxy). Of the held call this module knows only its
//! id and whether it still waits (`supervisor::Waiting`): no family, no
//! syscall, one waiter, one way to settle.
//!
//! Who may decide: the operator (see the `api` module: uid 0 on the Unix
//! socket, the root-only token on TCP) *and* not a process of a supervised
//! tree. The second check covers a tree running as root, which could read
//! the token file unless Landlock hides it: a TCP peer's socket is mapped to
//! its owning processes through `/proc/net/tcp{,6}` and `/proc/<pid>/fd`, and
//! each owner (like a Unix peer) is refused if it is inside a tree
//! (`trees::Trees::in_tree_or_filtered`). See docs/approvals.md for what this
//! does not cover.
//!
//! Failure modes: a waiter that cannot answer (tracee gone) records
//! `cancelled`; a decision whose requester cannot be identified is refused.
//!
//! The rooms: `pending` (the table of requests the API lists and decides),
//! `hold` (a held call becomes a request, or joins or repeats one), `waiter`
//! (one thread per request until its end), `request` (a request as the API
//! lists it), `peer` (who sent a decision), `token` (the operator's TCP
//! token).

mod hold;
mod peer;
mod pending;
mod request;
mod token;
mod waiter;

/// How a request ended (the audit's enum).
pub use crate::audit::ApprovalOutcome as Outcome;
pub use peer::Requester;
pub use pending::{Approvals, DecideError};
pub use request::{ApprovalDestination, ApprovalRequest};
pub use token::{create_token_file, TOKEN_FILE};

#[cfg(test)]
mod tests;
