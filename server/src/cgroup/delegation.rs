//! The server's cgroup made one whose children can be limited: the
//! controllers limits use enabled for its children
//! (`cgroup.subtree_control`), the server first moved into a leaf of its
//! own where its cgroup holds processes (the kernel's "no internal
//! processes" rule), a container's other processes into theirs; the
//! answer kept, one try per server. [`assess`] says the same without
//! changing anything.
//!
//! Failure modes: the probe's (no cgroup v2, the controllers elsewhere), a
//! `cgroup.subtree_control` not this server's to write, a cgroup still
//! shared with other processes, a leaf that cannot be made or a process
//! that cannot be moved: a [`CgroupError`] that says which and why; a
//! session whose limits are `required` then refuses its shells with it.

use super::error::CgroupError;
use super::probe::{probe, usable};
use super::tree::TreeCgroup;
use crate::vocab::Limits;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

/// The server's cgroup where trees' cgroups are made.
#[derive(Debug)]
pub struct Delegation {
    /// The directory (in this process's view) whose children the trees'
    /// cgroups are.
    pub dir: PathBuf,
    /// Controllers enabled for the children.
    pub controllers: Vec<String>,
    /// Names the next tree cgroup.
    next: AtomicU64,
}

/// The delegation, made at the first tree that needs it.
#[derive(Default)]
pub struct Cgroups {
    state: OnceLock<Result<Delegation, CgroupError>>,
}

/// The leaf the server moves itself into when its cgroup must have no
/// processes of its own.
const SERVER_LEAF: &str = "agentsh-server";

/// Where the other processes of a container's own cgroup go (the face's
/// doc).
const OTHERS_LEAF: &str = "agentsh-others";

impl Cgroups {
    /// The delegation, made on first use (see the module doc).
    ///
    /// # Errors
    /// Why trees' cgroups cannot be made here, in words for an operator.
    pub fn delegation(&self) -> Result<&Delegation, &CgroupError> {
        self.state
            .get_or_init(|| {
                let d = delegate();
                match &d {
                    Ok(d) => tracing::info!(
                        dir = %d.dir.display(),
                        controllers = %d.controllers.join(" "),
                        "cgroup v2: trees with limits get a cgroup here"
                    ),
                    Err(e) => tracing::warn!("cgroup v2 limits unavailable: {e}"),
                }
                d
            })
            .as_ref()
    }
}

impl Delegation {
    /// A cgroup for the tree whose first process is `pid`, with `limits`
    /// (`TreeCgroup::place`), named `agentsh-tree-<pid>-<n>`.
    ///
    /// # Errors
    /// What could not be made or written, and why.
    pub fn place(&self, limits: &Limits, pid: u32) -> Result<TreeCgroup, CgroupError> {
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        let dir = self.dir.join(format!("agentsh-tree-{pid}-{n}"));
        TreeCgroup::place(dir, &self.controllers, limits, pid)
    }
}

/// What `agentsh detect` says of limits here, changing nothing: whether
/// trees' cgroups can be made, where, and what stands in the way.
///
/// # Errors
/// Why limits cannot be applied here (as [`Cgroups::delegation`] would say).
pub fn assess() -> Result<String, CgroupError> {
    let p = probe()?;
    let offered = usable(&p)?;
    let control = p.dir.join("cgroup.subtree_control");
    if !writable(&control) {
        return Err(CgroupError::NotWritable { control });
    }
    let own = std::process::id().to_string();
    let procs = std::fs::read_to_string(p.dir.join("cgroup.procs")).unwrap_or_default();
    let others = procs.split_whitespace().filter(|q| *q != own).count();
    let note = if others > 0 && p.container {
        format!(
            "; a container's own cgroup: its {others} other process(es) move into \
             {OTHERS_LEAF}/, the server into {SERVER_LEAF}/"
        )
    } else if others > 0 && p.dir.join("cgroup.freeze").exists() {
        format!(
            "; {others} other process(es) share this cgroup: the server moves into \
             {SERVER_LEAF}/, and the limits need them gone from it"
        )
    } else {
        String::new()
    };
    Ok(format!(
        "cgroup v2 at {} [{}]{note}",
        p.dir.display(),
        offered.join(" ")
    ))
}

/// `access(W_OK)`: whether this process may write `path`.
fn writable(path: &Path) -> bool {
    use std::os::unix::ffi::OsStrExt;
    let Ok(c) = std::ffi::CString::new(path.as_os_str().as_bytes()) else {
        return false;
    };
    // SAFETY: a valid NUL-terminated path; access only reads it.
    unsafe { libc::access(c.as_ptr(), libc::W_OK) == 0 }
}

/// Makes the server's cgroup one whose children can be limited (module doc).
fn delegate() -> Result<Delegation, CgroupError> {
    let p = probe()?;
    let wanted = usable(&p)?;
    let enable: String = wanted.iter().map(|c| format!("+{c} ")).collect();
    let control = p.dir.join("cgroup.subtree_control");
    match std::fs::write(&control, enable.trim_end()) {
        Ok(()) => {}
        Err(e) if e.raw_os_error() == Some(libc::EBUSY) => {
            // Processes in our cgroup: the server moves into a leaf.
            move_self_into(&p.dir.join(SERVER_LEAF))?;
            let mut tries = if p.container { 4 } else { 0 };
            while let Err(source) = std::fs::write(&control, enable.trim_end()) {
                if source.raw_os_error() != Some(libc::EBUSY) || tries == 0 {
                    return Err(CgroupError::Shared {
                        others: procs_of(&p.dir),
                        dir: p.dir,
                        controllers: wanted,
                        source,
                    });
                }
                tries -= 1;
                move_others(&p.dir)?;
            }
        }
        Err(source) => return Err(CgroupError::NotOurs { control, source }),
    }
    remove_left_over(&p.dir);
    Ok(Delegation {
        dir: p.dir,
        controllers: wanted.iter().map(ToString::to_string).collect(),
        next: AtomicU64::new(1),
    })
}

/// Removes the trees' cgroups a previous server left in `dir` that are empty
/// now (its trees outlived it, limited still, and have ended since); one
/// that still holds processes stays, and keeps limiting them.
fn remove_left_over(dir: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name();
        if name.to_string_lossy().starts_with("agentsh-tree-") {
            match std::fs::remove_dir(e.path()) {
                Ok(()) => tracing::info!(
                    cgroup = %e.path().display(),
                    "removed an empty tree cgroup a previous server left"
                ),
                Err(err) => tracing::info!(
                    cgroup = %e.path().display(),
                    "a tree cgroup a previous server left stays ({err}): its processes keep \
                     its limits"
                ),
            }
        }
    }
}

/// Moves this whole process into `leaf` (made if missing).
fn move_self_into(leaf: &Path) -> Result<(), CgroupError> {
    make_leaf(leaf)?;
    std::fs::write(leaf.join("cgroup.procs"), std::process::id().to_string()).map_err(|source| {
        CgroupError::MoveServer {
            leaf: leaf.to_path_buf(),
            source,
        }
    })
}

/// Moves every process still in a container's own cgroup `dir` into its
/// leaf [`OTHERS_LEAF`] (an init system's scope, as systemd makes in a
/// container): the container's cgroup, and its limits, stay theirs. Only
/// where `dir` is the root of the server's cgroup namespace: a host's
/// cgroups are not this server's to rearrange.
fn move_others(dir: &Path) -> Result<(), CgroupError> {
    let leaf = dir.join(OTHERS_LEAF);
    make_leaf(&leaf)?;
    let procs =
        std::fs::read_to_string(dir.join("cgroup.procs")).map_err(|source| CgroupError::Read {
            dir: dir.to_path_buf(),
            file: "cgroup.procs",
            source,
        })?;
    let mut moved = Vec::new();
    for pid in procs.split_whitespace() {
        match std::fs::write(leaf.join("cgroup.procs"), pid) {
            Ok(()) => moved.push(pid),
            // Gone meanwhile.
            Err(e) if e.raw_os_error() == Some(libc::ESRCH) => {}
            Err(source) => {
                return Err(CgroupError::MoveOther {
                    pid: pid.to_string(),
                    leaf,
                    source,
                })
            }
        }
    }
    tracing::info!(
        cgroup = %dir.display(),
        "the container's other processes (pid {}) moved into {OTHERS_LEAF}/ so trees' \
         cgroups can be limited beside them",
        moved.join(", ")
    );
    Ok(())
}

/// Makes the cgroup `leaf` unless it exists.
fn make_leaf(leaf: &Path) -> Result<(), CgroupError> {
    match std::fs::create_dir(leaf) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(()),
        Err(source) => Err(CgroupError::Make {
            dir: leaf.to_path_buf(),
            source,
        }),
    }
}

/// The pids in `dir`'s `cgroup.procs`, for a message.
fn procs_of(dir: &Path) -> String {
    let procs = std::fs::read_to_string(dir.join("cgroup.procs")).unwrap_or_default();
    let pids: Vec<&str> = procs.split_whitespace().take(8).collect();
    if pids.is_empty() {
        "none readable".into()
    } else {
        format!("pid {}", pids.join(", "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_leaf_that_cannot_be_made_names_it_and_keeps_the_kernels_error() {
        let leaf = Path::new("/proc/agentsh-no-such-cgroup").join(SERVER_LEAF);
        let e = move_self_into(&leaf).unwrap_err();
        assert!(
            matches!(&e, CgroupError::Make { dir, .. } if dir == &leaf),
            "{e:?}"
        );
        assert!(
            e.to_string()
                .starts_with("cannot make /proc/agentsh-no-such-cgroup/agentsh-server: "),
            "{e}"
        );
        assert!(std::error::Error::source(&e).is_some());
    }

    #[test]
    fn a_cgroup_whose_processes_cannot_be_read_moves_none_and_says_so() {
        let dir =
            std::env::temp_dir().join(format!("agentsh-delegation-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let e = move_others(&dir).unwrap_err();
        let _ = std::fs::remove_dir(dir.join(OTHERS_LEAF));
        let _ = std::fs::remove_dir(&dir);
        assert!(
            matches!(&e, CgroupError::Read { dir: d, file: "cgroup.procs", .. } if d == &dir),
            "{e:?}"
        );
        assert!(
            e.to_string()
                .starts_with(&format!("{}/cgroup.procs: ", dir.display())),
            "{e}"
        );
    }
}
