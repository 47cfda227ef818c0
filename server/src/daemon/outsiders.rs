//! Programs that run outside every supervised tree while agentsh is
//! active: what an SDK starts without a shell and without a program shim
//! (`podman exec CTR perl ...`, `sb.exec("ruby", ...)`). Nothing can
//! supervise those; each is at least recorded, once, as an
//! `unsupervised_run` audit event with its argv, pid, parent and uid, and a
//! warning in the server log naming the `--programs` install that would
//! cover it.
//!
//! How it sees them: it looks at `/proc` again whenever a program in the
//! standard bin directories is opened (inotify `IN_OPEN` on the
//! directories: the kernel reports an exec's open of the file as one), and
//! every [`POLL_MS`] otherwise. A process is in a tree when it carries more
//! seccomp filters than the server (agentsh's filter on top of what the
//! runtime gave every process) or is traced by one of the server's
//! threads (the ptrace backend). Not recorded: the server's own
//! descendants (the entrypoint's command), processes that started before
//! the server, agentsh's own binaries (the operator's `agentsh ready`);
//! looked at again next time: a shim that is still installing supervision,
//! and a process whose program is no file of this root (the runtime's own
//! `runc init` before it execs the command; a deleted file).
//!
//! What it does not see: a process that starts and ends between two looks
//! (a look follows every exec from the bin directories within [`GAP_MS`],
//! so that needs a program that lives less than that, or one from
//! elsewhere that lives less than [`POLL_MS`]); a process that
//! loads a seccomp filter of its own before it is looked at counts as in a
//! tree. Recording is all it does: nothing is refused.
//!
//! Started only where the shim is installed (its manifest exists) and the
//! server is not a standalone `agentsh wrap`'s.

use crate::audit::{AuditLog, EventBody, UnsupervisedEvent};
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

/// How often `/proc` is looked at when no exec woke the watcher.
pub const POLL_MS: i32 = 250;

/// The least time between two looks woken by execs.
pub const GAP_MS: u64 = 20;

/// The directories whose programs' execs wake the watcher.
const BIN_DIRS: &[&str] = &[
    "/usr/local/bin",
    "/usr/bin",
    "/bin",
    "/usr/local/sbin",
    "/usr/sbin",
    "/sbin",
];

/// One process, as `/proc` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Proc {
    pub pid: u32,
    pub ppid: u32,
    pub uid: u32,
    /// Start time, clock ticks after boot (`stat` field 22).
    pub start: u64,
    /// `Seccomp_filters:` (`None`: the kernel does not say).
    pub filters: Option<u32>,
    pub tracer: u32,
    /// `/proc/PID/exe` (empty: unreadable, e.g. a kernel thread, or
    /// another user's process and no `CAP_SYS_PTRACE`).
    pub exe: String,
    /// The name the kernel gave it: the basename of the path exec'd.
    pub comm: String,
    /// Its program is a file of this root (`false`: the runtime's own
    /// stage, such as `runc init`, or a deleted file).
    pub present: bool,
    pub argv: Vec<String>,
    /// A kernel thread (`PF_KTHREAD` in `stat`'s flags): no program, no argv.
    pub kthread: bool,
}

/// The server as the judge of [`Proc`]s sees it.
pub struct Me {
    pub pid: u32,
    pub start: u64,
    pub filters: Option<u32>,
    /// The server's threads (a tracer among them).
    pub threads: HashSet<u32>,
    /// The files of the installed shims (`/usr/bin/sh`, the programs').
    pub shims: HashSet<String>,
    /// The names that lead to them in the bin directories (`sh`,
    /// `python3`, `python3.11`): a process of one of those names whose
    /// program cannot be read may be a shim installing.
    pub shim_names: HashSet<String>,
}

/// What a process is to the watcher.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Supervised: filtered or traced by agentsh.
    InTree,
    /// The server's, or older than it, or agentsh's own CLI: not an SDK's.
    NotAnSdks,
    /// A shim between exec and supervision: look again.
    Installing,
    /// Run outside every tree: record it.
    Outside,
}

/// The verdict on `p`; `descends` says whether its parents lead to the
/// server. A process whose program cannot be read (another user's and no
/// `CAP_SYS_PTRACE`; gVisor, for any other process) is told apart from a
/// shim installing by its name.
pub fn judge(p: &Proc, me: &Me, descends: bool) -> Verdict {
    if p.pid == me.pid || descends || p.start < me.start || p.kthread {
        return Verdict::NotAnSdks;
    }
    // No argv yet: caught inside an exec (the kernel reports the program's
    // open before the new argv is in place: the very open that wakes the
    // watcher). Looked at again, never taken for a kernel thread: that
    // verdict is kept, and the program would never be recorded.
    if p.argv.is_empty() {
        return Verdict::Installing;
    }
    if p.tracer != 0 && me.threads.contains(&p.tracer) {
        return Verdict::InTree;
    }
    if let (Some(f), Some(base)) = (p.filters, me.filters) {
        if f > base {
            return Verdict::InTree;
        }
    }
    // Unreadable mid-exec too: the new argv shows before the new name and
    // before the runtime's stage (`runc init`, not dumpable) is left.
    let argv0 = p.argv[0].rsplit('/').next().unwrap_or("");
    let shim_named = me.shim_names.contains(&p.comm) || me.shim_names.contains(argv0);
    if me.shims.contains(&p.exe) || (p.exe.is_empty() && shim_named) || !p.present {
        return Verdict::Installing;
    }
    let program = if p.exe.is_empty() { &p.argv[0] } else { &p.exe };
    let name = program.rsplit('/').next().unwrap_or("");
    if name.starts_with("agentsh") {
        return Verdict::NotAnSdks;
    }
    Verdict::Outside
}

/// What one read of `/proc/PID/stat` says: the parent, the start time
/// (with the pid, what names the process across looks) and the name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stat {
    pub ppid: u32,
    pub start: u64,
    pub comm: String,
    /// `PF_KTHREAD` in its flags (field 9).
    pub kthread: bool,
}

/// The kernel's flag for its own threads (`include/linux/sched.h`).
const PF_KTHREAD: u64 = 0x0020_0000;

/// `pid`'s [`Stat`]; `None` once it is gone (or a zombie).
pub fn read_stat(pid: u32) -> Option<Stat> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The name is in parentheses and may hold anything: fields follow the last ')'.
    let close = stat.rfind(')')?;
    let comm = stat.get(stat.find('(')? + 1..close)?.to_string();
    let rest = stat.get(close + 2..)?;
    let f: Vec<&str> = rest.split(' ').collect();
    // rest starts at field 3 (state): ppid is field 4, starttime field 22.
    if f.first() == Some(&"Z") {
        return None;
    }
    Some(Stat {
        ppid: f.get(1)?.parse().ok()?,
        start: f.get(19)?.parse().ok()?,
        comm,
        kthread: f.get(6)?.parse::<u64>().ok()? & PF_KTHREAD != 0,
    })
}

/// `pid`'s process as `/proc` shows it now; `None` once it is gone.
pub fn read_proc(pid: u32) -> Option<Proc> {
    read_rest(pid, read_stat(pid)?)
}

/// [`read_proc`], its [`Stat`] read already.
fn read_rest(pid: u32, stat: Stat) -> Option<Proc> {
    let Stat {
        ppid,
        start,
        comm,
        kthread,
    } = stat;
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let field = |k: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(k))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse::<u32>().ok())
    };
    let exe = std::fs::read_link(format!("/proc/{pid}/exe"))
        .map(|p| p.display().to_string())
        .unwrap_or_default();
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    let argv: Vec<String> = cmdline
        .split(|b| *b == 0)
        .filter(|a| !a.is_empty())
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect();
    let present = match (exe.as_str(), argv.first()) {
        ("", Some(a)) if a.starts_with('/') => std::path::Path::new(a).exists(),
        ("", _) => true,
        (e, _) => !e.ends_with(" (deleted)") && std::path::Path::new(e).exists(),
    };
    Some(Proc {
        pid,
        ppid,
        uid: field("Uid:").unwrap_or(u32::MAX),
        start,
        filters: field("Seccomp_filters:"),
        tracer: field("TracerPid:").unwrap_or(0),
        exe,
        comm,
        present,
        argv,
        kthread,
    })
}

/// The server's threads now (a tracer thread comes and goes with its trees).
fn threads() -> HashSet<u32> {
    std::fs::read_dir("/proc/self/task")
        .map(|d| {
            d.filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

/// The server itself, and the shims of this root.
fn me() -> Option<Me> {
    let pid = std::process::id();
    let own = read_proc(pid)?;
    let shims = crate::installer::shim_files(std::path::Path::new("/"));
    let mut shim_names = HashSet::new();
    for d in BIN_DIRS
        .iter()
        .chain([&agentsh_proto::install::PROGRAMS_DIR])
    {
        for e in std::fs::read_dir(d).into_iter().flatten().flatten() {
            let leads = std::fs::canonicalize(e.path())
                .is_ok_and(|f| shims.contains(&f.display().to_string()));
            if leads || *d == agentsh_proto::install::PROGRAMS_DIR {
                shim_names.insert(e.file_name().to_string_lossy().into_owned());
            }
        }
    }
    Some(Me {
        pid,
        start: own.start,
        filters: own.filters,
        threads: threads(),
        shims,
        shim_names,
    })
}

/// Starts the watcher where the shim is installed; a no-op elsewhere.
pub fn spawn(audit: Arc<AuditLog>, private: bool) {
    if private || crate::installer::shim_files(std::path::Path::new("/")).is_empty() {
        return;
    }
    let spawned = std::thread::Builder::new()
        .name("agentsh-outsiders".into())
        .spawn(move || watch(&audit));
    if let Err(e) = spawned {
        tracing::warn!("cannot watch for programs run outside the trees: {e}");
    }
}

/// The watcher's loop: wake on an exec from the bin directories or every
/// [`POLL_MS`], look, record.
fn watch(audit: &AuditLog) {
    let Some(mut me) = me() else {
        tracing::warn!("cannot read this server's own /proc entry: programs run outside the trees are not recorded");
        return;
    };
    let eyes = crate::inotify::Inotify::new()
        .map_err(|e| tracing::info!("no inotify ({e}): looking at /proc every {POLL_MS} ms only"))
        .ok();
    if let Some(i) = &eyes {
        for d in BIN_DIRS {
            let _ = i.add(d, libc::IN_OPEN | libc::IN_ONLYDIR);
        }
    }
    tracing::info!(
        "recording programs run outside every supervised tree (unsupervised_run events)"
    );
    let mut known: HashMap<(u32, u64), Verdict> = HashMap::new();
    let gap = std::time::Duration::from_millis(GAP_MS);
    let mut last = std::time::Instant::now();
    loop {
        match &eyes {
            Some(i) => {
                let _ = i.wait_for(POLL_MS);
                // A burst of execs (a build) is one look per GAP_MS, not one each.
                std::thread::sleep(gap.saturating_sub(last.elapsed()));
                let _ = i.read();
            }
            None => std::thread::sleep(std::time::Duration::from_millis(POLL_MS as u64)),
        }
        last = std::time::Instant::now();
        me.threads = threads();
        look(&me, &mut known, audit);
    }
}

/// One look at `/proc`: every process not yet judged is judged, the
/// outsiders recorded; what is gone is forgotten.
fn look(me: &Me, known: &mut HashMap<(u32, u64), Verdict>, audit: &AuditLog) {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return;
    };
    // One read per process; the rest only for those not judged yet.
    let stats: HashMap<u32, Stat> = dir
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .filter_map(|pid| Some((pid, read_stat(pid)?)))
        .collect();
    known.retain(|(pid, start), _| stats.get(pid).is_some_and(|s| s.start == *start));
    let parents: HashMap<u32, u32> = stats.iter().map(|(p, s)| (*p, s.ppid)).collect();
    for (pid, st) in &stats {
        let key = (*pid, st.start);
        if known.get(&key).is_some_and(|v| *v != Verdict::Installing) {
            continue;
        }
        // A child of a process in a tree is in it (the filter is inherited,
        // the tracer follows every fork): no more to read.
        let up = stats.get(&st.ppid).map(|u| (st.ppid, u.start));
        if up.is_some_and(|u| known.get(&u) == Some(&Verdict::InTree)) {
            known.insert(key, Verdict::InTree);
            continue;
        }
        let Some(mut p) = read_rest(*pid, st.clone()) else {
            continue;
        };
        // gVisor names the program by the path it was exec'd with
        // (`/bin/sh`), Linux by the file's (`/usr/bin/sh`): the shims'
        // files are known by the latter.
        if let Ok(own) = std::fs::canonicalize(&p.exe) {
            p.exe = own.display().to_string();
        }
        let v = judge(&p, me, descends(p.ppid, me.pid, &parents));
        if v == Verdict::Outside {
            record(&p, audit);
        }
        known.insert(key, v);
    }
}

/// Whether the parents from `ppid` up lead to `server`.
fn descends(ppid: u32, server: u32, parents: &HashMap<u32, u32>) -> bool {
    let mut at = ppid;
    for _ in 0..256 {
        if at == server {
            return true;
        }
        match parents.get(&at) {
            Some(up) if *up != at => at = *up,
            _ => return false,
        }
    }
    false
}

fn record(p: &Proc, audit: &AuditLog) {
    let program = if p.exe.is_empty() { &p.argv[0] } else { &p.exe };
    let reason = format!(
        "ran outside every supervised tree: {program} is not a program the shim stands in for \
         (`agentsh shim install --programs {program}` puts it under supervision)"
    );
    tracing::warn!(pid = p.pid, ppid = p.ppid, uid = p.uid, argv = ?p.argv, "{reason}");
    audit.record(
        "default",
        EventBody::UnsupervisedRun(UnsupervisedEvent {
            ran_at: crate::audit::rfc3339_now(),
            pid: p.pid,
            ppid: p.ppid,
            uid: p.uid,
            argv: p.argv.clone(),
            reason,
            earlier_life: false,
        }),
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    fn me() -> Me {
        Me {
            pid: 10,
            start: 1000,
            filters: Some(1),
            threads: [10, 11].into(),
            shims: ["/usr/bin/sh".to_string(), "/usr/bin/python3.11".to_string()].into(),
            shim_names: [
                "sh".to_string(),
                "python3".to_string(),
                "python3.11".to_string(),
            ]
            .into(),
        }
    }

    fn proc(exe: &str) -> Proc {
        Proc {
            pid: 50,
            ppid: 0,
            uid: 0,
            start: 2000,
            filters: Some(1),
            tracer: 0,
            exe: exe.into(),
            comm: exe.rsplit('/').next().unwrap_or("").into(),
            present: true,
            argv: vec![exe.into()],
            kthread: false,
        }
    }

    #[test]
    fn only_a_new_process_of_no_tree_and_no_shim_is_an_outsider() {
        let me = me();
        let perl = proc("/usr/bin/perl");
        assert_eq!(judge(&perl, &me, false), Verdict::Outside);
        // Filtered by agentsh (one filter more than the server), or traced
        // by one of its threads: in a tree.
        let filtered = Proc {
            filters: Some(2),
            ..perl.clone()
        };
        assert_eq!(judge(&filtered, &me, false), Verdict::InTree);
        let traced = Proc {
            tracer: 11,
            ..perl.clone()
        };
        assert_eq!(judge(&traced, &me, false), Verdict::InTree);
        // Traced by someone else (a debugger outside): still outside.
        let other = Proc {
            tracer: 99,
            ..perl.clone()
        };
        assert_eq!(judge(&other, &me, false), Verdict::Outside);
        // A shim between exec and supervision: looked at again.
        assert_eq!(
            judge(&proc("/usr/bin/python3.11"), &me, false),
            Verdict::Installing
        );
        // The server's descendants, older processes, agentsh's CLI, kernel
        // threads: not an SDK's.
        assert_eq!(judge(&perl, &me, true), Verdict::NotAnSdks);
        let old = Proc {
            start: 999,
            ..perl.clone()
        };
        assert_eq!(judge(&old, &me, false), Verdict::NotAnSdks);
        assert_eq!(
            judge(&proc("/usr/bin/agentsh"), &me, false),
            Verdict::NotAnSdks
        );
        let kthread = Proc {
            argv: vec![],
            exe: String::new(),
            kthread: true,
            ..perl.clone()
        };
        assert_eq!(judge(&kthread, &me, false), Verdict::NotAnSdks);
        // Caught inside its exec, before the new argv is in place (the
        // program's open woke the watcher): looked at again, not kept as
        // "not an SDK's" (it would never be recorded).
        let mid_exec_no_argv = Proc {
            argv: vec![],
            ..perl.clone()
        };
        assert_eq!(judge(&mid_exec_no_argv, &me, false), Verdict::Installing);
        // A process whose program cannot be read: a shim's name may be a
        // shim installing; any other is an outsider.
        let unreadable = Proc {
            exe: String::new(),
            argv: vec!["perl".into()],
            ..perl.clone()
        };
        assert_eq!(judge(&unreadable, &me, false), Verdict::Outside);
        let shim_named = Proc {
            comm: "python3".into(),
            ..unreadable.clone()
        };
        assert_eq!(judge(&shim_named, &me, false), Verdict::Installing);
        // Caught mid-exec: the shim's argv already, the runtime's name still.
        let mid_exec = Proc {
            comm: "runc:[2:INIT]".into(),
            argv: vec!["python3".into(), "-c".into()],
            ..unreadable.clone()
        };
        assert_eq!(judge(&mid_exec, &me, false), Verdict::Installing);
        // The runtime's own stage (`runc init`, a file outside this root)
        // is looked at again once it runs a program of this root.
        let runc = Proc {
            present: false,
            ..proc("/usr/bin/runc")
        };
        assert_eq!(judge(&runc, &me, false), Verdict::Installing);
        let filtered = Proc {
            filters: Some(2),
            ..unreadable
        };
        assert_eq!(judge(&filtered, &me, false), Verdict::InTree);
    }

    #[test]
    fn descent_follows_parents_and_stops_at_loops_and_gaps() {
        let parents: HashMap<u32, u32> = [(20, 10), (21, 20), (30, 0), (40, 41), (41, 40)].into();
        assert!(descends(parents[&21], 10, &parents));
        assert!(!descends(parents[&30], 10, &parents));
        assert!(!descends(parents[&40], 10, &parents));
    }

    #[test]
    fn this_process_reads_as_itself() {
        let p = read_proc(std::process::id()).expect("/proc/self");
        assert!(!p.kthread, "{p:?}");
        // kthreadd (pid 2 where this runs in the host's pid namespace) is
        // a kernel thread by its flags.
        if let Some(k) = read_stat(2).filter(|k| k.comm == "kthreadd") {
            assert!(k.kthread, "{k:?}");
        }
        assert_eq!(p.pid, std::process::id());
        assert!(
            p.start > 0 && !p.exe.is_empty() && !p.argv.is_empty(),
            "{p:?}"
        );
    }
}
