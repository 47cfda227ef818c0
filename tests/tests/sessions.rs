//! Sessions per task (issue 26): two sessions in one container, each with
//! its own policy, workspace and environment rules, chosen by the SDK with
//! `AGENTSH_SESSION` in the first shell's environment and fixed for the
//! tree's life; made at run time by `agentsh session create` and usable at
//! once; ended (new shells refused, 126) and deleted with force (its trees
//! killed). Real kernel, the SDK-style daemon not a child of the server.

// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

use agentsh_tests::sandbox::Sandbox;
use agentsh_tests::sdk::{Finished, Spawn};
use agentsh_tests::server::{bin, require_root};
use std::process::Command;
use std::time::{Duration, Instant};

/// The cookbook's recipe (`docs/sdk-cookbook.md`, "One session per
/// task"): task-42 is agent-strict in its own workspace, without tokens,
/// with an index URL of its own; its workspace moved under the test's
/// scratch `/srv`. `default` allows everything (no file rules).
fn sessions_config() -> String {
    let r = agentsh_tests::recipes::recipe("sessions-config");
    assert!(r.contains("workspace: /workspace/task-42"), "{r}");
    r.replace("/workspace/", "/srv/")
}

fn in_session(id: &str, script: &str) -> Spawn {
    Spawn::argv(&["/bin/sh", "-c", script]).env("AGENTSH_SESSION", id)
}

fn agentsh(s: &Sandbox, args: &[&str]) -> std::process::Output {
    let mut c = Command::new(bin("agentsh"));
    c.args(args).args(["--server", &s.srv.url]);
    c.output().unwrap()
}

fn text(o: &std::process::Output) -> String {
    format!(
        "status {:?}\nstdout: {}\nstderr: {}",
        o.status.code(),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// Waits until session `id` has `n` live trees (the API's view).
fn wait_trees(s: &Sandbox, id: &str, n: usize) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let v = s.srv.get_json(&format!("/api/v1/sessions/{id}"));
        if v["trees"].as_u64() == Some(n as u64) {
            return;
        }
        assert!(Instant::now() < deadline, "{id} never had {n} trees: {v}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn refused(f: &Finished, what: &str) {
    assert_eq!(f.code, Some(126), "{what}: {f:?}");
}

#[test]
fn two_sessions_in_one_container_each_under_its_own_rules() {
    if !require_root("two_sessions_in_one_container_each_under_its_own_rules") {
        return;
    }
    let config = sessions_config();
    let mut s = Sandbox::with_dirs("default: allow\n", None, &config, &["/srv/task-42"]);

    // The policy: curl runs under default, is refused under task-42.
    let f = s.sh("curl --version >/dev/null && echo ran");
    assert_eq!(f.stdout, "ran\n", "default allows curl: {f:?}");
    let f = s.spawn(&in_session("task-42", "curl --version"));
    refused(&f, "agent-strict refuses curl in task-42");

    // The environment: task-42's env rules (and the secret never printed).
    let f = s.spawn(
        &in_session("task-42", "echo \"[$SECRET_TOKEN][$PIP_INDEX_URL]\"")
            .env("SECRET_TOKEN", "sk-live-123")
            .env("PIP_INDEX_URL", "https://evil.example/simple"),
    );
    assert_eq!(f.stdout, "[][https://pypi.internal/simple]\n", "{f:?}");
    let f = s.spawn(&in_session("default", "echo \"[$SECRET_TOKEN]\"").env("SECRET_TOKEN", "sk"));
    assert_eq!(f.stdout, "[sk]\n", "default has no env rules: {f:?}");

    // Fixed for the tree's life: a nested shell naming another session is
    // still task-42's (curl refused), with or without `env`.
    let f = s.spawn(&in_session(
        "task-42",
        "AGENTSH_SESSION=default sh -c 'curl --version' || echo \"nested refused $?\"",
    ));
    assert!(f.stdout.contains("nested refused 126"), "{f:?}");

    // The workspace: task-42 writes its own, not default's.
    let f = s.spawn(&in_session(
        "task-42",
        "echo x > /srv/task-42/mine && echo own; echo x > /srv/ws/theirs || echo refused",
    ));
    assert_eq!(f.stdout, "own\nrefused\n", "{f:?}");
    assert!(!s.host_path("/srv/ws/theirs").exists());
    let f = s.sh("echo x > /srv/ws/theirs && echo ok");
    assert_eq!(f.stdout, "ok\n", "default writes its workspace: {f:?}");

    // Events carry their session: task-42's curl is in its events only.
    let curl_in = |session: &str| {
        s.srv
            .events(session)
            .into_iter()
            .filter(|e| {
                e["type"] == "execve" && e["filename"].as_str().is_some_and(|f| f.contains("curl"))
            })
            .map(|e| e["decision"].as_str().unwrap_or("").to_string())
            .collect::<Vec<_>>()
    };
    let (mine, theirs) = (curl_in("task-42"), curl_in("default"));
    assert!(
        mine.iter().any(|d| d == "deny") && !mine.iter().any(|d| d == "allow"),
        "task-42's curl events: {mine:?}"
    );
    assert!(
        theirs.iter().any(|d| d == "allow") && !theirs.iter().any(|d| d == "deny"),
        "default's curl events: {theirs:?}"
    );
    let o = agentsh(&s, &["events", "--session", "task-42"]);
    assert!(o.status.success(), "{}", text(&o));
    let lines: Vec<serde_json::Value> = String::from_utf8_lossy(&o.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert!(!lines.is_empty(), "{}", text(&o));
    assert!(
        lines.iter().all(|e| e["session_id"] == "task-42"),
        "{}",
        text(&o)
    );

    // A session an SDK names that does not exist, or is not an id: 126,
    // never a fall back to default.
    let f = s.spawn(&in_session("task-99", "echo ran"));
    refused(&f, "an unknown session");
    assert!(
        f.stderr.contains("task-99") && f.stderr.contains("does-not-exist-or-has-ended"),
        "{f:?}"
    );
    let f = s.spawn(&in_session("../x", "echo ran"));
    refused(&f, "not a session id");
    assert!(f.stdout.is_empty(), "{f:?}");

    // Made at run time by the CLI, usable at once.
    std::fs::create_dir_all(s.host_path("/srv/task-43")).unwrap();
    let o = agentsh(
        &s,
        &[
            "session",
            "create",
            "task-43",
            "--policy",
            "agent-strict",
            "--workspace",
            "/srv/task-43",
            "--env-deny",
            "*_KEY",
        ],
    );
    assert!(o.status.success(), "{}", text(&o));
    let f = s.spawn(
        &in_session(
            "task-43",
            "echo \"[$AWS_KEY]\" > /srv/task-43/out && cat /srv/task-43/out; curl --version",
        )
        .env("AWS_KEY", "secret"),
    );
    assert_eq!(f.stdout, "[]\n", "{f:?}");
    refused(&f, "task-43 is agent-strict");
    let o = agentsh(&s, &["session", "list"]);
    let listed = String::from_utf8_lossy(&o.stdout).to_string();
    assert!(
        listed.contains("task-43\tpolicy=agent-strict\tworkspace=/srv/task-43"),
        "{}",
        text(&o)
    );

    // Bad input: exit 2, named, nothing made.
    for (args, named) in [
        (vec!["session", "create", "a b"], "a b"),
        (
            vec!["session", "create", "t1", "--workspace", "/srv/missing"],
            "/srv/missing",
        ),
        (
            vec![
                "session",
                "create",
                "t2",
                "--env-inject",
                "LD_PRELOAD=/x.so",
            ],
            "LD_PRELOAD",
        ),
        (vec!["session", "create", "t3", "--env-deny", "A-B"], "A-B"),
        (
            vec!["session", "create", "t4", "--policy", "no-such-policy"],
            "no-such-policy",
        ),
    ] {
        let o = agentsh(&s, &args);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", text(&o));
        assert!(
            String::from_utf8_lossy(&o.stderr).contains(named),
            "{args:?}: {}",
            text(&o)
        );
    }
    let (status, _) = s.srv.call("GET", "/api/v1/sessions/t1", None);
    assert_eq!(status, 404, "a refused session was made");

    // End: new shells refused (126, the hint), live trees reported; then
    // force kills them.
    // A tree with eight children running when it is killed: each of
    // them dies too (killing the shell first would reparent them away).
    // And one that left the tree's lineage (a double fork) and keeps
    // trying to exec: it dies at its next supervised call.
    let f = s.spawn(&in_session(
        "task-43",
        "(python3 -c 'import os, time
open(\"/srv/task-43/escapee\", \"w\").write(str(os.getpid()))
while True:
    time.sleep(0.05)
    try:
        os.execv(\"/nonexistent/x\", [\"x\"])
    except OSError:
        pass
' >/dev/null 2>&1 </dev/null &); echo started",
    ));
    assert_eq!(f.stdout, "started\n", "{f:?}");
    let escapee: u32 = loop {
        if let Ok(t) = std::fs::read_to_string(s.host_path("/srv/task-43/escapee")) {
            if let Ok(p) = t.trim().parse() {
                break p;
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let long = s.sup.spawn(&in_session(
        "task-43",
        "for i in 1 2 3 4 5 6 7 8; do sleep 1000 & done; wait; echo survived",
    ));
    wait_trees(&s, "task-43", 1);
    let deadline = Instant::now() + Duration::from_secs(60);
    while s
        .srv
        .events("task-43")
        .iter()
        .filter(|e| e["type"] == "execve" && e["argv"][0] == "sleep")
        .count()
        < 8
    {
        assert!(Instant::now() < deadline, "the eight sleeps never started");
        std::thread::sleep(Duration::from_millis(20));
    }
    let o = agentsh(&s, &["session", "end", "task-43"]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stdout).contains("2 live tree(s) run on"),
        "{}",
        text(&o)
    );
    let f = s.spawn(&in_session("task-43", "echo ran"));
    refused(&f, "an ended session");
    assert!(f.stderr.contains("has ended"), "{f:?}");
    let (status, v) = s.srv.call("DELETE", "/api/v1/sessions/task-43", None);
    assert_eq!(status, 409, "live trees without force: {v}");
    let o = agentsh(&s, &["session", "end", "task-43", "--force"]);
    assert!(o.status.success(), "{}", text(&o));
    let f = s.sup.wait(long, Duration::from_secs(60));
    assert!(
        !f.stdout.contains("survived") && f.code != Some(0),
        "the tree was not killed: {f:?}"
    );
    let deadline = Instant::now() + Duration::from_secs(60);
    while std::path::Path::new(&format!("/proc/{escapee}/stat")).exists()
        && !std::fs::read_to_string(format!("/proc/{escapee}/stat"))
            .unwrap_or_default()
            .contains(") Z ")
    {
        assert!(
            Instant::now() < deadline,
            "the process that left the tree's lineage still runs"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let events = s.srv.events("task-43");
    let deleted = events
        .iter()
        .find(|e| e["type"] == "session" && e["action"] == "deleted")
        .unwrap_or_else(|| panic!("no deleted event: {events:?}"));
    assert!(deleted["killed"].as_u64().unwrap() >= 9, "{deleted}");
    let (status, _) = s.srv.call("GET", "/api/v1/sessions/task-43", None);
    assert_eq!(status, 404, "deleted");

    // task-42 ends too; default cannot.
    let o = agentsh(&s, &["session", "end", "task-42"]);
    assert!(o.status.success(), "{}", text(&o));
    refused(
        &s.spawn(&in_session("task-42", "echo ran")),
        "task-42 ended",
    );
    let o = agentsh(&s, &["session", "end", "default"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert_eq!(s.sh("echo still").stdout, "still\n");
}
