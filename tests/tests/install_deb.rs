//! End-to-end: the Debian package and the Docker layer in a real Debian root.
//!
//! A debootstrapped bookworm root (cached, see `agentsh_tests::rootfs`) gets
//! the `.deb` that `packaging/deb/build.sh` builds from this workspace's debug
//! binaries, the shim is installed with the real CLI, the server runs the way
//! the systemd unit starts it (its capability bounding set, no_new_privs and
//! umask replayed with setpriv), and SDK-style daemons spawn shells inside.
//! Then dash is reinstalled with apt (offline), the shim is uninstalled and the
//! root compared with what it was, and the package is removed and purged.
//!
//! The Docker files cannot be built here (no engine): their COPY and RUN
//! lines are parsed and replayed into a root instead, and the example's
//! ENTRYPOINT runs an SDK daemon. Needs root; the first run builds the cached
//! root (network, minutes).

// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

use agentsh_tests::rootfs::{text, Root, SdkDaemon, BOOKWORM_MINBASE, BOOKWORM_PROGRAMS};
use agentsh_tests::sdk;
use agentsh_tests::server::{bin, require_root, TempDir};
use std::collections::BTreeSet;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the workspace root")
        .to_path_buf()
}

/// Builds the .deb from the debug binaries of this build (the ones `bin()` finds).
fn build_deb(out: &Path) -> PathBuf {
    let target_dir = bin("agentsh")
        .parent()
        .and_then(Path::parent)
        .expect("target/debug/agentsh")
        .to_path_buf();
    let o = Command::new(repo().join("packaging/deb/build.sh"))
        .args(["--profile", "debug", "--out"])
        .arg(out)
        .env("CARGO_TARGET_DIR", &target_dir)
        .output()
        .expect("run packaging/deb/build.sh");
    assert!(o.status.success(), "build.sh failed: {}", text(&o));
    PathBuf::from(String::from_utf8_lossy(&o.stdout).trim())
}

/// What a shell path is, to compare before and after.
#[derive(Debug, PartialEq, Eq)]
struct FileState {
    kind: &'static str,
    link_target: Option<PathBuf>,
    bytes: Option<Vec<u8>>,
    mode: u32,
    uid: u32,
    gid: u32,
    ino: u64,
}

fn file_state(p: &Path) -> FileState {
    let m = std::fs::symlink_metadata(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    let kind = if m.file_type().is_symlink() {
        "symlink"
    } else if m.is_file() {
        "file"
    } else {
        "other"
    };
    FileState {
        kind,
        link_target: std::fs::read_link(p).ok(),
        bytes: m.is_file().then(|| std::fs::read(p).expect("read")),
        mode: m.mode(),
        uid: m.uid(),
        gid: m.gid(),
        ino: m.ino(),
    }
}

fn diversions(root: &Root) -> BTreeSet<String> {
    root.ok(&["/usr/bin/dpkg-divert", "--list"])
        .lines()
        .map(str::to_string)
        .collect()
}

/// `dpkg --verify` finds every file of `pkgs` as the package shipped it.
fn dpkg_verifies(root: &Root, pkgs: &[&str]) {
    for pkg in pkgs {
        let out = root.run(&["/usr/bin/dpkg", "--verify", pkg]);
        assert!(
            out.status.success() && out.stdout.is_empty(),
            "dpkg --verify {pkg}: {}",
            text(&out)
        );
    }
}

fn is_shim(root: &Root, p: &str) -> bool {
    std::fs::read(root.path(p)).is_ok_and(|b| {
        b.windows(agentsh_proto::install::SHIM_MARKER.len())
            .any(|w| w == agentsh_proto::install::SHIM_MARKER)
    })
}

fn audit_events(root: &Root) -> Vec<serde_json::Value> {
    std::fs::read_to_string(root.path("/var/log/agentsh/audit.jsonl"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

/// Exec events denied by `rule` for a program named `name`.
fn denials(root: &Root, name: &str, rule: &str) -> Vec<serde_json::Value> {
    audit_events(root)
        .into_iter()
        .filter(|e| {
            e["type"] == "execve"
                && e["decision"] == "deny"
                && e["rule"] == rule
                && e["filename"]
                    .as_str()
                    .is_some_and(|f| f.rsplit('/').next() == Some(name))
        })
        .collect()
}

/// `Key=value` lines of the systemd unit (the last one wins, as in systemd).
fn unit_setting(unit: &str, key: &str) -> Option<String> {
    unit.lines()
        .rev()
        .find_map(|l| l.strip_prefix(&format!("{key}=")))
        .map(|v| v.trim().to_string())
}

/// Capability numbers (linux/capability.h) of the names the unit may use.
fn cap_number(name: &str) -> u32 {
    match name {
        "CAP_CHOWN" => 0,
        "CAP_DAC_OVERRIDE" => 1,
        "CAP_DAC_READ_SEARCH" => 2,
        "CAP_FOWNER" => 3,
        "CAP_KILL" => 5,
        "CAP_NET_BIND_SERVICE" => 10,
        "CAP_SYS_PTRACE" => 19,
        other => panic!("the unit names {other}: add it to cap_number"),
    }
}

/// Starts `agentsh server` inside the root as packaging/systemd/agentsh.service
/// would: its ExecStart, under setpriv with the unit's CapabilityBoundingSet
/// and NoNewPrivileges, with its UMask. Returns the server and the expected
/// effective capability mask.
fn start_server_as_the_unit_does(root: &Root) -> (ServerGuard, u64) {
    let unit = std::fs::read_to_string(repo().join("packaging/systemd/agentsh.service"))
        .expect("read the unit");
    let exec: Vec<String> = unit_setting(&unit, "ExecStart")
        .expect("ExecStart")
        .split_whitespace()
        .map(str::to_string)
        .collect();
    let caps: Vec<String> = unit_setting(&unit, "CapabilityBoundingSet")
        .expect("CapabilityBoundingSet")
        .split_whitespace()
        .map(str::to_string)
        .collect();
    let mask = caps.iter().fold(0u64, |m, c| m | 1 << cap_number(c));
    let bounding = std::iter::once("-all".to_string())
        .chain(
            caps.iter()
                .map(|c| format!("+{}", c.trim_start_matches("CAP_").to_ascii_lowercase())),
        )
        .collect::<Vec<_>>()
        .join(",");
    let umask =
        u32::from_str_radix(&unit_setting(&unit, "UMask").expect("UMask"), 8).expect("octal UMask");
    let mut cmd = root.command("/usr/bin/setpriv");
    cmd.arg(format!("--bounding-set={bounding}"));
    if unit_setting(&unit, "NoNewPrivileges").as_deref() == Some("yes") {
        cmd.arg("--no-new-privs");
    }
    cmd.arg("--").args(&exec);
    let log = std::fs::File::create(root.scratch().join("server.log")).expect("server log");
    cmd.stdin(std::process::Stdio::null())
        .stdout(log.try_clone().expect("dup"))
        .stderr(log);
    // SAFETY: umask only, between fork and exec.
    unsafe {
        std::os::unix::process::CommandExt::pre_exec(&mut cmd, move || {
            libc::umask(umask as libc::mode_t);
            Ok(())
        });
    }
    let child = cmd.spawn().expect("start agentsh server in the root");
    let guard = ServerGuard {
        child,
        log: root.scratch().join("server.log"),
    };
    let ready = root.run(&["/usr/bin/agentsh", "ready", "--timeout", "20"]);
    assert!(
        ready.status.success(),
        "the server did not get ready: {}\n{}",
        text(&ready),
        guard.log()
    );
    (guard, mask)
}

struct ServerGuard {
    child: Child,
    log: PathBuf,
}

impl ServerGuard {
    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    fn effective_caps(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id()))
            .expect("server status");
        let hex = status
            .lines()
            .find_map(|l| l.strip_prefix("CapEff:"))
            .expect("CapEff")
            .trim()
            .to_string();
        u64::from_str_radix(&hex, 16).expect("hex CapEff")
    }

    fn stop(mut self) {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(self.child.id() as i32),
            nix::sys::signal::Signal::SIGTERM,
        );
        let _ = self.child.wait();
    }
}

impl Drop for ServerGuard {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The E2B daemon (root) and the Daytona daemon (as `agent`, uid 1000): an
/// allowed command runs; su, nested, is refused with 126 and audited; a write
/// to /etc is refused by Landlock even for root.
fn sdk_shells_are_supervised(root: &Root, round: &str) {
    let before = denials(root, "su", "deny-privilege-escalation").len();
    let mut e2b = SdkDaemon::start(root.command("/usr/local/bin/sdk-supervisor"));
    let r = e2b.run(&sdk::e2b(&format!(
        "echo e2b-{round}; id -u; su -c true; echo su-rc=$?; touch /etc/agentsh-test-{round} 2>/dev/null; echo etc-rc=$?"
    )));
    assert_eq!(r.code, Some(0), "{r:?}");
    assert!(r.stdout.contains(&format!("e2b-{round}\n0\n")), "{r:?}");
    assert!(r.stdout.contains("su-rc=126"), "{r:?}");
    assert!(r.stdout.contains("etc-rc=1"), "{r:?}");
    assert!(!root.path(&format!("/etc/agentsh-test-{round}")).exists());

    let mut cmd = root.command("/usr/bin/setpriv");
    cmd.args(["--reuid=1000", "--regid=1000", "--clear-groups", "--"])
        .arg("/usr/local/bin/sdk-supervisor")
        .env("HOME", "/home/agent");
    let mut daytona = SdkDaemon::start(cmd);
    let r = daytona.run(&sdk::daytona_stdin(&format!(
        "echo daytona-{round} > \"$HOME/note\"; cat \"$HOME/note\"\n\
         cp /usr/bin/true \"$HOME/own-tool\" && \"$HOME/own-tool\"; echo home-exec-rc=$?\n\
         printf '#!/bin/sh\\necho own-script-ran\\n' > \"$HOME/s\"; chmod 0700 \"$HOME/s\"; \"$HOME/s\"\n\
         sh -c 'true; sh -c \"su -c true\"'\necho nested-rc=$?\n"
    )));
    assert_eq!(r.code, Some(0), "{r:?}");
    assert!(r.stdout.contains(&format!("daytona-{round}")), "{r:?}");
    // A program the agent put in its 0700 home runs (the server resolves it
    // through /proc/<pid>/root, as root, into a directory only uid 1000 may search).
    assert!(r.stdout.contains("home-exec-rc=0"), "{r:?}");
    assert!(r.stdout.contains("own-script-ran"), "{r:?}");
    assert!(r.stdout.contains("nested-rc=126"), "{r:?}");
    let after = denials(root, "su", "deny-privilege-escalation");
    assert!(
        after.len() >= before + 2,
        "both su execs must be denied in the audit JSONL: {after:?}"
    );
    assert!(
        after.iter().any(|e| e["depth"].as_u64() >= Some(2)),
        "the Daytona su ran two shells deep: {after:?}"
    );
}

#[test]
fn deb_installs_supervises_sdk_shells_survives_a_dash_reinstall_and_uninstalls_exactly() {
    if !require_root(
        "deb_installs_supervises_sdk_shells_survives_a_dash_reinstall_and_uninstalls_exactly",
    ) {
        return;
    }
    let tarball = BOOKWORM_MINBASE.cached();
    let root = Root::unpack(&tarball);
    let deb = build_deb(root.scratch());
    root.copy_in(&deb, "/tmp/agentsh.deb");
    root.copy_in(&bin("sdk-supervisor"), "/usr/local/bin/sdk-supervisor");

    let sh_before = file_state(&root.path("/bin/sh"));
    let bash_before = file_state(&root.path("/bin/bash"));
    let divert_before = diversions(&root);

    // Install as the docs say (`apt-get install ./agentsh_*.deb`; offline:
    // the Depends are in the root): files where the unit and the shim expect
    // them, /bin/sh untouched.
    root.ok(&["/usr/bin/apt-get", "install", "-y", "/tmp/agentsh.deb"]);
    for b in ["agentsh", "agentsh-unixwrap", "agentsh-shell-shim"] {
        assert!(root.path(&format!("/usr/bin/{b}")).is_file(), "{b}");
    }
    let conffiles = root.ok(&["/usr/bin/dpkg-query", "-W", "-f=${Conffiles}", "agentsh"]);
    for c in [
        "/etc/agentsh/shim.conf",
        "/etc/agentsh/config.yaml",
        "/etc/agentsh/policies/agent-default.yaml",
    ] {
        assert!(conffiles.contains(c), "{c} must be a conffile: {conffiles}");
    }
    let state = std::fs::metadata(root.path("/var/lib/agentsh")).expect("state dir");
    assert_eq!(state.mode() & 0o7777, 0o711);
    let logs = std::fs::metadata(root.path("/var/log/agentsh")).expect("log dir");
    assert_eq!(
        (logs.mode() & 0o7777, logs.uid(), logs.gid()),
        (0o750, 0, 0),
        "the audit log's directory is root's only"
    );
    assert_eq!(
        file_state(&root.path("/bin/sh")),
        sh_before,
        "dpkg -i must not touch /bin/sh"
    );
    assert_eq!(diversions(&root), divert_before);

    // The shim, explicitly.
    root.ok(&["/usr/bin/agentsh", "shim", "install", "--bash"]);
    root.ok(&["/usr/bin/agentsh", "shim", "status"]);
    root.ok(&[
        "/usr/sbin/useradd",
        "-m",
        "-u",
        "1000",
        "-s",
        "/bin/bash",
        "agent",
    ]);
    std::fs::set_permissions(
        root.path("/home/agent"),
        std::fs::Permissions::from_mode(0o700),
    )
    .expect("chmod home");

    let (server, mask) = start_server_as_the_unit_does(&root);
    assert_eq!(
        server.effective_caps(),
        mask,
        "the server runs with the unit's capabilities only"
    );
    sdk_shells_are_supervised(&root, "first");

    // Removal is refused while the shim is in, and changes nothing.
    let out = root.run(&["/usr/bin/dpkg", "-r", "agentsh"]);
    assert!(!out.status.success(), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("run `agentsh shim uninstall` first"),
        "{}",
        text(&out)
    );
    assert_eq!(
        root.ok(&[
            "/usr/bin/dpkg-query",
            "-W",
            "-f=${db:Status-Status}",
            "agentsh"
        ]),
        "installed"
    );
    assert!(root.path("/usr/bin/agentsh-unixwrap").is_file());

    // An upgrade (here: the same package again, its maintainer scripts
    // running under supervision) leaves the shim as it is.
    let shim_before = file_state(&root.path("/bin/sh"));
    root.ok(&["/usr/bin/dpkg", "-i", "/tmp/agentsh.deb"]);
    assert_eq!(file_state(&root.path("/bin/sh")), shim_before);
    root.ok(&["/usr/bin/agentsh", "shim", "status"]);

    // The server stopped: agentsh has run in this container's life, so
    // shim_install=auto refuses (126) rather than run shells unsupervised.
    server.stop();
    let out = root.run(&["/bin/sh", "-c", "echo ran"]);
    assert_eq!(out.status.code(), Some(126), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("agentsh has already run in this container"),
        "{}",
        text(&out)
    );
    // Reinstalling dash, as at image build time: a fresh container of the
    // image (its /run without agentsh's marker) and no server, so
    // shim_install=auto runs the maintainer scripts unsupervised. Offline:
    // the deb is cached.
    std::fs::remove_dir_all(root.path("/run/agentsh")).expect("a fresh /run");
    root.ok(&["/usr/bin/apt-get", "install", "--reinstall", "-y", "dash"]);
    let divert = diversions(&root);
    assert!(
        divert.contains("local diversion of /bin/sh to /bin/sh.real"),
        "{divert:?}"
    );
    let owner = root.ok(&["/usr/bin/dpkg", "-S", "/bin/sh"]);
    assert!(
        owner.contains("local diversion to: /bin/sh.real") && owner.contains("dash: /bin/sh"),
        "{owner}"
    );
    assert!(is_shim(&root, "/bin/sh"), "/bin/sh must still be the shim");
    assert_eq!(
        std::fs::read_link(root.path("/bin/sh.real")).ok(),
        Some(PathBuf::from("dash")),
        "dash's /bin/sh went to /bin/sh.real"
    );
    root.ok(&["/usr/bin/agentsh", "shim", "status"]);
    let (server, _) = start_server_as_the_unit_does(&root);
    sdk_shells_are_supervised(&root, "after-dash-reinstall");

    // Uninstall restores the originals exactly.
    root.ok(&["/usr/bin/agentsh", "shim", "uninstall"]);
    let sh_after = file_state(&root.path("/bin/sh"));
    // dpkg wrote a new `sh -> dash` symlink on the reinstall: same in all but inode.
    assert_eq!(
        FileState {
            ino: sh_before.ino,
            ..sh_after
        },
        sh_before
    );
    assert_eq!(file_state(&root.path("/bin/bash")), bash_before);
    assert_eq!(diversions(&root), divert_before);
    for p in ["/bin/sh.real", "/bin/bash.real", "/usr/lib/agentsh"] {
        assert!(
            std::fs::symlink_metadata(root.path(p)).is_err(),
            "{p} left behind"
        );
    }
    dpkg_verifies(&root, &["dash", "bash"]);

    // Now removal works; purge takes config and state, keeps the audit log.
    server.stop();
    root.ok(&["/usr/bin/dpkg", "-r", "agentsh"]);
    assert!(!root.path("/usr/bin/agentsh").exists());
    assert!(
        root.path("/etc/agentsh/config.yaml").exists(),
        "remove keeps conffiles"
    );
    root.ok(&["/usr/bin/dpkg", "-P", "agentsh"]);
    assert!(!root.path("/etc/agentsh").exists());
    assert!(!root.path("/var/lib/agentsh").exists());
    assert!(root.path("/var/log/agentsh/audit.jsonl").is_file());
}

#[test]
fn program_shims_survive_a_package_reinstall_and_uninstall_exactly() {
    if !require_root("program_shims_survive_a_package_reinstall_and_uninstall_exactly") {
        return;
    }
    let root = Root::unpack(&BOOKWORM_PROGRAMS.cached());
    for b in ["agentsh", "agentsh-unixwrap", "agentsh-shell-shim"] {
        root.copy_in(&bin(b), &format!("/usr/bin/{b}"));
    }
    let files = ["/usr/bin/python3.11", "/usr/bin/node", "/usr/bin/python3"];
    let before: Vec<FileState> = files.iter().map(|f| file_state(&root.path(f))).collect();
    let divert_before = diversions(&root);

    let out = root.ok(&["/usr/bin/agentsh", "shim", "install", "--programs", "sdk"]);
    for p in ["/usr/bin/python3.11", "/usr/bin/node"] {
        assert!(is_shim(&root, p), "{p}: {out}");
        let divert = diversions(&root);
        assert!(
            divert.contains(&format!("local diversion of {p} to {p}.real")),
            "{divert:?}"
        );
    }
    // python3 -> python3.11 is still the package's symlink.
    assert_eq!(file_state(&root.path("/usr/bin/python3")), before[2]);
    let status = root.ok(&["/usr/bin/agentsh", "shim", "status"]);
    assert!(
        status.contains("/usr/bin/node: agentsh-shell-shim"),
        "{status}"
    );

    // A package upgrade (here: python's own, reinstalled offline; no server
    // ever ran, so `auto` lets its maintainer scripts' python run) writes
    // the package's file to the kept original, never over the shim.
    root.ok(&[
        "/usr/bin/apt-get",
        "install",
        "--reinstall",
        "-y",
        "python3.11-minimal",
    ]);
    assert!(
        is_shim(&root, "/usr/bin/python3.11"),
        "the shim was overwritten"
    );
    let owner = root.ok(&["/usr/bin/dpkg", "-S", "/usr/bin/python3.11"]);
    assert!(
        owner.contains("local diversion to: /usr/bin/python3.11.real"),
        "{owner}"
    );
    assert_eq!(
        std::fs::read(root.path("/usr/bin/python3.11.real")).ok(),
        before[0].bytes,
        "the package's python went to python3.11.real"
    );
    root.ok(&["/usr/bin/agentsh", "shim", "status"]);

    // Uninstall: the files and dpkg's database as they were.
    root.ok(&["/usr/bin/agentsh", "shim", "uninstall"]);
    for (f, was) in files.iter().zip(&before) {
        let now = file_state(&root.path(f));
        // The reinstall wrote python3.11 anew: the same in all but inode.
        assert_eq!(
            FileState {
                ino: was.ino,
                ..now
            },
            *was,
            "{f}"
        );
    }
    assert_eq!(diversions(&root), divert_before);
    for p in [
        "/usr/bin/python3.11.real",
        "/usr/bin/node.real",
        "/usr/lib/agentsh",
    ] {
        assert!(
            std::fs::symlink_metadata(root.path(p)).is_err(),
            "{p} left behind"
        );
    }
    dpkg_verifies(&root, &["python3.11-minimal", "nodejs"]);
}

/// The instructions of stage `name` (or of the last stage), continuation
/// lines joined, comments dropped.
fn stage_instructions(dockerfile: &str, name: Option<&str>) -> Vec<String> {
    let mut stages: Vec<(String, Vec<String>)> = Vec::new();
    for line in dockerfile.replace("\\\n", " ").lines() {
        let l = line.trim();
        if l.is_empty() || l.starts_with('#') {
            continue;
        }
        if let Some(from) = l.strip_prefix("FROM ") {
            let words: Vec<&str> = from.split_whitespace().collect();
            let stage = match words.as_slice() {
                [_, as_kw, n] if as_kw.eq_ignore_ascii_case("AS") => n.to_string(),
                _ => String::new(),
            };
            stages.push((stage, Vec::new()));
        } else if let Some((_, instrs)) = stages.last_mut() {
            instrs.push(l.to_string());
        }
    }
    match name {
        Some(n) => stages.into_iter().find(|(s, _)| s == n).map(|(_, i)| i),
        None => stages.pop().map(|(_, i)| i),
    }
    .unwrap_or_default()
}

/// Copies `src` (a file, or a directory's contents when `dir_src`) to `dest`
/// inside `to_root`, with Docker's COPY rules for a destination ending in `/`.
fn docker_copy(src: &Path, dir_src: bool, to_root: &Path, dest: &str) {
    let dest_path = to_root.join(dest.trim_start_matches('/'));
    if dir_src {
        std::fs::create_dir_all(&dest_path).expect("dest dir");
        let o = Command::new("cp")
            .arg("-a")
            .arg(format!("{}/.", src.display()))
            .arg(&dest_path)
            .output()
            .expect("cp");
        assert!(o.status.success(), "COPY {}: {}", src.display(), text(&o));
    } else {
        let target = if dest.ends_with('/') {
            std::fs::create_dir_all(&dest_path).expect("dest dir");
            dest_path.join(src.file_name().expect("file name"))
        } else {
            std::fs::create_dir_all(dest_path.parent().expect("parent")).expect("dest dir");
            dest_path
        };
        std::fs::copy(src, &target)
            .unwrap_or_else(|e| panic!("COPY {} {}: {e}", src.display(), target.display()));
    }
}

/// `COPY --from=STAGE a b c DEST` -> (stage, [a, b, c], DEST).
fn parse_copy(instr: &str) -> Option<(String, Vec<String>, String)> {
    let rest = instr.strip_prefix("COPY ")?;
    let mut words: Vec<String> = rest.split_whitespace().map(str::to_string).collect();
    let from = words
        .iter()
        .position(|w| w.starts_with("--from="))
        .map(|i| words.remove(i))?;
    let dest = words.pop()?;
    Some((from.trim_start_matches("--from=").to_string(), words, dest))
}

fn json_array(instr: &str, keyword: &str) -> Vec<String> {
    let body = instr
        .strip_prefix(keyword)
        .unwrap_or_else(|| panic!("{keyword}"));
    serde_json::from_str(body.trim()).unwrap_or_else(|e| panic!("{keyword} must be exec form: {e}"))
}

#[test]
fn docker_layer_replayed_into_a_root_runs_an_sdk_daemon_under_the_entrypoint() {
    if !require_root("docker_layer_replayed_into_a_root_runs_an_sdk_daemon_under_the_entrypoint") {
        return;
    }
    let root = Root::unpack(&BOOKWORM_MINBASE.cached());

    // The `agentsh` stage, with the builder's paths mapped to this build:
    // /src is the workspace, /src/target/release is our debug build.
    let stage = TempDir::new_in(root.scratch(), "stage-agentsh");
    let main_dockerfile =
        std::fs::read_to_string(repo().join("packaging/Dockerfile")).expect("packaging/Dockerfile");
    let layer = stage_instructions(&main_dockerfile, Some("agentsh"));
    assert!(
        !layer.is_empty(),
        "no `agentsh` stage in packaging/Dockerfile"
    );
    for instr in &layer {
        let (from, srcs, dest) =
            parse_copy(instr).unwrap_or_else(|| panic!("the agentsh stage only copies: {instr}"));
        assert_eq!(from, "builder", "{instr}");
        for s in srcs {
            let host = if let Some(b) = s.strip_prefix("/src/target/release/") {
                // bin() knows which of them are the static-pie builds.
                bin(b)
            } else if let Some(p) = s.strip_prefix("/src/") {
                repo().join(p.trim_end_matches('/'))
            } else {
                panic!("unexpected builder path {s}")
            };
            docker_copy(&host, s.ends_with('/'), stage.path(), &dest);
        }
    }

    // The example SDK image's final stage, replayed into the root.
    let example = std::fs::read_to_string(repo().join("packaging/examples/Dockerfile.sdk"))
        .expect("packaging/examples/Dockerfile.sdk");
    let mut entrypoint = Vec::new();
    let mut ran_shim_install = false;
    for instr in stage_instructions(&example, None) {
        if let Some(run) = instr.strip_prefix("RUN ") {
            if run.contains("apt-get install") {
                // No mirror here: the packages must already be in the root.
                let pkgs: Vec<&str> = run
                    .split("apt-get install")
                    .nth(1)
                    .expect("packages")
                    .split("&&")
                    .next()
                    .expect("packages")
                    .split_whitespace()
                    .filter(|w| !w.starts_with('-'))
                    .collect();
                for p in pkgs {
                    assert_eq!(
                        root.ok(&["/usr/bin/dpkg-query", "-W", "-f=${db:Status-Status}", p]),
                        "installed",
                        "{p} of the example's apt-get line is not in the test root"
                    );
                }
                continue;
            }
            // Docker runs shell-form RUN as `/bin/sh -c`.
            root.ok(&["/bin/sh", "-c", run]);
            ran_shim_install |= run.contains("agentsh shim install");
        } else if instr.starts_with("COPY ") {
            let (from, srcs, dest) = parse_copy(&instr).expect("COPY --from");
            assert_eq!(from, "agentsh", "{instr}");
            for s in srcs {
                let host = stage.path().join(s.trim_start_matches('/'));
                docker_copy(&host, s.ends_with('/'), &root.path("/"), &dest);
            }
        } else if instr.starts_with("ENTRYPOINT ") {
            entrypoint = json_array(&instr, "ENTRYPOINT ");
        } else if instr.starts_with("CMD ") || instr.starts_with("ARG ") {
        } else {
            panic!("the test does not replay {instr:?}: teach it");
        }
    }
    assert!(ran_shim_install, "the example must install the shim");
    assert!(is_shim(&root, "/bin/sh") && is_shim(&root, "/bin/bash"));
    assert!(!entrypoint.is_empty(), "no ENTRYPOINT");

    // The ENTRYPOINT with the test's SDK-style daemon as CMD.
    root.copy_in(&bin("sdk-supervisor"), "/usr/local/bin/sdk-supervisor");
    let mut cmd = root.command(&entrypoint[0]);
    cmd.args(&entrypoint[1..])
        .arg("/usr/local/bin/sdk-supervisor");
    let mut daemon = SdkDaemon::start(cmd);
    let r = daemon.run(&sdk::e2b(
        "echo via-entrypoint; sh -c 'true; sh -c \"su -c true\"'; echo nested-rc=$?",
    ));
    assert_eq!(r.code, Some(0), "{r:?}");
    assert!(r.stdout.contains("via-entrypoint"), "{r:?}");
    assert!(r.stdout.contains("nested-rc=126"), "{r:?}");
    let denied = denials(&root, "su", "deny-privilege-escalation");
    assert!(!denied.is_empty(), "su must be denied and audited");

    // SIGTERM to the entrypoint reaches the daemon; the entrypoint stops the
    // server and exits with the daemon's status (128 + 15).
    let pid = nix::unistd::Pid::from_raw(daemon.child().id() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).expect("SIGTERM");
    let status = daemon.child().wait().expect("wait for the entrypoint");
    assert_eq!(status.code(), Some(143), "{status:?}");
    let still = root.run(&["/usr/bin/agentsh", "ready", "--timeout", "0.2"]);
    assert!(
        !still.status.success(),
        "the server must be gone: {}",
        text(&still)
    );
}

#[test]
fn systemd_unit_as_installed_from_the_deb_passes_systemd_analyze_verify() {
    if !require_root("systemd_unit_as_installed_from_the_deb_passes_systemd_analyze_verify") {
        return;
    }
    let analyze = Path::new("/usr/bin/systemd-analyze");
    assert!(
        analyze.is_file(),
        "systemd-analyze is missing: run tests/setup.sh (apt-get install systemd)"
    );
    let scratch = TempDir::new("unit");
    let deb = build_deb(scratch.path());
    let files = scratch.path().join("files");
    let out = Command::new("/usr/bin/dpkg-deb")
        .arg("-x")
        .arg(&deb)
        .arg(&files)
        .output()
        .expect("dpkg-deb -x");
    assert!(out.status.success(), "{}", text(&out));
    // The package's unit, binary and man page where the unit names them, in a
    // private namespace with overlays over this machine's /usr and /etc.
    let ns = agentsh_tests::ns::Namespace::new();
    for (from, to) in [
        ("usr/bin/agentsh", "/usr/bin/agentsh"),
        (
            "usr/share/man/man1/agentsh.1.gz",
            "/usr/share/man/man1/agentsh.1.gz",
        ),
        (
            "lib/systemd/system/agentsh.service",
            "/usr/lib/systemd/system/agentsh.service",
        ),
    ] {
        std::fs::copy(files.join(from), ns.path(to))
            .unwrap_or_else(|e| panic!("copy {from} into the namespace: {e}"));
    }
    let out = ns.run(
        &[
            "/usr/bin/systemd-analyze",
            "verify",
            "/usr/lib/systemd/system/agentsh.service",
        ],
        &[],
    );
    assert!(
        out.status.success() && out.stderr.is_empty(),
        "systemd-analyze verify: {}",
        text(&out)
    );
}
