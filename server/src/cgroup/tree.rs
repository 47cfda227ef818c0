//! One tree's cgroup: made with its limits at wrap-init, the shell's first
//! process moved in, then, when the tree has ended, what the kernel counted
//! (forks refused at `pids.max`, processes killed at `memory.max`) said as
//! `limit` events and the cgroup removed.
//!
//! The limits are written before the process is moved in, so no instant of
//! the tree runs unlimited. Memory: `memory.max` with no swap
//! (`memory.swap.max` 0) and `memory.oom.group`, so a tree over its memory
//! is ended whole rather than left with some processes killed. Wall time:
//! `cgroup.kill` kills every process of the cgroup at once (no fork can
//! outrun it), from a timer the handoff's task runs ([`TreeCgroup::wall`]).
//!
//! Failure modes: a limit that cannot be written or a process that cannot
//! be moved undoes what was made (the directory is removed) and returns the
//! file and the kernel's error (a [`CgroupError`]); a cgroup that cannot be
//! removed at the end (a process left in it, e.g. a shell that fell back to
//! running unsupervised) is logged and left.

use super::error::CgroupError;
use crate::audit::{AuditLog, EventBody, LimitEvent};
use crate::vocab::Limits;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// A tree's cgroup (module doc).
#[derive(Debug)]
pub struct TreeCgroup {
    pub dir: PathBuf,
    pub limits: Limits,
    /// The process moved in first (the shell's, before its command ran).
    pub pid: u32,
}

impl TreeCgroup {
    /// Makes the cgroup `dir` (a child of a cgroup whose children get
    /// `enabled` controllers), writes `limits`, moves `pid` in.
    ///
    /// # Errors
    /// The file that could not be written and why; nothing is left behind.
    pub fn place(
        dir: PathBuf,
        enabled: &[String],
        limits: &Limits,
        pid: u32,
    ) -> Result<TreeCgroup, CgroupError> {
        if let Some(controller) = limits
            .controllers()
            .into_iter()
            .find(|c| !enabled.iter().any(|o| o == c))
        {
            return Err(CgroupError::NotEnabled {
                controller,
                parent: dir.parent().unwrap_or(&dir).to_path_buf(),
                enabled: enabled.to_vec(),
            });
        }
        if let Err(source) = std::fs::create_dir(&dir) {
            return Err(CgroupError::Make { dir, source });
        }
        let cg = TreeCgroup {
            dir,
            limits: limits.clone(),
            pid,
        };
        match cg
            .write_limits()
            .and_then(|()| cg.write("cgroup.procs", &pid.to_string()))
        {
            Ok(()) => Ok(cg),
            Err(e) => {
                let _ = std::fs::remove_dir(&cg.dir);
                Err(e)
            }
        }
    }

    fn write(&self, file: &'static str, value: &str) -> Result<(), CgroupError> {
        std::fs::write(self.dir.join(file), value).map_err(|source| CgroupError::Write {
            dir: self.dir.clone(),
            file,
            value: value.to_string(),
            source,
        })
    }

    fn write_limits(&self) -> Result<(), CgroupError> {
        let l = &self.limits;
        if let Some(p) = l.pids {
            self.write("pids.max", &p.to_string())?;
        }
        if let Some(m) = l.memory {
            self.write("memory.max", &m.to_string())?;
            // Absent without swap accounting: nothing to close then.
            if self.dir.join("memory.swap.max").exists() {
                self.write("memory.swap.max", "0")?;
            }
            self.write("memory.oom.group", "1")?;
        }
        if let Some((q, p)) = l.cpu {
            self.write("cpu.max", &format!("{q} {p}"))?;
        }
        Ok(())
    }

    /// Kills every process of the tree (`cgroup.kill`, Linux 5.14+).
    ///
    /// # Errors
    /// The kernel's: no `cgroup.kill` (older kernels), or the cgroup gone.
    pub fn kill(&self) -> io::Result<()> {
        std::fs::write(self.dir.join("cgroup.kill"), "1")
    }

    /// Whether a process is still in the cgroup (`cgroup.events`); a file
    /// that cannot be read says yes (the wall-time kill is then tried, not
    /// skipped).
    pub fn populated(&self) -> bool {
        std::fs::read_to_string(self.dir.join("cgroup.events"))
            .map_or(true, |t| field(&t, "populated") != Some(0))
    }

    /// The wall-time limit's end for this tree: waits `wall` (unless the
    /// task is dropped first, when the tree ended), then kills the tree and
    /// records it.
    pub async fn wall(self: Arc<Self>, audit: Arc<AuditLog>, session: String, wall: Duration) {
        tokio::time::sleep(wall).await;
        if !self.populated() {
            return;
        }
        let detail = match self.kill() {
            Ok(()) => format!(
                "the tree ran {}s: every process of it killed",
                wall.as_secs_f64()
            ),
            Err(e) => {
                tracing::error!(cgroup = %self.dir.display(), "wall-time limit: cgroup.kill: {e}");
                format!(
                    "the tree ran {}s; killing it failed: {e}",
                    wall.as_secs_f64()
                )
            }
        };
        tracing::info!(session, pid = self.pid, "{detail}");
        audit.record(
            &session,
            EventBody::Limit(LimitEvent {
                limit: "wall".into(),
                root_pid: self.pid,
                value: format!("{}s", wall.as_secs_f64()),
                count: 1,
                detail,
            }),
        );
    }

    /// What the kernel counted while the tree ran, as events: forks refused
    /// at `pids.max`, processes killed at `memory.max`, periods the tree was
    /// held back at `cpu.max`.
    pub fn counted(&self) -> Vec<LimitEvent> {
        let mut out = Vec::new();
        // Unreadable: said, so a limit met cannot go unrecorded in silence.
        let read = |f: &str| {
            std::fs::read_to_string(self.dir.join(f)).unwrap_or_else(|e| {
                tracing::warn!(cgroup = %self.dir.display(), "{f}: {e}: what the tree met there is not recorded");
                String::new()
            })
        };
        if let Some(p) = self.limits.pids {
            let n = field(&read("pids.events"), "max").unwrap_or(0);
            if n > 0 {
                out.push(LimitEvent {
                    limit: "pids".into(),
                    root_pid: self.pid,
                    value: p.to_string(),
                    count: n,
                    detail: format!("{n} fork(s) refused (EAGAIN) at pids.max {p}"),
                });
            }
        }
        if let Some(m) = self.limits.memory {
            let ev = read("memory.events");
            let n = field(&ev, "oom_kill").unwrap_or(0);
            if n > 0 || field(&ev, "oom_group_kill").unwrap_or(0) > 0 {
                out.push(LimitEvent {
                    limit: "memory".into(),
                    root_pid: self.pid,
                    value: m.to_string(),
                    count: n,
                    detail: format!(
                        "the tree went over memory.max {m}: its processes were killed \
                         ({n} by the OOM killer)"
                    ),
                });
            }
        }
        if let Some((q, p)) = self.limits.cpu {
            let n = field(&read("cpu.stat"), "nr_throttled").unwrap_or(0);
            if n > 0 {
                out.push(LimitEvent {
                    limit: "cpu".into(),
                    root_pid: self.pid,
                    value: format!("{q}/{p}"),
                    count: n,
                    detail: format!("held to cpu.max {q} µs per {p} µs: throttled {n} time(s)"),
                });
            }
        }
        out
    }

    /// Records what was counted and removes the cgroup (module doc). Called
    /// once the tree's last supervised process is gone.
    pub fn ended(&self, audit: &AuditLog, session: &str) {
        for ev in self.counted() {
            tracing::info!(session, pid = self.pid, "limit: {}", ev.detail);
            audit.record(session, EventBody::Limit(ev));
        }
        remove(&self.dir);
    }
}

/// `rmdir` of an emptied cgroup: the last processes may still be exiting
/// (a killed process leaves its cgroup at its final release), so a busy
/// cgroup is tried again a few times before it is left, logged.
fn remove(dir: &Path) {
    let mut wait = Duration::from_millis(1);
    for _ in 0..12 {
        match std::fs::remove_dir(dir) {
            Ok(()) => return,
            Err(e) if e.raw_os_error() == Some(libc::EBUSY) => {
                std::thread::sleep(wait);
                wait = (wait * 2).min(Duration::from_millis(200));
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => return,
            Err(e) => {
                tracing::warn!(cgroup = %dir.display(), "cannot remove a tree's cgroup: {e}");
                return;
            }
        }
    }
    tracing::warn!(
        cgroup = %dir.display(),
        "a tree's cgroup still holds processes after the tree ended; left in place"
    );
}

/// `name N` in a cgroup's flat keyed file.
fn field(text: &str, name: &str) -> Option<u64> {
    text.lines().find_map(|l| {
        let (k, v) = l.split_once(' ')?;
        (k == name).then(|| v.trim().parse().ok()).flatten()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(pids: Option<u64>, memory: Option<u64>) -> Limits {
        Limits {
            pids,
            memory,
            ..Limits::default()
        }
    }

    #[test]
    fn a_limit_whose_controller_the_parent_does_not_enable_is_refused_before_anything_is_made() {
        let dir = std::env::temp_dir().join(format!("agentsh-tree-test-{}", std::process::id()));
        let e = TreeCgroup::place(
            dir.clone(),
            &["pids".into()],
            &limits(Some(8), Some(1 << 20)),
            1,
        )
        .unwrap_err();
        assert!(
            matches!(&e, CgroupError::NotEnabled { controller: "memory", parent, .. } if parent == &std::env::temp_dir()),
            "{e:?}"
        );
        assert_eq!(
            e.to_string(),
            format!(
                "the memory controller is not enabled beneath {} (it offers [pids])",
                std::env::temp_dir().display()
            )
        );
        assert!(!dir.exists(), "nothing is made for a refused tree");
    }

    #[test]
    fn a_tree_cgroup_that_cannot_be_made_says_where_and_why() {
        let dir = Path::new("/proc/agentsh-no-such-parent/agentsh-tree-1-1").to_path_buf();
        let e = TreeCgroup::place(dir.clone(), &["pids".into()], &limits(Some(8), None), 1)
            .unwrap_err();
        assert!(
            matches!(&e, CgroupError::Make { dir: d, .. } if d == &dir),
            "{e:?}"
        );
        assert!(
            e.to_string()
                .starts_with("cannot make /proc/agentsh-no-such-parent/agentsh-tree-1-1: "),
            "{e}"
        );
        assert!(
            std::error::Error::source(&e).is_some(),
            "the kernel's error is kept"
        );
    }

    #[test]
    fn flat_keyed_files_read_by_key() {
        let ev = "low 0\nhigh 0\nmax 0\noom 3\noom_kill 2\noom_group_kill 1\n";
        assert_eq!(field(ev, "oom_kill"), Some(2));
        assert_eq!(field(ev, "oom"), Some(3));
        assert_eq!(field(ev, "max"), Some(0));
        assert_eq!(field(ev, "nope"), None);
        assert_eq!(field("populated 1\nfrozen 0\n", "populated"), Some(1));
    }
}
