//! Why trees' cgroups cannot be made here, or one cannot be made for a
//! tree: each says which file or directory, what the kernel answered, and
//! what an operator can do (the texts `agentsh detect` and a refused
//! wrap-init say).
//!
//! Failure modes: none of its own; these are values.

use std::io;
use std::path::PathBuf;

/// What stands in the way of limits: the delegation (`delegation`), its
/// survey (`probe`), or one tree's cgroup (`tree`).
#[derive(Debug, thiserror::Error)]
pub enum CgroupError {
    /// `/proc/self/cgroup` or `/proc/self/mountinfo` (`file`).
    #[error("{file} cannot be read: {source}")]
    Proc {
        file: &'static str,
        #[source]
        source: io::Error,
    },
    #[error("no cgroup v2 hierarchy (no `0::` line in /proc/self/cgroup)")]
    NoV2,
    #[error("no cgroup2 mount shows this process's cgroup {0} (is cgroup2 mounted?)")]
    NoMount(String),
    /// A file of the cgroup `dir` (`cgroup.controllers`, `cgroup.procs`).
    #[error("{}/{file}: {source}", dir.display())]
    Read {
        dir: PathBuf,
        file: &'static str,
        #[source]
        source: io::Error,
    },
    /// Controllers the limits use that this host keeps on cgroup v1.
    #[error(
        "the {} controller{} {} on cgroup v1 hierarchies on this host; the cgroup v2 \
         mount at {} offers only [{}]: boot with systemd.unified_cgroup_hierarchy=1 \
         (or cgroup_no_v1=all) for limits",
        on_v1.join(", "),
        if on_v1.len() == 1 { "" } else { "s" },
        if on_v1.len() == 1 { "is" } else { "are" },
        dir.display(),
        offered.join(" ")
    )]
    OnV1 {
        on_v1: Vec<&'static str>,
        dir: PathBuf,
        offered: Vec<String>,
    },
    #[error(
        "{} offers none of the controllers limits use ({}): its parent has not \
         delegated them (systemd: Delegate=yes in the unit)",
        dir.display(),
        controllers.join(", ")
    )]
    NoControllers {
        dir: PathBuf,
        controllers: &'static [&'static str],
    },
    /// `access(W_OK)` says no (`agentsh detect`, changing nothing).
    #[error("{} is not writable here (a read-only /sys/fs/cgroup, or not root)", control.display())]
    NotWritable { control: PathBuf },
    /// Writing `cgroup.subtree_control` failed other than for processes.
    #[error(
        "{} is not this server's to change ({source}): run it as root on the host, or \
         give it a delegated cgroup (systemd: Delegate=yes; a container: a \
         writable /sys/fs/cgroup)",
        control.display()
    )]
    NotOurs {
        control: PathBuf,
        #[source]
        source: io::Error,
    },
    /// Processes still in the cgroup after the server moved out (`others`:
    /// their pids, for the message).
    #[error(
        "{} cannot enable {} for its children ({source}): it still holds other \
         processes ({others}); give the server a cgroup of its own",
        dir.display(),
        controllers.join(", ")
    )]
    Shared {
        dir: PathBuf,
        controllers: Vec<&'static str>,
        others: String,
        #[source]
        source: io::Error,
    },
    #[error("cannot move the server into {}: {source}", leaf.display())]
    MoveServer {
        leaf: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("cannot move pid {pid} into {}: {source}", leaf.display())]
    MoveOther {
        pid: String,
        leaf: PathBuf,
        #[source]
        source: io::Error,
    },
    /// A cgroup directory (a leaf, a tree's) that cannot be made.
    #[error("cannot make {}: {source}", dir.display())]
    Make {
        dir: PathBuf,
        #[source]
        source: io::Error,
    },
    /// A tree's limit needs a controller its parent does not enable.
    #[error(
        "the {controller} controller is not enabled beneath {} (it offers [{}])",
        parent.display(),
        enabled.join(" ")
    )]
    NotEnabled {
        controller: &'static str,
        parent: PathBuf,
        enabled: Vec<String>,
    },
    #[error("cannot write {value:?} to {}/{file}: {source}", dir.display())]
    Write {
        dir: PathBuf,
        file: &'static str,
        value: String,
        #[source]
        source: io::Error,
    },
}
