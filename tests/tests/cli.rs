//! End-to-end: the admin CLI's read-only commands (`policy check`, `events`).

// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

use agentsh_tests::relay::{run_wrapped, WrapOptions};
use agentsh_tests::server::{bin, require_root, TempDir, TestServer};
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

fn repo_root() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace root")
        .to_path_buf()
}

#[test]
fn policy_check_accepts_every_shipped_policy() {
    let dir = repo_root().join("etc/agentsh/policies");
    let mut n = 0;
    for e in std::fs::read_dir(&dir).unwrap() {
        let p = e.unwrap().path();
        let out = Command::new(bin("agentsh"))
            .args(["policy", "check"])
            .arg(&p)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}: {}",
            p.display(),
            String::from_utf8_lossy(&out.stderr)
        );
        n += 1;
    }
    assert!(n >= 3, "expected the three shipped policies, found {n}");
}

#[test]
fn policy_check_names_line_and_column_and_fails() {
    let tmp = TempDir::new("pcheck");
    let f = tmp.path().join("bad.yaml");
    std::fs::write(
        &f,
        "default: deny\ncommand_rules:\n  - name: x\n    commands: [ls]\n    args_patterns: [\"(a\"]\n    decision: deny\n",
    )
    .unwrap();
    let out = Command::new(bin("agentsh"))
        .args(["policy", "check"])
        .arg(&f)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("bad.yaml:5:"), "{err}");
    assert!(err.contains("invalid regex"), "{err}");
}

#[test]
fn events_prints_and_follows_the_audit_trail() {
    if !require_root("events_prints_and_follows_the_audit_trail") {
        return;
    }
    let srv = TestServer::start("default: allow\n", "");
    let mut follow = Command::new(bin("agentsh"))
        .args([
            "events",
            "--follow",
            "--session",
            "ev",
            "--server",
            &srv.url,
        ])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let out = run_wrapped(
        &srv.url,
        "ev",
        &["/bin/sh", "-c", "true; /bin/echo hi"],
        &WrapOptions::default(),
    );
    assert!(out.status.success());
    // --follow delivers the exec of echo as it happens.
    let mut lines = BufReader::new(follow.stdout.take().unwrap()).lines();
    let mut saw_echo = false;
    for _ in 0..20 {
        let Some(Ok(l)) = lines.next() else { break };
        let v: serde_json::Value = serde_json::from_str(&l).expect("one JSON event per line");
        if v["type"] == "execve" && v["argv"] == serde_json::json!(["/bin/echo", "hi"]) {
            saw_echo = true;
            break;
        }
    }
    let _ = follow.kill();
    let _ = follow.wait();
    assert!(saw_echo, "events --follow did not print the echo exec");
    // Without --follow: every event so far, then exit 0; table format too.
    let out = Command::new(bin("agentsh"))
        .args([
            "events",
            "--session",
            "ev",
            "--format",
            "table",
            "--server",
            &srv.url,
        ])
        .output()
        .unwrap();
    assert!(out.status.success());
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(table.lines().next().unwrap().starts_with("ID"), "{table}");
    assert!(table.contains("/bin/echo hi"), "{table}");
}
