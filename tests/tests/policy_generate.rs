//! Profile, then lock (issue 27): a scripted workload (git, pip from a
//! local wheel, a compiler, a nested curl) recorded under agent-observe;
//! `agentsh policy generate` writes an allow-list of it, never with what
//! its base denies (`su` ran while recorded, and stays denied: issue 41); the same workload under that policy has no other denial, and
//! one new tool is exactly the exec denied; `agentsh policy test` shows
//! that difference before anything is enforced, and on a log of several
//! sessions replays only those that ran under the policy tested. Real
//! kernel, the SDK-style daemon not a child of the server.

// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

use agentsh_tests::sandbox::{Sandbox, AGENT_OBSERVE};
use agentsh_tests::server::{bin, require_root, TempDir};
use std::process::Command;

/// The workload, as an SDK would send it (`sh -c`), in the workspace.
const WORKLOAD: &str = "set -e; cd /srv/ws
git init -q repo
echo hello > repo/README
git -C repo add README
git -C repo -c user.email=a@b -c user.name=a commit -qm one
/usr/bin/python3 -m pip install -q --no-index --no-deps --no-cache-dir \
  --disable-pip-version-check --target /srv/ws/site /srv/ws/localpkg-1.0-py3-none-any.whl
PYTHONPATH=/srv/ws/site /usr/bin/python3 -c 'import localpkg; print(localpkg.VALUE)'
printf 'int main(void) { return 0; }\\n' > hello.c
cc -c hello.c -o hello.o
sh -c 'curl --version >/dev/null' || echo curl-refused
su -c true root || echo su-refused
echo done";

/// A wheel built by hand (no build backend needed).
const WHEEL: &str = r#"
import sys, zipfile
z = zipfile.ZipFile(sys.argv[1], "w")
z.writestr("localpkg/__init__.py", "VALUE = 42\n")
z.writestr("localpkg-1.0.dist-info/METADATA", "Metadata-Version: 2.1\nName: localpkg\nVersion: 1.0\n")
z.writestr("localpkg-1.0.dist-info/WHEEL", "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
z.writestr("localpkg-1.0.dist-info/RECORD", "localpkg/__init__.py,,\nlocalpkg-1.0.dist-info/METADATA,,\nlocalpkg-1.0.dist-info/WHEEL,,\nlocalpkg-1.0.dist-info/RECORD,,\n")
z.close()
"#;

fn with_wheel(s: &Sandbox) {
    let out = Command::new("/usr/bin/python3")
        .args(["-c", WHEEL])
        .arg(s.host_path("/srv/ws/localpkg-1.0-py3-none-any.whl"))
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
}

fn agentsh(args: &[&str]) -> std::process::Output {
    Command::new(bin("agentsh")).args(args).output().unwrap()
}

fn text(o: &std::process::Output) -> String {
    format!(
        "status {:?}\nstdout: {}\nstderr: {}",
        o.status.code(),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

fn denials(s: &Sandbox) -> Vec<serde_json::Value> {
    s.events()
        .into_iter()
        .filter(|e| e["type"] == "execve" && e["effective_action"] == "deny")
        .collect()
}

#[test]
fn a_recorded_workload_becomes_an_allow_list_that_denies_only_what_is_new() {
    if !require_root("a_recorded_workload_becomes_an_allow_list_that_denies_only_what_is_new") {
        return;
    }
    let out = TempDir::new("policy-generate");
    let generated = out.path().join("generated.yaml");

    // 1. Recorded under agent-observe.
    let mut observe = Sandbox::new(AGENT_OBSERVE, None);
    with_wheel(&observe);
    let f = observe.sh(WORKLOAD);
    assert_eq!(f.stdout, "42\ndone\n", "{f:?}");
    let o = agentsh(&[
        "policy",
        "generate",
        "--from",
        "default",
        "--server",
        &observe.srv.url,
        "-o",
        &generated.to_string_lossy(),
    ]);
    assert!(o.status.success(), "{}", text(&o));
    let yaml = std::fs::read_to_string(&generated).unwrap();
    assert!(
        yaml.contains(
            "su -c true root (depth 1): the base denies it (rule deny-privilege-escalation)"
        ),
        "su ran while recorded and stays denied: {yaml}"
    );
    let o = agentsh(&["policy", "check", &generated.to_string_lossy()]);
    assert!(o.status.success(), "{}", text(&o));

    // The same session, one new tool, as JSON Lines: `policy test` shows
    // exactly that exec denied now (exit 1), before anything is enforced.
    let f = observe.sh("sh -c 'sha256sum /dev/null >/dev/null'; echo ran");
    assert_eq!(f.stdout, "ran\n", "{f:?}");
    let o = agentsh(&[
        "events",
        "--session",
        "default",
        "--server",
        &observe.srv.url,
    ]);
    assert!(o.status.success(), "{}", text(&o));
    let recorded = out.path().join("recorded.jsonl");
    std::fs::write(&recorded, &o.stdout).unwrap();
    let o = agentsh(&[
        "policy",
        "test",
        &generated.to_string_lossy(),
        "--events",
        &recorded.to_string_lossy(),
    ]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let stdout = String::from_utf8_lossy(&o.stdout);
    let denied: Vec<&str> = stdout
        .lines()
        .filter(|l| l.starts_with("DENIED NOW"))
        .collect();
    // The new tool, and su, which the base denies.
    assert_eq!(denied.len(), 2, "{stdout}");
    assert!(
        denied
            .iter()
            .any(|d| d.contains("sha256sum /dev/null") && d.ends_with("-> deny (default)")),
        "{stdout}"
    );
    assert!(
        denied.iter().any(|d| d.contains("su -c true root")),
        "{stdout}"
    );
    // Against agent-observe itself: nothing it allowed is denied.
    let o = agentsh(&[
        "policy",
        "test",
        "agent-observe",
        "--events",
        &recorded.to_string_lossy(),
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    drop(observe);

    // 2. Enforced: the workload runs (curl too: agent-default judges its
    // traffic, not its name); only su is refused.
    let mut locked = Sandbox::new(&yaml, None);
    with_wheel(&locked);
    let f = locked.sh(WORKLOAD);
    assert_eq!(f.stdout, "42\nsu-refused\ndone\n", "{f:?}");
    let first = |s: &Sandbox| -> Vec<String> {
        denials(s)
            .iter()
            .filter(|e| e["retry"] != true)
            .map(|e| e["filename"].as_str().unwrap_or("").to_string())
            .collect()
    };
    let d = first(&locked);
    assert!(d.len() == 1 && d[0].ends_with("/su"), "{d:?}");
    // One new tool: exactly that exec is denied besides.
    let f = locked.sh("sh -c 'sha256sum /dev/null' || echo refused");
    assert_eq!(f.stdout, "refused\n", "{f:?}");
    let d = first(&locked);
    assert!(d.len() == 2 && d[1].ends_with("/sha256sum"), "{d:?}");

    // 3. A log of two sessions, under two policies: `policy test` replays
    // the one that ran under the policy tested (nothing changed: exit 0),
    // names the other, replays it when asked (`--session`), and refuses to
    // guess when none ran under the policy tested.
    let o = agentsh(&[
        "events",
        "--session",
        "default",
        "--server",
        &locked.srv.url,
    ]);
    assert!(o.status.success(), "{}", text(&o));
    let mut both = std::fs::read_to_string(&recorded).unwrap();
    for line in String::from_utf8_lossy(&o.stdout).lines() {
        let mut v: serde_json::Value = serde_json::from_str(line).unwrap();
        v["session_id"] = "locked".into();
        both.push_str(&format!("{v}\n"));
    }
    let both_file = out.path().join("both.jsonl");
    std::fs::write(&both_file, both).unwrap();
    let test = |policy: &str, extra: &[&str]| {
        let mut args = vec!["policy", "test", policy, "--events"];
        let f = both_file.to_string_lossy().into_owned();
        args.push(&f);
        args.extend_from_slice(extra);
        agentsh(&args)
    };
    let g = generated.to_string_lossy().into_owned();
    let o = test(&g, &[]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("default (agent-observe)"),
        "{}",
        text(&o)
    );
    let o = test(&g, &["--session", "default"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let o = test("agent-default", &[]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("--session ID"),
        "{}",
        text(&o)
    );
}

#[test]
fn policy_test_and_generate_refuse_bad_input() {
    let out = TempDir::new("policy-generate-bad");
    let bad = out.path().join("bad.jsonl");
    std::fs::write(&bad, "{\"id\": 1, \"type\": \"nothing\"}\n{not json\n").unwrap();
    let o = agentsh(&[
        "policy",
        "test",
        "agent-strict",
        "--events",
        &bad.to_string_lossy(),
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("bad.jsonl:2: not JSON"),
        "{}",
        text(&o)
    );
    // Lines that are not events are skipped and counted.
    std::fs::write(&bad, "{\"id\": 1, \"type\": \"nothing\"}\n[1]\n").unwrap();
    let o = agentsh(&[
        "policy",
        "test",
        "agent-strict",
        "--events",
        &bad.to_string_lossy(),
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stdout).contains("2 lines that are not events"),
        "{}",
        text(&o)
    );
    // Nothing ran: nothing to allow, nothing written.
    let target = out.path().join("gen.yaml");
    let o = agentsh(&[
        "policy",
        "generate",
        "--from",
        &bad.to_string_lossy(),
        "-o",
        &target.to_string_lossy(),
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(!target.exists());
}
