//! End-to-end (issue 20): what a wrap-init computes from the filesystem is
//! made while the server starts, so the first shell after `ready` reuses it.
//! A test binary of its own: the ruleset is kept while the directories it was
//! read from stay as they were, and the servers of tests running beside it
//! come and go in the directory all test servers share (an ancestor of this
//! server's run directory), which rightly makes the server compile again.

// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

use agentsh_tests::sandbox::{Sandbox, WORKSPACE};
use agentsh_tests::server::require_root;

const POLICY: &str = r"
name: first-shell
default: allow
";

/// Issue 20: what a wrap-init computes from the filesystem (the tree's
/// Landlock ruleset, the daemon sockets to hide) is made while the server
/// starts, so the first shell after `ready` reuses it as later ones do. The
/// machine is set up first, as an image is (workspace, shim), and the
/// server logs whether each wrap-init reused them.
#[test]
fn the_first_shell_after_ready_reuses_the_ruleset_and_masks_made_at_start() {
    use agentsh_tests::ns::Namespace;
    use agentsh_tests::sandbox::SERVER_BASE;
    use agentsh_tests::sdk::Supervisor;
    use agentsh_tests::server::{TestServer, TCP};
    if !require_root("the_first_shell_after_ready_reuses_the_ruleset_and_masks_made_at_start") {
        return;
    }
    let ns = Namespace::new();
    ns.mount_scratch("/srv", WORKSPACE);
    std::fs::create_dir_all(ns.path(WORKSPACE)).unwrap();
    ns.install_shim(true);
    let srv = TestServer::start_with(
        std::path::Path::new(SERVER_BASE),
        POLICY,
        &format!("{TCP}workspace: {WORKSPACE}\n"),
        |program| {
            let mut c = ns.command(program);
            c.env(
                "AGENTSH_LOG",
                "info,agentsh::api=debug,agentsh::policy=debug",
            );
            c
        },
    );
    ns.configure(&srv.url, "on");
    let sup = Supervisor::start_as(&ns, false, None);
    let mut sb = Sandbox {
        sup,
        ns,
        srv,
        uid: None,
    };
    for _ in 0..2 {
        let f = sb.sh("true");
        assert_eq!(f.code, Some(0), "{f:?}");
    }
    let log = sb.srv.log();
    let prepared: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("wrap-init prepared"))
        // The server's own rehearsal shell (before ready) is not one.
        .filter(|l| !l.contains("session=agentsh.rehearsal"))
        .collect();
    assert_eq!(prepared.len(), 2, "{log}");
    for line in prepared {
        assert!(
            line.contains("ruleset_reused=true") && line.contains("masks_reused=true"),
            "a shell after ready compiled what start-up should have made:\n{log}"
        );
    }
}
