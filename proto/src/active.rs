//! "agentsh has run in this container": the marker that ends `auto`'s
//! fall-through.
//!
//! `shim_install=auto` runs a shell unsupervised when it cannot install
//! supervision. That is needed exactly once in a deployment's life: before
//! agentsh has ever started (E2B's start command is a shell spawned before
//! the server exists). Afterwards a failure means agentsh is busy, stopped,
//! killed or impersonated — all things a supervised tree might bring about to
//! switch supervision off for the next command — so it must be a refusal.
//!
//! The server writes `<run_dir>/active` (run_dir: the directory of its API
//! socket, root-owned and not writable by others; trees can neither create,
//! remove nor rename anything there). The marker records the container's
//! life: the kernel's boot id and the start time of PID 1. A container
//! restart (new PID 1) or a reboot makes an old marker *stale*, which counts
//! as absent, so a restarted container starts (its start command runs) and
//! the server writes a fresh marker. A marker that exists but cannot be read,
//! parsed or compared counts as current: fail closed.
//!
//! Unsupervised runs are recorded: the shim logs each to journald and, when
//! it runs as root, appends a line to `<run_dir>/unsupervised.jsonl`; the
//! server turns those lines into audit events when it starts.

use std::io::Read;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// File name of the marker in the run directory.
pub const MARKER: &str = "active";
/// Where the server also writes the marker, whatever its config, and where
/// every shim also looks: a shim.conf that names another socket (edited, or
/// emptied by a truncation below Landlock ABI 3) cannot make the shim look
/// for the marker in a directory where there is none.
pub const FIXED_MARKER: &str = "/run/agentsh/active";
/// File name of the root shims' record of unsupervised runs.
pub const UNSUPERVISED_LOG: &str = "unsupervised.jsonl";

/// What the marker says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum State {
    /// No marker: agentsh has not run in this container's life.
    Absent,
    /// A marker from an earlier life of the container (restart, reboot).
    Stale,
    /// agentsh has run in this life (or the marker cannot be judged).
    Current(String),
}

/// This container's life: `boot=<boot id> pid1=<start time of PID 1>`.
/// Where the kernel has no boot id (gVisor), the boot time from
/// `/proc/stat` stands in (`boot=btime:<seconds>`). `None` if neither, or
/// PID 1's start time, can be read.
pub fn life() -> Option<String> {
    let boot = read_small("/proc/sys/kernel/random/boot_id").or_else(|| {
        let stat = read_small("/proc/stat")?;
        let btime = stat.lines().find_map(|l| l.strip_prefix("btime "))?;
        Some(format!("btime:{}", btime.trim()))
    })?;
    let stat = read_small("/proc/1/stat")?;
    let close = stat.rfind(')')?;
    // Field 22 (starttime) is the 20th after the ')' that ends comm.
    let start = stat.get(close + 2..)?.split_ascii_whitespace().nth(19)?;
    Some(format!("boot={} pid1={start}", boot.trim()))
}

fn read_small(path: &str) -> Option<String> {
    let mut s = String::new();
    std::fs::File::open(path)
        .ok()?
        .take(4096)
        .read_to_string(&mut s)
        .ok()?;
    Some(s)
}

/// Reads the marker at `path` against this container's `life`.
pub fn state(path: &Path, life: Option<&str>) -> State {
    let meta = match std::fs::symlink_metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return State::Absent,
        Err(e) => return State::Current(format!("{} cannot be inspected: {e}", path.display())),
    };
    // Only root writes the marker; anything else there is not ours to
    // discount, so it counts (stricter).
    if !meta.is_file() || meta.uid() != 0 {
        return State::Current(format!("{} is not a root-owned file", path.display()));
    }
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) => return State::Current(format!("{} cannot be read: {e}", path.display())),
    };
    match life {
        Some(now) if text.trim() != now && !text.trim().is_empty() => State::Stale,
        _ => State::Current(text.trim().to_string()),
    }
}

/// Writes the marker for this life (the server, at start).
///
/// # Errors
/// The life cannot be read, or the file cannot be written.
pub fn write(path: &Path) -> std::io::Result<String> {
    let life = life().ok_or_else(|| {
        std::io::Error::other("the boot id or PID 1's start time cannot be read from /proc")
    })?;
    use std::os::unix::fs::PermissionsExt;
    if already_written(path, &life) {
        return Ok(life);
    }
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, format!("{life}\n"))?;
    // Readable by every shim, whatever the server's umask.
    std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o644))?;
    std::fs::rename(&tmp, path)?;
    Ok(life)
}

/// The marker at `path` already says `life`, as [`write`] would leave it (a
/// regular file of ours, mode 0644): a server restarted in the same
/// container leaves it, and its directory, untouched (the wrap-init caches
/// stay valid; see the server's `daemon::warm_caches`).
fn already_written(path: &Path, life: &str) -> bool {
    // SAFETY: geteuid has no preconditions.
    let euid = unsafe { libc::geteuid() };
    let Ok(m) = std::fs::symlink_metadata(path) else {
        return false;
    };
    m.file_type().is_file()
        && m.uid() == euid
        && m.mode() & 0o7777 == 0o644
        && std::fs::read_to_string(path).is_ok_and(|t| t == format!("{life}\n"))
}

/// The state the shim acts on: the marker beside the configured socket and
/// the one at [`FIXED_MARKER`], the stronger of the two (agentsh has run if
/// either says so).
pub fn combined(beside_socket: &Path, life: Option<&str>) -> State {
    let a = state(beside_socket, life);
    if beside_socket == Path::new(FIXED_MARKER) {
        return a;
    }
    let b = state(Path::new(FIXED_MARKER), life);
    match (a, b) {
        (s @ State::Current(_), _) | (_, s @ State::Current(_)) => s,
        (State::Stale, _) | (_, State::Stale) => State::Stale,
        (State::Absent, State::Absent) => State::Absent,
    }
}

/// The marker's path for an API socket path: the socket's directory.
pub fn marker_for(socket: &Path) -> PathBuf {
    socket
        .parent()
        .unwrap_or(Path::new("/run/agentsh"))
        .join(MARKER)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_life_is_readable() {
        let l = life().expect("boot id and /proc/1/stat");
        assert!(l.starts_with("boot=") && l.contains(" pid1="), "{l}");
    }

    #[test]
    fn marker_states() {
        let dir = std::env::temp_dir().join(format!("agentsh-active-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let m = dir.join(MARKER);
        let _ = std::fs::remove_file(&m);
        assert_eq!(state(&m, Some("boot=a pid1=1")), State::Absent);
        std::fs::write(&m, "boot=a pid1=1\n").unwrap();
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } == 0 {
            assert!(matches!(
                state(&m, Some("boot=a pid1=1")),
                State::Current(_)
            ));
            assert_eq!(state(&m, Some("boot=a pid1=2")), State::Stale);
            // This life unknown: fail closed.
            assert!(matches!(state(&m, None), State::Current(_)));
        }
        std::fs::write(&m, "").unwrap();
        assert!(matches!(
            state(&m, Some("boot=a pid1=1")),
            State::Current(_)
        ));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_current_marker_is_left_as_it_is_and_anything_else_rewritten() {
        use std::os::unix::fs::PermissionsExt;
        let dir = std::env::temp_dir().join(format!("agentsh-rewrite-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let m = dir.join(MARKER);
        let ino = |p: &Path| std::fs::symlink_metadata(p).unwrap().ino();
        let life = write(&m).unwrap();
        let first = ino(&m);
        assert_eq!(write(&m).unwrap(), life);
        assert_eq!(ino(&m), first, "an identical marker was written again");
        // Another content, or another mode: written afresh.
        std::fs::write(&m, "boot=x pid1=1\n").unwrap();
        write(&m).unwrap();
        assert_eq!(std::fs::read_to_string(&m).unwrap(), format!("{life}\n"));
        std::fs::set_permissions(&m, std::fs::Permissions::from_mode(0o666)).unwrap();
        let before = ino(&m);
        write(&m).unwrap();
        assert_ne!(ino(&m), before);
        assert_eq!(
            std::fs::symlink_metadata(&m).unwrap().mode() & 0o7777,
            0o644
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn marker_lives_beside_the_socket() {
        assert_eq!(
            marker_for(Path::new("/run/agentsh/api.sock")),
            Path::new("/run/agentsh/active")
        );
    }
}
