//! The shims installed here, by file identity: what each one execs when a
//! supervised tree runs it (`exec::hop` lets a verifying backend exec that
//! straight away, without the shim's own exec in between).
//!
//! Inside a tree the shim does nothing but exec the real shell or program
//! (no config read, no server call): a shell's real path by argv[0]
//! (`bash` or `sh`), a program's link `/usr/lib/agentsh/programs/NAME`. The
//! files come from the install manifest (`installer::hop_files`, given by
//! the daemon), read again when the manifest changes (one `stat` of it
//! per lookup: nothing beside a traced exec's milliseconds); an identity is `(device, inode)` as the server
//! stats the file, so a file replaced since is simply not a shim here.
//!
//! Failure modes: a manifest or a shim that cannot be read or stat'd is
//! left out (its execs take the shim's hop, as without this).

use std::collections::HashMap;
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;
use std::sync::Mutex;

/// What a shim execs inside a tree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HopTo {
    /// A shell shim: the real shell argv[0] names (`bash`, else `sh`).
    Shell,
    /// A program shim: this link to the real program.
    Program(String),
}

impl HopTo {
    /// The path the shim would exec for `argv0`; `None` where the shim
    /// would do something else (the admin shell).
    pub fn path(&self, argv0: &[u8]) -> Option<String> {
        let base = agentsh_proto::install::called_as(argv0);
        match self {
            _ if base == b"admin-shell" => None,
            HopTo::Shell if base == b"bash" => Some(agentsh_proto::install::REAL_BASH.into()),
            HopTo::Shell => Some(agentsh_proto::install::REAL_SH.into()),
            HopTo::Program(link) => Some(link.clone()),
        }
    }
}

/// Lists the shim files (this machine's paths, links followed) and what
/// each execs; empty where none is installed.
pub type Lister = Box<dyn Fn() -> Vec<(PathBuf, HopTo)> + Send + Sync>;

/// The shims by identity, kept current with the manifest.
pub struct ShimHops {
    list: Lister,
    /// The manifest's path, whose change makes the list read again.
    manifest: PathBuf,
    cache: Mutex<Cache>,
}

#[derive(Default)]
struct Cache {
    /// The manifest's (inode, mtime seconds, mtime nanoseconds), or none.
    stamp: Option<(u64, i64, i64)>,
    by_id: HashMap<(u64, u64), HopTo>,
}

impl ShimHops {
    pub fn new(list: Lister) -> ShimHops {
        ShimHops {
            list,
            manifest: PathBuf::from(agentsh_proto::install::MANIFEST),
            cache: Mutex::default(),
        }
    }

    /// No shims (a unit test's, a server that never skips the hop).
    pub fn none() -> ShimHops {
        ShimHops::new(Box::new(Vec::new))
    }

    /// As [`ShimHops::new`], with the manifest's path given (a test's).
    pub fn with_manifest(list: Lister, manifest: PathBuf) -> ShimHops {
        ShimHops {
            manifest,
            ..ShimHops::new(list)
        }
    }

    /// What the shim with this identity execs; `None`: not a shim here.
    pub fn of(&self, identity: (u64, u64)) -> Option<HopTo> {
        let mut c = self
            .cache
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let stamp = std::fs::metadata(&self.manifest)
            .ok()
            .map(|m| (m.ino(), m.mtime(), m.mtime_nsec()));
        if stamp != c.stamp {
            c.stamp = stamp;
            c.by_id = (self.list)()
                .into_iter()
                .filter_map(|(p, to)| {
                    let m = std::fs::metadata(p).ok()?;
                    Some(((m.dev(), m.ino()), to))
                })
                .collect();
        }
        c.by_id.get(&identity).cloned()
    }

    /// Whether `identity` is any shim's.
    pub fn is_shim(&self, identity: (u64, u64)) -> bool {
        self.of(identity).is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_shell_shim_execs_the_shell_argv0_names_and_never_stands_for_the_admin_shell() {
        let sh = HopTo::Shell;
        assert_eq!(
            sh.path(b"sh").as_deref(),
            Some(agentsh_proto::install::REAL_SH)
        );
        assert_eq!(
            sh.path(b"-bash").as_deref(),
            Some(agentsh_proto::install::REAL_BASH)
        );
        assert_eq!(
            sh.path(b"/bin/bash").as_deref(),
            Some(agentsh_proto::install::REAL_BASH)
        );
        assert_eq!(
            sh.path(b"dash").as_deref(),
            Some(agentsh_proto::install::REAL_SH)
        );
        assert_eq!(sh.path(b"admin-shell"), None);
        let py = HopTo::Program("/usr/lib/agentsh/programs/python3.11".into());
        assert_eq!(
            py.path(b"python3").as_deref(),
            Some("/usr/lib/agentsh/programs/python3.11")
        );
        assert_eq!(py.path(b"-admin-shell"), None);
    }

    #[test]
    fn the_list_is_read_again_when_the_manifest_changes() {
        let dir = std::env::temp_dir().join(format!("agentsh-shimhops-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let shim = dir.join("python3.11");
        std::fs::write(&shim, b"shim").unwrap();
        let manifest = dir.join("manifest");
        let listed = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let l = listed.clone();
        let s = shim.clone();
        let hops = ShimHops::with_manifest(
            Box::new(move || {
                if l.load(std::sync::atomic::Ordering::Relaxed) {
                    vec![(s.clone(), HopTo::Program("/p/python3.11".into()))]
                } else {
                    Vec::new()
                }
            }),
            manifest.clone(),
        );
        let m = std::fs::metadata(&shim).unwrap();
        let id = (m.dev(), m.ino());
        assert_eq!(hops.of(id), None, "no manifest: no shims");
        listed.store(true, std::sync::atomic::Ordering::Relaxed);
        std::fs::write(&manifest, b"program /x\n").unwrap();
        assert_eq!(hops.of(id), Some(HopTo::Program("/p/python3.11".into())));
        assert!(!hops.is_shim((m.dev(), m.ino() + 1)));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
