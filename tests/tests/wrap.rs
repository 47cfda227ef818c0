//! `agentsh wrap -- CMD` (issue 25), standalone, on the real kernel, as an
//! ordinary user (nobody) and as root: no `/bin/sh` replaced, no server
//! started by anyone but wrap itself.
//!
//! * A fake agent (python) runs `sh -c "curl --version"` from 8 threads and
//!   `git status`: each curl exits 126, audited with its rule and depth; git
//!   runs; wrap exits with the agent's status (and 128+N for a signal).
//! * The tree cannot stop its supervisor although they share a uid: `kill
//!   -9` and `kill -STOP` of the server and of its parent, `ptrace` attach,
//!   a write to the audit file and a connection to the approval socket each
//!   fail; the supervisor killed from outside, the next exec fails and wrap
//!   exits 126 with the reason.
//! * The agent keeps wrap's stdin, stdout and stderr (the server's own go to
//!   its log); wrap run inside a supervised tree refuses (126).

// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

use agentsh_tests::server::{bin, require_root};
use serde_json::Value;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

const NOBODY: u32 = 65534;

/// A home and a workspace of their own for one test, owned by `uid`.
struct Place {
    root: PathBuf,
    uid: Option<u32>,
}

impl Place {
    fn new(name: &str, uid: Option<u32>) -> Place {
        Place::under(Path::new(agentsh_tests::sandbox::SERVER_BASE), name, uid)
    }

    /// Under `base`: agent-default runs programs built in a workspace only
    /// where software lives (`ordinary-locations`: /srv, /home, ...; not
    /// /run, where droppers run).
    fn under(base: &Path, name: &str, uid: Option<u32>) -> Place {
        std::fs::create_dir_all(base).unwrap();
        // One per Place, not per process: this file's tests run on parallel
        // threads of one process, and two of them (root and an ordinary
        // user) make a place of the same name (seen in a loaded run: one's
        // set-up removed the other's home while its server started).
        static PLACES: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = PLACES.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let root = base.join(format!("wrap-{name}-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        for d in ["home", "ws"] {
            std::fs::create_dir_all(root.join(d)).unwrap();
        }
        std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o755)).unwrap();
        for d in [root.join("home"), root.join("ws")] {
            std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o700)).unwrap();
            if let Some(u) = uid {
                std::os::unix::fs::chown(&d, Some(u), Some(u)).unwrap();
            }
        }
        Place { root, uid }
    }

    fn home(&self) -> PathBuf {
        self.root.join("home")
    }

    fn ws(&self) -> PathBuf {
        self.root.join("ws")
    }

    fn audit(&self, session: &str) -> PathBuf {
        self.home()
            .join(format!(".local/state/agentsh/{session}.jsonl"))
    }

    fn log(&self, session: &str) -> String {
        std::fs::read_to_string(
            self.home()
                .join(format!(".local/state/agentsh/{session}.log")),
        )
        .unwrap_or_default()
    }

    fn events(&self, session: &str) -> Vec<Value> {
        std::fs::read_to_string(self.audit(session))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }

    /// `agentsh wrap --session S ARGS -- CMD` as the place's user, from its
    /// workspace, with only a minimal environment.
    fn wrap(&self, session: &str, args: &[&str], cmd: &[&str]) -> Command {
        self.wrap_with(&bin("agentsh"), session, args, cmd)
    }

    /// [`Place::wrap`] with the `agentsh` at `program`.
    fn wrap_with(&self, program: &Path, session: &str, args: &[&str], cmd: &[&str]) -> Command {
        let mut c = match self.uid {
            Some(u) => {
                let mut c = Command::new("setpriv");
                c.arg(format!("--reuid={u}"))
                    .arg(format!("--regid={u}"))
                    .args(["--clear-groups", "--"])
                    .arg(program);
                c
            }
            None => Command::new(program),
        };
        c.arg("wrap")
            .args(["--session", session])
            .args(args)
            .arg("--")
            .args(cmd)
            .current_dir(self.ws())
            .env_clear()
            .env("HOME", self.home())
            .env("PATH", "/usr/local/bin:/usr/bin:/bin")
            .env("LANG", "C.UTF-8");
        // As from a terminal: the stop signals at their defaults, whatever
        // the test suite inherited (nohup ignores SIGHUP, a background job
        // SIGINT and SIGQUIT; an ignored signal never reaches wrap).
        // SAFETY: only signal(2) between fork and exec.
        unsafe {
            std::os::unix::process::CommandExt::pre_exec(&mut c, || {
                for sig in [libc::SIGINT, libc::SIGQUIT, libc::SIGHUP, libc::SIGTERM] {
                    libc::signal(sig, libc::SIG_DFL);
                }
                Ok(())
            });
        }
        c
    }
}

/// `chown -R uid:uid path`.
fn chown_r(path: &Path, uid: u32) {
    let o = Command::new("chown")
        .arg("-R")
        .arg(format!("{uid}:{uid}"))
        .arg(path)
        .output()
        .unwrap();
    assert!(o.status.success(), "{o:?}");
}

impl Drop for Place {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.root);
        // A base of its own (/srv/agentsh-tests), unless another test uses it.
        if let Some(base) = self.root.parent() {
            if base != Path::new(agentsh_tests::sandbox::SERVER_BASE) {
                let _ = std::fs::remove_dir(base);
            }
        }
    }
}

/// Starts `c` with stdout and stderr piped (and `stdin` as its stdin).
fn spawn(c: &mut Command, stdin: Stdio) -> Child {
    c.stdin(stdin)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// Waits for `child` up to `limit`; past it, kills it and fails the test.
fn finish(child: Child, limit: Duration) -> Output {
    let pid = child.id();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    match rx.recv_timeout(limit) {
        Ok(o) => o.unwrap(),
        Err(_) => {
            // SAFETY: kill with integers.
            unsafe { libc::kill(pid as i32, libc::SIGKILL) };
            panic!("agentsh wrap did not finish within {limit:?}");
        }
    }
}

fn run(mut c: Command, limit: Duration) -> Output {
    finish(spawn(&mut c, Stdio::null()), limit)
}

fn text(o: &Output) -> String {
    format!(
        "status {:?}\nstdout:\n{}\nstderr:\n{}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

const AGENT: &str = r#"
import subprocess, sys, threading
codes = []
def one():
    r = subprocess.run(["sh", "-c", "su -c true root >/dev/null 2>&1; echo $?"], capture_output=True, text=True)
    codes.append(r.stdout.strip())
ts = [threading.Thread(target=one) for _ in range(8)]
for t in ts: t.start()
for t in ts: t.join()
print("denied", " ".join(sorted(codes)))
g = subprocess.run(["git", "status", "--porcelain"], capture_output=True, text=True)
print("git", g.returncode)
sys.exit(7)
"#;

fn agent_runs_supervised(uid: Option<u32>) {
    let p = Place::new("agent", uid);
    std::fs::write(p.ws().join("agent.py"), AGENT).unwrap();
    let git = Command::new("git")
        .args(["init", "-q"])
        .arg(p.ws())
        .status()
        .unwrap();
    assert!(git.success());
    if let Some(u) = uid {
        Command::new("chown")
            .args(["-R", &format!("{u}:{u}")])
            .arg(p.ws())
            .status()
            .unwrap();
    }
    let o = run(
        p.wrap("agent", &[], &["python3", "agent.py"]),
        Duration::from_secs(300),
    );
    let out = String::from_utf8_lossy(&o.stdout);
    assert_eq!(o.status.code(), Some(7), "{}\n{}", text(&o), p.log("agent"));
    assert!(
        out.contains(&format!("denied {}", ["126"; 8].join(" "))),
        "{}",
        text(&o)
    );
    assert!(out.contains("git 0"), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("session agent ended:") && err.contains("agent.jsonl"),
        "the session report: {}",
        text(&o)
    );
    let events = p.events("agent");
    let curls: Vec<&Value> = events
        .iter()
        .filter(|e| e["type"] == "execve" && e["argv"][0] == "su")
        .collect();
    assert!(curls.len() >= 8, "{curls:?}");
    assert!(
        curls
            .iter()
            .all(|e| e["rule"] == "deny-privilege-escalation"
                && e["decision"] == "deny"
                && e["depth"] == 2
                && e["session_id"] == "agent"),
        "{curls:?}"
    );
    assert!(
        events
            .iter()
            .any(|e| e["type"] == "execve" && e["argv"][0] == "git" && e["decision"] == "allow"),
        "git's exec is audited"
    );
    // The agent itself is the tree's first exec (depth 0).
    assert!(
        events
            .iter()
            .any(|e| e["type"] == "execve" && e["argv"][0] == "python3" && e["depth"] == 0),
        "{events:?}"
    );
}

#[test]
fn wrap_supervises_an_agents_tree_as_an_ordinary_user() {
    if !require_root("wrap_supervises_an_agents_tree_as_an_ordinary_user") {
        return;
    }
    agent_runs_supervised(Some(NOBODY));
}

#[test]
fn wrap_supervises_an_agents_tree_as_root() {
    if !require_root("wrap_supervises_an_agents_tree_as_root") {
        return;
    }
    agent_runs_supervised(None);
}

/// What the tree tries against its own supervisor, which runs as the same
/// user. Each line: `NAME RESULT`; `RESULT` is `refused` or what happened.
const ATTACKS: &str = r#"
import ctypes, os, signal, socket, subprocess, sys
server = int(sys.argv[1]); audit = sys.argv[2]; sock = sys.argv[3]
def attempt(name, f):
    try:
        f()
        print(name, "done")
    except OSError as e:
        print(name, "refused", e.errno)
attempt("kill-9-server", lambda: os.kill(server, signal.SIGKILL))
attempt("stop-server", lambda: os.kill(server, signal.SIGSTOP))
attempt("kill-9-parent", lambda: os.kill(os.getppid(), signal.SIGKILL))
attempt("write-audit", lambda: open(audit, "a").write("{}\n"))
def connect():
    s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    s.connect(sock)
attempt("connect-api", connect)
libc = ctypes.CDLL(None, use_errno=True)
libc.ptrace.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]
def ptrace():
    if libc.ptrace(16, server, None, None) != 0:
        raise OSError(ctypes.get_errno(), "ptrace")
attempt("ptrace-server", ptrace)
import resource
attempt("prlimit-server", lambda: resource.prlimit(server, resource.RLIMIT_NOFILE, (64, 64)))
attempt("renice-server", lambda: os.setpriority(os.PRIO_PROCESS, server, 19))
r = subprocess.run(["sh", "-c", "echo still-supervised; su -c true root >/dev/null 2>&1; echo su=$?"], capture_output=True, text=True)
print(r.stdout.replace("\n", " "))
"#;

/// The server of a running wrap: its pid, found as a child of wrap.
fn server_of(wrap_pid: u32) -> Option<u32> {
    let children =
        std::fs::read_to_string(format!("/proc/{wrap_pid}/task/{wrap_pid}/children")).ok()?;
    children
        .split_whitespace()
        .filter_map(|c| c.parse().ok())
        .find(|c: &u32| {
            std::fs::read(format!("/proc/{c}/cmdline"))
                .is_ok_and(|cl| cl.split(|b| *b == 0).any(|a| a == b"server"))
        })
}

fn tree_cannot_reach(uid: Option<u32>) {
    let p = Place::new("attacks", uid);
    std::fs::write(p.ws().join("attacks.py"), ATTACKS).unwrap();
    // The tree waits for its arguments on a fifo: the server's pid is known
    // only once wrap has started it.
    let fifo = p.ws().join("args");
    let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: a NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o666) }, 0);
    if let Some(u) = uid {
        std::os::unix::fs::chown(&fifo, Some(u), Some(u)).unwrap();
        std::os::unix::fs::chown(p.ws().join("attacks.py"), Some(u), Some(u)).unwrap();
    }
    let mut cmd = p.wrap(
        "attacks",
        &[],
        &["sh", "-c", "exec python3 attacks.py $(cat args)"],
    );
    let child = spawn(&mut cmd, Stdio::null());
    let wrap_pid = child.id();
    let deadline = Instant::now() + Duration::from_secs(60);
    let server = loop {
        if let Some(s) = server_of(wrap_pid) {
            break s;
        }
        assert!(Instant::now() < deadline, "no server below wrap");
        std::thread::sleep(Duration::from_millis(20));
    };
    let sock = std::fs::read_to_string(format!("/proc/{server}/cmdline"))
        .unwrap()
        .split('\0')
        .skip_while(|a| *a != "--config")
        .nth(1)
        .map(|c| std::fs::read_to_string(c).unwrap())
        .and_then(|cfg| {
            cfg.lines()
                .find(|l| l.trim_start().starts_with("socket:"))
                .map(|l| {
                    l.split_once(':')
                        .unwrap()
                        .1
                        .trim()
                        .trim_matches('"')
                        .to_string()
                })
        })
        .unwrap();
    std::fs::write(
        &fifo,
        format!("{server} {} {sock}\n", p.audit("attacks").display()),
    )
    .unwrap();
    let o = finish(child, Duration::from_secs(120));
    let out = String::from_utf8_lossy(&o.stdout).to_string();
    for name in [
        "kill-9-server",
        "stop-server",
        "kill-9-parent",
        "write-audit",
        "connect-api",
        "ptrace-server",
        "prlimit-server",
        "renice-server",
    ] {
        let line = out
            .lines()
            .find(|l| l.starts_with(&format!("{name} ")))
            .unwrap_or_else(|| panic!("{name} missing: {}", text(&o)));
        assert!(
            line.starts_with(&format!("{name} refused")),
            "{line}\n{}",
            text(&o)
        );
    }
    assert!(
        out.contains("still-supervised su=126"),
        "{}\n{}",
        text(&o),
        p.log("attacks")
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
}

#[test]
fn the_tree_cannot_stop_or_reach_its_supervisor_as_an_ordinary_user() {
    if !require_root("the_tree_cannot_stop_or_reach_its_supervisor_as_an_ordinary_user") {
        return;
    }
    tree_cannot_reach(Some(NOBODY));
}

#[test]
fn the_tree_cannot_stop_or_reach_its_supervisor_as_root() {
    if !require_root("the_tree_cannot_stop_or_reach_its_supervisor_as_root") {
        return;
    }
    tree_cannot_reach(None);
}

/// The supervisor killed from outside: the tree's next exec fails, and wrap
/// exits 126 saying why. A signal death passes through as 128+N.
#[test]
fn a_killed_supervisor_ends_the_tree_and_wrap_says_so() {
    if !require_root("a_killed_supervisor_ends_the_tree_and_wrap_says_so") {
        return;
    }
    let p = Place::new("killed", Some(NOBODY));
    let marker = p.ws().join("ran-after");
    let script = format!("read _; /bin/true; touch {}", marker.display());
    let mut cmd = p.wrap("killed", &[], &["sh", "-c", &script]);
    let mut child = spawn(&mut cmd, Stdio::piped());
    let wrap_pid = child.id();
    let deadline = Instant::now() + Duration::from_secs(60);
    let server = loop {
        if let Some(s) = server_of(wrap_pid) {
            // Started: wait for the tree to be under way (its wrap_init).
            if p.events("killed").iter().any(|e| e["type"] == "wrap_init") {
                break s;
            }
        }
        assert!(Instant::now() < deadline, "no supervised tree below wrap");
        std::thread::sleep(Duration::from_millis(20));
    };
    // SAFETY: kill with integers.
    unsafe { libc::kill(server as i32, libc::SIGKILL) };
    // Let the tree go on to its next exec.
    drop(child.stdin.take());
    let o = finish(child, Duration::from_secs(120));
    assert_eq!(o.status.code(), Some(126), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("the supervisor (agentsh server) died"),
        "{}",
        text(&o)
    );
    assert!(
        !marker.exists(),
        "the tree ran on after its supervisor died"
    );

    // A death by signal: 128+N.
    let o = run(
        p.wrap("signal", &["--quiet"], &["sh", "-c", "kill -TERM $$"]),
        Duration::from_secs(120),
    );
    assert_eq!(o.status.code(), Some(128 + libc::SIGTERM), "{}", text(&o));
}

/// Usage errors and refusals: no CMD (2), CMD not found (127), a policy
/// with errors (2, naming the line), wrap inside a supervised tree (126).
#[test]
fn wrap_says_what_is_wrong_and_runs_nothing() {
    if !require_root("wrap_says_what_is_wrong_and_runs_nothing") {
        return;
    }
    let p = Place::new("usage", Some(NOBODY));
    let o = run(p.wrap("u1", &[], &[]), Duration::from_secs(60));
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    let o = run(
        p.wrap("u2", &[], &["no-such-program-here"]),
        Duration::from_secs(60),
    );
    assert_eq!(o.status.code(), Some(127), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("no-such-program-here: command not found"),
        "{}",
        text(&o)
    );
    let bad = p.ws().join("bad.yaml");
    std::fs::write(&bad, "name: bad\ndefault: maybe\n").unwrap();
    std::fs::set_permissions(&bad, std::fs::Permissions::from_mode(0o644)).unwrap();
    let o = run(
        p.wrap("u3", &["--policy", bad.to_str().unwrap()], &["true"]),
        Duration::from_secs(60),
    );
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("bad.yaml"),
        "{}",
        text(&o)
    );
    // Not a directory, an unknown policy: usage (2), nothing run.
    for (args, says) in [
        (vec!["--workspace", "/no/such/dir"], "not a directory"),
        (vec!["--policy", "no-such-policy"], "no-such-policy"),
    ] {
        let o = run(p.wrap("u6", &args, &["true"]), Duration::from_secs(60));
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", text(&o));
        assert!(
            String::from_utf8_lossy(&o.stderr).contains(says),
            "{}",
            text(&o)
        );
    }
    // A server socket that is not root's: not trusted, nothing run.
    let sock = p.ws().join("fake.sock");
    let _fake = std::os::unix::net::UnixListener::bind(&sock).unwrap();
    std::os::unix::fs::chown(&sock, Some(NOBODY), Some(NOBODY)).unwrap();
    let o = run(
        p.wrap(
            "u7",
            &["--server", &format!("unix:{}", sock.display())],
            &["true"],
        ),
        Duration::from_secs(60),
    );
    assert_eq!(o.status.code(), Some(126), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("not trusting the server"),
        "{}",
        text(&o)
    );
    // --allow-host with something that is not a host name: usage, nothing run.
    let o = run(
        p.wrap(
            "u5",
            &["--allow-host", "https://api.example.test/v1"],
            &["true"],
        ),
        Duration::from_secs(60),
    );
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("--allow-host \"https://api.example.test/v1\""),
        "{}",
        text(&o)
    );
    // Inside a supervised tree: refused, not nested (agent-observe: its
    // policy lets the agentsh CLI run, so the refusal is wrap's own).
    let o = run(
        p.wrap(
            "u4",
            &["--quiet", "--policy", "agent-observe"],
            &[
                "sh",
                "-c",
                &format!("{} wrap -- true; echo nested=$?", bin("agentsh").display()),
            ],
        ),
        Duration::from_secs(120),
    );
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("nested=126"), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("wrap is not nested"),
        "{}",
        text(&o)
    );
}

/// An approval the wrapped agent asks for is answered from another
/// terminal by the same user: `agentsh approvals list|approve --session ID`
/// find the standalone wrap's own server.
#[test]
fn an_approval_is_answered_from_another_terminal() {
    if !require_root("an_approval_is_answered_from_another_terminal") {
        return;
    }
    let p = Place::new("approve", Some(NOBODY));
    let policy = p.ws().join("approve.yaml");
    std::fs::write(
        &policy,
        "name: approve-id\ndefault: allow\ncommand_rules:\n  - name: approve-nested-id\n    commands: [id]\n    context: [nested]\n    decision: approve\n",
    )
    .unwrap();
    std::fs::set_permissions(&policy, std::fs::Permissions::from_mode(0o644)).unwrap();
    let mut cmd = p.wrap(
        "ask",
        &["--quiet", "--policy", policy.to_str().unwrap()],
        &["sh", "-c", "id -u; echo rc=$?"],
    );
    let child = spawn(&mut cmd, Stdio::null());
    // The other terminal: the same user, its own environment.
    let approvals = |args: &[&str]| {
        let mut c = Command::new("setpriv");
        c.arg(format!("--reuid={NOBODY}"))
            .arg(format!("--regid={NOBODY}"))
            .args(["--clear-groups", "--"])
            .arg(bin("agentsh"))
            .arg("approvals")
            .args(args)
            .env_clear()
            .env("HOME", p.home())
            .env("PATH", "/usr/bin:/bin");
        c.output().unwrap()
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    let id = loop {
        let o = approvals(&["list", "--session", "ask", "--json"]);
        let id = String::from_utf8_lossy(&o.stdout)
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .find_map(|v| v["id"].as_str().map(str::to_string));
        if let Some(id) = id {
            break id;
        }
        assert!(
            Instant::now() < deadline,
            "no pending approval: {}\n{}",
            text(&o),
            p.log("ask")
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    // `agentsh events --session ID` finds the running wrap's server.
    let events_cmd = || {
        Command::new("setpriv")
            .arg(format!("--reuid={NOBODY}"))
            .arg(format!("--regid={NOBODY}"))
            .args(["--clear-groups", "--"])
            .arg(bin("agentsh"))
            .args(["events", "--session", "ask"])
            .env_clear()
            .env("HOME", p.home())
            .env("PATH", "/usr/bin:/bin")
            .output()
            .unwrap()
    };
    let o = events_cmd();
    assert!(
        o.status.success() && String::from_utf8_lossy(&o.stdout).contains("\"wrap_init\""),
        "events while running: {}",
        text(&o)
    );
    let o = approvals(&["approve", &id, "--session", "ask", "--reason", "looks fine"]);
    assert!(o.status.success(), "{}", text(&o));
    let o = finish(child, Duration::from_secs(120));
    let out = String::from_utf8_lossy(&o.stdout);
    assert_eq!(out, format!("{NOBODY}\nrc=0\n"), "{}", text(&o));
    // Ended: the same command reads its audit file.
    let o = events_cmd();
    assert!(
        o.status.success()
            && String::from_utf8_lossy(&o.stdout)
                .lines()
                .any(|l| l.contains("\"approval_outcome\":\"approved\"")),
        "events after the end: {}",
        text(&o)
    );
    assert!(
        p.events("ask").iter().any(|e| e["type"] == "execve"
            && e["argv"][0] == "id"
            && e["approval_outcome"] == "approved"
            && e["reason"] == "looks fine"),
        "{:?}",
        p.events("ask")
    );
}

/// The agent keeps the terminal: in an interactive bash on a pty, a ^C
/// typed at a wrapped `sleep` ends it (wrap exits 130, the server is not
/// what the ^C reached), and ^Z stops the job, `fg` resumes it.
#[test]
fn the_agent_keeps_the_terminal() {
    if !require_root("the_agent_keeps_the_terminal") {
        return;
    }
    use agentsh_tests::sdk::{Spawn, Supervisor};
    let p = Place::new("pty", None);
    let agentsh = bin("agentsh");
    let typed = format!(
        "cd {ws}\n\
         {a} wrap --quiet --session c1 -- sleep 300\n\x01sleep\x02\x03\x01\
         echo interrupted=$?\n\
         {a} wrap --quiet --session z1 -- sleep 2\n\x01sleep\x02\x1a\x01\
         echo stopped=$?\n\
         fg\n\x01\
         echo resumed=$?\n\
         exit\n",
        ws = p.ws().display(),
        a = agentsh.display()
    );
    let mut sup = Supervisor::start_command(Command::new(bin("sdk-supervisor")));
    let spawn = Spawn {
        pty: true,
        stdin: Some(typed),
        ..Spawn::argv(&["/bin/bash", "--norc", "--noprofile", "-i"])
    }
    .env("HOME", p.home().to_str().unwrap())
    .env("PS1", "$ ");
    let r = sup.spawn(&spawn);
    let f = sup.wait(r, Duration::from_secs(600));
    let out = f.stdout.replace('\r', "");
    assert!(out.contains("interrupted=130"), "{out}\n{}", p.log("c1"));
    assert!(out.contains("stopped=148"), "{out}\n{}", p.log("z1"));
    assert!(out.contains("resumed=0"), "{out}\n{}", p.log("z1"));
}

/// A platform whose seccomp profile refuses `SECCOMP_FILTER_FLAG_NEW_LISTENER`
/// and ptrace: wrap exits 126 with the reason and CMD never runs; with
/// `--allow-unsupervised` CMD runs, and stderr and the audit say so.
#[test]
fn without_a_way_to_supervise_wrap_refuses_unless_told_otherwise() {
    if !require_root("without_a_way_to_supervise_wrap_refuses_unless_told_otherwise") {
        return;
    }
    let p = Place::new("nosup", Some(NOBODY));
    let marker = p.ws().join("ran");
    let script = format!("touch {}", marker.display());
    let outer = |session: &str, args: &[&str]| {
        let inner = p.wrap(session, args, &["sh", "-c", &script]);
        let mut c = Command::new(bin("agentsh-container"));
        c.args(["--profile", "no-supervision", "--"])
            .arg(inner.get_program())
            .args(inner.get_args())
            .current_dir(p.ws())
            .env_clear()
            .envs(inner.get_envs().filter_map(|(k, v)| Some((k, v?))));
        c
    };
    let o = run(outer("refused", &[]), Duration::from_secs(120));
    assert_eq!(o.status.code(), Some(126), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("this host can supervise no exec") && err.contains("sh did not run"),
        "{}",
        text(&o)
    );
    assert!(!marker.exists(), "CMD ran without supervision");
    let o = run(
        outer("allowed", &["--allow-unsupervised"]),
        Duration::from_secs(120),
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("running sh UNSUPERVISED"),
        "{}",
        text(&o)
    );
    assert!(marker.exists(), "CMD did not run");
    assert!(
        p.events("allowed")
            .iter()
            .any(|e| e["type"] == "unsupervised_run"
                && e["argv"][0] == "sh"
                && e["reason"]
                    .as_str()
                    .is_some_and(|r| r.contains("--allow-unsupervised"))),
        "{:?}",
        p.events("allowed")
    );
}

/// Spawns from Go's `os/exec` and node's `child_process.spawnSync` are
/// judged like any other: a nested su exits 126 in both, as nobody.
#[test]
fn go_and_node_spawns_are_supervised_under_wrap() {
    if !require_root("go_and_node_spawns_are_supervised_under_wrap") {
        return;
    }
    let go = ["/usr/bin/go", "/usr/lib/go/bin/go", "/usr/local/go/bin/go"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.is_file());
    let node = ["/usr/bin/node", "/usr/bin/nodejs"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.is_file());
    let ci = std::env::var("CI").as_deref() == Ok("true");
    assert!(
        !ci || go.is_some() && node.is_some(),
        "CI=true: Go and node are needed (tests/setup.sh installs golang-go and nodejs)"
    );
    let p = Place::under(Path::new("/srv/agentsh-tests"), "gonode", Some(NOBODY));
    let mut cmds = Vec::new();
    if let Some(go) = go {
        std::fs::write(
            p.ws().join("main.go"),
            "package main\nimport (\"fmt\"; \"os/exec\")\nfunc main() {\n\terr := exec.Command(\"sh\", \"-c\", \"su -c true root >/dev/null 2>&1\").Run()\n\tcode := 0\n\tif e, ok := err.(*exec.ExitError); ok { code = e.ExitCode() }\n\tfmt.Println(\"go\", code)\n}\n",
        )
        .unwrap();
        let build = Command::new(go)
            .args(["build", "-o"])
            .arg(p.ws().join("gospawn"))
            .arg(p.ws().join("main.go"))
            .env("GOCACHE", p.root.join("gocache"))
            .env("GOPATH", p.root.join("gopath"))
            .env("HOME", p.root.join("gohome"))
            .env("CGO_ENABLED", "0")
            .env("GOFLAGS", "-mod=mod")
            .env("GOTOOLCHAIN", "local")
            .output()
            .unwrap();
        assert!(build.status.success(), "go build: {}", text(&build));
        std::os::unix::fs::chown(p.ws().join("gospawn"), Some(NOBODY), Some(NOBODY)).unwrap();
        cmds.push(("go 126", "./gospawn".to_string()));
    }
    if node.is_some() {
        cmds.push((
            "node 126",
            "node -e 'const r = require(\"child_process\").spawnSync(\"sh\", [\"-c\", \"su -c true root >/dev/null 2>&1\"]); console.log(\"node\", r.status)'"
                .to_string(),
        ));
    }
    for (want, cmd) in cmds {
        let o = run(
            p.wrap("gonode", &["--quiet"], &["sh", "-c", &cmd]),
            Duration::from_secs(300),
        );
        assert!(
            String::from_utf8_lossy(&o.stdout).contains(want),
            "{cmd}: {}\n{}\n{:?}",
            text(&o),
            p.log("gonode"),
            p.events("gonode")
                .iter()
                .filter(|e| e["decision"] == "deny")
                .collect::<Vec<_>>()
        );
    }
}

/// Server mode: `--server unix:/PATH` makes the tree the server's (its
/// policy, its audit), as root and as nobody.
#[test]
fn wrap_on_a_server_takes_its_policy_and_audit() {
    if !require_root("wrap_on_a_server_takes_its_policy_and_audit") {
        return;
    }
    let srv = agentsh_tests::server::TestServer::start(agentsh_tests::sandbox::AGENT_DEFAULT, "");
    // The machine's shim.conf names the wrapper wrap may run (as for the
    // shim): a namespace's own /etc.
    let ns = agentsh_tests::ns::Namespace::new();
    ns.configure(&srv.url, "on");
    for uid in [None, Some(NOBODY)] {
        let p = Place::new("onserver", uid);
        let inner = p.wrap(
            "default",
            &["--quiet", "--server", &srv.url],
            &[
                "sh",
                "-c",
                "su -c true root >/dev/null 2>&1; echo rc=$?; exit 5",
            ],
        );
        let mut c = ns.command_in(inner.get_program(), p.ws().to_str().unwrap());
        c.args(inner.get_args())
            .env_clear()
            .envs(inner.get_envs().filter_map(|(k, v)| Some((k, v?))));
        let o = run(c, Duration::from_secs(120));
        assert_eq!(o.status.code(), Some(5), "{uid:?}: {}", text(&o));
        assert!(
            String::from_utf8_lossy(&o.stdout).contains("rc=126"),
            "{uid:?}: {}",
            text(&o)
        );
        assert!(
            !p.audit("default").exists(),
            "server mode wrote an audit of its own"
        );
    }
    let curls: Vec<Value> = srv
        .events("default")
        .into_iter()
        .filter(|e| e["type"] == "execve" && e["argv"][0] == "su")
        .collect();
    assert!(
        curls.len() >= 2
            && curls
                .iter()
                .all(|e| e["rule"] == "deny-privilege-escalation" && e["session_id"] == "default"),
        "{curls:?}"
    );
}

/// SIGTERM, SIGHUP and SIGINT sent to wrap by a process (not typed at a
/// terminal) are passed to the agent: it dies of the signal, wrap exits
/// 128+N.
#[test]
fn signals_sent_to_wrap_reach_the_agent() {
    if !require_root("signals_sent_to_wrap_reach_the_agent") {
        return;
    }
    let p = Place::new("sig", Some(NOBODY));
    for sig in [libc::SIGTERM, libc::SIGHUP, libc::SIGINT] {
        let session = format!("sig{sig}");
        let mut cmd = p.wrap(&session, &["--quiet"], &["sleep", "300"]);
        let child = spawn(&mut cmd, Stdio::null());
        let wrap_pid = child.id();
        // Once the agent runs (its exec audited), signal wrap.
        let deadline = Instant::now() + Duration::from_secs(60);
        while !p
            .events(&session)
            .iter()
            .any(|e| e["type"] == "execve" && e["argv"][0] == "sleep")
        {
            assert!(Instant::now() < deadline, "the agent never started");
            std::thread::sleep(Duration::from_millis(20));
        }
        // SAFETY: kill with integers.
        unsafe { libc::kill(wrap_pid as i32, sig) };
        let o = finish(child, Duration::from_secs(120));
        assert_eq!(
            o.status.code(),
            Some(128 + sig),
            "signal {sig}: {}",
            text(&o)
        );
    }
}

/// A datagram whose sockaddr's family is `AF_UNSPEC` (IPv4 UDP sends it as
/// `AF_INET`) is judged as the address it holds under `agentsh wrap` with
/// agent-default: cloud metadata refused and audited by its rule, as an
/// ordinary user (the tree and the server share a uid).
#[test]
fn wrap_judges_a_datagram_sent_with_af_unspec() {
    if !require_root("wrap_judges_a_datagram_sent_with_af_unspec") {
        return;
    }
    let p = Place::new("unspec", Some(NOBODY));
    std::fs::write(
        p.ws().join("unspec.py"),
        r#"
import ctypes, socket, struct
libc = ctypes.CDLL(None, use_errno=True)
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
addr = struct.pack("=H", 0) + struct.pack("!H", 80) + socket.inet_aton("169.254.169.254") + bytes(8)
r = libc.sendto(s.fileno(), b"secret", 6, 0, addr, len(addr))
print("unspec", "REFUSED" if r < 0 else "SENT", ctypes.get_errno() if r < 0 else r)
"#,
    )
    .unwrap();
    Command::new("chown")
        .args(["-R", &format!("{NOBODY}:{NOBODY}")])
        .arg(p.ws())
        .status()
        .unwrap();
    let o = run(
        p.wrap("unspec", &[], &["python3", "unspec.py"]),
        Duration::from_secs(120),
    );
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.contains(&format!("unspec REFUSED {}", libc::EACCES)),
        "{}\n{}",
        text(&o),
        p.log("unspec")
    );
    let events = p.events("unspec");
    assert!(
        events.iter().any(|e| e["type"] == "connect"
            && e["ip"] == "169.254.169.254"
            && e["port"] == 80
            && e["protocol"] == "udp"
            && e["decision"] == "deny"
            && e["rule"] == "no-cloud-metadata"),
        "{events:?}"
    );
}

/// Under `agentsh wrap` (an ordinary user: no mount namespace, no `noexec`)
/// with `exec_memory: deny` and `exec_sources: {writable: deny}`: a library
/// the tree copied into its workspace is not loaded, a program image is not
/// mapped by hand, and an installed library still loads.
#[test]
fn wrap_judges_files_mapped_executable() {
    if !require_root("wrap_judges_files_mapped_executable") {
        return;
    }
    let p = Place::new("maps", Some(NOBODY));
    let policy = p.ws().join("maps.yaml");
    std::fs::write(
        &policy,
        format!(
            "{}\nexec_memory: deny\nexec_sources:\n  writable: deny\n",
            agentsh_tests::sandbox::AGENT_DEFAULT.replacen("name: agent-default", "name: maps", 1)
        ),
    )
    .unwrap();
    std::fs::set_permissions(&policy, std::fs::Permissions::from_mode(0o644)).unwrap();
    std::fs::write(
        p.ws().join("maps.py"),
        r#"
import ctypes, ctypes.util, mmap, os, shutil
libc = ctypes.CDLL(None, use_errno=True)
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
m = [l.split()[-1] for l in open("/proc/self/maps") if "/libc.so" in l][0]
shutil.copyfile(m, "copy.so")
def load(path):
    try:
        ctypes.CDLL(path); return "loaded"
    except OSError: return "refused"
fd = os.open(os.path.realpath("/bin/true"), os.O_RDONLY)
p = libc.mmap(None, 4096, mmap.PROT_READ | mmap.PROT_EXEC, mmap.MAP_PRIVATE, fd, 0)
print("copy", load(os.path.abspath("copy.so")))
print("system", load(m))
print("program", "mapped" if p not in (None, ctypes.c_void_p(-1).value) else "refused %d" % ctypes.get_errno())
"#,
    )
    .unwrap();
    Command::new("chown")
        .args(["-R", &format!("{NOBODY}:{NOBODY}")])
        .arg(p.ws())
        .status()
        .unwrap();
    let o = run(
        p.wrap(
            "maps",
            &["--quiet", "--policy", policy.to_str().unwrap()],
            &["python3", "maps.py"],
        ),
        Duration::from_secs(120),
    );
    let out = String::from_utf8_lossy(&o.stdout);
    for want in [
        "copy refused".to_string(),
        "system loaded".to_string(),
        format!("program refused {}", libc::EACCES),
    ] {
        assert!(
            out.contains(&want),
            "{want}: {}\n{}",
            text(&o),
            p.log("maps")
        );
    }
}

/// Under `agentsh wrap` with the default policy the agent starts without
/// the credentials in the developer's environment (said on stderr at
/// start, with how to pass one), and `--keep-env NAME` passes the one it
/// needs (its model API key) to it and what it runs.
#[test]
fn wrap_keeps_secrets_out_but_passes_what_keep_env_names() {
    if !require_root("wrap_keeps_secrets_out_but_passes_what_keep_env_names") {
        return;
    }
    let p = Place::new("envkeep", Some(NOBODY));
    let show = [
        "sh",
        "-c",
        "echo \"[$OPENAI_API_KEY][$GITHUB_TOKEN][$DB_PASSWORD]\"; sh -c 'echo \"nested[$OPENAI_API_KEY]\"'",
    ];
    let with_secrets = |mut c: Command| {
        c.env("OPENAI_API_KEY", "sk-openai")
            .env("GITHUB_TOKEN", "ghp_1")
            .env("DB_PASSWORD", "hunter2");
        c
    };
    let o = run(
        with_secrets(p.wrap("env1", &[], &show)),
        Duration::from_secs(120),
    );
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.contains("[][][]") && out.contains("nested[]"),
        "{}",
        text(&o)
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("DB_PASSWORD GITHUB_TOKEN OPENAI_API_KEY") && err.contains("--keep-env"),
        "{}",
        text(&o)
    );
    assert!(!err.contains("sk-openai"), "{}", text(&o));
    let o = run(
        with_secrets(p.wrap("env2", &["--keep-env", "OPENAI_API_KEY"], &show)),
        Duration::from_secs(120),
    );
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.contains("[sk-openai][][]") && out.contains("nested[sk-openai]"),
        "{}",
        text(&o)
    );
    let o = run(
        p.wrap("env3", &["--keep-env", "A-B"], &["true"]),
        Duration::from_secs(60),
    );
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("--keep-env \"A-B\""),
        "{}",
        text(&o)
    );
}

/// The shipped policy's `credential_files` under wrap (issue 41): the
/// developer's credential stores are out of the agent's reach (a user
/// namespace as an ordinary user, a mount namespace as root), and a plain
/// file beside them is read as before.
#[test]
fn wrap_keeps_the_developers_credential_files_from_the_agent() {
    if !require_root("wrap_keeps_the_developers_credential_files_from_the_agent") {
        return;
    }
    for (uid, mechanism) in [(Some(NOBODY), "user namespace"), (None, "mount namespace")] {
        let p = Place::new("creds", uid);
        let home = p.home();
        for (f, secret) in [
            (".ssh/id_ed25519", "PRIVATE-KEY-wrap-31c9"),
            (".aws/credentials", "aws-wrap-8d02"),
            (".netrc", "netrc-wrap-5e77"),
            ("notes.txt", "plain-wrap-notes"),
        ] {
            let path = home.join(f);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(&path, secret).unwrap();
        }
        if let Some(u) = uid {
            chown_r(&home, u);
        }
        let o = run(
            p.wrap(
                "creds",
                &[],
                &[
                    "sh",
                    "-c",
                    "cat ~/.ssh/id_ed25519 ~/.aws/credentials ~/.netrc ~/notes.txt",
                ],
            ),
            Duration::from_secs(120),
        );
        let out = String::from_utf8_lossy(&o.stdout);
        for secret in ["PRIVATE-KEY-wrap-31c9", "aws-wrap-8d02", "netrc-wrap-5e77"] {
            assert!(
                !out.contains(secret),
                "{uid:?}: {secret} read: {}",
                text(&o)
            );
        }
        assert!(out.contains("plain-wrap-notes"), "{uid:?}: {}", text(&o));
        let init = p
            .events("creds")
            .into_iter()
            .find(|e| e["type"] == "wrap_init")
            .expect("a wrap_init event");
        assert_eq!(
            init["credential_files"]["mechanism"], mechanism,
            "{uid:?}: {init}"
        );
        assert_eq!(
            std::fs::read_to_string(home.join(".netrc")).unwrap(),
            "netrc-wrap-5e77"
        );
        // Started inside a store: the cover is entered, not the store.
        let mut c = p.wrap("creds2", &[], &["sh", "-c", "cat id_ed25519; ls; echo end"]);
        c.current_dir(home.join(".ssh"));
        let o = run(c, Duration::from_secs(120));
        let out = String::from_utf8_lossy(&o.stdout);
        assert!(
            out.contains("end") && !out.contains("PRIVATE-KEY-wrap-31c9"),
            "{uid:?}: {}",
            text(&o)
        );
    }
}

/// Persistence under wrap (issue 43): the places an agent would plant code
/// that runs later, outside it (shell startup files, the user's own bin
/// directory, git's hooks and config) are read-only to it, as an ordinary
/// user and as root, while git still commits and the workspace is written;
/// `--writable` gives one back.
#[test]
fn wrap_keeps_the_places_code_would_be_planted_read_only() {
    if !require_root("wrap_keeps_the_places_code_would_be_planted_read_only") {
        return;
    }
    const SCRIPT: &str = "echo evil >> ~/.bashrc; echo rc1=$?; echo evil >> ~/.profile; \
        echo rc2=$?; echo x > ~/.local/bin/evil; echo rc3=$?; \
        printf '#!/bin/sh\\n' > .git/hooks/pre-commit; echo rc4=$?; \
        git config user.name planted; echo rc5=$?; \
        git -c user.name=a -c user.email=a@b commit -q --allow-empty -m m; echo rc6=$?; \
        echo ok > work/made.txt; echo rc7=$?; \
        mv ~/.config ~/.c2; mkdir -p ~/.config/systemd/user && echo x > ~/.config/systemd/user/evil.service; \
        echo rc8=$?; mv ~/.local ~/.l2; mkdir -p ~/.local/bin && echo x > ~/.local/bin/git; echo rc9=$?; \
        mv .git .g2; echo rc10=$?";
    for uid in [Some(NOBODY), None] {
        // Not under /run: root's trees have every empty directory there
        // hidden (a daemon could make a socket in it), .git's among them.
        let p = Place::under(Path::new("/srv/agentsh-tests"), "persist", uid);
        // The agent's home inside the workspace, which the policy lets it
        // write: what keeps these files is the cover, not the policy.
        let home = p.ws().join("h");
        std::fs::create_dir_all(home.join(".local/bin")).unwrap();
        std::fs::create_dir_all(home.join(".config/systemd/user")).unwrap();
        // (wrap keeps its state in that home, so the workspace's top is
        // carved around it: the agent's files go one level down.)
        std::fs::create_dir_all(p.ws().join("work")).unwrap();
        std::fs::write(home.join(".bashrc"), "# bashrc\n").unwrap();
        std::fs::write(home.join(".profile"), "# profile\n").unwrap();
        let git = Command::new("git")
            .args(["init", "-q"])
            .current_dir(p.ws())
            .output()
            .unwrap();
        assert!(git.status.success(), "{git:?}");
        if let Some(u) = uid {
            chown_r(&p.ws(), u);
        }
        let audit = p.audit("persist");
        let wrap = |session: &str, args: &[&str], script: &str| {
            let mut c = p.wrap(session, args, &["sh", "-c", script]);
            c.env("HOME", &home);
            c
        };
        let o = run(
            wrap("persist", &["--audit", &audit.to_string_lossy()], SCRIPT),
            Duration::from_secs(120),
        );
        let out = String::from_utf8_lossy(&o.stdout);
        // rc8..10: moving a directory above a kept place away, to make a
        // fresh one in its name, is refused (its binds are mount points).
        for rc in [
            "rc1=", "rc2=", "rc3=", "rc4=", "rc5=", "rc8=", "rc9=", "rc10=",
        ] {
            assert!(
                out.contains(rc) && !out.contains(&format!("{rc}0")),
                "{uid:?}: {rc} written: {}",
                text(&o)
            );
        }
        assert!(
            out.contains("rc6=0") && out.contains("rc7=0"),
            "{uid:?}: {}",
            text(&o)
        );
        assert_eq!(
            std::fs::read_to_string(home.join(".bashrc")).unwrap(),
            "# bashrc\n"
        );
        // Each refusal says why on the agent's stderr (issue 43).
        let err = String::from_utf8_lossy(&o.stderr);
        for (what, path) in [
            ("~/.bashrc", home.join(".bashrc")),
            ("~/.profile", home.join(".profile")),
            ("~/.local/bin", home.join(".local/bin/evil")),
            (".git/hooks", p.ws().join(".git/hooks")),
        ] {
            let line = err.lines().find(|l| {
                l.starts_with("agentsh: ")
                    && l.contains(&*path.to_string_lossy())
                    && l.contains("denied (rule read_only_files)")
            });
            assert!(line.is_some(), "{uid:?}: no line for {what}: {}", text(&o));
        }
        assert!(!home.join(".local/bin/evil").exists());
        assert!(!p.ws().join(".git/hooks/pre-commit").exists());
        assert!(!home.join(".config/systemd/user/evil.service").exists());
        assert!(!home.join(".c2").exists() && !home.join(".l2").exists());
        let init = std::fs::read_to_string(&audit)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .find(|e| e["type"] == "wrap_init")
            .expect("a wrap_init event");
        let ro = init["credential_files"]["read_only"].to_string();
        assert!(
            ro.contains(".bashrc") && ro.contains(".git/hooks"),
            "{init}"
        );
        // --writable gives one back.
        let o = run(
            wrap(
                "persist2",
                &["--writable", &home.join(".bashrc").to_string_lossy()],
                "echo added >> ~/.bashrc; echo rc=$?; echo x >> ~/.profile; echo rcp=$?",
            ),
            Duration::from_secs(120),
        );
        let out = String::from_utf8_lossy(&o.stdout);
        assert!(
            out.contains("rc=0") && !out.contains("rcp=0"),
            "{uid:?}: {}",
            text(&o)
        );
    }
}

/// agentsh installed by an ordinary user under their home (`~/.local/bin`,
/// issue 43): its binaries, state and audit are kept from the agent by
/// covers in the agent's own mount namespace, so the home is not carved
/// around them: the agent creates files and directories in `~` as it would
/// without agentsh, and still cannot replace agentsh's binaries, move the
/// directory holding them, or read wrap's state.
#[test]
fn agentsh_in_the_home_is_protected_without_splitting_the_home() {
    if !require_root("agentsh_in_the_home_is_protected_without_splitting_the_home") {
        return;
    }
    let p = Place::under(Path::new("/srv/agentsh-tests"), "userinstall", Some(NOBODY));
    let home = p.ws().join("h");
    let bin_dir = home.join(".local/bin");
    // The release archive, built by packaging/archive.sh from this build's
    // binaries, in a download directory of the user's.
    let built = p.root.join("built");
    let downloads = home.join("Downloads");
    std::fs::create_dir_all(&built).unwrap();
    std::fs::create_dir_all(&downloads).unwrap();
    for b in ["agentsh", "agentsh-unixwrap", "agentsh-shell-shim"] {
        std::fs::copy(bin(b), built.join(b)).unwrap();
    }
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let o = Command::new("bash")
        .arg(repo.join("packaging/archive.sh"))
        .arg("--from")
        .arg(&built)
        .arg("--out")
        .arg(&downloads)
        .output()
        .unwrap();
    assert!(o.status.success(), "archive.sh: {}", text(&o));
    chown_r(&p.ws(), NOBODY);
    // docs/wrap.md's recipe, as written, as the user.
    let recipe = agentsh_tests::recipes::recipe_in("docs/wrap.md", "user-install");
    for line in recipe.lines().filter(|l| !l.trim().is_empty()) {
        let o = Command::new("setpriv")
            .arg(format!("--reuid={NOBODY}"))
            .arg(format!("--regid={NOBODY}"))
            .args(["--clear-groups", "--", "sh", "-c", line])
            .current_dir(&downloads)
            .env_clear()
            .env("HOME", &home)
            .env("PATH", format!("{}:/usr/bin:/bin", bin_dir.display()))
            .output()
            .unwrap();
        assert!(o.status.success(), "{line}: {}", text(&o));
    }
    let script = "echo hi > ~/notes.txt && cat ~/notes.txt; mkdir ~/newdir && echo made; \
                  echo x > ~/.local/bin/agentsh-unixwrap; echo rcw=$?; mv ~/.local ~/.l2; \
                  echo rcm=$?; ls -A ~/.local/state/agentsh/inst | wc -l; \
                  su -c true root 2>/dev/null; echo rcsu=$?";
    let mut c = p.wrap_with(&bin_dir.join("agentsh"), "inst", &[], &["sh", "-c", script]);
    c.env("HOME", &home);
    let o = run(c, Duration::from_secs(120));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.contains("hi\n") && out.contains("made"),
        "the home was split: {}",
        text(&o)
    );
    assert!(
        !out.contains("rcw=0") && !out.contains("rcm=0") && out.contains("rcsu=126"),
        "{}",
        text(&o)
    );
    let listed = out
        .lines()
        .find(|l| l.trim().parse::<u32>().is_ok())
        .unwrap_or("?");
    assert_eq!(
        listed.trim(),
        "0",
        "wrap's state was readable: {}",
        text(&o)
    );
    assert_eq!(
        std::fs::read(bin_dir.join("agentsh-unixwrap")).unwrap(),
        std::fs::read(bin("agentsh-unixwrap")).unwrap()
    );
}

/// Under `agentsh wrap` (issue 42): an egress rule with `http:` and a
/// credential from `--secret NAME=env:VAR`. The agent's GET reaches the
/// upstream with the header wrap's server adds; the agent's environment
/// has no VAR; a DELETE gets a 403 and never reaches the upstream; TLS to
/// the proxy works with the user's own CA (`~/.local/state/agentsh/ca.pem`)
/// and an upstream whose certificate nothing trusts gets no request (502);
/// the CA's key is not the agent's to read.
fn wrap_http(uid: Option<u32>) {
    use agentsh_tests::http_upstream::HttpUpstream;
    if !require_root("wrap_http") {
        return;
    }
    const TOKEN: &str = "wrap-token-5e1d-held-by-the-server";
    let tag = uid.map_or_else(|| "root".to_string(), |u| u.to_string());
    // Not under /run: the daemon-socket walk there hides the directory of
    // wrap's own socket (and so the published certificate beside it).
    let p = Place::under(Path::new("/srv/agentsh-tests"), &format!("http-{tag}"), uid);
    let ip = std::net::Ipv4Addr::new(127, 0, 0, 3);
    let plain = HttpUpstream::start(&p.root.join("up-plain"), ip, "api.wrap.test", false);
    let tls = HttpUpstream::start(&p.root.join("up-tls"), ip, "api.wrap.test", true);
    std::fs::write(
        p.ws().join("policy.yaml"),
        "name: wrap-http\ndefault: allow\negress:\n  default: deny\n  dns: host\n  rules:\n    - name: local-api\n      cidrs: [127.0.0.3/32]\n      decision: allow\n      http:\n        default: deny\n        rules:\n          - {name: read, methods: [GET], decision: allow}\n        inject:\n          headers: {Authorization: \"Bearer ${secret:tok}\"}\n",
    )
    .unwrap();
    if let Some(u) = uid {
        chown_r(&p.ws(), u);
    }
    let ca = p.home().join(".local/state/agentsh/ca.pem");
    let key = p.home().join(".local/state/agentsh/ca-key/ca.key");
    let script = format!(
        "echo env=$(env | grep -c WRAP_TOKEN); curl -s http://{ip}:{pp}/x; echo; curl -s -X DELETE -w ' %{{http_code}}' http://{ip}:{pp}/y; echo; curl -s --cacert {ca} --resolve api.wrap.test:{tp}:{ip} -w ' %{{http_code}}' https://api.wrap.test:{tp}/z; echo; if cat {key} >/dev/null 2>&1; then echo key=read; else echo key=hidden; fi",
        pp = plain.port,
        tp = tls.port,
        ca = ca.display(),
        key = key.display(),
    );
    let mut c = p.wrap(
        "http",
        &["--policy", "policy.yaml", "--secret", "tok=env:WRAP_TOKEN"],
        &["sh", "-c", &script],
    );
    c.env("WRAP_TOKEN", TOKEN);
    let o = run(c, Duration::from_secs(120));
    let out = String::from_utf8_lossy(&o.stdout).to_string();
    let lines: Vec<&str> = out.lines().collect();
    let ctx = || format!("{}\n{}", text(&o), p.log("http"));
    assert_eq!(o.status.code(), Some(0), "{}", ctx());
    assert_eq!(lines.first(), Some(&"env=0"), "{}", ctx());
    assert!(
        lines
            .get(1)
            .is_some_and(|l| l.contains("\"saw_authorization\": true")),
        "{}",
        ctx()
    );
    assert!(
        lines
            .get(2)
            .is_some_and(|l| l.contains("denied (rule default, egress rule local-api)")),
        "{}",
        ctx()
    );
    assert!(
        out.contains("the upstream cannot be reached (rule http_upstream)")
            && out.contains("UnknownIssuer")
            && out.contains("\n 502\n"),
        "TLS to the proxy with the user's CA, the untrusted upstream refused: {}",
        ctx()
    );
    assert_eq!(lines.last(), Some(&"key=hidden"), "{}", ctx());
    assert!(!out.contains(TOKEN), "{}", ctx());
    let reached = plain.requests();
    assert!(
        reached
            .iter()
            .any(|r| r["path"] == "/x" && r["authorization"] == format!("Bearer {TOKEN}")),
        "{reached:?}"
    );
    assert!(
        !reached.iter().any(|r| r["method"] == "DELETE"),
        "{reached:?}"
    );
    assert!(
        tls.requests().is_empty(),
        "the untrusted upstream got a request"
    );
    let events = p.events("http");
    assert!(
        events
            .iter()
            .any(|e| e["type"] == "http" && e["method"] == "DELETE" && e["decision"] == "deny"),
        "{events:?}"
    );
    assert!(!serde_json::to_string(&events).unwrap().contains(TOKEN));
}

#[test]
fn wrap_calls_an_api_with_a_credential_the_agent_never_holds_as_nobody() {
    wrap_http(Some(NOBODY));
}

#[test]
fn wrap_calls_an_api_with_a_credential_the_agent_never_holds_as_root() {
    wrap_http(None);
}

/// Under `agentsh wrap` (issue 43): the programs that schedule jobs the
/// system runs later, outside any tree (`crontab`, `at`, `batch`), are
/// refused with a line that says why; `--writable crontab` gives them
/// back. Stand-ins by those names in the workspace (this machine has no
/// cron): the rule is by program name.
#[test]
fn wrap_refuses_scheduling_jobs_that_run_later() {
    if !require_root("wrap_refuses_scheduling_jobs_that_run_later") {
        return;
    }
    let p = Place::under(Path::new("/srv/agentsh-tests"), "cron", Some(NOBODY));
    let bin = p.ws().join("tools");
    std::fs::create_dir_all(&bin).unwrap();
    for name in ["crontab", "at"] {
        std::fs::copy("/bin/true", bin.join(name)).unwrap();
    }
    chown_r(&p.ws(), NOBODY);
    let script = "./tools/crontab -l; echo crontab=$?; echo 'x' | ./tools/at now; echo at=$?";
    let o = run(
        p.wrap("cron", &[], &["sh", "-c", script]),
        Duration::from_secs(120),
    );
    let out = String::from_utf8_lossy(&o.stdout);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        out.contains("crontab=126") && out.contains("at=126"),
        "{}",
        text(&o)
    );
    assert!(
        err.contains("crontab denied (rule wrap-scheduled-jobs)"),
        "the refusal says why: {}",
        text(&o)
    );
    let o = run(
        p.wrap("cron2", &["--writable", "crontab"], &["sh", "-c", script]),
        Duration::from_secs(120),
    );
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.contains("crontab=0") && out.contains("at=0"),
        "{}",
        text(&o)
    );
}

/// `agentsh approvals watch --session ID` in another terminal (a pty, as
/// `script` gives one) answers a held exec with one key (issue 43): `y`,
/// no Enter, approves; the command runs. wrap's start line names the
/// command.
#[test]
fn an_approval_is_answered_with_one_key_in_watch() {
    if !require_root("an_approval_is_answered_with_one_key_in_watch") {
        return;
    }
    use std::io::{BufRead, Read, Write};
    let p = Place::new("onekey", Some(NOBODY));
    let policy = p.ws().join("approve.yaml");
    std::fs::write(
        &policy,
        "name: approve-id\ndefault: allow\ncommand_rules:\n  - name: approve-nested-id\n    commands: [id]\n    context: [nested]\n    decision: approve\n",
    )
    .unwrap();
    std::fs::set_permissions(&policy, std::fs::Permissions::from_mode(0o644)).unwrap();
    let mut cmd = p.wrap(
        "key",
        &["--policy", policy.to_str().unwrap()],
        &["sh", "-c", "id -u; echo rc=$?"],
    );
    let child = spawn(&mut cmd, Stdio::null());
    // Once the request waits (the session's socket is there by then).
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let o = Command::new("setpriv")
            .arg(format!("--reuid={NOBODY}"))
            .arg(format!("--regid={NOBODY}"))
            .args(["--clear-groups", "--"])
            .arg(bin("agentsh"))
            .args(["approvals", "list", "--session", "key", "--json"])
            .env_clear()
            .env("HOME", p.home())
            .env("PATH", "/usr/bin:/bin")
            .output()
            .unwrap();
        if String::from_utf8_lossy(&o.stdout).contains("\"id\"") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no pending approval: {}",
            p.log("key")
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let mut watch = Command::new("setpriv")
        .arg(format!("--reuid={NOBODY}"))
        .arg(format!("--regid={NOBODY}"))
        .args(["--clear-groups", "--", "script", "-qec"])
        .arg(format!(
            "{} approvals watch --session key",
            bin("agentsh").display()
        ))
        .arg("/dev/null")
        .env_clear()
        .env("HOME", p.home())
        .env("PATH", "/usr/bin:/bin")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The prompt, then one key.
    let mut out = std::io::BufReader::new(watch.stdout.take().unwrap());
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut seen = String::new();
        let mut buf = [0u8; 256];
        loop {
            match out.get_mut().read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    seen.push_str(&String::from_utf8_lossy(&buf[..n]));
                    let _ = tx.send(seen.clone());
                }
            }
        }
        let _ = out.fill_buf();
    });
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut seen = String::new();
    while !seen.contains("another key skips") {
        let left = deadline.saturating_duration_since(Instant::now());
        assert!(
            !left.is_zero(),
            "no prompt from watch: {seen:?}\n{}",
            p.log("key")
        );
        if let Ok(s) = rx.recv_timeout(left) {
            seen = s;
        }
    }
    let mut stdin = watch.stdin.take().unwrap();
    stdin.write_all(b"y").unwrap();
    stdin.flush().unwrap();
    let o = finish(child, Duration::from_secs(120));
    let _ = watch.kill();
    let _ = watch.wait();
    let out = String::from_utf8_lossy(&o.stdout);
    assert_eq!(
        out,
        format!("{NOBODY}\nrc=0\n"),
        "{}\nwatch: {seen}",
        text(&o)
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("run in another terminal: agentsh approvals watch --session key"),
        "the start line names watch: {err}"
    );
    assert!(
        p.events("key").iter().any(|e| e["type"] == "execve"
            && e["argv"][0] == "id"
            && e["approval_outcome"] == "approved"),
        "{:?}",
        p.events("key")
    );
}

/// The agents people run, each as a stand-in that spawns the way the real
/// one does (issue 43), under `agentsh wrap --agent NAME`, as nobody and
/// as root: Claude Code and Gemini CLI (node, `bash -c` per tool call),
/// Codex CLI (`sh -lc` per command), Aider (python `subprocess` with a
/// shell), and a plain terminal session (`bash -l` reading commands). Each
/// writes its own configuration directory and the workspace, runs git, keeps
/// its API key (the profile's), loses another secret, and has `su` refused.
fn agents_under_wrap(uid: Option<u32>) {
    let tag = uid.map_or_else(|| "root".to_string(), |u| u.to_string());
    let p = Place::under(
        Path::new("/srv/agentsh-tests"),
        &format!("agents-{tag}"),
        uid,
    );
    // The agent's home inside the workspace, which the policy lets it write
    // (its rules name the user's passwd home, which is not this test's);
    // wrap keeps its state in that home, so the workspace's top is carved
    // around it: the agent's files go one level down.
    let home = p.ws().join("h");
    std::fs::create_dir_all(&home).unwrap();
    std::fs::create_dir_all(p.ws().join("work")).unwrap();
    let git = Command::new("git")
        .args(["init", "-q"])
        .current_dir(p.ws())
        .output()
        .unwrap();
    assert!(git.status.success(), "{git:?}");
    // The tool calls every stand-in makes.
    let calls = "git status --short | wc -l; echo made-by-$AGENT > work/$AGENT.txt && cat work/$AGENT.txt; \
                 echo key=${KEY:+kept}; echo gh=${GH_TOKEN:-gone}; su -c true root 2>/dev/null; echo su=$?";
    std::fs::write(
        p.ws().join("node-agent.js"),
        format!(
            "const {{spawnSync}} = require('child_process'); const fs = require('fs'); const os = require('os');\n\
             const dir = os.homedir() + '/.' + process.argv[2]; fs.mkdirSync(dir, {{recursive: true}});\n\
             fs.writeFileSync(dir + '/session.json', '{{}}');\n\
             const r = spawnSync('bash', ['-c', {calls:?}], {{encoding: 'utf8', env: Object.assign({{}}, process.env, {{AGENT: process.argv[2], KEY: process.env[process.argv[3]] || ''}})}});\n\
             process.stdout.write(r.stdout); process.stdout.write('config=' + fs.readdirSync(dir).join(',') + '\\n');\n"
        ),
    )
    .unwrap();
    std::fs::write(
        p.ws().join("py-agent.py"),
        format!(
            "import os, subprocess, sys\n\
             name, key, how = sys.argv[1], sys.argv[2], sys.argv[3]\n\
             d = os.path.expanduser('~/.' + name); os.makedirs(d, exist_ok=True)\n\
             open(os.path.join(d, 'history'), 'a').write('x\\n')\n\
             env = dict(os.environ, AGENT=name, KEY=os.environ.get(key, ''))\n\
             calls = {calls:?}\n\
             if how == 'sh-lc':\n    r = subprocess.run(['sh', '-lc', calls], env=env, capture_output=True, text=True)\n\
             else:\n    r = subprocess.run(calls, shell=True, env=env, capture_output=True, text=True)\n\
             sys.stdout.write(r.stdout); print('config=' + ','.join(os.listdir(d)))\n"
        ),
    )
    .unwrap();
    if let Some(u) = uid {
        chown_r(&p.ws(), u);
    }
    let cases: [(&str, &str, Vec<&str>); 4] = [
        (
            "claude-code",
            "ANTHROPIC_API_KEY",
            vec!["node", "node-agent.js", "claude", "ANTHROPIC_API_KEY"],
        ),
        (
            "gemini",
            "GEMINI_API_KEY",
            vec!["node", "node-agent.js", "gemini", "GEMINI_API_KEY"],
        ),
        (
            "codex",
            "OPENAI_API_KEY",
            vec!["python3", "py-agent.py", "codex", "OPENAI_API_KEY", "sh-lc"],
        ),
        (
            "aider",
            "OPENAI_API_KEY",
            vec!["python3", "py-agent.py", "aider", "OPENAI_API_KEY", "shell"],
        ),
    ];
    for (agent, key, cmd) in &cases {
        let mut c = p.wrap(agent, &["--agent", agent], cmd);
        c.env(key, "sk-test-key")
            .env("GH_TOKEN", "ghp-should-not-reach")
            .env("HOME", &home);
        let o = run(c, Duration::from_secs(120));
        let out = String::from_utf8_lossy(&o.stdout);
        let who = cmd[2];
        for want in [
            format!("made-by-{who}"),
            "key=kept".to_string(),
            "gh=gone".to_string(),
            "su=126".to_string(),
        ] {
            assert!(out.contains(&want), "{agent}: no {want:?}: {}", text(&o));
        }
        assert!(out.contains("config="), "{agent}: {}", text(&o));
        assert_eq!(o.status.code(), Some(0), "{agent}: {}", text(&o));
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(
            err.contains(&format!("--agent {agent}: allows")),
            "{agent}: {err}"
        );
    }
    // A plain terminal session: `bash -l` reading commands.
    let mut c = p.wrap("terminal", &[], &["bash", "-l"]);
    c.env("HOME", &home);
    let mut child = spawn(&mut c, Stdio::piped());
    {
        use std::io::Write;
        let mut stdin = child.stdin.take().unwrap();
        stdin
            .write_all(b"AGENT=terminal; git status --short | wc -l; echo made-by-$AGENT > work/$AGENT.txt && cat work/$AGENT.txt; su -c true root 2>/dev/null; echo su=$?; exit\n")
            .unwrap();
    }
    let o = finish(child, Duration::from_secs(120));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.contains("made-by-terminal") && out.contains("su=126"),
        "{}",
        text(&o)
    );
}

#[test]
fn the_agents_people_run_work_under_wrap_as_nobody() {
    if !require_root("the_agents_people_run_work_under_wrap_as_nobody") {
        return;
    }
    agents_under_wrap(Some(NOBODY));
}

#[test]
fn the_agents_people_run_work_under_wrap_as_root() {
    if !require_root("the_agents_people_run_work_under_wrap_as_root") {
        return;
    }
    agents_under_wrap(None);
}

/// Under `agentsh wrap` (issue 43): a place wrap keeps read-only that does
/// not exist yet (`~/.bash_login`, `~/.gitconfig`, `~/.config/autostart`,
/// `~/.local/share/systemd` below parents the tree makes itself) cannot be
/// created either, each refusal with its line (best effort: the
/// supervisor refuses the new name; no mount can cover what is not there),
/// while other new files in the home are made as before.
#[test]
fn wrap_refuses_creating_persistence_files_that_did_not_exist() {
    if !require_root("wrap_refuses_creating_persistence_files_that_did_not_exist") {
        return;
    }
    for uid in [Some(NOBODY), None] {
        let p = Place::under(Path::new("/srv/agentsh-tests"), "absent", uid);
        let home = p.ws().join("h");
        std::fs::create_dir_all(home.join(".config")).unwrap();
        std::fs::create_dir_all(home.join(".cargo/bin")).unwrap();
        std::fs::create_dir_all(p.ws().join("work")).unwrap();
        // A repository nested in the workspace: its hooks are kept too.
        let sub = p.ws().join("work/sub");
        std::fs::create_dir_all(&sub).unwrap();
        let git = Command::new("git")
            .args(["init", "-q"])
            .current_dir(&sub)
            .output()
            .unwrap();
        assert!(git.status.success(), "{git:?}");
        if let Some(u) = uid {
            chown_r(&p.ws(), u);
        }
        let script = "echo evil > ~/.bash_login; echo rc1=$?; \
                      git config --global core.hooksPath /tmp/hooks; echo rc2=$?; \
                      mkdir ~/.config/autostart; echo rc3=$?; \
                      echo x > ~/.tmp-new && mv ~/.tmp-new ~/.zshrc; echo rc4=$?; \
                      echo ok > ~/notes.txt; echo rc5=$?; \
                      echo x > ~/.cargo/bin/git; echo rc6=$?; \
                      echo x > work/sub/.git/hooks/pre-commit; echo rc7=$?; \
                      mkdir ~/sd ~/evil; ln -s ~/evil ~/.local/share; echo rc9=$?; \
                      mkdir -p ~/.local/share; echo rc10=$?; \
                      mv ~/sd ~/.local/share/systemd; echo rc8=$?; \
                      for f in .bash_aliases .vimrc .cargo/config.toml .tmux.conf .pam_environment \
                        .xprofile .xsessionrc; do echo x > ~/$f || echo \"refused $f\"; done; \
                      for d in .config/nvim .config/pip .ipython/profile_default/startup \
                        .local/lib/python3.11/site-packages; do \
                        mkdir -p ~/$d && echo x > ~/$d/planted || echo \"refused $d\"; done";
        let mut c = p.wrap("absent", &[], &["sh", "-c", script]);
        // A bin directory of the user's ahead of the system's on PATH.
        c.env("HOME", &home).env(
            "PATH",
            format!(
                "{}:/usr/local/bin:/usr/bin:/bin",
                home.join(".cargo/bin").display()
            ),
        );
        let o = run(c, Duration::from_secs(120));
        let out = String::from_utf8_lossy(&o.stdout);
        // Issue 61: a listed place whose parents the tree makes
        // (`~/.local/share/systemd`) is refused all the same, and a
        // missing parent cannot be put in place as a link.
        for rc in [
            "rc1=", "rc2=", "rc3=", "rc4=", "rc6=", "rc7=", "rc8=", "rc9=",
        ] {
            assert!(
                out.contains(rc) && !out.contains(&format!("{rc}0")),
                "{uid:?}: {rc} made: {}",
                text(&o)
            );
        }
        assert!(
            out.contains("rc5=0") && out.contains("rc10=0"),
            "{uid:?}: {}",
            text(&o)
        );
        // Issue 61: the persistence places the earlier list missed.
        for f in [
            ".bash_aliases",
            ".vimrc",
            ".cargo/config.toml",
            ".tmux.conf",
            ".pam_environment",
            ".xprofile",
            ".xsessionrc",
            ".config/nvim",
            ".config/pip",
            ".ipython/profile_default/startup",
            ".local/lib/python3.11/site-packages",
        ] {
            assert!(
                out.contains(&format!("refused {f}")),
                "{uid:?}: {f} written: {}",
                text(&o)
            );
        }
        for name in [
            ".bash_login",
            ".gitconfig",
            ".config/autostart",
            ".zshrc",
            ".local/share/systemd",
            ".bash_aliases",
            ".vimrc",
            ".config/nvim/planted",
            ".local/lib/python3.11/site-packages/planted",
        ] {
            assert!(!home.join(name).exists(), "{uid:?}: {name} was made");
        }
        assert!(!sub.join(".git/hooks/pre-commit").exists());
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(
            err.contains(".bash_login")
                && err.contains("denied (rule read_only_files)")
                && err.contains("even before it exists"),
            "{uid:?}: {}",
            text(&o)
        );
    }
}
