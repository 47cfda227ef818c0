//! A small QEMU virtual machine running Debian bookworm's own Linux 6.1
//! kernel (the one E2B runs), for the end-to-end tests that need what this
//! machine's kernel may not give: cgroup v2 with the pids, memory and cpu
//! controllers, and the 6.1 kernel's seccomp and Landlock.
//!
//! [`run`] boots the VM, runs a `/bin/sh` script inside as root and returns
//! what it printed, its exit code, the console and how long it took.
//!
//! Inside, the root is this machine's `/`, shared read-only over 9p, under an
//! overlayfs whose upper layer is a tmpfs: the script sees the same files at
//! the same paths (the repository and its built binaries included) and may
//! write anywhere, and nothing it writes reaches this machine. `/proc`,
//! `/sys`, `/dev` (devtmpfs, devpts, a tmpfs on `/dev/shm`), cgroup2 on
//! `/sys/fs/cgroup`, securityfs, and tmpfs on `/tmp` and `/run` are mounted;
//! `lo` is up and there is no other network. The script runs with cwd `/`,
//! the environment `PATH`, `HOME=/root`, `CI=true` plus the caller's, stdin
//! `/dev/null`. A second 9p share, a fresh temporary directory of this
//! machine mounted at `/run/vm-out`, carries the script in and its stdout,
//! stderr and exit code out; the serial console is kept only to explain a
//! failure.
//!
//! The kernel is the one `linux-image-amd64` depends on in apt's lists
//! (`apt-cache depends`). Its `.deb` and busybox-static's are downloaded with
//! `apt-get download` into `/var/cache/agentsh-tests/vm/debs`, and the
//! kernel, the initramfs (busybox, the virtio/9p/overlay modules, the init
//! below) and the kernel release are cached in
//! `/var/cache/agentsh-tests/vm/<package>_<version>-r<recipe>`. It is built
//! in a temporary directory beside it and renamed into place under an
//! exclusive `flock`, so a crash or a concurrent test never sees half of it.
//! The first run needs a Debian mirror (seconds); later runs are offline.
//!
//! The VM uses TCG (`-accel tcg,thread=multi -cpu max`, 2 vCPUs, 2048 MB):
//! KVM guests hang on some nested hosts. `AGENTSH_TEST_VM_ACCEL=kvm` asks for
//! KVM instead. A boot takes about 5 s.
//!
//! Failure modes, each an `Err` naming what happened: `qemu-system-x86_64`
//! missing (run `tests/setup.sh`); apt's lists without `linux-image-amd64`
//! (run `apt-get update`); no mirror for the first download; the VM not
//! finishing within the caller's timeout (qemu is killed); the boot or the
//! init failing before the script ran (the console's tail says where). A
//! script that exits non-zero is not an error: [`VmRun::code`] has it. qemu
//! never outlives the call (killed on timeout, on unwind, and if the calling
//! thread dies).

use crate::server::TempDir;
use std::io::Read;
use std::os::fd::AsRawFd;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Bump when the init or the initramfs change: a new image is built.
const RECIPE_VERSION: u32 = 2;
const CACHE_DIR: &str = "/var/cache/agentsh-tests/vm";
const PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
const MEMORY_MB: u32 = 2048;
const CPUS: u32 = 2;
/// Where the writable share is mounted inside the VM.
const OUT: &str = "/run/vm-out";
/// The modules the init loads, in dependency order (a module the kernel has
/// built in is simply not in its package and is skipped).
const MODULES: &[&str] = &[
    "virtio_ring",
    "virtio",
    "virtio_pci_modern_dev",
    "virtio_pci_legacy_dev",
    "virtio_pci",
    "netfs",
    "fscache",
    "9pnet",
    "9pnet_virtio",
    "9p",
    "overlay",
];

/// The initramfs's `/init` (busybox sh). `@MODULES@` is replaced by the
/// modules it carries, `@RECIPE@` by [`RECIPE_VERSION`].
const INIT: &str = r#"#!/bin/busybox sh
# agentsh test VM init, recipe @RECIPE@ (tests/src/vm.rs)
B=/bin/busybox
fail() { echo "vm-init: $*"; $B sync; $B poweroff -f; }
$B mount -t proc proc /proc
$B mount -t sysfs sys /sys
$B mount -t devtmpfs dev /dev
for m in @MODULES@; do
  $B insmod /mods/$m.ko || echo "vm-init: insmod $m failed"
done
$B mount -t 9p -o trans=virtio,version=9p2000.L,ro,msize=262144 hostroot /lower \
  || fail "mounting the host root (9p, tag hostroot) failed"
$B mount -t tmpfs -o mode=0755 upper /rw || fail "tmpfs for the overlay failed"
$B mkdir -p /rw/upper /rw/work
$B mount -t overlay -o lowerdir=/lower,upperdir=/rw/upper,workdir=/rw/work overlay /newroot \
  || fail "the overlay over the host root failed"
for d in proc sys dev; do
  $B mount --move /$d /newroot/$d || fail "moving /$d into the new root failed"
done
$B mount -t tmpfs -o mode=1777 tmp /newroot/tmp || fail "tmpfs on /tmp failed"
$B mount -t tmpfs -o mode=0755 run /newroot/run || fail "tmpfs on /run failed"
$B mount -t cgroup2 cgroup2 /newroot/sys/fs/cgroup || fail "mounting cgroup2 failed"
if [ -d /newroot/sys/kernel/security ]; then
  $B mount -t securityfs securityfs /newroot/sys/kernel/security || echo "vm-init: no securityfs"
fi
$B mkdir -p /newroot/dev/pts /newroot/dev/shm
$B mount -t devpts -o gid=5,mode=620,ptmxmode=666 devpts /newroot/dev/pts || echo "vm-init: no devpts"
$B mount -t tmpfs -o mode=1777 shm /newroot/dev/shm || echo "vm-init: no /dev/shm"
$B mkdir -p /newroot@OUT@
$B mount -t 9p -o trans=virtio,version=9p2000.L,msize=262144 out /newroot@OUT@ \
  || fail "mounting the output share (9p, tag out) failed"
$B ip link set lo up || echo "vm-init: lo is down"
echo "vm-init: running the script"
# switch_root, not chroot: the overlay becomes the mount namespace's root,
# so a process that joins a mount namespace (setns) lands in it too.
exec $B env -i $B switch_root /newroot /bin/sh -c \
  '/bin/sh @OUT@/env.sh </dev/null >@OUT@/stdout 2>@OUT@/stderr
   echo $? >@OUT@/code
   sync
   echo o >/proc/sysrq-trigger'
"#;

/// What a script printed inside the VM, and how it ended.
#[derive(Debug)]
pub struct VmRun {
    pub stdout: String,
    pub stderr: String,
    /// The script's exit status (128 + n when a signal n ended it).
    pub code: i32,
    /// The serial console (kernel and init messages), for error messages.
    pub console: String,
    /// From starting qemu to its exit (boot and power-off included).
    pub elapsed: Duration,
}

/// Boots the VM, runs `script` (a /bin/sh script) inside as root, returns what it printed.
///
/// `env` is added to the script's environment (after `PATH`, `HOME` and
/// `CI`, so it may override them). `timeout` covers qemu only: building the
/// cached image first (a download on the very first run) is not counted.
pub fn run(script: &str, env: &[(&str, &str)], timeout: Duration) -> Result<VmRun, String> {
    let qemu = qemu()?;
    let image = image()?;
    let out = TempDir::new("vm-out");
    std::fs::write(out.path().join("script.sh"), script)
        .map_err(|e| format!("write the script to {}: {e}", out.path().display()))?;
    std::fs::write(out.path().join("env.sh"), env_script(env)?)
        .map_err(|e| format!("write env.sh to {}: {e}", out.path().display()))?;
    // One VM at a time on this machine: two emulated 2-CPU guests on a
    // small host would slow each other past the timing bounds of the tests
    // inside (and 2 GiB each). Waiting for the other is not counted.
    let _one = locked(".run.lock")?;
    let started = Instant::now();
    let console = boot(&qemu, &image, out.path(), timeout)?;
    let elapsed = started.elapsed();
    let read = |name: &str| std::fs::read(out.path().join(name)).ok();
    let Some(code) = read("code") else {
        return Err(format!(
            "the VM stopped before the script finished (no exit code); console tail:\n{}",
            tail(&console)
        ));
    };
    let code = String::from_utf8_lossy(&code);
    let code = code
        .trim()
        .parse()
        .map_err(|_| format!("the VM wrote a bad exit code {code:?}"))?;
    let text = |name: &str| String::from_utf8_lossy(&read(name).unwrap_or_default()).into_owned();
    Ok(VmRun {
        stdout: text("stdout"),
        stderr: text("stderr"),
        code,
        console,
        elapsed,
    })
}

/// An exclusive `flock` on `<cache>/<name>`, held while the file is open
/// (`.lock`: building the image; `.run.lock`: a VM running).
fn locked(name: &str) -> Result<std::fs::File, String> {
    std::fs::create_dir_all(CACHE_DIR).map_err(|e| format!("create {CACHE_DIR}: {e}"))?;
    let lock = std::fs::File::create(Path::new(CACHE_DIR).join(name))
        .map_err(|e| format!("create {CACHE_DIR}/{name}: {e}"))?;
    // SAFETY: flock on an fd we own; blocks until the holder is done.
    if unsafe { libc::flock(lock.as_raw_fd(), libc::LOCK_EX) } != 0 {
        let e = std::io::Error::last_os_error();
        return Err(format!("flock {CACHE_DIR}/{name}: {e}"));
    }
    Ok(lock)
}

/// The VM's kernel release, e.g. `6.1.0-56-amd64` (building the cached image
/// first if needed).
pub fn kernel_release() -> Result<String, String> {
    let image = image()?;
    std::fs::read_to_string(image.join("release"))
        .map(|s| s.trim().to_string())
        .map_err(|e| format!("read {}/release: {e}", image.display()))
}

/// `qemu-system-x86_64`, or an error saying how to install it.
pub fn qemu() -> Result<PathBuf, String> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/bin".into(), "/usr/local/bin".into()])
        .map(|d| d.join("qemu-system-x86_64"))
        .find(|p| p.is_file())
        .ok_or_else(|| {
            "qemu-system-x86_64 is missing: run tests/setup.sh \
             (apt-get install --no-install-recommends qemu-system-x86)"
                .to_string()
        })
}

/// The wrapper the init runs in the new root: the environment, cwd `/`,
/// then the script.
fn env_script(env: &[(&str, &str)]) -> Result<String, String> {
    let mut s = String::from("# written by tests/src/vm.rs\n");
    let fixed = [("PATH", PATH), ("HOME", "/root"), ("CI", "true")];
    for (name, value) in fixed.iter().chain(env) {
        let valid = !name.is_empty()
            && !name.starts_with(|c: char| c.is_ascii_digit())
            && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        if !valid || value.contains('\0') {
            return Err(format!("cannot pass {name:?}={value:?} to a shell"));
        }
        s.push_str(&format!(
            "export {name}='{}'\n",
            value.replace('\'', r"'\''")
        ));
    }
    s.push_str(&format!("cd / || exit 125\nexec /bin/sh {OUT}/script.sh\n"));
    Ok(s)
}

/// qemu, killed and reaped on drop (an unwinding test included).
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The qemu command line: `image`'s kernel and initramfs, this machine's
/// root read-only and `out` writable over 9p, the console on stdout.
fn qemu_command(qemu: &Path, image: &Path, out: &Path) -> Command {
    let accel = std::env::var("AGENTSH_TEST_VM_ACCEL").unwrap_or_else(|_| "tcg".into());
    let (accel, cpu) = match accel.as_str() {
        "tcg" => ("tcg,thread=multi".to_string(), "max"),
        "kvm" => ("kvm".to_string(), "host"),
        other => (other.to_string(), "max"),
    };
    // qemu's option syntax: a comma in a value is written twice.
    let share = |path: &Path, tag: &str, extra: &str| {
        let p = path.to_string_lossy().replace(',', ",,");
        format!("local,path={p},mount_tag={tag},security_model=none{extra}")
    };
    let mut cmd = Command::new(qemu);
    cmd.args(["-accel", &accel, "-cpu", cpu])
        .args(["-m", &MEMORY_MB.to_string(), "-smp", &CPUS.to_string()])
        .args(["-nographic", "-no-reboot", "-nic", "none"])
        .arg("-kernel")
        .arg(image.join("vmlinuz"))
        .arg("-initrd")
        .arg(image.join("initrd.cpio"))
        .args(["-append", "console=ttyS0 quiet panic=-1"])
        .arg("-virtfs")
        .arg(share(
            Path::new("/"),
            "hostroot",
            ",readonly=on,multidevs=remap",
        ))
        .arg("-virtfs")
        .arg(share(out, "out", ""))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    // SAFETY: runs in the forked child before exec: one prctl, no allocation.
    // qemu dies with the thread that started it, whatever happens to it.
    unsafe {
        cmd.pre_exec(|| {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    cmd
}

/// Runs qemu on `image` with `out` as the writable share until it exits;
/// returns the console (stdout, then stderr).
fn boot(qemu: &Path, image: &Path, out: &Path, timeout: Duration) -> Result<String, String> {
    let mut child = qemu_command(qemu, image, out)
        .spawn()
        .map_err(|e| format!("start {}: {e}", qemu.display()))?;
    let drain = |r: Option<Box<dyn Read + Send>>| {
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            if let Some(mut r) = r {
                let _ = r.read_to_end(&mut buf);
            }
            buf
        })
    };
    let stdout = drain(child.stdout.take().map(|r| Box::new(r) as _));
    let stderr = drain(child.stderr.take().map(|r| Box::new(r) as _));
    let mut qemu_run = Running(child);
    let deadline = Instant::now() + timeout;
    let status = loop {
        match qemu_run.0.try_wait() {
            Ok(Some(status)) => break Some(status),
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(20)),
            Ok(None) => break None,
            Err(e) => return Err(format!("wait for qemu: {e}")),
        }
    };
    drop(qemu_run); // kills it if still running; the pipes then close
    let mut console = stdout.join().unwrap_or_default();
    console.extend(stderr.join().unwrap_or_default());
    let console = plain(&console);
    match status {
        None => Err(format!(
            "the VM did not finish within {timeout:?} (qemu killed); console tail:\n{}",
            tail(&console)
        )),
        Some(s) if !s.success() => Err(format!("qemu failed ({s}):\n{}", tail(&console))),
        Some(_) => Ok(console),
    }
}

/// The console without terminal escape sequences and carriage returns.
fn plain(raw: &[u8]) -> String {
    let text = String::from_utf8_lossy(raw);
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\x1b' => {
                // CSI: ESC [ parameters final-letter; other escapes: one char.
                if chars.next_if_eq(&'[').is_some() {
                    while chars.next().is_some_and(|c| !c.is_ascii_alphabetic()) {}
                } else {
                    chars.next();
                }
            }
            '\r' => {}
            c => out.push(c),
        }
    }
    out
}

/// The last lines of the console, for an error message.
fn tail(console: &str) -> String {
    let lines: Vec<&str> = console.lines().collect();
    lines[lines.len().saturating_sub(40)..].join("\n")
}

/// `linux-image-amd64`'s kernel package and its candidate version, from
/// apt's lists.
fn kernel_package() -> Result<(String, String), String> {
    let hint = "run `apt-get update` (apt's lists must know linux-image-amd64)";
    let apt_cache = |args: &[&str]| -> Result<String, String> {
        let o = Command::new("apt-cache")
            .args(args)
            .output()
            .map_err(|e| format!("run apt-cache: {e}; {hint}"))?;
        Ok(String::from_utf8_lossy(&o.stdout).into_owned())
    };
    let deps = apt_cache(&["depends", "linux-image-amd64"])?;
    let package = deps
        .lines()
        .filter_map(|l| l.trim().strip_prefix("Depends: "))
        .map(|p| p.trim_matches(|c| c == '<' || c == '>'))
        .find(|p| p.starts_with("linux-image-"))
        .ok_or_else(|| format!("apt-cache depends linux-image-amd64 names no kernel; {hint}"))?
        .to_string();
    let show = apt_cache(&["show", "--no-all-versions", &package])?;
    let version = show
        .lines()
        .find_map(|l| l.strip_prefix("Version: "))
        .ok_or_else(|| format!("apt-cache show {package} gives no version; {hint}"))?
        .trim()
        .to_string();
    Ok((package, version))
}

/// The cached image's directory (`vmlinuz`, `initrd.cpio`, `release`),
/// built first if missing.
fn image() -> Result<PathBuf, String> {
    // apt-cache takes a second: resolve once per test binary.
    static IMAGE: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    if let Some(dir) = IMAGE.get() {
        return Ok(dir.clone());
    }
    let dir = cached_image()?;
    Ok(IMAGE.get_or_init(|| dir).clone())
}

/// [`image`], without the memo.
fn cached_image() -> Result<PathBuf, String> {
    let (package, version) = kernel_package()?;
    let dir = Path::new(CACHE_DIR).join(format!(
        "{package}_{}-r{RECIPE_VERSION}",
        version.replace(':', "%3a")
    ));
    if dir.is_dir() {
        return Ok(dir);
    }
    // Released when this function returns.
    let _lock = locked(".lock")?;
    if dir.is_dir() {
        return Ok(dir); // built by whoever held the lock
    }
    let started = Instant::now();
    build(&package, &version, &dir)?;
    eprintln!(
        "built {} in {:.1} s (cached for the next runs)",
        dir.display(),
        started.elapsed().as_secs_f64()
    );
    Ok(dir)
}

/// Builds the image for `package` at `version` into `dir` (under the lock).
fn build(package: &str, version: &str, dir: &Path) -> Result<(), String> {
    let debs = Path::new(CACHE_DIR).join("debs");
    let kernel_deb = deb(&debs, package, Some(version))?;
    let busybox_deb = deb(&debs, "busybox-static", None)?;
    let work = TempDir::new_in(Path::new(CACHE_DIR), "build");
    let (kernel, busybox) = (work.path().join("kernel"), work.path().join("busybox"));
    for (deb, into) in [(&kernel_deb, &kernel), (&busybox_deb, &busybox)] {
        run_ok(Command::new("dpkg-deb").arg("-x").arg(deb).arg(into))?;
    }
    let modules_dir = kernel.join("lib/modules");
    let release = std::fs::read_dir(&modules_dir)
        .map_err(|e| format!("{} has no lib/modules: {e}", kernel_deb.display()))?
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .next()
        .ok_or_else(|| format!("{} has no kernel release", kernel_deb.display()))?;
    let stage = work.path().join("stage");
    std::fs::create_dir(&stage).map_err(|e| format!("create {}: {e}", stage.display()))?;
    let vmlinuz = kernel.join(format!("boot/vmlinuz-{release}"));
    std::fs::copy(&vmlinuz, stage.join("vmlinuz"))
        .map_err(|e| format!("copy {}: {e}", vmlinuz.display()))?;
    let initrd = initramfs(&busybox.join("bin/busybox"), &modules_dir.join(&release))?;
    std::fs::write(stage.join("initrd.cpio"), initrd)
        .and_then(|()| std::fs::write(stage.join("release"), format!("{release}\n")))
        .map_err(|e| format!("write into {}: {e}", stage.display()))?;
    std::fs::rename(&stage, dir).map_err(|e| format!("rename into {}: {e}", dir.display()))
}

/// The cached `.deb` of `package` (at `version` if given, any otherwise),
/// downloaded with `apt-get download` if missing (after an `apt-get update`
/// if the first try fails).
fn deb(debs: &Path, package: &str, version: Option<&str>) -> Result<PathBuf, String> {
    let cached = |dir: &Path| -> Option<PathBuf> {
        let prefix = match version {
            Some(v) => format!("{package}_{}_", v.replace(':', "%3a")),
            None => format!("{package}_"),
        };
        std::fs::read_dir(dir).ok()?.flatten().find_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            (name.starts_with(&prefix) && name.ends_with(".deb")).then(|| e.path())
        })
    };
    if let Some(found) = cached(debs) {
        return Ok(found);
    }
    std::fs::create_dir_all(debs).map_err(|e| format!("create {}: {e}", debs.display()))?;
    let download = TempDir::new_in(debs, "download");
    let spec = match version {
        Some(v) => format!("{package}={v}"),
        None => package.to_string(),
    };
    let get = || {
        run_ok(
            Command::new("apt-get")
                .args(["download", "-q", &spec])
                .current_dir(download.path()),
        )
    };
    if get().is_err() {
        run_ok(Command::new("apt-get").args(["update", "-qq"]))?;
        get().map_err(|e| format!("{e}\n(the first run needs a Debian mirror)"))?;
    }
    let got =
        cached(download.path()).ok_or_else(|| format!("apt-get download {spec} left no .deb"))?;
    let name = got.file_name().unwrap_or_default();
    let dest = debs.join(name);
    std::fs::rename(&got, &dest).map_err(|e| format!("rename into {}: {e}", dest.display()))?;
    Ok(dest)
}

/// Runs `cmd`; an error with its output unless it exits 0.
fn run_ok(cmd: &mut Command) -> Result<(), String> {
    let o = cmd
        .output()
        .map_err(|e| format!("run {:?}: {e}", cmd.get_program()))?;
    if o.status.success() {
        return Ok(());
    }
    Err(format!(
        "{cmd:?} failed ({}): {}{}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    ))
}

/// The initramfs (an uncompressed newc cpio archive): busybox, the
/// [`MODULES`] found under `modules` (the kernel's `lib/modules/<release>`),
/// the init.
fn initramfs(busybox: &Path, modules: &Path) -> Result<Vec<u8>, String> {
    let read = |p: &Path| std::fs::read(p).map_err(|e| format!("read {}: {e}", p.display()));
    let mut found = std::collections::HashMap::new();
    find_modules(&modules.join("kernel"), &mut found);
    let mut cpio = Cpio::default();
    for d in [
        "bin", "dev", "proc", "sys", "mods", "lower", "rw", "newroot",
    ] {
        cpio.entry(d, 0o040_755, 0, &[]);
    }
    cpio.entry("dev/console", 0o020_600, libc::makedev(5, 1), &[]);
    cpio.entry("bin/busybox", 0o100_755, 0, &read(busybox)?);
    let mut loaded = Vec::new();
    for m in MODULES {
        if let Some(path) = found.get(*m) {
            cpio.entry(&format!("mods/{m}.ko"), 0o100_644, 0, &read(path)?);
            loaded.push(*m);
        }
    }
    if !loaded.contains(&"9p") || !loaded.contains(&"overlay") {
        return Err(format!(
            "{} lacks 9p.ko or overlay.ko (found {loaded:?}; compressed modules are not supported)",
            modules.display()
        ));
    }
    let init = INIT
        .replace("@MODULES@", &loaded.join(" "))
        .replace("@RECIPE@", &RECIPE_VERSION.to_string())
        .replace("@OUT@", OUT);
    cpio.entry("init", 0o100_755, 0, init.as_bytes());
    Ok(cpio.finish())
}

/// Every `<name>.ko` under `dir`, by name.
fn find_modules(dir: &Path, found: &mut std::collections::HashMap<String, PathBuf>) {
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if entry.file_type().is_ok_and(|t| t.is_dir()) {
            find_modules(&path, found);
        } else if let Some(name) = entry.file_name().to_string_lossy().strip_suffix(".ko") {
            found.insert(name.to_string(), path);
        }
    }
}

/// A newc ("070701") cpio archive, as the kernel unpacks an initramfs.
#[derive(Default)]
struct Cpio {
    buf: Vec<u8>,
    ino: u32,
}

impl Cpio {
    fn entry(&mut self, name: &str, mode: u32, rdev: libc::dev_t, data: &[u8]) {
        self.ino += 1;
        let (rmaj, rmin) = (libc::major(rdev), libc::minor(rdev));
        let len = u32::try_from(data.len()).unwrap_or(u32::MAX);
        let fields: [u32; 13] = [
            self.ino,
            mode,
            0, // uid
            0, // gid
            1, // nlink
            0, // mtime
            len,
            0, // dev major
            0, // dev minor
            rmaj,
            rmin,
            u32::try_from(name.len() + 1).unwrap_or(u32::MAX),
            0, // check
        ];
        self.buf.extend_from_slice(b"070701");
        for f in fields {
            self.buf.extend_from_slice(format!("{f:08x}").as_bytes());
        }
        self.buf.extend_from_slice(name.as_bytes());
        self.buf.push(0);
        self.pad();
        self.buf.extend_from_slice(data);
        self.pad();
    }

    fn pad(&mut self) {
        while !self.buf.len().is_multiple_of(4) {
            self.buf.push(0);
        }
    }

    fn finish(mut self) -> Vec<u8> {
        self.entry("TRAILER!!!", 0, 0, &[]);
        self.buf
    }
}
