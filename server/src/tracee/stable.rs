//! Whether the tree can change what an exec's lookups find between the
//! decision and the kernel's own lookup: every directory a path passes
//! through ([`path_is_stable`]) and the file itself ([`file_is_stable`]).
//! An approximation: see docs/security-model.md.
//!
//! Failure modes: a walk that fails or loops counts as changeable.

use super::file::FileMeta;

/// Is every directory a lookup of `path` passes through (following its
/// symlinks, in the tracee's root `root`) one the tree cannot change? A
/// directory counts as changeable when, for a caller with uid `uid` other
/// than 0, it is not owned by root or is group- or other-writable; for a root
/// caller, when it is neither beneath `no_write` (Landlock keeps every tree
/// from writing there) nor an ancestor of such a path. `false` also when the
/// walk fails or loops. An approximation: see docs/security-model.md.
///
/// `canonical` is where the lookup ends, as the kernel resolved it (the
/// path of the file opened, no symlink in it), when known: a step of the
/// walk that is a leading part of it is a real directory (or the file), so
/// it is not tested for a symlink. Only the other steps are (one `readlink`
/// each: EINVAL says "not a symlink"). Whatever a step's type, the
/// directory it is looked up in is checked.
pub fn path_is_stable(
    root: &str,
    path: &str,
    canonical: Option<&str>,
    uid: u32,
    no_write: &[&str],
) -> bool {
    use std::os::unix::fs::MetadataExt;
    let beneath = |p: &str, d: &str| {
        p == d || p.strip_prefix(d).is_some_and(|r| r.starts_with('/')) || d == "/"
    };
    let changeable = |dir: &str| -> bool {
        if uid == 0 {
            // Root may write anything Landlock does not keep from every tree.
            return !no_write.iter().any(|d| beneath(dir, d) || beneath(d, dir));
        }
        match std::fs::metadata(format!("{root}{dir}")) {
            Ok(m) => m.uid() != 0 || m.mode() & 0o022 != 0,
            Err(_) => true,
        }
    };
    let on_canonical = |here: &str| {
        canonical
            .is_some_and(|c| c == here || c.strip_prefix(here).is_some_and(|r| r.starts_with('/')))
    };
    let mut todo: Vec<String> = path
        .split('/')
        .filter(|c| !c.is_empty())
        .map(str::to_string)
        .rev()
        .collect();
    let mut dir = String::from("/");
    let mut hops = 0;
    while let Some(comp) = todo.pop() {
        if comp == "." {
            continue;
        }
        if comp == ".." {
            dir = match dir.rsplit_once('/') {
                Some(("", _)) | None => "/".into(),
                Some((parent, _)) => parent.into(),
            };
            continue;
        }
        if changeable(&dir) {
            return false;
        }
        let here = if dir == "/" {
            format!("/{comp}")
        } else {
            format!("{dir}/{comp}")
        };
        if on_canonical(&here) {
            dir = here;
            continue;
        }
        match std::fs::read_link(format!("{root}{here}")) {
            Ok(target) => {
                hops += 1;
                if hops > 40 {
                    return false;
                }
                let target = target.to_string_lossy().into_owned();
                if target.starts_with('/') {
                    dir = "/".into();
                }
                todo.extend(
                    target
                        .split('/')
                        .filter(|c| !c.is_empty())
                        .map(str::to_string)
                        .rev(),
                );
            }
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => dir = here,
            Err(_) => return false,
        }
    }
    true
}

/// Can the tree not write the file itself, so what the kernel reads from it
/// (its `#!` line, its content) is what was read here? For a caller with
/// uid `uid` other than 0: the file is owned by root and not writable by
/// group or others; for a root caller: its canonical path (in the tracee's
/// view) is beneath `no_write`, which Landlock keeps every tree from
/// writing. The same approximation as [`path_is_stable`].
pub fn file_is_stable(meta: &FileMeta, canonical: &str, uid: u32, no_write: &[&str]) -> bool {
    if uid == 0 {
        no_write.iter().any(|d| {
            canonical
                .strip_prefix(d)
                .is_some_and(|r| r.is_empty() || r.starts_with('/'))
        })
    } else {
        meta.uid == 0 && meta.mode & 0o022 == 0
    }
}

/// Whether this kernel refuses to open a running executable for writing
/// (`ETXTBSY`), so that a program's own image cannot change under it:
/// Linux does; gVisor does not (known by its identity, never probed there:
/// opening the server's image for writing would copy it up into the
/// sandbox's overlay). Elsewhere probed once, on the server's own image
/// (opened for writing and closed at once, never written): a kernel that
/// lets it open does not refuse; one that says anything else (`ETXTBSY`,
/// no right to open it, a read-only file system) is taken at Linux's word.
pub fn running_images_write_protected() -> bool {
    static PROBED: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *PROBED.get_or_init(|| {
        !is_gvisor()
            && std::fs::OpenOptions::new()
                .write(true)
                .open("/proc/self/exe")
                .is_err()
    })
}

/// Whether this kernel is gVisor's (`runsc`): its fixed, fake kernel
/// identity in `/proc/version`, or its `/proc/self/gvisor`.
pub fn is_gvisor() -> bool {
    std::fs::read_to_string("/proc/version")
        .unwrap_or_default()
        .contains("#1 SMP Sun Jan 10 15:06:54 PST 2016")
        || std::path::Path::new("/proc/self/gvisor").exists()
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_running_image_is_write_protected_on_linux() {
        // This test's own image, running: Linux refuses to open it for
        // writing (ETXTBSY as root, EACCES otherwise).
        assert_eq!(super::running_images_write_protected(), !super::is_gvisor());
    }

    use super::*;

    #[test]
    fn stable_paths() {
        let nw = ["/usr/bin", "/usr/lib"];
        let env = Some("/usr/bin/env");
        // Root-owned, not writable by others: stable for an ordinary user.
        assert!(path_is_stable("", "/usr/bin/env", None, 1000, &nw));
        assert!(path_is_stable("", "/usr/bin/env", env, 1000, &nw));
        // /tmp is world-writable.
        assert!(!path_is_stable("", "/tmp/x", None, 1000, &nw));
        assert!(!path_is_stable("", "/tmp/x", Some("/tmp/x"), 1000, &nw));
        // For root, only what Landlock keeps every tree from writing.
        assert!(path_is_stable("", "/usr/bin/env", None, 0, &nw));
        assert!(!path_is_stable("", "/var/tmp/x", None, 0, &nw));
        // A missing component is not stable.
        assert!(!path_is_stable("", "/nonexistent-dir/x", None, 1000, &nw));
    }

    #[test]
    fn a_canonical_hint_never_skips_a_detour_through_a_changeable_directory() {
        // For a root caller, with `no_write` = [<d>/a]: <d> (an ancestor) and
        // <d>/a are unchangeable, <d>/b is not.
        let d = std::env::temp_dir().join(format!("agentsh-walk-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(d.join("a")).unwrap();
        std::fs::create_dir_all(d.join("b")).unwrap();
        std::fs::write(d.join("a/f"), b"x").unwrap();
        std::os::unix::fs::symlink("a", d.join("link")).unwrap();
        std::os::unix::fs::symlink("../a/f", d.join("b/hop")).unwrap();
        std::os::unix::fs::symlink("b/hop", d.join("detour")).unwrap();
        let d = d.display().to_string();
        let a = format!("{d}/a");
        let nw = [a.as_str()];
        let f = format!("{d}/a/f");
        for hint in [None, Some(f.as_str())] {
            assert!(path_is_stable("", &f, hint, 0, &nw), "{hint:?}");
            assert!(path_is_stable("", &format!("{d}/link/f"), hint, 0, &nw));
            // Ends at <d>/a/f too, but through <d>/b.
            assert!(!path_is_stable("", &format!("{d}/detour"), hint, 0, &nw));
        }
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn who_may_write_the_file_itself() {
        let m = |uid, mode| FileMeta {
            dev: 1,
            ino: 2,
            mode: libc::S_IFREG | mode,
            uid,
            size: 3,
            mtime: (0, 0),
            ctime: (0, 0),
        };
        let nw = ["/usr/bin"];
        assert!(file_is_stable(&m(0, 0o755), "/opt/x", 1000, &nw));
        assert!(!file_is_stable(&m(1000, 0o755), "/opt/x", 1000, &nw));
        assert!(!file_is_stable(&m(0, 0o775), "/opt/x", 1000, &nw));
        assert!(!file_is_stable(&m(0, 0o757), "/opt/x", 1000, &nw));
        assert!(file_is_stable(&m(0, 0o755), "/usr/bin/x", 0, &nw));
        assert!(!file_is_stable(&m(0, 0o755), "/opt/x", 0, &nw));
        assert!(!file_is_stable(&m(0, 0o755), "/usr/binx", 0, &nw));
    }
}
