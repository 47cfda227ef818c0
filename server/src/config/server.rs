//! `server.*`: the API's Unix socket (its directory is the run directory)
//! and the optional TCP listener.
//!
//! Failure modes: none here; a socket path or TCP address that cannot work
//! is refused at load (`load`).

use serde::Deserialize;
use std::path::PathBuf;

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ServerSection {
    /// The API's Unix SOCK_SEQPACKET socket; its directory is the run directory.
    pub socket: PathBuf,
    pub http: HttpSection,
}

impl Default for ServerSection {
    fn default() -> Self {
        ServerSection {
            socket: agentsh_proto::shimconf::DEFAULT_SOCKET.into(),
            http: HttpSection::default(),
        }
    }
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct HttpSection {
    /// Empty: no TCP listener.
    pub addr: String,
    /// Serve wrap-init on TCP too (off: only on the Unix socket).
    pub wrap_init: bool,
}
