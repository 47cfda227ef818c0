//! End-to-end: the exec supervisor on the real kernel, with the test process
//! playing the shim (see `agentsh_tests::relay`). The supervised tree is a
//! sibling of the server, never its child.

// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

use agentsh_tests::relay::{run_wrapped, spawn_wrapped, WrapOptions};
use agentsh_tests::server::{bin, execs_of, require_root, TempDir, TestServer};
use serde_json::Value;
use std::time::Duration;

const POLICY: &str = r#"
name: e2e
default: allow
command_rules:
  - name: deny-nested-curl
    commands: [curl]
    context: [nested]
    decision: deny
    message: network tools are not allowed in nested commands
  - name: deny-direct-id
    commands: [id]
    context: [direct]
    decision: deny
  - name: deny-rm-rf
    commands: [rm]
    args_patterns: ["(^| )-rf( |$)"]
    decision: deny
"#;

/// A directory with a fake `curl` (a copy of `true`), so the tests need no network tool.
fn fake_bin(dir: &TempDir) -> String {
    let b = dir.path().join("bin");
    std::fs::create_dir_all(&b).unwrap();
    std::fs::copy("/bin/true", b.join("curl")).unwrap();
    b.display().to_string()
}

fn path_with(extra: &str) -> String {
    format!("/nonexistent-a:/nonexistent-b:{extra}:/usr/local/bin:/usr/bin:/bin")
}

fn stderr(o: &std::process::Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn nested_curl_is_denied_and_audited_with_depths() {
    if !require_root("nested_curl_is_denied_and_audited_with_depths") {
        return;
    }
    let srv = TestServer::start(POLICY, "");
    let tmp = TempDir::new("curl");
    let fb = fake_bin(&tmp);
    let opts = WrapOptions {
        env: vec![("PATH".into(), path_with(&fb))],
        ..Default::default()
    };
    let out = run_wrapped(
        &srv.url,
        "s1",
        &["/bin/sh", "-c", "ls >/dev/null; curl --version"],
        &opts,
    );
    assert_eq!(out.status.code(), Some(126), "stderr: {}", stderr(&out));
    assert!(
        stderr(&out).contains("Permission denied"),
        "stderr: {}",
        stderr(&out)
    );
    let ev = srv.exec_events("s1");
    let sh = execs_of(&ev, "sh");
    assert_eq!(sh.len(), 1, "{ev:#?}");
    assert_eq!(sh[0]["depth"], 0);
    assert_eq!(sh[0]["effective_action"], "allow");
    let ls = execs_of(&ev, "ls");
    assert_eq!(ls.len(), 1, "{ev:#?}");
    assert_eq!(ls[0]["depth"], 1);
    assert_eq!(ls[0]["effective_action"], "allow");
    // dash tries every PATH entry holding a `curl` after EACCES: each is a real
    // exec attempt, each is denied and audited.
    let curl = execs_of(&ev, "curl");
    assert!(!curl.is_empty(), "{ev:#?}");
    for c in &curl {
        assert_eq!(c["depth"], 1);
        assert_eq!(c["decision"], "deny");
        assert_eq!(c["effective_action"], "deny");
        assert_eq!(c["rule"], "deny-nested-curl");
        assert_eq!(c["argv"], serde_json::json!(["curl", "--version"]));
        assert_eq!(c["parent_pid"], sh[0]["pid"]);
    }
    assert!(curl[0]["filename"].as_str().unwrap().starts_with(&fb));
    // PATH probes of missing directories are not execs and are not audited.
    assert!(
        !ev.iter()
            .any(|e| e["filename"].as_str().unwrap_or("").contains("nonexistent")),
        "{ev:#?}"
    );
    // The JSONL file holds the same exec events, each chained to the line
    // before it (`prev`, the file's own).
    let jsonl: Vec<Value> = srv
        .jsonl_events()
        .into_iter()
        .filter(|e| e["type"] == "execve" && e["session_id"] == "s1")
        .map(|mut e| {
            let prev = e.as_object_mut().and_then(|o| o.remove("prev"));
            assert!(
                prev.as_ref()
                    .and_then(Value::as_str)
                    .is_some_and(|p| p.len() == 64),
                "{e}"
            );
            e
        })
        .collect();
    assert_eq!(jsonl, ev);
}

#[test]
fn direct_only_rule_applies_at_depth_zero_only() {
    if !require_root("direct_only_rule_applies_at_depth_zero_only") {
        return;
    }
    let srv = TestServer::start(POLICY, "");
    // `bash -c id`: bash execs a lone command in place, so id is the direct
    // command (depth 0, same pid as the shell).
    let out = run_wrapped(
        &srv.url,
        "d",
        &["/bin/bash", "-c", "id"],
        &WrapOptions::default(),
    );
    assert_eq!(out.status.code(), Some(126), "stderr: {}", stderr(&out));
    // `sh -c 'id; true'`: the shell forks for id, so id is nested.
    let out = run_wrapped(
        &srv.url,
        "n",
        &["/bin/sh", "-c", "id; true"],
        &WrapOptions::default(),
    );
    assert_eq!(out.status.code(), Some(0), "stderr: {}", stderr(&out));
    assert!(String::from_utf8_lossy(&out.stdout).contains("uid="));
    let d = srv.exec_events("d");
    let id = execs_of(&d, "id");
    assert_eq!(id[0]["depth"], 0, "{d:#?}");
    assert_eq!(id[0]["rule"], "deny-direct-id");
    assert_eq!(id[0]["pid"], execs_of(&d, "bash")[0]["pid"]);
    let n = srv.exec_events("n");
    let id = execs_of(&n, "id");
    assert_eq!(id.len(), 1, "{n:#?}");
    assert_eq!(id[0]["depth"], 1);
    assert_eq!(id[0]["rule"], "default");
}

#[test]
fn args_pattern_denies_rm_rf_but_not_rm_f() {
    if !require_root("args_pattern_denies_rm_rf_but_not_rm_f") {
        return;
    }
    let srv = TestServer::start(POLICY, "");
    let tmp = TempDir::new("rm");
    let a = tmp.path().join("a");
    let b = tmp.path().join("b");
    std::fs::create_dir_all(&a).unwrap();
    std::fs::write(&b, "x").unwrap();
    let script = format!(
        "rm -rf {}; echo rf=$?; rm -f {}; echo f=$?",
        a.display(),
        b.display()
    );
    let out = run_wrapped(
        &srv.url,
        "rm",
        &["/bin/sh", "-c", &script],
        &WrapOptions::default(),
    );
    let so = String::from_utf8_lossy(&out.stdout);
    assert!(so.contains("rf=126") && so.contains("f=0"), "stdout: {so}");
    assert!(a.exists(), "rm -rf must not have run");
    assert!(!b.exists(), "rm -f must have run");
    let ev = srv.exec_events("rm");
    let rms = execs_of(&ev, "rm");
    let rf: Vec<_> = rms.iter().filter(|e| e["argv"][1] == "-rf").collect();
    let f: Vec<_> = rms.iter().filter(|e| e["argv"][1] == "-f").collect();
    assert!(
        !rf.is_empty() && rf.iter().all(|e| e["rule"] == "deny-rm-rf"),
        "{ev:#?}"
    );
    assert_eq!(f.len(), 1, "{ev:#?}");
    assert_eq!(f[0]["effective_action"], "allow");
}

#[test]
fn wrappers_are_judged_on_their_payload() {
    if !require_root("wrappers_are_judged_on_their_payload") {
        return;
    }
    let srv = TestServer::start(POLICY, "");
    let tmp = TempDir::new("wrap");
    let fb = fake_bin(&tmp);
    let opts = WrapOptions {
        env: vec![("PATH".into(), path_with(&fb))],
        ..Default::default()
    };
    let out = run_wrapped(
        &srv.url,
        "env",
        &["/bin/sh", "-c", "true; env curl --version; echo rc=$?"],
        &opts,
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("rc=126"));
    let ev = srv.exec_events("env");
    let env = execs_of(&ev, "env");
    assert_eq!(env[0]["rule"], "deny-nested-curl", "{ev:#?}");
    assert!(execs_of(&ev, "curl").is_empty(), "curl itself never ran");

    let ld = "/lib64/ld-linux-x86-64.so.2";
    if std::path::Path::new(ld).exists() {
        let script = format!("true; {ld} {fb}/curl --version; echo rc=$?");
        let out = run_wrapped(&srv.url, "ld", &["/bin/sh", "-c", &script], &opts);
        assert!(
            String::from_utf8_lossy(&out.stdout).contains("rc=126"),
            "stdout: {} stderr: {}",
            String::from_utf8_lossy(&out.stdout),
            stderr(&out)
        );
        let ev = srv.exec_events("ld");
        let l = execs_of(&ev, "ld-linux-x86-64.so.2");
        // The fake curl lives in a directory the tree could change before
        // the loader opens it: refused before any name is judged.
        assert_eq!(l[0]["rule"], "loader_payload", "{ev:#?}");
    }
}

#[test]
fn too_many_arguments_are_denied_as_truncated() {
    if !require_root("too_many_arguments_are_denied_as_truncated") {
        return;
    }
    // A limit set low in the config (the default is the kernel's own).
    let srv = TestServer::start(POLICY, "execve:\n  max_argc: 1000\n");
    let out = run_wrapped(
        &srv.url,
        "t",
        &[
            "/bin/sh",
            "-c",
            "true; /bin/echo $(seq 2000) >/dev/null; echo rc=$?",
        ],
        &WrapOptions::default(),
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("rc=126"));
    let ev = srv.exec_events("t");
    let echo = execs_of(&ev, "echo");
    assert_eq!(echo.len(), 1);
    assert_eq!(echo[0]["truncated"], true);
    assert_eq!(echo[0]["rule"], "execve_truncated");
    assert_eq!(echo[0]["effective_action"], "deny");
    assert_eq!(echo[0]["argv"].as_array().unwrap().len(), 1000);
}

#[test]
fn fexecve_of_allowed_binary_runs_and_is_judged_by_real_path() {
    if !require_root("fexecve_of_allowed_binary_runs_and_is_judged_by_real_path") {
        return;
    }
    let srv = TestServer::start(POLICY, "");
    let helper = bin("agentsh-test-fexec");
    let script = format!("true; {} /bin/echo echo hello-fexec", helper.display());
    let out = run_wrapped(
        &srv.url,
        "fx",
        &["/bin/sh", "-c", &script],
        &WrapOptions::default(),
    );
    assert_eq!(out.status.code(), Some(0), "stderr: {}", stderr(&out));
    assert!(String::from_utf8_lossy(&out.stdout).contains("hello-fexec"));
    let ev = srv.exec_events("fx");
    let echo = execs_of(&ev, "echo");
    assert_eq!(echo.len(), 1, "{ev:#?}");
    let f = echo[0]["filename"].as_str().unwrap();
    assert!(f.starts_with('/') && f.ends_with("/echo"), "{f}");
    assert_eq!(echo[0]["effective_action"], "allow");

    // The same trick cannot smuggle a denied program.
    let tmp = TempDir::new("fx");
    let fb = fake_bin(&tmp);
    let script = format!("true; {} {fb}/curl curl; echo rc=$?", helper.display());
    let out = run_wrapped(
        &srv.url,
        "fx2",
        &["/bin/sh", "-c", &script],
        &WrapOptions::default(),
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("rc=126"));
    let ev = srv.exec_events("fx2");
    assert_eq!(execs_of(&ev, "curl")[0]["rule"], "deny-nested-curl");
}

#[test]
fn an_exec_of_a_fifo_is_answered_not_waited_on() {
    if !require_root("an_exec_of_a_fifo_is_answered_not_waited_on") {
        return;
    }
    // The supervisor reads a program's first bytes (a `#!` line) only from a
    // regular file: opening a FIFO that nobody writes would block the tree's
    // supervisor, and with it every exec of the tree.
    let srv = TestServer::start(POLICY, "");
    let tmp = TempDir::new("fifo");
    let fifo = tmp.path().join("prog");
    let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: a valid C string; mkfifo creates the node.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o755) }, 0);
    let script = format!("{}; echo rc=$?; /bin/echo after", fifo.display());
    let w = spawn_wrapped(
        &srv.url,
        "fifo",
        &["/bin/sh", "-c", &script],
        &WrapOptions::default(),
    );
    let mut child = w.child;
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while child.try_wait().unwrap().is_none() {
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("the tree hung on an exec of a FIFO: {}", srv.log());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("rc=126") && stdout.contains("after"),
        "{stdout} {}",
        stderr(&out)
    );
}

#[test]
fn killing_the_server_stops_every_later_exec() {
    if !require_root("killing_the_server_stops_every_later_exec") {
        return;
    }
    let mut srv = TestServer::start(POLICY, "");
    let tmp = TempDir::new("kill");
    let before = tmp.path().join("before");
    let after = tmp.path().join("after");
    let script = format!(
        "touch {}; sleep 2; touch {}; echo rc=$?",
        before.display(),
        after.display()
    );
    let w = spawn_wrapped(
        &srv.url,
        "k",
        &["/bin/sh", "-c", &script],
        &WrapOptions::default(),
    );
    let seen = srv.wait_exec_event("k", Duration::from_secs(60), |e| {
        e["filename"]
            .as_str()
            .is_some_and(|f| f.ends_with("/sleep"))
    });
    assert!(seen.is_some(), "sleep never ran: {}", srv.log());
    srv.kill();
    let (relay, out) = w.wait();
    assert!(relay.is_ok());
    assert!(before.exists());
    assert!(!after.exists(), "an exec ran after the server died");
    let so = String::from_utf8_lossy(&out.stdout);
    assert!(!so.contains("rc=0"), "stdout: {so}");
}

#[test]
fn notify_socket_refuses_another_uid_and_a_handoff_not_bound_to_its_caller() {
    if !require_root("notify_socket_refuses_another_uid_and_a_handoff_not_bound_to_its_caller") {
        return;
    }
    use agentsh_tests::relay::{hand_to_server, seqpacket_pair, wrap_init_as};
    let srv = TestServer::start(POLICY, "");
    // Socket issued to uid 65534 (its wrap-init came from a uid-65534
    // process); root connects, SO_PEERCRED refuses it.
    let resp = wrap_init_as(&srv.url, "u", Some((65534, 65534)), &["/bin/sh"]).unwrap();
    // Abstract: no file in any directory a tree could fill.
    assert!(
        resp.notify_socket.starts_with('@'),
        "{}",
        resp.notify_socket
    );
    let (a, _b) = seqpacket_pair(); // any fd: the uid check comes first
    let got = hand_to_server(&resp.notify_socket, 1, &a);
    assert_eq!(got, Ok(agentsh_proto::handoff::Ack::Refused));
    let ev = srv.events("u");
    assert!(
        ev.iter().any(|e| e["type"] == "handoff"
            && e["accepted"] == false
            && e["reason"].as_str().unwrap_or("").contains("uid 0")),
        "{ev:#?}"
    );
    // A refused connection does not use the socket up (anyone outside the
    // trees can see an abstract name): it waits on for its own relay, and
    // refuses the next impostor too.
    let got = hand_to_server(&resp.notify_socket, 1, &a);
    assert_eq!(got, Ok(agentsh_proto::handoff::Ack::Refused));

    // Issued to root, but the handoff names another pid than the process
    // that called wrap-init: refused (a local process cannot hand in a fd
    // for someone else's wrap-init).
    let resp = wrap_init_as(&srv.url, "u3", None, &["/bin/sh"]).unwrap();
    let got = hand_to_server(&resp.notify_socket, std::process::id(), &a);
    assert_eq!(got, Ok(agentsh_proto::handoff::Ack::Refused));
    assert_handoff_refused(&srv, "u3", "wrap-init was called by pid");

    // The handoff names the process that called wrap-init, but comes from
    // another one (its parent, this test): only that process itself (the
    // shim, which connects before its filter) or its child (the relay of
    // the exec path) may hand the fd in.
    let resp = wrap_init_as(&srv.url, "u4", None, &["/bin/sh"]).unwrap();
    let shim_pid = srv
        .events("u4")
        .iter()
        .find(|e| e["type"] == "wrap_init")
        .and_then(|e| e["shim_pid"].as_u64())
        .expect("the wrap-init event names the caller's pid") as u32;
    assert_ne!(shim_pid, std::process::id());
    let got = hand_to_server(&resp.notify_socket, shim_pid, &a);
    assert_eq!(got, Ok(agentsh_proto::handoff::Ack::Refused));
    assert_handoff_refused(&srv, "u4", &format!("neither pid {shim_pid} nor its child"));

    // A connection that closes without a handoff (what a shim does when it
    // goes on unsupervised under `auto`) is said as such.
    let resp = wrap_init_as(&srv.url, "u5", None, &["/bin/sh"]).unwrap();
    drop(
        agentsh_proto::seqpacket::connect(
            std::path::Path::new(&resp.notify_socket),
            Duration::from_secs(60),
        )
        .unwrap(),
    );
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while !srv.events("u5").iter().any(|e| e["type"] == "handoff") {
        assert!(std::time::Instant::now() < deadline, "no handoff event");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_handoff_refused(&srv, "u5", "closed before a handoff");
}

/// Session `session` recorded a refused handoff whose reason says `why`.
fn assert_handoff_refused(srv: &TestServer, session: &str, why: &str) {
    let ev = srv.events(session);
    assert!(
        ev.iter().any(|e| e["type"] == "handoff"
            && e["accepted"] == false
            && e["reason"].as_str().unwrap_or("").contains(why)),
        "{ev:#?}"
    );
}

#[test]
fn a_path_search_retrying_a_denied_program_is_one_attempt() {
    if !require_root("a_path_search_retrying_a_denied_program_is_one_attempt") {
        return;
    }
    // Two PATH entries that name one directory, as /usr/bin and /bin do on a
    // merged-/usr system: after EACCES from the first, the shell tries the
    // same file through the second. Two commands: two attempts, each audited
    // as its first try and one retry.
    let srv = TestServer::start(POLICY, "");
    let tmp = TempDir::new("retry");
    let fb = fake_bin(&tmp);
    let alias = tmp.path().join("alias");
    std::os::unix::fs::symlink(&fb, &alias).unwrap();
    let opts = WrapOptions {
        env: vec![("PATH".into(), format!("{fb}:{}", alias.display()))],
        ..Default::default()
    };
    let out = run_wrapped(
        &srv.url,
        "retry",
        &[
            "/bin/sh",
            "-c",
            "curl --version; echo rc=$?; curl --version; echo rc=$?",
        ],
        &opts,
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        stdout.matches("rc=126").count(),
        2,
        "{stdout} {}",
        stderr(&out)
    );
    let ev = srv.exec_events("retry");
    let curls = execs_of(&ev, "curl");
    let got: Vec<(String, Option<u64>, bool)> = curls
        .iter()
        .map(|e| {
            (
                e["filename"].as_str().unwrap_or("").to_string(),
                e["attempt"].as_u64(),
                e["retry"].as_bool().unwrap_or(false),
            )
        })
        .collect();
    assert_eq!(got.len(), 4, "{got:?}");
    for e in &curls {
        assert_eq!(e["rule"], "deny-nested-curl", "{e}");
        assert_eq!(e["effective_action"], "deny", "{e}");
    }
    let first = format!("{fb}/curl");
    let second = format!("{}/curl", alias.display());
    assert_eq!(
        (got[0].0.as_str(), got[1].0.as_str()),
        (first.as_str(), second.as_str()),
        "{got:?}"
    );
    assert!(got[0].1.is_some() && got[2].1.is_some(), "{got:?}");
    assert_eq!(got[0].1, got[1].1, "one command, one attempt: {got:?}");
    assert_eq!(got[2].1, got[3].1, "one command, one attempt: {got:?}");
    assert_ne!(got[0].1, got[2].1, "two commands, two attempts: {got:?}");
    assert_eq!(
        got.iter().map(|g| g.2).collect::<Vec<_>>(),
        [false, true, false, true],
        "{got:?}"
    );
}

/// The supervisor keeps a tree's root between execs until a task of the
/// tree calls `chroot`. The attack on that: after an exec made the root
/// kept, `chroot` into a directory where an allowed name leads to a denied
/// program, then exec it. Judged in the kept root, `/usr/bin/true` would be
/// `true` and allowed (and the kernel would run the jail's file); judged in
/// the caller's new root it is a symlink to `curl`, which this policy denies
/// nested. Under both backends (the ptrace backend keeps the root too).
#[test]
fn an_exec_after_chroot_is_judged_in_the_new_root() {
    if !require_root("an_exec_after_chroot_is_judged_in_the_new_root") {
        return;
    }
    for (backend, extra) in [("notify", ""), ("ptrace", "execve:\n  backend: ptrace\n")] {
        let srv = TestServer::start(POLICY, extra);
        let jail = TempDir::new("jail");
        let bin = jail.path().join("usr/bin");
        std::fs::create_dir_all(&bin).unwrap();
        std::fs::copy("/bin/true", bin.join("curl")).unwrap();
        std::os::unix::fs::symlink("/usr/bin/curl", bin.join("true")).unwrap();
        let script = format!(
            "/bin/true && /usr/sbin/chroot {} /usr/bin/true",
            jail.path().display()
        );
        let out = run_wrapped(
            &srv.url,
            "jail",
            &["/bin/sh", "-c", &script],
            &WrapOptions::default(),
        );
        // chroot(8): 126 when the command is found but cannot be run.
        assert_eq!(out.status.code(), Some(126), "{backend}: {}", stderr(&out));
        let ev = srv.exec_events("jail");
        assert_eq!(execs_of(&ev, "chroot").len(), 1, "{backend}: {ev:#?}");
        let jailed: Vec<&Value> = ev
            .iter()
            .filter(|e| e["filename"] == "/usr/bin/true")
            .collect();
        assert_eq!(jailed.len(), 1, "{backend}: {ev:#?}");
        assert_eq!(jailed[0]["resolved"], "/usr/bin/curl", "{backend}: {ev:#?}");
        assert_eq!(jailed[0]["rule"], "deny-nested-curl", "{backend}: {ev:#?}");
        assert_eq!(jailed[0]["effective_action"], "deny", "{backend}: {ev:#?}");
    }
}

#[test]
fn an_allowed_execs_event_is_in_the_file_before_the_trees_next_exec_runs() {
    // Issue 63: under `audit.on_failure: continue` (the default) an allowed
    // exec's event is written right after its answer, on the tree's thread,
    // before that thread reads the tree's next notification. So the program
    // an exec'd `env` execs at once finds env's event in the file already.
    if !require_root("an_allowed_execs_event_is_in_the_file_before_the_trees_next_exec_runs") {
        return;
    }
    let srv = TestServer::start(POLICY, "");
    let log = srv.dir.path().join("audit.jsonl").display().to_string();
    for i in 0..20 {
        let mark = format!("AGENTSH_ORDER=mark-{i}-");
        let out = run_wrapped(
            &srv.url,
            "s-order",
            &["/usr/bin/env", &mark, "/bin/grep", "-c", "-F", &mark, &log],
            &WrapOptions::default(),
        );
        let found = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && found.trim().parse::<u32>().is_ok_and(|n| n >= 1),
            "round {i}: env's event was not in the file when grep ran: {found} {}",
            stderr(&out)
        );
    }
    let ev = srv.exec_events("s-order");
    assert_eq!(execs_of(&ev, "env").len(), 20, "{ev:#?}");
    assert_eq!(execs_of(&ev, "grep").len(), 20, "{ev:#?}");
}
