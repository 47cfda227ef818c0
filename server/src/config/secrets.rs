//! `secrets:` in the server's config: values the server adds to requests
//! an `http:` rule allowed (`${secret:NAME}` in `inject.headers`), which no
//! tree ever holds.
//!
//! Each is read by the server when a request needs it, from a file (owned
//! by the server's own user, readable by nobody else; a trailing newline
//! dropped) or from the environment the server started with, which the
//! entrypoint and the server take the variable out of before anything else
//! ([`take_from_environment`]: the value kept in memory, the bytes
//! `/proc/<pid>/environ` shows overwritten, nothing started later inherits
//! it). Trees cannot read the files (they are carved out of every tree's
//! Landlock read rights, with the state directory).
//!
//! Failure modes: a secret that is not configured, a file that cannot be
//! read, is not the server user's own or is readable by others, an empty
//! value or one with a line break: a [`SecretError`] naming the secret (never
//! its value); the request that needed it is refused.

use serde::Deserialize;
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;

/// Where one secret is read from: exactly one of `file` and `env`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SecretSource {
    pub file: Option<PathBuf>,
    pub env: Option<String>,
}

/// Why a secret cannot be had.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SecretError {
    #[error("secret {0:?} is not in the server config's secrets:")]
    Unknown(String),
    #[error("secret {0:?} names both or neither of file: and env: (exactly one)")]
    Source(String),
    #[error("secret {name:?}: {path} cannot be read: {error}")]
    Unread {
        name: String,
        path: String,
        error: String,
    },
    #[error(
        "secret {name:?}: {path} is not owned by the server's user {uid} or is readable by \
         others (chown it, chmod 600)"
    )]
    Exposed {
        name: String,
        path: String,
        uid: u32,
    },
    #[error("secret {name:?}: the server's environment has no {var}")]
    NoVar { name: String, var: String },
    #[error("secret {0:?} is empty or holds a line break or NUL")]
    Malformed(String),
}

impl SecretSource {
    /// The secret's value, read now.
    ///
    /// # Errors
    /// See the module's failure modes.
    pub fn read(&self, name: &str) -> Result<String, SecretError> {
        let raw = match (&self.file, &self.env) {
            (Some(path), None) => read_file(name, path)?,
            (None, Some(var)) => {
                held(var)
                    .or_else(|| std::env::var(var).ok())
                    .ok_or_else(|| SecretError::NoVar {
                        name: name.into(),
                        var: var.clone(),
                    })?
            }
            _ => return Err(SecretError::Source(name.into())),
        };
        let v = raw.strip_suffix('\n').unwrap_or(&raw);
        let v = v.strip_suffix('\r').unwrap_or(v);
        if v.is_empty() || v.contains(['\n', '\r', '\0']) {
            return Err(SecretError::Malformed(name.into()));
        }
        Ok(v.to_string())
    }
}

fn read_file(name: &str, path: &std::path::Path) -> Result<String, SecretError> {
    let unread = |e: std::io::Error| SecretError::Unread {
        name: name.into(),
        path: path.display().to_string(),
        error: e.to_string(),
    };
    let f = std::fs::File::open(path).map_err(unread)?;
    let m = f.metadata().map_err(unread)?;
    // SAFETY: geteuid cannot fail.
    let uid = unsafe { libc::geteuid() };
    if m.uid() != uid || m.mode() & 0o077 != 0 {
        return Err(SecretError::Exposed {
            name: name.into(),
            path: path.display().to_string(),
            uid,
        });
    }
    std::io::read_to_string(f).map_err(unread)
}

/// The `env:` secrets taken out of this process's environment at start
/// ([`take_from_environment`]), by variable.
static HELD: std::sync::Mutex<std::collections::BTreeMap<String, String>> =
    std::sync::Mutex::new(std::collections::BTreeMap::new());

fn held(var: &str) -> Option<String> {
    HELD.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .get(var)
        .cloned()
}

/// Takes the variables `secrets` reads (`env:`) out of this process's
/// environment: each value is kept here (where [`SecretSource::read`] finds
/// it), its bytes in the environment block the kernel shows as
/// `/proc/<pid>/environ` are overwritten with NULs, and the variable is
/// removed, so no process started later inherits it and a tree that can
/// read this process's environ finds nothing (issue 61). Returns what was
/// taken (to hand to a server started again). Call it before any thread
/// exists (it changes the environment).
pub fn take_from_environment(
    secrets: &std::collections::BTreeMap<String, SecretSource>,
) -> std::collections::BTreeMap<String, String> {
    let vars: Vec<&str> = secrets.values().filter_map(|s| s.env.as_deref()).collect();
    let mut taken = std::collections::BTreeMap::new();
    for var in vars {
        let Ok(value) = std::env::var(var) else {
            continue;
        };
        scrub_block(var);
        std::env::remove_var(var);
        taken.insert(var.to_string(), value);
    }
    hold(&taken);
    taken
}

/// Keeps `values` (variable → value) for [`SecretSource::read`].
pub fn hold(values: &std::collections::BTreeMap<String, String>) {
    let mut h = HELD
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    for (k, v) in values {
        h.insert(k.clone(), v.clone());
    }
}

/// Everything [`hold`] keeps: the environment a server this process starts
/// again must get (and nothing else does).
pub fn held_all() -> std::collections::BTreeMap<String, String> {
    HELD.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .clone()
}

/// Overwrites the value of `var` wherever `environ` points at `var=...`
/// (the process's initial block, which `/proc/<pid>/environ` shows, or a
/// string set later) with NULs, in place.
fn scrub_block(var: &str) {
    extern "C" {
        static mut environ: *mut *mut libc::c_char;
    }
    let prefix = format!("{var}=");
    // SAFETY: called before any other thread exists (the caller's
    // contract); `environ` is a NULL-terminated array of NUL-terminated
    // strings owned by the process, writable in place.
    unsafe {
        let mut p = environ;
        while !p.is_null() && !(*p).is_null() {
            let entry = std::ffi::CStr::from_ptr(*p);
            if entry.to_bytes().starts_with(prefix.as_bytes()) {
                let len = entry.to_bytes().len();
                let value = (*p).add(prefix.len());
                std::ptr::write_bytes(value, 0, len - prefix.len());
            }
            p = p.add(1);
        }
    }
}

/// The secret `name` of `secrets`, read now.
///
/// # Errors
/// Not configured, or see [`SecretSource::read`].
pub fn secret(
    secrets: &std::collections::BTreeMap<String, SecretSource>,
    name: &str,
) -> Result<String, SecretError> {
    secrets
        .get(name)
        .ok_or_else(|| SecretError::Unknown(name.into()))?
        .read(name)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn a_secret_file_must_be_the_servers_alone() {
        let dir = std::env::temp_dir().join(format!("agentsh-secret-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let p = dir.join("gh");
        std::fs::write(&p, "tok-123\n").expect("write");
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).expect("chmod");
        let s = SecretSource {
            file: Some(p.clone()),
            env: None,
        };
        assert_eq!(s.read("gh").as_deref(), Ok("tok-123"));
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o644)).expect("chmod");
        assert!(matches!(s.read("gh"), Err(SecretError::Exposed { .. })));
        let both = SecretSource {
            file: Some(p),
            env: Some("X".into()),
        };
        assert_eq!(both.read("gh"), Err(SecretError::Source("gh".into())));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
