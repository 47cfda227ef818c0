//! The file that runs is the file judged: verification at `PTRACE_EVENT_EXEC`.
//!
//! After CONTINUE the kernel resolves the path again, so a symlink or rename
//! swapped in a directory the tree can change runs another file; an approval
//! leaves seconds in which another thread may rewrite the argv. For such
//! execs (and every exec whose caller's memory was frozen) the calling thread
//! is seized before CONTINUE (`PTRACE_O_TRACEEXEC`; a stop is requested right
//! after CONTINUE, so a failed exec shows too), and
//! when the exec completes it stops at `PTRACE_EVENT_EXEC`, before the new
//! image runs a single instruction. There `/proc/<pid>/exe` must be the file
//! judged (device, inode) and `/proc/<pid>/cmdline` the argv judged (for a
//! script: the argv the kernel built for its last interpreter); otherwise the
//! process is SIGKILLed there and `exec_mismatch` is audited with what
//! actually ran. A failed exec stops on its way back to user space instead.
//!
//! This module is backend-neutral on purpose: the ptrace backend will verify
//! every exec the same way.
//!
//! Failure modes: a caller that cannot be seized makes the exec a deny (the
//! caller of [`arm`] decides); a new image whose identity or argv cannot be
//! read is treated as a mismatch (killed); an exec that does not finish
//! within the deadline is killed too ([`Outcome::TimedOut`]): what it would
//! run could not be checked.

use crate::supervisor::ptrace::{self, Event, Lingering};
pub use crate::supervisor::seam::Expected;
use crate::supervisor::sharing::Frozen;
use std::os::unix::fs::MetadataExt;
use std::time::{Duration, Instant};

/// How long an exec may take before it is killed unverified.
pub const EXEC_DEADLINE: Duration = Duration::from_secs(10);

/// [`EXEC_DEADLINE`]; debug builds read `AGENTSH_TEST_EXEC_DEADLINE_MS` so a
/// test can make every watched exec time out. Release builds ignore it.
fn exec_deadline() -> Duration {
    #[cfg(debug_assertions)]
    {
        if let Some(ms) = std::env::var("AGENTSH_TEST_EXEC_DEADLINE_MS")
            .ok()
            .and_then(|v| v.parse().ok())
        {
            return Duration::from_millis(ms);
        }
    }
    EXEC_DEADLINE
}

/// Seizes the calling thread, before CONTINUE, so its exec can be watched:
/// on success it stops at `PTRACE_EVENT_EXEC`, inside the exec. Nothing is
/// sent to it yet: on a kernel without `WAIT_KILLABLE_RECV` a stop request
/// would wake it from the notification and withdraw it. [`started`] follows
/// the CONTINUE.
///
/// # Errors
/// The kernel's reason (EPERM: no CAP_SYS_PTRACE or traced by another).
pub fn arm(tid: u32) -> std::io::Result<()> {
    ptrace::seize(tid, libc::PTRACE_O_TRACEEXEC)
}

/// After CONTINUE: asks the caller to stop, so a failed exec shows as a stop
/// on its way back to user space (a successful one stops at
/// `PTRACE_EVENT_EXEC` first, inside the syscall, whatever this does).
pub fn started(tid: u32) {
    if let Err(e) = ptrace::interrupt(tid) {
        tracing::debug!(tid, "PTRACE_INTERRUPT after CONTINUE: {e}");
    }
}

/// How a watched exec ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// The new image runs, and is what was judged (or nothing was expected).
    Ran,
    /// The new image was not what was judged: killed before its first
    /// instruction. The text says what it was.
    Killed(String),
    /// The exec failed: the caller is back in its old image.
    Failed,
    /// The caller died.
    Gone,
    /// The exec did not finish within the deadline: the caller was killed,
    /// since what it would run could not be checked.
    TimedOut,
}

/// Waits for the exec of thread `tid` (process `pid`) armed by [`arm`], checks
/// the new image against `expected`, then detaches it (or kills it). Events of
/// the `frozen` tasks seen meanwhile are recorded for their release.
pub fn watch(
    tid: u32,
    pid: u32,
    expected: Option<&Expected>,
    mut frozen: Option<&mut Frozen>,
    lingering: &mut Lingering,
) -> Outcome {
    let limit = exec_deadline();
    let deadline = Instant::now() + limit;
    loop {
        // The deadline first: an exec that finished just after it is as
        // unchecked as one that never does.
        let next = if Instant::now() >= deadline {
            None
        } else {
            ptrace::wait_any(deadline)
        };
        let Some((t, ev)) = next else {
            // Fail closed: released now, the exec would run unchecked.
            tracing::warn!(
                tid,
                "exec not finished within {limit:?}: killed, what it runs cannot be checked"
            );
            kill_unfinished(tid, pid, lingering);
            return Outcome::TimedOut;
        };
        let exec_stop = matches!(
            ev,
            Event::Stopped {
                event: ptrace::EVENT_EXEC,
                ..
            }
        );
        if (t == tid || t == pid) && exec_stop {
            // A non-leader thread that execs takes the thread-group id.
            let mismatch = expected.and_then(|e| check(t, e).err());
            return match mismatch {
                None => {
                    let _ = ptrace::detach(t, 0);
                    Outcome::Ran
                }
                Some(what) => {
                    kill_stopped(t);
                    Outcome::Killed(what.to_string())
                }
            };
        }
        if t == tid {
            if let Event::Stopped { .. } = ev {
                let _ = ptrace::detach(t, ev.detach_signal());
                return Outcome::Failed;
            }
            return Outcome::Gone;
        }
        let ours = frozen.as_deref_mut().is_some_and(|f| f.saw(t, ev));
        if !ours {
            if let Event::Stopped { .. } = ev {
                let _ = ptrace::detach(t, ev.detach_signal());
                lingering.take(t);
            }
        }
    }
}

/// SIGKILLs the process of a watched exec that has not finished (its thread
/// `tid` may still be on its way into the new image) and reaps its death;
/// a thread that is not gone within the wait stays seized in `lingering`.
fn kill_unfinished(tid: u32, pid: u32, lingering: &mut Lingering) {
    // SAFETY: kill and tkill take integers; no memory is passed.
    unsafe {
        libc::kill(pid as libc::pid_t, libc::SIGKILL);
        libc::syscall(libc::SYS_tkill, tid as libc::c_long, libc::SIGKILL);
    }
    let deadline = Instant::now() + Duration::from_secs(2);
    loop {
        match ptrace::wait_one(tid, deadline) {
            Some(Event::Gone) => return,
            Some(_) => {}
            None => {
                lingering.add(tid);
                return;
            }
        }
    }
}

/// SIGKILLs a tracee stopped at `PTRACE_EVENT_EXEC` and reaps its death, so
/// its real parent is told at once.
fn kill_stopped(tid: u32) {
    // SAFETY: tkill takes two integers; no memory is passed.
    unsafe { libc::syscall(libc::SYS_tkill, tid as libc::c_long, libc::SIGKILL) };
    let deadline = Instant::now() + Duration::from_secs(2);
    while let Some(ev) = ptrace::wait_one(tid, deadline) {
        if ev == Event::Gone {
            break;
        }
    }
}

/// A new image that is not what was judged: what ran instead.
#[derive(Debug, thiserror::Error)]
#[error(
    "ran {exe} (device {}, inode {}) with argv {argv:?}; judged device {}, inode {} with argv \
     {:?}",
    file.0, file.1, judged.file.0, judged.file.1, judged.argv
)]
pub struct Mismatch {
    exe: String,
    file: (u64, u64),
    argv: Vec<String>,
    judged: Expected,
}

/// Whether the new image of `tid` is what was expected; `Err` says what ran.
pub fn check(tid: u32, e: &Expected) -> Result<(), Mismatch> {
    let owner = crate::tracee::as_owner(tid);
    let exe = std::fs::metadata(format!("/proc/{tid}/exe"));
    let exe_path = std::fs::read_link(format!("/proc/{tid}/exe"))
        .map_or_else(|_| "?".into(), |p| p.to_string_lossy().into_owned());
    let cmdline = std::fs::read(format!("/proc/{tid}/cmdline")).unwrap_or_default();
    drop(owner);
    let argv: Vec<String> = cmdline
        .split(|b| *b == 0)
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect::<Vec<_>>();
    // cmdline ends in a NUL: drop the empty last piece.
    let argv = match argv.split_last() {
        Some((last, rest)) if last.is_empty() => rest.to_vec(),
        _ => argv,
    };
    let file = exe.as_ref().map(|m| (m.dev(), m.ino())).ok();
    let same_file = file == Some(e.file);
    let same_argv = if e.argv_complete {
        argv == e.argv
    } else {
        argv.starts_with(&e.argv)
    };
    if same_file && same_argv {
        return Ok(());
    }
    Err(Mismatch {
        exe: exe_path,
        file: file.unwrap_or((0, 0)),
        argv,
        judged: e.clone(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn our_own_image_matches_itself_and_nothing_else() {
        let me = std::process::id();
        let m = std::fs::metadata("/proc/self/exe").unwrap();
        let argv: Vec<String> = std::env::args().collect();
        let ok = Expected {
            file: (m.dev(), m.ino()),
            argv: argv.clone(),
            argv_complete: true,
        };
        assert!(check(me, &ok).is_ok());
        let other_file = Expected {
            file: (m.dev(), m.ino() + 1),
            ..ok.clone()
        };
        assert!(check(me, &other_file)
            .unwrap_err()
            .to_string()
            .contains("inode"));
        let other_argv = Expected {
            argv: vec!["x".into()],
            ..ok.clone()
        };
        assert!(check(me, &other_argv).is_err());
        let prefix = Expected {
            argv: argv[..1].to_vec(),
            argv_complete: false,
            ..ok
        };
        assert!(check(me, &prefix).is_ok());
    }
}
