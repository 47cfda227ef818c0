//! The C attackers of `tests/attackers/`, compiled at test time with `cc`,
//! and what the race tests check after them.
//!
//! `race` (modes: a thread, a vfork child, a shared memfd, a private fd
//! table or cwd) runs thousands of exec attempts a second; `probe` is the
//! program they exec, installed as `okay` (allowed) and `curl` (denied): if a
//! forbidden program ever runs, it writes a line to `$RACE_LOG`.

use crate::server::TempDir;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The attackers' source directory.
fn sources() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("attackers")
}

/// Compiles `tests/attackers/<name>.c` to `out/<name>`.
///
/// Panics with cc's output when it fails.
pub fn compile(name: &str, out: &Path, static_link: bool) -> PathBuf {
    let bin = out.join(name);
    let mut c = Command::new("cc");
    c.args(["-O2", "-Wall", "-pthread"]);
    if static_link {
        c.arg("-static");
    }
    let o = c
        .arg("-o")
        .arg(&bin)
        .arg(sources().join(format!("{name}.c")))
        .output()
        .expect("run cc");
    assert!(
        o.status.success(),
        "cc {name}.c: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    bin
}

/// A directory with `race`, `okay`, `curl` and an empty, world-writable log,
/// reachable by an unprivileged user.
pub struct Arena {
    pub dir: TempDir,
    pub race: PathBuf,
    pub okay: PathBuf,
    pub curl: PathBuf,
    /// `allowed/tool` and `denied/tool`: one name, two directories (the
    /// probe, denied by path).
    pub allowed_tool: PathBuf,
    pub denied_tool: PathBuf,
    pub log: PathBuf,
}

impl Arena {
    pub fn new(tag: &str) -> Arena {
        Arena::in_dir(TempDir::new(tag))
    }

    /// An arena whose programs a tree cannot rename or replace, even as root:
    /// in root-owned directories none of which any tree may write (not under
    /// /tmp). There an exec whose caller shares nothing is not watched, so
    /// an attack on it meets the defence under test, not the watch.
    pub fn stable(tag: &str) -> Arena {
        Arena::in_dir(TempDir::new_in(&crate::server::server_base(), tag))
    }

    fn in_dir(dir: TempDir) -> Arena {
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755))
            .expect("chmod the arena");
        let race = compile("race", dir.path(), false);
        let probe = compile("probe", dir.path(), true);
        let okay = dir.path().join("okay");
        let curl = dir.path().join("curl");
        std::fs::copy(&probe, &okay).expect("install okay");
        let mut tools = Vec::new();
        for sub in ["allowed", "denied"] {
            let d = dir.path().join(sub);
            std::fs::create_dir_all(&d).expect("create a tool directory");
            std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o755)).expect("chmod it");
            let t = d.join("tool");
            std::fs::copy(&probe, &t).expect("install a tool");
            tools.push(t);
        }
        let denied_tool = tools.pop().expect("denied");
        let allowed_tool = tools.pop().expect("allowed");
        std::fs::rename(&probe, &curl).expect("install curl");
        let log = dir.path().join("ran.log");
        std::fs::write(&log, "").expect("create the log");
        std::fs::set_permissions(&log, std::fs::Permissions::from_mode(0o666))
            .expect("chmod the log");
        Arena {
            dir,
            race,
            okay,
            curl,
            allowed_tool,
            denied_tool,
            log,
        }
    }

    /// What ran that must not have.
    pub fn forbidden_runs(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The command line of `race MODE N ...` against this arena's programs;
    /// `symlink` and `aio` get a directory of their own (to flip links in,
    /// to write the file the AIO reads: O_DIRECT needs a real file system,
    /// as the arena's is), owned by `uid` as a workspace is by the tree's
    /// user.
    pub fn race_argv(&self, mode: &str, n: u64, uid: Option<(u32, u32)>) -> Vec<String> {
        let mut argv = vec![self.race.display().to_string(), mode.into(), n.to_string()];
        if mode == "symlink" || mode == "aio" {
            let dir = self.dir.path().join("ws");
            std::fs::create_dir_all(&dir).expect("create the symlink directory");
            if let Some((u, g)) = uid {
                std::os::unix::fs::chown(&dir, Some(u), Some(g)).expect("chown it");
            }
            argv.push(dir.display().to_string());
        }
        if mode == "dirflip" || mode == "cwdflip" {
            argv.push(self.allowed_tool.display().to_string());
            argv.push(self.denied_tool.display().to_string());
        } else {
            argv.push(self.okay.display().to_string());
            argv.push(self.curl.display().to_string());
        }
        argv
    }
}

/// The summary line a race mode prints.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tally {
    pub attempts: u64,
    /// Refused with EACCES.
    pub denied: u64,
    /// The allowed program ran.
    pub ok: u64,
    /// ENOENT/ENOTDIR (a path read half-written).
    pub missing: u64,
    /// Killed by SIGKILL (a new image that was not what was judged).
    pub killed: u64,
    /// Anything else: a forbidden program ran, or an unexpected errno.
    pub other: u64,
}

/// Parses the summary line a race mode prints.
pub fn tally(stdout: &str) -> Option<Tally> {
    let line = stdout.lines().find(|l| l.starts_with("attempts="))?;
    let get = |k: &str| -> Option<u64> {
        line.split_whitespace()
            .find_map(|f| f.strip_prefix(k)?.strip_prefix('='))?
            .parse()
            .ok()
    };
    Some(Tally {
        attempts: get("attempts")?,
        denied: get("denied")?,
        ok: get("ok")?,
        missing: get("missing")?,
        killed: get("killed")?,
        other: get("other")?,
    })
}

/// Threads traced by a thread of process `tracer`, or stopped by ptrace
/// (`t`) in a process descending from `root`: after a race, none may be left.
/// (Tests run in parallel: a machine-wide scan would see other tests' freezes.)
/// The tracer's doorbell (its child `agentsh-bell`) is not counted.
pub fn stopped_or_traced(tracer: u32, root: Option<u32>) -> Vec<String> {
    let mut found = Vec::new();
    let Ok(procs) = std::fs::read_dir("/proc") else {
        return found;
    };
    let tracer_threads: Vec<String> = std::fs::read_dir(format!("/proc/{tracer}/task"))
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    for p in procs.flatten() {
        let Some(pid) = p.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
            continue;
        };
        let mine = root.is_some_and(|r| descends_from(pid, r));
        for t in tasks.flatten() {
            let Ok(status) = std::fs::read_to_string(t.path().join("status")) else {
                continue;
            };
            let field = |k: &str| {
                status
                    .lines()
                    .find_map(|l| l.strip_prefix(k))
                    .map(|v| v.trim().to_string())
                    .unwrap_or_default()
            };
            let state = field("State:");
            let traced_by = field("TracerPid:");
            // The tracer's doorbell: its own child, traced for good, asleep
            // between rings and stopped for a moment at each (its timer
            // rings every 250 ms).
            let doorbell = field("Name:") == "agentsh-bell" && field("PPid:") == tracer.to_string();
            if doorbell {
                continue;
            }
            if (mine && state.starts_with('t')) || tracer_threads.contains(&traced_by) {
                found.push(format!(
                    "pid {pid} tid {} ({}) state {state} tracer {traced_by}",
                    t.file_name().to_string_lossy(),
                    field("Name:")
                ));
            }
        }
    }
    found
}

/// A process named `comm`, descending from `root`, that is waiting in
/// `execve` (its `/proc/<pid>/syscall` names call 59, x86_64): a caller the
/// supervisor holds before its answer. The name tells a program's own
/// child from the exec that started the program (still the launcher's name).
pub fn in_execve(root: u32, comm: &str) -> Option<u32> {
    std::fs::read_dir("/proc").ok()?.flatten().find_map(|p| {
        let pid = p.file_name().to_str()?.parse::<u32>().ok()?;
        let call = std::fs::read_to_string(format!("/proc/{pid}/syscall")).ok()?;
        let name = std::fs::read_to_string(format!("/proc/{pid}/comm")).ok()?;
        (call.split_whitespace().next() == Some("59")
            && name.trim_end() == comm
            && descends_from(pid, root))
        .then_some(pid)
    })
}

fn descends_from(mut pid: u32, root: u32) -> bool {
    for _ in 0..64 {
        if pid == root {
            return true;
        }
        if pid <= 1 {
            return false;
        }
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            return false;
        };
        let Some(rest) = stat.rsplit_once(')').map(|(_, r)| r) else {
            return false;
        };
        pid = match rest.split_whitespace().nth(1).and_then(|p| p.parse().ok()) {
            Some(p) => p,
            None => return false,
        };
    }
    false
}
