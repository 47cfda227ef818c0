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

/// Where the shim for the program at `path` (its own file) execs the real
/// one: `<PROGRAMS_DIR>/<basename>`, a link to `<path>.real`.
pub fn program_link(path: &str) -> String {
    let name = path.rsplit('/').next().unwrap_or(path);
    format!("{PROGRAMS_DIR}/{name}")
}

/// The name a shell shim was called by: argv[0]'s last component, without
/// a login shell's leading `-` (`-bash` is `bash`). What the shim runs
/// (`sh`, `bash`, the admin shell) and what the tracer execs in its place
/// both go by it.
pub fn called_as(argv0: &[u8]) -> &[u8] {
    let base = argv0.rsplit(|b| *b == b'/').next().unwrap_or(argv0);
    base.strip_prefix(b"-").unwrap_or(base)
}

#[cfg(test)]
mod tests {
    use super::{called_as, program_link};

    #[test]
    fn a_programs_link_is_its_basename_in_the_programs_directory() {
        assert_eq!(
            program_link("/usr/bin/python3.11"),
            "/usr/lib/agentsh/programs/python3.11"
        );
        assert_eq!(program_link("node"), "/usr/lib/agentsh/programs/node");
    }

    #[test]
    fn a_shell_is_called_by_its_last_name_without_a_login_dash() {
        assert_eq!(called_as(b"/bin/bash"), b"bash");
        assert_eq!(called_as(b"-bash"), b"bash");
        assert_eq!(called_as(b"/usr/local/bin/-sh"), b"sh");
        assert_eq!(called_as(b"admin-shell"), b"admin-shell");
        assert_eq!(called_as(b""), b"");
        assert_eq!(called_as(b"/"), b"");
    }
}
