//! The admin's unsupervised login (`/usr/lib/agentsh/admin-shell`, the shim
//! under another name): from outside every tree it gives an unsupervised
//! session, every shell of which runs unsupervised, recorded as an
//! `admin_session` audit event; a supervised tree that runs it is refused
//! and stays supervised.

// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

use agentsh_tests::sandbox::{Sandbox, AGENT_DEFAULT};
use agentsh_tests::server::require_root;
use std::time::{Duration, Instant};

const ADMIN_SHELL: &str = "/usr/lib/agentsh/admin-shell";

#[test]
fn a_tree_cannot_use_the_admin_shell_and_stays_supervised() {
    if !require_root("a_tree_cannot_use_the_admin_shell_and_stays_supervised") {
        return;
    }
    let mut s = Sandbox::new(AGENT_DEFAULT, None);
    let f = s.sh(&format!("{ADMIN_SHELL} -c 'true; curl --version'"));
    assert_eq!(f.code, Some(126), "{f:?}");
    assert!(
        f.stderr.contains("inside a supervised tree")
            && f.stderr
                .contains("docs/troubleshooting.md#the-admin-shell-refuses"),
        "{}",
        f.stderr
    );
    assert!(!f.stdout.contains("curl "), "curl ran: {}", f.stdout);
    // Still supervised afterwards: a nested su is refused.
    let f = s.sh(&format!("{ADMIN_SHELL} -c true; true; su -c true root"));
    assert_eq!(f.code, Some(126), "{f:?}");
    assert!(s.srv.events("admin").is_empty());
}

#[test]
fn the_admin_shell_from_outside_is_unsupervised_and_audited() {
    if !require_root("the_admin_shell_from_outside_is_unsupervised_and_audited") {
        return;
    }
    let s = Sandbox::new(AGENT_DEFAULT, None);
    // As `docker exec -it BOX admin-shell` would: a process in the
    // container that is not the SDK daemon's child.
    let out = s.ns.run(
        &[
            ADMIN_SHELL,
            "-c",
            "sh -c 'true; curl --version' | head -1; echo admin-ok",
        ],
        &[],
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.starts_with("curl ") && stdout.contains("admin-ok"),
        "{stdout}"
    );
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let events = s.events();
        let admin = s.srv.events("admin");
        if admin
            .iter()
            .any(|e| e["type"] == "admin_session" && e["uid"] == 0)
        {
            // Nothing of the session was judged: it ran unsupervised.
            assert!(
                events
                    .iter()
                    .all(|e| !e["filename"].as_str().unwrap_or("").ends_with("curl")),
                "{events:?}"
            );
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no admin_session event: {events:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}
