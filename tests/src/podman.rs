//! Real container runtimes for the tests: podman with runc (its default
//! capabilities and seccomp profile), with gVisor's `runsc` (what Modal
//! runs), or privileged. No registry is reachable here, so an image is the
//! tests' cached Debian root (`rootfs`) with the binaries under test copied
//! in, the cookbook's image recipe run in it, and `podman import`ed.
//!
//! Commands reach a container the way SDKs send them: `podman exec CTR sh
//! -c ...`, a process the runtime starts beside the container's first
//! process, never below it.
//!
//! Flags this kind of machine needs (`../shared/KERNEL-NOTES`): `--runtime
//! runc` (crun refuses the host's cgroup setup), lower `--ulimit`s (the
//! host's hard limits are below podman's defaults), and for runsc
//! `--runtime-flag network=host --network host`.
//!
//! Failure modes: podman, runc or runsc missing is [`missing`]'s message
//! (the caller skips outside CI, fails under `CI=true`); any other failure
//! panics with podman's output. Images and containers are removed on drop.

use crate::rootfs::{Root, RootSpec, BOOKWORM_MINBASE};
use crate::server::bin;
use std::process::{Command, Output, Stdio};

/// Which runtime a container runs under.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Runtime {
    /// runc, podman's default capabilities and seccomp profile.
    Runc,
    /// gVisor (`runsc`), podman's default capabilities.
    Runsc,
    /// runc, `--privileged`.
    Privileged,
}

const RUNSC: &str = "/usr/bin/runsc";

/// Why real runtimes cannot be used here, if they cannot.
pub fn missing() -> Option<String> {
    for (what, path) in [
        ("podman", "/usr/bin/podman"),
        ("runc", "/usr/sbin/runc"),
        ("runsc", RUNSC),
    ] {
        if !std::path::Path::new(path).exists() && !on_path(what) {
            return Some(format!(
                "{what} is not installed; tests/setup.sh installs it (apt-get install podman \
                 runc runsc)"
            ));
        }
    }
    None
}

fn on_path(name: &str) -> bool {
    Command::new("sh")
        .arg("-c")
        .arg(format!("command -v {name}"))
        .output()
        .is_ok_and(|o| o.status.success())
}

/// Held around what adds, starts from or removes an image: podman's image
/// store is locked only in short sections, and an image removed by one
/// test while another starts a container can make the start miss its own
/// image ("image not known", then a pull from `localhost`: a known podman
/// timing issue). The tests of one binary run as threads of one process.
static IMAGES: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn images_held() -> std::sync::MutexGuard<'static, ()> {
    IMAGES
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn podman(args: &[&str]) -> Output {
    Command::new("podman")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("run podman {args:?}: {e}"))
}

/// Text of a command's output, for messages.
pub fn text(o: &Output) -> String {
    format!(
        "status {:?}\nstdout:\n{}\nstderr:\n{}",
        o.status.code(),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// A local image: the cached Debian root, the binaries under test in
/// `/usr/bin`, an ordinary user `user` (uid 1000), then `build` (the
/// recipe's `RUN` lines) run inside it.
pub struct Image {
    pub tag: String,
}

impl Image {
    /// Builds the image; `run` are shell commands run in the root, as root,
    /// in order (a Dockerfile's `RUN` lines).
    pub fn build(name: &str, run: &[String]) -> Image {
        Image::build_with(name, run, &[])
    }

    /// [`Image::build`], with `extra` files copied in first (host path,
    /// path in the image): the tests' attackers.
    pub fn build_with(name: &str, run: &[String], extra: &[(&std::path::Path, &str)]) -> Image {
        Image::build_on(&BOOKWORM_MINBASE, name, run, extra)
    }

    /// [`Image::build_with`], on the cached root `spec`.
    pub fn build_on(
        spec: &RootSpec,
        name: &str,
        run: &[String],
        extra: &[(&std::path::Path, &str)],
    ) -> Image {
        Image::build_changed(spec, name, run, extra, &[])
    }

    /// [`Image::build_on`], with Dockerfile instructions for the image's
    /// configuration (`podman import --change`, e.g. `ENTRYPOINT [...]`,
    /// `CMD [...]`) as a Dockerfile recipe writes them.
    pub fn build_changed(
        spec: &RootSpec,
        name: &str,
        run: &[String],
        extra: &[(&std::path::Path, &str)],
        changes: &[String],
    ) -> Image {
        let root = Root::unpack(&spec.cached());
        for b in ["agentsh", "agentsh-unixwrap", "agentsh-shell-shim"] {
            root.copy_in(&bin(b), &format!("/usr/bin/{b}"));
        }
        for (from, to) in extra {
            root.copy_in(from, to);
        }
        root.ok(&["/usr/sbin/useradd", "-m", "-u", "1000", "user"]);
        for cmd in run {
            root.ok(&["/bin/sh", "-c", cmd]);
        }
        static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let tag = format!("localhost/agentsh-test-{name}:{}-{n}", std::process::id());
        let mut tar = Command::new("tar")
            .args(["--numeric-owner", "-C"])
            .arg(root.path("/"))
            .args(["-c", "."])
            .stdout(Stdio::piped())
            .spawn()
            .expect("run tar");
        let held = images_held();
        let mut import = vec!["import"];
        for c in changes {
            import.extend(["--change", c]);
        }
        import.extend(["-", &tag]);
        let out = Command::new("podman")
            .args(&import)
            .stdin(tar.stdout.take().expect("tar's stdout"))
            .output()
            .expect("run podman import");
        let tarred = tar.wait().expect("wait for tar");
        assert!(tarred.success(), "tar of the image's root failed");
        drop(held);
        assert!(out.status.success(), "podman import: {}", text(&out));
        Image { tag }
    }
}

impl Drop for Image {
    fn drop(&mut self) {
        let _held = images_held();
        let _ = podman(&["rmi", "-f", &self.tag]);
    }
}

/// How [`Container::start_with`] starts a container, beyond the defaults.
#[derive(Debug, Default)]
pub struct Start {
    /// Environment of the first process (`podman run -e K=V`).
    pub env: Vec<(String, String)>,
    /// The host's network namespace (`--network host`), so a stand-in
    /// upstream on the host's loopback is reachable as from a runsc sandbox.
    pub host_network: bool,
}

/// Whether real-runtime tests can run here (root, podman, runc, runsc);
/// under `CI=true` they must, so a missing piece fails the test `name`.
pub fn runtimes_here(name: &str) -> bool {
    if !crate::server::require_root(name) {
        return false;
    }
    if let Some(why) = missing() {
        assert!(std::env::var("CI").as_deref() != Ok("true"), "{why}");
        eprintln!("skipped: {why}");
        return false;
    }
    true
}

/// `podman run`'s flags for `runtime` on this kind of machine.
fn runtime_args(runtime: Runtime) -> &'static [&'static str] {
    match runtime {
        Runtime::Runc => &["--runtime", "runc"],
        Runtime::Privileged => &["--runtime", "runc", "--privileged"],
        Runtime::Runsc => &[
            "--runtime",
            RUNSC,
            "--runtime-flag",
            "network=host",
            "--network",
            "host",
        ],
    }
}

/// A running container, removed on drop.
pub struct Container {
    pub name: String,
}

impl Container {
    /// Starts `argv` (the container's first process) from `image` under
    /// `runtime`, detached.
    pub fn start(image: &Image, runtime: Runtime, argv: &[&str]) -> Container {
        Container::start_with(image, runtime, &Start::default(), argv)
    }

    /// [`Container::start`] with `opts`: environment for the first process
    /// (`-e`, as a runtime's secrets reach the start command) and the
    /// host's network for runc too (runsc always has it).
    pub fn start_with(image: &Image, runtime: Runtime, opts: &Start, argv: &[&str]) -> Container {
        static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let name = format!("agentsh-test-{}-{n}", std::process::id());
        let mut args: Vec<&str> = vec![
            "run",
            "-d",
            "--name",
            &name,
            "--ulimit",
            "nofile=16384:16384",
            "--ulimit",
            "nproc=8192:8192",
        ];
        let kv: Vec<String> = opts.env.iter().map(|(k, v)| format!("{k}={v}")).collect();
        for e in &kv {
            args.extend(["-e", e]);
        }
        if opts.host_network && runtime != Runtime::Runsc {
            args.extend(["--network", "host"]);
        }
        args.extend(runtime_args(runtime));
        args.push("--pull=never");
        args.push(&image.tag);
        args.extend(argv);
        let out = {
            let _held = images_held();
            podman(&args)
        };
        assert!(out.status.success(), "podman run: {}", text(&out));
        Container { name }
    }

    /// A `podman run -i` of `image` under `runtime` with the image's own
    /// entrypoint and command, for the caller to spawn with its stdin and
    /// stdout piped (a daemon stand-in that takes requests there); the
    /// container is removed when the returned [`Container`] is dropped.
    /// A non-empty `cmd` replaces the image's `CMD` (`podman run IMAGE
    /// CMD...`), its `ENTRYPOINT` kept.
    pub fn attached(image: &Image, runtime: Runtime, cmd: &[String]) -> (Command, Container) {
        static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let name = format!("agentsh-test-i-{}-{n}", std::process::id());
        let argv = cmd;
        let mut cmd = Command::new("podman");
        cmd.args(["run", "-i", "--name", &name]);
        cmd.args([
            "--ulimit",
            "nofile=16384:16384",
            "--ulimit",
            "nproc=8192:8192",
        ]);
        cmd.args(runtime_args(runtime));
        cmd.args(["--pull=never", &image.tag]);
        cmd.args(argv);
        (cmd, Container { name })
    }

    /// `podman exec [--user UID] CTR argv...`: a process beside the
    /// container's first, as SDKs start commands.
    pub fn exec(&self, user: Option<u32>, argv: &[&str]) -> Output {
        let uid = user.map(|u| u.to_string());
        let mut args = vec!["exec"];
        if let Some(u) = &uid {
            args.extend(["--user", u]);
        }
        args.push(&self.name);
        args.extend(argv);
        podman(&args)
    }

    /// [`Container::exec`] with `env` set for the command (`podman exec -e`).
    pub fn exec_env(&self, user: Option<u32>, env: &[(&str, &str)], argv: &[&str]) -> Output {
        let uid = user.map(|u| u.to_string());
        let kv: Vec<String> = env.iter().map(|(k, v)| format!("{k}={v}")).collect();
        let mut args = vec!["exec"];
        if let Some(u) = &uid {
            args.extend(["--user", u]);
        }
        for e in &kv {
            args.extend(["-e", e]);
        }
        args.push(&self.name);
        args.extend(argv);
        podman(&args)
    }

    /// `sh -c script` as an SDK sends it.
    pub fn sh(&self, user: Option<u32>, script: &str) -> Output {
        self.exec(user, &["sh", "-c", script])
    }

    /// The first process's output so far (the server's log, under
    /// `agentsh entrypoint`).
    pub fn logs(&self) -> String {
        let o = podman(&["logs", &self.name]);
        format!(
            "{}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        )
    }
}

impl Drop for Container {
    fn drop(&mut self) {
        let _ = podman(&["rm", "-f", "-t", "0", &self.name]);
    }
}
