//! The `agentsh` command line: the server (`agentsh server`, see `daemon`)
//! and the admin tools. One file per tool family: `approvals`, `lifecycle`
//! (`ready`, `entrypoint`), `probe` (is a shell started here supervised?), `events`, `policy_tools` (`policy test` and
//! `generate`), `session`, `wrap`, `client` (how every tool talks to the
//! server); `installer` (`agentsh shim ...`) has its own folder. The
//! command line itself: `command` (the subcommands, as clap parses them),
//! `dispatch` (`main`, and one small function per subcommand it dispatches
//! to), `man` (the man pages).
//!
//! Failure modes: every tool prints one line `agentsh: <what failed>` (its
//! module's error, as text) and exits non-zero (2 for bad input where the
//! tool says so); nothing here decides anything about a supervised tree.

pub mod approvals;
pub mod client;
mod command;
mod dispatch;
mod events;
pub mod lifecycle;
mod man;
mod policy_tools;
mod probe;
mod session;
pub(crate) mod wrap;

pub use dispatch::main;
