//! Diagnostics: one line per event on `AGENTSH_WRAPPER_LOG_FD`, or nowhere.
//!
//! unixwrap runs in place of the user's shell, so its stdout and stderr are
//! the command's: diagnostics must never land there (the single refusal hint
//! on stderr is the one exception, and it is written by `run`, not here).
//!
//! Failure modes: an unusable log fd (unset, 0-2, closed) silently disables
//! logging; a write error drops the line. The fd is marked close-on-exec so
//! the user's command never inherits it. SIGPIPE is ignored while unixwrap runs
//! (see `signals`), so a log reader that went away cannot kill the wrapper.

use std::fmt;
use std::os::fd::RawFd;

/// Where diagnostics go.
#[derive(Debug, Clone, Copy)]
pub struct Log {
    fd: Option<RawFd>,
}

impl Log {
    /// A log that drops every line.
    pub const fn none() -> Log {
        Log { fd: None }
    }

    /// Opens the log on the fd named by `value` (the value of
    /// `AGENTSH_WRAPPER_LOG_FD`), if it is a usable fd above 2.
    pub fn from_env_value(value: Option<&std::ffi::OsStr>) -> Log {
        let Some(fd) = value
            .and_then(|v| v.to_str())
            .and_then(|s| s.parse::<RawFd>().ok())
            .filter(|fd| *fd > 2)
        else {
            return Log::none();
        };
        // SAFETY: F_GETFD/F_SETFD only read and set the fd's close-on-exec flag;
        // an fd that is not open makes F_GETFD fail with EBADF.
        let ok = unsafe {
            let flags = libc::fcntl(fd, libc::F_GETFD);
            flags >= 0 && libc::fcntl(fd, libc::F_SETFD, flags | libc::FD_CLOEXEC) == 0
        };
        Log {
            fd: if ok { Some(fd) } else { None },
        }
    }

    /// Writes one line `agentsh-unixwrap: <msg>`; embedded newlines become spaces.
    pub fn line(&self, args: fmt::Arguments<'_>) {
        let Some(fd) = self.fd else { return };
        let mut s = format!("agentsh-unixwrap: {args}");
        s = s.replace(['\n', '\r'], " ");
        s.push('\n');
        write_all(fd, s.as_bytes());
    }
}

fn write_all(fd: RawFd, mut buf: &[u8]) {
    while !buf.is_empty() {
        // SAFETY: the pointer and length describe a live slice.
        let n = unsafe { libc::write(fd, buf.as_ptr().cast(), buf.len()) };
        if n < 0 {
            if std::io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) {
                continue;
            }
            return;
        }
        if n == 0 {
            return;
        }
        buf = &buf[n as usize..];
    }
}

/// `log!(log, "fmt", args...)`: one diagnostic line.
#[macro_export]
macro_rules! log {
    ($log:expr, $($arg:tt)*) => {
        $log.line(format_args!($($arg)*))
    };
}

/// Writes the one-line refusal hint on stderr (the only thing unixwrap ever
/// prints there). Newlines in `msg` become spaces.
pub fn stderr_hint(msg: &str) {
    let mut s = msg.replace(['\n', '\r'], " ");
    s.push('\n');
    write_all(2, s.as_bytes());
}
