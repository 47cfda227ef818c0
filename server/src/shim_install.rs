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
//! * `/usr/lib/agentsh/shells/.install-manifest` — what this installer created,
//!   so `uninstall` removes exactly that and nothing else.
//!
//! Paths are resolved inside `--root` the way the kernel would resolve them
//! after a chroot: `/bin -> usr/bin` (usr-merge) and absolute symlinks stay in
//! the root. Failure modes: every step says what it did; a half-done install is
//! repaired by running `install` again, and every state the installer cannot
//! explain (e.g. `/bin/sh.real` exists but `/bin/sh` is not the shim) is refused
//! with what to check, never overwritten.

use std::fs;
use std::io::{self, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Component, Path, PathBuf};
use std::process::Command;

/// Where the real shells are linked from; must equal the shim's compile-time
/// `REAL_SHELL_DIR` (the end-to-end tests check that the pair works).
pub const SHELLS_DIR: &str = agentsh_proto::install::REAL_SHELL_DIR;
/// The install record, inside [`SHELLS_DIR`].
pub const MANIFEST: &str = "/usr/lib/agentsh/shells/.install-manifest";
/// Bytes every agentsh-shell-shim binary carries (`agentsh_shell_shim::SHIM_MARKER`).
pub const SHIM_MARKER: &[u8] = agentsh_proto::install::SHIM_MARKER;
/// The default shim.conf written when none exists.
pub const DEFAULT_SHIM_CONF: &str = include_str!("../../etc/agentsh/shim.conf");

const INSTALL_HELP: &str = "\
Replaces /bin/sh (and with --bash also /bin/bash) by agentsh-shell-shim, which \
puts every shell the container runs under agentsh's kernel supervision.

What it does, for each shell N:
  /bin/N.real                  the original /bin/N (same inode; a symlink stays a symlink)
  /usr/lib/agentsh/shells/N    symlink to /bin/N.real, the path the shim execs (keeps `comm` = N)
  /bin/N                       the shim, copied in atomically (write + rename)
  dpkg                         a local diversion /bin/N -> /bin/N.real when a dpkg database
                               exists in the root, so package upgrades cannot re-link /bin/N
  /etc/agentsh/shim.conf       the documented default (root:root 0644), only if absent

Running it again is a no-op (or updates the shim binary). `agentsh shim uninstall` \
restores the original files and removes only what install created. With --root, \
everything happens inside DIR (an image being built, a test root); dpkg-divert is \
pointed at DIR's database with --root, and skipped when DIR has no dpkg database.";

/// The `agentsh shim ...` subcommands.
#[derive(Debug, clap::Subcommand)]
pub enum ShimCommand {
    /// Install the shim as /bin/sh (and optionally /bin/bash).
    #[command(long_about = INSTALL_HELP)]
    Install {
        /// Also replace /bin/bash.
        #[arg(long)]
        bash: bool,
        /// Root directory of the system to change.
        #[arg(long, value_name = "DIR", default_value = "/")]
        root: PathBuf,
        /// The agentsh-shell-shim binary to install [default: next to this agentsh binary].
        #[arg(long, value_name = "PATH")]
        shim_binary: Option<PathBuf>,
    },
    /// Restore the original shells and remove what `install` created.
    Uninstall {
        /// Root directory of the system to change.
        #[arg(long, value_name = "DIR", default_value = "/")]
        root: PathBuf,
    },
    /// Show what is installed. Exit 0 when the shim is installed and consistent.
    Status {
        /// Root directory of the system to inspect.
        #[arg(long, value_name = "DIR", default_value = "/")]
        root: PathBuf,
    },
}

/// Runs a `shim` subcommand; returns the process exit code.
pub fn run(cmd: ShimCommand) -> i32 {
    let mut out = io::stdout();
    let result = match cmd {
        ShimCommand::Install {
            bash,
            root,
            shim_binary,
        } => default_shim_binary(shim_binary).and_then(|shim| {
            install(
                &InstallOptions {
                    root,
                    bash,
                    shim_binary: shim,
                },
                &mut out,
            )
        }),
        ShimCommand::Uninstall { root } => uninstall(&root, &mut out),
        ShimCommand::Status { root } => {
            return match status(&root) {
                Ok(s) => {
                    let _ = write!(out, "{}", s.report);
                    if s.installed_and_consistent {
                        0
                    } else {
                        1
                    }
                }
                Err(e) => {
                    eprintln!("agentsh shim status: {e}");
                    2
                }
            }
        }
    };
    match result {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("agentsh shim: {e}");
            1
        }
    }
}

fn default_shim_binary(given: Option<PathBuf>) -> Result<PathBuf, InstallError> {
    if let Some(p) = given {
        return Ok(p);
    }
    let exe = std::env::current_exe().map_err(|e| InstallError::Io {
        what: "locating the agentsh binary".into(),
        source: e,
    })?;
    Ok(exe.with_file_name("agentsh-shell-shim"))
}

/// Everything that can stop install/uninstall; each says what to do.
#[derive(Debug, thiserror::Error)]
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
    pub shim_binary: PathBuf,
}

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
            .chain(resolved.iter().map(|s| s.as_os_str()))
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

/// What `install` recorded, one entry per line of the manifest.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Manifest {
    /// Directories created, in creation order (inside the root).
    created_dirs: Vec<String>,
    /// shim.conf was written by install (removed on uninstall if unchanged).
    created_conf: bool,
    /// Shells installed (`sh`, `bash`).
    shells: Vec<String>,
    /// Local diversions added: (diverted path, divert-to).
    diversions: Vec<(String, String)>,
    /// Package diversions replaced: (path, package, divert-to), restored on uninstall.
    prior_diversions: Vec<(String, String, String)>,
}

impl Manifest {
    fn render(&self) -> String {
        let mut s = String::from(
            "# Written by `agentsh shim install`; read by `agentsh shim uninstall`. Do not edit.\n",
        );
        for d in &self.created_dirs {
            s += &format!("created-dir {d}\n");
        }
        if self.created_conf {
            s += "created-conf\n";
        }
        for sh in &self.shells {
            s += &format!("shell {sh}\n");
        }
        for (p, to) in &self.diversions {
            s += &format!("diversion {p} {to}\n");
        }
        for (p, pkg, to) in &self.prior_diversions {
            s += &format!("prior-diversion {p} {pkg} {to}\n");
        }
        s
    }

    fn parse(text: &str) -> Result<Manifest, String> {
        let mut m = Manifest::default();
        for (i, line) in text.lines().enumerate() {
            if line.starts_with('#') || line.trim().is_empty() {
                continue;
            }
            let f: Vec<&str> = line.split(' ').collect();
            match f.as_slice() {
                ["created-dir", d] => m.created_dirs.push(d.to_string()),
                ["created-conf"] => m.created_conf = true,
                ["shell", s] if *s == "sh" || *s == "bash" => m.shells.push(s.to_string()),
                ["diversion", p, to] => m.diversions.push((p.to_string(), to.to_string())),
                ["prior-diversion", p, pkg, to] => {
                    m.prior_diversions
                        .push((p.to_string(), pkg.to_string(), to.to_string()))
                }
                _ => return Err(format!("line {}: unexpected {line:?}", i + 1)),
            }
        }
        Ok(m)
    }
}

/// The state of one shell in a root.
#[derive(Debug, Clone, PartialEq, Eq)]
enum ShellState {
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

struct ShellPaths {
    name: &'static str,
    /// `/bin/N` on this machine.
    public: PathBuf,
    /// `/bin/N.real` on this machine.
    real: PathBuf,
    /// `/usr/lib/agentsh/shells/N` on this machine.
    link: PathBuf,
}

impl ShellPaths {
    fn new(root: &Path, name: &'static str) -> io::Result<ShellPaths> {
        Ok(ShellPaths {
            name,
            public: in_root(root, &format!("/bin/{name}"))?,
            real: in_root(root, &format!("/bin/{name}.real"))?,
            link: in_root(root, &format!("{SHELLS_DIR}/{name}"))?,
        })
    }

    fn state(&self, shim: Option<&[u8]>) -> ShellState {
        let name = self.name;
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
                "/bin/{name} is missing but /bin/{name}.real exists; restore it with `mv /bin/{name}.real /bin/{name}`"
            )),
            (true, false, false) => ShellState::Original,
            (true, false, true) => ShellState::Inconsistent(format!(
                "/bin/{name}.real exists but /bin/{name} is not the agentsh shim; something replaced /bin/{name} \
                 after install: decide which one is the real shell and remove /bin/{name}.real or restore the shim"
            )),
            (true, true, false) => ShellState::Inconsistent(format!(
                "/bin/{name} is the agentsh shim but /bin/{name}.real is missing; reinstall the package that \
                 provides /bin/{name} (e.g. `apt-get install --reinstall dash`)"
            )),
            (true, true, true) => ShellState::Installed {
                current: shim.is_some_and(|s| public_bytes.as_deref() == Some(s)),
            },
        }
    }
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

fn is_root_user() -> bool {
    // SAFETY: geteuid cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// Installs the shim; see the module docs.
///
/// # Errors
/// The first step that failed, with what to do; earlier steps stay done and a
/// second run picks up from there.
pub fn install(opts: &InstallOptions, out: &mut dyn Write) -> Result<(), InstallError> {
    let root = &opts.root;
    check_root_dir(root)?;
    let shim = fs::read(&opts.shim_binary).map_err(io_err(format!(
        "reading the shim binary {} (pass --shim-binary PATH)",
        opts.shim_binary.display()
    )))?;
    if !contains(&shim, SHIM_MARKER) {
        return Err(InstallError::Refused(format!(
            "{} is not an agentsh-shell-shim binary; refusing to install it as /bin/sh",
            opts.shim_binary.display()
        )));
    }
    let mut manifest = read_manifest(root)?.unwrap_or_default();
    let dpkg = Dpkg::detect(root, out);
    let mut names = vec!["sh"];
    if opts.bash {
        names.push("bash");
    }
    // Every shell is checked before anything changes.
    let mut plan = Vec::new();
    for name in names {
        let paths =
            ShellPaths::new(root, name).map_err(io_err(format!("resolving /bin/{name}")))?;
        match paths.state(Some(&shim)) {
            ShellState::Missing => {
                return Err(InstallError::Refused(format!(
                    "/bin/{name} does not exist in {}; install {name} first",
                    root.display()
                )))
            }
            ShellState::Inconsistent(why) => return Err(InstallError::Refused(why)),
            state => plan.push((name, paths, state)),
        }
    }
    let mut changed = false;
    for (name, paths, state) in plan {
        match state {
            ShellState::Missing | ShellState::Inconsistent(_) => unreachable!("refused above"),
            ShellState::Installed { current } => {
                changed |= ensure_real_link(root, &paths, &mut manifest, out)?;
                if current {
                    writeln!(out, "/bin/{name}: the shim is already installed").ok();
                } else {
                    write_atomic(&paths.public, &shim, 0o755)?;
                    writeln!(out, "/bin/{name}: updated the shim binary").ok();
                    changed = true;
                }
                if !manifest.shells.iter().any(|s| s == name) {
                    manifest.shells.push(name.to_string());
                    changed = true;
                }
            }
            ShellState::Original => {
                if let Some(d) = &dpkg {
                    d.divert(name, &mut manifest, out)?;
                    write_manifest(root, &mut manifest)?;
                }
                // Same directory, so never EXDEV; linkat without
                // AT_SYMLINK_FOLLOW links a symlink itself.
                link_no_follow(&paths.public, &paths.real)?;
                writeln!(
                    out,
                    "/bin/{name}: original kept as /bin/{name}.real{}",
                    describe_link(&paths.real)
                )
                .ok();
                ensure_real_link(root, &paths, &mut manifest, out)?;
                manifest.shells.push(name.to_string());
                write_manifest(root, &mut manifest)?;
                write_atomic(&paths.public, &shim, 0o755)?;
                writeln!(out, "/bin/{name}: now agentsh-shell-shim").ok();
                changed = true;
            }
        }
    }
    changed |= ensure_conf(root, &mut manifest, out)?;
    if changed {
        write_manifest(root, &mut manifest)?;
    } else {
        writeln!(out, "nothing to do: already installed").ok();
    }
    Ok(())
}

/// Restores the original shells and removes what `install` created.
///
/// # Errors
/// A step that failed; the shells restored before it stay restored.
pub fn uninstall(root: &Path, out: &mut dyn Write) -> Result<(), InstallError> {
    check_root_dir(root)?;
    let Some(manifest) = read_manifest(root)? else {
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
        return Ok(());
    };
    for name in ["sh", "bash"] {
        if !manifest.shells.iter().any(|s| s == name) {
            continue;
        }
        let paths =
            ShellPaths::new(root, name).map_err(io_err(format!("resolving /bin/{name}")))?;
        match paths.state(None) {
            ShellState::Installed { .. } => {
                fs::rename(&paths.real, &paths.public).map_err(io_err(format!(
                    "restoring /bin/{name} from /bin/{name}.real"
                )))?;
                writeln!(out, "/bin/{name}: original restored").ok();
            }
            ShellState::Original => {
                writeln!(out, "/bin/{name}: already the original").ok();
            }
            ShellState::Missing | ShellState::Inconsistent(_) => {
                let why = match paths.state(None) {
                    ShellState::Inconsistent(w) => w,
                    _ => format!("/bin/{name} is missing"),
                };
                return Err(InstallError::Refused(format!(
                    "not touching /bin/{name}: {why}"
                )));
            }
        }
        remove_if_symlink(&paths.link)?;
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
        match fs::read(&conf) {
            Ok(b) if b == DEFAULT_SHIM_CONF.as_bytes() => {
                fs::remove_file(&conf).map_err(io_err(format!("removing {}", conf.display())))?;
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
    for name in ["sh", "bash"] {
        let paths =
            ShellPaths::new(root, name).map_err(io_err(format!("resolving /bin/{name}")))?;
        let line = match paths.state(None) {
            ShellState::Missing => format!("/bin/{name}: not present"),
            ShellState::Original => {
                if manifest
                    .as_ref()
                    .is_some_and(|m| m.shells.iter().any(|s| s == name))
                {
                    ok = false;
                    format!("/bin/{name}: the ORIGINAL shell, but the manifest says the shim was installed; run `agentsh shim install` again")
                } else {
                    format!("/bin/{name}: the original shell (shim not installed)")
                }
            }
            ShellState::Installed { .. } => {
                any = true;
                let link_ok = fs::read_link(&paths.link)
                    .is_ok_and(|t| t == Path::new(&format!("/bin/{name}.real")));
                if !link_ok {
                    ok = false;
                }
                format!(
                    "/bin/{name}: agentsh-shell-shim; real shell /bin/{name}.real{}; {SHELLS_DIR}/{name} {}",
                    describe_link(&paths.real),
                    if link_ok { "ok" } else { "MISSING or wrong: run `agentsh shim install` again" }
                )
            }
            ShellState::Inconsistent(why) => {
                ok = false;
                format!("/bin/{name}: INCONSISTENT: {why}")
            }
        };
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

fn check_root_dir(root: &Path) -> Result<(), InstallError> {
    if !root.is_absolute() || !root.is_dir() {
        return Err(InstallError::Refused(format!(
            "--root {} is not an absolute path to a directory",
            root.display()
        )));
    }
    if root == Path::new("/") && !is_root_user() {
        return Err(InstallError::Refused(
            "changing /bin/sh needs root; run as root (or use --root DIR on a copy)".into(),
        ));
    }
    Ok(())
}

fn read_manifest(root: &Path) -> Result<Option<Manifest>, InstallError> {
    let p = in_root(root, MANIFEST).map_err(io_err("resolving the manifest"))?;
    match fs::read_to_string(&p) {
        Ok(t) => Manifest::parse(&t).map(Some).map_err(|e| {
            InstallError::Refused(format!("{} is damaged ({e}); restore by hand", p.display()))
        }),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(io_err(format!("reading {}", p.display()))(e)),
    }
}

fn write_manifest(root: &Path, m: &mut Manifest) -> Result<(), InstallError> {
    ensure_dirs(root, SHELLS_DIR, m)?;
    let p = in_root(root, MANIFEST).map_err(io_err("resolving the manifest"))?;
    write_atomic(&p, m.render().as_bytes(), 0o644)
}

/// Creates `dir` and its missing parents (0755, root-owned), recording each
/// created one in the manifest.
fn ensure_dirs(root: &Path, dir: &str, m: &mut Manifest) -> Result<(), InstallError> {
    let mut prefix = String::new();
    for comp in dir.split('/').filter(|c| !c.is_empty()) {
        prefix.push('/');
        prefix.push_str(comp);
        let host = in_root(root, &prefix).map_err(io_err(format!("resolving {prefix}")))?;
        if fs::symlink_metadata(&host).is_ok() {
            continue;
        }
        fs::create_dir(&host).map_err(io_err(format!("creating {}", host.display())))?;
        fs::set_permissions(&host, fs::Permissions::from_mode(0o755))
            .map_err(io_err(format!("chmod {}", host.display())))?;
        chown_root(&host)?;
        m.created_dirs.push(prefix.clone());
    }
    Ok(())
}

/// `/usr/lib/agentsh/shells/N -> /bin/N.real`, created or repaired atomically.
fn ensure_real_link(
    root: &Path,
    paths: &ShellPaths,
    m: &mut Manifest,
    out: &mut dyn Write,
) -> Result<bool, InstallError> {
    let want = PathBuf::from(format!("/bin/{}.real", paths.name));
    if fs::read_link(&paths.link).is_ok_and(|t| t == want) {
        return Ok(false);
    }
    ensure_dirs(root, SHELLS_DIR, m)?;
    let tmp = sibling_tmp(&paths.link);
    let _ = fs::remove_file(&tmp);
    std::os::unix::fs::symlink(&want, &tmp)
        .map_err(io_err(format!("creating {}", tmp.display())))?;
    fs::rename(&tmp, &paths.link).map_err(io_err(format!("creating {}", paths.link.display())))?;
    writeln!(out, "{SHELLS_DIR}/{} -> {}", paths.name, want.display()).ok();
    Ok(true)
}

/// Writes the default shim.conf if none exists.
fn ensure_conf(root: &Path, m: &mut Manifest, out: &mut dyn Write) -> Result<bool, InstallError> {
    let conf = in_root(root, agentsh_proto::shimconf::SHIM_CONF_PATH)
        .map_err(io_err("resolving shim.conf"))?;
    if fs::symlink_metadata(&conf).is_ok() {
        return Ok(false);
    }
    ensure_dirs(root, "/etc/agentsh", m)?;
    write_atomic(&conf, DEFAULT_SHIM_CONF.as_bytes(), 0o644)?;
    m.created_conf = true;
    writeln!(
        out,
        "/etc/agentsh/shim.conf: wrote the default (shim_install=auto)"
    )
    .ok();
    Ok(true)
}

fn sibling_tmp(p: &Path) -> PathBuf {
    let name = p
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    p.with_file_name(format!(".{name}.agentsh-new"))
}

/// Write to a temporary sibling, fsync, chmod, chown root, rename over `p`.
fn write_atomic(p: &Path, bytes: &[u8], mode: u32) -> Result<(), InstallError> {
    let tmp = sibling_tmp(p);
    let _ = fs::remove_file(&tmp);
    let mut f = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(&tmp)
        .map_err(io_err(format!("creating {}", tmp.display())))?;
    let res = (|| {
        f.write_all(bytes)?;
        f.set_permissions(fs::Permissions::from_mode(mode))?;
        f.sync_all()
    })();
    drop(f);
    if let Err(e) = res.map_err(io_err(format!("writing {}", tmp.display()))) {
        let _ = fs::remove_file(&tmp);
        return Err(e);
    }
    chown_root(&tmp)?;
    fs::rename(&tmp, p).map_err(io_err(format!(
        "renaming {} to {}",
        tmp.display(),
        p.display()
    )))
}

fn chown_root(p: &Path) -> Result<(), InstallError> {
    if !is_root_user() {
        return Ok(()); // an unprivileged test root; the real root needs root anyway
    }
    std::os::unix::fs::lchown(p, Some(0), Some(0)).map_err(io_err(format!("chown {}", p.display())))
}

fn link_no_follow(from: &Path, to: &Path) -> Result<(), InstallError> {
    use std::os::unix::ffi::OsStrExt;
    let c = |p: &Path| std::ffi::CString::new(p.as_os_str().as_bytes()).expect("path without NUL");
    let (a, b) = (c(from), c(to));
    // SAFETY: two valid NUL-terminated paths; flags 0 = do not follow `from`.
    let rc = unsafe { libc::linkat(libc::AT_FDCWD, a.as_ptr(), libc::AT_FDCWD, b.as_ptr(), 0) };
    if rc != 0 {
        return Err(io_err(format!(
            "linking {} to {}",
            from.display(),
            to.display()
        ))(io::Error::last_os_error()));
    }
    Ok(())
}

fn remove_if_symlink(p: &Path) -> Result<(), InstallError> {
    match fs::symlink_metadata(p) {
        Ok(m) if m.file_type().is_symlink() => {
            fs::remove_file(p).map_err(io_err(format!("removing {}", p.display())))
        }
        _ => Ok(()),
    }
}

fn describe_link(p: &Path) -> String {
    match fs::read_link(p) {
        Ok(t) => format!(" -> {}", t.display()),
        Err(_) => match fs::metadata(p) {
            Ok(m) => format!(" ({} bytes, inode {})", m.len(), m.ino()),
            Err(_) => String::new(),
        },
    }
}

/// dpkg-divert, pointed at the root's database.
struct Dpkg {
    root: PathBuf,
}

impl Dpkg {
    /// `Some` when the root has a dpkg database and dpkg-divert exists; says why not otherwise.
    fn detect(root: &Path, out: &mut dyn Write) -> Option<Dpkg> {
        let admindir = in_root(root, "/var/lib/dpkg/status").ok()?;
        if !admindir.is_file() {
            writeln!(out, "no dpkg database in this root: no diversions needed").ok();
            return None;
        }
        match Command::new("dpkg-divert").arg("--version").output() {
            Ok(o) if o.status.success() => Some(Dpkg {
                root: root.to_path_buf(),
            }),
            _ => {
                writeln!(
                    out,
                    "warning: a dpkg database exists but dpkg-divert cannot be run: no diversion added, \
                     so a package upgrade may re-link /bin/sh (run `agentsh shim install` again after upgrades)"
                )
                .ok();
                None
            }
        }
    }

    fn run(&self, args: &[&str]) -> Result<String, InstallError> {
        let mut cmd = Command::new("dpkg-divert");
        if self.root != Path::new("/") {
            cmd.arg("--root").arg(&self.root);
        }
        cmd.args(args);
        let o = cmd.output().map_err(io_err("running dpkg-divert"))?;
        if !o.status.success() {
            return Err(InstallError::Dpkg {
                args: args.join(" "),
                message: String::from_utf8_lossy(&o.stderr).trim().to_string(),
            });
        }
        Ok(String::from_utf8_lossy(&o.stdout).trim().to_string())
    }

    /// The path dpkg knows the shell by: the one already diverted, else the
    /// one a package owns, else `/bin/N`. (On usr-merged Debian, packages may
    /// ship either `/bin/N` or `/usr/bin/N`.)
    fn known_path(&self, name: &str) -> Result<String, InstallError> {
        let candidates = [format!("/bin/{name}"), format!("/usr/bin/{name}")];
        for c in &candidates {
            if !self.run(&["--listpackage", c])?.is_empty() {
                return Ok(c.clone());
            }
        }
        for c in &candidates {
            let mut q = Command::new("dpkg-query");
            if self.root != Path::new("/") {
                q.arg("--root").arg(&self.root);
            }
            if q.args(["--search", c])
                .output()
                .is_ok_and(|o| o.status.success())
            {
                return Ok(c.clone());
            }
        }
        Ok(candidates[0].clone())
    }

    fn divert(
        &self,
        name: &str,
        m: &mut Manifest,
        out: &mut dyn Write,
    ) -> Result<(), InstallError> {
        let path = self.known_path(name)?;
        let to = format!("{path}.real");
        let diverter = self.run(&["--listpackage", &path])?;
        if diverter == "LOCAL" {
            let current = self.run(&["--truename", &path])?;
            if current == to {
                writeln!(out, "dpkg: local diversion {path} -> {to} already present").ok();
                if !m.diversions.iter().any(|(p, _)| *p == path) {
                    m.diversions.push((path, to));
                }
                return Ok(());
            }
            return Err(InstallError::Refused(format!(
                "a local dpkg diversion of {path} to {current} exists; remove it \
                 (`dpkg-divert --local --no-rename --remove {path}`) or restore /bin/{name} first"
            )));
        }
        if !diverter.is_empty() {
            let prior_to = self.run(&["--truename", &path])?;
            self.run(&["--package", &diverter, "--no-rename", "--remove", &path])?;
            m.prior_diversions
                .push((path.clone(), diverter.clone(), prior_to.clone()));
            writeln!(
                out,
                "dpkg: replaced the diversion {path} -> {prior_to} by {diverter} (restored on uninstall)"
            )
            .ok();
        }
        self.run(&["--local", "--no-rename", "--divert", &to, "--add", &path])?;
        m.diversions.push((path.clone(), to.clone()));
        writeln!(out, "dpkg: local diversion {path} -> {to}").ok();
        Ok(())
    }

    fn undivert(&self, m: &Manifest, out: &mut dyn Write) -> Result<(), InstallError> {
        for (path, to) in &m.diversions {
            if self.run(&["--listpackage", path])? == "LOCAL" {
                self.run(&["--local", "--no-rename", "--divert", to, "--remove", path])?;
                writeln!(out, "dpkg: removed the local diversion {path} -> {to}").ok();
            }
        }
        for (path, pkg, to) in &m.prior_diversions {
            if self.run(&["--listpackage", path])?.is_empty() {
                self.run(&[
                    "--package",
                    pkg,
                    "--no-rename",
                    "--divert",
                    to,
                    "--add",
                    path,
                ])?;
                writeln!(out, "dpkg: restored the diversion {path} -> {to} by {pkg}").ok();
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;
    use std::os::unix::fs::symlink;

    /// A throwaway root laid out like usr-merged Debian: /bin -> usr/bin,
    /// /usr/bin/sh -> dash, a regular /usr/bin/bash.
    struct TestRoot {
        dir: PathBuf,
        shim: PathBuf,
    }

    impl TestRoot {
        fn new(tag: &str, dpkg: bool) -> TestRoot {
            let base = std::env::temp_dir()
                .join(format!("agentsh-shim-install-{tag}-{}", std::process::id()));
            let _ = fs::remove_dir_all(&base);
            let dir = base.join("root");
            fs::create_dir_all(dir.join("usr/bin")).unwrap();
            fs::create_dir_all(dir.join("etc")).unwrap();
            symlink("usr/bin", dir.join("bin")).unwrap();
            fs::write(dir.join("usr/bin/dash"), b"\x7fELF fake dash").unwrap();
            fs::set_permissions(dir.join("usr/bin/dash"), fs::Permissions::from_mode(0o755))
                .unwrap();
            symlink("dash", dir.join("usr/bin/sh")).unwrap();
            fs::write(dir.join("usr/bin/bash"), b"\x7fELF fake bash").unwrap();
            fs::set_permissions(dir.join("usr/bin/bash"), fs::Permissions::from_mode(0o755))
                .unwrap();
            if dpkg {
                fs::create_dir_all(dir.join("var/lib/dpkg")).unwrap();
                fs::write(dir.join("var/lib/dpkg/status"), b"").unwrap();
                fs::write(
                    dir.join("var/lib/dpkg/diversions"),
                    b"/usr/share/man/man1/sh.1.gz\n/usr/share/man/man1/sh.distrib.1.gz\ndash\n/bin/sh\n/bin/sh.distrib\ndash\n",
                )
                .unwrap();
            }
            let shim = base.join("agentsh-shell-shim");
            write_shim(&shim, b"v1");
            TestRoot { dir, shim }
        }

        fn opts(&self, bash: bool) -> InstallOptions {
            InstallOptions {
                root: self.dir.clone(),
                bash,
                shim_binary: self.shim.clone(),
            }
        }

        fn install(&self, bash: bool) -> String {
            let mut out = Vec::new();
            install(&self.opts(bash), &mut out).unwrap();
            String::from_utf8(out).unwrap()
        }

        fn uninstall(&self) -> String {
            let mut out = Vec::new();
            uninstall(&self.dir, &mut out).unwrap();
            String::from_utf8(out).unwrap()
        }

        /// Every entry: type, mode, owner, content or link target.
        fn snapshot(&self) -> BTreeMap<String, String> {
            let mut m = BTreeMap::new();
            walk(&self.dir, &self.dir, &mut m);
            m
        }

        fn dpkg(&self, args: &[&str]) -> String {
            let o = Command::new("dpkg-divert")
                .arg("--root")
                .arg(&self.dir)
                .args(args)
                .output()
                .unwrap();
            String::from_utf8_lossy(&o.stdout).trim().to_string()
        }
    }

    impl Drop for TestRoot {
        fn drop(&mut self) {
            if let Some(base) = self.dir.parent() {
                let _ = fs::remove_dir_all(base);
            }
        }
    }

    fn write_shim(p: &Path, version: &[u8]) {
        let mut b = b"\x7fELF fake shim ".to_vec();
        b.extend_from_slice(SHIM_MARKER);
        b.extend_from_slice(version);
        fs::write(p, b).unwrap();
    }

    fn walk(root: &Path, dir: &Path, m: &mut BTreeMap<String, String>) {
        for e in fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            let rel = p.strip_prefix(root).unwrap().to_string_lossy().into_owned();
            let md = fs::symlink_metadata(&p).unwrap();
            let head = format!("{:o} {}:{}", md.mode(), md.uid(), md.gid());
            if md.file_type().is_symlink() {
                m.insert(
                    rel,
                    format!("{head} -> {}", fs::read_link(&p).unwrap().display()),
                );
            } else if md.is_dir() {
                m.insert(rel, format!("{head} dir"));
                walk(root, &p, m);
            } else {
                m.insert(rel, format!("{head} {:?}", fs::read(&p).unwrap()));
            }
        }
    }

    fn dpkg_available() -> bool {
        Command::new("dpkg-divert")
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success())
    }

    #[test]
    fn install_puts_the_shim_in_place_and_keeps_the_original() {
        let r = TestRoot::new("layout", false);
        let out = r.install(true);
        let bin = r.dir.join("usr/bin");
        assert!(
            contains(&fs::read(bin.join("sh")).unwrap(), SHIM_MARKER),
            "{out}"
        );
        assert!(contains(&fs::read(bin.join("bash")).unwrap(), SHIM_MARKER));
        assert_eq!(
            fs::read_link(bin.join("sh.real")).unwrap(),
            Path::new("dash")
        );
        assert_eq!(
            fs::read(bin.join("bash.real")).unwrap(),
            b"\x7fELF fake bash"
        );
        let shells = r.dir.join("usr/lib/agentsh/shells");
        assert_eq!(
            fs::read_link(shells.join("sh")).unwrap(),
            Path::new("/bin/sh.real")
        );
        assert_eq!(
            fs::read_link(shells.join("bash")).unwrap(),
            Path::new("/bin/bash.real")
        );
        let conf = r.dir.join("etc/agentsh/shim.conf");
        assert_eq!(fs::read_to_string(&conf).unwrap(), DEFAULT_SHIM_CONF);
        assert_eq!(fs::metadata(&conf).unwrap().mode() & 0o7777, 0o644);
        assert!(fs::metadata(bin.join("sh")).unwrap().mode() & 0o111 != 0);
        let st = status(&r.dir).unwrap();
        assert!(st.installed_and_consistent, "{}", st.report);
    }

    #[test]
    fn second_install_is_a_noop_that_says_so() {
        let r = TestRoot::new("idem", false);
        r.install(true);
        let before = r.snapshot();
        let out = r.install(true);
        assert!(out.contains("nothing to do: already installed"), "{out}");
        assert_eq!(r.snapshot(), before);
    }

    #[test]
    fn uninstall_restores_the_root_byte_for_byte() {
        let r = TestRoot::new("restore", false);
        let before = r.snapshot();
        r.install(true);
        assert_ne!(r.snapshot(), before);
        let out = r.uninstall();
        assert_eq!(r.snapshot(), before, "{out}");
        let out = r.uninstall();
        assert!(out.contains("nothing to do"), "{out}");
    }

    #[test]
    fn a_newer_shim_binary_replaces_the_installed_one() {
        let r = TestRoot::new("update", false);
        r.install(false);
        write_shim(&r.shim, b"v2");
        let out = r.install(false);
        assert!(out.contains("updated the shim binary"), "{out}");
        assert_eq!(
            fs::read(r.dir.join("usr/bin/sh")).unwrap(),
            fs::read(&r.shim).unwrap()
        );
        assert_eq!(
            fs::read_link(r.dir.join("usr/bin/sh.real")).unwrap(),
            Path::new("dash")
        );
    }

    #[test]
    fn an_edited_shim_conf_survives_uninstall() {
        let r = TestRoot::new("conf", false);
        r.install(false);
        let conf = r.dir.join("etc/agentsh/shim.conf");
        fs::write(&conf, "shim_install=on\n").unwrap();
        let out = r.uninstall();
        assert!(out.contains("kept /etc/agentsh/shim.conf"), "{out}");
        assert_eq!(fs::read_to_string(&conf).unwrap(), "shim_install=on\n");
    }

    #[test]
    fn refuses_a_binary_that_is_not_the_shim() {
        let r = TestRoot::new("notshim", false);
        fs::write(&r.shim, b"\x7fELF something else").unwrap();
        let mut out = Vec::new();
        let e = install(&r.opts(false), &mut out).unwrap_err().to_string();
        assert!(e.contains("not an agentsh-shell-shim binary"), "{e}");
        assert_eq!(
            fs::read_link(r.dir.join("usr/bin/sh")).unwrap(),
            Path::new("dash")
        );
    }

    #[test]
    fn refuses_when_something_replaced_the_shim_after_install() {
        let r = TestRoot::new("conflict", false);
        r.install(false);
        let sh = r.dir.join("usr/bin/sh");
        fs::remove_file(&sh).unwrap();
        symlink("dash", &sh).unwrap();
        let mut out = Vec::new();
        let e = install(&r.opts(false), &mut out).unwrap_err().to_string();
        assert!(e.contains("not the agentsh shim"), "{e}");
        let e = uninstall(&r.dir, &mut out).unwrap_err().to_string();
        assert!(e.contains("not touching /bin/sh"), "{e}");
        assert!(!status(&r.dir).unwrap().installed_and_consistent);
    }

    #[test]
    fn missing_bash_is_refused_before_anything_changes() {
        let r = TestRoot::new("nobash", false);
        fs::remove_file(r.dir.join("usr/bin/bash")).unwrap();
        let before = r.snapshot();
        let mut out = Vec::new();
        let e = install(&r.opts(true), &mut out).unwrap_err().to_string();
        assert!(e.contains("/bin/bash does not exist"), "{e}");
        assert_eq!(r.snapshot(), before);
    }

    #[test]
    fn paths_resolve_inside_the_root() {
        let r = TestRoot::new("resolve", false);
        // An absolute symlink must not escape to this machine's /usr.
        symlink("/usr/bin", r.dir.join("abs")).unwrap();
        assert_eq!(
            in_root(&r.dir, "/abs/sh").unwrap(),
            r.dir.join("usr/bin/sh")
        );
        assert_eq!(
            in_root(&r.dir, "/bin/sh").unwrap(),
            r.dir.join("usr/bin/sh")
        );
        assert_eq!(
            in_root(&r.dir, "/../../bin/x").unwrap(),
            r.dir.join("usr/bin/x")
        );
        symlink("loop", r.dir.join("loop")).unwrap();
        assert!(in_root(&r.dir, "/loop/x").is_err());
    }

    #[test]
    fn dpkg_diversion_is_made_local_and_restored() {
        if !dpkg_available() {
            eprintln!("SKIP: dpkg-divert is not installed");
            return;
        }
        let r = TestRoot::new("dpkg", true);
        let before = r.snapshot();
        let diversions_before = diversion_set(&r);
        let out = r.install(true);
        assert!(
            out.contains("replaced the diversion /bin/sh -> /bin/sh.distrib by dash"),
            "{out}"
        );
        assert_eq!(r.dpkg(&["--listpackage", "/bin/sh"]), "LOCAL");
        assert_eq!(r.dpkg(&["--truename", "/bin/sh"]), "/bin/sh.real");
        assert_eq!(r.dpkg(&["--truename", "/bin/bash"]), "/bin/bash.real");
        let out = r.install(true);
        assert!(out.contains("nothing to do"), "{out}");
        r.uninstall();
        assert_eq!(r.dpkg(&["--listpackage", "/bin/sh"]), "dash");
        assert_eq!(r.dpkg(&["--truename", "/bin/sh"]), "/bin/sh.distrib");
        assert_eq!(r.dpkg(&["--listpackage", "/bin/bash"]), "");
        // dpkg rewrites its diversions file in its own order and keeps a
        // -old copy: compare the database by meaning, everything else by bytes.
        assert_eq!(diversion_set(&r), diversions_before);
        let strip = |mut m: BTreeMap<String, String>| {
            m.remove("var/lib/dpkg/diversions");
            m.remove("var/lib/dpkg/diversions-old");
            m
        };
        assert_eq!(strip(r.snapshot()), strip(before));
    }

    fn diversion_set(r: &TestRoot) -> std::collections::BTreeSet<Vec<String>> {
        let t = fs::read_to_string(r.dir.join("var/lib/dpkg/diversions")).unwrap();
        let lines: Vec<String> = t.lines().map(str::to_string).collect();
        lines.chunks(3).map(|c| c.to_vec()).collect()
    }

    #[test]
    fn manifest_round_trips() {
        let m = Manifest {
            created_dirs: vec!["/usr/lib/agentsh".into()],
            created_conf: true,
            shells: vec!["sh".into(), "bash".into()],
            diversions: vec![("/bin/sh".into(), "/bin/sh.real".into())],
            prior_diversions: vec![("/bin/sh".into(), "dash".into(), "/bin/sh.distrib".into())],
        };
        assert_eq!(Manifest::parse(&m.render()).unwrap(), m);
        assert!(Manifest::parse("shell zsh\n").is_err());
    }
}
