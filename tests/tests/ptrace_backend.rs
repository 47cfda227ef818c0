//! End-to-end: the ptrace exec backend (`execve.backend: ptrace`) on the
//! native kernel: the same decisions, depths and audit as user-notify, every
//! exec verified at `PTRACE_EVENT_EXEC`, signals and exit statuses passing
//! through, and the tree dying with the server.

use agentsh_tests::ns::Namespace;
use agentsh_tests::relay::{run_wrapped, WrapOptions};
use agentsh_tests::server::{bin, require_root, TempDir, TestServer};
use serde_json::Value;

const POLICY: &str = r#"
name: e2e-ptrace
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
"#;

const PTRACE: &str = "execve:\n  backend: ptrace\n";

fn fake_bin(dir: &TempDir) -> String {
    let b = dir.path().join("bin");
    std::fs::create_dir_all(&b).unwrap();
    std::fs::copy("/bin/true", b.join("curl")).unwrap();
    b.display().to_string()
}

fn find<'a>(events: &'a [Value], base: &str) -> Vec<&'a Value> {
    events
        .iter()
        .filter(|e| {
            e["filename"]
                .as_str()
                .is_some_and(|f| f.rsplit('/').next() == Some(base))
        })
        .collect()
}

fn stderr(o: &std::process::Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn nested_curl_is_denied_under_ptrace_with_the_same_audit() {
    if !require_root("nested_curl_is_denied_under_ptrace_with_the_same_audit") {
        return;
    }
    let srv = TestServer::start(POLICY, PTRACE);
    let tmp = TempDir::new("pt-curl");
    let fb = fake_bin(&tmp);
    let opts = WrapOptions {
        env: vec![("PATH".into(), format!("{fb}:/usr/bin:/bin"))],
        ..Default::default()
    };
    let out = run_wrapped(
        &srv.url,
        "p1",
        &["/bin/sh", "-c", "ls >/dev/null; echo ok; curl --version"],
        &opts,
    );
    assert_eq!(out.status.code(), Some(126), "stderr: {}", stderr(&out));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "ok\n");
    assert!(
        stderr(&out).contains("Permission denied"),
        "{}",
        stderr(&out)
    );
    let ev = srv.exec_events("p1");
    let sh = find(&ev, "sh");
    assert_eq!(sh.len(), 1, "{ev:#?}");
    assert_eq!(sh[0]["depth"], 0);
    assert_eq!(sh[0]["memory"], "verified");
    let ls = find(&ev, "ls");
    assert_eq!(ls.len(), 1, "{ev:#?}");
    assert_eq!(ls[0]["depth"], 1);
    assert_eq!(ls[0]["effective_action"], "allow");
    let curl = find(&ev, "curl");
    assert!(!curl.is_empty(), "{ev:#?}");
    for c in &curl {
        assert_eq!(c["rule"], "deny-nested-curl", "{c:#}");
        assert_eq!(c["effective_action"], "deny");
        assert_eq!(c["depth"], 1);
    }
    let wi: Vec<Value> = srv
        .events("p1")
        .into_iter()
        .filter(|e| e["type"] == "wrap_init")
        .collect();
    assert_eq!(wi[0]["backend"], "ptrace", "{wi:#?}");
    assert_eq!(wi[0]["seccomp"]["backend"], "ptrace", "{wi:#?}");
}

#[test]
fn the_sdk_scenarios_hold_under_the_ptrace_backend_on_this_kernel() {
    if !require_root("the_sdk_scenarios_hold_under_the_ptrace_backend_on_this_kernel") {
        return;
    }
    let before = agentsh_tests::ns::host_sh_fingerprint();
    // The scenario runs the server on its default paths: those are overlaid.
    let ns = Namespace::with_overlays(&["/var/log", "/var/lib"]);
    let out = ns
        .command(bin("agentsh-sandbox-scenario"))
        .args(["--backend", "ptrace"])
        .output()
        .expect("run the scenario");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && text.contains(" checks, 0 failed"),
        "{text}\nstderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("ok: a nested curl fails with 126"), "{text}");
    assert_eq!(agentsh_tests::ns::host_sh_fingerprint(), before);
}
