//! Daemon sockets out of the tree's sight: a private mount namespace in
//! which each path the server lists (`seccomp_config.daemon_sockets`) is
//! covered — a socket or file by a read-only bind of `/dev/null`, a
//! directory by an empty read-only tmpfs.
//!
//! Threat: a tree, root included, that connects to a root-only socket of a
//! privileged daemon (docker, containerd, systemd's private socket, the
//! system bus, agentsh's own run directory) and has it start programs
//! outside any tree. Landlock (ABI 7) does not restrict `connect()` to
//! path-named sockets, and a check of the path by the supervisor would race
//! the kernel's own lookup (a symlink or rename swap). A mount covers the
//! socket's dentry itself: every path that reaches it (a symlink, `..`,
//! `/var/run`) meets the mount instead, so there is nothing to race; a hard
//! link cannot be made to a name the tree cannot reach; `/proc/<pid>/root`
//! of a process outside the tree is closed by Landlock's ptrace rule; and
//! the tree can never undo it (`mount`, `umount2`, `unshare`, `setns` and
//! the new mount API are in the base blocklist).
//!
//! Done before the filter is loaded (the filter forbids mounts) and only
//! where it can be: a private mount namespace needs CAP_SYS_ADMIN, which a
//! root tree has in a VM or a privileged container. A tree without it (an
//! ordinary user: the sockets' own root-only modes apply; root in a default
//! Docker container) is reported as unmasked, in unixwrap's log and in the
//! wrap-init event the server writes.
//!
//! Mounts propagate *into* the tree's namespace (it is a slave of the one
//! it came from) but never out. A daemon that removes and re-creates its
//! socket while a tree runs detaches a file mask (the kernel lazily unmounts
//! what sits on an unlinked dentry); directories the daemon keeps its
//! sockets in are masked as a whole, which that cannot undo.
//!
//! Failure modes: a listed path that no longer exists is skipped (nothing
//! to hide); any other failure to unshare or mount is a refusal (the filter
//! is not loaded yet, so nothing was installed, but the caller asked for a
//! protection it cannot get: never a silent allow).

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use crate::log;
use crate::log::Log;

/// What was done, for the log.
#[derive(Debug, PartialEq, Eq)]
pub enum Masked {
    /// Nothing was asked.
    Nothing,
    /// A private mount namespace hides these paths.
    Hidden(Vec<String>),
    /// Without CAP_SYS_ADMIN: not hidden (the sockets' own modes apply).
    NotHidden(String),
}

impl std::fmt::Display for Masked {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Masked::Nothing => write!(f, "daemon sockets: none listed"),
            Masked::Hidden(p) => write!(f, "daemon sockets hidden: {}", p.join(" ")),
            Masked::NotHidden(why) => write!(f, "daemon sockets NOT hidden: {why}"),
        }
    }
}

fn cstr(p: &str) -> Result<CString, String> {
    CString::new(p).map_err(|_| format!("NUL in {p:?}"))
}

fn last(what: &str) -> String {
    format!("{what}: {}", std::io::Error::last_os_error())
}

/// Hides `paths` (absolute, canonical) from this process and everything it
/// starts, and mounts each of `noexec` (the policy's `exec_sources` places)
/// again `noexec`, so no file the tree writes there is mapped executable
/// either (Landlock's execute right covers `execve` only). `has_admin` is
/// whether CAP_SYS_ADMIN is effective.
///
/// # Errors
/// unshare or a mount failed for a path that exists.
pub fn hide(
    paths: &[String],
    noexec: &[String],
    has_admin: bool,
    log: &Log,
) -> Result<Masked, String> {
    if paths.is_empty() && noexec.is_empty() {
        return Ok(Masked::Nothing);
    }
    if !has_admin {
        return Ok(Masked::NotHidden(
            "no CAP_SYS_ADMIN for a private mount namespace".into(),
        ));
    }
    // A mask mounted in a namespace that is not ours alone would hide the
    // sockets from everyone, the server's own clients included (gVisor shows
    // no namespace identity): then nothing is mounted.
    if !enter_private_namespace()? {
        return Ok(Masked::NotHidden(
            "this kernel cannot show that the new mount namespace is private (gVisor?)".into(),
        ));
    }
    keep_mounts_from_propagating_out(log)?;
    let hidden = cover_each(paths, log)?;
    mount_each_noexec(noexec, log)?;
    Ok(Masked::Hidden(hidden))
}

/// A new mount namespace for this process; whether it is shown to be a
/// new one (its identity in `/proc/self/ns/mnt` changed).
fn enter_private_namespace() -> Result<bool, String> {
    let before = std::fs::read_link("/proc/self/ns/mnt").ok();
    // SAFETY: unshare only changes this (single-threaded) process's namespaces.
    if unsafe { libc::unshare(libc::CLONE_NEWNS) } != 0 {
        return Err(last("unshare(CLONE_NEWNS) for the daemon-socket masks"));
    }
    let after = std::fs::read_link("/proc/self/ns/mnt").ok();
    Ok(before.is_some() && before != after)
}

/// Makes `/` (recursively) a slave mount, so the masks reach no other
/// namespace; a root that is not a mount point (a chroot) has each shared
/// mount made a slave instead.
fn keep_mounts_from_propagating_out(log: &Log) -> Result<(), String> {
    let root = cstr("/")?;
    // SAFETY: a propagation change on "/" with valid C strings and no data.
    let rc = unsafe {
        libc::mount(
            std::ptr::null(),
            root.as_ptr(),
            std::ptr::null(),
            libc::MS_REC | libc::MS_SLAVE,
            std::ptr::null(),
        )
    };
    if rc != 0 {
        // EINVAL: our root is not a mount point (a chroot). Then every mount
        // we can name is made a slave one by one; the masks must not reach
        // any other namespace.
        if std::io::Error::last_os_error().raw_os_error() != Some(libc::EINVAL) {
            return Err(last("making / a slave mount"));
        }
        slave_each_shared_mount(log)?;
    }
    Ok(())
}

/// Covers each of `paths` that still exists: a directory with an empty
/// tmpfs, anything else with `/dev/null`. Returns the paths covered.
fn cover_each(paths: &[String], log: &Log) -> Result<Vec<String>, String> {
    let mut hidden = Vec::new();
    for p in paths {
        let meta = match std::fs::symlink_metadata(p) {
            Ok(m) => m,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                log!(log, "daemon socket {p}: gone, nothing to hide");
                continue;
            }
            Err(e) => return Err(format!("daemon socket {p}: {e}")),
        };
        if meta.file_type().is_symlink() {
            // The server lists canonical paths; a symlink here means the
            // entry changed since: hide what it is now, the link itself
            // cannot be mounted over by its target.
            return Err(format!("daemon socket {p} became a symlink; refusing"));
        }
        let target = cstr(p)?;
        if meta.is_dir() {
            mount_empty_dir(&target).map_err(|e| format!("hiding {p}: {e}"))?;
        } else {
            cover_file(&target).map_err(|e| format!("hiding {p}: {e}"))?;
        }
        hidden.push(p.clone());
    }
    Ok(hidden)
}

/// Mounts each directory of `noexec` that still exists `noexec` again.
fn mount_each_noexec(noexec: &[String], log: &Log) -> Result<(), String> {
    for p in noexec {
        match std::fs::symlink_metadata(p) {
            Ok(m) if m.is_dir() => {}
            // A device the tree may write (/dev/null): nothing runs from it.
            Ok(_) => continue,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                log!(log, "noexec mount {p}: gone, nothing to mount");
                continue;
            }
            Err(e) => return Err(format!("noexec mount {p}: {e}")),
        }
        mount_noexec(&cstr(p)?).map_err(|e| format!("noexec mount {p}: {e}"))?;
        log!(log, "mounted noexec: {p}");
    }
    Ok(())
}

/// Binds `target` onto itself and remounts the bind `noexec` (keeping the
/// flags the kernel would not let a remount drop: nosuid, nodev, read-only,
/// the atime ones).
fn mount_noexec(target: &CString) -> Result<(), String> {
    // SAFETY: a bind of a path onto itself with valid C strings and no data.
    if unsafe {
        libc::mount(
            target.as_ptr(),
            target.as_ptr(),
            std::ptr::null(),
            libc::MS_BIND | libc::MS_REC,
            std::ptr::null(),
        )
    } != 0
    {
        return Err(last("bind"));
    }
    // SAFETY: statvfs writes into the struct we pass.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: a valid C string and a struct to fill.
    if unsafe { libc::statvfs(target.as_ptr(), &mut st) } != 0 {
        return Err(last("statvfs"));
    }
    let keep = [
        (libc::ST_NOSUID, libc::MS_NOSUID),
        (libc::ST_NODEV, libc::MS_NODEV),
        (libc::ST_RDONLY, libc::MS_RDONLY),
        (libc::ST_NOATIME, libc::MS_NOATIME),
        (libc::ST_NODIRATIME, libc::MS_NODIRATIME),
        (libc::ST_RELATIME, libc::MS_RELATIME),
    ]
    .iter()
    .filter(|(st_flag, _)| st.f_flag & *st_flag != 0)
    .fold(0, |acc, (_, ms)| acc | ms);
    // SAFETY: a remount of the bind just made, valid C strings, no data.
    if unsafe {
        libc::mount(
            std::ptr::null(),
            target.as_ptr(),
            std::ptr::null(),
            libc::MS_BIND | libc::MS_REMOUNT | libc::MS_NOEXEC | keep,
            std::ptr::null(),
        )
    } != 0
    {
        return Err(last("remount noexec"));
    }
    Ok(())
}

/// For a root that is not a mount point: every mount of `/proc/self/mountinfo`
/// that is shared becomes a slave; one that cannot is a refusal.
fn slave_each_shared_mount(log: &Log) -> Result<(), String> {
    let info = std::fs::read_to_string("/proc/self/mountinfo")
        .map_err(|e| format!("reading /proc/self/mountinfo: {e}"))?;
    for line in info.lines() {
        let f: Vec<&str> = line.split(' ').collect();
        let Some(sep) = f.iter().position(|x| *x == "-") else {
            continue;
        };
        let shared = f
            .get(6..sep)
            .unwrap_or_default()
            .iter()
            .any(|o| o.starts_with("shared:"));
        let Some(mp) = f.get(4) else { continue };
        if !shared {
            continue;
        }
        let target = cstr(&unescape(mp))?;
        // SAFETY: a propagation change on a listed mount point.
        let rc = unsafe {
            libc::mount(
                std::ptr::null(),
                target.as_ptr(),
                std::ptr::null(),
                libc::MS_SLAVE,
                std::ptr::null(),
            )
        };
        if rc != 0 {
            return Err(last(&format!(
                "making the shared mount {mp} a slave (the masks would propagate out)"
            )));
        }
        log!(log, "daemon sockets: shared mount {mp} made a slave");
    }
    Ok(())
}

/// mountinfo escapes space, tab, newline and backslash as octal.
fn unescape(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' && i + 3 < b.len() + 1 && b[i + 1..].len() >= 3 {
            if let Ok(v) =
                u8::from_str_radix(std::str::from_utf8(&b[i + 1..i + 4]).unwrap_or(""), 8)
            {
                out.push(v);
                i += 4;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn mount_empty_dir(target: &CString) -> Result<(), String> {
    let fstype = cstr("tmpfs")?;
    let source = cstr("agentsh-hidden")?;
    // gVisor's tmpfs knows neither size nor nr_inodes: read-only, the
    // mount stays empty without them.
    for opts in ["size=4k,nr_inodes=1,mode=0555", "mode=0555"] {
        let opts = cstr(opts)?;
        // SAFETY: valid C strings; mounts an empty read-only tmpfs.
        let rc = unsafe {
            libc::mount(
                source.as_ptr(),
                target.as_ptr(),
                fstype.as_ptr(),
                libc::MS_RDONLY | libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
                opts.as_ptr().cast(),
            )
        };
        if rc == 0 {
            return Ok(());
        }
        if std::io::Error::last_os_error().raw_os_error() != Some(libc::EINVAL) {
            break;
        }
    }
    Err(last("mount tmpfs"))
}

fn cover_file(target: &CString) -> Result<(), String> {
    let null = cstr("/dev/null")?;
    // SAFETY: valid C strings; a bind mount of one file over another.
    let rc = unsafe {
        libc::mount(
            null.as_ptr(),
            target.as_ptr(),
            std::ptr::null(),
            libc::MS_BIND,
            std::ptr::null(),
        )
    };
    if rc != 0 {
        return Err(last("bind /dev/null"));
    }
    // SAFETY: as above; makes that bind read-only.
    let rc = unsafe {
        libc::mount(
            std::ptr::null(),
            target.as_ptr(),
            std::ptr::null(),
            libc::MS_REMOUNT | libc::MS_BIND | libc::MS_RDONLY,
            std::ptr::null(),
        )
    };
    if rc != 0 {
        return Err(last("remount the bind read-only"));
    }
    Ok(())
}

/// Is `p` a path this module accepts from the server (absolute, no `..`)?
pub fn acceptable(p: &str) -> bool {
    let path = Path::new(p);
    path.is_absolute()
        && !path
            .as_os_str()
            .as_bytes()
            .split(|&b| b == b'/')
            .any(|c| c == b"..")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nothing_asked_nothing_done_and_no_admin_is_reported() {
        let log = Log::from_env_value(None);
        assert_eq!(hide(&[], &[], true, &log).unwrap(), Masked::Nothing);
        assert!(matches!(
            hide(&["/run/x.sock".into()], &[], false, &log).unwrap(),
            Masked::NotHidden(_)
        ));
    }

    #[test]
    fn mountinfo_escapes() {
        assert_eq!(unescape("/run/a\\040b"), "/run/a b");
        assert_eq!(unescape("/plain"), "/plain");
    }

    #[test]
    fn only_clean_absolute_paths() {
        assert!(acceptable("/run/docker.sock"));
        assert!(!acceptable("run/docker.sock"));
        assert!(!acceptable("/run/../etc/shadow"));
    }
}
