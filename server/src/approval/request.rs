//! A pending approval as the API lists it (`GET /api/v1/approvals`) and
//! `agentsh approvals` prints it: what waits, for whom, until when.
//!
//! Failure modes: none; these are plain values.

use serde::Serialize;

/// One exec held for an operator, as the API lists it.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct ApprovalRequest {
    pub id: String,
    /// `exec`, or `connect` (a destination: `destination` says which).
    pub kind: &'static str,
    /// Increases with every new request (for `?after=`).
    pub seq: u64,
    pub session_id: String,
    pub pid: u32,
    pub depth: u32,
    pub filename: String,
    pub argv: Vec<String>,
    /// The file the operator approves (device, inode): what runs must be it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub file: Option<crate::audit::FileIdentity>,
    pub rule: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    pub waiting_since: String,
    pub expires_at: String,
    /// What a held connect or send would reach.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub destination: Option<ApprovalDestination>,
}

/// The destination of a held connect, as the API lists it.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct ApprovalDestination {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    pub ip: String,
    pub port: u16,
    pub protocol: String,
}
