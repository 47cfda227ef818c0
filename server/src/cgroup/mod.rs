//! Limits per session (processes, memory, CPU, wall time), through cgroup
//! v2: each tree whose session has `limits:` gets a cgroup of its own,
//! made at its wrap-init beneath the server's, with the limits written and
//! the shell's first process (the shim, before anything of the command
//! runs) moved into it; everything the tree starts is born there.
//!
//! Where: the server's own cgroup, found from `/proc/self/cgroup` (`0::`)
//! and the cgroup2 mount in `/proc/self/mountinfo` (a container's
//! namespaced `/sys/fs/cgroup` too). It must offer the controllers the
//! limits need (`cgroup.controllers`) and be the server's to write: root on
//! a host, or a delegated cgroup (systemd's `Delegate=yes`, a container
//! with a writable cgroup). The first tree with limits enables the
//! controllers for the cgroup's children (`cgroup.subtree_control`); a
//! cgroup that holds processes cannot do that (the kernel's "no internal
//! processes" rule), so the server first moves itself into a leaf of its
//! own, `agentsh-server`. A cgroup that still holds other processes (an
//! SDK daemon beside the server) is said, not rearranged, except where it
//! is the root of the server's cgroup namespace and not the host's root
//! cgroup: a container's own cgroup, whose processes are the container's
//! (`agentsh entrypoint` and the SDK daemon beside the server); they are
//! moved into a leaf, `agentsh-others`, as an init system's scope would be.
//! The answer is kept: one try per server.
//!
//! Why the tree cannot undo it: its filter refuses `clone3` (so no
//! `CLONE_INTO_CGROUP`), `mount`, and its Landlock ruleset gives no write
//! to `/sys`; the attack tests try each (tests/tests/limits.rs).
//!
//! Failure modes: no cgroup v2, the controllers elsewhere (a cgroup v1
//! host, as this project's own CI machine is), a cgroup not writable or
//! shared: [`Cgroups::delegation`] says which and why; a session whose
//! limits are `required` then refuses its shells with that reason
//! (`api::wrap_init`), `best_effort` runs them unlimited and says so.

pub mod tree;

pub use tree::TreeCgroup;

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
    state: OnceLock<Result<Delegation, String>>,
}

/// The controllers agentsh's limits use.
pub const CONTROLLERS: [&str; 3] = ["pids", "memory", "cpu"];

/// The leaf the server moves itself into when its cgroup must have no
/// processes of its own.
const SERVER_LEAF: &str = "agentsh-server";

/// Where the other processes of a container's own cgroup go (module doc).
const OTHERS_LEAF: &str = "agentsh-others";

impl Cgroups {
    /// The delegation, made on first use (see the module doc).
    ///
    /// # Errors
    /// Why trees' cgroups cannot be made here, in words for an operator.
    pub fn delegation(&self) -> Result<&Delegation, &str> {
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
            .map_err(String::as_str)
    }
}

impl Delegation {
    /// A cgroup for the tree whose first process is `pid`, with `limits`
    /// (`TreeCgroup::place`), named `agentsh-tree-<pid>-<n>`.
    ///
    /// # Errors
    /// What could not be made or written, and why.
    pub fn place(&self, limits: &Limits, pid: u32) -> Result<TreeCgroup, String> {
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        let dir = self.dir.join(format!("agentsh-tree-{pid}-{n}"));
        TreeCgroup::place(dir, &self.controllers, limits, pid)
    }
}

/// Where this process's cgroup v2 directory is, and what it offers, without
/// changing anything (`agentsh detect` says this).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Probe {
    pub dir: PathBuf,
    /// `dir` is the root of this process's cgroup namespace and not the
    /// host's root cgroup: a container's own cgroup.
    pub container: bool,
    /// `cgroup.controllers` of `dir`.
    pub offered: Vec<String>,
}

/// Finds the server's cgroup v2 directory.
///
/// # Errors
/// No `0::` line, no cgroup2 mount that shows it, or its controllers
/// unreadable; the controllers this host keeps on cgroup v1 are named.
pub fn probe() -> Result<Probe, String> {
    let own = std::fs::read_to_string("/proc/self/cgroup")
        .map_err(|e| format!("/proc/self/cgroup cannot be read: {e}"))?;
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo")
        .map_err(|e| format!("/proc/self/mountinfo cannot be read: {e}"))?;
    let dir = v2_dir(&own, &mountinfo)?;
    let offered = std::fs::read_to_string(dir.join("cgroup.controllers"))
        .map_err(|e| format!("{}/cgroup.controllers: {e}", dir.display()))?;
    let offered: Vec<String> = offered.split_whitespace().map(str::to_string).collect();
    let on_v1: Vec<&str> = CONTROLLERS
        .iter()
        .copied()
        .filter(|c| !offered.iter().any(|o| o == c) && on_v1(&own, c))
        .collect();
    if !on_v1.is_empty() {
        return Err(format!(
            "the {} controller{} {} on cgroup v1 hierarchies on this host; the cgroup v2 \
             mount at {} offers only [{}]: boot with systemd.unified_cgroup_hierarchy=1 \
             (or cgroup_no_v1=all) for limits",
            on_v1.join(", "),
            if on_v1.len() == 1 { "" } else { "s" },
            if on_v1.len() == 1 { "is" } else { "are" },
            dir.display(),
            offered.join(" ")
        ));
    }
    let container =
        own.lines().any(|l| l.trim_end() == "0::/") && dir.join("cgroup.freeze").exists();
    Ok(Probe {
        dir,
        container,
        offered,
    })
}

/// What `agentsh detect` says of limits here, changing nothing: whether
/// trees' cgroups can be made, where, and what stands in the way.
///
/// # Errors
/// Why limits cannot be applied here (as [`Cgroups::delegation`] would say).
pub fn assess() -> Result<String, String> {
    let p = probe()?;
    let offered = usable(&p)?;
    let control = p.dir.join("cgroup.subtree_control");
    if !writable(&control) {
        return Err(format!(
            "{} is not writable here (a read-only /sys/fs/cgroup, or not root)",
            control.display()
        ));
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

/// The cgroup v2 directory of the process whose `/proc/<pid>/cgroup` is
/// `own` and whose mounts are `mountinfo`.
fn v2_dir(own: &str, mountinfo: &str) -> Result<PathBuf, String> {
    let rel = own
        .lines()
        .find_map(|l| l.strip_prefix("0::"))
        .ok_or("no cgroup v2 hierarchy (no `0::` line in /proc/self/cgroup)")?;
    // mountinfo: ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTS... - FSTYPE SOURCE SUPER
    let mut best: Option<(usize, PathBuf)> = None;
    for line in mountinfo.lines() {
        let Some((left, right)) = line.split_once(" - ") else {
            continue;
        };
        if right.split_whitespace().next() != Some("cgroup2") {
            continue;
        }
        let f: Vec<&str> = left.split_whitespace().collect();
        let (Some(root), Some(point)) = (f.get(3), f.get(4)) else {
            continue;
        };
        let root = unescape(root);
        let under = if root == "/" {
            Some(rel.trim_start_matches('/'))
        } else {
            rel.strip_prefix(root.as_str())
                .filter(|r| r.is_empty() || r.starts_with('/'))
                .map(|r| r.trim_start_matches('/'))
        };
        if let Some(under) = under {
            let point = PathBuf::from(unescape(point));
            let dir = if under.is_empty() {
                point
            } else {
                point.join(under)
            };
            // The mount nearest the cgroup (the longest root) wins.
            if best.as_ref().is_none_or(|(l, _)| root.len() > *l) {
                best = Some((root.len(), dir));
            }
        }
    }
    best.map(|(_, d)| d).ok_or_else(|| {
        format!("no cgroup2 mount shows this process's cgroup {rel} (is cgroup2 mounted?)")
    })
}

/// Whether `own` (a `/proc/<pid>/cgroup`) names a v1 hierarchy that holds
/// `controller`.
fn on_v1(own: &str, controller: &str) -> bool {
    own.lines().any(|l| {
        let mut f = l.splitn(3, ':');
        let (_, list) = (f.next(), f.next().unwrap_or(""));
        !list.is_empty() && list.split(',').any(|c| c == controller)
    })
}

/// mountinfo's octal escapes (`\040` for a space).
fn unescape(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' && i + 3 < b.len() && b[i + 1..i + 4].iter().all(u8::is_ascii_digit) {
            out.push((b[i + 1] - b'0') * 64 + (b[i + 2] - b'0') * 8 + (b[i + 3] - b'0'));
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The controllers limits use that `p` offers.
///
/// # Errors
/// None of them: its parent has not delegated them.
fn usable(p: &Probe) -> Result<Vec<&'static str>, String> {
    let offered: Vec<&'static str> = CONTROLLERS
        .iter()
        .copied()
        .filter(|c| p.offered.iter().any(|o| o == c))
        .collect();
    if offered.is_empty() {
        return Err(format!(
            "{} offers none of the controllers limits use ({}): its parent has not \
             delegated them (systemd: Delegate=yes in the unit)",
            p.dir.display(),
            CONTROLLERS.join(", ")
        ));
    }
    Ok(offered)
}

/// Makes the server's cgroup one whose children can be limited (module doc).
fn delegate() -> Result<Delegation, String> {
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
            while let Err(e) = std::fs::write(&control, enable.trim_end()) {
                if e.raw_os_error() != Some(libc::EBUSY) || tries == 0 {
                    let others = procs_of(&p.dir);
                    return Err(format!(
                        "{} cannot enable {} for its children ({e}): it still holds other \
                         processes ({others}); give the server a cgroup of its own",
                        p.dir.display(),
                        wanted.join(", ")
                    ));
                }
                tries -= 1;
                move_others(&p.dir)?;
            }
        }
        Err(e) => {
            return Err(format!(
                "{} is not this server's to change ({e}): run it as root on the host, or \
                 give it a delegated cgroup (systemd: Delegate=yes; a container: a \
                 writable /sys/fs/cgroup)",
                control.display()
            ))
        }
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
fn move_self_into(leaf: &Path) -> Result<(), String> {
    make_leaf(leaf)?;
    std::fs::write(leaf.join("cgroup.procs"), std::process::id().to_string())
        .map_err(|e| format!("cannot move the server into {}: {e}", leaf.display()))
}

/// Moves every process still in a container's own cgroup `dir` into its
/// leaf [`OTHERS_LEAF`] (an init system's scope, as systemd makes in a
/// container): the container's cgroup, and its limits, stay theirs. Only
/// where `dir` is the root of the server's cgroup namespace: a host's
/// cgroups are not this server's to rearrange.
fn move_others(dir: &Path) -> Result<(), String> {
    let leaf = dir.join(OTHERS_LEAF);
    make_leaf(&leaf)?;
    let procs = std::fs::read_to_string(dir.join("cgroup.procs"))
        .map_err(|e| format!("{}/cgroup.procs: {e}", dir.display()))?;
    let mut moved = Vec::new();
    for pid in procs.split_whitespace() {
        match std::fs::write(leaf.join("cgroup.procs"), pid) {
            Ok(()) => moved.push(pid),
            // Gone meanwhile.
            Err(e) if e.raw_os_error() == Some(libc::ESRCH) => {}
            Err(e) => {
                return Err(format!(
                    "cannot move pid {pid} into {}: {e}",
                    leaf.display()
                ))
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
fn make_leaf(leaf: &Path) -> Result<(), String> {
    match std::fs::create_dir(leaf) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(format!("cannot make {}: {e}", leaf.display())),
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

    const V1_HYBRID: &str = "9:name=systemd:/\n8:pids:/\n4:memory:/x\n1:cpu:/\n0::/\n";

    #[test]
    fn the_servers_cgroup_is_found_through_the_mount_that_shows_it() {
        let mi = "30 25 0:26 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw\n";
        assert_eq!(
            v2_dir("0::/system.slice/agentsh.service\n", mi).unwrap(),
            Path::new("/sys/fs/cgroup/system.slice/agentsh.service")
        );
        // A container's namespaced mount (root is the container's cgroup).
        let mi = "40 30 0:26 /docker/abc /sys/fs/cgroup ro - cgroup2 cgroup2 rw\n\
                  41 30 0:26 / /mnt/all\\040cg rw - cgroup2 cgroup2 rw\n";
        assert_eq!(
            v2_dir("0::/docker/abc/sub\n", mi).unwrap(),
            Path::new("/sys/fs/cgroup/sub")
        );
        assert_eq!(
            v2_dir("0::/other\n", mi).unwrap(),
            Path::new("/mnt/all cg/other")
        );
        assert!(v2_dir("1:cpu:/\n", mi)
            .unwrap_err()
            .contains("no cgroup v2"));
        assert!(v2_dir("0::/x\n", "")
            .unwrap_err()
            .contains("no cgroup2 mount"));
    }

    #[test]
    fn controllers_kept_on_v1_are_named() {
        assert!(on_v1(V1_HYBRID, "pids"));
        assert!(on_v1(V1_HYBRID, "memory"));
        assert!(!on_v1(V1_HYBRID, "io"));
        assert!(!on_v1("0::/\n", "pids"));
    }
}
