//! End-to-end: starting the server without a service manager (`agentsh
//! ready`, `agentsh entrypoint`), and the generated man pages and completions.

// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

use agentsh_tests::server::{
    bin, free_port, server_base, with_private_marker_dir, TempDir, TestServer,
};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A config for a server of our own, its socket and files under `dir`.
fn config(dir: &TempDir) -> (std::path::PathBuf, String) {
    let socket = dir.path().join("run").join("api.sock");
    let text = format!(
        "server:\n  socket: {}\nstate_dir: {}\naudit:\n  jsonl: {}\nwrapper_binary: {}\n",
        socket.display(),
        dir.path().join("state").display(),
        dir.path().join("audit.jsonl").display(),
        bin("agentsh-unixwrap").display(),
    );
    let path = dir.path().join("config.yaml");
    std::fs::write(&path, text).unwrap();
    (path, format!("unix:{}", socket.display()))
}

fn answers(url: &str) -> bool {
    Command::new(bin("agentsh"))
        .args(["ready", "--server-only", "--server", url, "--timeout", "0"])
        .output()
        .is_ok_and(|o| o.status.success())
}

/// Waits (generously: this is not a timing assertion) for `cond`.
fn eventually(what: &str, cond: impl Fn() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline {
        if cond() {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("never happened: {what}");
}

fn wait_exit(child: &mut Child) -> std::process::ExitStatus {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(st) = child.try_wait().unwrap() {
            return st;
        }
        assert!(Instant::now() < deadline, "the entrypoint did not exit");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The pids of `pid`'s children.
/// The children of every thread of `pid` (a child started by a thread is
/// listed under that thread).
fn children(pid: u32) -> Vec<u32> {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    tasks
        .flatten()
        .flat_map(|t| {
            std::fs::read_to_string(t.path().join("children"))
                .unwrap_or_default()
                .split_whitespace()
                .filter_map(|p| p.parse().ok())
                .collect::<Vec<u32>>()
        })
        .collect()
}

fn comm(pid: u32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .unwrap_or_default()
        .trim()
        .to_string()
}

#[test]
fn ready_waits_for_a_server_and_fails_with_a_reason_without_one() {
    let srv = TestServer::start("name: p\ndefault: allow\n", "");
    let ok = Command::new(bin("agentsh"))
        .args([
            "ready",
            "--server-only",
            "--server",
            &srv.url,
            "--timeout",
            "5",
        ])
        .output()
        .unwrap();
    assert!(
        ok.status.success(),
        "{}",
        String::from_utf8_lossy(&ok.stderr)
    );
    // Without --server-only, ready starts a shell as an SDK would: here
    // /bin/sh is the machine's own shell, not agentsh's shim, so that shell
    // runs unsupervised, and ready says so (exit 1).
    let probe = Command::new(bin("agentsh"))
        .args(["ready", "--server", &srv.url, "--timeout", "5"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&probe.stderr);
    assert_eq!(probe.status.code(), Some(1), "{err}");
    assert!(
        err.contains("the agentsh server is up, but a shell started here runs UNSUPERVISED"),
        "{err}"
    );

    // --config: the address a server config gives.
    let dir = TempDir::new_in(&server_base(), "readycfg");
    let cfg = dir.path().join("config.yaml");
    std::fs::write(
        &cfg,
        format!("server:\n  socket: {}\n", srv.socket.display()),
    )
    .unwrap();
    let ok = Command::new(bin("agentsh"))
        .args(["ready", "--server-only", "--timeout", "5", "--config"])
        .arg(&cfg)
        .output()
        .unwrap();
    assert!(
        ok.status.success(),
        "{}",
        String::from_utf8_lossy(&ok.stderr)
    );
    let other = dir
        .path()
        .join("nobody")
        .join("api.sock")
        .display()
        .to_string();
    std::fs::write(&cfg, format!("server:\n  socket: {other}\n")).unwrap();
    let bad = Command::new(bin("agentsh"))
        .args(["ready", "--timeout", "0.2", "--config"])
        .arg(&cfg)
        .output()
        .unwrap();
    assert_eq!(bad.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&bad.stderr).contains(&other));

    let nobody = format!("http://127.0.0.1:{}", free_port());
    // (TCP: an operator's listener; nothing answers there either.)
    let bad = Command::new(bin("agentsh"))
        .args(["ready", "--server", &nobody, "--timeout", "0.3"])
        .output()
        .unwrap();
    assert_eq!(bad.status.code(), Some(1));
    let err = String::from_utf8_lossy(&bad.stderr);
    assert!(
        err.contains("did not answer /healthz as ready within 0.3s"),
        "{err}"
    );
    assert!(bad.stdout.is_empty());
}

#[test]
fn entrypoint_runs_the_command_once_ready_and_returns_its_status() {
    let dir = TempDir::new_in(&server_base(), "ep");
    let (cfg, url) = config(&dir);
    // The command itself checks, with a single probe, that the server
    // already answers when it starts; then exits 7.
    let probe = format!(
        "{} ready --server-only --server {url} --timeout 0 && exit 7",
        bin("agentsh").display()
    );
    let out = with_private_marker_dir(bin("agentsh"))
        .arg("entrypoint")
        .arg("--config")
        .arg(&cfg)
        .args(["--", "/bin/sh", "-c", &probe])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(7),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The entrypoint stopped its server before exiting.
    assert!(!answers(&url), "the server outlived the entrypoint");

    let missing = with_private_marker_dir(bin("agentsh"))
        .arg("entrypoint")
        .arg("--config")
        .arg(&cfg)
        .args(["--", "/nonexistent/envd"])
        .output()
        .unwrap();
    assert_eq!(missing.status.code(), Some(127));
    assert!(String::from_utf8_lossy(&missing.stderr).contains("cannot run /nonexistent/envd"));
    assert!(!answers(&url));
}

#[test]
fn entrypoint_fails_when_the_server_cannot_start() {
    let dir = TempDir::new_in(&server_base(), "epbad");
    let cfg = dir.path().join("config.yaml");
    std::fs::write(&cfg, "policy: /nonexistent/policy.yaml\n").unwrap();
    let marker = dir.path().join("ran");
    let out = with_private_marker_dir(bin("agentsh"))
        .arg("entrypoint")
        .arg("--config")
        .arg(&cfg)
        .args(["--", "/usr/bin/touch"])
        .arg(&marker)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("exited during start-up"), "{err}");
    assert!(!marker.exists(), "the command ran without a server");
}

/// Every process below `pid`.
fn descendants(pid: u32) -> Vec<u32> {
    let mut out = Vec::new();
    let mut todo = vec![pid];
    while let Some(p) = todo.pop() {
        for c in children(p) {
            out.push(c);
            todo.push(c);
        }
    }
    out
}

#[test]
fn entrypoint_runs_the_command_below_the_server_forwards_sigterm_and_restarts_both() {
    let dir = TempDir::new_in(&server_base(), "epsig");
    let (cfg, url) = config(&dir);
    let mut ep = with_private_marker_dir(bin("agentsh"))
        .arg("entrypoint")
        .arg("--config")
        .arg(&cfg)
        .args(["--", "/bin/sleep", "600"])
        .stdin(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let sleep_of = |ep: u32| descendants(ep).into_iter().find(|p| comm(*p) == "sleep");
    eventually("the command started", || sleep_of(ep.id()).is_some());
    assert!(answers(&url), "the command ran before the server answered");
    let server = children(ep.id())
        .into_iter()
        .find(|p| comm(*p) == "agentsh")
        .expect("the server is the entrypoint's child");
    let first = sleep_of(ep.id()).unwrap();
    // The command descends from the server (through its reaper), so a
    // server without CAP_SYS_PTRACE can read every shell it starts.
    assert!(
        descendants(server).contains(&first),
        "the command is not below the server"
    );

    // A server that dies is started again, and the command with it: the
    // old one and everything below it are gone.
    // SAFETY: plain kill(2) of our grandchild.
    unsafe { libc::kill(server as i32, libc::SIGKILL) };
    eventually("a new server and a new command", || {
        children(ep.id())
            .iter()
            .any(|p| comm(*p) == "agentsh" && *p != server)
            && answers(&url)
            && sleep_of(ep.id()).is_some_and(|s| s != first)
    });
    eventually("the old command is gone", || {
        !std::path::Path::new(&format!("/proc/{first}")).exists() || comm(first) != "sleep"
    });

    // SIGTERM goes to the command; its death ends the entrypoint.
    // SAFETY: plain kill(2) of our child.
    unsafe { libc::kill(ep.id() as i32, libc::SIGTERM) };
    let st = wait_exit(&mut ep);
    assert_eq!(st.code(), Some(128 + libc::SIGTERM));
    assert!(!answers(&url), "the server outlived the entrypoint");
    let mut err = String::new();
    std::io::Read::read_to_string(ep.stderr.as_mut().unwrap(), &mut err).unwrap();
    assert!(err.contains("starting both again"), "{err}");
}

#[test]
fn man_pages_and_completions_cover_every_subcommand() {
    let dir = TempDir::new("man");
    let out = Command::new(bin("agentsh"))
        .args(["man", "--dir"])
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let help = Command::new(bin("agentsh")).arg("--help").output().unwrap();
    let help = String::from_utf8_lossy(&help.stdout).to_string();
    // Every subcommand `agentsh --help` lists has a page, and its options are in it.
    let subs: Vec<&str> = help
        .lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        // continuation lines of a wrapped description are indented further
        .filter(|l| !l.starts_with("   "))
        .filter_map(|l| l.split_whitespace().next())
        .filter(|s| *s != "help")
        .collect();
    assert!(subs.len() >= 9, "{help}");
    for s in &subs {
        let page = std::fs::read_to_string(dir.path().join(format!("agentsh-{s}.1")))
            .unwrap_or_else(|e| panic!("agentsh-{s}.1: {e}"));
        assert!(
            page.starts_with(".ie") || page.contains(".TH"),
            "{s}: {page}"
        );
    }
    let server = std::fs::read_to_string(dir.path().join("agentsh-server.1")).unwrap();
    assert!(server.contains("print\\-config") || server.contains("print-config"));
    // The server's page reads at 80 columns: no line wider, and every
    // config key starts a paragraph of its own (issue 24: the key table
    // was mangled below about 110 columns).
    let shown = Command::new("man")
        .args(["-l"])
        .arg(dir.path().join("agentsh-server.1"))
        .env("MANWIDTH", "80")
        .env("MAN_KEEP_FORMATTING", "0")
        .env("PAGER", "cat")
        .output()
        .expect("man (tests/setup.sh installs man-db)");
    // Overstrike (bold "a\ba", underline "_\ba") read as the letter, as
    // `col -b` does.
    let mut text = String::new();
    for ch in String::from_utf8_lossy(&shown.stdout).chars() {
        if ch == '\u{8}' {
            text.pop();
        } else {
            text.push(ch);
        }
    }
    let wide: Vec<&str> = text.lines().filter(|l| l.chars().count() > 80).collect();
    assert!(wide.is_empty(), "lines over 80 columns: {wide:#?}");
    for key in [
        "server.socket",
        "audit.on_failure",
        "audit.otlp.endpoint",
        "egress.compat",
        "execve.approval_timeout_action",
    ] {
        assert!(
            // Justified: words may be more than one space apart.
            text.lines().any(|l| l
                .split_whitespace()
                .collect::<Vec<_>>()
                .join(" ")
                .starts_with(&format!("{key} (default:"))),
            "{key} does not start a paragraph:\n{text}"
        );
    }
    assert!(dir.path().join("agentsh-shim-install.1").exists());
    // Only pages that ship are named: no agentsh-help(1), no page for the
    // hidden reaper (issue 24).
    for e in std::fs::read_dir(dir.path()).unwrap() {
        let page = std::fs::read_to_string(e.unwrap().path()).unwrap();
        assert!(
            !page.contains("agentsh\\-help"),
            "a page names agentsh-help"
        );
    }
    assert!(!dir.path().join("agentsh-reaper.1").exists());

    let bash = Command::new(bin("agentsh"))
        .args(["completions", "bash"])
        .output()
        .unwrap();
    assert!(bash.status.success());
    let script = String::from_utf8_lossy(&bash.stdout);
    for s in &subs {
        assert!(script.contains(s), "bash completion lacks {s}");
    }
    // The script is valid bash.
    let check = Command::new("bash")
        .arg("-n")
        .stdin(Stdio::piped())
        .spawn()
        .and_then(|mut c| {
            std::io::Write::write_all(c.stdin.as_mut().unwrap(), &bash.stdout)?;
            drop(c.stdin.take());
            c.wait()
        })
        .unwrap();
    assert!(check.success());
}
