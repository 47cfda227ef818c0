//! Private mount namespaces with the shim installed over `/bin/sh`.
//!
//! A [`Namespace`] is held open by a `sleep` process that unshared its mount
//! namespace, made every mount private (nothing propagates back to this
//! machine) and put overlayfs over `/usr` (which holds `/bin`, a symlink to
//! `usr/bin` on usr-merged systems, and `/usr/lib`), `/etc` and
//! `/var/lib/dpkg` (dpkg-divert writes there), with upper and work
//! directories in a temporary directory. Every other process of a scenario
//! joins it with `setns` in [`Namespace::command`]; files inside it are
//! reached from outside through `/proc/<holder>/root` ([`Namespace::path`]).
//!
//! Inside, the real installer (`agentsh shim install`) puts the shim in
//! place. This machine's `/bin/sh` is never touched: [`host_sh_fingerprint`]
//! lets a test prove it.

use crate::server::{bin, TempDir};
use std::ffi::CString;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};

/// The directories overlaid (each must exist on this machine).
const OVERLAID: &[&str] = &["/usr", "/etc", "/var/lib/dpkg"];

/// A private mount namespace with writable overlays; torn down on drop.
pub struct Namespace {
    holder: Child,
    ns_fd: OwnedFd,
    pub dir: TempDir,
}

impl Namespace {
    /// Creates the namespace and its overlays.
    ///
    /// Panics with the reason (the tests need root and overlayfs).
    ///
    /// Long because the mounts must be made in this order inside the
    /// child that holds the namespace, and the order is the point.
    pub fn new() -> Namespace {
        Namespace::with_overlays(&[])
    }

    /// [`Namespace::new`] with more directories overlaid (before the usual
    /// ones), e.g. `/var/log` and `/var/lib` for a scenario that runs the
    /// server on its default paths.
    pub fn with_overlays(extra: &[&str]) -> Namespace {
        let dir = TempDir::new("ns");
        let mut mounts = Vec::new();
        let targets: Vec<&str> = extra.iter().chain(OVERLAID).copied().collect();
        for (i, target) in targets.iter().enumerate() {
            if !Path::new(target).is_dir() {
                continue;
            }
            let upper = dir.path().join(format!("upper{i}"));
            let work = dir.path().join(format!("work{i}"));
            std::fs::create_dir_all(&upper).expect("create upper dir");
            std::fs::create_dir_all(&work).expect("create work dir");
            let opts = format!(
                "lowerdir={target},upperdir={},workdir={}",
                upper.display(),
                work.display()
            );
            mounts.push((cstr(target), cstr(&opts)));
        }
        let overlay = cstr("overlay");
        let root = cstr("/");
        // A private /run: agentsh's run directory (/run/agentsh: the API
        // socket, the `active` marker, the record of unsupervised runs) of a
        // server or shim inside never lands on this machine. The test
        // servers' own directory (/run/agentsh-tests) stays shared, bound
        // back in through a stash in the namespace's temporary directory.
        let tests_base = crate::server::server_base();
        std::fs::create_dir_all(&tests_base).expect("create the test servers' base");
        let stash = dir.path().join("run-tests");
        std::fs::create_dir_all(&stash).expect("create the stash");
        let (tests_base, stash) = (
            cstr(&tests_base.display().to_string()),
            cstr(&stash.display().to_string()),
        );
        let run = cstr("/run");
        let tmpfs = cstr("tmpfs");
        let run_opts = cstr("mode=0755");
        let private_run = std::path::Path::new("/run").is_dir()
            && crate::server::server_base().starts_with("/run/");
        let mut cmd = Command::new("/usr/bin/sleep");
        cmd.arg("infinity")
            .stdin(Stdio::null())
            .stdout(Stdio::null());
        // SAFETY: the closure runs in the forked child before exec and only
        // makes raw syscalls on strings built above.
        unsafe {
            cmd.pre_exec(move || {
                if libc::unshare(libc::CLONE_NEWNS) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                // Nothing done in here may propagate to this machine's mounts.
                if libc::mount(
                    std::ptr::null(),
                    root.as_ptr(),
                    std::ptr::null(),
                    libc::MS_REC | libc::MS_PRIVATE,
                    std::ptr::null(),
                ) != 0
                {
                    return Err(std::io::Error::last_os_error());
                }
                for (target, opts) in &mounts {
                    if libc::mount(
                        overlay.as_ptr(),
                        target.as_ptr(),
                        overlay.as_ptr(),
                        0,
                        opts.as_ptr().cast(),
                    ) != 0
                    {
                        return Err(std::io::Error::last_os_error());
                    }
                }
                if private_run {
                    let bind = |from: &CString, to: &CString| {
                        libc::mount(
                            from.as_ptr(),
                            to.as_ptr(),
                            std::ptr::null(),
                            libc::MS_BIND | libc::MS_REC,
                            std::ptr::null(),
                        )
                    };
                    if bind(&tests_base, &stash) != 0
                        || libc::mount(
                            tmpfs.as_ptr(),
                            run.as_ptr(),
                            tmpfs.as_ptr(),
                            libc::MS_NOSUID | libc::MS_NODEV,
                            run_opts.as_ptr().cast(),
                        ) != 0
                        || libc::mkdir(tests_base.as_ptr(), 0o755) != 0
                        || bind(&stash, &tests_base) != 0
                    {
                        return Err(std::io::Error::last_os_error());
                    }
                }
                Ok(())
            });
        }
        // spawn returns once the child has exec'd, i.e. after the mounts.
        let holder = cmd
            .spawn()
            .expect("private mount namespace with overlays (needs root and overlayfs)");
        let ns_fd = std::fs::File::open(format!("/proc/{}/ns/mnt", holder.id()))
            .expect("open the namespace")
            .into();
        Namespace { holder, ns_fd, dir }
    }

    /// A command that runs inside the namespace (cwd `/` unless `cwd` is set
    /// through [`Namespace::command_in`]).
    pub fn command(&self, program: impl AsRef<std::ffi::OsStr>) -> Command {
        self.command_in(program, "/")
    }

    /// Like [`Namespace::command`], starting in `cwd` (a path inside the namespace).
    pub fn command_in(&self, program: impl AsRef<std::ffi::OsStr>, cwd: &str) -> Command {
        let mut cmd = Command::new(program);
        let fd = self.ns_fd.as_raw_fd();
        let cwd = cstr(cwd);
        // SAFETY: runs in the forked child before exec: setns and chdir only.
        unsafe {
            cmd.pre_exec(move || {
                if libc::setns(fd, libc::CLONE_NEWNS) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                // setns moved us to the namespace's root; go where asked.
                if libc::chdir(cwd.as_ptr()) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        cmd
    }

    /// `p` (absolute, as seen inside the namespace) reached from outside it.
    pub fn path(&self, p: &str) -> PathBuf {
        PathBuf::from(format!(
            "/proc/{}/root{}",
            self.holder.id(),
            if p.starts_with('/') {
                p.to_string()
            } else {
                format!("/{p}")
            }
        ))
    }

    /// Runs the real installer inside the namespace. Panics if it fails.
    pub fn install_shim(&self, bash: bool) -> String {
        self.install_shim_for(bash, &[])
    }

    /// [`Namespace::install_shim`], standing in for `programs` too
    /// (`--programs`).
    pub fn install_shim_for(&self, bash: bool, programs: &[&str]) -> String {
        let mut cmd = self.command(bin("agentsh"));
        cmd.args(["shim", "install", "--shim-binary"])
            .arg(bin("agentsh-shell-shim"));
        if bash {
            cmd.arg("--bash");
        }
        if !programs.is_empty() {
            cmd.arg("--programs").arg(programs.join(","));
        }
        let out = cmd.output().expect("run agentsh shim install");
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(out.status.success(), "agentsh shim install failed: {text}");
        text
    }

    /// Mounts a fresh tmpfs (mode 0755) on `target` inside the namespace, for
    /// a workspace that leaves this machine's files alone. When the build's
    /// binaries live beneath `target` (a checkout under `/srv`), their
    /// directory is bind-mounted back at the same path on top of the tmpfs, so
    /// [`bin`] paths keep working inside the namespace.
    ///
    /// Panics if a mount fails, or if the binaries are beneath `workspace`
    /// itself: agentsh would then protect its own binaries inside the agent's
    /// workspace (taking create rights on the workspace away from every tree).
    pub fn mount_scratch(&self, target: &str, workspace: &str) {
        // The whole target directory: target/debug and target/static.
        let bins = bin("agentsh");
        let bins = bins
            .parent()
            .and_then(Path::parent)
            .expect("the target directory");
        let bins = bins.canonicalize().unwrap_or_else(|_| bins.to_path_buf());
        let target_real = Path::new(target)
            .canonicalize()
            .unwrap_or_else(|_| PathBuf::from(target));
        assert!(
            !bins.starts_with(workspace),
            "the binaries are built under {workspace} ({}), the agent workspace of the demo and \
             the tests: agentsh would protect them inside the workspace; check the repository out \
             elsewhere (or set CARGO_TARGET_DIR)",
            bins.display()
        );
        let keep = bins.starts_with(&target_real);
        let stash = self.dir.path().join("kept-binaries");
        let (b, s) = (bins.to_string_lossy(), stash.to_string_lossy());
        let mut steps: Vec<Vec<&str>> = Vec::new();
        if keep {
            std::fs::create_dir_all(&stash).expect("create the stash mount point");
            steps.push(vec!["/usr/bin/mount", "--bind", &b, &s]);
        }
        steps.push(vec![
            "/usr/bin/mount",
            "-t",
            "tmpfs",
            "-o",
            "mode=0755",
            "agentsh-scratch",
            target,
        ]);
        if keep {
            steps.push(vec!["/usr/bin/mkdir", "-p", &b]);
            steps.push(vec!["/usr/bin/mount", "--move", &s, &b]);
        }
        for argv in steps {
            let out = self.run(&argv, &[]);
            assert!(out.status.success(), "{argv:?}: {out:?}");
        }
    }

    /// Writes `/etc/agentsh/shim.conf` inside the namespace, root-owned with `mode`.
    pub fn write_shim_conf(&self, text: &str, mode: u32) {
        let p = self.path("/etc/agentsh/shim.conf");
        std::fs::create_dir_all(p.parent().expect("parent")).expect("create /etc/agentsh");
        std::fs::write(&p, text).expect("write shim.conf");
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).expect("chmod");
        std::os::unix::fs::chown(&p, Some(0), Some(0)).expect("chown");
    }

    /// A shim.conf pointing at `server_url` (`unix:/path`), with `mode`
    /// (`auto`, `on`, `off`), allowing the workspace's own build of
    /// agentsh-unixwrap as the wrapper.
    pub fn configure(&self, server_url: &str, mode: &str) {
        self.write_shim_conf(
            &format!(
                "shim_install={mode}\nserver={server_url}\nsession=default\nwrapper={}\n",
                bin("agentsh-unixwrap").display()
            ),
            0o644,
        );
    }

    /// Runs `argv` inside the namespace with stdin closed; returns its output.
    pub fn run(&self, argv: &[&str], env: &[(&str, &str)]) -> Output {
        let mut cmd = self.command(argv[0]);
        cmd.args(&argv[1..]).stdin(Stdio::null());
        for (k, v) in env {
            cmd.env(k, v);
        }
        cmd.output().expect("run a command in the namespace")
    }
}

impl Namespace {
    /// Like [`Namespace::run`], with a log file open on fd 9 and
    /// `AGENTSH_WRAPPER_LOG_FD=9`; returns the output and what was logged.
    pub fn run_logged(&self, argv: &[&str], env: &[(&str, &str)]) -> (Output, String) {
        let log_path = self.dir.path().join(format!(
            "log-{}",
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos())
        ));
        let log = std::fs::File::create(&log_path).expect("create log file");
        let log_fd = log.as_raw_fd();
        let mut cmd = self.command(argv[0]);
        cmd.args(&argv[1..])
            .stdin(Stdio::null())
            .env(agentsh_proto::env::WRAPPER_LOG_FD, "9");
        for (k, v) in env {
            cmd.env(k, v);
        }
        // SAFETY: dup2 only, in the child before exec.
        unsafe {
            cmd.pre_exec(move || {
                if libc::dup2(log_fd, 9) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let out = cmd.output().expect("run a command in the namespace");
        drop(log);
        let text = std::fs::read_to_string(&log_path).unwrap_or_default();
        (out, text)
    }
}

impl Default for Namespace {
    fn default() -> Self {
        Namespace::new()
    }
}

impl Drop for Namespace {
    fn drop(&mut self) {
        let _ = self.holder.kill();
        let _ = self.holder.wait();
    }
}

fn cstr(s: &str) -> CString {
    CString::new(s).expect("no NUL")
}

/// What this machine's `/bin/sh` is: link target or content, plus inode and
/// mtime. Take it before a scenario and compare after.
pub fn host_sh_fingerprint() -> String {
    let mut s = String::new();
    for p in ["/bin/sh", "/bin/bash", "/usr/bin/sh", "/usr/bin/bash"] {
        use std::os::unix::fs::MetadataExt;
        match std::fs::symlink_metadata(p) {
            Ok(m) => {
                let what = match std::fs::read_link(p) {
                    Ok(t) => format!("-> {}", t.display()),
                    Err(_) => format!("{} bytes", m.len()),
                };
                s += &format!("{p}: ino {} mtime {} {what}\n", m.ino(), m.mtime());
            }
            Err(e) => s += &format!("{p}: {e}\n"),
        }
    }
    for p in ["/bin/sh.real", "/bin/bash.real", "/usr/lib/agentsh/shells"] {
        s += &format!("{p}: exists={}\n", std::fs::symlink_metadata(p).is_ok());
    }
    s
}
