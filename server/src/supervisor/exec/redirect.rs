//! `decision: redirect`: the exec runs the rule's `redirect_to` program
//! instead, in the same process (same pid, same tree, under the same filter
//! and Landlock ruleset), with the caller's argv (argv[0] kept).
//!
//! How: the supervisor opens the target itself, puts that open file into
//! the caller at its lowest free fd `N` (`SECCOMP_IOCTL_NOTIF_ADDFD`,
//! close-on-exec), writes `/dev/fd/N` over the path string the caller
//! passed, and lets the syscall continue: the kernel reads the new path and
//! execs the file the supervisor opened. The exec is watched like a racing
//! one and the new image checked at `PTRACE_EVENT_EXEC`, before its first
//! instruction, against the target's device and inode and the caller's
//! argv: anything else (a sibling that rewrote the string, or replaced fd
//! `N` in a shared fd table) is killed there (`exec_mismatch`).
//!
//! Refused (the exec fails with `EACCES`, the reason audited and explained)
//! where that cannot be done safely: the path string sits in memory
//! another task shares (a thread, a vfork parent: rewriting it would change
//! theirs); the path is shorter than `/dev/fd/N`; the exec names an open
//! file instead of a path (`fexecve`) or refuses symlinks
//! (`AT_SYMLINK_NOFOLLOW`); the target is no longer a root-owned binary
//! nobody else can write; the ptrace backend (no ADDFD); the exec cannot be
//! watched (no ptrace access to the caller).
//!
//! What this does not watch: what the target does with the argv it is
//! given (it is the policy author's program).

use super::gather::Gathered;
use super::request::ExecRequest;
use super::verify::Expected;
use crate::audit::Memory;
use crate::supervisor::seam::Holder;
use std::os::fd::OwnedFd;
use std::os::unix::fs::{MetadataExt, PermissionsExt};

/// The longest path read from the caller.
const MAX_PATH: usize = 4096;

/// A redirect that can be made: checked, nothing changed yet.
pub(super) struct Plan {
    target: String,
    file: OwnedFd,
    identity: (u64, u64),
    /// Bytes of the caller's path string (without its NUL).
    room: usize,
    prefix: &'static str,
}

/// Where the caller finds its own fds by path.
fn fd_prefix() -> &'static str {
    match std::fs::read_link("/dev/fd") {
        Ok(p) if p.as_os_str() == "/proc/self/fd" => "/dev/fd/",
        _ => "/proc/self/fd/",
    }
}

/// Why a redirect cannot be made safely (the exec is then refused, with
/// this as its message).
#[derive(Debug, thiserror::Error)]
pub enum RedirectRefused {
    #[error("rule {0} has no redirect_to")]
    NoTarget(String),
    #[error(
        "redirect needs seccomp user-notify (the ptrace backend cannot give the caller the \
         target)"
    )]
    NeedsNotify,
    #[error("redirect refused: the exec cannot be watched to verify what runs (ptrace: {0})")]
    Unwatchable(std::io::Error),
    #[error("redirect to {target} refused: {why}")]
    To { target: String, why: Why },
}

/// What stands in a redirect's way.
#[derive(Debug, thiserror::Error)]
pub enum Why {
    #[error(
        "the exec's path is in memory another task shares (a thread or a vfork parent, e.g. \
         posix_spawn), and rewriting it would change theirs; run it from a shell"
    )]
    SharedPath,
    #[error(
        "the exec names an open file or refuses symlinks (execveat flags {0:#x}), so it cannot \
         be pointed at another file"
    )]
    NoPathToRewrite(i32),
    #[error("the exec's path cannot be read: {0}")]
    Unreadable(std::io::Error),
    #[error("the exec's path is longer than {MAX_PATH} bytes")]
    TooLong,
    #[error(
        "the path the exec names ({named:?}) is shorter than {prefix}N, so it cannot be pointed \
         at the target; call it by a longer path"
    )]
    TooShort { named: String, prefix: &'static str },
    #[error("it cannot be opened: {0}")]
    Open(std::io::Error),
    #[error("{0}")]
    Stat(std::io::Error),
    #[error(
        "it is no longer a root-owned regular file nobody else can write (owner {uid}, mode \
         {mode:o})"
    )]
    NotTrusted { uid: u32, mode: u32 },
    #[error(
        "it is a #! script (its interpreter would run, and could not be checked): redirect to a \
         binary"
    )]
    Script,
    #[error("the target cannot be given to the caller: {0}")]
    AddFd(std::io::Error),
    #[error(
        "the caller's lowest free fd is {fd}, and {path} does not fit in the {room} bytes of its \
         path"
    )]
    NoRoom { fd: i32, path: String, room: usize },
    #[error("the exec's path cannot be written: {0}")]
    Write(std::io::Error),
}

/// The plan for the redirect `rule` asks for: checked (nothing changed)
/// and the caller seized, so the exec is watched. `verified`: the backend
/// verifies every exec itself (ptrace), and cannot give the caller a file.
///
/// # Errors
/// Why it cannot be made safely (the exec is then refused).
pub(super) fn plan(
    req: &ExecRequest,
    g: &Gathered,
    rule: &str,
    target: Option<&str>,
    verified: bool,
) -> Result<Plan, RedirectRefused> {
    let target = target.ok_or_else(|| RedirectRefused::NoTarget(rule.to_string()))?;
    if verified {
        return Err(RedirectRefused::NeedsNotify);
    }
    let plan = check(req, g, target)?;
    // Seized before anything changes: the exec is watched.
    super::verify::arm(req.tid).map_err(RedirectRefused::Unwatchable)?;
    Ok(plan)
}

/// Checks that `target` can replace this exec; changes nothing.
///
/// # Errors
/// Why it cannot be done safely (the exec is then refused).
fn check(req: &ExecRequest, g: &Gathered, target: &str) -> Result<Plan, RedirectRefused> {
    let refused = |why| RedirectRefused::To {
        target: target.to_string(),
        why,
    };
    if g.memory != Memory::Exclusive {
        return Err(refused(Why::SharedPath));
    }
    if req.args.flags & (libc::AT_EMPTY_PATH | libc::AT_SYMLINK_NOFOLLOW) != 0 || req.args.path == 0
    {
        return Err(refused(Why::NoPathToRewrite(req.args.flags)));
    }
    let (raw, complete) = crate::tracee::read_cstring(req.tid, req.args.path, MAX_PATH)
        .map_err(|e| refused(Why::Unreadable(e)))?;
    if !complete {
        return Err(refused(Why::TooLong));
    }
    let prefix = fd_prefix();
    if raw.len() < prefix.len() + 1 {
        return Err(refused(Why::TooShort {
            named: String::from_utf8_lossy(&raw).into_owned(),
            prefix,
        }));
    }
    let file = std::fs::File::open(target).map_err(|e| refused(Why::Open(e)))?;
    let m = file.metadata().map_err(|e| refused(Why::Stat(e)))?;
    if !m.file_type().is_file() || m.uid() != 0 || m.permissions().mode() & 0o022 != 0 {
        return Err(refused(Why::NotTrusted {
            uid: m.uid(),
            mode: m.permissions().mode() & 0o7777,
        }));
    }
    let mut head = [0u8; 2];
    if std::os::unix::fs::FileExt::read_at(&file, &mut head, 0).is_ok_and(|n| n == 2)
        && &head == b"#!"
    {
        return Err(refused(Why::Script));
    }
    Ok(Plan {
        target: target.to_string(),
        identity: (m.dev(), m.ino()),
        file: file.into(),
        room: raw.len(),
        prefix,
    })
}

/// What a made redirect gives the exec's watch.
pub(super) struct Made {
    pub expected: Expected,
    pub target: String,
    pub fd: i32,
}

/// Puts the target into the caller and its path there. The caller must
/// be seized already (the exec is watched).
///
/// # Errors
/// The fd cannot be added or the path written (the exec is then refused;
/// the fd, if added, stays in the caller, close-on-exec).
pub(super) fn apply(
    plan: Plan,
    req: &ExecRequest,
    g: &Gathered,
    holder: &Holder,
) -> Result<Made, RedirectRefused> {
    let target = plan.target;
    let refused = |why| RedirectRefused::To {
        target: target.clone(),
        why,
    };
    let fd = holder
        .add_fd(&plan.file, true)
        .map_err(|e| refused(Why::AddFd(e)))?;
    let path = format!("{}{fd}", plan.prefix);
    if path.len() > plan.room {
        return Err(refused(Why::NoRoom {
            fd,
            path,
            room: plan.room,
        }));
    }
    let mut bytes = path.into_bytes();
    bytes.push(0);
    crate::tracee::overwrite_bytes(req.tid, req.args.path, &bytes)
        .map_err(|e| refused(Why::Write(e)))?;
    Ok(Made {
        expected: Expected {
            file: plan.identity,
            argv: g.argv.args.clone(),
            argv_complete: !g.argv.truncated,
        },
        target,
        fd,
    })
}
