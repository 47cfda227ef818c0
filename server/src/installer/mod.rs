//! `agentsh shim install|uninstall|status`: puts agentsh-shell-shim in place of
//! `/bin/sh` (and optionally `/bin/bash`) and takes it out again.
//!
//! Layout after `install` (for each shell `N` of `sh`, `bash`):
//! * `/bin/N.real` — the original `/bin/N`, as a hard link of the very same
//!   inode (a symlink such as dash's `sh -> dash` stays a symlink);
//! * `/usr/lib/agentsh/shells/N` — a symlink to `/bin/N.real`. The shim execs
//!   this path, so the kernel names the process `N` (`comm` is the basename of
//!   the exec'd path) and `pgrep -x sh` keeps working;
//! * `/bin/N` — a copy of the shim binary, put in place with `rename(2)`, so
//!   `/bin/N` is never missing, not even for a moment;
//! * on Debian (a dpkg database exists in the root), a *local* dpkg diversion of
//!   `/bin/N` to `/bin/N.real`: package upgrades (dash, bash) then write their
//!   `/bin/N` to `/bin/N.real` instead of over the shim, and dash's postinst
//!   leaves a local diversion alone. A package diversion already there (dash
//!   diverts `/bin/sh` to `/bin/sh.distrib`) is replaced and restored on
//!   uninstall;
//! * `/etc/agentsh/shim.conf` — the documented default, root:root 0644, only if
//!   absent;
//! * `/usr/lib/agentsh/admin-shell` — a copy of the shim that, run from
//!   outside every supervised tree, gives the machine's admin an unsupervised
//!   (and audited) login shell (see the shim's `admin` module); not in
//!   /etc/shells;
//! * `/usr/lib/agentsh/shells/.install-manifest` — what this installer created,
//!   so `uninstall` removes exactly that and nothing else.
//!
//! Paths are resolved inside `--root` the way the kernel would resolve them
//! after a chroot: `/bin -> usr/bin` (usr-merge) and absolute symlinks stay in
//! the root. Failure modes: every step says what it did; a half-done install is
//! repaired by running `install` again, and every state the installer cannot
//! explain (e.g. `/bin/sh.real` exists but `/bin/sh` is not the shim) is refused
//! with what to check, never overwritten.
//!
//! Layout of this folder: `cli` (the `agentsh shim` subcommand), `paths`
//! (resolving inside a root; a shell's state), `manifest` (what install
//! created), `fsops` (atomic writes, links, ownership), `dpkg` (diversions);
//! this file holds install, uninstall and status themselves.

mod cli;
mod dpkg;
mod fsops;
mod manifest;
mod paths;
mod programs;

pub use cli::{run, ShimCommand};
pub use paths::in_root;

use dpkg::Dpkg;
use fsops::*;
use manifest::*;
use paths::*;
use std::fs;
use std::io::{self, Write};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// Where the real shells are linked from; must equal the shim's compile-time
/// `REAL_SHELL_DIR` (the end-to-end tests check that the pair works).
pub const SHELLS_DIR: &str = agentsh_proto::install::REAL_SHELL_DIR;
/// Where the programs' originals are linked from (`--programs`); the shim
/// finds its own there.
pub const PROGRAMS_DIR: &str = agentsh_proto::install::PROGRAMS_DIR;
/// The install record, inside [`SHELLS_DIR`].
pub const MANIFEST: &str = agentsh_proto::install::MANIFEST;
/// Bytes every agentsh-shell-shim binary carries (`agentsh_shell_shim::SHIM_MARKER`).
pub const SHIM_MARKER: &[u8] = agentsh_proto::install::SHIM_MARKER;
/// The default shim.conf written when none exists.
pub const DEFAULT_SHIM_CONF: &str = include_str!("../../../etc/agentsh/shim.conf");

#[derive(Debug, thiserror::Error)]
/// Everything that can stop install/uninstall; each says what to do.
pub enum InstallError {
    #[error("{what}: {source}")]
    Io { what: String, source: io::Error },
    #[error("{0}")]
    Refused(String),
    #[error("dpkg-divert {args}: {message}")]
    Dpkg { args: String, message: String },
}

fn io_err(what: impl Into<String>) -> impl FnOnce(io::Error) -> InstallError {
    let what = what.into();
    move |source| InstallError::Io { what, source }
}

#[derive(Debug, Clone)]
pub struct InstallOptions {
    pub root: PathBuf,
    pub bash: bool,
    /// Programs to stand in for besides the shells: names (looked up on
    /// the standard PATH inside the root), absolute paths, or `sdk`
    /// ([`programs::SDK_PROGRAMS`]).
    pub programs: Vec<String>,
    pub shim_binary: PathBuf,
}

/// Installs the shim; see the module docs. The steps are ordered for crash
/// safety (the manifest is written after each shell that changes, so a
/// second run resumes) and each step's output line is part of what the
/// operator reads.
///
/// # Errors
/// The first step that failed, with what to do; earlier steps stay done and a
/// second run picks up from there.
pub fn install(opts: &InstallOptions, out: &mut dyn Write) -> Result<(), InstallError> {
    let root = &opts.root;
    check_root_dir(root)?;
    let shim = read_shim(&opts.shim_binary)?;
    let mut manifest = read_manifest(root)?.unwrap_or_default();
    let dpkg = Dpkg::detect(root, out);
    let mut names = vec!["sh"];
    if opts.bash {
        names.push("bash");
    }
    let mut plan = plan(root, &names, &shim)?;
    plan.extend(programs::plan(root, &opts.programs, &manifest, &shim, out)?);
    let mut changed = false;
    for (paths, step) in plan {
        changed |= match step {
            Step::Update { current } => {
                update_shell(root, &paths, current, &shim, &mut manifest, out)?
            }
            Step::Replace => {
                replace_shell(root, &paths, &shim, &mut manifest, dpkg.as_ref(), out)?;
                true
            }
        };
    }
    changed |= ensure_conf(root, &mut manifest, out)?;
    changed |= ensure_admin_shell(root, &shim, &mut manifest, out)?;
    if changed {
        write_manifest(root, &mut manifest)?;
    } else {
        writeln!(out, "nothing to do: already installed").ok();
    }
    Ok(())
}

/// The shim binary to install; refused unless it carries the shim's marker.
fn read_shim(path: &Path) -> Result<Vec<u8>, InstallError> {
    let shim = fs::read(path).map_err(io_err(format!(
        "reading the shim binary {} (pass --shim-binary PATH)",
        path.display()
    )))?;
    if !contains(&shim, SHIM_MARKER) {
        return Err(InstallError::Refused(format!(
            "{} is not an agentsh-shell-shim binary; refusing to install it as /bin/sh",
            path.display()
        )));
    }
    Ok(shim)
}

/// What install does to one shell or program.
enum Step {
    /// The shim is there: repair its link, update its bytes unless `current`.
    Update { current: bool },
    /// The original shell is there: keep it as `/bin/N.real`, put the shim in.
    Replace,
}

/// Every shell is checked before anything changes: a missing or
/// inconsistent one refuses the whole install.
fn plan(
    root: &Path,
    names: &[&'static str],
    shim: &[u8],
) -> Result<Vec<(ShellPaths, Step)>, InstallError> {
    let mut plan = Vec::new();
    for &name in names {
        let paths =
            ShellPaths::new(root, name).map_err(io_err(format!("resolving /bin/{name}")))?;
        let step = match paths.state(Some(shim)) {
            ShellState::Missing => {
                return Err(InstallError::Refused(format!(
                    "/bin/{name} does not exist in {}; install {name} first",
                    root.display()
                )))
            }
            ShellState::Inconsistent(why) => return Err(InstallError::Refused(why)),
            ShellState::Installed { current } => Step::Update { current },
            ShellState::Original => Step::Replace,
        };
        plan.push((paths, step));
    }
    Ok(plan)
}

/// A shell whose shim is installed: its link repaired, its bytes updated
/// unless `current`, its name in the manifest. Whether anything changed.
fn update_shell(
    root: &Path,
    paths: &ShellPaths,
    current: bool,
    shim: &[u8],
    manifest: &mut Manifest,
    out: &mut dyn Write,
) -> Result<bool, InstallError> {
    let shown = &paths.shown;
    let mut changed = ensure_real_link(root, paths, manifest, out)?;
    if current {
        writeln!(out, "{shown}: the shim is already installed").ok();
    } else {
        write_atomic(&paths.public, shim, 0o755)?;
        writeln!(out, "{shown}: updated the shim binary").ok();
        changed = true;
    }
    changed |= paths.record(manifest);
    Ok(changed)
}

/// An original shell: diverted (dpkg), kept as `/bin/N.real`, linked, and
/// replaced by the shim, the manifest written before the shim goes in.
fn replace_shell(
    root: &Path,
    paths: &ShellPaths,
    shim: &[u8],
    manifest: &mut Manifest,
    dpkg: Option<&Dpkg>,
    out: &mut dyn Write,
) -> Result<(), InstallError> {
    let shown = &paths.shown;
    if let Some(d) = dpkg {
        d.divert(paths, manifest, out)?;
        write_manifest(root, manifest)?;
    }
    // Same directory, so never EXDEV; linkat without
    // AT_SYMLINK_FOLLOW links a symlink itself.
    link_no_follow(&paths.public, &paths.real)?;
    writeln!(
        out,
        "{shown}: original kept as {shown}.real{}",
        describe_link(&paths.real)
    )
    .ok();
    ensure_real_link(root, paths, manifest, out)?;
    paths.record(manifest);
    write_manifest(root, manifest)?;
    write_atomic(&paths.public, shim, 0o755)?;
    writeln!(out, "{shown}: now agentsh-shell-shim").ok();
    Ok(())
}

/// Restores the original shells and removes what `install` created, in the
/// order that keeps a crash safe (as [`install`]'s).
///
/// # Errors
/// A step that failed; the shells restored before it stay restored.
pub fn uninstall(root: &Path, out: &mut dyn Write) -> Result<(), InstallError> {
    check_root_dir(root)?;
    let Some(manifest) = read_manifest(root)? else {
        return nothing_installed(root, out);
    };
    for name in ["sh", "bash"] {
        if manifest.shells.iter().any(|s| s == name) {
            let paths =
                ShellPaths::new(root, name).map_err(io_err(format!("resolving /bin/{name}")))?;
            restore_shell(&paths, out)?;
        }
    }
    for p in &manifest.programs {
        let paths = ShellPaths::program(root, p).map_err(io_err(format!("resolving {p}")))?;
        restore_shell(&paths, out)?;
    }
    if !manifest.diversions.is_empty() || !manifest.prior_diversions.is_empty() {
        match Dpkg::detect(root, out) {
            Some(d) => d.undivert(&manifest, out)?,
            None => writeln!(
                out,
                "warning: the manifest lists dpkg diversions but dpkg-divert or the dpkg database is gone; \
                 check `dpkg-divert --list`"
            )
            .map_err(io_err("writing output"))?,
        }
    }
    let conf = in_root(root, agentsh_proto::shimconf::SHIM_CONF_PATH)
        .map_err(io_err("resolving shim.conf"))?;
    if manifest.created_conf {
        remove_default_conf(&conf, out)?;
    }
    if manifest.admin_shell {
        remove_admin_shell(root, out)?;
    }
    let manifest_path = in_root(root, MANIFEST).map_err(io_err("resolving the manifest"))?;
    fs::remove_file(&manifest_path)
        .map_err(io_err(format!("removing {}", manifest_path.display())))?;
    for d in manifest.created_dirs.iter().rev() {
        let p = in_root(root, d).map_err(io_err(format!("resolving {d}")))?;
        match fs::remove_dir(&p) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(_) => {
                writeln!(out, "kept {d}: not empty").ok();
            }
        }
    }
    writeln!(out, "uninstalled").ok();
    Ok(())
}

/// No manifest: nothing to do, unless a shell looks modified (then the
/// operator restores it by hand).
fn nothing_installed(root: &Path, out: &mut dyn Write) -> Result<(), InstallError> {
    for name in ["sh", "bash"] {
        let paths =
            ShellPaths::new(root, name).map_err(io_err(format!("resolving /bin/{name}")))?;
        if let ShellState::Installed { .. } | ShellState::Inconsistent(_) = paths.state(None) {
            return Err(InstallError::Refused(format!(
                "no install manifest ({MANIFEST}) but /bin/{name} looks modified; restore it by hand \
                 (`mv /bin/{name}.real /bin/{name}`)"
            )));
        }
    }
    writeln!(out, "nothing to do: the shim is not installed").ok();
    Ok(())
}

/// `/bin/N` back from `/bin/N.real` (a program's `PATH` from `PATH.real`),
/// and its link removed.
fn restore_shell(paths: &ShellPaths, out: &mut dyn Write) -> Result<(), InstallError> {
    let shown = &paths.shown;
    match paths.state(None) {
        ShellState::Installed { .. } => {
            fs::rename(&paths.real, &paths.public)
                .map_err(io_err(format!("restoring {shown} from {shown}.real")))?;
            writeln!(out, "{shown}: original restored").ok();
        }
        ShellState::Original => {
            writeln!(out, "{shown}: already the original").ok();
        }
        ShellState::Missing => {
            return Err(InstallError::Refused(format!(
                "not touching {shown}: it is missing"
            )));
        }
        ShellState::Inconsistent(why) => {
            return Err(InstallError::Refused(format!(
                "not touching {shown}: {why}"
            )));
        }
    }
    remove_if_symlink(&paths.link)
}

/// The shim.conf install wrote (`conf`, in the root), unless it was edited
/// since.
fn remove_default_conf(conf: &Path, out: &mut dyn Write) -> Result<(), InstallError> {
    match fs::read(conf) {
        Ok(b) if b == DEFAULT_SHIM_CONF.as_bytes() => {
            fs::remove_file(conf).map_err(io_err(format!("removing {}", conf.display())))?;
            writeln!(out, "removed the default /etc/agentsh/shim.conf").ok();
        }
        Ok(_) => {
            writeln!(
                out,
                "kept /etc/agentsh/shim.conf: it was edited after install"
            )
            .ok();
        }
        Err(_) => {}
    }
    Ok(())
}

/// The admin shell install put in place.
fn remove_admin_shell(root: &Path, out: &mut dyn Write) -> Result<(), InstallError> {
    let p = in_root(root, ADMIN_SHELL).map_err(io_err("resolving the admin shell"))?;
    match fs::remove_file(&p) {
        Ok(()) => {
            writeln!(out, "removed {ADMIN_SHELL}").ok();
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(io_err(format!("removing {ADMIN_SHELL}"))(e)),
    }
    Ok(())
}

/// The files of the shims installed in `root`, as this machine names them
/// (every symlink followed): the shells, the programs and the admin shell.
/// Empty where the shim is not installed (no manifest).
pub fn shim_files(root: &Path) -> std::collections::HashSet<String> {
    let Ok(Some(m)) = read_manifest(root) else {
        return Default::default();
    };
    let mut paths: Vec<String> = m.shells.iter().map(|s| format!("/bin/{s}")).collect();
    paths.extend(m.programs.iter().cloned());
    paths.push(ADMIN_SHELL.to_string());
    paths
        .iter()
        .filter_map(|p| in_root(root, p).ok()?.canonicalize().ok())
        .map(|p| p.display().to_string())
        .collect()
}

/// The shell and program shims installed in `root` (as this machine names
/// their files, every symlink followed) and what each execs inside a tree:
/// what the supervisor may exec in the shim's place
/// (`supervisor::shimhops`). Empty where the shim is not installed.
pub fn hop_files(root: &Path) -> Vec<(std::path::PathBuf, crate::supervisor::shimhops::HopTo)> {
    use crate::supervisor::shimhops::HopTo;
    let Ok(Some(m)) = read_manifest(root) else {
        return Vec::new();
    };
    let shells = m.shells.iter().map(|s| (format!("/bin/{s}"), HopTo::Shell));
    let programs = m.programs.iter().map(|p| {
        let link = agentsh_proto::install::program_link(p);
        (p.clone(), HopTo::Program(link))
    });
    shells
        .chain(programs)
        .filter_map(|(p, to)| Some((in_root(root, &p).ok()?.canonicalize().ok()?, to)))
        .collect()
}

/// What an SDK's commands meet in `root`, for `agentsh ready` and
/// `agentsh detect`: which shells and programs the shim stands in for, and
/// the gap every other program run without a shell falls into. Empty where
/// the shim is not installed.
pub fn coverage(root: &Path) -> Vec<String> {
    let Ok(Some(m)) = read_manifest(root) else {
        return Vec::new();
    };
    let shells: Vec<String> = m.shells.iter().map(|s| format!("/bin/{s}")).collect();
    let programs = if m.programs.is_empty() {
        "none (`agentsh shim install --programs sdk` adds the interpreters SDKs run directly: python3, node, ruby, php)".to_string()
    } else {
        m.programs.join(", ")
    };
    vec![
        format!(
            "supervised when an SDK runs them: shells {}; programs run without a shell: {programs}",
            shells.join(", ")
        ),
        "NOT supervised: any other program an SDK runs without a shell (`sb.exec(\"perl\", ...)`, \
         `podman exec CTR perl ...`); each such run is recorded as an unsupervised_run event; \
         `agentsh shim install --programs NAME` covers it"
            .to_string(),
    ]
}

/// A human-readable report of what is installed.
pub struct Status {
    pub report: String,
    pub installed_and_consistent: bool,
}

/// Inspects a root without changing anything.
///
/// # Errors
/// The root is not a directory, or the manifest cannot be read.
pub fn status(root: &Path) -> Result<Status, InstallError> {
    check_root_dir(root)?;
    let manifest = read_manifest(root)?;
    let mut report = String::new();
    let mut ok = manifest.is_some();
    let mut any = false;
    let mut entries = Vec::new();
    for name in ["sh", "bash"] {
        entries
            .push(ShellPaths::new(root, name).map_err(io_err(format!("resolving /bin/{name}")))?);
    }
    for p in manifest.iter().flat_map(|m| m.programs.iter()) {
        entries.push(ShellPaths::program(root, p).map_err(io_err(format!("resolving {p}")))?);
    }
    for paths in &entries {
        let (line, consistent, installed) = status_line(paths, manifest.as_ref());
        ok &= consistent;
        any |= installed;
        report += &line;
        report.push('\n');
    }
    if let Some(m) = &manifest {
        for (p, to) in &m.diversions {
            report += &format!("dpkg: local diversion {p} -> {to}\n");
        }
    }
    let conf_path = in_root(root, agentsh_proto::shimconf::SHIM_CONF_PATH)
        .map_err(io_err("resolving shim.conf"))?;
    report += &match agentsh_proto::shimconf::load(&conf_path.to_string_lossy()) {
        agentsh_proto::shimconf::Loaded::Trusted(c) => format!(
            "/etc/agentsh/shim.conf: trusted; shim_install={} server={} session={}\n",
            c.mode.as_str(),
            c.server,
            c.session
        ),
        agentsh_proto::shimconf::Loaded::Absent => {
            "/etc/agentsh/shim.conf: absent (defaults: shim_install=auto)\n".to_string()
        }
        agentsh_proto::shimconf::Loaded::Untrusted { reason } => {
            format!(
                "/etc/agentsh/shim.conf: DISTRUSTED ({reason}); shells act as shim_install=on\n"
            )
        }
        agentsh_proto::shimconf::Loaded::Invalid(e) => {
            format!("/etc/agentsh/shim.conf: INVALID ({e}); every shell refuses to run\n")
        }
    };
    Ok(Status {
        report,
        installed_and_consistent: ok && any,
    })
}

/// One line of `status` for a shell or program: the line, whether it is
/// consistent, whether the shim is installed there.
fn status_line(paths: &ShellPaths, manifest: Option<&Manifest>) -> (String, bool, bool) {
    let shown = &paths.shown;
    let what = if paths.program { "program" } else { "shell" };
    match paths.state(None) {
        ShellState::Missing if paths.program => (
            format!("{shown}: MISSING, though the manifest lists it as a program the shim stands in for"),
            false,
            false,
        ),
        ShellState::Missing => (format!("{shown}: not present"), true, false),
        ShellState::Original => {
            if manifest.is_some_and(|m| paths.recorded(m)) {
                (format!("{shown}: the ORIGINAL {what}, but the manifest says the shim was installed; run `agentsh shim install` again"), false, false)
            } else {
                (format!("{shown}: the original {what} (shim not installed)"), true, false)
            }
        }
        ShellState::Installed { .. } => {
            let link_ok = fs::read_link(&paths.link).is_ok_and(|t| t == paths.want());
            let line = format!(
                "{shown}: agentsh-shell-shim; real {what} {shown}.real{}; {}/{} {}",
                describe_link(&paths.real),
                paths.dir,
                paths.name,
                if link_ok { "ok" } else { "MISSING or wrong: run `agentsh shim install` again" }
            );
            (line, link_ok, true)
        }
        ShellState::Inconsistent(why) => (format!("{shown}: INCONSISTENT: {why}"), false, false),
    }
}

#[cfg(test)]
#[path = "tests.rs"]
mod tests;
