//! Telling a refused caller why (`execve.explain: stderr`): before the
//! refusal is answered, one line of at most [`MAX`] bytes on the caller's
//! own stderr, e.g. `agentsh: curl denied (rule deny-network-tools):
//! network tools are not allowed`, or for a network call `agentsh: connect
//! to 203.0.113.9 port 443/tcp denied (rule default): no egress rule allows
//! it`, so an agent reads a reason instead of a bare "Permission denied"
//! and stops retrying. A call held for an operator says so first.
//!
//! The caller's fd 2 is taken with `pidfd_getfd` (the same open file), or,
//! where that is refused (Docker's default profile, gVisor), opened again
//! through `/proc/<tid>/fd/2` with the caller's owner's ids, when it is a
//! pipe, a terminal or a regular file (appended to: never written over),
//! and checked to be the file `/proc` showed before the open. It is written
//! only if `poll` says it takes data now: a full pipe nobody reads gets
//! nothing and the refusal is answered at once. Names from the tree are
//! escaped (no control bytes reach a terminal). A stderr that is neither
//! (a socket, a device) is not written: the event's `explained` says false.
//!
//! What this does not watch: what the caller does with its stderr (it may
//! be `/dev/null`, or a file the agent never reads).

use std::io::Write;
use std::os::fd::AsRawFd;

/// The most bytes one explanation takes.
/// 1024: room for a deep path named twice (the call's and the directory a
/// right is missing in) and the rule's reason; one write below `PIPE_BUF`,
/// so a line is never interleaved with another writer's on a pipe.
pub const MAX: usize = 1024;

/// Which (thread, what) refusals a caller was told of: each is told once,
/// not at every retry. Bounded (started over past [`Told::CAP`] entries:
/// a thread may then be told again).
#[derive(Debug)]
pub struct Told<K>(std::collections::HashSet<(u32, K)>);

impl<K> Default for Told<K> {
    fn default() -> Self {
        Told(std::collections::HashSet::new())
    }
}

impl<K: std::hash::Hash + Eq> Told<K> {
    const CAP: usize = 4096;

    /// Whether thread `tid` is to be told of `what` now (the first time);
    /// remembered.
    pub fn first(&mut self, tid: u32, what: K) -> bool {
        if self.0.len() >= Self::CAP {
            self.0.clear();
        }
        self.0.insert((tid, what))
    }
}

/// The line for a refused exec of `argv0` (what the caller named), `rule`,
/// `message`: escaped, at most [`MAX`] bytes with its newline. Pure.
pub fn line(argv0: &str, rule: &str, message: Option<&str>) -> String {
    let name = escape(argv0.rsplit('/').next().unwrap_or(argv0));
    let mut s = format!("agentsh: {name} denied (rule {})", escape(rule));
    if let Some(m) = message.filter(|m| !m.is_empty()) {
        s.push_str(": ");
        s.push_str(&escape(m));
    }
    bounded(s)
}

/// The line while an exec waits for an operator: the approval's id (what
/// `agentsh approvals approve|deny` take), the command, how long it may
/// wait. Escaped and bounded like [`line`]. Pure.
pub fn waiting(id: &str, argv: &[String], timeout: std::time::Duration) -> String {
    let mut cmd = escape(&argv.join(" "));
    if cmd.len() > 120 {
        let mut cut = 120;
        while !cmd.is_char_boundary(cut) {
            cut -= 1;
        }
        cmd.truncate(cut);
        cmd.push('…');
    }
    waiting_for(id, &format!("\"{cmd}\""), timeout)
}

/// The line while a network call waits for an operator: the approval's
/// id, where the call goes (`connect to api.example.com (203.0.113.9) port
/// 443/tcp`), how long it may wait. Pure.
pub fn waiting_destination(
    id: &str,
    dest: &Destination<'_>,
    timeout: std::time::Duration,
) -> String {
    waiting_for(id, &dest.text(), timeout)
}

/// The line a held HTTP request's caller is told (`what`: method and
/// URL).
pub fn waiting_request(id: &str, what: &str, timeout: std::time::Duration) -> String {
    waiting_for(id, what, timeout)
}

fn waiting_for(id: &str, what: &str, timeout: std::time::Duration) -> String {
    let secs = timeout.as_secs_f64();
    let wait = if secs.fract() == 0.0 {
        format!("{secs:.0} s")
    } else {
        format!("{secs:.1} s")
    };
    bounded(format!(
        "agentsh: waiting for approval {} of {what} (up to {wait})",
        escape(id)
    ))
}

/// Where a refused or held network call goes, as its line names it.
pub struct Destination<'a> {
    /// connect | sendto | sendmsg | sendmmsg
    pub syscall: &'a str,
    /// The name the tree resolved to the address, where known.
    pub host: Option<&'a str>,
    pub ip: std::net::IpAddr,
    pub port: u16,
    /// tcp | udp
    pub protocol: &'a str,
}

impl Destination<'_> {
    fn text(&self) -> String {
        let at = match self.host {
            Some(h) => format!("{} ({})", escape(h), self.ip),
            None => self.ip.to_string(),
        };
        format!(
            "{} to {at} port {}/{}",
            escape(self.syscall),
            self.port,
            self.protocol
        )
    }
}

/// The line for a path call the file rules refused (by the tracer where
/// no Landlock keeps them; where Landlock does, the refusal it would make):
/// the call, the path, the right missing, the rule, why. Pure.
pub fn refused_file(call: &str, path: &str, right: Option<&str>, rule: &str, why: &str) -> String {
    refused_file_in(call, path, right, None, rule, why)
}

/// [`refused_file`] for a call on `path` refused for a right missing at
/// another place `at` (a new name needs `create` in its directory).
pub fn refused_file_in(
    call: &str,
    path: &str,
    right: Option<&str>,
    at: Option<&str>,
    rule: &str,
    why: &str,
) -> String {
    let what = match (right, at) {
        (Some(r), Some(at)) => format!(" ({} right in {})", escape(r), escape(at)),
        (Some(r), None) => format!(" ({} right)", escape(r)),
        (None, _) => String::new(),
    };
    bounded(format!(
        "agentsh: {} of {}{what} denied (rule {}): {}",
        escape(call),
        escape(path),
        escape(rule),
        escape(why)
    ))
}

/// The line for a DNS query agentsh's stub refused: the name, and that no
/// egress rule could allow it (the query never left the machine). Pure.
pub fn refused_name(name: &str, rule: &str) -> String {
    bounded(format!(
        "agentsh: DNS lookup of {} refused (rule {}): no egress rule allows this name, so \
         the query did not leave the machine",
        escape(name),
        escape(rule)
    ))
}

/// The line for a refused network call: where it went, the rule, why.
/// Escaped and bounded like [`line`]. Pure.
pub fn refused_destination(dest: &Destination<'_>, rule: &str, message: Option<&str>) -> String {
    let mut s = format!("agentsh: {} denied (rule {})", dest.text(), escape(rule));
    if let Some(m) = message.filter(|m| !m.is_empty()) {
        s.push_str(": ");
        s.push_str(&escape(m));
    }
    bounded(s)
}

/// At most [`MAX`] bytes with its newline, cut at a character with "…".
fn bounded(mut s: String) -> String {
    if s.len() > MAX - 1 {
        let mut cut = MAX - 1 - '…'.len_utf8();
        while !s.is_char_boundary(cut) {
            cut -= 1;
        }
        s.truncate(cut);
        s.push('…');
    }
    s.push('\n');
    s
}

/// Control characters as `\xNN` (and `\\` for a backslash): nothing the
/// tree named can move a cursor or change a terminal's state.
fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            c if c.is_control() => {
                let mut b = [0u8; 4];
                for byte in c.encode_utf8(&mut b).bytes() {
                    out.push_str(&format!("\\x{byte:02x}"));
                }
            }
            c => out.push(c),
        }
    }
    out
}

/// Writes `text` to task `tid`'s stderr if it takes it now; whether it did.
pub fn tell(tid: u32, text: &str) -> bool {
    let _owner = crate::tracee::as_owner(tid);
    let fd = match crate::tracee::pidfd::get_fd(tid, 2) {
        Ok(fd) => fd,
        Err(_) => match reopen_stderr(tid) {
            Some(fd) => fd,
            None => return false,
        },
    };
    let mut p = libc::pollfd {
        fd: fd.as_raw_fd(),
        events: libc::POLLOUT,
        revents: 0,
    };
    // SAFETY: one pollfd, no wait.
    let ready = unsafe { libc::poll(&mut p, 1, 0) } == 1
        && p.revents & libc::POLLOUT != 0
        && p.revents & (libc::POLLERR | libc::POLLHUP | libc::POLLNVAL) == 0;
    if !ready {
        return false;
    }
    // A pipe with room takes this many bytes at once (below PIPE_BUF); a
    // terminal or a file too. A reader gone is EPIPE here, not a death:
    // the server's threads block every signal (`daemon::signals`).
    let mut f = std::fs::File::from(fd);
    f.write_all(text.as_bytes()).is_ok()
}

/// Task `tid`'s stderr opened again through `/proc` (no `pidfd_getfd`
/// here): only a pipe, a terminal or a regular file (opening anything else
/// may have an effect of its own), non-blocking, appending, never becoming
/// the server's terminal; `None` if it is something else, cannot be opened,
/// or is not the file `/proc` showed a moment before (the caller swapped
/// its fd 2 meanwhile).
fn reopen_stderr(tid: u32) -> Option<std::os::fd::OwnedFd> {
    use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt};
    let path = format!("/proc/{tid}/fd/2");
    let before = std::fs::metadata(&path).ok()?;
    let t = before.file_type();
    let tty = t.is_char_device() && matches!(libc_major(before.rdev()), 4 | 5 | 136..=143);
    if !(t.is_fifo() || t.is_file() || tty) {
        return None;
    }
    let f = std::fs::OpenOptions::new()
        .append(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY | libc::O_CLOEXEC)
        .open(&path)
        .ok()?;
    let now = f.metadata().ok()?;
    (now.dev() == before.dev() && now.ino() == before.ino()).then(|| f.into())
}

/// The major number of a device number (glibc's `major`).
fn libc_major(rdev: u64) -> u64 {
    ((rdev >> 32) & 0xffff_f000) | ((rdev >> 8) & 0xfff)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_line_is_escaped_and_bounded() {
        assert_eq!(
            line(
                "/usr/bin/curl",
                "deny-network-tools",
                Some("no network tools")
            ),
            "agentsh: curl denied (rule deny-network-tools): no network tools\n"
        );
        assert_eq!(
            line("x\u{1b}[31my", "r", None),
            "agentsh: x\\x1b[31my denied (rule r)\n"
        );
        let long = line("curl", "r", Some(&"é".repeat(1000)));
        assert!(long.len() <= MAX, "{}", long.len());
        assert!(long.ends_with("…\n"));
        assert_eq!(
            waiting(
                "ap-12-1f2e",
                &["pip".into(), "install".into(), "requests".into()],
                std::time::Duration::from_secs(10)
            ),
            "agentsh: waiting for approval ap-12-1f2e of \"pip install requests\" (up to 10 s)\n"
        );
        let w = waiting(
            "ap-1",
            &["x\u{7}".repeat(300)],
            std::time::Duration::from_millis(1500),
        );
        assert!(
            w.len() <= MAX && w.contains("x\\x07") && w.ends_with("(up to 1.5 s)\n"),
            "{w}"
        );
    }

    /// Issue 62: a refused create deep in a home was cut mid-path at the
    /// old 256 bytes (`... create in /home/nbuser…`).
    #[test]
    fn a_refused_create_deep_in_a_tree_keeps_both_paths_whole() {
        let dir =
            "/home/nbuser/work/clients/some-long-client-name/services/payments-api/.git/hooks";
        let path = format!("{dir}/pre-commit");
        let l = refused_file_in(
            "openat",
            &path,
            Some("create"),
            Some(dir),
            "persistence",
            &format!(
                "create in {dir}: git runs hooks from here on the next commit, outside any \
                 tree; an agent's code planted there would run unsupervised later"
            ),
        );
        assert!(!l.contains('…'), "{l}");
        assert_eq!(l.matches(dir).count(), 3, "{l}");
        assert!(l.ends_with("unsupervised later\n"), "{l}");
        assert!(l.len() <= MAX);
    }

    #[test]
    fn a_refused_destination_names_where_the_call_went() {
        let d = Destination {
            syscall: "connect",
            host: Some("evil\u{1b}.example"),
            ip: "203.0.113.9".parse().unwrap(),
            port: 443,
            protocol: "tcp",
        };
        assert_eq!(
            refused_destination(&d, "default", Some("no egress rule allows it")),
            "agentsh: connect to evil\\x1b.example (203.0.113.9) port 443/tcp denied (rule \
             default): no egress rule allows it\n"
        );
        assert_eq!(
            waiting_destination("ap-7", &d, std::time::Duration::from_secs(30)),
            "agentsh: waiting for approval ap-7 of connect to evil\\x1b.example (203.0.113.9) \
             port 443/tcp (up to 30 s)\n"
        );
    }

    /// Where `pidfd_getfd` is refused, the caller's stderr is opened again
    /// through `/proc`: a pipe gets the line; a regular file gets it
    /// appended, what was there kept; a socket is left alone.
    #[test]
    fn stderr_is_reopened_through_proc_for_a_pipe_and_a_file_only() {
        use std::io::Read;
        use std::process::{Command, Stdio};
        let mut child = Command::new("/bin/sleep")
            .arg("30")
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let fd = reopen_stderr(child.id()).expect("a pipe is reopened");
        std::fs::File::from(fd).write_all(b"to the pipe\n").unwrap();
        let mut err = child.stderr.take().unwrap();
        let mut got = [0u8; 12];
        err.read_exact(&mut got).unwrap();
        assert_eq!(&got, b"to the pipe\n");
        let _ = child.kill();
        let _ = child.wait();

        let path = std::env::temp_dir().join(format!("agentsh-explain-{}", std::process::id()));
        std::fs::write(&path, "kept\n").unwrap();
        let file = std::fs::File::options().write(true).open(&path).unwrap();
        let mut child = Command::new("/bin/sleep")
            .arg("30")
            .stderr(Stdio::from(file))
            .spawn()
            .unwrap();
        let fd = reopen_stderr(child.id()).expect("a file is reopened");
        std::fs::File::from(fd).write_all(b"appended\n").unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "kept\nappended\n");
        let _ = child.kill();
        let _ = child.wait();
        let _ = std::fs::remove_file(&path);

        let (a, _b) = std::os::unix::net::UnixStream::pair().unwrap();
        let mut child = Command::new("/bin/sleep")
            .arg("30")
            .stderr(Stdio::from(std::os::fd::OwnedFd::from(a)))
            .spawn()
            .unwrap();
        assert!(
            reopen_stderr(child.id()).is_none(),
            "a socket is not opened"
        );
        let _ = child.kill();
        let _ = child.wait();
    }
}
