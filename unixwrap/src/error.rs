//! Why unixwrap did not become the command: one typed error, its exit status
//! and the one line the user sees on stderr.
//!
//! The variants follow the moment of failure, because that decides what the
//! user may do next: before anything was installed the kernel's refusal may be
//! waived (`--on-kernel-refusal exec`); once the filter is loaded every failure
//! is a refusal, since nothing may run unsupervised then.

use std::ffi::c_int;
use std::fmt;
use std::io;
use std::os::fd::RawFd;
use std::path::PathBuf;

use agentsh_proto::exit;
use agentsh_proto::hint::{KERNEL_CANNOT_SUPERVISE, REAL_SHELL_MISSING, UNIXWRAP_REFUSED};

use crate::args;
use crate::handoff::AckError;
use crate::landlock::LandlockError;

/// Why unixwrap returned instead of exec'ing the command.
#[derive(Debug)]
pub enum WrapError {
    /// The command line does not parse.
    Usage(String),
    /// The command is on no `PATH` entry (or is a missing path).
    NotFound {
        /// The command as given.
        cmd: String,
    },
    /// The command exists but is not an executable file.
    NotExecutable {
        /// The command as given.
        cmd: String,
        /// What it resolved to.
        path: PathBuf,
    },
    /// The kernel cannot supervise this command; nothing was installed.
    KernelCannot {
        /// The command as given.
        cmd: String,
        /// What the kernel refused.
        what: KernelRefusal,
    },
    /// unixwrap refuses to run the command (see [`Refusal`]).
    Refused {
        /// The command as given.
        cmd: String,
        /// Why.
        why: Refusal,
    },
    /// `execve` of the command failed.
    Exec {
        /// The command as given.
        cmd: String,
        /// The path that was exec'd.
        path: PathBuf,
        /// The kernel's answer.
        err: io::Error,
    },
}

/// What the kernel refused before anything of ours was installed.
#[derive(Debug)]
pub enum KernelRefusal {
    /// No seccomp user notification (gVisor, an old kernel, an outer filter).
    NoUserNotif(io::Error),
    /// `landlock.compat: required` and the kernel lacks the ABI.
    Landlock(LandlockError),
    /// `PR_SET_NO_NEW_PRIVS` failed.
    NoNewPrivs(io::Error),
    /// `seccomp(SET_MODE_FILTER, NEW_LISTENER)` failed.
    Load(io::Error),
}

/// Why unixwrap refuses to run the command (exit 126).
#[derive(Debug)]
pub enum Refusal {
    /// The environment the shim hands down (the seccomp config, the relay
    /// pid, the loader's variables, the notify socket) is unusable.
    Environment(String),
    /// Already under an agentsh filter; a second one must not be loaded.
    Nested,
    /// A daemon socket path that is not absolute.
    DaemonSocketPath(String),
    /// Hiding the daemon sockets failed.
    Mask(String),
    /// The compiled filter in the config does not decode.
    Program(String),
    /// A seccomp listener already exists in this process's filter chain.
    ListenerExists,
    /// Loading the filter failed for a reason other than the kernel's refusal.
    Load(io::Error),
    /// The filter loaded, but its marker does not answer.
    MarkerSilent,
    /// Sending the notify fd to the relay failed.
    Send {
        /// The socket it was sent on.
        fd: RawFd,
        /// Why.
        err: io::Error,
    },
    /// No accepted ACK: the server did not take the notify fd.
    Ack(AckError),
    /// Landlock could not be applied as the config asks.
    Landlock(LandlockError),
}

impl WrapError {
    /// The exit status: 127 for a command that is not there, 126 otherwise.
    pub fn exit_code(&self) -> c_int {
        match self {
            WrapError::NotFound { .. } => exit::NOT_FOUND,
            WrapError::Exec { err, .. } if err.raw_os_error() == Some(libc::ENOENT) => {
                exit::NOT_FOUND
            }
            _ => exit::REFUSED,
        }
    }

    /// The one line for stderr, naming the troubleshooting section.
    pub fn hint(&self) -> String {
        match self {
            WrapError::Usage(e) => format!(
                "agentsh: agentsh-unixwrap: {e} ({}); see {UNIXWRAP_REFUSED}",
                args::USAGE
            ),
            WrapError::NotFound { cmd } => {
                format!("agentsh-unixwrap: {cmd}: command not found; see {REAL_SHELL_MISSING}")
            }
            WrapError::NotExecutable { cmd, path } => format!(
                "agentsh: {cmd}: permission denied ({} is not an executable file); see {REAL_SHELL_MISSING}",
                path.display()
            ),
            WrapError::KernelCannot { cmd, what } => format!(
                "agentsh: refusing to run {cmd}: the kernel cannot supervise this command ({what}); nothing was installed; see {KERNEL_CANNOT_SUPERVISE}"
            ),
            WrapError::Refused { cmd, why } => {
                format!("agentsh: refusing to run {cmd}: {why}; see {UNIXWRAP_REFUSED}")
            }
            WrapError::Exec { cmd, err, .. } if err.raw_os_error() == Some(libc::ENOENT) => {
                format!("agentsh-unixwrap: {cmd}: {err}; see {REAL_SHELL_MISSING}")
            }
            WrapError::Exec { cmd, path, err } => format!(
                "agentsh: cannot exec {cmd} ({}): {err}; see {REAL_SHELL_MISSING}",
                path.display()
            ),
        }
    }
}

impl fmt::Display for KernelRefusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KernelRefusal::NoUserNotif(e) => write!(f, "no seccomp user notification: {e}"),
            KernelRefusal::Landlock(e) => write!(f, "{e}"),
            KernelRefusal::NoNewPrivs(e) => write!(f, "PR_SET_NO_NEW_PRIVS: {e}"),
            KernelRefusal::Load(e) => write!(f, "seccomp(SET_MODE_FILTER, NEW_LISTENER): {e}"),
        }
    }
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Refusal::Environment(e) | Refusal::Mask(e) => write!(f, "{e}"),
            Refusal::Nested => write!(
                f,
                "already supervised by agentsh (nested unixwrap); a second filter must not be loaded"
            ),
            Refusal::DaemonSocketPath(p) => {
                write!(f, "daemon_sockets or noexec_mounts: {p:?} is not a clean absolute path")
            }
            Refusal::Program(e) => write!(f, "{}: {e}", agentsh_proto::env::SECCOMP_CONFIG),
            Refusal::ListenerExists => write!(
                f,
                "a seccomp listener already exists in this process's filter chain (EBUSY); \
                 a second one must not be loaded"
            ),
            Refusal::Load(e) => write!(f, "loading the seccomp filter: {e}"),
            Refusal::MarkerSilent => {
                write!(f, "the seccomp filter loaded but its marker does not answer")
            }
            Refusal::Send { fd, err } => write!(f, "sending the notify fd on fd {fd}: {err}"),
            Refusal::Ack(e) => write!(f, "{e}"),
            Refusal::Landlock(e) => write!(f, "{e}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(kind: i32) -> io::Error {
        io::Error::from_raw_os_error(kind)
    }

    #[test]
    fn statuses_follow_the_shell() {
        let cmd = || "x".to_string();
        let path = || PathBuf::from("/x");
        let cases: Vec<(WrapError, c_int)> = vec![
            (WrapError::Usage("u".into()), 126),
            (WrapError::NotFound { cmd: cmd() }, 127),
            (
                WrapError::NotExecutable {
                    cmd: cmd(),
                    path: path(),
                },
                126,
            ),
            (
                WrapError::KernelCannot {
                    cmd: cmd(),
                    what: KernelRefusal::Load(err(libc::EINVAL)),
                },
                126,
            ),
            (
                WrapError::Refused {
                    cmd: cmd(),
                    why: Refusal::Nested,
                },
                126,
            ),
            (
                WrapError::Exec {
                    cmd: cmd(),
                    path: path(),
                    err: err(libc::ENOENT),
                },
                127,
            ),
            (
                WrapError::Exec {
                    cmd: cmd(),
                    path: path(),
                    err: err(libc::EACCES),
                },
                126,
            ),
        ];
        for (e, code) in cases {
            assert_eq!(e.exit_code(), code, "{e:?}");
            let h = e.hint();
            assert_eq!(h.lines().count(), 1, "{h}");
            assert!(
                agentsh_proto::hint::ALL.iter().any(|a| h.ends_with(a)),
                "{e:?}: {h}"
            );
        }
    }

    #[test]
    fn a_kernel_refusal_says_nothing_was_installed() {
        let e = WrapError::KernelCannot {
            cmd: "sh".into(),
            what: KernelRefusal::NoUserNotif(err(libc::EINVAL)),
        };
        let h = e.hint();
        assert!(h.contains("no seccomp user notification"), "{h}");
        assert!(h.contains("nothing was installed"), "{h}");
    }
}
