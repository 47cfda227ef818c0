//! The run directory (the API socket's directory, `/run/agentsh` by
//! default): the API socket, the notify sockets, the `active` marker and
//! the root shims' record of unsupervised runs.
//!
//! It must be root-owned and not writable by group or others: the shim
//! trusts a socket there only then, and only then can no other user have
//! put anything there. Supervised trees can neither create, remove nor
//! rename anything in it (Landlock self-protection), cannot create the
//! SEQPACKET sockets the server uses, and, when unixwrap can, do not even
//! see it (the daemon-socket mask).
//!
//! Failure modes: a run directory owned by someone else or writable by
//! others, a socket path another live server answers on, or a marker that
//! cannot be written stop the server at start with a message saying what to
//! fix. A line of the unsupervised record that cannot be parsed is audited
//! as such, never dropped silently.

use crate::audit::{AuditLog, EventBody, UnsupervisedEvent};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// What stops the server at start about its run directory, each with what
/// to fix.
#[derive(Debug, thiserror::Error)]
pub enum RunDirError {
    #[error("cannot create the run directory {}: {source}", dir.display())]
    Create {
        dir: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot inspect the run directory {}: {source}", dir.display())]
    Inspect {
        dir: PathBuf,
        source: std::io::Error,
    },
    #[error(
        "the run directory {} (server.socket's directory) must be a directory owned by the \
         server's uid {me} and not writable by group or others (found uid {uid}, mode {mode:o}): \
         the shell shim trusts the API socket only there; fix its owner and mode or choose \
         another server.socket",
        dir.display()
    )]
    Unsafe {
        dir: PathBuf,
        me: u32,
        uid: u32,
        mode: u32,
    },
    #[error("cannot set the mode of {} to {want:o}: {source}", dir.display())]
    SetMode {
        dir: PathBuf,
        want: u32,
        source: std::io::Error,
    },
    #[error("cannot inspect {}: {source}", path.display())]
    InspectSocket {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{} exists and is not a socket; remove it or choose another server.socket", path.display())]
    NotSocket { path: PathBuf },
    #[error("another agentsh server is listening on {}; stop it first", path.display())]
    AnotherServer { path: PathBuf },
    #[error("cannot remove the stale socket {}: {source}", path.display())]
    RemoveStale {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot set the mode of {}: {source}", path.display())]
    SocketMode {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot write the marker {}: {source}", path.display())]
    Marker {
        path: PathBuf,
        source: std::io::Error,
    },
}

type Result<T> = std::result::Result<T, RunDirError>;

/// Creates (0755) or checks the run directory. `private` (a standalone
/// `agentsh wrap`'s server, whose shims are its own user's): 0700, and no
/// warning that root's shims will not trust it.
///
/// # Errors
/// What is wrong with it, and what to do.
pub fn prepare(dir: &Path, private: bool) -> Result<()> {
    let want = if private { 0o700 } else { 0o755 };
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o755)
        .create(dir)
        .map_err(|source| RunDirError::Create {
            dir: dir.to_path_buf(),
            source,
        })?;
    let m = std::fs::symlink_metadata(dir).map_err(|source| RunDirError::Inspect {
        dir: dir.to_path_buf(),
        source,
    })?;
    // SAFETY: geteuid has no preconditions.
    let me = unsafe { libc::geteuid() };
    if !m.is_dir() || m.uid() != me || m.mode() & 0o022 != 0 {
        return Err(RunDirError::Unsafe {
            dir: dir.to_path_buf(),
            me,
            uid: m.uid(),
            mode: m.mode() & 0o7777,
        });
    }
    if m.mode() & 0o7777 != want {
        // Whatever the umask or an earlier run left: every shim must reach
        // the API socket by name, and nobody else may write here.
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(want)).map_err(|source| {
            RunDirError::SetMode {
                dir: dir.to_path_buf(),
                want,
                source,
            }
        })?;
    }
    if me != 0 && !private {
        tracing::warn!(
            "the server runs as uid {me}: shims accept only a server running as root, so \
             every supervised shell will be refused"
        );
    }
    Ok(())
}

/// Removes a socket left by a server that is gone; refuses if one answers.
///
/// # Errors
/// Another server listens there, or the path is not a socket.
pub fn clear_stale_socket(path: &Path) -> Result<()> {
    use std::os::unix::fs::FileTypeExt;
    let path_buf = || path.to_path_buf();
    let m = match std::fs::symlink_metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(source) => {
            return Err(RunDirError::InspectSocket {
                path: path_buf(),
                source,
            })
        }
    };
    if !m.file_type().is_socket() {
        return Err(RunDirError::NotSocket { path: path_buf() });
    }
    match agentsh_proto::seqpacket::connect(path, std::time::Duration::from_secs(1)) {
        Ok(_) => Err(RunDirError::AnotherServer { path: path_buf() }),
        Err(_) => std::fs::remove_file(path).map_err(|source| RunDirError::RemoveStale {
            path: path_buf(),
            source,
        }),
    }
}

/// Removes the API socket and its owner's door (a stopping server).
pub fn remove_sockets(socket: &Path) {
    let _ = std::fs::remove_file(socket);
    if let Some(owner) = agentsh_proto::seqpacket::owner_socket(socket) {
        let _ = std::fs::remove_file(owner);
    }
}

/// The API socket accepts any local uid (non-root shims need wrap-init);
/// the kernel tells the server who each peer is.
///
/// # Errors
/// chmod fails.
pub fn open_socket_mode(path: &Path) -> Result<()> {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o666)).map_err(|source| {
        RunDirError::SocketMode {
            path: path.to_path_buf(),
            source,
        }
    })
}

/// Writes the `active` marker: from now on, in this container's life,
/// `shim_install=auto` refuses rather than run a shell unsupervised.
///
/// # Errors
/// It cannot be written (the server must not start without it: a crash
/// later would otherwise let `auto` fall open).
pub fn write_marker(dir: &Path, fixed_too: bool) -> Result<()> {
    let path = dir.join(agentsh_proto::active::MARKER);
    let life = match agentsh_proto::active::write(&path) {
        Ok(life) => life,
        Err(source) => return Err(RunDirError::Marker { path, source }),
    };
    tracing::info!(marker = %path.display(), %life, "marked agentsh active for this container's life");
    // Also where every shim looks whatever its shim.conf says.
    let fixed = Path::new(agentsh_proto::active::FIXED_MARKER);
    if fixed_too && fixed != path {
        make_fixed_marker_dir();
        match agentsh_proto::active::write(fixed) {
            Ok(_) => {
                tracing::info!(marker = %fixed.display(), "marked agentsh active at the fixed path too");
            }
            // Only the fixed path is missing: shims configured for this
            // server still see the marker beside its socket.
            Err(e) => tracing::warn!("cannot write the marker {}: {e}", fixed.display()),
        }
    }
    Ok(())
}

/// Makes the directory of the fixed marker (`/run/agentsh`) if it is
/// missing: done early in start-up, with the run directory, so that nothing
/// the wrap-init caches were computed from changes when the marker is
/// written (see `daemon::warm::caches`). A failure is reported by
/// [`write_marker`].
pub fn make_fixed_marker_dir() {
    use std::os::unix::fs::DirBuilderExt;
    if let Some(parent) = Path::new(agentsh_proto::active::FIXED_MARKER).parent() {
        let _ = std::fs::DirBuilder::new()
            .mode(0o755)
            .recursive(true)
            .create(parent);
    }
}

/// Turns the root shims' record of unsupervised runs into audit events and
/// empties it.
pub fn ingest_unsupervised(dir: &Path, audit: &AuditLog) {
    let path = dir.join(agentsh_proto::active::UNSUPERVISED_LOG);
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return,
        Err(e) => {
            tracing::warn!("cannot read {}: {e}", path.display());
            return;
        }
    };
    let life = agentsh_proto::active::life();
    let (mut now, mut earlier) = (0, 0);
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let (session, event) = parse_unsupervised(line, life.as_deref());
        if event.earlier_life {
            earlier += 1;
        } else {
            now += 1;
        }
        audit.record(&session, EventBody::UnsupervisedRun(event));
    }
    if let Err(e) = std::fs::remove_file(&path) {
        tracing::warn!("cannot remove {}: {e}", path.display());
    }
    if now > 0 {
        tracing::warn!(
            count = now,
            "shells ran UNSUPERVISED before agentsh started (shim_install=auto); recorded as audit events"
        );
    }
    if earlier > 0 {
        tracing::info!(
            count = earlier,
            "records of shells that ran in an earlier life of this container (image build steps \
             after `agentsh shim install`, or before a restart) were in the run directory; \
             recorded as audit events with earlier_life"
        );
    }
}

/// One record; `life` is this container's (`active::life`): a record of
/// another is from an earlier life. A record without one (an older shim)
/// counts as this life's.
fn parse_unsupervised(line: &str, life: Option<&str>) -> (String, UnsupervisedEvent) {
    let v: serde_json::Value = serde_json::from_str(line).unwrap_or(serde_json::Value::Null);
    let num = |k: &str| v[k].as_u64().unwrap_or(0) as u32;
    let reason = match v["reason"].as_str() {
        Some(r) => r.to_string(),
        None => format!("unparsable record: {line:?}"),
    };
    let secs = v["unix_time"].as_u64().unwrap_or(0);
    let ran_at =
        crate::audit::rfc3339_at(std::time::UNIX_EPOCH + std::time::Duration::from_secs(secs));
    let session = v["session"]
        .as_str()
        .filter(|s| crate::session::valid_id(s))
        .unwrap_or("default")
        .to_string();
    (
        session,
        UnsupervisedEvent {
            ran_at,
            pid: num("pid"),
            ppid: num("ppid"),
            uid: num("uid"),
            argv: v["argv"]
                .as_array()
                .map(|a| {
                    a.iter()
                        .filter_map(|x| x.as_str().map(String::from))
                        .collect()
                })
                .unwrap_or_default(),
            reason,
            earlier_life: match (v["life"].as_str(), life) {
                (Some(then), Some(now)) => then != now,
                _ => false,
            },
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unsupervised_lines_become_events_and_garbage_is_kept_visible() {
        let now = Some("boot=b pid1=2");
        let (s, e) = parse_unsupervised(
            r#"{"unix_time":0,"pid":5,"ppid":1,"uid":0,"session":"ci","argv":["sh","-c","x"],"reason":"r"}"#,
            now,
        );
        assert_eq!(s, "ci");
        assert_eq!(e.argv, ["sh", "-c", "x"]);
        assert_eq!(e.ran_at, "1970-01-01T00:00:00.000000Z");
        assert!(!e.earlier_life, "a record without a life is this life's");
        let (s, e) = parse_unsupervised("not json", now);
        assert_eq!(s, "default");
        assert!(e.reason.contains("unparsable"), "{}", e.reason);
        // An image build step's record: another PID 1.
        let line = r#"{"unix_time":0,"pid":5,"ppid":1,"uid":0,"argv":["sh"],"reason":"r","life":"boot=b pid1=1"}"#;
        assert!(parse_unsupervised(line, now).1.earlier_life);
        let same = line.replace("pid1=1", "pid1=2");
        assert!(!parse_unsupervised(&same, now).1.earlier_life);
    }

    #[test]
    fn a_directory_others_can_write_is_refused() {
        let dir = std::env::temp_dir().join(format!("agentsh-rundir-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
        let e = prepare(&dir, false).unwrap_err().to_string();
        assert!(e.contains("not writable by group or others"), "{e}");
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        assert!(prepare(&dir, false).is_ok());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
