//! `audit.*`: where events are written, how many are kept in memory per
//! session, what an exec gets when its event cannot be written, and the
//! OpenTelemetry export.
//!
//! Failure modes: none here; `on_failure: refuse` is the fail-closed choice
//! (an unaudited exec is denied), `continue` the default.

use serde::Deserialize;
use std::path::PathBuf;

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AuditSection {
    pub jsonl: PathBuf,
    pub memory_events_per_session: usize,
    pub on_failure: AuditOnFailure,
    pub otlp: OtlpSection,
}

impl Default for AuditSection {
    fn default() -> Self {
        AuditSection {
            jsonl: "/var/log/agentsh/audit.jsonl".into(),
            memory_events_per_session: 10_000,
            on_failure: AuditOnFailure::Continue,
            otlp: OtlpSection::default(),
        }
    }
}

/// `audit.otlp`: events exported as OpenTelemetry logs (see `otlp`).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct OtlpSection {
    /// `http://host:port[/path]` of an OTLP/HTTP receiver; empty: off.
    pub endpoint: String,
}

/// What an exec gets when its audit event cannot be written to the file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AuditOnFailure {
    /// It runs; the failure is said on stderr and counted.
    #[default]
    Continue,
    /// It is denied (`audit_unavailable`): an unaudited exec is worse
    /// than a refused one.
    Refuse,
}
