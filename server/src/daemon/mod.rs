//! `agentsh server`: start-up and the long-running daemon.
//!
//! Start-up order matters: signals are blocked before any thread exists;
//! the config, policy, audit log and token are loaded (any failure stops the
//! server with a message); the run directory is checked; the API socket is
//! bound (only once the identity index, built on its own thread from the
//! moment the policy is loaded, is ready: the first exec must not wait for
//! it); the `active` marker is written only then (a server that cannot
//! serve must not make `auto` shims refuse); the unsupervised runs the root
//! shims recorded before agentsh started become audit events; then the API
//! is served until a stop signal from outside every tree.
//!
//! Rooms: `start` (the sequence, [`run`]), `load` (config, policies, audit
//! log, token), `host` (what the host offers and what follows), `warm`
//! (caches made before `ready`), `serve` (listeners, marker, rehearsal,
//! command, serving), `error` ([`StartError`]); and what runs beside the
//! API: `command` (`-- CMD` below the server), `reaper`, `rehearsal`,
//! `rundir`, `signals`.
//!
//! Failure modes: a start-up failure is a [`StartError`] and the server
//! exits before binding; after that, the rooms say theirs.

pub mod command;
mod error;
mod host;
mod load;
pub mod outsiders;
pub mod reaper;
pub mod rehearsal;
pub mod rundir;
mod serve;
pub mod signals;
mod start;
mod warm;

pub use error::StartError;
pub use start::{run, Start};
