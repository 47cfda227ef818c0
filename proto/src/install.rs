//! Where the shim installation puts things; shared by the shim and its installer.

/// The real shells' comm-preserving paths live here: `<dir>/sh` -> `/bin/sh.real`.
/// The shim execs `<dir>/<name>`, so `comm` reads `sh`, not `sh.real`.
pub const REAL_SHELL_DIR: &str = "/usr/lib/agentsh/shells";
/// Bytes every agentsh-shell-shim binary carries; the installer refuses a
/// binary without them (so it never installs something else as /bin/sh).
pub const SHIM_MARKER: &[u8] = b"agentsh-shell-shim binary marker v1";
