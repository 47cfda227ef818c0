//! The server's process is out of the tree's reach, not only its signals
//! (issue 40, class 2): a root tree (or, under `agentsh wrap`, a tree of the
//! server's own uid) that sets the server's resource limits ends it
//! (`RLIMIT_CPU` 0), silences its audit (`RLIMIT_FSIZE` 1 byte) or stops its
//! accepts (`RLIMIT_NOFILE` 3), with no signal sent; its priority, I/O
//! priority, CPU set and scheduling slow it; `process_madvise` pages it
//! out; its `/proc/<pid>/` files (`oom_score_adj` 1000 makes it the OOM
//! killer's first choice, `timerslack_ns` slows every sleep) and its
//! cgroup (`cgroup.procs`) are files. Each attempt must fail (EPERM, or
//! EACCES from the file rules), the server's limits must be as before, and
//! it must still supervise; the tree's own limits and priority stay its own
//! to change.
//!
//! As root and as an ordinary user, at the kernel's Landlock ABI, at 2, and
//! under the ptrace backend. Nothing here changes the machine: the calls
//! that would reach beyond the test's server (`PRIO_USER`,
//! `IOPRIO_WHO_USER`) name a uid no process has.

// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

use agentsh_tests::sandbox::{Sandbox, AGENT_DEFAULT, NOBODY};
use agentsh_tests::server::require_root;

/// A uid no process of this machine runs as.
const NO_ONE: u32 = 54_321;

/// Each attempt on `server`, printing `NAME ok` (it worked: the guard
/// failed) or `NAME errno N`; then the tree's own changes, `own-NAME ok`.
fn attempts(server: u32) -> String {
    format!(
        r#"
import ctypes, os, resource
libc = ctypes.CDLL(None, use_errno=True)
S = {server}
def sys(nr, *a):
    if libc.syscall(nr, *a) < 0:
        raise OSError(ctypes.get_errno(), "syscall")
def write(path, text):
    with open(path, "w") as f:
        f.write(text)
def cgroup_procs(pid):
    # Its own cgroup: were the write let through, the server would move
    # where it already is.
    rel = open("/proc/%d/cgroup" % pid).read().strip().split("::", 1)[1]
    return "/sys/fs/cgroup" + rel.rstrip("/") + "/cgroup.procs"
def madvise(pid):
    pidfd = libc.syscall(434, pid, 0)
    if pidfd < 0:
        raise OSError(ctypes.get_errno(), "pidfd_open")
    start = int(open("/proc/%d/maps" % pid).readline().split("-")[0], 16)
    iov = (ctypes.c_ulong * 2)(start, 4096)
    sys(440, pidfd, iov, 1, 21, 0)
tries = [
    ("prlimit-cpu", lambda: resource.prlimit(S, resource.RLIMIT_CPU, (0, 0))),
    ("prlimit-fsize", lambda: resource.prlimit(S, resource.RLIMIT_FSIZE, (1, 1))),
    ("prlimit-nofile", lambda: resource.prlimit(S, resource.RLIMIT_NOFILE, (3, 3))),
    ("setpriority", lambda: os.setpriority(os.PRIO_PROCESS, S, 19)),
    ("setpriority-user", lambda: os.setpriority(os.PRIO_USER, {NO_ONE}, 19)),
    ("ioprio-process", lambda: sys(251, 1, S, (3 << 13))),
    ("ioprio-user", lambda: sys(251, 3, {NO_ONE}, (3 << 13))),
    ("affinity", lambda: os.sched_setaffinity(S, {{0}})),
    ("scheduler", lambda: os.sched_setscheduler(S, os.SCHED_BATCH, os.sched_param(0))),
    ("param", lambda: os.sched_setparam(S, os.sched_param(0))),
    ("process-madvise", lambda: madvise(S)),
    ("oom-score-adj", lambda: write("/proc/%d/oom_score_adj" % S, "1000")),
    ("timerslack", lambda: write("/proc/%d/timerslack_ns" % S, "1000000000")),
    ("comm", lambda: write("/proc/%d/comm" % S, "x")),
    ("cgroup-procs", lambda: write(cgroup_procs(S), str(S))),
]
for name, f in tries:
    try:
        f()
        print(name, "ok")
    except OSError as e:
        print(name, "errno", e.errno)
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.prlimit(0, resource.RLIMIT_NOFILE, (soft, hard))
print("own-prlimit ok")
resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
print("own-setrlimit ok")
try:
    resource.prlimit(S, resource.RLIMIT_NOFILE)
    print("read-server-limits ok")
except OSError as e:
    print("read-server-limits errno", e.errno)
os.setpriority(os.PRIO_PROCESS, 0, 5)
print("own-nice ok")
"#
    )
}

/// What the kernel shows of `pid`'s limits, priority and CPU set.
fn reach(pid: u32) -> (String, String, String) {
    let limits = std::fs::read_to_string(format!("/proc/{pid}/limits")).unwrap();
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    // Fields after the command: state is 3rd, nice the 19th, policy the 41st.
    let rest: Vec<&str> = stat
        .rsplit_once(')')
        .unwrap()
        .1
        .split_whitespace()
        .collect();
    let sched = format!("nice {} policy {}", rest[16], rest[38]);
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let cpus = status
        .lines()
        .find(|l| l.starts_with("Cpus_allowed_list"))
        .unwrap_or("")
        .to_string();
    (limits, sched, cpus)
}

fn guard(uid: Option<u32>, config: &str) {
    let mut sb = Sandbox::with_config(AGENT_DEFAULT, uid, config);
    let server = sb.srv.pid();
    let before = reach(server);
    let ctx = format!("({uid:?}, {config:?})");
    let f = sb.sh(&format!(
        "/usr/bin/python3 -c '{}'",
        attempts(server).replace('\'', "'\\''")
    ));
    let lines: Vec<&str> = f.stdout.lines().collect();
    let tried: Vec<&&str> = lines
        .iter()
        .filter(|l| !l.starts_with("own-") && !l.starts_with("read-"))
        .collect();
    assert_eq!(tried.len(), 15, "{ctx} {f:?}");
    for l in tried {
        // Writes to the server's /proc files and its cgroup are refused by
        // the file rules (Landlock, or the tracer without it): EACCES.
        let by_file_rules = ["oom-score-adj", "timerslack", "comm", "cgroup-procs"]
            .iter()
            .any(|n| l.starts_with(&format!("{n} ")));
        let want = if by_file_rules {
            libc::EACCES
        } else {
            libc::EPERM
        };
        assert_eq!(
            l.split_whitespace().skip(1).collect::<Vec<_>>(),
            ["errno", &want.to_string()],
            "{ctx} {l}: {f:?}"
        );
    }
    for own in ["own-prlimit ok", "own-setrlimit ok", "own-nice ok"] {
        assert!(lines.contains(&own), "{ctx} want {own:?}: {f:?}");
    }
    // Reading another process's limits stays open (the kernel's own
    // permission decides: a root tree may).
    if uid.is_none() {
        assert!(lines.contains(&"read-server-limits ok"), "{ctx} {f:?}");
    }
    assert_eq!(reach(server), before, "{ctx}: the server was changed");
    let f = sb.sh("(su -c true root >/dev/null 2>&1); echo rc=$?");
    assert!(
        f.stdout.contains("rc=126"),
        "{ctx} the server no longer supervises: {f:?}"
    );
}

#[test]
fn the_servers_limits_priority_and_scheduling_are_out_of_a_root_trees_reach() {
    if !require_root("the_servers_limits_priority_and_scheduling_are_out_of_a_root_trees_reach") {
        return;
    }
    for config in [
        "",
        "landlock:\n  max_abi: 2\n",
        "execve:\n  backend: ptrace\n",
    ] {
        guard(None, config);
    }
}

#[test]
fn the_servers_limits_priority_and_scheduling_are_out_of_a_user_trees_reach() {
    if !require_root("the_servers_limits_priority_and_scheduling_are_out_of_a_user_trees_reach") {
        return;
    }
    for config in ["", "landlock:\n  max_abi: 2\n"] {
        guard(Some(NOBODY), config);
    }
}

/// Under agent-observe (no write rules of its own) the server's `/proc`
/// files and `/proc/sys` still refuse a root tree's writes: agentsh's own
/// protection (docs/security-model.md, Known limits, which says `/dev` is
/// not kept there: nothing here writes a device).
#[test]
fn under_agent_observe_proc_keeps_the_servers_own_protection() {
    if !require_root("under_agent_observe_proc_keeps_the_servers_own_protection") {
        return;
    }
    let mut sb = Sandbox::new(agentsh_tests::sandbox::AGENT_OBSERVE, None);
    let server = sb.srv.pid();
    let f = sb.sh(&format!(
        "for p in /proc/{server}/oom_score_adj /proc/{server}/comm /proc/sys/kernel/core_pattern \
         /proc/sys/kernel/hostname; do \
         (printf x > $p) 2>/dev/null && echo \"$p writable\" || echo \"$p refused\"; done; \
         echo 5 > /proc/self/oom_score_adj && echo own-ok"
    ));
    let lines: Vec<&str> = f.stdout.lines().filter(|l| l.starts_with('/')).collect();
    assert_eq!(lines.len(), 4, "{f:?}");
    for line in lines {
        assert!(line.ends_with("refused"), "{line}: {f:?}");
    }
    assert!(f.stdout.contains("own-ok"), "{f:?}");
}
