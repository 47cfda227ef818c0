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
        // A release build (the bench) ships them static-pie from
        // packaging/build-release.sh in target/release itself; every other
        // profile takes them from target/static.
        let p = if dir.file_name().is_some_and(|n| n == "release") {
            dir.join(name)
        } else {
            dir.parent()
                .expect("the target directory")
                .join("static")
                .join(name)
        };
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

/// Where a test server keeps its files by default. Not `/tmp`: the server
/// refuses to keep its files in a directory every supervised tree must be
/// able to write (protecting them there would take create rights on it away
/// from every tree). As root `/run/agentsh-tests`; otherwise beside the
/// built binaries.
pub fn server_base() -> PathBuf {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        PathBuf::from("/run/agentsh-tests")
    } else {
        bin("agentsh")
            .parent()
            .expect("the binaries' directory")
            .join("agentsh-tests")
    }
}

/// A loopback port free now, for a server to bind a moment later. Chosen
/// below the kernel's ephemeral range (`ip_local_port_range`): a port from
/// `bind(0)` is one the kernel also hands to any outgoing connection made
/// meanwhile (the suite makes thousands), which then holds it when the
/// server binds (`Address already in use`). Numbers are spread by pid and a
/// counter, so tests of one binary never pick the same one; none is a port
/// the shipped policies let trees reach.
pub fn free_port() -> u16 {
    use std::sync::atomic::{AtomicU32, Ordering};
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let low = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|t| t.split_whitespace().next()?.parse::<u32>().ok())
        .unwrap_or(32768);
    let (base, span) = if low > 12_000 {
        (10_000, low - 10_000)
    } else {
        (0, 0)
    };
    for _ in 0..span.min(2000) {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let port = base + (std::process::id().wrapping_mul(7919).wrapping_add(n * 13)) % span;
        // Not a port the shipped policies open to trees (mongodb's).
        if port == 27017 {
            continue;
        }
        if TcpListener::bind(("127.0.0.1", port as u16)).is_ok() {
            return port as u16;
        }
    }
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free loopback port")
}

/// Put first in `extra_config`: the server also gets a TCP listener on a
/// free loopback port (`TestServer::addr`).
pub const TCP: &str = "#tcp\n";
/// Like [`TCP`], and wrap-init is served there too (`server.http.wrap_init`).
pub const TCP_WRAP_INIT: &str = "#tcp-wrap-init\n";

/// Asks the server whose API socket is `socket` (if it is there) for its
/// events: its events route waits for events promised before an answer (an
/// allowed exec's is written just after it), so once this returns, what a
/// finished command did is in the audit file too. A server that is gone
/// answers nothing, and nothing is waited for.
pub fn settle_events(socket: &Path) {
    if !socket.exists() {
        return;
    }
    let req = agentsh_proto::http::Request {
        method: "GET",
        target: "/api/v1/sessions/-/events",
        body: &[],
        bearer: None,
    };
    let _ = agentsh_proto::http::call(socket, Duration::from_secs(10), |_| Ok(()), &req, 1 << 20);
}

/// A running `agentsh server`.
pub struct TestServer {
    child: Option<Child>,
    pub dir: TempDir,
    /// `unix:<socket>`: what `--server` and shim.conf's `server=` take.
    pub url: String,
    /// The API socket.
    pub socket: PathBuf,
    /// The TCP listener's address, when the config gave one.
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
        TestServer::start_with(base, policy_yaml, extra_config, with_private_marker_dir)
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
        TestServer::start_files(ServerFiles::write(base, policy_yaml, extra_config), command)
    }

    /// Starts a server on files written earlier ([`ServerFiles::write`]),
    /// for tests that prepare its directories first.
    pub fn start_files(files: ServerFiles, command: impl FnOnce(PathBuf) -> Command) -> TestServer {
        let child = spawn_server(&files.dir, command);
        let mut s = TestServer {
            child: Some(child),
            url: files.url,
            socket: files.socket,
            addr: files.addr,
            dir: files.dir,
        };
        s.wait_ready();
        s
    }
}

/// A server's files (config, policy, where its state, socket and audit go)
/// written but no server started: for tests that start it their own way
/// (`agentsh entrypoint`).
pub struct ServerFiles {
    pub dir: TempDir,
    pub config: PathBuf,
    /// `unix:<socket>`.
    pub url: String,
    pub socket: PathBuf,
    /// The TCP listener's address, when the config gave one.
    pub addr: String,
}

impl ServerFiles {
    /// Writes the config [`TestServer::start_with`] would use.
    pub fn write(base: &Path, policy_yaml: Option<&str>, extra_config: &str) -> ServerFiles {
        let dir = TempDir::new_in(base, "server");
        let policy_line = match policy_yaml {
            Some(yaml) => {
                let policy = dir.path().join("policy.yaml");
                std::fs::write(&policy, yaml).expect("write policy");
                format!("policy: {}\n", policy.display())
            }
            None => String::new(),
        };
        let socket = dir.path().join("run").join("api.sock");
        // A test that wants the TCP listener says so with TCP first in
        // extra_config (`server:` cannot be given twice).
        let tcp = |rest, more: &str| {
            (
                format!(
                    "server:\n  socket: {}\n  http:\n    addr: \"127.0.0.1:{}\"\n{more}",
                    socket.display(),
                    free_port()
                ),
                rest,
            )
        };
        let (server_yaml, extra_config) = match extra_config.strip_prefix(TCP) {
            Some(rest) => tcp(rest, ""),
            None if extra_config.starts_with(TCP_WRAP_INIT) => tcp(
                &extra_config[TCP_WRAP_INIT.len()..],
                "    wrap_init: true\n",
            ),
            None => (
                format!("server:\n  socket: {}\n", socket.display()),
                extra_config,
            ),
        };
        let addr = server_yaml
            .split("addr: \"")
            .nth(1)
            .and_then(|r| r.split('"').next())
            .unwrap_or("")
            .to_string();
        // Each server's DNS stub on an address of its own (servers of
        // several tests may be up at once), unless the test names one.
        let stub = if extra_config.contains("egress:") {
            String::new()
        } else {
            format!("egress:\n  stub: \"{}:53\"\n", unique_loopback())
        };
        let config = format!(
            "{server_yaml}{policy_line}{stub}state_dir: {}\naudit:\n  jsonl: {}\nwrapper_binary: {}\n{extra_config}",
            dir.path().join("state").display(),
            dir.path().join("audit.jsonl").display(),
            bin("agentsh-unixwrap").display(),
        );
        let config_path = dir.path().join("config.yaml");
        std::fs::write(&config_path, config).expect("write config");
        ServerFiles {
            url: format!("unix:{}", socket.display()),
            config: config_path,
            socket,
            addr,
            dir,
        }
    }

    /// The audit events written so far. A running server is asked first
    /// (its events route waits for events promised before an answer: an
    /// allowed exec's is written just after it), so what the command did is
    /// in the file.
    pub fn events(&self) -> Vec<serde_json::Value> {
        settle_events(&self.socket);
        std::fs::read_to_string(self.dir.path().join("audit.jsonl"))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }
}

impl TestServer {
    /// Starts the server again on the same config (same socket, state and
    /// audit log), after killing it if it still runs; waits until it answers.
    pub fn restart_with(&mut self, command: impl FnOnce(PathBuf) -> Command) {
        self.kill();
        self.child = Some(spawn_server(&self.dir, command));
        self.wait_ready();
    }

    fn wait_ready(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(120);
        while Instant::now() < deadline {
            if let Some(c) = self.child.as_mut() {
                if let Ok(Some(st)) = c.try_wait() {
                    panic!("agentsh server exited early ({st}): {}", self.log());
                }
            }
            if self
                .try_call("GET", "/healthz", None)
                .is_ok_and(|(s, _)| s == 200)
            {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("agentsh server not ready in 120 s: {}", self.log());
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

    /// One request over the API socket, as root (the operator); returns
    /// the status and the JSON body (`null` when not JSON).
    pub fn try_call(
        &self,
        method: &str,
        target: &str,
        body: Option<&serde_json::Value>,
    ) -> Result<(u16, serde_json::Value), String> {
        let bytes = body.map(|b| b.to_string().into_bytes()).unwrap_or_default();
        let req = agentsh_proto::http::Request {
            method,
            target,
            body: &bytes,
            bearer: None,
        };
        let r = agentsh_proto::http::call(
            &self.socket,
            Duration::from_secs(70),
            |_| Ok(()),
            &req,
            64 << 20,
        )
        .map_err(|e| e.to_string())?;
        Ok((
            r.status,
            serde_json::from_slice(&r.body).unwrap_or(serde_json::Value::Null),
        ))
    }

    /// Like [`TestServer::try_call`]; panics if the server cannot be reached.
    pub fn call(
        &self,
        method: &str,
        target: &str,
        body: Option<&serde_json::Value>,
    ) -> (u16, serde_json::Value) {
        self.try_call(method, target, body)
            .unwrap_or_else(|e| panic!("{method} {target}: {e}\nserver log:\n{}", self.log()))
    }

    /// A GET that must answer 200.
    pub fn get_json(&self, target: &str) -> serde_json::Value {
        let (status, v) = self.call("GET", target, None);
        assert_eq!(status, 200, "GET {target}: {v}");
        v
    }

    /// Every event of `session` the API serves.
    pub fn events(&self, session: &str) -> Vec<serde_json::Value> {
        self.get_json(&format!("/api/v1/sessions/{session}/events"))
            .as_array()
            .cloned()
            .expect("events JSON array")
    }

    /// The operator token the server wrote.
    pub fn token(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("state").join("approval.token"))
            .expect("the server's token file")
            .trim()
            .to_string()
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

/// `agentsh server --config <dir>/config.yaml`, its log appended to `<dir>/server.log`.
/// `program` in a mount namespace of its own whose `/run/agentsh` (where
/// every server writes the fixed `active` marker) is an empty tmpfs: a
/// test's server never marks this machine's shims as supervised. This
/// machine keeps at most an empty `/run/agentsh`, the mount point.
pub fn with_private_marker_dir(program: PathBuf) -> Command {
    let dir = std::path::Path::new(agentsh_proto::active::FIXED_MARKER)
        .parent()
        .expect("the marker's directory");
    std::fs::create_dir_all(dir).expect("create the marker's mount point");
    let target = std::ffi::CString::new(dir.as_os_str().as_encoded_bytes()).expect("a path");
    let (root, tmpfs, opts) = (c"/", c"tmpfs", c"mode=0755");
    let mut cmd = Command::new(program);
    // SAFETY: runs in the forked child before exec: raw syscalls on
    // strings built above only.
    unsafe {
        std::os::unix::process::CommandExt::pre_exec(&mut cmd, move || {
            if libc::unshare(libc::CLONE_NEWNS) != 0
                || libc::mount(
                    std::ptr::null(),
                    root.as_ptr(),
                    std::ptr::null(),
                    libc::MS_REC | libc::MS_PRIVATE,
                    std::ptr::null(),
                ) != 0
                || libc::mount(
                    tmpfs.as_ptr(),
                    target.as_ptr(),
                    tmpfs.as_ptr(),
                    libc::MS_NOSUID | libc::MS_NODEV,
                    opts.as_ptr().cast(),
                ) != 0
            {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    cmd
}

fn spawn_server(dir: &TempDir, command: impl FnOnce(PathBuf) -> Command) -> Child {
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.path().join("server.log"))
        .expect("server log");
    command(bin("agentsh"))
        .arg("server")
        .arg("--config")
        .arg(dir.path().join("config.yaml"))
        .stdin(Stdio::null())
        .stdout(log.try_clone().expect("dup log"))
        .stderr(log)
        .spawn()
        .expect("spawn agentsh server")
}

impl Drop for TestServer {
    fn drop(&mut self) {
        self.kill();
    }
}

/// The exec events among `events` whose program's file name is `base`
/// (`curl` for `/usr/bin/curl`).
pub fn execs_of<'a>(events: &'a [serde_json::Value], base: &str) -> Vec<&'a serde_json::Value> {
    events
        .iter()
        .filter(|e| {
            e["filename"]
                .as_str()
                .is_some_and(|f| f.rsplit('/').next() == Some(base))
        })
        .collect()
}

/// A loopback address no other server of this machine's tests is likely to
/// use (127.1.0.0/16 and above: tests use 127.0.0.0/24 for destinations).
pub fn unique_loopback() -> std::net::Ipv4Addr {
    use std::sync::atomic::{AtomicU32, Ordering};
    static N: AtomicU32 = AtomicU32::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    let mut x = std::process::id()
        .wrapping_mul(2_654_435_761)
        .wrapping_add(nanos)
        .wrapping_add(N.fetch_add(1, Ordering::SeqCst).wrapping_mul(40_503));
    x ^= x >> 13;
    let b = x.to_be_bytes();
    std::net::Ipv4Addr::new(127, 1 + b[1] % 250, b[2], 1 + b[3] % 250)
}
