//! Finding the command and exec'ing it.
//!
//! The command is resolved through PATH *before* the filter is loaded, so the
//! shell-like PATH probing does not reach the supervisor as a string of failed
//! execs, and the exec the supervisor sees is the one that runs.
//!
//! The exec hands the command exactly what the SDK gave the shell: the same
//! pid, fds 0-2, argv (argv[0] verbatim) and signal dispositions. Only
//! `AGENTSH_*` variables are removed from the environment, and the dynamic
//! loader's variables the shim kept away from unixwrap are put back (last, in
//! their original order).
//!
//! Failure modes: not found → 127 ("command not found"); found but not
//! executable → 126; execve failing → 126 (127 for ENOENT), one line on stderr.

use std::ffi::{CString, OsStr, OsString};
use std::io;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use agentsh_proto::env::PREFIX;

/// glibc's execvp default when PATH is unset.
const DEFAULT_PATH: &str = "/bin:/usr/bin";

/// Why a command could not be resolved.
#[derive(Debug, PartialEq, Eq)]
pub enum ResolveError {
    /// Nothing by that name (exit 127).
    NotFound,
    /// Found, but not an executable regular file (exit 126).
    NotExecutable(PathBuf),
}

/// Resolves `cmd` like execvp: a name with a '/' is used as is (made absolute
/// against the cwd); otherwise the first executable regular file in `path`
/// (an empty entry means the cwd).
///
/// # Errors
/// [`ResolveError`].
pub fn resolve(cmd: &OsStr, path: Option<&OsStr>) -> Result<PathBuf, ResolveError> {
    if cmd.as_bytes().contains(&b'/') {
        let p = Path::new(cmd);
        let abs = if p.is_absolute() {
            p.to_path_buf()
        } else {
            std::env::current_dir().map_or_else(|_| p.to_path_buf(), |cwd| cwd.join(p))
        };
        return match check(&abs) {
            Check::Executable => Ok(abs),
            Check::Missing => Err(ResolveError::NotFound),
            Check::NotExecutable => Err(ResolveError::NotExecutable(abs)),
        };
    }
    let path = path.map_or(DEFAULT_PATH.as_bytes(), OsStr::as_bytes);
    let mut denied = None;
    for dir in path.split(|b| *b == b':') {
        let dir: &Path = if dir.is_empty() {
            Path::new(".")
        } else {
            Path::new(OsStr::from_bytes(dir))
        };
        let candidate = dir.join(cmd);
        match check(&candidate) {
            Check::Executable => {
                return Ok(if candidate.is_absolute() {
                    candidate
                } else {
                    std::env::current_dir()
                        .map(|cwd| cwd.join(&candidate))
                        .unwrap_or(candidate)
                })
            }
            Check::NotExecutable => {
                denied.get_or_insert(candidate);
            }
            Check::Missing => {}
        }
    }
    Err(match denied {
        Some(p) => ResolveError::NotExecutable(p),
        None => ResolveError::NotFound,
    })
}

enum Check {
    Executable,
    Missing,
    NotExecutable,
}

fn check(p: &Path) -> Check {
    let Ok(meta) = std::fs::metadata(p) else {
        return Check::Missing;
    };
    if !meta.is_file() || meta.permissions().mode() & 0o111 == 0 {
        return Check::NotExecutable;
    }
    let Ok(c) = CString::new(p.as_os_str().as_bytes()) else {
        return Check::Missing;
    };
    // SAFETY: access() only reads the NUL-terminated path.
    if unsafe { libc::access(c.as_ptr(), libc::X_OK) } == 0 {
        Check::Executable
    } else {
        Check::NotExecutable
    }
}

/// The environment for the command: ours minus every `AGENTSH_*` variable,
/// then the dynamic loader's variables the shim carried past us (`loader`,
/// `NAME=VALUE` in their original order), now that the filter and Landlock
/// are in place.
pub fn command_env(
    vars: impl Iterator<Item = (OsString, OsString)>,
    loader: &[Vec<u8>],
) -> Vec<CString> {
    vars.filter(|(k, _)| !k.as_bytes().starts_with(PREFIX.as_bytes()))
        .filter_map(|(k, v)| {
            let mut kv = k.into_vec();
            kv.push(b'=');
            kv.extend_from_slice(v.as_bytes());
            CString::new(kv).ok()
        })
        .chain(loader.iter().filter_map(|e| CString::new(e.clone()).ok()))
        .collect()
}

/// execve(path, argv, envp). Returns only on failure.
pub fn execve(path: &Path, argv: &[OsString], envp: &[CString]) -> io::Error {
    let Ok(cpath) = CString::new(path.as_os_str().as_bytes()) else {
        return io::Error::new(io::ErrorKind::InvalidInput, "path contains a NUL byte");
    };
    let mut cargv = Vec::with_capacity(argv.len());
    for a in argv {
        match CString::new(a.as_bytes()) {
            Ok(c) => cargv.push(c),
            Err(_) => {
                return io::Error::new(io::ErrorKind::InvalidInput, "argument contains a NUL byte")
            }
        }
    }
    let mut pargv: Vec<*const libc::c_char> = cargv.iter().map(|c| c.as_ptr()).collect();
    pargv.push(std::ptr::null());
    let mut penv: Vec<*const libc::c_char> = envp.iter().map(|c| c.as_ptr()).collect();
    penv.push(std::ptr::null());
    // SAFETY: all three are NUL-terminated strings / NULL-terminated arrays
    // that outlive the call; execve only reads them.
    unsafe { libc::execve(cpath.as_ptr(), pargv.as_ptr(), penv.as_ptr()) };
    io::Error::last_os_error()
}

/// SIGPIPE's disposition as we found it, restored right before execve.
///
/// While unixwrap runs SIGPIPE is ignored, so a vanished log reader cannot
/// kill it mid-handoff; the command must get the original back (an ignored
/// SIGPIPE survives execve and breaks `yes | head -1`).
pub struct SigpipeGuard {
    original: libc::sigaction,
}

impl SigpipeGuard {
    /// Saves the current disposition and ignores SIGPIPE.
    pub fn ignore() -> SigpipeGuard {
        // SAFETY: sigaction is plain data; zeroed is a valid "no action" value.
        let mut original: libc::sigaction = unsafe { std::mem::zeroed() };
        // SAFETY: same as above.
        let mut ign: libc::sigaction = unsafe { std::mem::zeroed() };
        ign.sa_sigaction = libc::SIG_IGN;
        // SAFETY: valid pointers; SIG_IGN installs no handler code.
        unsafe { libc::sigaction(libc::SIGPIPE, &ign, &mut original) };
        SigpipeGuard { original }
    }

    /// Puts the original disposition back.
    pub fn restore(&self) {
        // SAFETY: `original` came from the kernel; it is SIG_DFL or SIG_IGN
        // (handlers do not survive the execve that started us).
        unsafe { libc::sigaction(libc::SIGPIPE, &self.original, std::ptr::null_mut()) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn path_lookup_finds_sh() {
        let p = resolve(
            OsStr::new("sh"),
            Some(OsStr::new("/nonexistent:/bin:/usr/bin")),
        )
        .unwrap();
        assert!(p.is_absolute() && p.ends_with("sh"), "{p:?}");
    }

    #[test]
    fn missing_command_is_not_found() {
        assert_eq!(
            resolve(OsStr::new("agentsh-no-such-cmd"), Some(OsStr::new("/bin"))),
            Err(ResolveError::NotFound)
        );
        assert_eq!(
            resolve(OsStr::new("/nonexistent/x"), None),
            Err(ResolveError::NotFound)
        );
    }

    #[test]
    fn directory_is_not_executable() {
        assert!(matches!(
            resolve(OsStr::new("/"), None),
            Err(ResolveError::NotExecutable(_))
        ));
    }

    #[test]
    fn env_strips_agentsh_vars_only() {
        let vars = [
            ("AGENTSH_NOTIFY_SOCK_FD", "3"),
            ("AGENTSH_X", "y"),
            ("PATH", "/bin"),
            ("MY_AGENTSH_THING", "kept"),
        ]
        .into_iter()
        .map(|(k, v)| (OsString::from(k), OsString::from(v)));
        let env = command_env(vars, &[b"LD_PRELOAD=/a.so".to_vec(), b"TZDIR=/z".to_vec()]);
        let env: Vec<&str> = env.iter().map(|c| c.to_str().unwrap()).collect();
        assert_eq!(
            env,
            [
                "PATH=/bin",
                "MY_AGENTSH_THING=kept",
                "LD_PRELOAD=/a.so",
                "TZDIR=/z"
            ]
        );
    }
}
