//! End-to-end: SDK-style daemons spawn shells exactly as each SDK does, in a
//! private mount namespace where `/bin/sh` and `/bin/bash` are the shim. The
//! daemon is a sibling of the agentsh server, never its descendant. Needs root.

// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

use agentsh_tests::ns::Namespace;
use agentsh_tests::sdk::{self, Finished, Spawn, Supervisor};
use agentsh_tests::server::{require_root, with_private_marker_dir, TestServer};
use serde_json::Value;
use std::time::{Duration, Instant};

const POLICY: &str = r#"
name: sdk-e2e
default: allow
command_rules:
  - name: deny-nested-curl
    commands: [curl]
    context: [nested]
    decision: deny
    message: network tools are not allowed in nested commands
"#;

/// Server, namespace with the shim installed (sh and bash), daemon.
struct Scenario {
    sup: Supervisor,
    _ns: Namespace,
    srv: TestServer,
}

impl Scenario {
    fn new(mode: &str, allow_all_filter: bool) -> Scenario {
        let srv = TestServer::start(POLICY, "");
        let ns = Namespace::new();
        ns.install_shim(true);
        ns.configure(&srv.url, mode);
        let sup = Supervisor::start(&ns, allow_all_filter);
        Scenario { sup, _ns: ns, srv }
    }

    fn wrap_inits(&self) -> usize {
        self.srv
            .events("default")
            .iter()
            .filter(|e| e["type"] == "wrap_init")
            .count()
    }

    fn curl_events(&self) -> Vec<Value> {
        self.srv
            .exec_events("default")
            .into_iter()
            .filter(|e| {
                e["filename"]
                    .as_str()
                    .is_some_and(|f| f.rsplit('/').next() == Some("curl"))
            })
            .collect()
    }

    /// The nested curl was denied, audited, at depth >= 1.
    fn assert_nested_curl_denied(&self, f: &Finished) {
        assert!(
            f.stdout.contains("curl-rc=126"),
            "curl must fail with EACCES (126): {f:?}\n{}",
            self.srv.log()
        );
        let ev = self
            .srv
            .wait_exec_event("default", Duration::from_secs(60), |e| {
                e["filename"]
                    .as_str()
                    .is_some_and(|f| f.rsplit('/').next() == Some("curl"))
            })
            .unwrap_or_else(|| panic!("no curl event: {:?}", self.srv.exec_events("default")));
        assert_eq!(ev["decision"], "deny", "{ev}");
        // The shell's PATH probes (e.g. /usr/local/bin/curl) are execs too.
        for ev in self.curl_events() {
            assert_eq!(ev["decision"], "deny", "{ev}");
            assert_eq!(ev["rule"], "deny-nested-curl", "{ev}");
            assert!(ev["depth"].as_u64().is_some_and(|d| d >= 1), "{ev}");
        }
    }
}

/// The command every scenario runs: pid, a nested denied curl, a nested
/// `sh -c` (must not call wrap-init), no AGENTSH_* variable, an exit code.
const PROBE: &str = "echo pid=$$; curl --version >/dev/null 2>&1; echo curl-rc=$?; \
sh -c 'echo nested-ok'; env | grep -c '^AGENTSH_' | sed 's/^/agentsh-vars=/'; \
echo children=$(cat /proc/$$/task/$$/children | wc -w); \
echo sockets=$(ls -l /proc/$$/fd | grep -c 'socket:'); exit 3";

fn assert_probe(s: &Scenario, f: &Finished) {
    assert!(
        f.stdout.contains(&format!("pid={}\n", f.pid)),
        "echo $$ must be the spawned pid: {f:?}"
    );
    assert!(f.stdout.contains("nested-ok\n"), "{f:?}");
    assert!(f.stdout.contains("agentsh-vars=0\n"), "{f:?}");
    // Only the $(...) subshell: no helper of ours stayed.
    assert!(f.stdout.contains("children=1\n"), "{f:?}");
    // No connection of ours stayed open (the notify socket's is closed
    // after the ACK; the SDK daemons here give pipes).
    assert!(f.stdout.contains("sockets=0\n"), "{f:?}");
    assert_eq!(f.code, Some(3), "{f:?}");
    s.assert_nested_curl_denied(f);
    assert_eq!(s.wrap_inits(), 1, "exactly one wrap-init per SDK command");
}

fn kill(pid: i32, sig: i32) {
    // SAFETY: kill(2) on a pid/pgid this test spawned (through the daemon).
    assert_eq!(unsafe { libc::kill(pid, sig) }, 0, "kill({pid}, {sig})");
}

/// No process of the process group `pgid` is left.
fn group_is_gone(pgid: u32) -> bool {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        // SAFETY: signal 0 only probes.
        let alive = unsafe { libc::kill(-(pgid as i32), 0) } == 0;
        if !alive {
            return true;
        }
        if Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn tensorlake_sh_lc_is_supervised_transparently() {
    if !require_root("tensorlake_sh_lc_is_supervised_transparently") {
        return;
    }
    let mut s = Scenario::new("on", false);
    let f = s.sup.run(&sdk::tensorlake(PROBE));
    assert_probe(&s, &f);
}

#[test]
fn runloop_bash_c_is_supervised_transparently() {
    if !require_root("runloop_bash_c_is_supervised_transparently") {
        return;
    }
    let mut s = Scenario::new("on", false);
    let f = s.sup.run(&sdk::runloop(PROBE));
    assert_probe(&s, &f);
}

#[test]
fn e2b_oom_wrapper_then_login_bash_is_supervised_transparently() {
    if !require_root("e2b_oom_wrapper_then_login_bash_is_supervised_transparently") {
        return;
    }
    let mut s = Scenario::new("on", false);
    let probe = format!("echo oom=$(cat /proc/$$/oom_score_adj); {PROBE}");
    let f = s.sup.run(&sdk::e2b(&probe));
    assert!(f.stdout.contains("oom=100\n"), "{f:?}");
    assert_probe(&s, &f);
}

#[test]
fn e2b_pty_session_is_supervised_transparently() {
    if !require_root("e2b_pty_session_is_supervised_transparently") {
        return;
    }
    let mut s = Scenario::new("on", false);
    let typed = "echo pid=$$ tty=$(tty | cut -c1-8); curl --version >/dev/null 2>&1; echo curl-rc=$?; exit 5\n";
    let r = s.sup.spawn(&sdk::e2b_pty(typed));
    let f = s.sup.wait(r, Duration::from_secs(60));
    assert!(
        f.stdout.contains(&format!("pid={} tty=/dev/pts", f.pid)),
        "{f:?}"
    );
    assert_eq!(f.code, Some(5), "{f:?}");
    s.assert_nested_curl_denied(&f);
    assert_eq!(s.wrap_inits(), 1);
}

#[test]
fn daytona_script_on_stdin_is_supervised_transparently() {
    if !require_root("daytona_script_on_stdin_is_supervised_transparently") {
        return;
    }
    let mut s = Scenario::new("on", false);
    let f = s.sup.run(&sdk::daytona_stdin(&format!("{PROBE}\n")));
    assert_probe(&s, &f);
}

#[test]
fn daytona_base64_pipeline_is_supervised() {
    if !require_root("daytona_base64_pipeline_is_supervised") {
        return;
    }
    let mut s = Scenario::new("on", false);
    let f = s.sup.run(&sdk::daytona_base64(
        "curl --version >/dev/null 2>&1; echo curl-rc=$?; exit 4",
    ));
    assert_eq!(f.code, Some(4), "{f:?}");
    s.assert_nested_curl_denied(&f);
    // The inner `sh` reading the script is nested: no second wrap-init.
    assert_eq!(s.wrap_inits(), 1);
}

#[test]
fn daytona_killing_the_process_group_stops_the_whole_command() {
    if !require_root("daytona_killing_the_process_group_stops_the_whole_command") {
        return;
    }
    let mut s = Scenario::new("on", false);
    let r = s
        .sup
        .spawn(&sdk::daytona_stdin("sleep 30 & sleep 30; wait\n"));
    // Let the tree get installed and the sleeps start.
    let sleeping = s
        .srv
        .wait_exec_event("default", Duration::from_secs(60), |e| {
            e["filename"]
                .as_str()
                .is_some_and(|f| f.ends_with("/sleep"))
        });
    assert!(sleeping.is_some(), "{}", s.srv.log());
    kill(-(r.pid as i32), libc::SIGKILL);
    let f = s.sup.wait(r, Duration::from_secs(60));
    assert_eq!(f.signal, Some(libc::SIGKILL), "{f:?}");
    assert!(
        group_is_gone(r.pid),
        "processes of group {} survived",
        r.pid
    );
}

#[test]
fn e2b_signalling_the_pid_ends_the_command_with_that_signal() {
    if !require_root("e2b_signalling_the_pid_ends_the_command_with_that_signal") {
        return;
    }
    let mut s = Scenario::new("on", false);
    // bash (the spawned pid, after `exec "${@}"`) loops over a child.
    let r = s.sup.spawn(&sdk::e2b("while :; do sleep 0.1; done"));
    std::thread::sleep(Duration::from_millis(300));
    kill(r.pid as i32, libc::SIGTERM);
    let f = s.sup.wait(r, Duration::from_secs(60));
    assert_eq!(f.signal, Some(libc::SIGTERM), "{f:?}");
}

#[test]
fn death_by_signal_and_exit_codes_come_through_unchanged() {
    if !require_root("death_by_signal_and_exit_codes_come_through_unchanged") {
        return;
    }
    let mut s = Scenario::new("on", false);
    let f = s.sup.run(&sdk::tensorlake("kill -SEGV $$"));
    assert_eq!(f.signal, Some(libc::SIGSEGV), "{f:?}");
    let f = s.sup.run(&sdk::runloop("exit 42"));
    assert_eq!(f.code, Some(42), "{f:?}");
    let f = s.sup.run(&Spawn::argv(&["/bin/sh", "-c", "exit 0"]));
    assert_eq!(f.code, Some(0), "{f:?}");
}

#[test]
fn an_unrelated_seccomp_filter_does_not_stop_installation() {
    if !require_root("an_unrelated_seccomp_filter_does_not_stop_installation") {
        return;
    }
    let mut s = Scenario::new("on", true);
    let f = s.sup.run(&sdk::tensorlake(
        "grep Seccomp_filters /proc/$$/status; curl --version >/dev/null 2>&1; echo curl-rc=$?",
    ));
    // The runtime's filter plus agentsh's.
    assert!(f.stdout.contains("Seccomp_filters:\t2"), "{f:?}");
    s.assert_nested_curl_denied(&f);
    assert_eq!(s.wrap_inits(), 1);
}

#[test]
fn once_agentsh_ran_auto_refuses_while_the_server_is_down_and_recovers_when_it_is_back() {
    if !require_root(
        "once_agentsh_ran_auto_refuses_while_the_server_is_down_and_recovers_when_it_is_back",
    ) {
        return;
    }
    let mut s = Scenario::new("auto", false);
    let f = s.sup.run(&sdk::tensorlake(
        "curl --version >/dev/null 2>&1; echo curl-rc=$?",
    ));
    s.assert_nested_curl_denied(&f);
    // Killed (OOM, a crash, a kill on a kernel without signal scoping):
    // `auto` must not fall open now.
    s.srv.kill();
    let f = s
        .sup
        .run(&sdk::tensorlake("echo ran; curl --version; exit 9"));
    assert_eq!(f.code, Some(126), "{f:?}");
    assert_eq!(f.stdout, "", "nothing ran: {f:?}");
    assert_eq!(f.stderr.lines().count(), 1, "one hint line: {f:?}");
    assert!(
        f.stderr
            .contains("agentsh has already run in this container")
            && f.stderr
                .contains("docs/troubleshooting.md#refuses-to-run-unsupervised"),
        "{f:?}"
    );
    // The service manager (or the entrypoint) brings it back: supervised again.
    s.srv.restart_with(with_private_marker_dir);
    let f = s.sup.run(&sdk::tensorlake(
        "echo pid=$$; curl --version >/dev/null 2>&1; echo curl-rc=$?",
    ));
    assert!(f.stdout.contains(&format!("pid={}", f.pid)), "{f:?}");
    s.assert_nested_curl_denied(&f);
}

#[test]
fn before_agentsh_ever_started_auto_runs_the_command_and_the_server_records_it() {
    if !require_root("before_agentsh_ever_started_auto_runs_the_command_and_the_server_records_it")
    {
        return;
    }
    // The server is configured but not started: E2B's start command runs
    // before the server exists. The shim falls through and (as root)
    // records the run; the server turns the record into an audit event.
    let mut srv = TestServer::start(POLICY, "");
    srv.kill();
    let ns = Namespace::new();
    ns.install_shim(true);
    ns.configure(&srv.url, "auto");
    // The run directory is the server's; `active` is its marker. A fresh
    // container has none.
    let marker = srv.socket.parent().unwrap().join("active");
    std::fs::remove_file(&marker).unwrap();
    let mut sup = Supervisor::start(&ns, false);
    let f = sup.run(&sdk::tensorlake("echo pid=$$; exit 9"));
    assert_eq!(f.code, Some(9), "{f:?}");
    assert!(f.stdout.contains(&format!("pid={}", f.pid)), "{f:?}");
    assert_eq!(f.stderr, "", "{f:?}");
    // A marker from an earlier life of the container (a restart: another
    // PID 1) is stale: the restarted container's start command still runs.
    std::fs::write(
        &marker,
        "boot=00000000-0000-0000-0000-000000000000 pid1=1\n",
    )
    .unwrap();
    let f = sup.run(&sdk::tensorlake("exit 3"));
    assert_eq!(
        f.code,
        Some(3),
        "a stale marker must not block a restart: {f:?}"
    );
    // A record an image build step left (a RUN after `agentsh shim
    // install`: another PID 1) is kept apart from this life's.
    let log = srv.socket.parent().unwrap().join("unsupervised.jsonl");
    let mut text = std::fs::read_to_string(&log).unwrap();
    text.push_str(
        "{\"unix_time\":1,\"pid\":9,\"ppid\":1,\"uid\":0,\"argv\":[\"sh\",\"-c\",\"apt-get install x\"],\
         \"reason\":\"image build\",\"life\":\"boot=00000000-0000-0000-0000-000000000000 pid1=1\"}\n",
    );
    std::fs::write(&log, text).unwrap();
    srv.restart_with(with_private_marker_dir);
    let runs: Vec<Value> = srv
        .events("default")
        .into_iter()
        .filter(|e| e["type"] == "unsupervised_run")
        .collect();
    assert_eq!(runs.len(), 3, "{runs:#?}");
    assert_eq!(runs[0]["argv"][2], "echo pid=$$; exit 9", "{runs:#?}");
    assert!(runs[0]["reason"].as_str().unwrap().contains("UNSUPERVISED"));
    assert!(runs[0].get("earlier_life").is_none(), "{runs:#?}");
    assert_eq!(runs[2]["earlier_life"], true, "{runs:#?}");
    let said = srv.log();
    assert!(
        said.contains("count=2") && said.contains("shells ran UNSUPERVISED"),
        "{said}"
    );
    assert!(said.contains("an earlier life of this container"), "{said}");
    // And from now on, in this life, a failure is a refusal.
    srv.kill();
    let f = sup.run(&sdk::tensorlake("exit 4"));
    assert_eq!(f.code, Some(126), "{f:?}");
}
