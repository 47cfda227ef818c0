//! `decision: redirect` (issue 27): `pip` redirected to a root-owned stub
//! runs the stub in the same process, inside the tree (its filter and all),
//! with pip's argv; its output and status are the stub's. What cannot be
//! made safely is refused with the reason: a path in memory a sibling
//! thread shares (a racing sibling never gets anything but a refusal), a
//! path too short to point elsewhere. Real kernel, the SDK-style daemon
//! not a child of the server.

// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

use agentsh_tests::sandbox::{Sandbox, NOBODY};
use agentsh_tests::server::{require_root, TempDir};
use std::os::unix::fs::PermissionsExt;
use std::process::Command;

const TARGET: &str = "/usr/lib/agentsh/redirect/pip-internal";

const POLICY: &str = "default: allow
command_rules:
  - name: pip-internal
    commands: [pip, pip3]
    decision: redirect
    redirect_to: {program: /usr/lib/agentsh/redirect/pip-internal}
    message: pip goes through the internal index
";

/// Prints its argv and its own seccomp status, exits 7.
const STUB: &str = r#"
#include <stdio.h>
#include <string.h>
int main(int argc, char **argv) {
    printf("stub argv:");
    for (int i = 0; i < argc; i++) printf(" %s", argv[i]);
    printf("\n");
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, "Seccomp", 7)) printf("stub %s", line);
    return 7;
}
"#;

/// Two threads: one rewrites a path buffer between pip and a long name
/// of another program as fast as it can, the other execs that buffer.
const RACER: &str = r#"
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <errno.h>
static char path[64] = "/usr/bin/pip";
static void *flip(void *x) {
    for (;;) {
        memcpy(path, "/usr/bin/pip\0", 13);
        memcpy(path, "/usr/bin/true", 14);
    }
    return x;
}
int main(void) {
    pthread_t t;
    pthread_create(&t, 0, flip, 0);
    for (int i = 0; i < 200; i++) {
        char *argv[] = {"pip", "--racing", 0};
        execv(path, argv);
    }
    printf("racer: every exec refused, last errno %d\n", errno);
    return 0;
}
"#;

fn compile(dir: &std::path::Path, name: &str, source: &str, extra: &[&str]) -> std::path::PathBuf {
    let c = dir.join(format!("{name}.c"));
    std::fs::write(&c, source).unwrap();
    let out = dir.join(name);
    let o = Command::new("cc")
        .arg("-O1")
        .arg("-o")
        .arg(&out)
        .arg(&c)
        .args(extra)
        .output()
        .unwrap();
    assert!(o.status.success(), "{o:?}");
    out
}

fn sandbox(uid: Option<u32>, tmp: &TempDir) -> Sandbox {
    let stub = compile(tmp.path(), "stub", STUB, &[]);
    let racer = compile(tmp.path(), "racer", RACER, &["-pthread"]);
    Sandbox::with_setup(POLICY, uid, "", |ns| {
        let dir = ns.path("/usr/lib/agentsh/redirect");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        let target = ns.path(TARGET);
        std::fs::copy(&stub, &target).unwrap();
        std::fs::set_permissions(&target, std::fs::Permissions::from_mode(0o755)).unwrap();
        let r = ns.path("/usr/local/bin/agentsh-test-racer");
        std::fs::copy(&racer, &r).unwrap();
        std::fs::set_permissions(&r, std::fs::Permissions::from_mode(0o755)).unwrap();
    })
}

fn scenario(uid: Option<u32>) {
    let tmp = TempDir::new("redirect");
    let mut s = sandbox(uid, &tmp);
    // Redirected: the stub's output and status, pip's argv, inside the tree.
    let f = s.sh("pip install requests; echo rc=$?");
    let lines: Vec<&str> = f.stdout.lines().collect();
    assert_eq!(
        lines.first(),
        Some(&"stub argv: pip install requests"),
        "{f:?}"
    );
    assert_eq!(lines.last(), Some(&"rc=7"), "{f:?}");
    let filters = lines
        .iter()
        .find_map(|l| l.strip_prefix("stub Seccomp_filters:"))
        .map_or_else(|| panic!("{f:?}"), |n| n.trim().parse::<u32>().unwrap());
    assert!(
        filters >= 1,
        "the stub runs without the tree's filter: {f:?}"
    );
    assert!(lines.contains(&"stub Seccomp:\t2"), "{f:?}");
    let ev = s
        .events()
        .into_iter()
        .rev()
        .find(|e| e["type"] == "execve" && e["rule"] == "pip-internal")
        .unwrap();
    assert_eq!(ev["decision"], "redirect", "{ev}");
    assert_eq!(ev["effective_action"], "allow", "{ev}");
    assert!(
        ev["message"]
            .as_str()
            .unwrap()
            .starts_with(&format!("redirected to {TARGET}")),
        "{ev}"
    );

    // A racing sibling thread shares the path's memory: refused, every
    // time; pip itself never runs, nor anything but what was judged.
    let f = s.sh("agentsh-test-racer");
    assert!(
        f.stdout.starts_with("racer: every exec refused") || f.stdout.is_empty(),
        "{f:?}"
    );
    assert!(!f.stdout.contains("stub argv"), "{f:?}");
    assert!(
        !f.stderr.contains("Usage:") && !f.stdout.contains("pip "),
        "{f:?}"
    );
    let racing: Vec<serde_json::Value> = s
        .events()
        .into_iter()
        .filter(|e| e["type"] == "execve" && e["argv"][1] == "--racing")
        .collect();
    assert!(!racing.is_empty());
    for e in &racing {
        match e["rule"].as_str().unwrap() {
            "pip-internal" => {
                assert_eq!(e["effective_action"], "deny", "{e}");
                assert!(
                    e["message"]
                        .as_str()
                        .unwrap()
                        .contains("memory another task shares"),
                    "{e}"
                );
            }
            // What it judged instead (the other name) ran or not as judged.
            "default" => assert!(e["filename"] == "/usr/bin/true", "{e}"),
            other => assert!(
                other == "exec_mismatch"
                    || other == "memory_not_frozen"
                    || other == "shared_memory",
                "{e}"
            ),
        }
    }

    // A path too short to hold /dev/fd/N: refused, and said.
    let f = s.sh(
        "cd /usr/bin && python3 -c 'import os; os.execv(\"pip\", [\"pip\", \"--short\"])' 2>&1; \
         echo rc=$?",
    );
    assert!(f.stdout.contains("rc=1"), "{f:?}");
    assert!(!f.stdout.contains("stub argv"), "{f:?}");
    assert!(
        f.stdout
            .contains("agentsh: pip denied (rule pip-internal): redirect to"),
        "{f:?}"
    );
    assert!(f.stdout.contains("is shorter than"), "{f:?}");
}

#[test]
fn pip_is_redirected_to_the_stub_inside_the_tree_as_root() {
    if !require_root("pip_is_redirected_to_the_stub_inside_the_tree_as_root") {
        return;
    }
    scenario(None);
}

#[test]
fn pip_is_redirected_to_the_stub_inside_the_tree_as_nobody() {
    if !require_root("pip_is_redirected_to_the_stub_inside_the_tree_as_nobody") {
        return;
    }
    scenario(Some(NOBODY));
}
