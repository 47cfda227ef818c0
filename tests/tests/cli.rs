//! End-to-end: the admin CLI's read-only commands (`policy check`, `events`).

// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

use agentsh_tests::relay::{run_wrapped, WrapOptions};
use agentsh_tests::server::{bin, require_root, with_private_marker_dir, TempDir, TestServer};
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

/// A reader that goes away (`agentsh ... | head -1`) ends the output: the
/// CLI exits 0 and says nothing, where it used to panic (exit 134). The
/// pipe's read end is closed before the CLI writes, so its first write
/// meets EPIPE whatever the machine's speed.
#[test]
fn the_cli_exits_quietly_when_its_reader_goes_away() {
    for args in [
        &["completions", "fish"][..],
        &["policy", "check", "etc/agentsh/policies/agent-default.yaml"],
        &["detect"],
    ] {
        let mut fds = [0; 2];
        // SAFETY: pipe2 fills the two fds.
        assert_eq!(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
        // SAFETY: both fds are fresh and ours.
        let (read, write) = unsafe {
            use std::os::fd::FromRawFd;
            (
                std::os::fd::OwnedFd::from_raw_fd(fds[0]),
                std::os::fd::OwnedFd::from_raw_fd(fds[1]),
            )
        };
        drop(read);
        let out = Command::new(bin("agentsh"))
            .args(args)
            .current_dir(repo_root())
            .stdout(Stdio::from(write))
            .stderr(Stdio::piped())
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success() && !stderr.contains("panicked") && !stderr.contains("Broken pipe"),
            "agentsh {args:?}: {:?} {stderr}",
            out.status
        );
    }
}

/// `policy check` fails what the server refuses at start: a blocklist name
/// libseccomp does not know (the server compiles the filter at start; check
/// used to say OK), or one the filter needs for itself.
#[test]
fn policy_check_refuses_what_the_server_refuses_at_start() {
    let dir = TempDir::new("check-start");
    for (name, yaml, says) in [
        (
            "unknown.yaml",
            "default: allow\nsyscalls:\n  block: [not_a_syscall]\n",
            "not_a_syscall",
        ),
        (
            "reserved.yaml",
            "default: allow\nsyscalls:\n  block: [execve]\n",
            "execve",
        ),
    ] {
        let p = dir.path().join(name);
        std::fs::write(&p, yaml).unwrap();
        let out = Command::new(bin("agentsh"))
            .args(["policy", "check"])
            .arg(&p)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{name}: {stderr}");
        assert!(stderr.contains(says), "{name}: {stderr}");
    }
}

/// The server runs only a config nobody else could have changed (as the
/// shim trusts only such a shim.conf): a group- or other-writable file is
/// refused at start with the fix; the same file made 0644 is accepted.
#[test]
fn the_server_refuses_a_config_others_could_write() {
    if !require_root("the_server_refuses_a_config_others_could_write") {
        return;
    }
    use std::os::unix::fs::PermissionsExt;
    let files = agentsh_tests::server::ServerFiles::write(
        std::path::Path::new(agentsh_tests::sandbox::SERVER_BASE),
        Some("name: p\ndefault: allow\n"),
        "",
    );
    std::fs::set_permissions(&files.config, std::fs::Permissions::from_mode(0o666)).unwrap();
    let out = with_private_marker_dir(bin("agentsh"))
        .args(["server", "--config"])
        .arg(&files.config)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains("has mode 666") && stderr.contains("chmod go-w"),
        "{stderr}"
    );
    std::fs::set_permissions(&files.config, std::fs::Permissions::from_mode(0o644)).unwrap();
    let srv = TestServer::start_files(files, with_private_marker_dir);
    assert!(srv
        .try_call("GET", "/healthz", None)
        .is_ok_and(|(s, _)| s == 200));
}

/// `agentsh events query` searches the log files as written (the rotated
/// copy first), no server needed: by session, decision, rule and age,
/// filters combined, as JSON or a table.
/// A refused exec a shell tries again at the next `PATH` entry is one
/// attempt: the table shows it once (issue 45: "each refused command
/// appears twice"), the JSON keeps both, the retry marked.
#[test]
fn the_events_table_shows_a_refused_command_once() {
    let dir = TempDir::new("retry-table");
    let log = dir.path().join("audit.jsonl");
    let ev = |id: u64, file: &str, retry: bool| {
        format!(
            "{{\"id\":{id},\"timestamp\":\"2026-11-28T06:00:00.000000Z\",\"session_id\":\"a\",\
             \"type\":\"execve\",\"pid\":7,\"depth\":1,\"filename\":\"{file}\",\"argv\":[\"su\"],\
             \"decision\":\"deny\",\"rule\":\"deny-privilege-escalation\",\
             \"effective_action\":\"deny\",\"retry\":{retry}}}\n"
        )
    };
    std::fs::write(&log, ev(1, "/usr/bin/su", false) + &ev(2, "/bin/su", true)).unwrap();
    let run = |json: bool| {
        let mut c = Command::new(bin("agentsh"));
        c.args(["events", "query", "--file"]).arg(&log);
        if json {
            c.arg("--json");
        }
        let out = c.output().unwrap();
        assert!(out.status.success(), "{out:?}");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let table = run(false);
    assert_eq!(
        table.matches("deny-privilege-escalation").count(),
        1,
        "{table}"
    );
    assert!(table.contains("[/usr/bin/su]"), "{table}");
    assert_eq!(run(true).lines().count(), 2);
}

#[test]
fn events_query_filters_the_log_and_its_rotated_copies() {
    let dir = TempDir::new("query");
    let log = dir.path().join("audit.jsonl");
    let ev = |id: u64, ts: &str, session: &str, decision: &str, rule: &str| {
        format!(
            "{{\"id\":{id},\"timestamp\":\"{ts}\",\"session_id\":\"{session}\",\"type\":\"execve\",\
             \"pid\":1,\"depth\":1,\"filename\":\"/usr/bin/x\",\"argv\":[\"x\"],\"decision\":\"{decision}\",\
             \"rule\":\"{rule}\",\"effective_action\":\"{decision}\"}}\n"
        )
    };
    let now = agentsh::audit::rfc3339_now();
    std::fs::write(
        dir.path().join("audit.jsonl.1"),
        ev(1, "2020-01-01T00:00:00.000000Z", "a", "deny", "old-rule"),
    )
    .unwrap();
    std::fs::write(
        &log,
        ev(2, &now, "a", "deny", "deny-curl")
            + &ev(3, &now, "b", "allow", "default")
            + "not json\n",
    )
    .unwrap();
    let q = |args: &[&str]| {
        let out = Command::new(bin("agentsh"))
            .args(["events", "query", "--json", "--file"])
            .arg(&log)
            .args(args)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(|l| {
                serde_json::from_str::<serde_json::Value>(l).unwrap()["id"]
                    .as_u64()
                    .unwrap()
            })
            .collect::<Vec<u64>>()
    };
    assert_eq!(q(&[]), [1, 2, 3], "oldest (rotated) first");
    assert_eq!(q(&["--decision", "deny"]), [1, 2]);
    assert_eq!(q(&["--session", "a", "--since", "1h"]), [2]);
    assert_eq!(q(&["--rule", "default"]), [3]);
    assert_eq!(
        q(&["--session", "b", "--decision", "deny"]),
        Vec::<u64>::new()
    );
    let bad = Command::new(bin("agentsh"))
        .args(["events", "query", "--since", "3w", "--file"])
        .arg(&log)
        .output()
        .unwrap();
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("the unit is s, m, h or d"));
}
