//! The README's demo runs and shows what it claims (it checks itself too).

// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

use agentsh_tests::server::{bin, require_root};

#[test]
fn the_demo_session_runs_and_shows_allowed_and_denied_steps() {
    if !require_root("the_demo_session_runs_and_shows_allowed_and_denied_steps") {
        return;
    }
    let out = std::process::Command::new(bin("agentsh-demo"))
        .output()
        .unwrap();
    let so = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{so}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(so.matches("-> as expected").count(), 5, "{so}");
    assert!(!so.contains("NOT AS EXPECTED"));
    // The table has the denials with their rules.
    let denials: Vec<&str> = so.lines().filter(|l| l.contains(" deny ")).collect();
    assert!(
        denials
            .iter()
            .any(|l| l.contains("no-cloud-metadata") && l.contains("169.254.169.254")),
        "{so}"
    );
    assert!(
        denials
            .iter()
            .any(|l| l.contains("deny-privilege-escalation") && l.contains("su")),
        "{so}"
    );
    assert!(so.contains("were not touched"));
}

/// A checkout under `/srv` (where the demo and the test sandbox keep their
/// workspace): the built binaries are bind-mounted at
/// `/srv/checkout/target` inside a private mount namespace whose `/srv`
/// is a tmpfs (this machine's `/srv` is never written), and the demo runs
/// from there.
#[test]
fn the_demo_runs_from_a_checkout_under_srv() {
    if !require_root("the_demo_runs_from_a_checkout_under_srv") {
        return;
    }
    let built = bin("agentsh-demo");
    // target/ (debug and static builds), as a checkout's would be.
    let built_dir = built
        .parent()
        .and_then(std::path::Path::parent)
        .expect("the target directory");
    let ns = agentsh_tests::ns::Namespace::new();
    let checkout = "/srv/checkout/target";
    for argv in [
        vec![
            "/usr/bin/mount",
            "-t",
            "tmpfs",
            "-o",
            "mode=0755",
            "checkout",
            "/srv",
        ],
        vec!["/usr/bin/mkdir", "-p", checkout],
        vec![
            "/usr/bin/mount",
            "--bind",
            built_dir.to_str().expect("a UTF-8 path"),
            checkout,
        ],
    ] {
        let out = ns.run(&argv, &[]);
        assert!(out.status.success(), "{argv:?}: {out:?}");
    }
    let out = ns
        .command(format!("{checkout}/debug/agentsh-demo"))
        .stdin(std::process::Stdio::null())
        .output()
        .expect("run the demo inside the namespace");
    let so = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{so}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(so.matches("-> as expected").count(), 5, "{so}");
}
