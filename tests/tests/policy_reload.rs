//! End-to-end: a policy reload (`agentsh policy reload`, SIGHUP) judges a
//! tree that is already running by the policy read again: its next exec
//! gets the new rules, under user-notify and under the ptrace backend; a
//! policy that does not compile changes nothing and says why; each reload
//! is an event with the policy's hash; what the kernel fixed at the tree's
//! start (its filter) is named per tree.

// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

use agentsh_tests::relay::{spawn_wrapped, WrapOptions, Wrapped};
use agentsh_tests::server::{bin, require_root, TempDir, TestServer};
use serde_json::Value;
use std::io::{BufRead, BufReader, Read, Write};
use std::process::Command;
use std::time::{Duration, Instant};

const ALLOW: &str = "name: reload-test\ndefault: allow\n";

const DENY_ID: &str = r#"name: reload-test
default: allow
command_rules:
  - name: no-id-after-reload
    commands: [id]
    decision: deny
    message: id is refused since the reload
"#;

const PTRACE: &str = "execve:\n  backend: ptrace\n";

fn sha256(text: &str) -> String {
    let out = Command::new("sha256sum")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .and_then(|mut c| {
            c.stdin.take().unwrap().write_all(text.as_bytes())?;
            c.wait_with_output()
        })
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .next()
        .unwrap()
        .to_string()
}

/// A tree whose shell runs `first`, says `first-ok`, then waits on a fifo
/// before running `then` and printing its status.
struct Waiting {
    w: Wrapped,
    fifo: std::path::PathBuf,
    _dir: TempDir,
    out: BufReader<std::process::ChildStdout>,
}

fn start_waiting_tree(srv: &TestServer, session: &str, first: &str, then: &str) -> Waiting {
    let dir = TempDir::new("reload-fifo");
    let fifo = dir.path().join("go");
    let st = Command::new("mkfifo").arg(&fifo).status().unwrap();
    assert!(st.success());
    let script = format!(
        "{first} >/dev/null && echo first-ok; read x < {}; {then} >/dev/null; echo rc=$?",
        fifo.display()
    );
    let mut w = spawn_wrapped(
        &srv.url,
        session,
        &["/bin/sh", "-c", &script],
        &WrapOptions::default(),
    );
    let mut out = BufReader::new(w.child.stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    assert_eq!(line.trim(), "first-ok", "server log:\n{}", srv.log());
    Waiting {
        w,
        fifo,
        _dir: dir,
        out,
    }
}

impl Waiting {
    /// Lets the shell go on; returns the rest of its stdout and its stderr.
    fn release(mut self) -> (String, String) {
        std::fs::OpenOptions::new()
            .write(true)
            .open(&self.fifo)
            .unwrap()
            .write_all(b"go\n")
            .unwrap();
        let mut rest = String::new();
        self.out.read_to_string(&mut rest).unwrap();
        let (_, out) = self.w.wait();
        (rest, String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

fn reload_cli(srv: &TestServer) -> std::process::Output {
    Command::new(bin("agentsh"))
        .args(["policy", "reload", "--server", &srv.url])
        .output()
        .unwrap()
}

fn policy_file(srv: &TestServer) -> std::path::PathBuf {
    srv.dir.path().join("policy.yaml")
}

fn reload_events(srv: &TestServer) -> Vec<Value> {
    srv.jsonl_events()
        .into_iter()
        .filter(|e| e["type"] == "policy_reload")
        .collect()
}

fn id_events(srv: &TestServer, session: &str) -> Vec<Value> {
    srv.exec_events(session)
        .into_iter()
        .filter(|e| e["filename"].as_str().is_some_and(|f| f.ends_with("/id")))
        .collect()
}

fn a_running_tree_is_judged_by_the_reloaded_policy(extra: &str, session: &str) {
    let srv = TestServer::start(ALLOW, extra);
    let tree = start_waiting_tree(&srv, session, "id", "id");
    std::fs::write(policy_file(&srv), DENY_ID).unwrap();
    let out = reload_cli(&srv);
    let said = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "reload failed: {said}{}\nserver log:\n{}",
        String::from_utf8_lossy(&out.stderr),
        srv.log()
    );
    assert!(
        said.contains(&format!("session {session}: policy reload-test reloaded")),
        "{said}"
    );
    let (rest, err) = tree.release();
    assert!(
        rest.contains("rc=126"),
        "the tree's next exec of id ran: {rest}\n{err}\nserver log:\n{}",
        srv.log()
    );
    // (Each PATH directory the shell tries is an event of its own.)
    let ids = id_events(&srv, session);
    let first = ids.first().unwrap();
    let last = ids.last().unwrap();
    assert_eq!(first["decision"], "allow", "{ids:#?}");
    assert_eq!(last["decision"], "deny", "{ids:#?}");
    assert_eq!(last["rule"], "no-id-after-reload");
    // The reload is an event of each session: who, the policy, its hash.
    let events = reload_events(&srv);
    let ev = events
        .iter()
        .find(|e| e["session_id"] == session)
        .unwrap_or_else(|| panic!("no policy_reload event for {session}: {events:#?}"));
    assert_eq!(ev["by"], "api");
    assert_eq!(ev["hash"], sha256(DENY_ID));
    assert_eq!(ev["previous_hash"], sha256(ALLOW));
    assert_eq!(ev["trees"].as_array().map(Vec::len), Some(1), "{ev}");
}

#[test]
fn a_running_tree_is_judged_by_the_reloaded_policy_under_notify() {
    if !require_root("a_running_tree_is_judged_by_the_reloaded_policy_under_notify") {
        return;
    }
    a_running_tree_is_judged_by_the_reloaded_policy("", "reload-n");
}

#[test]
fn a_running_tree_is_judged_by_the_reloaded_policy_under_ptrace() {
    if !require_root("a_running_tree_is_judged_by_the_reloaded_policy_under_ptrace") {
        return;
    }
    a_running_tree_is_judged_by_the_reloaded_policy(PTRACE, "reload-p");
}

#[test]
fn a_policy_that_does_not_compile_changes_nothing_and_says_why() {
    if !require_root("a_policy_that_does_not_compile_changes_nothing_and_says_why") {
        return;
    }
    let srv = TestServer::start(DENY_ID, "");
    let tree = start_waiting_tree(&srv, "reload-bad", "true", "id");
    // A typo'd decision: the whole reload is refused.
    std::fs::write(
        policy_file(&srv),
        DENY_ID.replace("decision: deny", "decision: dney"),
    )
    .unwrap();
    let out = reload_cli(&srv);
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("policy reload refused, nothing changed") && err.contains("dney"),
        "{err}"
    );
    assert!(reload_events(&srv).is_empty());
    // The old rules still hold: id is still refused.
    let (rest, _) = tree.release();
    assert!(rest.contains("rc=126"), "{rest}");
}

#[test]
fn sighup_reloads_and_names_what_the_kernel_keeps_per_tree() {
    if !require_root("sighup_reloads_and_names_what_the_kernel_keeps_per_tree") {
        return;
    }
    let srv = TestServer::start(ALLOW, "");
    let tree = start_waiting_tree(&srv, "reload-hup", "id", "id");
    // Blocking a syscall changes the filter: the running tree keeps its own.
    std::fs::write(
        policy_file(&srv),
        format!("{DENY_ID}syscalls:\n  block: [acct]\n"),
    )
    .unwrap();
    // SAFETY: kill takes integers.
    assert_eq!(unsafe { libc::kill(srv.pid() as i32, libc::SIGHUP) }, 0);
    let deadline = Instant::now() + Duration::from_secs(120);
    let ev = loop {
        if let Some(e) = reload_events(&srv)
            .into_iter()
            .find(|e| e["session_id"] == "reload-hup")
        {
            break e;
        }
        assert!(
            Instant::now() < deadline,
            "no reload after SIGHUP:\n{}",
            srv.log()
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(ev["by"], "sighup");
    assert_eq!(ev["by_pid"], std::process::id());
    let trees = ev["trees"].as_array().unwrap();
    assert_eq!(trees.len(), 1, "{ev}");
    assert_eq!(
        trees[0]["kept_from_start"],
        serde_json::json!(["filter"]),
        "{ev}"
    );
    assert!(
        srv.log().contains("keeps its start's filter"),
        "{}",
        srv.log()
    );
    let (rest, _) = tree.release();
    assert!(rest.contains("rc=126"), "{rest}");
}

fn egress_policy(decision: &str) -> String {
    format!(
        "name: reload-egress\ndefault: allow\negress:\n  default: deny\n  rules:\n    - name: \
         loopback-{decision}\n      cidrs: [127.0.0.1/32]\n      protocol: tcp\n      decision: \
         {decision}\n"
    )
}

#[test]
fn a_destination_judged_before_a_reload_is_judged_again_after_it() {
    if !require_root("a_destination_judged_before_a_reload_is_judged_again_after_it") {
        return;
    }
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let srv = TestServer::start(&egress_policy("allow"), "");
    let connect = format!(
        "python3 -c 'import socket; socket.create_connection((\"127.0.0.1\", {port}), 10)'"
    );
    let tree = start_waiting_tree(&srv, "reload-egress", &connect, &connect);
    std::fs::write(policy_file(&srv), egress_policy("deny")).unwrap();
    let out = reload_cli(&srv);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (rest, err) = tree.release();
    assert!(
        rest.contains("rc=1"),
        "the tree's second connect was not refused: {rest}\n{err}\nserver log:\n{}",
        srv.log()
    );
    let connects: Vec<Value> = srv
        .events("reload-egress")
        .into_iter()
        .filter(|e| e["type"] == "connect" && e["port"] == port)
        .collect();
    assert_eq!(
        connects.first().map(|e| e["rule"].clone()),
        Some("loopback-allow".into()),
        "{connects:#?}"
    );
    assert_eq!(
        connects.last().map(|e| e["rule"].clone()),
        Some("loopback-deny".into()),
        "{connects:#?}"
    );
    drop(listener);
}

#[test]
fn a_session_the_config_adds_is_made_and_a_changed_key_is_named() {
    if !require_root("a_session_the_config_adds_is_made_and_a_changed_key_is_named") {
        return;
    }
    let srv = TestServer::start(ALLOW, "");
    let config = srv.dir.path().join("config.yaml");
    let mut text = std::fs::read_to_string(&config).unwrap();
    text.push_str(&format!(
        "sessions:\n  late:\n    policy: {}\nexecve:\n  approval_timeout: 7s\n",
        policy_file(&srv).display()
    ));
    std::fs::write(&config, text).unwrap();
    let out = reload_cli(&srv);
    let said = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{said}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(said.contains("late: made from the config"), "{said}");
    assert!(
        said.contains("execve: changed in the config: needs a restart"),
        "{said}"
    );
    // Nothing else changed: no event, the default session reads unchanged.
    assert!(
        said.contains("session default: policy reload-test unchanged"),
        "{said}"
    );
    assert!(reload_events(&srv).is_empty());
    let sessions = srv.get_json("/api/v1/sessions");
    assert!(
        sessions
            .as_array()
            .unwrap()
            .iter()
            .any(|s| s["id"] == "late"),
        "{sessions}"
    );
    // A shell of the new session is supervised under its policy.
    let w = spawn_wrapped(
        &srv.url,
        "late",
        &["/bin/sh", "-c", "id >/dev/null; echo rc=$?"],
        &WrapOptions::default(),
    );
    let (_, out) = w.wait();
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("rc=0"),
        "{out:?}"
    );
    assert!(!id_events(&srv, "late").is_empty());
}
