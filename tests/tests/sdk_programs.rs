//! End-to-end: an SDK runs a program without a shell (`sb.exec("python3",
//! "-c", ...)`, `podman exec CTR node ...`). In a private mount namespace
//! where `agentsh shim install --programs` stood the shim in for python3
//! and perl, a daemon that is not the server's descendant execs them by
//! name, as those SDKs do. Needs root.

// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

use agentsh_tests::ns::Namespace;
use agentsh_tests::sdk::{Finished, Spawn, Supervisor};
use agentsh_tests::server::{require_root, TestServer};
use std::time::{Duration, Instant};

const POLICY: &str = r#"
name: sdk-programs
default: allow
command_rules:
  - name: deny-nested-curl
    commands: [curl]
    context: [nested]
    decision: deny
    message: network tools are not allowed in nested commands
"#;

/// Server, namespace with the shim for sh, bash, python3 and perl, daemon.
struct Scenario {
    sup: Supervisor,
    ns: Namespace,
    srv: TestServer,
}

impl Scenario {
    fn new() -> Scenario {
        let srv = TestServer::start(POLICY, "");
        let ns = Namespace::new();
        let out = ns.install_shim_for(true, &["python3", "perl"]);
        assert!(out.contains("now agentsh-shell-shim"), "{out}");
        ns.configure(&srv.url, "on");
        let sup = Supervisor::start(&ns, false);
        Scenario { sup, ns, srv }
    }

    fn wrap_inits(&self) -> usize {
        self.srv
            .events("default")
            .iter()
            .filter(|e| e["type"] == "wrap_init")
            .count()
    }
}

/// What the python run prints: its pid, its filter, what it was called,
/// a denied program it runs without a shell, a nested python, no variable
/// of agentsh's; then exit 7.
const PROBE: &str = r#"
import os, subprocess, sys
print("pid=%d" % os.getpid())
for l in open("/proc/self/status"):
    if l.startswith("Seccomp:"):
        print("seccomp=" + l.split()[1])
print("argv0=" + open("/proc/self/cmdline", "rb").read().split(b"\0")[0].decode())
try:
    subprocess.run(["curl", "--version"], capture_output=True)
    print("curl=ran")
except PermissionError:
    print("curl=refused")
r = subprocess.run(["python3", "-c", "import os; print('nested', os.getppid())"],
                   capture_output=True, text=True)
print(r.stdout.strip())
print("agentsh-vars=%d" % sum(1 for k in os.environ if k.startswith("AGENTSH_")))
sys.exit(7)
"#;

/// `argv` as the SDK runs it, on the PATH of an image (not this machine's,
/// which may have wrappers of its own in front).
fn exec(argv: &[&str]) -> Spawn {
    Spawn::argv(argv).env("PATH", "/usr/local/bin:/usr/bin:/bin")
}

fn line<'a>(f: &'a Finished, key: &str) -> &'a str {
    f.stdout
        .lines()
        .find_map(|l| l.strip_prefix(key))
        .unwrap_or_else(|| panic!("no {key} line: {f:?}"))
}

#[test]
fn a_program_an_sdk_runs_without_a_shell_is_supervised_in_its_own_process() {
    if !require_root("a_program_an_sdk_runs_without_a_shell_is_supervised_in_its_own_process") {
        return;
    }
    let mut s = Scenario::new();
    let f = s.sup.run(&exec(&["python3", "-c", PROBE]));
    // Its own pid, exit status and argv[0]; filtered (mode 2) by agentsh.
    assert_eq!(line(&f, "pid="), f.pid.to_string(), "{f:?}");
    assert_eq!(f.code, Some(7), "{f:?}\n{}", s.srv.log());
    assert_eq!(line(&f, "argv0="), "python3", "{f:?}");
    assert_eq!(line(&f, "seccomp="), "2", "not supervised: {f:?}");
    assert_eq!(line(&f, "agentsh-vars="), "0", "{f:?}");
    // A program it runs without a shell is judged: curl refused, audited
    // with its rule.
    assert_eq!(line(&f, "curl="), "refused", "{f:?}\n{}", s.srv.log());
    let ev = s
        .srv
        .wait_exec_event("default", Duration::from_secs(60), |e| {
            e["filename"]
                .as_str()
                .is_some_and(|p| p.rsplit('/').next() == Some("curl"))
        })
        .unwrap_or_else(|| panic!("no curl event: {:?}", s.srv.exec_events("default")));
    assert_eq!(ev["decision"], "deny", "{ev}");
    assert_eq!(ev["rule"], "deny-nested-curl", "{ev}");
    // The nested python ran straight through: one wrap-init, the first.
    assert_eq!(line(&f, "nested "), f.pid.to_string(), "{f:?}");
    assert_eq!(s.wrap_inits(), 1, "a nested python installed again");
    // The wrap-init names the program as the SDK reached it.
    let init = s
        .srv
        .events("default")
        .into_iter()
        .find(|e| e["type"] == "wrap_init")
        .unwrap();
    assert!(
        init.to_string().contains("/usr/bin/python3."),
        "the wrap-init does not name the program: {init}"
    );
    // perl, by path, with its own exit status.
    let f = s.sup.run(&exec(&[
        "/usr/bin/perl",
        "-e",
        "open(my $f, '<', '/proc/self/status'); while (<$f>) { print if /^Seccomp:/ } exit 5",
    ]));
    assert_eq!(f.code, Some(5), "{f:?}");
    assert!(f.stdout.contains("Seccomp:\t2"), "{f:?}");
}

/// Waits until `pid` catches `sig` (the program installed its handler).
fn catches(pid: u32, sig: i32) -> bool {
    let deadline = Instant::now() + Duration::from_secs(60);
    while Instant::now() < deadline {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
        let cgt = status
            .lines()
            .find_map(|l| l.strip_prefix("SigCgt:"))
            .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
            .unwrap_or(0);
        if cgt & (1 << (sig - 1)) != 0 {
            return true;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    false
}

#[test]
fn a_signal_to_the_pid_the_sdk_started_reaches_the_program() {
    if !require_root("a_signal_to_the_pid_the_sdk_started_reaches_the_program") {
        return;
    }
    let mut s = Scenario::new();
    let script = "import signal, sys, time\n\
                  signal.signal(signal.SIGTERM, lambda *a: (print('got-term'), sys.exit(77)))\n\
                  while True: time.sleep(0.05)\n";
    let r = s.sup.spawn(&exec(&["python3", "-c", script]));
    assert!(
        catches(r.pid, libc::SIGTERM),
        "python never set its handler"
    );
    // SAFETY: kill(2) on the pid the daemon started for this test.
    assert_eq!(unsafe { libc::kill(r.pid as i32, libc::SIGTERM) }, 0);
    let f = s.sup.wait(r, Duration::from_secs(60));
    assert_eq!(f.code, Some(77), "{f:?}");
    assert!(f.stdout.contains("got-term"), "{f:?}");
    // And SIGKILL: the program dies of it, as the SDK sees.
    let r = s.sup.spawn(&exec(&["python3", "-c", script]));
    assert!(
        catches(r.pid, libc::SIGTERM),
        "python never set its handler"
    );
    // SAFETY: as above.
    assert_eq!(unsafe { libc::kill(r.pid as i32, libc::SIGKILL) }, 0);
    let f = s.sup.wait(r, Duration::from_secs(60));
    assert_eq!(f.signal, Some(libc::SIGKILL), "{f:?}");
    drop(s.ns);
}

#[test]
fn without_proc_a_program_shim_still_runs_its_own_program() {
    if !require_root("without_proc_a_program_shim_still_runs_its_own_program") {
        return;
    }
    let ns = Namespace::new();
    ns.install_shim_for(false, &["python3"]);
    ns.write_shim_conf("shim_install=off\n", 0o644);
    // No /proc in the namespace: /proc/self/exe cannot say which program
    // the shim stands for; the path it was exec'd with must.
    let o = ns
        .command("/usr/bin/mount")
        .args(["-t", "tmpfs", "agentsh-no-proc", "/proc"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{o:?}");
    let o = ns.run(
        &[
            "/usr/bin/python3",
            "-c",
            "import sys; print('python', sys.argv[0]); sys.exit(4)",
        ],
        &[],
    );
    let out = String::from_utf8_lossy(&o.stdout);
    assert_eq!(o.status.code(), Some(4), "{o:?}");
    assert!(out.contains("python -c"), "not python: {o:?}");
}

/// A server on the ptrace backend inside the namespace, where the shims
/// for sh, bash and python3 are, and an SDK daemon (taken apart as
/// `ns, srv, sup`, so they drop as the daemon, the server, the namespace).
struct Traced {
    sup: Supervisor,
    srv: TestServer,
    ns: Namespace,
}

impl Traced {
    fn new() -> Traced {
        let ns = Namespace::new();
        let srv = TestServer::start_with(
            &agentsh_tests::server::server_base(),
            POLICY,
            "execve:\n  backend: ptrace\n",
            |p| ns.command(p),
        );
        let out = ns.install_shim_for(true, &["python3"]);
        assert!(out.contains("now agentsh-shell-shim"), "{out}");
        ns.configure(&srv.url, "on");
        let sup = Supervisor::start(&ns, false);
        Traced { sup, srv, ns }
    }
}

/// Under the tracer (`execve.backend: ptrace`, what gVisor runs), a python
/// or a shell run inside a supervised tree does not exec its shim first:
/// the supervisor execs the real one in its place, judged and checked as
/// any exec. The server runs in the namespace, where the shims are.
#[test]
fn under_the_tracer_a_nested_program_or_shell_runs_without_the_shims_hop() {
    if !require_root("under_the_tracer_a_nested_program_or_shell_runs_without_the_shims_hop") {
        return;
    }
    let Traced {
        ns: _ns,
        srv,
        mut sup,
    } = Traced::new();
    let script = "python3 -c 'import os; print(\"py\", os.readlink(\"/proc/self/exe\"))'; \
                  sh -c 'echo inner $0'; python3 -c 'import subprocess; subprocess.run([\"curl\", \"-V\"])'; \
                  echo rc=$?";
    let f = sup.run(&exec(&["sh", "-c", script]));
    assert_eq!(f.code, Some(0), "{f:?}\n{}", srv.log());
    // The real python ran, as itself, and the real shell.
    assert!(
        f.stdout.contains("py /usr/bin/python3.") && f.stdout.contains(".real\n"),
        "{f:?}"
    );
    assert!(f.stdout.contains("inner sh"), "{f:?}");
    let events = srv.exec_events("default");
    let skipped = |base: &str| {
        events.iter().any(|e| {
            e["filename"].as_str().is_some_and(|p| p.ends_with(base))
                && e["message"]
                    .as_str()
                    .is_some_and(|m| m.contains("made in its place"))
        })
    };
    assert!(skipped("/python3"), "the python shim ran: {}", srv.log());
    assert!(skipped("/sh"), "the shell shim ran: {events:#?}");
    // The real ones judged as execs of their own: the links, and curl,
    // run by the nested python, refused with its rule.
    let named = |p: &str| {
        events
            .iter()
            .any(|e| e["filename"].as_str().is_some_and(|f| f.starts_with(p)))
    };
    assert!(named("/usr/lib/agentsh/programs/python3."), "{events:#?}");
    assert!(named("/usr/lib/agentsh/shells/sh"), "{events:#?}");
    let curl = events
        .iter()
        .find(|e| e["filename"].as_str().is_some_and(|p| p.ends_with("/curl")))
        .unwrap_or_else(|| panic!("no curl event: {events:#?}"));
    assert_eq!(curl["rule"], "deny-nested-curl", "{curl}");
    // The outer shell, started by the SDK from outside, installed once.
    let inits = srv
        .events("default")
        .iter()
        .filter(|e| e["type"] == "wrap_init")
        .count();
    assert_eq!(inits, 1, "{f:?}");
}

/// The attack on the hop's skip (issue 60): a thread flips the exec's path
/// between a program shim and a denied program (`curl`) while the call is
/// judged, and argv[1] with it. Under the tracer the path pointed at is the
/// tracer's copy of the real program's (pinned), and the new image is
/// checked before its first instruction: the denied program never runs,
/// however the flips fall, and the real python does run in the shim's
/// place.
#[test]
fn under_the_tracer_a_path_flipped_around_a_program_shims_exec_never_runs_a_denied_program() {
    if !require_root(
        "under_the_tracer_a_path_flipped_around_a_program_shims_exec_never_runs_a_denied_program",
    ) {
        return;
    }
    let Traced {
        ns: _ns,
        srv,
        mut sup,
    } = Traced::new();
    let arena = agentsh_tests::attackers::Arena::stable("hop-race");
    let n = 300;
    let script = format!(
        "RACE_LOG={} {} thread {n} /usr/bin/python3 {}",
        arena.log.display(),
        arena.race.display(),
        arena.curl.display()
    );
    let f = sup.run(&exec(&["sh", "-c", &script]));
    assert_eq!(f.code, Some(0), "{f:?}\n{}", srv.log());
    let ran = arena.forbidden_runs();
    assert!(ran.is_empty(), "a denied program ran: {ran}");
    let t = agentsh_tests::attackers::tally(&f.stdout).unwrap_or_else(|| panic!("{f:?}"));
    assert_eq!(t.attempts, n, "{f:?}");
    // Real pythons ran in the shims' place (python, given "benign" for a
    // script, exits 2: counted as other outcomes), and curl was refused.
    let skipped = srv
        .exec_events("default")
        .iter()
        .filter(|e| {
            e["message"]
                .as_str()
                .is_some_and(|m| m.contains("made in its place"))
        })
        .count();
    eprintln!(
        "flips around the python shim: {} (skips {skipped})",
        f.stdout.trim()
    );
    assert!(skipped > 0 && t.denied > 0, "skips {skipped}, {f:?}");
}
