//! Daemon sockets and credential stores out of the tree's sight: a private
//! mount namespace in which each path the server lists
//! (`seccomp_config.daemon_sockets`, `seccomp_config.credential_files`) is
//! covered — a socket or file by a read-only bind of `/dev/null`, a
//! directory by an empty read-only tmpfs. For credential stores a tree
//! without CAP_SYS_ADMIN that is not root gets a user namespace of its own
//! (its ids mapped to themselves) to make that mount namespace in, where
//! the server found the host allows it (`seccomp_config.user_namespace`);
//! credential stores are never left visible quietly: asked for where no
//! namespace can be made, unixwrap refuses.
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
    /// A mount namespace of the tree's own (`user`: inside a user namespace
    /// of its own) hides these paths.
    Hidden { paths: Vec<String>, user: bool },
    /// Without CAP_SYS_ADMIN: not hidden (the sockets' own modes apply).
    NotHidden(String),
}

impl std::fmt::Display for Masked {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Masked::Nothing => write!(f, "daemon sockets, credential stores: none listed"),
            Masked::Hidden { paths, user } => write!(
                f,
                "hidden{}: {}",
                if *user { " (in a user namespace)" } else { "" },
                paths.join(" ")
            ),
            Masked::NotHidden(why) => write!(f, "daemon sockets NOT hidden: {why}"),
        }
    }
}

/// What to hide, and how this process may.
pub struct Plan<'a> {
    /// Daemon sockets (and directories of them).
    pub daemon_sockets: &'a [String],
    /// Credential stores (`credential_files`): never left visible.
    pub credentials: &'a [String],
    /// Files and directories kept read-only (`read_only_files`).
    pub read_only: &'a [String],
    /// Directories mounted again `noexec`.
    pub noexec: &'a [String],
    /// CAP_SYS_ADMIN is effective: a private mount namespace.
    pub has_admin: bool,
    /// Without it, a user namespace of our own may be made (the server
    /// found the host allows it).
    pub user_namespace: bool,
}

fn cstr(p: &str) -> Result<CString, String> {
    CString::new(p).map_err(|_| format!("NUL in {p:?}"))
}

fn last(what: &str) -> String {
    format!("{what}: {}", std::io::Error::last_os_error())
}

/// Hides the plan's daemon sockets and credential stores (absolute,
/// canonical) from this process and everything it starts, and mounts each
/// of its `noexec` places (the policy's `exec_sources`) again `noexec`, so
/// no file the tree writes there is mapped executable either (Landlock's
/// execute right covers `execve` only).
///
/// # Errors
/// unshare or a mount failed for a path that exists; credential stores
/// asked for where no namespace can be made.
pub fn hide(plan: &Plan<'_>, log: &Log) -> Result<Masked, String> {
    if plan.daemon_sockets.is_empty()
        && plan.credentials.is_empty()
        && plan.read_only.is_empty()
        && plan.noexec.is_empty()
    {
        return Ok(Masked::Nothing);
    }
    // Covers asked for that are never left out quietly.
    let asked = !plan.credentials.is_empty() || !plan.read_only.is_empty();
    // SAFETY: a plain id getter.
    let root = unsafe { libc::geteuid() } == 0;
    let user = if plan.has_admin {
        false
    } else if plan.user_namespace && !root && asked {
        true
    } else if !asked {
        return Ok(Masked::NotHidden(
            "no CAP_SYS_ADMIN for a private mount namespace".into(),
        ));
    } else {
        return Err(
            "credential stores to hide or files to keep read-only, but no CAP_SYS_ADMIN and no \
             user namespace allowed"
                .into(),
        );
    };
    // A mask mounted in a namespace that is not ours alone would hide the
    // sockets from everyone, the server's own clients included (gVisor shows
    // no namespace identity): then nothing is mounted.
    let private = if user {
        enter_user_namespace()?
    } else {
        enter_private_namespace()?
    };
    if !private {
        if asked {
            return Err(
                "this kernel cannot show that the new mount namespace is private \
                        (gVisor?): the credential stores cannot be hidden"
                    .into(),
            );
        }
        return Ok(Masked::NotHidden(
            "this kernel cannot show that the new mount namespace is private (gVisor?)".into(),
        ));
    }
    keep_mounts_from_propagating_out(log)?;
    // In a user namespace (an ordinary user's tree) only what it was made
    // for: the daemon sockets' own modes keep such a tree out of root's, and
    // the noexec mounts stay where they were (a tree with CAP_SYS_ADMIN).
    let (sockets, noexec): (&[String], &[String]) = if user {
        (&[], &[])
    } else {
        (plan.daemon_sockets, plan.noexec)
    };
    let mut hidden = cover_each(sockets, "daemon socket", log)?;
    hidden.extend(cover_each(plan.credentials, "credential store", log)?);
    hidden.extend(read_only_each(plan.read_only, log)?);
    mount_each_noexec(noexec, log)?;
    enter_cwd_again()?;
    Ok(Masked::Hidden {
        paths: hidden,
        user,
    })
}

/// The working directory looked up again by its name: the process still
/// stands on the dentry it had before the mounts, where paths relative to
/// it would walk beneath a directory bound over it (the workspace, a home)
/// and miss every cover made on the bind.
fn enter_cwd_again() -> Result<(), String> {
    let cwd = std::env::current_dir().map_err(|e| format!("the working directory: {e}"))?;
    std::env::set_current_dir(&cwd).map_err(|e| {
        format!(
            "entering the working directory {} again after the masks: {e}",
            cwd.display()
        )
    })
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

/// A user namespace of this process's own, its effective uid and gid
/// mapped to themselves (nothing else: root and other users' files show
/// as the overflow id inside), with a new mount namespace it owns. The
/// capabilities it gives last until the command's exec (whose uid is not
/// 0 in it); the filter then forbids a new one. Whether the mount
/// namespace is shown to be a new one.
fn enter_user_namespace() -> Result<bool, String> {
    // SAFETY: plain id getters.
    let (uid, gid) = unsafe { (libc::geteuid(), libc::getegid()) };
    let before = std::fs::read_link("/proc/self/ns/mnt").ok();
    // SAFETY: unshare only changes this (single-threaded) process's namespaces.
    if unsafe { libc::unshare(libc::CLONE_NEWUSER | libc::CLONE_NEWNS) } != 0 {
        return Err(last(
            "unshare(CLONE_NEWUSER|CLONE_NEWNS) for the credential-store masks",
        ));
    }
    let write = |file: &str, text: String| {
        std::fs::write(file, text).map_err(|e| format!("writing {file}: {e}"))
    };
    match std::fs::write("/proc/self/setgroups", "deny") {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(format!("writing /proc/self/setgroups: {e}")),
    }
    write("/proc/self/uid_map", format!("{uid} {uid} 1\n"))?;
    write("/proc/self/gid_map", format!("{gid} {gid} 1\n"))?;
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

/// Covers each of `paths` (`what` they are, for messages) that still
/// exists: a directory with an empty tmpfs, anything else with
/// `/dev/null`. Returns the paths covered. One this process cannot look at
/// (a home it may not enter) is not reachable by the tree either: skipped.
fn cover_each(paths: &[String], what: &str, log: &Log) -> Result<Vec<String>, String> {
    let mut hidden = Vec::new();
    for p in paths {
        let meta = match std::fs::symlink_metadata(p) {
            Ok(m) => m,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                log!(log, "{what} {p}: gone, nothing to hide");
                continue;
            }
            Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {
                log!(
                    log,
                    "{what} {p}: out of this tree's reach ({e}), nothing to hide"
                );
                continue;
            }
            Err(e) => return Err(format!("{what} {p}: {e}")),
        };
        if meta.file_type().is_symlink() {
            // The server lists canonical paths; a symlink here means the
            // entry changed since: hide what it is now, the link itself
            // cannot be mounted over by its target.
            return Err(format!("{what} {p} became a symlink; refusing"));
        }
        let target = cstr(p)?;
        let covered = if meta.is_dir() {
            mount_empty_dir(&target)
        } else {
            cover_file(&target)
        };
        match covered {
            Ok(()) => hidden.push(p.clone()),
            // Removed between the look above and the mount (a daemon that
            // stopped just then): gone, as above.
            Err(_)
                if std::fs::symlink_metadata(p)
                    .is_err_and(|e| e.kind() == std::io::ErrorKind::NotFound) =>
            {
                log!(log, "{what} {p}: gone while being hidden, nothing to hide");
            }
            Err(e) => return Err(format!("hiding {p}: {e}")),
        }
    }
    Ok(hidden)
}

/// Binds each of `paths` that still exists (and was not hidden above)
/// read-only onto itself; returns the paths kept read-only. First each
/// directory above one of them (below the top level: `/home/dev`,
/// `~/.config`, the workspace's `.git`) is bound onto itself, read-write:
/// a mount point cannot be renamed, so `mv ~/.config ~/.c2` cannot carry a
/// cover away and leave a fresh `~/.config/systemd` to plant in.
fn read_only_each(paths: &[String], log: &Log) -> Result<Vec<String>, String> {
    let mut above: Vec<&str> = Vec::new();
    for p in paths {
        let mut a = Path::new(p.as_str()).parent();
        while let Some(dir) = a {
            if dir.components().count() > 2 {
                if let Some(d) = dir.to_str() {
                    if !above.contains(&d) {
                        above.push(d);
                    }
                }
            }
            a = dir.parent();
        }
    }
    // Outermost first, so an inner bind is not hidden by an outer one.
    above.sort_by_key(|d| d.matches('/').count());
    for d in above {
        match std::fs::symlink_metadata(d) {
            Ok(m) if m.is_dir() => {}
            _ => continue,
        }
        bind_onto_itself(&cstr(d)?)
            .map_err(|e| format!("binding {d} onto itself (kept from renames): {e}"))?;
    }
    let mut kept = Vec::new();
    for p in paths {
        match std::fs::symlink_metadata(p) {
            Ok(m) if m.file_type().is_symlink() => {
                return Err(format!("read-only file {p} became a symlink; refusing"));
            }
            Ok(_) => {}
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::NotFound | std::io::ErrorKind::PermissionDenied
                ) =>
            {
                log!(
                    log,
                    "read-only file {p}: not reachable here ({e}), nothing to keep"
                );
                continue;
            }
            Err(e) => return Err(format!("read-only file {p}: {e}")),
        }
        let target = cstr(p)?;
        bind_onto_itself(&target).map_err(|e| format!("binding {p} onto itself: {e}"))?;
        remount_bind(&target, libc::MS_RDONLY).map_err(|e| format!("{p} read-only: {e}"))?;
        kept.push(format!("{p} (read-only)"));
    }
    Ok(kept)
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
    bind_onto_itself(target)?;
    remount_bind(target, libc::MS_NOEXEC).map_err(|e| format!("remount noexec: {e}"))
}

/// Binds `target` onto itself, with what is mounted beneath it (so it
/// becomes a mount point of its own: remountable, and never renamed).
fn bind_onto_itself(target: &CString) -> Result<(), String> {
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
    Ok(())
}

/// Remounts the bind at `target` with `add` (read-only, noexec), keeping
/// the flags the kernel would not let a remount drop (nosuid, nodev,
/// noexec, read-only, the atime ones: locked in a user namespace).
fn remount_bind(target: &CString, add: libc::c_ulong) -> Result<(), String> {
    // SAFETY: statvfs writes into the struct we pass.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: a valid C string and a struct to fill.
    if unsafe { libc::statvfs(target.as_ptr(), &mut st) } != 0 {
        return Err(last("statvfs"));
    }
    let keep = [
        (libc::ST_NOSUID, libc::MS_NOSUID),
        (libc::ST_NODEV, libc::MS_NODEV),
        (libc::ST_NOEXEC, libc::MS_NOEXEC),
        (libc::ST_RDONLY, libc::MS_RDONLY),
        (libc::ST_NOATIME, libc::MS_NOATIME),
        (libc::ST_NODIRATIME, libc::MS_NODIRATIME),
        (libc::ST_RELATIME, libc::MS_RELATIME),
    ]
    .iter()
    .filter(|(st_flag, _)| st.f_flag & *st_flag != 0)
    .fold(0, |acc, (_, ms)| acc | ms);
    // SAFETY: a remount of a bind just made, valid C strings, no data.
    if unsafe {
        libc::mount(
            std::ptr::null(),
            target.as_ptr(),
            std::ptr::null(),
            libc::MS_BIND | libc::MS_REMOUNT | add | keep,
            std::ptr::null(),
        )
    } != 0
    {
        return Err(last("remount"));
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
    remount_bind(target, libc::MS_RDONLY).map_err(|e| format!("the bind read-only: {e}"))
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
        let plan = |d: &[String], c: &[String], admin: bool, user: bool| {
            hide(
                &Plan {
                    daemon_sockets: d,
                    credentials: c,
                    read_only: &[],
                    noexec: &[],
                    has_admin: admin,
                    user_namespace: user,
                },
                &log,
            )
        };
        assert_eq!(plan(&[], &[], true, false).unwrap(), Masked::Nothing);
        assert!(matches!(
            plan(&["/run/x.sock".into()], &[], false, false).unwrap(),
            Masked::NotHidden(_)
        ));
        // Credential stores are never left visible quietly.
        assert!(plan(&[], &["/root/.ssh".into()], false, false).is_err());
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
