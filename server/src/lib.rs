//! The agentsh server and admin CLI, as a library so tests can drive its parts.
//!
//! Where an exec is decided: `handoff` takes a notify fd from a relay,
//! `supervisor` serves its notifications, `tracee` reads the calling process,
//! `policy` decides (pure), `approval` holds execs for an operator, `audit`
//! records, `api` exposes it all over HTTP on the Unix socket (and TCP for
//! operators), `trees` knows which processes are supervised. Below `api`
//! and `handoff` (so neither imports the other's parts): `transport` (the
//! SEQPACKET sockets) and `limits` (what each peer may hold at once); below
//! `api` and `daemon`: `readiness` (whether the server can supervise shells
//! now, and which).
//!
//! Three products live here, each in a folder: `daemon` (the long-running
//! server's start-up), `cli` (the command line and its tools) and
//! `installer` (`agentsh shim install|uninstall|status`).

pub mod api;
pub mod approval;
pub mod audit;
pub mod cgroup;
pub mod cli;
pub mod config;
pub mod daemon;
pub mod detect;
pub mod dns;
pub mod explain;
pub mod filter;
pub mod handoff;
pub mod hex;
pub mod inotify;
pub mod installer;
pub mod laps;
pub mod limits;
pub mod otlp;
pub mod policy;
pub mod proxy;
pub mod readiness;
pub mod replay;
pub mod session;
pub mod supervisor;
pub mod tracee;
pub mod transport;
pub mod trees;
pub mod vocab;
