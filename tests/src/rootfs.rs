//! A minimal Debian root (`debootstrap --variant=minbase`) to install the
//! agentsh package into, and private namespaces to run it in.
//!
//! The root is built once and cached outside the repository as a tarball,
//! `/var/cache/agentsh-tests/rootfs-<suite>-<hash>.tar`, where the hash covers
//! everything that shapes it (suite, variant, package list, recipe version).
//! The build happens in a temporary directory beside the cache and ends with a
//! `rename(2)`, under an exclusive lock, so a crash or a concurrent test never
//! leaves a half-written tarball under the final name. The first build needs
//! the network (a Debian mirror) and takes minutes; later runs only unpack.
//!
//! The package archive keeps dash's `.deb` (and apt's package lists), so
//! `apt-get install --reinstall dash` works offline inside the root.
//!
//! A [`Root`] is an unpacked copy in a temporary directory plus a holder
//! process that owns a private mount namespace (with `/proc` and `/dev` mounted
//! inside the root) and a private network namespace (only `lo`, up): a server
//! inside listens on its shipped port without meeting anything on this
//! machine, and nothing inside can reach a mirror. Commands enter both
//! namespaces and `chroot` into the root ([`Root::command`]).

use crate::server::TempDir;
use std::ffi::CString;
use std::io::Write;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::Instant;

/// What the cached root is made of. Changing any of it changes the hash,
/// hence the tarball's name: a new root is built, the old one is left alone.
pub struct RootSpec {
    pub suite: &'static str,
    pub variant: &'static str,
    /// Packages beyond the variant's (`--include`).
    pub include: &'static [&'static str],
    /// Debs kept in `/var/cache/apt/archives` (the rest are deleted).
    pub keep_debs: &'static [&'static str],
}

/// Bump when the recipe below changes in a way the spec does not show.
const RECIPE_VERSION: u32 = 1;
const CACHE_DIR: &str = "/var/cache/agentsh-tests";
const DEFAULT_MIRROR: &str = "http://deb.debian.org/debian";

/// The root the install tests use: bookworm minbase (dash, bash, apt, dpkg,
/// util-linux's `su` and `setpriv`, `passwd`'s `useradd`) plus libseccomp2,
/// with dash's deb kept for an offline reinstall.
pub const BOOKWORM_MINBASE: RootSpec = RootSpec {
    suite: "bookworm",
    variant: "minbase",
    include: &["libseccomp2"],
    keep_debs: &["dash"],
};

/// [`BOOKWORM_MINBASE`] with the interpreters SDKs run without a shell
/// (`sb.exec("python3", ...)`, `exec("node", ...)`): python3 and node,
/// with python's deb kept for an offline reinstall.
pub const BOOKWORM_PROGRAMS: RootSpec = RootSpec {
    suite: "bookworm",
    variant: "minbase",
    include: &["libseccomp2", "python3-minimal", "nodejs"],
    keep_debs: &["dash", "python3.11-minimal"],
};

/// [`BOOKWORM_MINBASE`] with curl and the system's CA store: the image the
/// cookbook's egress-at-layer-7 recipe assumes (a slim base that has had
/// `apt-get install ca-certificates`).
pub const BOOKWORM_CURL: RootSpec = RootSpec {
    suite: "bookworm",
    variant: "minbase",
    include: &["libseccomp2", "curl", "ca-certificates"],
    keep_debs: &["dash"],
};

impl RootSpec {
    fn key(&self) -> String {
        format!(
            "recipe={RECIPE_VERSION} suite={} variant={} include={} keep={}",
            self.suite,
            self.variant,
            self.include.join(","),
            self.keep_debs.join(",")
        )
    }

    /// The tarball's path (whether or not it exists yet).
    pub fn tarball(&self) -> PathBuf {
        PathBuf::from(CACHE_DIR).join(format!(
            "rootfs-{}-{:016x}.tar",
            self.suite,
            fnv1a(self.key().as_bytes())
        ))
    }

    /// The cached tarball, built first if missing. Panics with what failed
    /// (debootstrap missing, no mirror reachable, ...).
    pub fn cached(&self) -> PathBuf {
        let tar = self.tarball();
        if tar.is_file() {
            return tar;
        }
        std::fs::create_dir_all(CACHE_DIR).expect("create the rootfs cache directory");
        let lock = std::fs::File::create(Path::new(CACHE_DIR).join(".lock")).expect("cache lock");
        // SAFETY: flock on an fd we own; blocks until another builder is done.
        if unsafe { libc::flock(lock.as_raw_fd(), libc::LOCK_EX) } != 0 {
            panic!(
                "flock {CACHE_DIR}/.lock: {}",
                std::io::Error::last_os_error()
            );
        }
        if tar.is_file() {
            return tar; // built by whoever held the lock
        }
        let started = Instant::now();
        self.build(&tar);
        eprintln!(
            "built {} in {:.1} s (cached for the next runs)",
            tar.display(),
            started.elapsed().as_secs_f64()
        );
        tar
    }

    fn build(&self, tar: &Path) {
        let debootstrap = ["/usr/sbin/debootstrap", "/sbin/debootstrap"]
            .into_iter()
            .find(|p| Path::new(p).is_file())
            .unwrap_or_else(|| {
                panic!("debootstrap is missing: run tests/setup.sh (apt-get install debootstrap)")
            });
        let work = TempDir::new_in(Path::new(CACHE_DIR), "build");
        let root = work.path().join("root");
        let mirror = std::env::var("AGENTSH_TEST_DEBIAN_MIRROR")
            .unwrap_or_else(|_| DEFAULT_MIRROR.to_string());
        let mut cmd = Command::new(debootstrap);
        cmd.arg(format!("--variant={}", self.variant));
        if !self.include.is_empty() {
            cmd.arg(format!("--include={}", self.include.join(",")));
        }
        cmd.arg(self.suite).arg(&root).arg(&mirror);
        let out = cmd.output().expect("run debootstrap");
        assert!(
            out.status.success(),
            "debootstrap {} from {mirror} failed (set AGENTSH_TEST_DEBIAN_MIRROR for another mirror):\n{}{}",
            self.suite,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        // Keep only the debs asked for: the reinstall needs them, nothing else does.
        let archives = root.join("var/cache/apt/archives");
        let mut kept = Vec::new();
        for entry in std::fs::read_dir(&archives).expect("read the apt archive cache") {
            let entry = entry.expect("archive entry");
            let name = entry.file_name().to_string_lossy().into_owned();
            let Some(stem) = name.strip_suffix(".deb") else {
                continue;
            };
            let package = stem.split('_').next().unwrap_or_default();
            if self.keep_debs.contains(&package) {
                kept.push(package.to_string());
            } else {
                std::fs::remove_file(entry.path()).expect("remove a deb");
            }
        }
        for want in self.keep_debs {
            assert!(
                kept.iter().any(|k| k == want),
                "debootstrap left no {want} deb in /var/cache/apt/archives"
            );
        }
        let tmp = tar.with_extension(format!("tar.tmp-{}", std::process::id()));
        let out = Command::new("tar")
            .args(["--numeric-owner", "-C"])
            .arg(&root)
            .arg("-cf")
            .arg(&tmp)
            .arg(".")
            .output()
            .expect("run tar");
        assert!(
            out.status.success(),
            "tar of the new root failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        std::fs::rename(&tmp, tar).expect("rename the finished tarball into place");
    }
}

/// 64-bit FNV-1a: a stable name for a spec (no cryptographic claim).
fn fnv1a(data: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in data {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// An unpacked root and the namespaces its commands run in; removed on drop.
pub struct Root {
    holder: Child,
    mnt_fd: OwnedFd,
    net_fd: OwnedFd,
    dir: TempDir,
    root: PathBuf,
}

/// The environment of every command in the root (nothing of the test's).
const ENV: &[(&str, &str)] = &[
    (
        "PATH",
        "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    ),
    ("HOME", "/root"),
    ("LC_ALL", "C"),
    ("DEBIAN_FRONTEND", "noninteractive"),
];

impl Root {
    /// Unpacks `tarball` into a fresh temporary directory and sets up the
    /// namespaces. Panics with the reason (needs root).
    pub fn unpack(tarball: &Path) -> Root {
        let dir = TempDir::new_in(&std::env::temp_dir(), "rootfs");
        let root = dir.path().join("root");
        std::fs::create_dir(&root).expect("create the root directory");
        let out = Command::new("tar")
            .args(["--numeric-owner", "-xpf"])
            .arg(tarball)
            .arg("-C")
            .arg(&root)
            .output()
            .expect("run tar");
        assert!(
            out.status.success(),
            "unpacking {} failed: {}",
            tarball.display(),
            String::from_utf8_lossy(&out.stderr)
        );
        let proc_target = cstr(root.join("proc").as_os_str().as_bytes());
        let dev_target = cstr(root.join("dev").as_os_str().as_bytes());
        let (slash, proc_fs, dev) = (cstr(b"/"), cstr(b"proc"), cstr(b"/dev"));
        let mut cmd = Command::new("/usr/bin/sleep");
        cmd.arg("infinity")
            .stdin(Stdio::null())
            .stdout(Stdio::null());
        // SAFETY: runs in the forked child before exec: raw syscalls on
        // strings built above, nothing allocated.
        unsafe {
            cmd.pre_exec(move || {
                let check = |rc: libc::c_int| {
                    if rc != 0 {
                        Err(std::io::Error::last_os_error())
                    } else {
                        Ok(())
                    }
                };
                check(libc::unshare(libc::CLONE_NEWNS | libc::CLONE_NEWNET))?;
                // Nothing mounted in here may propagate to this machine.
                check(libc::mount(
                    std::ptr::null(),
                    slash.as_ptr(),
                    std::ptr::null(),
                    libc::MS_REC | libc::MS_PRIVATE,
                    std::ptr::null(),
                ))?;
                check(libc::mount(
                    proc_fs.as_ptr(),
                    proc_target.as_ptr(),
                    proc_fs.as_ptr(),
                    libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
                    std::ptr::null(),
                ))?;
                check(libc::mount(
                    dev.as_ptr(),
                    dev_target.as_ptr(),
                    std::ptr::null(),
                    libc::MS_BIND | libc::MS_REC,
                    std::ptr::null(),
                ))?;
                loopback_up()
            });
        }
        let holder = cmd
            .spawn()
            .expect("private mount and network namespaces (needs root)");
        let ns = |kind: &str| -> OwnedFd {
            std::fs::File::open(format!("/proc/{}/ns/{kind}", holder.id()))
                .expect("open a namespace of the holder")
                .into()
        };
        let (mnt_fd, net_fd) = (ns("mnt"), ns("net"));
        Root {
            holder,
            mnt_fd,
            net_fd,
            dir,
            root,
        }
    }

    /// `p` (absolute, as seen inside the root) as a path on this machine.
    /// `/proc` and `/dev` inside are mounts of the namespace, not reachable here.
    pub fn path(&self, p: &str) -> PathBuf {
        self.root.join(p.trim_start_matches('/'))
    }

    /// A scratch directory on this machine, outside the root.
    pub fn scratch(&self) -> &Path {
        self.dir.path()
    }

    /// A command that runs inside the root: both namespaces, `chroot`, cwd
    /// `/`, and the fixed environment [`ENV`]. `program` is a path inside.
    pub fn command(&self, program: &str) -> Command {
        let mut cmd = Command::new(program);
        cmd.env_clear();
        for (k, v) in ENV {
            cmd.env(k, v);
        }
        let (mnt, net) = (self.mnt_fd.as_raw_fd(), self.net_fd.as_raw_fd());
        let root = cstr(self.root.as_os_str().as_bytes());
        let slash = cstr(b"/");
        // SAFETY: runs in the forked child before exec: setns, chroot, chdir.
        unsafe {
            cmd.pre_exec(move || {
                for (fd, kind) in [(mnt, libc::CLONE_NEWNS), (net, libc::CLONE_NEWNET)] {
                    if libc::setns(fd, kind) != 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                }
                if libc::chroot(root.as_ptr()) != 0 || libc::chdir(slash.as_ptr()) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        cmd
    }

    /// Runs `argv` inside the root, stdin closed; returns its output.
    pub fn run(&self, argv: &[&str]) -> Output {
        self.command(argv[0])
            .args(&argv[1..])
            .stdin(Stdio::null())
            .output()
            .unwrap_or_else(|e| panic!("run {argv:?} in the root: {e}"))
    }

    /// Like [`Root::run`], panicking with the output unless it exits 0;
    /// returns stdout.
    pub fn ok(&self, argv: &[&str]) -> String {
        let out = self.run(argv);
        assert!(out.status.success(), "{argv:?} failed: {}", text(&out));
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Copies a file of this machine into the root (mode kept, root-owned).
    pub fn copy_in(&self, from: &Path, to: &str) {
        let dest = self.path(to);
        if let Some(parent) = dest.parent() {
            std::fs::create_dir_all(parent).expect("create the destination directory");
        }
        std::fs::copy(from, &dest)
            .unwrap_or_else(|e| panic!("copy {} to {to}: {e}", from.display()));
    }

    /// `GET url` from inside the root's network namespace (the test process
    /// itself stays outside it: only the helper thread enters).
    pub fn http_get(&self, url: &str) -> Result<String, String> {
        let fd = self.net_fd.as_raw_fd();
        let url = url.to_string();
        std::thread::scope(|s| {
            s.spawn(move || {
                // SAFETY: setns on a valid namespace fd; it changes only this thread.
                if unsafe { libc::setns(fd, libc::CLONE_NEWNET) } != 0 {
                    return Err(format!("setns: {}", std::io::Error::last_os_error()));
                }
                ureq::get(&url)
                    .call()
                    .map_err(|e| e.to_string())
                    .and_then(|mut r| r.body_mut().read_to_string().map_err(|e| e.to_string()))
            })
            .join()
            .unwrap_or_else(|_| Err("the HTTP thread panicked".into()))
        })
    }
}

impl Drop for Root {
    fn drop(&mut self) {
        // Whatever still runs chrooted here (a server a failed test left
        // behind, an entrypoint's orphans) goes first.
        use std::os::unix::fs::MetadataExt;
        if let Ok(ours) = std::fs::metadata(&self.root) {
            for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
                let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
                    continue;
                };
                let Ok(m) = std::fs::metadata(entry.path().join("root")) else {
                    continue;
                };
                if (m.dev(), m.ino()) == (ours.dev(), ours.ino()) {
                    // SAFETY: kill has no memory preconditions.
                    unsafe { libc::kill(pid, libc::SIGKILL) };
                }
            }
        }
        let _ = self.holder.kill();
        let _ = self.holder.wait();
        // The mounts die with the namespace; the TempDir removes the files.
    }
}

/// stdout and stderr of `out`, for assertion messages.
pub fn text(out: &Output) -> String {
    format!(
        "status {}\nstdout: {}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

fn cstr(b: &[u8]) -> CString {
    CString::new(b).expect("no NUL")
}

/// `ip link set lo up`, with an ioctl (no `ip` needed). Runs in a pre_exec
/// closure: no allocation.
fn loopback_up() -> std::io::Result<()> {
    // SAFETY: a plain socket and two ioctls on a zeroed ifreq naming "lo".
    unsafe {
        let s = libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0);
        if s < 0 {
            return Err(std::io::Error::last_os_error());
        }
        let mut req: libc::ifreq = std::mem::zeroed();
        for (i, b) in b"lo\0".iter().enumerate() {
            req.ifr_name[i] = *b as libc::c_char;
        }
        if libc::ioctl(s, libc::SIOCGIFFLAGS, &mut req) != 0 {
            let e = std::io::Error::last_os_error();
            libc::close(s);
            return Err(e);
        }
        req.ifr_ifru.ifru_flags |= (libc::IFF_UP | libc::IFF_RUNNING) as libc::c_short;
        let rc = libc::ioctl(s, libc::SIOCSIFFLAGS, &req);
        let e = std::io::Error::last_os_error();
        libc::close(s);
        if rc != 0 {
            return Err(e);
        }
    }
    Ok(())
}

/// A JSON-lines client for `sdk-supervisor` running inside a root: one
/// request at a time (the install tests need no concurrency).
pub struct SdkDaemon {
    child: Child,
    stdin: std::process::ChildStdin,
    stdout: std::io::BufReader<std::process::ChildStdout>,
    next_id: u64,
}

/// How a command the daemon ran ended.
#[derive(Debug)]
pub struct Ran {
    pub code: Option<i64>,
    pub stdout: String,
    pub stderr: String,
}

impl SdkDaemon {
    /// Starts the daemon from `cmd` (stdin/stdout are taken over) and waits
    /// for its `ready` line.
    pub fn start(mut cmd: Command) -> SdkDaemon {
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn sdk-supervisor");
        let stdin = child.stdin.take().expect("stdin");
        let stdout = std::io::BufReader::new(child.stdout.take().expect("stdout"));
        let mut d = SdkDaemon {
            child,
            stdin,
            stdout,
            next_id: 1,
        };
        let ready = d.line();
        assert_eq!(ready["event"], "ready", "{ready}");
        d
    }

    fn line(&mut self) -> serde_json::Value {
        use std::io::BufRead;
        let mut l = String::new();
        let n = self
            .stdout
            .read_line(&mut l)
            .expect("read from sdk-supervisor");
        assert!(n > 0, "sdk-supervisor exited");
        serde_json::from_str(&l).unwrap_or_else(|e| panic!("bad line {l:?}: {e}"))
    }

    /// Runs one spawn request (see [`crate::sdk`] for each SDK's style).
    pub fn run(&mut self, s: &crate::sdk::Spawn) -> Ran {
        let id = self.next_id;
        self.next_id += 1;
        let env: serde_json::Map<String, serde_json::Value> = s
            .env
            .iter()
            .map(|(k, v)| (k.clone(), serde_json::Value::from(v.clone())))
            .collect();
        let req = serde_json::json!({
            "id": id, "argv": s.argv, "stdin": s.stdin, "setpgid": s.setpgid,
            "pty": s.pty, "env": env,
        });
        writeln!(self.stdin, "{req}").expect("write to sdk-supervisor");
        self.stdin.flush().expect("flush");
        loop {
            let ev = self.line();
            assert_ne!(ev["event"], "error", "{ev}");
            if ev["id"] == id && ev["event"] == "exited" {
                return Ran {
                    code: ev["code"].as_i64(),
                    stdout: ev["stdout"].as_str().unwrap_or_default().to_string(),
                    stderr: ev["stderr"].as_str().unwrap_or_default().to_string(),
                };
            }
        }
    }

    /// The daemon process (e.g. to signal it).
    pub fn child(&mut self) -> &mut Child {
        &mut self.child
    }
}

impl Drop for SdkDaemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
