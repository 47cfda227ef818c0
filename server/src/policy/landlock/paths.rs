//! Rule paths to filesystem paths for one session: the values of the path
//! variables, the filesystem as the compiler sees it ([`FsView`], injected
//! so tests need no disk), and the path helpers every room shares.
//!
//! Failure modes: a rule path that names no clean absolute path (the loader
//! refuses these, so only one that bypassed it gets here) is an
//! [`ExpandError`], which the compiler turns into a warning and the
//! stricter choice; an unset variable is `Ok(None)`.

use crate::policy::semantics::{landlock_base, NotEnforceable};

/// The per-session values of the path variables.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SessionVars {
    pub workspace: Option<String>,
    pub home: Option<String>,
    pub tmpdir: String,
}

/// The filesystem as the compiler needs it (injected, so tests need no disk).
pub trait FsView {
    /// The canonical path (symlinks followed), `None` if it does not exist.
    fn canonical(&self, path: &str) -> Option<String>;
    /// The entries of a directory that are not symlinks, as full paths;
    /// `None` if it is not a readable directory.
    fn children(&self, dir: &str) -> Option<Vec<String>>;
}

/// The server's own view of the filesystem.
pub struct HostFs;

impl FsView for HostFs {
    fn canonical(&self, path: &str) -> Option<String> {
        std::fs::canonicalize(path)
            .ok()
            .map(|p| p.to_string_lossy().into_owned())
    }

    fn children(&self, dir: &str) -> Option<Vec<String>> {
        let mut out = Vec::new();
        for entry in std::fs::read_dir(dir).ok()? {
            let entry = entry.ok()?;
            if entry.file_type().ok()?.is_symlink() {
                continue;
            }
            out.push(join(dir, &entry.file_name().to_string_lossy()));
        }
        out.sort();
        Some(out)
    }
}

/// `/a//b/` → `/a/b`; `None` if not absolute or if it has `.`/`..` parts.
pub(super) fn normalize(p: &str) -> Option<String> {
    if !p.starts_with('/') {
        return None;
    }
    let mut parts = Vec::new();
    for part in p.split('/') {
        match part {
            "" => {}
            "." | ".." => return None,
            x => parts.push(x),
        }
    }
    Some(format!("/{}", parts.join("/")))
}

pub(super) fn join(dir: &str, name: &str) -> String {
    if dir == "/" {
        format!("/{name}")
    } else {
        format!("{dir}/{name}")
    }
}

/// `p` is `ancestor` or lies beneath it.
pub(super) fn at_or_beneath(p: &str, ancestor: &str) -> bool {
    ancestor == "/"
        || p == ancestor
        || (p.starts_with(ancestor) && p.as_bytes().get(ancestor.len()) == Some(&b'/'))
}

/// Why a rule path names no path for this session (the loader refuses
/// these, so only a path that bypassed it gets here).
#[derive(Debug, thiserror::Error)]
pub(super) enum ExpandError {
    #[error(transparent)]
    NotEnforceable(#[from] NotEnforceable),
    #[error("{0:?}: unterminated ${{")]
    Unterminated(String),
    #[error("{pattern:?}: unknown variable ${{{var}}}")]
    UnknownVariable { pattern: String, var: String },
    #[error("{pattern:?} expands to {text:?}, which is not a clean absolute path")]
    NotClean { pattern: String, text: String },
}

/// Expands a validated rule path; `Ok(None)` when its variable is unset.
pub(super) fn expand(pattern: &str, vars: &SessionVars) -> Result<Option<String>, ExpandError> {
    let base = landlock_base(pattern)?;
    let text = if let Some(after) = base.strip_prefix("${") {
        let (var, rest) = after
            .split_once('}')
            .ok_or_else(|| ExpandError::Unterminated(pattern.to_string()))?;
        let value = match var {
            "WORKSPACE" | "SESSION_ROOT" => vars.workspace.clone(),
            "HOME" => vars.home.clone(),
            "TMPDIR" => Some(vars.tmpdir.clone()),
            other => {
                return Err(ExpandError::UnknownVariable {
                    pattern: pattern.to_string(),
                    var: other.to_string(),
                })
            }
        };
        match value {
            Some(v) if !v.is_empty() => format!("{v}{rest}"),
            _ => return Ok(None),
        }
    } else {
        base.to_string()
    };
    match normalize(&text) {
        Some(path) => Ok(Some(path)),
        None => Err(ExpandError::NotClean {
            pattern: pattern.to_string(),
            text,
        }),
    }
}

/// The path as the check sees it: canonical, except under `/proc` (whose
/// `self` would resolve to the server) and when it does not exist.
pub(super) fn resolve(p: &str, fs: &dyn FsView) -> String {
    if at_or_beneath(p, "/proc") {
        return p.to_string();
    }
    fs.canonical(p).unwrap_or_else(|| p.to_string())
}
