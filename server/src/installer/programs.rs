//! The programs the shim stands in for besides the shells (`--programs`):
//! what an SDK runs without a shell (`sb.exec("python3", ...)`, `podman
//! exec CTR node ...`) meets the shim first, as a shell does.
//!
//! A program is installed at its own file: every symlink to it followed
//! (`/usr/bin/python3 -> python3.11` installs at `/usr/bin/python3.11`), so
//! every name that leads there (`python3`, `python`, `python3.11`, a venv's
//! `bin/python`) runs the shim. Its original is kept as `PATH.real` (same
//! inode) and linked from `/usr/lib/agentsh/programs/NAME`, the path the
//! shim execs; the shim knows which program it stands for from the file the
//! kernel ran (`/proc/self/exe`), never from argv[0].
//!
//! Failure modes: a name that is not in the root is refused (`sdk`'s names
//! are skipped, said); two programs with one basename, a shell, and
//! agentsh's own binaries are refused before anything changes.

use super::*;
use std::collections::BTreeMap;

/// What `--programs sdk` stands for: the interpreters the SDKs' docs run
/// without a shell (Modal's: `sb.exec("python", ...)`, `"node"`, `"ruby"`,
/// `"php"`); each one absent from the root is skipped. Scripts they run
/// (`pip`, `npm`, `npx`) start their interpreter, so they are covered
/// with it.
pub const SDK_PROGRAMS: &[&str] = &["python3", "python", "node", "nodejs", "ruby", "php"];

/// Where a name is looked for, in the order of the default PATH.
const SEARCH: &[&str] = &["/usr/local/bin", "/usr/bin", "/bin"];

/// What install does to each program: the manifest's and those asked for,
/// every one checked before anything changes.
pub(super) fn plan(
    root: &Path,
    requested: &[String],
    manifest: &Manifest,
    shim: &[u8],
    out: &mut dyn Write,
) -> Result<Vec<(ShellPaths, Step)>, InstallError> {
    let mut wanted: Vec<String> = manifest.programs.clone();
    for (spec, optional) in expand(requested) {
        match find(root, &spec)? {
            Some(p) if !wanted.contains(&p) => wanted.push(p),
            Some(_) => {}
            None if optional => {
                writeln!(out, "{spec}: not in this root, skipped").ok();
            }
            None => {
                return Err(InstallError::Refused(format!(
                "{spec}: no such program in {} (looked for {}); install it first or name its path",
                root.display(),
                SEARCH
                    .iter()
                    .map(|d| format!("{d}/{spec}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            )))
            }
        }
    }
    let shells = shell_files(root);
    let mut names: BTreeMap<String, String> = BTreeMap::new();
    let mut plan = Vec::new();
    for p in wanted {
        let paths = ShellPaths::program(root, &p).map_err(io_err(format!("resolving {p}")))?;
        check_name(&paths.name, &p)?;
        if let Some((shell, _)) = shells.iter().find(|(_, f)| *f == p) {
            return Err(InstallError::Refused(format!(
                "{p} is a shell ({shell} leads to it): `agentsh shim install` stands in for sh, \
                 and for bash with --bash"
            )));
        }
        if let Some(other) = names.insert(paths.name.clone(), p.clone()) {
            return Err(InstallError::Refused(format!(
                "{other} and {p} have one name, {}; the shim can stand in for one of them only",
                paths.name
            )));
        }
        let step = match paths.state(Some(shim)) {
            ShellState::Missing => {
                return Err(InstallError::Refused(format!(
                    "{p} is listed in the manifest but missing; reinstall its package, or run \
                     `agentsh shim uninstall` first"
                )))
            }
            ShellState::Inconsistent(why) => return Err(InstallError::Refused(why)),
            ShellState::Installed { current } => Step::Update { current },
            ShellState::Original => {
                check_executable(&paths)?;
                Step::Replace
            }
        };
        plan.push((paths, step));
    }
    Ok(plan)
}

/// The names asked for, `sdk` expanded; whether each may be absent.
fn expand(requested: &[String]) -> Vec<(String, bool)> {
    let mut v = Vec::new();
    for r in requested.iter().flat_map(|r| r.split(',')) {
        let r = r.trim();
        if r == "sdk" {
            v.extend(SDK_PROGRAMS.iter().map(|n| ((*n).to_string(), true)));
        } else if !r.is_empty() {
            v.push((r.to_string(), false));
        }
    }
    v
}

/// `spec` (a name or an absolute path) to its own file inside the root;
/// `None` when there is none.
fn find(root: &Path, spec: &str) -> Result<Option<String>, InstallError> {
    let candidates: Vec<String> = if spec.starts_with('/') {
        vec![spec.to_string()]
    } else if spec.contains('/') || spec == "." || spec == ".." {
        return Err(InstallError::Refused(format!(
            "{spec}: a program is a name (python3) or an absolute path (/usr/bin/python3)"
        )));
    } else {
        SEARCH.iter().map(|d| format!("{d}/{spec}")).collect()
    };
    for c in candidates {
        let host = in_root(root, &c).map_err(io_err(format!("resolving {c}")))?;
        if fs::symlink_metadata(&host).is_err() {
            continue;
        }
        return own_file(root, &c)
            .map(Some)
            .map_err(io_err(format!("following the links of {c}")));
    }
    Ok(None)
}

/// `path` with every symlink followed inside the root, the last one too:
/// the file the kernel would run, as the root names it.
pub(super) fn own_file(root: &Path, path: &str) -> io::Result<String> {
    let mut p = path.to_string();
    for _ in 0..40 {
        let host = in_root(root, &p)?;
        let inside = host
            .strip_prefix(root)
            .map_err(|_| io::Error::other(format!("{} left the root", host.display())))?;
        let inside = format!("/{}", inside.display());
        if !fs::symlink_metadata(&host)?.file_type().is_symlink() {
            return Ok(inside);
        }
        let target = fs::read_link(&host)?;
        p = if target.is_absolute() {
            target.display().to_string()
        } else {
            let dir = inside.rsplit_once('/').map_or("", |(d, _)| d);
            format!("{dir}/{}", target.display())
        };
    }
    Err(io::Error::from_raw_os_error(libc::ELOOP))
}

/// The files the shells and their kept originals lead to: never a program.
fn shell_files(root: &Path) -> Vec<(&'static str, String)> {
    ["/bin/sh", "/bin/sh.real", "/bin/bash", "/bin/bash.real"]
        .into_iter()
        .filter_map(|s| own_file(root, s).ok().map(|f| (s, f)))
        .collect()
}

/// The shells have their own option; agentsh's own binaries and what lives
/// in its directories are never stood in for.
fn check_name(name: &str, path: &str) -> Result<(), InstallError> {
    if name == "sh" || name == "bash" {
        return Err(InstallError::Refused(format!(
            "{path} is a shell: `agentsh shim install` stands in for sh, and for bash with --bash"
        )));
    }
    if name.starts_with("agentsh") || path.starts_with("/usr/lib/agentsh/") {
        return Err(InstallError::Refused(format!(
            "{path} is agentsh's own; the shim cannot stand in for it"
        )));
    }
    if name.ends_with(".real") || name.chars().any(char::is_whitespace) {
        return Err(InstallError::Refused(format!(
            "{path}: the shim cannot stand in for a program named {name:?}"
        )));
    }
    Ok(())
}

/// Only an executable regular file is stood in for.
fn check_executable(paths: &ShellPaths) -> Result<(), InstallError> {
    use std::os::unix::fs::PermissionsExt;
    let md = fs::metadata(&paths.public).map_err(io_err(format!("reading {}", paths.shown)))?;
    if !md.is_file() || md.permissions().mode() & 0o111 == 0 {
        return Err(InstallError::Refused(format!(
            "{} is not an executable file",
            paths.shown
        )));
    }
    Ok(())
}
