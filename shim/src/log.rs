//! The shim's diagnostics: never the command's stdout/stderr.
//!
//! Sinks, both used when both are available:
//! * journald, through its native datagram socket (`MESSAGE=`, `PRIORITY=`,
//!   `SYSLOG_IDENTIFIER=` lines; no crate needed);
//! * the fd named by `AGENTSH_WRAPPER_LOG_FD`, which unixwrap writes to as well.
//!
//! Neither present: the message is dropped. Logging never fails the shim.

use std::os::unix::net::UnixDatagram;

const JOURNAL_SOCKET: &str = "/run/systemd/journal/socket";
pub const IDENTIFIER: &str = "agentsh-shell-shim";

/// syslog priorities used by the shim.
#[derive(Debug, Clone, Copy)]
pub enum Priority {
    Warning = 4,
    Info = 6,
}

/// Writes one line to every available sink.
pub fn log(priority: Priority, message: &str) {
    // One line per record: journald's simple format ends a field at '\n'.
    let line: String = message
        .chars()
        .map(|c| if c == '\n' { ' ' } else { c })
        .collect();
    to_journal(priority, &line);
    to_log_fd(&line);
}

fn to_journal(priority: Priority, line: &str) {
    if std::fs::symlink_metadata(JOURNAL_SOCKET).is_err() {
        return;
    }
    let Ok(sock) = UnixDatagram::unbound() else {
        return;
    };
    let record = format!(
        "MESSAGE={line}\nPRIORITY={}\nSYSLOG_IDENTIFIER={IDENTIFIER}\nSYSLOG_PID={}\n",
        priority as u8,
        std::process::id()
    );
    let _ = sock.send_to(record.as_bytes(), JOURNAL_SOCKET);
}

fn to_log_fd(line: &str) {
    let Some(fd) = log_fd() else { return };
    let record = format!("{IDENTIFIER}[{}]: {line}\n", std::process::id());
    // SAFETY: write(2) on a caller-provided fd number with a valid buffer; a
    // wrong or closed fd only yields EBADF, which is ignored.
    unsafe {
        libc::write(fd, record.as_ptr().cast(), record.len());
    }
}

/// The fd number in `AGENTSH_WRAPPER_LOG_FD`, if it is a number above 2
/// (0-2 are the command's own streams).
pub fn log_fd() -> Option<i32> {
    let v = std::env::var_os(agentsh_proto::env::WRAPPER_LOG_FD)?;
    parse_log_fd(v.to_str()?)
}

fn parse_log_fd(v: &str) -> Option<i32> {
    v.parse::<i32>().ok().filter(|&fd| fd > 2)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_fd_never_targets_the_commands_streams() {
        assert_eq!(parse_log_fd("7"), Some(7));
        for v in ["0", "1", "2", "-1", "x", ""] {
            assert_eq!(parse_log_fd(v), None, "{v}");
        }
    }
}
