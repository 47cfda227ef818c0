//! Where the server keeps its own files. agentsh denies supervised trees
//! every write beneath its state directory and audit log; Landlock can only
//! do that by taking create rights away from every directory above them, so
//! a server configured with its files in a directory every tree must write
//! (`/tmp`, `/var/tmp`, `/dev/shm`) refuses to start and says what to use;
//! with its files elsewhere, a tree writes `/tmp` as usual. Needs root.

// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

use agentsh_tests::sandbox::{Sandbox, AGENT_DEFAULT};
use agentsh_tests::sdk;
use agentsh_tests::server::{
    bin, free_port, require_root, server_base, with_private_marker_dir, TempDir,
};
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

/// Starts `agentsh server` on a config (kept under [`server_base`]) with
/// `state` and `audit`; its exit code and stderr. Panics if it keeps running.
fn server_exit(dir: &Path, state: &Path, audit: &Path) -> (Option<i32>, String) {
    let config = dir.join("config.yaml");
    std::fs::write(
        &config,
        format!(
            "server:\n  http:\n    addr: \"127.0.0.1:{}\"\npolicy: agent-default\nstate_dir: {}\naudit:\n  jsonl: {}\nwrapper_binary: {}\n",
            free_port(),
            state.display(),
            audit.display(),
            bin("agentsh-unixwrap").display(),
        ),
    )
    .unwrap();
    let mut child = with_private_marker_dir(bin("agentsh"))
        .args(["server", "--config"])
        .arg(&config)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // A deadline for a process that should exit at once, not a timing claim.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(st) = child.try_wait().unwrap() {
            let out = child.wait_with_output().unwrap();
            return (st.code(), String::from_utf8_lossy(&out.stderr).into_owned());
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let out = child.wait_with_output().unwrap();
            panic!(
                "the server started with state {} and audit {}: {}",
                state.display(),
                audit.display(),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_server_with_its_state_or_audit_log_under_tmp_refuses_to_start_and_says_what_to_use() {
    if !require_root(
        "a_server_with_its_state_or_audit_log_under_tmp_refuses_to_start_and_says_what_to_use",
    ) {
        return;
    }
    let dir = TempDir::new_in(&server_base(), "ownloc");
    let good_state = dir.path().join("state");
    let good_audit = dir.path().join("audit.jsonl");
    for shared in ["/tmp", "/var/tmp", "/dev/shm"] {
        let scratch = TempDir::new_in(Path::new(shared), "ownloc");
        let state = scratch.path().join("state");
        let audit = scratch.path().join("log").join("audit.jsonl");
        for (key, s, a, names, instead) in [
            ("state_dir", &state, &good_audit, &state, "/var/lib/agentsh"),
            (
                "audit.jsonl",
                &good_state,
                &audit,
                &audit,
                "/var/log/agentsh/audit.jsonl",
            ),
        ] {
            let (code, err) = server_exit(dir.path(), s, a);
            assert_eq!(code, Some(1), "{key} under {shared}: {err}");
            let want = format!(
                "{key} {} is inside {shared}, which anyone can write",
                names.display()
            );
            assert!(err.contains(&want), "{key} under {shared}: {err}");
            assert!(err.contains(instead), "{key} under {shared}: {err}");
            // Refused before anything was written there.
            assert!(!state.exists() && !audit.exists(), "{key}: {err}");
        }
    }
}

#[test]
fn with_the_servers_files_outside_tmp_a_tree_copies_into_tmp() {
    if !require_root("with_the_servers_files_outside_tmp_a_tree_copies_into_tmp") {
        return;
    }
    let mut sb = Sandbox::new(AGENT_DEFAULT, None);
    std::fs::write(sb.host_path("/srv/ws/x"), "copied\n").unwrap();
    let f = sb.spawn(&sdk::tensorlake(
        "cp /srv/ws/x /tmp/agentsh-cp-$$ && cat /tmp/agentsh-cp-$$ && rm /tmp/agentsh-cp-$$ && echo CP-OK",
    ));
    assert!(f.stdout.contains("copied\nCP-OK\n"), "{f:?}");
}
