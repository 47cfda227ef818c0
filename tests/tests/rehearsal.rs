//! The server's rehearsal shell (issue 20: the first shell after `ready`
//! costs what later ones cost): before `/healthz` says ready, the server
//! runs one `sh -c :` the whole way a sandbox's shell goes, and writes none
//! of it to the audit. The attacks: a shell naming the rehearsal's session
//! to run unaudited (from the SDK's side, and nested in a tree), an
//! operator or config making that session, and a policy that would hold
//! the rehearsal's exec for an operator (the server must not hang or ask).

// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

use agentsh_tests::sandbox::Sandbox;
use agentsh_tests::sdk::Spawn;
use agentsh_tests::server::{bin, require_root, TestServer};
use serde_json::Value;

const SESSION: &str = agentsh_proto::shimconf::REHEARSAL_SESSION;
const ALLOW: &str = "default: allow\n";

/// Every event of the audit file, all sessions.
fn audit_file(s: &Sandbox) -> Vec<Value> {
    std::fs::read_to_string(s.srv.dir.path().join("audit.jsonl"))
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[test]
fn the_server_rehearses_a_shell_before_ready_and_audits_none_of_it() {
    if !require_root("rehearsal") {
        return;
    }
    let mut s = Sandbox::new(ALLOW, None);
    let log = s.srv.log();
    let ran = log
        .find("rehearsal shell ran")
        .unwrap_or_else(|| panic!("no rehearsal in the server's log:\n{log}"));
    let ready = log.find("agentsh server ready").expect("ready line");
    assert!(ran < ready, "rehearsed after saying ready:\n{log}");
    // Its tree was supervised for real (the supervisor's lines name it).
    assert!(
        log.contains(&format!("supervising tree session={SESSION}")),
        "{log}"
    );
    let f = s.sh("echo hello");
    assert_eq!(f.stdout.trim(), "hello", "{f:?}");
    let events = audit_file(&s);
    assert!(
        events.iter().any(|e| e["type"] == "execve"),
        "the shell's events are in the audit: {events:?}"
    );
    assert!(
        events.iter().all(|e| e["session_id"] != SESSION),
        "a rehearsal event was written: {events:?}"
    );
    // No id used up: the file's ids follow one another with no gap.
    let ids: Vec<u64> = events.iter().map(|e| e["id"].as_u64().unwrap()).collect();
    assert!(
        ids.windows(2).all(|w| w[1] == w[0] + 1),
        "audit ids with a gap: {ids:?}"
    );
}

#[test]
fn no_shell_can_run_in_the_rehearsal_session() {
    if !require_root("rehearsal") {
        return;
    }
    let mut s = Sandbox::new(ALLOW, None);
    // From the SDK's side: refused, the command never ran.
    let f = s.spawn(
        &Spawn::argv(&["/bin/sh", "-c", "touch /srv/ws/ran; echo ran"])
            .env("AGENTSH_SESSION", SESSION),
    );
    assert_eq!(f.code, Some(126), "{f:?}");
    assert!(f.stdout.is_empty(), "{f:?}");
    assert!(f.stderr.contains("does not exist"), "{f:?}");
    assert!(!s.host_path("/srv/ws/ran").exists());
    // Nested in a tree: the tree's session stays, and audits it.
    let f = s.sh(&format!(
        "AGENTSH_SESSION={SESSION} sh -c 'echo nested-$AGENTSH_SESSION'"
    ));
    assert_eq!(f.stdout.trim(), format!("nested-{SESSION}"), "{f:?}");
    let nested = s
        .events()
        .into_iter()
        .filter(|e| {
            e["type"] == "execve"
                && e["argv"][2]
                    .as_str()
                    .is_some_and(|a| a.starts_with("echo nested"))
        })
        .count();
    assert!(nested >= 1, "the nested shell is audited in default");
    // Nobody makes the session: not the API, not the CLI.
    let (status, body) = s.srv.call(
        "POST",
        "/api/v1/sessions",
        Some(&serde_json::json!({ "id": SESSION })),
    );
    assert_eq!(status, 400, "{body}");
    assert!(
        body["error"].as_str().unwrap().contains("reserved"),
        "{body}"
    );
    let o = std::process::Command::new(bin("agentsh"))
        .args(["session", "create", SESSION, "--server", &s.srv.url])
        .output()
        .unwrap();
    assert_ne!(o.status.code(), Some(0), "{o:?}");
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("reserved"),
        "{o:?}"
    );
    assert!(audit_file(&s).iter().all(|e| e["session_id"] != SESSION));
}

#[test]
fn a_rehearsal_the_policy_would_hold_for_an_operator_is_refused_not_held() {
    if !require_root("rehearsal") {
        return;
    }
    // Every exec waits for an operator: the rehearsal's must not (nothing
    // to approve, no server that hangs before ready).
    let srv = TestServer::start("default: approve\n", "");
    let log = srv.log();
    assert!(
        log.contains("rehearsal shell: exit status 126"),
        "the rehearsal's exec was not refused:\n{log}"
    );
    let pending = srv.get_json("/api/v1/approvals");
    assert_eq!(pending.as_array().map(Vec::len), Some(0), "{pending}");
    assert!(srv.events("default").iter().all(|e| e["type"] != "execve"));
}

#[test]
fn the_rehearsal_runs_under_the_ptrace_backend_too() {
    if !require_root("rehearsal") {
        return;
    }
    // The server waits for the rehearsal's process; a wait that looked at
    // every thread's tracees would take the tracer's stops, and the
    // rehearsal's shell would hang until it is killed.
    let mut s = Sandbox::with_config(ALLOW, None, "execve:\n  backend: ptrace\n");
    let log = s.srv.log();
    assert!(log.contains("rehearsal shell ran"), "{log}");
    assert!(
        log.contains(&format!("supervising tree (ptrace) session={SESSION}")),
        "{log}"
    );
    let f = s.sh("echo hello");
    assert_eq!(f.stdout.trim(), "hello", "{f:?}");
}
