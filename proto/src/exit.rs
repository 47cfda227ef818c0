//! Exit statuses the shim, unixwrap and `agentsh run` share, as a shell would use them.

/// Refused to run (the one-line hint is on stderr), or found but not executable.
pub const REFUSED: i32 = 126;
/// The command (or the real shell) is not there.
pub const NOT_FOUND: i32 = 127;
