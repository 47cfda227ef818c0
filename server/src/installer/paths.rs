//! Paths inside a root as the kernel resolves them after chroot, and the state of one shell there.

use super::*;
use std::path::Component;

/// Resolves `path` (absolute, as seen inside `root`) to a path on this
/// machine, following symlinks of every component but the last *inside*
/// `root`, as the kernel would after chroot(root).
///
/// # Errors
/// ELOOP after 40 symlinks; I/O errors reading a link.
pub fn in_root(root: &Path, path: &str) -> io::Result<PathBuf> {
    let mut pending: Vec<std::ffi::OsString> = Path::new(path)
        .components()
        .filter_map(|c| match c {
            Component::Normal(s) => Some(s.to_os_string()),
            Component::ParentDir => Some("..".into()),
            _ => None,
        })
        .collect();
    let Some(last) = pending.pop() else {
        return Ok(root.to_path_buf());
    };
    pending.reverse(); // used as a stack
    let mut resolved: Vec<std::ffi::OsString> = Vec::new();
    let mut hops = 0;
    while let Some(c) = pending.pop() {
        if c == ".." {
            resolved.pop();
            continue;
        }
        let host: PathBuf = std::iter::once(root.as_os_str())
            .chain(resolved.iter().map(std::ffi::OsString::as_os_str))
            .chain(std::iter::once(c.as_os_str()))
            .collect();
        match fs::symlink_metadata(&host) {
            Ok(m) if m.file_type().is_symlink() => {
                hops += 1;
                if hops > 40 {
                    return Err(io::Error::from_raw_os_error(libc::ELOOP));
                }
                let target = fs::read_link(&host)?;
                if target.is_absolute() {
                    resolved.clear();
                }
                for t in target.components().rev() {
                    match t {
                        Component::Normal(s) => pending.push(s.to_os_string()),
                        Component::ParentDir => pending.push("..".into()),
                        _ => {}
                    }
                }
            }
            _ => resolved.push(c),
        }
    }
    let mut out = root.to_path_buf();
    out.extend(resolved);
    out.push(last);
    Ok(out)
}

/// The state of one shell in a root.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum ShellState {
    /// `/bin/N` does not exist (e.g. bash not installed).
    Missing,
    /// The original shell is in place; no shim.
    Original,
    /// The shim is in place and `/bin/N.real` exists; `current` when its bytes
    /// equal the shim binary being installed.
    Installed { current: bool },
    /// Something install did not leave that way; the text says what.
    Inconsistent(String),
}

/// One file the shim stands in for: a shell (`/bin/sh`, `/bin/bash`) or a
/// program (`--programs`), and where its original and link go.
pub(super) struct ShellPaths {
    /// `sh`, `bash`, or the program's basename (its link's name).
    pub(super) name: String,
    /// The path inside the root: `/bin/sh`, `/usr/bin/python3.11`.
    pub(super) shown: String,
    /// Where its link lives: [`SHELLS_DIR`] or [`PROGRAMS_DIR`].
    pub(super) dir: &'static str,
    /// A program (`--programs`), not a shell.
    pub(super) program: bool,
    /// `shown` on this machine.
    pub(super) public: PathBuf,
    /// `shown.real` on this machine.
    pub(super) real: PathBuf,
    /// `dir/name` on this machine.
    pub(super) link: PathBuf,
}

impl ShellPaths {
    pub(super) fn new(root: &Path, name: &'static str) -> io::Result<ShellPaths> {
        let shown = format!("/bin/{name}");
        Ok(ShellPaths {
            name: name.to_string(),
            public: in_root(root, &shown)?,
            real: in_root(root, &format!("{shown}.real"))?,
            link: in_root(root, &format!("{SHELLS_DIR}/{name}"))?,
            shown,
            dir: SHELLS_DIR,
            program: false,
        })
    }

    /// A program at `path`, its own file inside the root (no symlink left
    /// in it: [`super::programs::own_file`]).
    pub(super) fn program(root: &Path, path: &str) -> io::Result<ShellPaths> {
        let name = path.rsplit('/').next().unwrap_or(path).to_string();
        Ok(ShellPaths {
            public: in_root(root, path)?,
            real: in_root(root, &format!("{path}.real"))?,
            link: in_root(root, &agentsh_proto::install::program_link(path))?,
            name,
            shown: path.to_string(),
            dir: PROGRAMS_DIR,
            program: true,
        })
    }

    /// What the link must point at: the original, kept beside the shim.
    pub(super) fn want(&self) -> PathBuf {
        PathBuf::from(format!("{}.real", self.shown))
    }

    /// The paths dpkg may know the file by (usr-merged Debian packages ship
    /// either `/bin/N` or `/usr/bin/N`).
    pub(super) fn dpkg_candidates(&self) -> Vec<String> {
        let mut v = vec![self.shown.clone()];
        if let Some(rest) = self.shown.strip_prefix("/bin/") {
            v.push(format!("/usr/bin/{rest}"));
        } else if let Some(rest) = self.shown.strip_prefix("/usr/bin/") {
            v.push(format!("/bin/{rest}"));
        }
        v
    }

    /// Whether the manifest lists it.
    pub(super) fn recorded(&self, m: &Manifest) -> bool {
        if self.program {
            m.programs.contains(&self.shown)
        } else {
            m.shells.contains(&self.name)
        }
    }

    /// Lists it in the manifest (once).
    pub(super) fn record(&self, m: &mut Manifest) -> bool {
        if self.recorded(m) {
            return false;
        }
        if self.program {
            m.programs.push(self.shown.clone());
        } else {
            m.shells.push(self.name.clone());
        }
        true
    }

    pub(super) fn state(&self, shim: Option<&[u8]>) -> ShellState {
        let name = &self.shown;
        let public = fs::symlink_metadata(&self.public).ok();
        let real_exists = fs::symlink_metadata(&self.real).is_ok();
        let public_bytes = match &public {
            Some(m) if m.file_type().is_file() => fs::read(&self.public).ok(),
            _ => None,
        };
        let public_is_shim = public_bytes
            .as_deref()
            .is_some_and(|b| contains(b, SHIM_MARKER));
        match (public.is_some(), public_is_shim, real_exists) {
            (false, _, false) => ShellState::Missing,
            (false, _, true) => ShellState::Inconsistent(format!(
                "{name} is missing but {name}.real exists; restore it with `mv {name}.real {name}`"
            )),
            (true, false, false) => ShellState::Original,
            (true, false, true) => ShellState::Inconsistent(format!(
                "{name}.real exists but {name} is not the agentsh shim; something replaced {name} \
                 after install: decide which one is the original and remove {name}.real or restore the shim"
            )),
            (true, true, false) => ShellState::Inconsistent(format!(
                "{name} is the agentsh shim but {name}.real is missing; reinstall the package that \
                 provides {name} (e.g. `apt-get install --reinstall dash`, or the package `dpkg -S {name}` names)"
            )),
            (true, true, true) => ShellState::Installed {
                current: shim.is_some_and(|s| public_bytes.as_deref() == Some(s)),
            },
        }
    }
}

pub(super) fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

pub(super) fn is_root_user() -> bool {
    // SAFETY: geteuid cannot fail.
    unsafe { libc::geteuid() == 0 }
}
