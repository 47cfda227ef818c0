//! Where a standalone wrap keeps its files: the API socket under
//! `$XDG_RUNTIME_DIR/agentsh/` (else `/run/user/UID/agentsh/` where that is
//! the user's, else beside the state), state and config under
//! `$XDG_STATE_HOME/agentsh/<session>/`, the audit and the server's log
//! beside them; and, for `agentsh approvals` and `agentsh events
//! --session`, where a running one's socket and audit are.
//!
//! Failure modes: no XDG_STATE_HOME nor HOME, a socket path longer than a
//! Unix socket's, a directory that cannot be made, or no socket of that
//! session: a [`WrapFilesError`] that says what to set or run.

use std::path::{Path, PathBuf};

/// A standalone wrap's files cannot be found or made.
#[derive(Debug, thiserror::Error)]
pub enum WrapFilesError {
    #[error("neither XDG_STATE_HOME nor HOME is set: nowhere to keep the audit")]
    NoHome,
    #[error(
        "the API socket's path {} is longer than a Unix socket's 107 bytes: set \
         XDG_RUNTIME_DIR to a short directory of yours (mode 0700), or use a shorter --session",
        .0.display()
    )]
    SocketTooLong(PathBuf),
    #[error(
        "no agentsh wrap session {session:?} of this user is running (no socket at {}); run \
         this as the user who ran `agentsh wrap`, with the same XDG_RUNTIME_DIR",
        socket.display()
    )]
    NotRunning { session: String, socket: PathBuf },
    #[error("cannot create {}: {source}", dir.display())]
    Create {
        dir: PathBuf,
        source: std::io::Error,
    },
}

/// The API socket of standalone wrap `session` (for `agentsh approvals
/// --session`), as the user who ran it finds it.
///
/// # Errors
/// Neither XDG_STATE_HOME nor HOME says where; or no such socket.
pub fn socket_of(session: &str) -> Result<PathBuf, WrapFilesError> {
    let d = Dirs::of(session)?;
    if std::fs::symlink_metadata(&d.socket).is_err() {
        return Err(WrapFilesError::NotRunning {
            session: session.to_string(),
            socket: d.socket,
        });
    }
    Ok(d.socket)
}

/// The audit file of standalone wrap `session` of this user, if there is one.
pub fn audit_of(session: &str) -> Option<PathBuf> {
    Dirs::of(session)
        .ok()
        .map(|d| d.audit)
        .filter(|a| a.is_file())
}

/// Where a standalone wrap keeps its files.
pub(super) struct Dirs {
    /// `$XDG_STATE_HOME/agentsh` (`~/.local/state/agentsh`).
    pub(super) base: PathBuf,
    /// `<base>/<session>`: the server's state and config.
    pub(super) state: PathBuf,
    /// `$XDG_RUNTIME_DIR/agentsh` (else `<state>/run`): the API socket's.
    pub(super) run: PathBuf,
    pub(super) socket: PathBuf,
    pub(super) audit: PathBuf,
    pub(super) log: PathBuf,
}

impl Dirs {
    pub(super) fn of(session: &str) -> Result<Dirs, WrapFilesError> {
        let env_dir = |k: &str| {
            std::env::var_os(k)
                .filter(|v| !v.is_empty() && Path::new(v).is_absolute())
                .map(PathBuf::from)
        };
        let base = match env_dir("XDG_STATE_HOME") {
            Some(d) => d.join("agentsh"),
            None => env_dir("HOME")
                .ok_or(WrapFilesError::NoHome)?
                .join(".local/state/agentsh"),
        };
        let state = base.join(session);
        // The runtime directory: XDG_RUNTIME_DIR, else /run/user/UID where
        // it is this user's, else beside the state.
        let run = env_dir("XDG_RUNTIME_DIR")
            .or_else(|| {
                use std::os::unix::fs::MetadataExt;
                // SAFETY: getuid cannot fail.
                let uid = unsafe { libc::getuid() };
                let d = PathBuf::from(format!("/run/user/{uid}"));
                std::fs::metadata(&d)
                    .is_ok_and(|m| m.is_dir() && m.uid() == uid)
                    .then_some(d)
            })
            .map_or_else(|| state.join("run"), |d| d.join("agentsh"));
        let socket = run.join(format!("{session}.sock"));
        if socket.as_os_str().len() > 107 {
            return Err(WrapFilesError::SocketTooLong(socket));
        }
        Ok(Dirs {
            socket,
            audit: base.join(format!("{session}.jsonl")),
            log: base.join(format!("{session}.log")),
            base,
            state,
            run,
        })
    }

    /// Makes the directories, each 0700 where wrap creates it.
    pub(super) fn make(&self) -> Result<(), WrapFilesError> {
        use std::os::unix::fs::DirBuilderExt;
        let key_dir = self.base.join("ca-key");
        for d in [&self.base, &self.state, &self.run, &key_dir] {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(d)
                .map_err(|source| WrapFilesError::Create {
                    dir: d.clone(),
                    source,
                })?;
        }
        Ok(())
    }
}
