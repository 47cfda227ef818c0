//! Signals aimed at agentsh and the SDK daemon, on a kernel whose Landlock
//! cannot scope signals: `landlock.max_abi: 2` makes agentsh behave as on
//! E2B's 6.1 guest kernel (no signal scoping, no TCP rules), so only the
//! seccomp signal guard stands between the tree and the server: register
//! rules for what a register names, the supervisor for the rest
//! (`server/src/supervisor/signals.rs`).
//!
//! Each attempt is run from a nested shell in an `agent-default` tree, as root
//! and as an unprivileged user (whose SDK daemon runs as the same user, so
//! only agentsh stands in the way there). Every attempt must fail; the server
//! and the daemon must still answer afterwards; a signal to the tree's own
//! processes must still work. Needs root.

// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

use agentsh_tests::sandbox::{Sandbox, AGENT_DEFAULT, NOBODY};
use agentsh_tests::sdk::Spawn;
use agentsh_tests::server::require_root;
use serde_json::Value;

const PY: &str = "/usr/bin/python3";

/// A thread of `pid` other than its main thread.
fn other_thread(pid: u32) -> u32 {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .expect("the server's threads")
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .find(|t| *t != pid)
        .expect("a multi-threaded server")
}

fn attempts(server: u32, daemon: u32) -> Vec<(String, String)> {
    let thread = other_thread(server);
    let mut v = Vec::new();
    for (who, pid) in [("server", server), ("daemon", daemon)] {
        v.push((format!("kill -9 {who}"), format!("kill -9 {pid}")));
        v.push((format!("kill -STOP {who}"), format!("kill -STOP {pid}")));
        v.push((format!("kill -HUP {who}"), format!("kill -1 {pid}")));
        v.push((
            format!("pidfd_open + pidfd_send_signal {who}"),
            format!("{PY} -c 'import os, signal; signal.pidfd_send_signal(os.pidfd_open({pid}), signal.SIGKILL)'"),
        ));
        v.push((
            format!("pidfd_send_signal on /proc/{who}"),
            format!(
                "{PY} -c 'import os, signal; signal.pidfd_send_signal(os.open(\"/proc/{pid}\", os.O_RDONLY | os.O_DIRECTORY), signal.SIGKILL)'"
            ),
        ));
        v.push((
            format!("killpg(the group of {who}, SIGKILL)"),
            format!("{PY} -c 'import os; os.killpg(os.getpgid({pid}), 9)'"),
        ));
    }
    v.push((
        "os.kill(a server thread, SIGSTOP)".into(),
        format!("{PY} -c 'import os, signal; os.kill({thread}, signal.SIGSTOP)'"),
    ));
    v.push((
        "tkill(a server thread, SIGSTOP)".into(),
        format!("{PY} -c 'import ctypes; l = ctypes.CDLL(None, use_errno=True); assert l.syscall(200, {thread}, 19) == 0, ctypes.get_errno()'"),
    ));
    // PID 1 (a container's entrypoint: its death ends the sandbox), with
    // signal 0 only: this machine's init must never get a real one.
    v.push(("kill -0 init".into(), "kill -0 1".into()));
    v.push((
        "tgkill(init, init, 0)".into(),
        format!("{PY} -c 'import ctypes; l = ctypes.CDLL(None, use_errno=True); assert l.syscall(234, 1, 1, 0) == 0, ctypes.get_errno()'"),
    ));
    // Signal 0 only: if the guard failed, nothing is delivered.
    v.push((
        "kill(-1, 0) (everyone)".into(),
        format!("{PY} -c 'import os; os.kill(-1, 0)'"),
    ));
    v
}

fn run_at_abi_2(uid: Option<u32>) {
    let mut sb = Sandbox::with_config(AGENT_DEFAULT, uid, "landlock: {max_abi: 2}\n");
    let (server, daemon) = (sb.srv.pid(), sb.sup.pid);
    let who = if uid.is_some() { "nobody" } else { "root" };

    // What the tree got: Landlock capped at 2 (no scopes), the guard asking the supervisor.
    let f = sb.sh("true");
    assert_eq!(f.code, Some(0), "{f:?}");
    let wrap = sb
        .events()
        .into_iter()
        .rev()
        .find(|e| e["type"] == "wrap_init")
        .expect("a wrap_init event");
    assert_eq!(wrap["landlock"]["kernel_abi"], 2, "{wrap}");
    assert_eq!(wrap["landlock"]["max_abi"], 2, "{wrap}");
    assert_eq!(wrap["seccomp"]["signal_guard"], "user_notif", "{wrap}");

    let mut failures = Vec::new();
    for (name, cmd) in attempts(server, daemon) {
        let f = sb.spawn(&Spawn::argv(&[
            "/bin/sh",
            "-c",
            &format!("({cmd}); echo RC=$?"),
        ]));
        let rc = f
            .stdout
            .lines()
            .find_map(|l| l.strip_prefix("RC="))
            .map(str::trim)
            .map(String::from);
        if rc.as_deref() == Some("0") || rc.is_none() {
            failures.push(format!("[{who}] {name}: did not fail: {f:?}"));
        }
        if !f.stderr.contains("not permitted")
            && !f.stderr.contains("PermissionError")
            && !f.stderr.contains("AssertionError: 1")
        {
            failures.push(format!("[{who}] {name}: no EPERM in stderr: {f:?}"));
        }
        // Still there, still running (a SIGSTOP would show as state T).
        for (what, pid) in [("server", server), ("daemon", daemon)] {
            let state = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            let st = state
                .rsplit_once(')')
                .and_then(|(_, r)| r.trim_start().chars().next());
            if !matches!(st, Some('S' | 'R' | 'D')) {
                failures.push(format!(
                    "[{who}] {name}: the {what} is no longer running (state {st:?})"
                ));
            }
        }
    }
    // Every refusal the supervisor made is audited as a signal event.
    let signals: Vec<Value> = sb
        .events()
        .into_iter()
        .filter(|e| e["type"] == "signal")
        .collect();
    if !signals
        .iter()
        .any(|e| e["target"] == server as i64 && e["decision"] == "deny")
    {
        failures.push(format!(
            "[{who}] no audited refusal of a signal to the server: {signals:?}"
        ));
    }
    // The tree's own processes can still be signalled; the server still supervises.
    let f = sb.sh("sleep 30 & kill $! && wait $!; echo child=$?; kill -0 $$ && echo self=ok");
    if !f.stdout.contains("child=143") || !f.stdout.contains("self=ok") {
        failures.push(format!("[{who}] signals inside the tree broke: {f:?}"));
    }
    let f = sb.sh("(su -c true root >/dev/null 2>&1); echo rc=$?");
    if !f.stdout.contains("rc=126") {
        failures.push(format!("[{who}] the server no longer supervises: {f:?}"));
    }
    assert!(
        failures.is_empty(),
        "{}\nserver log:\n{}",
        failures.join("\n"),
        sb.srv.log()
    );
}

#[test]
fn signals_to_the_server_and_the_sdk_daemon_fail_at_landlock_abi_2_as_root() {
    if !require_root("signals_to_the_server_and_the_sdk_daemon_fail_at_landlock_abi_2_as_root") {
        return;
    }
    run_at_abi_2(None);
}

#[test]
fn signals_to_the_server_and_the_sdk_daemon_fail_at_landlock_abi_2_as_nobody() {
    if !require_root("signals_to_the_server_and_the_sdk_daemon_fail_at_landlock_abi_2_as_nobody") {
        return;
    }
    run_at_abi_2(Some(NOBODY));
}
