//! Filesystem steps of the installer: the root check, the manifest on disk, directories, links, atomic writes and ownership.

use super::*;
use std::fs;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};

pub(super) fn check_root_dir(root: &Path) -> Result<(), InstallError> {
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

pub(super) fn read_manifest(root: &Path) -> Result<Option<Manifest>, InstallError> {
    let p = in_root(root, MANIFEST).map_err(io_err("resolving the manifest"))?;
    match fs::read_to_string(&p) {
        Ok(t) => Manifest::parse(&t).map(Some).map_err(|e| {
            InstallError::Refused(format!("{} is damaged ({e}); restore by hand", p.display()))
        }),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(io_err(format!("reading {}", p.display()))(e)),
    }
}

pub(super) fn write_manifest(root: &Path, m: &mut Manifest) -> Result<(), InstallError> {
    ensure_dirs(root, SHELLS_DIR, m)?;
    let p = in_root(root, MANIFEST).map_err(io_err("resolving the manifest"))?;
    write_atomic(&p, m.render().as_bytes(), 0o644)
}

/// Creates `dir` and its missing parents (0755, root-owned), recording each
/// created one in the manifest.
pub(super) fn ensure_dirs(root: &Path, dir: &str, m: &mut Manifest) -> Result<(), InstallError> {
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

/// `/usr/lib/agentsh/shells/N -> /bin/N.real` (a program's:
/// `/usr/lib/agentsh/programs/N -> PATH.real`), created or repaired atomically.
pub(super) fn ensure_real_link(
    root: &Path,
    paths: &ShellPaths,
    m: &mut Manifest,
    out: &mut dyn Write,
) -> Result<bool, InstallError> {
    let want = paths.want();
    if fs::read_link(&paths.link).is_ok_and(|t| t == want) {
        return Ok(false);
    }
    ensure_dirs(root, paths.dir, m)?;
    let tmp = sibling_tmp(&paths.link);
    let _ = fs::remove_file(&tmp);
    std::os::unix::fs::symlink(&want, &tmp)
        .map_err(io_err(format!("creating {}", tmp.display())))?;
    fs::rename(&tmp, &paths.link).map_err(io_err(format!("creating {}", paths.link.display())))?;
    writeln!(out, "{}/{} -> {}", paths.dir, paths.name, want.display()).ok();
    Ok(true)
}

/// Where the admin's unsupervised login shell is installed.
pub const ADMIN_SHELL: &str = "/usr/lib/agentsh/admin-shell";

/// Installs (or updates) the admin shell: the shim binary, which acts as
/// `admin-shell` when called by that name.
pub(super) fn ensure_admin_shell(
    root: &Path,
    shim: &[u8],
    m: &mut Manifest,
    out: &mut dyn Write,
) -> Result<bool, InstallError> {
    let p = in_root(root, ADMIN_SHELL).map_err(io_err("resolving the admin shell"))?;
    if fs::read(&p).is_ok_and(|b| b == shim) && m.admin_shell {
        return Ok(false);
    }
    ensure_dirs(root, "/usr/lib/agentsh", m)?;
    write_atomic(&p, shim, 0o755)?;
    m.admin_shell = true;
    writeln!(
        out,
        "{ADMIN_SHELL}: the admin's unsupervised login shell (use it from outside the trees: \
         console, docker exec, sshd; see docs/shim.md)"
    )
    .ok();
    Ok(true)
}

/// Writes the default shim.conf if none exists.
pub(super) fn ensure_conf(
    root: &Path,
    m: &mut Manifest,
    out: &mut dyn Write,
) -> Result<bool, InstallError> {
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

pub(super) fn sibling_tmp(p: &Path) -> PathBuf {
    let name = p
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    p.with_file_name(format!(".{name}.agentsh-new"))
}

/// Write to a temporary sibling, fsync, chmod, chown root, rename over `p`.
pub(super) fn write_atomic(p: &Path, bytes: &[u8], mode: u32) -> Result<(), InstallError> {
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

pub(super) fn chown_root(p: &Path) -> Result<(), InstallError> {
    if !is_root_user() {
        return Ok(()); // an unprivileged test root; the real root needs root anyway
    }
    std::os::unix::fs::lchown(p, Some(0), Some(0)).map_err(io_err(format!("chown {}", p.display())))
}

pub(super) fn link_no_follow(from: &Path, to: &Path) -> Result<(), InstallError> {
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

pub(super) fn remove_if_symlink(p: &Path) -> Result<(), InstallError> {
    match fs::symlink_metadata(p) {
        Ok(m) if m.file_type().is_symlink() => {
            fs::remove_file(p).map_err(io_err(format!("removing {}", p.display())))
        }
        _ => Ok(()),
    }
}

pub(super) fn describe_link(p: &Path) -> String {
    match fs::read_link(p) {
        Ok(t) => format!(" -> {}", t.display()),
        Err(_) => match fs::metadata(p) {
            Ok(m) => format!(" ({} bytes, inode {})", m.len(), m.ino()),
            Err(_) => String::new(),
        },
    }
}
