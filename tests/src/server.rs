//! Starts a real `agentsh server` for a test and reads its audit trail.
//!
//! Each server gets its own temporary directory (config, policy, state,
//! audit JSONL) and a free loopback port, and is killed when dropped.

use std::io::Read;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The binaries that ship static-pie, and so are tested as such: they run
/// before any filter exists (packaging/build-static.sh puts them in
/// `target/static/`).
pub const STATIC_BINARIES: &[&str] = &["agentsh-shell-shim", "agentsh-unixwrap"];

/// Path of a binary built by this workspace (`agentsh`, `agentsh-unixwrap`, ...).
/// [`STATIC_BINARIES`] come from `target/static/`, the rest from the profile
/// the test was built with.
///
/// Panics with the command to run if it has not been built.
pub fn bin(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("current_exe");
    // A test: target/<profile>/deps/<test> -> target/<profile>/<name>; a
    // binary of this crate (the demo) sits beside the others already.
    let parent = exe.parent().expect("the executable's directory");
    let dir = if parent.file_name().is_some_and(|n| n == "deps") {
        parent.parent().expect("target/<profile>")
    } else {
        parent
    };
    refuse_world_writable_checkout(dir);
    if STATIC_BINARIES.contains(&name) {
        let p = dir
            .parent()
            .expect("the target directory")
            .join("static")
            .join(name);
        assert!(
            p.is_file(),
            "{} is missing: run `bash packaging/build-static.sh` (tests/run.sh does) before the tests",
            p.display()
        );
        return p;
    }
    let p = dir.join(name);
    assert!(
        p.is_file(),
        "{} is missing: run `cargo build --workspace` before the tests",
        p.display()
    );
    p
}

/// agentsh never lets a supervised tree write where its own binaries live, so
/// binaries built under `/tmp` (a checkout there) would make `/tmp` read-only
/// for every tree and the escape and session tests would fail for a reason
/// that has nothing to do with what they test. Say so up front instead.
fn refuse_world_writable_checkout(dir: &Path) {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return;
    }
    let dir = dir.canonicalize().unwrap_or_else(|_| dir.to_path_buf());
    for shared in ["/tmp", "/var/tmp", "/dev/shm"] {
        assert!(
            !dir.starts_with(shared),
            "the binaries are built under {shared} ({}): agentsh keeps supervised trees from \
             writing where its binaries live, so {shared} would not be writable in the tests; \
             check the repository out elsewhere (or set CARGO_TARGET_DIR outside {shared})",
            dir.display()
        );
    }
}

/// True when the test may touch the kernel as root. Outside CI a non-root run
/// skips with a message; under `CI=true` a skip is a failure.
pub fn require_root(test: &str) -> bool {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        return true;
    }
    if std::env::var("CI").as_deref() == Ok("true") {
        panic!("{test}: needs root (seccomp listener, mount namespaces); CI=true forbids skipping");
    }
    eprintln!("SKIP {test}: needs root");
    false
}

/// A fresh temporary directory, removed on drop.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> TempDir {
        TempDir::new_in(&std::env::temp_dir(), tag)
    }

    /// A fresh directory under `base` (created if missing).
    pub fn new_in(base: &Path, tag: &str) -> TempDir {
        static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let p = base.join(format!("agentsh-test-{tag}-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).expect("create temp dir");
        TempDir(p)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Where a test server keeps its files by default. Not `/tmp`: agentsh keeps
/// trees from writing or creating anything in a directory that holds its
/// files, and it does so by granting each of that directory's other entries
/// one by one (up to a limit). A server under `/tmp` would make the tests
/// depend on what else `/tmp` holds; `/run` (as root) holds little.
pub fn server_base() -> PathBuf {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        PathBuf::from("/run/agentsh-tests")
    } else {
        std::env::temp_dir()
    }
}

pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free loopback port")
}

/// A running `agentsh server`.
pub struct TestServer {
    child: Option<Child>,
    pub dir: TempDir,
    pub url: String,
    pub addr: String,
}

impl TestServer {
    /// Starts a server whose policy is `policy_yaml`; `extra_config` is appended
    /// to the generated config (YAML top-level keys).
    /// The server's files live under [`server_base`], never in `/tmp`.
    pub fn start(policy_yaml: &str, extra_config: &str) -> TestServer {
        TestServer::start_in(&server_base(), policy_yaml, extra_config)
    }

    /// Like [`TestServer::start`], with the server's files (config, policy,
    /// state, audit) under `base`: agentsh keeps supervised trees from
    /// writing or creating anything in the directories holding them, so
    /// tests that need a normal `/tmp` in the tree keep them elsewhere.
    pub fn start_in(base: &Path, policy_yaml: &str, extra_config: &str) -> TestServer {
        TestServer::start_with(base, policy_yaml, extra_config, Command::new)
    }

    /// Like [`TestServer::start_in`]; `command` builds the process for the
    /// `agentsh` binary (e.g. inside a test namespace, so the server sees the
    /// same files as the trees it compiles rulesets for).
    pub fn start_with(
        base: &Path,
        policy_yaml: &str,
        extra_config: &str,
        command: impl FnOnce(PathBuf) -> Command,
    ) -> TestServer {
        TestServer::launch(base, Some(policy_yaml), extra_config, command)
    }

    /// Like [`TestServer::start_with`] with no policy of the test's: the
    /// server uses its default (`agent-default`, from `/etc/agentsh/policies`
    /// as `command` sees it, else the built-in copy).
    pub fn start_on_default_policy(
        base: &Path,
        extra_config: &str,
        command: impl FnOnce(PathBuf) -> Command,
    ) -> TestServer {
        TestServer::launch(base, None, extra_config, command)
    }

    fn launch(
        base: &Path,
        policy_yaml: Option<&str>,
        extra_config: &str,
        command: impl FnOnce(PathBuf) -> Command,
    ) -> TestServer {
        let dir = TempDir::new_in(base, "server");
        let policy_line = match policy_yaml {
            Some(yaml) => {
                let policy = dir.path().join("policy.yaml");
                std::fs::write(&policy, yaml).expect("write policy");
                format!("policy: {}\n", policy.display())
            }
            None => String::new(),
        };
        let addr = format!("127.0.0.1:{}", free_port());
        let config = format!(
            "server:\n  http:\n    addr: \"{addr}\"\n{policy_line}state_dir: {}\naudit:\n  jsonl: {}\nwrapper_binary: {}\n{extra_config}",
            dir.path().join("state").display(),
            dir.path().join("audit.jsonl").display(),
            bin("agentsh-unixwrap").display(),
        );
        let config_path = dir.path().join("config.yaml");
        std::fs::write(&config_path, config).expect("write config");
        let log = std::fs::File::create(dir.path().join("server.log")).expect("server log");
        let child = command(bin("agentsh"))
            .arg("server")
            .arg("--config")
            .arg(&config_path)
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("dup log"))
            .stderr(log)
            .spawn()
            .expect("spawn agentsh server");
        let mut s = TestServer {
            child: Some(child),
            url: format!("http://{addr}"),
            addr,
            dir,
        };
        s.wait_ready();
        s
    }

    fn wait_ready(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if let Some(c) = self.child.as_mut() {
                if let Ok(Some(st)) = c.try_wait() {
                    panic!("agentsh server exited early ({st}): {}", self.log());
                }
            }
            if ureq::get(format!("{}/healthz", self.url)).call().is_ok() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("agentsh server not ready in 20 s: {}", self.log());
    }

    /// The server's pid (0 once killed).
    pub fn pid(&self) -> u32 {
        self.child.as_ref().map_or(0, Child::id)
    }

    /// The server's own log (stderr).
    pub fn log(&self) -> String {
        let mut s = String::new();
        if let Ok(mut f) = std::fs::File::open(self.dir.path().join("server.log")) {
            let _ = f.read_to_string(&mut s);
        }
        s
    }

    /// Every event of `session` the API serves.
    pub fn events(&self, session: &str) -> Vec<serde_json::Value> {
        ureq::get(format!("{}/api/v1/sessions/{session}/events", self.url))
            .call()
            .expect("GET events")
            .body_mut()
            .read_json()
            .expect("events JSON")
    }

    /// Only the `execve` events of `session`.
    pub fn exec_events(&self, session: &str) -> Vec<serde_json::Value> {
        self.events(session)
            .into_iter()
            .filter(|e| e["type"] == "execve")
            .collect()
    }

    /// Waits until an exec event satisfies `pred`; returns it.
    pub fn wait_exec_event(
        &self,
        session: &str,
        timeout: Duration,
        pred: impl Fn(&serde_json::Value) -> bool,
    ) -> Option<serde_json::Value> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(e) = self.exec_events(session).into_iter().find(|e| pred(e)) {
                return Some(e);
            }
            if Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The JSONL audit file's events.
    pub fn jsonl_events(&self) -> Vec<serde_json::Value> {
        std::fs::read_to_string(self.dir.path().join("audit.jsonl"))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }

    /// SIGKILLs the server and waits for it.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        self.kill();
    }
}
