//! Server configuration: YAML, every key optional, defaults embedded.
//!
//! A config that cannot be read or parsed is an error at start-up (the server
//! does not run on a guess). Unknown keys are errors too: a misspelt limit
//! must not silently fall back to a default. At server start,
//! [`Config::check_own_locations`] also refuses agentsh's own files (state,
//! audit log, config, policies, binaries) in a world-writable directory such
//! as `/tmp`: protecting them there would take create rights on that
//! directory away from every supervised tree.
//!
//! The rooms: `document` (the top-level keys, a session's), a room per
//! section (`server`, `audit`, `execve`, `landlock`, `egress`, `secrets`),
//! `help` (the embedded defaults and the help text), `load` (a config read,
//! parsed and checked), `locations` (agentsh's own files kept out of shared
//! directories), `error` (why a config is refused).

mod audit;
mod document;
mod egress;
mod error;
mod execve;
mod help;
mod landlock;
mod load;
mod locations;
pub mod secrets;
mod server;

pub use audit::{AuditOnFailure, AuditSection, OtlpSection};
pub use document::{Config, SessionSection, CA_KEY_FILE};
pub use egress::{nameservers, EgressCompat, EgressSection};
pub use error::{ConfigError, EgressAddrError, Invalid, SharedLocation};
pub use execve::{
    BackendChoice, ExecWatch, ExecveSection, Explain, OnTruncated, RaceGuard, TimeoutAction,
};
pub use help::{CONFIG_HELP, EMBEDDED_CONFIG};
pub use landlock::LandlockSection;
pub use load::{config_file, take_for_config, DEFAULT_CONFIG_FILE};
pub use server::{HttpSection, ServerSection};
