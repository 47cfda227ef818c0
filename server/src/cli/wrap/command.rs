//! CMD itself, apart from supervision: found on `PATH`, or run without
//! supervision (`--allow-unsupervised`) and that run recorded in wrap's
//! audit; and the one way wrap speaks (`agentsh wrap: ...` on stderr).
//!
//! Failure modes: CMD not found is `None` (the caller exits 127); an audit
//! file that cannot be opened is said on stderr (the run is not stopped for
//! it); an `execv` that fails is said, exit 126.

use super::args::Wrap;
use super::files::Dirs;
use std::ffi::{CString, OsStr};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// One line on stderr, as wrap says everything: `agentsh wrap: MSG`.
pub(super) fn say(msg: &str) {
    eprintln!("agentsh wrap: {msg}");
}

/// `CMD` as found on `PATH` (a name with a `/` as is).
pub(super) fn resolve(program: &OsStr) -> Option<PathBuf> {
    let p = Path::new(program);
    if program.as_bytes().contains(&b'/') {
        return p.is_file().then(|| p.to_path_buf());
    }
    let path = std::env::var_os("PATH").unwrap_or_else(|| "/usr/bin:/bin".into());
    std::env::split_paths(&path)
        .map(|d| d.join(p))
        .find(|c| is_executable(c))
}

fn is_executable(p: &Path) -> bool {
    let Ok(c) = CString::new(p.as_os_str().as_bytes()) else {
        return false;
    };
    // SAFETY: a NUL-terminated path.
    p.is_file() && unsafe { libc::access(c.as_ptr(), libc::X_OK) } == 0
}

/// An unsupervised run, in wrap's own audit file (standalone); a server's
/// audit is the server's to write (its log has the journal line).
pub(super) fn record_unsupervised(w: &Wrap, session: &str, why: &str) {
    let Some(path) = w.audit.clone().or_else(|| {
        (w.server.is_none() || w.own_server)
            .then(|| Dirs::of(session).ok().map(|d| d.audit))
            .flatten()
    }) else {
        return;
    };
    match crate::audit::AuditLog::open(&path, 16) {
        Ok(log) => {
            log.record(
                session,
                crate::audit::EventBody::UnsupervisedRun(crate::audit::UnsupervisedEvent {
                    ran_at: chrono_like_now(),
                    pid: std::process::id(),
                    ppid: std::os::unix::process::parent_id(),
                    // SAFETY: getuid cannot fail.
                    uid: unsafe { libc::getuid() },
                    argv: w
                        .command
                        .iter()
                        .map(|a| a.to_string_lossy().into_owned())
                        .collect(),
                    reason: format!("agentsh wrap --allow-unsupervised: {why}"),
                    earlier_life: false,
                }),
            );
        }
        Err(e) => say(&format!(
            "cannot record the unsupervised run in {}: {e}",
            path.display()
        )),
    }
}

fn chrono_like_now() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    format!("unix:{secs}")
}

pub(super) fn exec_plain(real: &Path, argv: &[CString]) -> i32 {
    let Ok(path) = CString::new(real.as_os_str().as_bytes()) else {
        return agentsh_proto::exit::NOT_FOUND;
    };
    let mut ptrs: Vec<*const libc::c_char> = argv.iter().map(|a| a.as_ptr()).collect();
    ptrs.push(std::ptr::null());
    // SAFETY: NUL-terminated strings that outlive the call; a
    // NULL-terminated array.
    unsafe { libc::execv(path.as_ptr(), ptrs.as_ptr()) };
    say(&format!(
        "cannot run {}: {}",
        real.display(),
        std::io::Error::last_os_error()
    ));
    agentsh_proto::exit::REFUSED
}
