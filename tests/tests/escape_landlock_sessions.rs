//! Landlock from the policy, end to end through the shim: denials hold in
//! nested shells of an SDK-style tree, and ordinary agent work (an E2B-style
//! session: git clone, a C build with make, its tests) runs under the shipped
//! `agent-default`. Needs root and Landlock ABI >= 4 (TCP) / 6 (scopes).

// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

use agentsh_tests::sandbox::{Listener, Sandbox, AGENT_DEFAULT, NOBODY, WORKSPACE};
use agentsh_tests::sdk;
use agentsh_tests::server::require_root;

/// Landlock ABI of this kernel (0 if unavailable).
fn landlock_abi() -> i64 {
    // SAFETY: landlock_create_ruleset(NULL, 0, VERSION) only returns the ABI.
    unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<u8>(),
            0usize,
            1u32,
        )
    }
}

fn policy_with_ports(allowed: u16) -> String {
    format!(
        r#"
name: nested-landlock
default: allow
file_rules:
  - name: read-and-run
    paths: ["/**"]
    operations: [read, execute]
    decision: allow
  - name: secrets
    paths: ["{WORKSPACE}/secrets/**"]
    operations: [read]
    decision: deny
  - name: writable
    paths: ["${{WORKSPACE}}/**", "/tmp/**", "/dev/null", "/proc/self/**"]
    operations: [write, create, delete]
    decision: allow
network_rules:
  - name: one-service
    ports: [{allowed}]
    direction: connect
    decision: allow
"#
    )
}

#[test]
fn landlock_denied_read_and_connect_fail_in_a_nested_sh_c() {
    if !require_root("landlock_denied_read_and_connect_fail_in_a_nested_sh_c") {
        return;
    }
    assert!(landlock_abi() >= 6, "this test expects Landlock ABI >= 6");
    let allowed = Listener::start();
    let denied = Listener::start();
    let mut sb = Sandbox::new(&policy_with_ports(allowed.port), None);
    sb.setup(&["/usr/bin/mkdir", "-p", "/srv/ws/secrets"]);
    std::fs::write(sb.host_path("/srv/ws/secrets/key"), "s3cret\n").expect("write secret");
    std::fs::write(sb.host_path("/srv/ws/notes"), "public\n").expect("write notes");
    // Two shells deep, inside a pipeline, as an SDK's command would nest.
    let inner = format!(
        "cat {WORKSPACE}/notes; cat {WORKSPACE}/secrets/key; echo read-rc=$?; \
         bash -c 'echo > /dev/tcp/127.0.0.1/{a}' && echo allowed-connect-ok; \
         bash -c 'echo > /dev/tcp/127.0.0.1/{d}'; echo denied-connect-rc=$?",
        a = allowed.port,
        d = denied.port
    );
    std::fs::write(sb.host_path("/srv/ws/inner.sh"), inner).expect("write the script");
    let f = sb.spawn(&sdk::tensorlake(
        "sh -c \"sh -c 'sh /srv/ws/inner.sh'\" | cat",
    ));
    assert!(f.stdout.contains("public\n"), "allowed read: {f:?}");
    assert!(!f.stdout.contains("s3cret"), "denied read leaked: {f:?}");
    assert!(f.stdout.contains("read-rc=1\n"), "{f:?}");
    assert!(f.stderr.contains("secrets/key: Permission denied"), "{f:?}");
    assert!(f.stdout.contains("allowed-connect-ok\n"), "{f:?}");
    assert!(f.stdout.contains("denied-connect-rc=1\n"), "{f:?}");
    assert!(f.stderr.contains("Permission denied"), "{f:?}");
    // The audit's wrap-init says what the tree was given, and no exec was
    // denied: the kernel alone refused.
    let r = sb.ruleset();
    assert_eq!(
        r["tcp_connect_ports"],
        serde_json::json!([allowed.port]),
        "{r}"
    );
    assert!(
        r["handled_fs"]
            .as_array()
            .is_some_and(|a| a.iter().any(|x| x == "read")),
        "{r}"
    );
    assert!(
        sb.execs_since(0)
            .iter()
            .all(|e| e["effective_action"] == "allow"),
        "{:?}",
        sb.execs_since(0)
    );
}

const ORIGIN_SETUP: &str = r#"set -e
mkdir -p /srv/origin && cd /srv/origin
cat > add.c <<'EOF'
int add(int a, int b) { return a + b; }
EOF
cat > main.c <<'EOF'
#include <stdio.h>
#include <stdlib.h>
int add(int, int);
int main(int argc, char **argv) {
    if (argc != 3) return 2;
    printf("%d\n", add(atoi(argv[1]), atoi(argv[2])));
    return 0;
}
EOF
printf 'app: main.o add.o\n\tcc -o app main.o add.o\n%%.o: %%.c\n\tcc -O2 -c $<\ntest: app\n\t./app 2 3 | grep -qx 5\n\t./app 40 2 | grep -qx 42\n\t@echo TESTS-PASSED\n' > Makefile
git init -q -b main .
git -c user.name=t -c user.email=t@example.com add .
git -c user.name=t -c user.email=t@example.com commit -qm init
"#;

/// An E2B-style session as the given user: oom_score_adj, then a login
/// bash that clones a local repo, builds it with make and cc (which use
/// /tmp), runs its tests and cleans up.
fn agent_session(uid: Option<u32>) {
    let mut sb = Sandbox::new(AGENT_DEFAULT, uid);
    sb.setup(&["/bin/sh.real", "-c", ORIGIN_SETUP]);
    if let Some(uid) = uid {
        sb.setup(&[
            "/usr/bin/chown",
            "-R",
            &format!("{uid}:{uid}"),
            "/srv/origin",
        ]);
    }
    let cmd = format!(
        "set -e; echo oom=$(cat /proc/$$/oom_score_adj); export HOME={WORKSPACE}; cd {WORKSPACE}; git clone -q /srv/origin proj; cd proj; \
         make -s; make -s test; git status --short | grep -c . || true; \
         echo data > /dev/null; tty >/dev/null 2>&1 || true; \
         mkdir -p build && mv app build/ && rm -r build; echo SESSION-OK"
    );
    let f = sb.spawn(&sdk::e2b(&cmd));
    assert_eq!(f.code, Some(0), "{f:?}\n{}", sb.srv.log());
    assert!(f.stdout.contains("TESTS-PASSED"), "{f:?}");
    assert!(f.stdout.contains("SESSION-OK"), "{f:?}");
    assert!(f.stdout.contains("oom=100\n"), "{f:?}");
    let denied: Vec<_> = sb
        .execs_since(0)
        .into_iter()
        .filter(|e| e["effective_action"] != "allow")
        .collect();
    assert!(denied.is_empty(), "ordinary work was denied: {denied:?}");
    let r = sb.ruleset();
    assert_eq!(r["workspace"], WORKSPACE, "{r}");
    assert_eq!(r["api_port_reachable"], false, "{r}");
}

#[test]
fn agent_session_clone_build_test_works_under_agent_default_as_root() {
    if !require_root("agent_session_clone_build_test_works_under_agent_default_as_root") {
        return;
    }
    agent_session(None);
}

#[test]
fn agent_session_clone_build_test_works_under_agent_default_as_a_user() {
    if !require_root("agent_session_clone_build_test_works_under_agent_default_as_a_user") {
        return;
    }
    agent_session(Some(NOBODY));
}

#[test]
fn landlock_required_runs_on_this_kernel_and_is_recorded() {
    if !require_root("landlock_required_runs_on_this_kernel_and_is_recorded") {
        return;
    }
    assert!(landlock_abi() >= 6, "this test expects Landlock ABI >= 6");
    let srv = agentsh_tests::server::TestServer::start_in(
        std::path::Path::new(agentsh_tests::sandbox::SERVER_BASE),
        AGENT_DEFAULT,
        &format!("workspace: {WORKSPACE}\nlandlock: {{compat: required}}\n"),
    );
    let ns = agentsh_tests::ns::Namespace::new();
    ns.install_shim(false);
    ns.configure(&srv.url, "on");
    let mut sup = agentsh_tests::sdk::Supervisor::start(&ns, false);
    let f = sup.run(&sdk::tensorlake("echo x > /etc/nope; echo rc=$?"));
    assert!(f.stdout.contains("rc=2"), "{f:?}");
    let wi = srv
        .events("default")
        .into_iter()
        .find(|e| e["type"] == "wrap_init")
        .expect("wrap_init event");
    assert_eq!(wi["landlock"]["compat"], "required", "{wi}");
    // What the shared kernel enforces of it is recorded too.
    assert_eq!(wi["landlock"]["enforcement"], "full", "{wi}");
    assert_eq!(wi["landlock"]["required_abi"], 6, "{wi}");
    assert!(wi["landlock"]["kernel_abi"].as_i64().unwrap() >= 6, "{wi}");
}
