//! The seccomp filter the server compiles, end to end: an SDK-style daemon (a
//! sibling of the server) spawns shells through the shim, and what runs in
//! them meets the base rules (`server/src/filter/table.rs`) on the real kernel.
//!
//! * namespaces, userfaultfd, perf_event_open and open_by_handle_at fail in
//!   every shipped policy, as root and as an unprivileged user (who, without
//!   the filter, may create user namespaces here);
//! * ordinary agent work still runs under `agent-default`: git, a venv and pip,
//!   npm, cargo, cc and make, python threads and a Go-style spawner (posix_spawn
//!   through clone3's ENOSYS fallback, pidfds, waitid);
//! * TCP Fast Open and a plain connect to a port the policy does not allow fail
//!   from a nested shell (the same Fast Open reaches it outside any tree);
//!   AF_UNIX SOCK_SEQPACKET sockets cannot be created, socketpairs can.
//!
//! Needs root (mount namespaces, seccomp listeners).

// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

use agentsh_tests::sandbox::{
    Listener, Sandbox, AGENT_DEFAULT, AGENT_OBSERVE, AGENT_STRICT, NOBODY, WORKSPACE,
};
use agentsh_tests::sdk::Spawn;
use agentsh_tests::server::require_root;
use std::time::Duration;

const PY: &str = "/usr/bin/python3";

/// Python that prints `name=errno` (0: success) for raw syscalls.
const SURFACE: &str = r#"
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
def e(*a):
    ctypes.set_errno(0)
    return ctypes.get_errno() if libc.syscall(*a) == -1 else 0
CLONE_NEWUSER, CLONE_NEWNET = 0x10000000, 0x40000000
print("unshare_user=%d" % e(272, CLONE_NEWUSER))
print("unshare_net=%d" % e(272, CLONE_NEWNET))
print("userfaultfd=%d" % e(323, 0))
attr = ctypes.create_string_buffer(128)
print("perf_event_open=%d" % e(298, attr, 0, -1, -1, 0))
handle = ctypes.create_string_buffer(64)
print("open_by_handle_at=%d" % e(304, -100, handle, 0))
"#;

fn surface_in(sb: &mut Sandbox, who: &str, failures: &mut Vec<String>) {
    std::fs::write(sb.host_path("/srv/ws/surface.py"), SURFACE).expect("write the probe");
    // Nested, as anything an agent's program starts would be.
    let f = sb.sh(&format!(
        "cd {WORKSPACE} && ({PY} surface.py); (unshare -Ur true); echo unshare_Ur=$?; (unshare -n true); echo unshare_n=$?"
    ));
    for name in [
        "unshare_user",
        "unshare_net",
        "userfaultfd",
        "perf_event_open",
        "open_by_handle_at",
    ] {
        if !f.stdout.contains(&format!("{name}={}", libc::EPERM)) {
            failures.push(format!("[{who}] {name} did not fail with EPERM: {f:?}"));
        }
    }
    for cmd in ["unshare_Ur", "unshare_n"] {
        if f.stdout.contains(&format!("{cmd}=0")) || !f.stdout.contains(&format!("{cmd}=")) {
            failures.push(format!("[{who}] `{cmd}` did not fail: {f:?}"));
        }
    }
}

#[test]
fn namespaces_and_kernel_surface_fail_in_every_shipped_policy() {
    if !require_root("namespaces_and_kernel_surface_fail_in_every_shipped_policy") {
        return;
    }
    // The probe can fail: outside any tree, as nobody, a user namespace is
    // there for the asking on this kernel (and everything works for root).
    let mut failures = Vec::new();
    for (name, policy, uid) in [
        ("agent-default", AGENT_DEFAULT, None),
        ("agent-default", AGENT_DEFAULT, Some(NOBODY)),
        ("agent-strict", AGENT_STRICT, None),
        ("agent-observe", AGENT_OBSERVE, None),
    ] {
        let mut sb = Sandbox::new(policy, uid);
        let who = format!(
            "{name} as {}",
            if uid.is_some() { "nobody" } else { "root" }
        );
        surface_in(&mut sb, &who, &mut failures);
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Runs `script` in the workspace under `agent-default` as root, `limit` at
/// most; returns stdout, asserting success.
fn work(sb: &mut Sandbox, what: &str, script: &str, limit: Duration) -> String {
    let spawn = Spawn::argv(&["/bin/sh", "-c", &format!("cd {WORKSPACE} && ({script})")])
        .env("HOME", "/root");
    let f = sb.spawn_for(&spawn, limit);
    assert_eq!(f.code, Some(0), "{what} failed under agent-default: {f:?}");
    f.stdout
}

#[test]
fn ordinary_agent_work_runs_under_agent_default() {
    if !require_root("ordinary_agent_work_runs_under_agent_default") {
        return;
    }
    let mut sb = Sandbox::new(AGENT_DEFAULT, None);
    let long = Duration::from_secs(240);

    let out = work(
        &mut sb,
        "git",
        "git init -q repo && cd repo && git config user.email a@b && git config user.name a && \
         echo hi > f && git add f && git commit -qm one && git log --oneline | wc -l",
        long,
    );
    assert_eq!(out.trim(), "1");

    // pip: a venv, and a local package installed without any index.
    let pkg = sb.host_path("/srv/ws/localpkg");
    std::fs::create_dir_all(pkg.join("localpkg")).unwrap();
    std::fs::write(pkg.join("localpkg/__init__.py"), "VALUE = 42\n").unwrap();
    std::fs::write(
        pkg.join("setup.py"),
        "from setuptools import setup\nsetup(name='localpkg', version='1.0', packages=['localpkg'])\n",
    )
    .unwrap();
    let out = work(
        &mut sb,
        "python venv + pip",
        &format!(
            "{PY} -m venv venv && venv/bin/pip install -q --no-index --no-build-isolation ./localpkg && \
             venv/bin/python -c 'import localpkg; print(\"pkg\", localpkg.VALUE)' && venv/bin/pip list 2>/dev/null | grep -c localpkg"
        ),
        long,
    );
    assert!(out.contains("pkg 42"), "{out}");

    // cc and make.
    std::fs::write(
        sb.host_path("/srv/ws/hello.c"),
        "#include <stdio.h>\nint main(void) { puts(\"hello from cc\"); return 0; }\n",
    )
    .unwrap();
    std::fs::write(
        sb.host_path("/srv/ws/Makefile"),
        "hello: hello.c\n\tcc -O1 -o hello hello.c\n",
    )
    .unwrap();
    let out = work(&mut sb, "cc + make", "make -s hello && ./hello", long);
    assert!(out.contains("hello from cc"), "{out}");

    // cargo: a new crate, built offline (rustc, the linker, build scripts' execs).
    let cargo = which("cargo");
    let out = work(
        &mut sb,
        "cargo",
        &format!("{cargo} new -q --offline tiny && cd tiny && {cargo} build -q --offline && ./target/debug/tiny"),
        long,
    );
    assert!(out.contains("Hello, world!"), "{out}");

    // npm: a project installing a local dependency, offline.
    let out = work(
        &mut sb,
        "npm",
        "mkdir -p app/dep && cd app/dep && npm init -y >/dev/null && cd .. && npm init -y >/dev/null && \
         npm install --offline --no-audit --no-fund ./dep >/dev/null && ls node_modules && \
         node -e 'require(\"child_process\").execFileSync(\"true\"); new (require(\"worker_threads\").Worker)(\"1\", {eval: true}).on(\"exit\", () => console.log(\"node ok\"))'",
        long,
    );
    assert!(out.contains("node ok") && out.contains("dep"), "{out}");

    // Python threads spawning, and a Go-style spawner: posix_spawn (glibc
    // tries clone3 first: ENOSYS sends it to clone), pidfd_open of the child,
    // pidfd_send_signal, waitid on the pidfd.
    let out = work(
        &mut sb,
        "python threads and a Go-style spawner",
        &format!(
            "{PY} -c '\nimport os, signal, subprocess, threading\n\
             def run(): subprocess.run([\"true\"], check=True)\n\
             ts = [threading.Thread(target=run) for _ in range(8)]\n\
             [t.start() for t in ts]; [t.join() for t in ts]\n\
             pid = os.posix_spawn(\"/usr/bin/sleep\", [\"sleep\", \"30\"], os.environ)\n\
             fd = os.pidfd_open(pid)\n\
             signal.pidfd_send_signal(fd, signal.SIGTERM)\n\
             info = os.waitid(os.P_PIDFD, fd, os.WEXITED)\n\
             print(\"spawner ok\", info.si_status == signal.SIGTERM)\n'"
        ),
        long,
    );
    assert!(out.contains("spawner ok True"), "{out}");
}

fn which(name: &str) -> String {
    let out = std::process::Command::new("/usr/bin/which")
        .arg(name)
        .output()
        .expect("which");
    let p = String::from_utf8_lossy(&out.stdout).trim().to_string();
    assert!(!p.is_empty(), "{name} is not on PATH");
    p
}

/// Fast Open with data to 127.0.0.1:`port`; prints the outcome.
fn fast_open(port: u16) -> String {
    format!(
        "{PY} -c '\nimport socket\ns = socket.socket(socket.AF_INET, socket.SOCK_STREAM)\n\
         try:\n    s.sendto(b\"GET / HTTP/1.0\\r\\n\\r\\n\", socket.MSG_FASTOPEN, (\"127.0.0.1\", {port}))\n    print(\"fastopen=connected\")\n\
         except OSError as e:\n    print(\"fastopen=%d\" % e.errno)\n'"
    )
}

#[test]
fn fast_open_connect_and_seqpacket_sockets_fail_from_a_nested_shell() {
    if !require_root("fast_open_connect_and_seqpacket_sockets_fail_from_a_nested_shell") {
        return;
    }
    let denied = Listener::start();
    let mut sb = Sandbox::new(AGENT_DEFAULT, None);
    // The probe can fail: outside any tree, Fast Open reaches the port.
    let o = sb.ns.run(
        &["/usr/lib/agentsh/shells/sh", "-c", &fast_open(denied.port)],
        &[],
    );
    let outside = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(
        outside.contains("fastopen=connected"),
        "control: Fast Open outside a tree: {outside}"
    );

    let script = format!(
        "({fo}); ({PY} -c 'import socket; socket.create_connection((\"127.0.0.1\", {port}), 3)' 2>&1 | tail -1); \
         ({PY} -c '\nimport socket, errno\ntry:\n    socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)\n    print(\"seqpacket=created\")\n\
         except OSError as e:\n    print(\"seqpacket=%d\" % e.errno)\na, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)\n\
         a.send(b\"x\"); print(\"socketpair=\" + b.recv(1).decode())\n')",
        fo = fast_open(denied.port),
        port = denied.port
    );
    let f = sb.sh(&script);
    assert!(
        f.stdout.contains(&format!("fastopen={}", libc::EPERM)),
        "Fast Open: {f:?}"
    );
    assert!(f.stdout.contains("PermissionError"), "plain connect: {f:?}");
    assert!(
        f.stdout.contains(&format!("seqpacket={}", libc::EPERM)),
        "SOCK_SEQPACKET: {f:?}"
    );
    assert!(f.stdout.contains("socketpair=x"), "socketpair: {f:?}");
}
