//! The audit trail: one JSON event per decided exec, destination, DNS query,
//! wrap-init, signal and session change.
//!
//! Sinks: an append-only JSON Lines file, journald (through tracing-journald,
//! when the journal socket exists) and an in-memory window per session served
//! by the API. Audit never writes into a command's stdout or stderr. Rooms:
//! `event` (what an event holds), `log` (the sinks), `chain` (the hash
//! chain), `time` (timestamps). The rule names the mechanism itself writes
//! live below, in `vocab::rules`, shared with the policy engine.
//!
//! Failure modes: if the JSONL file cannot be written the event still reaches
//! the other sinks and the failure is logged; the exec decision itself does not
//! change (the decision was made; refusing to record it would not undo it).

mod chain;
mod event;
mod log;
mod time;

pub use chain::{verify as verify_chain, Break, Verified};
pub use event::*;
pub use log::{AuditLog, Owed};
pub use time::{rfc3339_at, rfc3339_now};

#[cfg(test)]
mod event_json;
#[cfg(test)]
mod tests;
