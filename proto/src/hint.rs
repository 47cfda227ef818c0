//! Where a refusal sends its reader: the sections of `docs/troubleshooting.md`.
//!
//! One list, so the shim and unixwrap cite the same anchors; a test checks that
//! every one names a section that exists.

/// `shim.conf` is not root-owned or is writable by others, so it is ignored.
pub const SHIMCONF_IGNORED: &str = "docs/troubleshooting.md#shimconf-is-ignored";
/// `shim.conf` does not parse.
pub const SHIMCONF_INVALID: &str = "docs/troubleshooting.md#shimconf-is-not-valid";
/// The shim could not install supervision and its mode forbids running without it.
pub const REFUSES_UNSUPERVISED: &str = "docs/troubleshooting.md#refuses-to-run-unsupervised";
/// The "real shell" the shim would exec is the shim itself.
pub const REAL_SHELL_IS_SHIM: &str = "docs/troubleshooting.md#the-real-shell-is-this-shim-itself";
/// The real shell (or the command unixwrap runs) is missing or cannot run.
pub const REAL_SHELL_MISSING: &str =
    "docs/troubleshooting.md#the-real-shell-is-missing-or-cannot-run";
/// unixwrap refused its arguments, environment or handoff.
pub const UNIXWRAP_REFUSED: &str = "docs/troubleshooting.md#unixwrap-refused-to-run-the-command";
/// The kernel refused the filter or Landlock (nothing was installed).
pub const KERNEL_CANNOT_SUPERVISE: &str =
    "docs/troubleshooting.md#the-kernel-cannot-supervise-this-command";

/// The server cannot read this shell's processes (no `CAP_SYS_PTRACE`, and
/// the shell does not descend from it, or ptrace access is refused).
pub const SERVER_CANNOT_READ: &str = "docs/troubleshooting.md#the-server-cannot-read-this-shell";

/// `admin-shell` was run inside a supervised tree, or cannot mark its session.
pub const ADMIN_SHELL_IN_TREE: &str = "docs/troubleshooting.md#the-admin-shell-refuses";

/// The policy's egress cannot be enforced on this host and
/// `egress.compat` is `required`.
pub const EGRESS_NOT_ENFORCEABLE: &str = "docs/troubleshooting.md#egress-cannot-be-enforced-here";

/// The session a shell asked for (shim.conf `session=`, `AGENTSH_SESSION`)
/// does not exist on the server, or has ended.
pub const SESSION_NOT_OPEN: &str =
    "docs/troubleshooting.md#the-session-does-not-exist-or-has-ended";

/// Every section above, for the test that checks them.
pub const ALL: &[&str] = &[
    SESSION_NOT_OPEN,
    SHIMCONF_IGNORED,
    SHIMCONF_INVALID,
    REFUSES_UNSUPERVISED,
    REAL_SHELL_IS_SHIM,
    REAL_SHELL_MISSING,
    UNIXWRAP_REFUSED,
    KERNEL_CANNOT_SUPERVISE,
    SERVER_CANNOT_READ,
    ADMIN_SHELL_IN_TREE,
    EGRESS_NOT_ENFORCEABLE,
];
