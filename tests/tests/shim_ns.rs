//! The shim as `/bin/sh` in a private mount namespace, without a server:
//! transparency of the exec path, the fall-through rows of the decision
//! table, and shim.conf trust. Needs root (skips outside CI otherwise).

// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

use agentsh_tests::ns::{host_sh_fingerprint, Namespace};
use agentsh_tests::server::{require_root, TestServer, TCP_WRAP_INIT};

/// A loopback URL where nothing listens.
const DEAD_SERVER: &str = "http://127.0.0.1:1";

fn stdout(o: &std::process::Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &std::process::Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn installing_in_a_namespace_leaves_this_machines_sh_untouched() {
    if !require_root("installing_in_a_namespace_leaves_this_machines_sh_untouched") {
        return;
    }
    let before = host_sh_fingerprint();
    {
        let ns = Namespace::new();
        let out = ns.install_shim(true);
        assert!(out.contains("/bin/sh: now agentsh-shell-shim"), "{out}");
        let again = ns.install_shim(true);
        assert!(again.contains("nothing to do"), "{again}");
        let st = ns.run(
            &[
                &agentsh_tests::server::bin("agentsh").to_string_lossy(),
                "shim",
                "status",
            ],
            &[],
        );
        assert!(st.status.success(), "{}{}", stdout(&st), stderr(&st));
        ns.configure(DEAD_SERVER, "off");
        let o = ns.run(&["/bin/sh", "-c", "echo ok"], &[]);
        assert_eq!(stdout(&o), "ok\n");
    }
    assert_eq!(host_sh_fingerprint(), before);
}

#[test]
fn the_real_shell_runs_as_the_same_pid_with_comm_sh() {
    if !require_root("the_real_shell_runs_as_the_same_pid_with_comm_sh") {
        return;
    }
    let ns = Namespace::new();
    ns.install_shim(true);
    ns.configure(DEAD_SERVER, "off");
    let o = ns.run(&["/bin/sh", "-c", "cat /proc/$$/comm; echo $0"], &[]);
    assert_eq!(stdout(&o), "sh\n/bin/sh\n", "{}", stderr(&o));
    let o = ns.run(
        &[
            "/bin/bash",
            "-c",
            "cat /proc/$$/comm; echo $BASH_VERSION | cut -c1",
        ],
        &[],
    );
    assert_eq!(stdout(&o).lines().next(), Some("bash"), "{}", stderr(&o));
}

#[test]
fn sigpipe_keeps_its_default_so_yes_head_ends() {
    if !require_root("sigpipe_keeps_its_default_so_yes_head_ends") {
        return;
    }
    let ns = Namespace::new();
    ns.install_shim(false);
    ns.configure(DEAD_SERVER, "auto");
    // `yes` ends only if SIGPIPE kills it; if it did not, timeout would
    // (status 124). The limit is generous: this checks an outcome, not a time.
    let o = ns.run(
        &[
            "/usr/bin/timeout",
            "120",
            "/bin/sh",
            "-c",
            "yes | head -1; grep SigIgn /proc/$$/status",
        ],
        &[],
    );
    assert_ne!(o.status.code(), Some(124), "yes | head -1 did not end");
    let out = stdout(&o);
    assert!(out.starts_with("y\nSigIgn:"), "{out}{}", stderr(&o));
    // The shell under the shim ignores exactly what the real shell started
    // the same way ignores: the shim hands the dispositions through. Same
    // way means through `timeout` too (it changes dispositions of its own),
    // so the comparison holds whatever this test inherited (nohup: SIGHUP).
    let direct = ns.run(
        &[
            "/usr/bin/timeout",
            "120",
            "/usr/lib/agentsh/shells/sh",
            "-c",
            "grep SigIgn /proc/$$/status",
        ],
        &[],
    );
    assert_eq!(out.lines().nth(1), stdout(&direct).lines().next());
    let mask =
        u64::from_str_radix(out.lines().nth(1).unwrap().split('\t').nth(1).unwrap(), 16).unwrap();
    assert_eq!(
        mask & (1 << (libc::SIGPIPE - 1)),
        0,
        "SIGPIPE ignored: {out}"
    );
}

#[test]
fn server_down_in_auto_runs_the_command_and_logs_a_warning() {
    if !require_root("server_down_in_auto_runs_the_command_and_logs_a_warning") {
        return;
    }
    let ns = Namespace::new();
    ns.install_shim(false);
    ns.configure(DEAD_SERVER, "auto");
    let (o, log) = ns.run_logged(&["/bin/sh", "-c", "echo ran; exit 7"], &[]);
    assert_eq!(o.status.code(), Some(7));
    assert_eq!(stdout(&o), "ran\n");
    assert_eq!(
        stderr(&o),
        "",
        "the warning must not reach the command's output"
    );
    assert!(
        log.contains("UNSUPERVISED") && log.contains("wrap-init unreachable"),
        "{log}"
    );
}

#[test]
fn server_down_in_on_exits_126_with_the_hint() {
    if !require_root("server_down_in_on_exits_126_with_the_hint") {
        return;
    }
    let ns = Namespace::new();
    ns.install_shim(false);
    ns.configure(DEAD_SERVER, "on");
    let o = ns.run(&["/bin/sh", "-c", "echo must-not-run"], &[]);
    assert_eq!(o.status.code(), Some(126));
    assert_eq!(stdout(&o), "");
    let err = stderr(&o);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.starts_with("agentsh-shell-shim: wrap-init unreachable"),
        "{err}"
    );
    assert!(
        err.contains("shim_install=on refuses to run unsupervised"),
        "{err}"
    );
}

#[test]
fn env_off_under_conf_on_is_ignored() {
    if !require_root("env_off_under_conf_on_is_ignored") {
        return;
    }
    let ns = Namespace::new();
    ns.install_shim(false);
    ns.configure(DEAD_SERVER, "on");
    let o = ns.run(
        &["/bin/sh", "-c", "echo must-not-run"],
        &[("AGENTSH_SHIM_INSTALL", "off")],
    );
    assert_eq!(o.status.code(), Some(126), "{}", stdout(&o));
    // ... while the environment may strengthen auto to on.
    ns.configure(DEAD_SERVER, "auto");
    let o = ns.run(
        &["/bin/sh", "-c", "echo must-not-run"],
        &[("AGENTSH_SHIM_INSTALL", "on")],
    );
    assert_eq!(o.status.code(), Some(126), "{}", stdout(&o));
}

#[test]
fn group_writable_shim_conf_is_distrusted() {
    if !require_root("group_writable_shim_conf_is_distrusted") {
        return;
    }
    let ns = Namespace::new();
    ns.install_shim(false);
    // It says off; a file others could have written must not weaken anything.
    ns.write_shim_conf(&format!("shim_install=off\nserver={DEAD_SERVER}\n"), 0o664);
    let o = ns.run(&["/bin/sh", "-c", "echo must-not-run"], &[]);
    assert_eq!(o.status.code(), Some(126), "{}", stdout(&o));
    let err = stderr(&o);
    assert!(err.contains("writable by group or others"), "{err}");
}

#[test]
fn invalid_shim_conf_value_refuses_naming_file_line_and_values() {
    if !require_root("invalid_shim_conf_value_refuses_naming_file_line_and_values") {
        return;
    }
    let ns = Namespace::new();
    ns.install_shim(false);
    ns.write_shim_conf("# comment\nshim_install=yes\n", 0o644);
    let o = ns.run(&["/bin/sh", "-c", "echo must-not-run"], &[]);
    assert_eq!(o.status.code(), Some(126));
    let err = stderr(&o);
    assert!(
        err.contains("/etc/agentsh/shim.conf line 2") && err.contains("auto, on, off"),
        "{err}"
    );
}

/// An operator's `http://` server (wrap-init over TCP, `server.http.wrap_init`)
/// works through the shim's own small client: supervised, refusals included.
#[test]
fn wrap_init_over_tcp_supervises_the_shell() {
    if !require_root("wrap_init_over_tcp_supervises_the_shell") {
        return;
    }
    let ns = Namespace::new();
    let srv = TestServer::start_with(
        std::path::Path::new("/run/agentsh-tests"),
        "name: tcp\ndefault: allow\ncommand_rules:\n  - name: no-curl\n    commands: [curl]\n    decision: deny\n",
        TCP_WRAP_INIT,
        |p| ns.command(p),
    );
    ns.install_shim(false);
    ns.configure(&format!("http://{}", srv.addr), "on");
    let ok = ns.run(&["/bin/sh", "-c", "echo supervised"], &[]);
    assert_eq!(stdout(&ok), "supervised\n", "{}", stderr(&ok));
    let denied = ns.run(&["/bin/sh", "-c", "true; curl --version"], &[]);
    assert_ne!(denied.status.code(), Some(0), "{}", stdout(&denied));
    let events = srv.exec_events("default");
    assert!(
        events
            .iter()
            .any(|e| e["decision"] == "deny"
                && e["filename"].as_str().unwrap_or("").ends_with("curl")),
        "{events:?}"
    );
}

/// Where the server resolves paths as the shell does (both in one mount
/// namespace, as in a container), it builds the tree's Landlock ruleset
/// while the shim loads its filter and sends it with the ACK; the shim only
/// enforces it. What the policy allows holds, what it does not is refused
/// (a parent's `/proc` entry too: `/proc/self` is the shell's own), and no
/// fd of it reaches the shell. With
/// the server outside the namespace (every other test here), the shim
/// builds its own: the server never builds for a view it does not share.
#[test]
fn the_ruleset_the_server_builds_ahead_is_the_trees_own() {
    if !require_root("the_ruleset_the_server_builds_ahead_is_the_trees_own") {
        return;
    }
    let policy = r#"
name: ahead
default: allow
file_rules:
  - {name: everything-readable, paths: ["/**"], operations: [read, execute], decision: allow}
  - {name: scratch, paths: ["/tmp/**", "/dev/null", "/proc/self/**"], operations: [write, create, delete], decision: allow}
"#;
    let script = "f=/tmp/agentsh-ahead-$$; echo x > $f && rm $f && echo tmp-writable; \
                  (echo x > /etc/agentsh-ahead-probe) 2>/dev/null || echo etc-refused; \
                  (echo x > /proc/$PPID/comm) 2>/dev/null || echo parent-refused; \
                  echo anon=$(ls -l /proc/$$/fd | grep -c anon_inode)";
    for inside in [false, true] {
        let ns = Namespace::new();
        let srv = if inside {
            TestServer::start_with(
                std::path::Path::new("/run/agentsh-tests"),
                policy,
                "",
                |p| ns.command(p),
            )
        } else {
            TestServer::start(policy, "")
        };
        ns.install_shim(false);
        ns.configure(&srv.url, "on");
        let (o, log) = ns.run_logged(&["/bin/sh", "-c", script], &[]);
        let out = stdout(&o);
        assert!(o.status.success(), "{out}{}\n{log}", stderr(&o));
        for want in [
            "tmp-writable\n",
            "etc-refused\n",
            "parent-refused\n",
            "anon=0\n",
        ] {
            assert!(
                out.contains(want),
                "inside={inside}: {want:?} in {out:?}\n{log}"
            );
        }
        assert_eq!(
            log.contains("landlock: the server's ruleset"),
            inside,
            "inside={inside}: {log}"
        );
        assert!(
            !std::path::Path::new("/etc/agentsh-ahead-probe").exists(),
            "the probe reached this machine's /etc"
        );
    }
}
