//! What agentsh protects whatever the policy says: the system paths and
//! agentsh's own files no tree may write, create or delete beneath, the
//! kernel's file systems, the one file beneath them every tree may write,
//! and the server's state no tree may read (see `landlock` for the threats).
//!
//! Failure modes: none; a protected path that does not exist is kept as
//! written (it may be created later).

use super::paths::{normalize, FsView};
use std::collections::BTreeSet;
use std::path::Path;

/// System paths no tree may write, create or delete beneath.
///
/// `/usr/local/bin` and `/usr/local/sbin` come before `/usr/bin` on every
/// default PATH: whoever can create `sh` there replaces the shim for every
/// SDK that spawns `sh` by name.
/// The shim and unixwrap are dynamically linked and run before any filter
/// exists: whoever can change `/etc/ld.so.preload`, a library or a shell
/// binary owns every later command. `/etc` also holds `shim.conf`.
pub const SYSTEM_NO_WRITE: &[&str] = &[
    "/etc",
    "/bin",
    "/sbin",
    "/lib",
    "/lib32",
    "/lib64",
    "/libx32",
    "/usr/bin",
    "/usr/sbin",
    "/usr/lib",
    "/usr/lib32",
    "/usr/lib64",
    "/usr/libx32",
    "/usr/libexec",
    // First on every default PATH: a `sh` dropped here would be the next
    // SDK command's shell, unsupervised.
    "/usr/local/bin",
    "/usr/local/sbin",
];

/// The kernel's own file systems no tree may write, whatever the policy, but
/// where an explicit `allow` beneath (the shipped policies' tree root's
/// `/proc/self/oom_score_adj`, which E2B writes) still holds. Threats: a
/// process writing another's memory through `/proc/<pid>/mem` (a parent
/// rewriting its child's exec path after the supervisor read it: issue 21),
/// and a root tree changing the kernel's behaviour for everyone
/// (`/proc/sys/kernel/core_pattern`'s crash hook and `kernel.modprobe` run
/// as root outside every tree; cgroup v1 `release_agent`, binfmt_misc,
/// `/proc/sysrq-trigger`).
pub const KERNEL_NO_WRITE: &[&str] = &["/proc", "/sys"];

/// The one file under [`KERNEL_NO_WRITE`] every tree may write, whatever the
/// policy: its root's own `oom_score_adj` (`/proc/self` is resolved by
/// unixwrap, in the process that becomes the tree's shell), which E2B's
/// wrapper writes before every command (`echo 100 > /proc/$$/oom_score_adj`).
pub const OWN_OOM_SCORE_ADJ: &str = "/proc/self/oom_score_adj";

/// What agentsh protects whatever the policy says.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SelfProtection {
    /// Canonical absolute paths; no write, create or delete beneath them.
    pub no_write: Vec<String>,
    /// Canonical absolute paths no tree may read (the server's state: its
    /// approval token and notify sockets).
    pub no_read: Vec<String>,
    /// The server's API port, removed from every TCP connect allow-list.
    pub api_port: Option<u16>,
}

impl SelfProtection {
    /// [`SYSTEM_NO_WRITE`] plus `extra` (agentsh's own files), canonicalized
    /// through `fs` and deduplicated; a path that does not exist is kept as
    /// written (it may be created later).
    pub fn new(
        extra: &[&Path],
        no_read: &[&Path],
        api_port: Option<u16>,
        fs: &dyn FsView,
    ) -> SelfProtection {
        let canon = |paths: Vec<String>| {
            let mut set = BTreeSet::new();
            for p in paths {
                let Some(p) = normalize(&p) else { continue };
                set.insert(fs.canonical(&p).unwrap_or_else(|| p.clone()));
                set.insert(p);
            }
            set.into_iter().collect::<Vec<_>>()
        };
        let show = |p: &&Path| p.display().to_string();
        let mut no_write: Vec<String> = SYSTEM_NO_WRITE
            .iter()
            .map(std::string::ToString::to_string)
            .collect();
        no_write.extend(extra.iter().map(show));
        SelfProtection {
            no_write: canon(no_write),
            no_read: canon(no_read.iter().map(show).collect()),
            api_port,
        }
    }
}
