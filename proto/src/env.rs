//! Names of the environment variables agentsh reads.
//!
//! None of them can weaken enforcement: the mode variable may only make the
//! shim stricter, and the wrapper variables are set by the shim for unixwrap and
//! removed by unixwrap before the user's command runs.

/// Set by the shim for unixwrap: the number of the SOCK_SEQPACKET end to send the notify fd on.
pub const NOTIFY_SOCK_FD: &str = "AGENTSH_NOTIFY_SOCK_FD";
/// Set by the shim for unixwrap: the JSON [`crate::SeccompConfig`].
pub const SECCOMP_CONFIG: &str = "AGENTSH_SECCOMP_CONFIG";
/// Optional: an fd number unixwrap and the shim write their diagnostics to.
pub const WRAPPER_LOG_FD: &str = "AGENTSH_WRAPPER_LOG_FD";
/// Optional, set by the shim for unixwrap: the pid of the relay helper (a child
/// of the process that becomes unixwrap), which unixwrap reaps after the ACK so
/// the user's shell inherits no zombie.
pub const RELAY_PID: &str = "AGENTSH_RELAY_PID";
/// Read by the shim: `off`, `auto` or `on`. Can only make the mode stricter than shim.conf.
pub const SHIM_INSTALL: &str = "AGENTSH_SHIM_INSTALL";
/// Set by the server for unixwrap: the session the tree belongs to.
pub const SESSION_ID: &str = "AGENTSH_SESSION_ID";
/// Prefix of every variable agentsh owns; unixwrap strips them before exec.
pub const PREFIX: &str = "AGENTSH_";
