//! Where the shim installation puts things; shared by the shim and its installer.

macro_rules! real_shell_dir {
    () => {
        "/usr/lib/agentsh/shells"
    };
}

/// The real shells' comm-preserving paths live here: `<dir>/sh` -> `/bin/sh.real`.
/// The shim execs `<dir>/<name>`, so `comm` reads `sh`, not `sh.real`.
pub const REAL_SHELL_DIR: &str = real_shell_dir!();
/// What the installer did, so `agentsh shim uninstall` can undo exactly that.
pub const MANIFEST: &str = concat!(real_shell_dir!(), "/.install-manifest");
/// Where the shim execs the real `sh`.
pub const REAL_SH: &str = concat!(real_shell_dir!(), "/sh");
/// Where the shim execs the real `bash`.
pub const REAL_BASH: &str = concat!(real_shell_dir!(), "/bash");
/// The programs the shim stands in for (`agentsh shim install --programs`):
/// `<dir>/<name>` -> `<path>.real`, where `<path>` is the program's own
/// file (every symlink to it followed) and `<name>` its basename. The shim
/// installed at `<path>` execs `<dir>/<name>`, so `comm` reads `<name>`.
pub const PROGRAMS_DIR: &str = "/usr/lib/agentsh/programs";
/// Bytes every agentsh-shell-shim binary carries; the installer refuses a
/// binary without them (so it never installs something else as /bin/sh).
pub const SHIM_MARKER: &[u8] = b"agentsh-shell-shim binary marker v1";
