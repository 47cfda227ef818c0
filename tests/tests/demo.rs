//! The README's demo runs and shows what it claims (it checks itself too).

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
    let denials: Vec<&str> = so
        .lines()
        .filter(|l| l.contains(" deny ") && l.contains("deny-"))
        .collect();
    assert!(
        denials
            .iter()
            .any(|l| l.contains("deny-nested-network-tools") && l.contains("curl")),
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
