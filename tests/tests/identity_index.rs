//! End-to-end: the identity index (copies of a named program are judged as
//! it) exists before the server says it is ready, and a program installed
//! after the server started is indexed when it appears, so a tree that
//! copies it under another name and runs the copy is denied as it. Real
//! kernel; the programs are installed into the test's private mount
//! namespace (its `/usr` overlay), never into this machine's `/usr`.

// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

use agentsh_tests::sandbox::{Sandbox, WORKSPACE};
use agentsh_tests::server::require_root;
use serde_json::Value;
use std::os::unix::fs::PermissionsExt;

/// Both names only exist once the test installs them, after the server
/// started.
const POLICY: &str = r"
name: late-install
default: allow
command_rules:
  - name: deny-late-tools
    commands: [agentsh-late-written, agentsh-late-moved]
    decision: deny
";

/// `/usr/bin/true` with a trailer of our own: runs like `true` (the trailer
/// is past everything the ELF headers map) and has a content, so a digest,
/// no other file on the machine has.
fn program(tag: &str) -> Vec<u8> {
    let mut bytes = std::fs::read("/usr/bin/true").expect("read /usr/bin/true");
    bytes.extend(format!("\nagentsh identity test: {tag} {}\n", std::process::id()).as_bytes());
    bytes
}

fn install(sb: &Sandbox, path: &str, bytes: &[u8]) {
    let host = sb.host_path(path);
    std::fs::write(&host, bytes).unwrap_or_else(|e| panic!("write {}: {e}", host.display()));
    std::fs::set_permissions(&host, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// Line numbers of the server log's lines containing `what`.
fn lines_with(log: &str, what: &str) -> Vec<usize> {
    log.lines()
        .enumerate()
        .filter(|(_, l)| l.contains(what))
        .map(|(i, _)| i)
        .collect()
}

#[test]
fn the_identity_index_is_built_before_the_server_is_ready_not_at_the_first_shell() {
    if !require_root(
        "the_identity_index_is_built_before_the_server_is_ready_not_at_the_first_shell",
    ) {
        return;
    }
    let mut sb = Sandbox::new(POLICY, None);
    // `ready` (the tests' readiness wait polls /healthz as `agentsh ready`
    // does) answered: the index was built before.
    let log = sb.srv.log();
    let built = lines_with(&log, "identity index built");
    let ready = lines_with(&log, "agentsh server ready");
    assert!(
        built.len() == 1 && ready.len() == 1 && built[0] < ready[0],
        "the index must be built before the server is ready:\n{log}"
    );
    // The first shell builds nothing.
    let f = sb.sh("true");
    assert_eq!(f.code, Some(0), "{f:?}");
    let log = sb.srv.log();
    assert_eq!(lines_with(&log, "identity index built").len(), 1, "{log}");
    assert!(
        !log.contains("not built at start"),
        "an exec built the index:\n{log}"
    );
}

#[test]
fn a_program_installed_after_start_and_copied_under_another_name_is_denied_as_it() {
    if !require_root(
        "a_program_installed_after_start_and_copied_under_another_name_is_denied_as_it",
    ) {
        return;
    }
    let mut sb = Sandbox::new(POLICY, None);
    // The first shell after ready: whatever an index does lazily is done.
    let f = sb.sh("true");
    assert_eq!(f.code, Some(0), "{f:?}");
    assert!(
        sb.host_path("/usr/local/bin").is_dir(),
        "the test needs /usr/local/bin"
    );
    // Installed as `cp` does (written in place) and as dpkg does (written
    // under another name, renamed into place); a control built the same way
    // that no rule names.
    install(
        &sb,
        "/usr/local/bin/agentsh-late-written",
        &program("written"),
    );
    install(
        &sb,
        "/usr/local/bin/.agentsh-late-moved.new",
        &program("moved"),
    );
    std::fs::rename(
        sb.host_path("/usr/local/bin/.agentsh-late-moved.new"),
        sb.host_path("/usr/local/bin/agentsh-late-moved"),
    )
    .unwrap();
    install(
        &sb,
        "/usr/local/bin/agentsh-late-control",
        &program("control"),
    );
    // No waiting: what was installed before an exec is known to it.
    let mark = sb.mark();
    let script = [
        ("written", "agentsh-late-written"),
        ("moved", "agentsh-late-moved"),
        ("control", "agentsh-late-control"),
    ]
    .iter()
    .map(|(tag, name)| {
        format!("cp /usr/local/bin/{name} {WORKSPACE}/renamed-{tag}; {WORKSPACE}/renamed-{tag}; echo {tag}=$?; ")
    })
    .collect::<String>();
    let f = sb.sh(&script);
    for want in ["written=126", "moved=126", "control=0"] {
        assert!(f.stdout.contains(want), "{want}: {f:?}");
    }
    let execs = sb.execs_since(mark);
    let of = |tag: &str| -> Value {
        execs
            .iter()
            .find(|e| e["filename"] == format!("{WORKSPACE}/renamed-{tag}"))
            .cloned()
            .unwrap_or_else(|| panic!("no exec event for renamed-{tag}: {execs:#?}"))
    };
    for (tag, original) in [
        ("written", "/usr/local/bin/agentsh-late-written"),
        ("moved", "/usr/local/bin/agentsh-late-moved"),
    ] {
        let e = of(tag);
        assert_eq!(e["rule"], "deny-late-tools", "{e:#}");
        assert_eq!(e["effective_action"], "deny", "{e:#}");
        assert!(
            e["copy_of"]
                .as_array()
                .is_some_and(|a| a.iter().any(|c| c == original)),
            "{e:#}"
        );
    }
    let control = of("control");
    assert_eq!(control["effective_action"], "allow", "{control:#}");
    assert!(
        control["copy_of"].as_array().is_none_or(Vec::is_empty),
        "{control:#}"
    );
}
