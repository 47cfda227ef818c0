//! `secrets:` in the server's config: values the server adds to requests
//! an `http:` rule allowed (`${secret:NAME}` in `inject.headers`), which no
//! tree ever holds.
//!
//! Each is read by the server when a request needs it, from a file (owned
//! by the server's own user, readable by nobody else; a trailing newline
//! dropped) or from the server's own environment. Trees cannot read the
//! files (they are carved out of every tree's Landlock read rights, with
//! the state directory) and never see the server's environment.
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
            (None, Some(var)) => std::env::var(var).map_err(|_| SecretError::NoVar {
                name: name.into(),
                var: var.clone(),
            })?,
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
