//! A root tree must not change the kernel's behaviour for everyone, nor
//! agentsh's own configuration, whatever the policy and the Landlock ABI
//! (issue 21, class 7): `/proc/sys` (a crash hook in `core_pattern` runs as
//! root outside every tree), `/sys`, `/proc/sysrq-trigger` are read-only;
//! below ABI 3, where truncation is no Landlock right, `truncate(2)` and
//! opens that truncate without write access are refused, and a shim.conf
//! emptied anyway means `on`, never defaults.
//!
//! Nothing here changes the machine: each write is of the value already
//! there, so a defence that failed would leave the kernel as it was.

// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

use agentsh_tests::ns::Namespace;
use agentsh_tests::sandbox::{Sandbox, NOBODY};
use agentsh_tests::server::require_root;

/// A policy that restricts no file operation: only agentsh's own rules apply.
const OPEN_POLICY: &str = "name: open\ndefault: allow\n";

/// Writes each kernel file back with its own content; prints, per file,
/// `ok` (written: the defence failed) or the errno.
const WRITE_BACK: &str = r#"
import os
for p in ["/proc/sys/kernel/core_pattern", "/proc/sys/kernel/modprobe", "/proc/sysrq-trigger",
          "/sys/kernel/mm/transparent_hugepage/enabled"]:
    try:
        cur = open(p).read() if p != "/proc/sysrq-trigger" else ""
        fd = os.open(p, os.O_WRONLY)
        try:
            if cur:
                os.write(fd, cur.split("[")[-1].split("]")[0].encode() if "[" in cur else cur.encode())
        finally:
            os.close(fd)
        print(p, "ok")
    except OSError as e:
        print(p, e.errno)
"#;

fn kernel_files_are_read_only_for(uid: Option<u32>, config: &str) {
    let mut s = Sandbox::with_config(OPEN_POLICY, uid, config);
    let f = s.sh(&format!(
        "python3 -c '{}'",
        WRITE_BACK.replace('\'', "'\\''")
    ));
    assert_eq!(f.code, Some(0), "{f:?}");
    let lines: Vec<&str> = f.stdout.lines().collect();
    assert_eq!(lines.len(), 4, "{}", f.stdout);
    for l in lines {
        assert!(
            !l.ends_with(" ok"),
            "a tree wrote a kernel file ({config:?}, {uid:?}): {l}"
        );
    }
}

#[test]
fn a_root_tree_cannot_write_proc_sys_sys_or_sysrq_at_any_abi() {
    if !require_root("a_root_tree_cannot_write_proc_sys_sys_or_sysrq_at_any_abi") {
        return;
    }
    for config in [
        "",
        "landlock:\n  max_abi: 2\n",
        "execve:\n  backend: ptrace\n",
    ] {
        kernel_files_are_read_only_for(None, config);
    }
    kernel_files_are_read_only_for(Some(NOBODY), "");
}

/// Every way to empty a file that a tree has: `truncate(2)`; `open` and
/// `openat` with `O_TRUNC` and read-only access (the kernel truncates on a
/// read-only open where write permission allows; Landlock checks the
/// open's access mode, not the truncation, below ABI 3), and with access
/// mode 3 (neither); `openat2` so; `openat` with write access; `creat`;
/// `ftruncate` on a read-only fd. Prints, per route,
/// `NAME truncated` or `NAME errno N`.
const TRUNCATE_ROUTES: &str = r#"
import ctypes, os, struct
libc = ctypes.CDLL(None, use_errno=True)
P = b"/etc/agentsh/shim.conf"
def sys_open(flags):
    fd = libc.syscall(2, P, flags, 0)
    if fd < 0:
        raise OSError(ctypes.get_errno(), "open")
    os.close(fd)
def openat2(flags):
    how = struct.pack("=QQQ", flags, 0, 0)
    fd = libc.syscall(437, -100, P, how, len(how))
    if fd < 0:
        raise OSError(ctypes.get_errno(), "openat2")
    os.close(fd)
def creat():
    fd = libc.creat(P, 0o644)
    if fd < 0:
        raise OSError(ctypes.get_errno(), "creat")
    os.close(fd)
def ftrunc():
    fd = os.open(P, os.O_RDONLY)
    try:
        os.ftruncate(fd, 0)
    finally:
        os.close(fd)
routes = [
    ("truncate", lambda: os.truncate(P, 0)),
    ("open-rdonly-trunc", lambda: sys_open(os.O_RDONLY | os.O_TRUNC)),
    ("openat-rdonly-trunc", lambda: os.close(os.open(P, os.O_RDONLY | os.O_TRUNC))),
    ("openat-wronly-trunc", lambda: os.close(os.open(P, os.O_WRONLY | os.O_TRUNC))),
    ("openat-neither-trunc", lambda: os.close(os.open(P, 3 | os.O_TRUNC))),
    ("openat2-rdonly-trunc", lambda: openat2(os.O_RDONLY | os.O_TRUNC)),
    ("creat", creat),
    ("ftruncate-rdonly", ftrunc),
]
for name, f in routes:
    try:
        f()
        print(name, "truncated" if os.path.getsize(P) == 0 else "ran")
    except OSError as e:
        print(name, "errno", e.errno)
"#;
const TRUNCATE_ROUTE_COUNT: usize = 8;

#[test]
fn below_landlock_abi_3_a_root_tree_cannot_truncate_shim_conf() {
    if !require_root("below_landlock_abi_3_a_root_tree_cannot_truncate_shim_conf") {
        return;
    }
    for config in [
        "landlock:\n  max_abi: 2\n",
        "landlock:\n  max_abi: 2\nexecve:\n  backend: ptrace\n",
        "",
    ] {
        let mut s = Sandbox::with_config(OPEN_POLICY, None, config);
        let before = std::fs::read(s.ns.path("/etc/agentsh/shim.conf")).unwrap();
        let f = s.sh(&format!(
            "python3 -c '{}'",
            TRUNCATE_ROUTES.replace('\'', "'\\''")
        ));
        let lines: Vec<&str> = f.stdout.lines().collect();
        assert_eq!(lines.len(), TRUNCATE_ROUTE_COUNT, "{config:?}: {f:?}");
        for l in lines {
            assert!(
                !l.ends_with(" truncated"),
                "{config:?}: a route emptied shim.conf: {l}"
            );
        }
        let after = std::fs::read(s.ns.path("/etc/agentsh/shim.conf")).unwrap();
        assert_eq!(before, after, "{config:?}: shim.conf changed");
        assert!(!after.is_empty());
    }
}

#[test]
fn an_empty_shim_conf_means_on_not_defaults() {
    if !require_root("an_empty_shim_conf_means_on_not_defaults") {
        return;
    }
    let ns = Namespace::new();
    ns.install_shim(false);
    // No server anywhere: with defaults (`auto`, before agentsh ever ran) the
    // shell would run unsupervised; an emptied file must refuse instead.
    ns.write_shim_conf("", 0o644);
    let o = ns.run(&["/bin/sh", "-c", "echo ran"], &[]);
    assert_eq!(o.status.code(), Some(126), "{o:?}");
    assert!(String::from_utf8_lossy(&o.stdout).is_empty());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("holds no setting"), "{err}");
}

/// Below Landlock ABI 6 there is no abstract-socket scope: a tree reaches an
/// abstract socket a process outside it listens on (the security model's
/// ABI table says "open"; a defence there would make this test fail and the
/// table change). At the kernel's own ABI the scope refuses it.
#[test]
fn below_landlock_abi_6_abstract_sockets_outside_the_tree_are_reachable() {
    if !require_root("below_landlock_abi_6_abstract_sockets_outside_the_tree_are_reachable") {
        return;
    }
    use std::os::linux::net::SocketAddrExt;
    let name = format!("agentsh-test-abstract-surface-{}", std::process::id());
    let addr = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
    let _listener = std::os::unix::net::UnixListener::bind_addr(&addr).unwrap();
    let connect = format!(
        "python3 -c 'import socket; s = socket.socket(socket.AF_UNIX); s.connect(\"\\0{name}\"); print(\"connected\")'"
    );
    let native = agentsh_proto::wire::kernel_landlock_abi();
    for (config, abi) in [
        ("landlock:\n  max_abi: 2\n", 2),
        ("landlock:\n  max_abi: 5\n", 5),
        ("", native),
    ] {
        let mut s = Sandbox::with_config(OPEN_POLICY, Some(NOBODY), config);
        let f = s.sh(&connect);
        if abi >= 6 {
            assert!(
                !f.stdout.contains("connected") && f.stderr.contains("PermissionError"),
                "ABI {abi}: {f:?}"
            );
        } else {
            assert!(f.stdout.contains("connected"), "ABI {abi}: {f:?}");
        }
    }
}

/// A tree that fills the inodes of the filesystem holding agentsh's run
/// directory (`/run`, through a world-writable `/run/lock` on the same
/// tmpfs) must not stop the next wrap-init: no shell leaves a file there
/// (the notify socket is abstract). Emulated with a small tmpfs whose `run`
/// is the server's run directory and whose `lock` is world-writable.
#[test]
fn a_tree_filling_the_run_directorys_filesystem_does_not_stop_the_next_shell() {
    if !require_root("a_tree_filling_the_run_directorys_filesystem_does_not_stop_the_next_shell") {
        return;
    }
    use agentsh_tests::sandbox::{SERVER_BASE, WORKSPACE};
    use agentsh_tests::sdk::Supervisor;
    use agentsh_tests::server::{ServerFiles, TestServer};
    /// Unmounts what the test mounted on this machine, whatever happens.
    struct Mounts(Vec<String>);
    impl Drop for Mounts {
        fn drop(&mut self) {
            for m in self.0.iter().rev() {
                let _ = std::process::Command::new("umount")
                    .args(["-l", m])
                    .status();
                let _ = std::fs::remove_dir(m);
            }
        }
    }
    let sh = |cmd: &str| {
        let out = std::process::Command::new("/bin/sh")
            .args(["-c", cmd])
            .output()
            .unwrap();
        assert!(out.status.success(), "{cmd}: {out:?}");
    };
    let files = ServerFiles::write(
        std::path::Path::new(SERVER_BASE),
        Some(OPEN_POLICY),
        &format!("workspace: {WORKSPACE}\n"),
    );
    // A small tmpfs (beside the test servers' own directories) whose `run`
    // is this server's run directory and whose `lock` anyone may fill.
    let fill = format!("{SERVER_BASE}/fill-{}", std::process::id());
    let run = files.dir.path().join("run").display().to_string();
    let mut mounts = Mounts(Vec::new());
    std::fs::create_dir_all(&fill).unwrap();
    sh(&format!(
        "mount -t tmpfs -o nr_inodes=400,size=8m,mode=0755 tmpfs {fill}"
    ));
    mounts.0.push(fill.clone());
    sh(&format!(
        "mkdir {fill}/run {fill}/lock && chmod 1777 {fill}/lock && mkdir -p {run}"
    ));
    sh(&format!("mount --bind {fill}/run {run}"));
    mounts.0.push(run);
    // The namespace is made after the mounts: it sees them.
    let ns = Namespace::new();
    ns.mount_scratch("/srv", WORKSPACE);
    let srv = TestServer::start_files(files, |program| ns.command(program));
    ns.install_shim(true);
    ns.configure(&srv.url, "on");
    let sup = Supervisor::start_as(&ns, false, None);
    let mut s = Sandbox {
        sup,
        ns,
        srv,
        uid: None,
    };
    let filled = s.sh(&format!(
        "i=0; while touch {fill}/lock/f$i 2>/dev/null; do i=$((i+1)); done; echo filled $i"
    ));
    assert!(filled.stdout.starts_with("filled "), "{filled:?}");
    // Full: not one more inode, for root outside any tree either.
    let full =
        s.ns.run(&["/usr/bin/touch", &format!("{fill}/run/one-more")], &[]);
    assert!(!full.status.success(), "the tmpfs is not full: {full:?}");
    let before = s.mark();
    for n in 0..5 {
        let f = s.sh(&format!("/bin/echo alive-{n}"));
        assert_eq!(
            f.code,
            Some(0),
            "shell {n} after the fill: {f:?}\n{}",
            s.srv.log()
        );
        assert!(f.stdout.contains(&format!("alive-{n}")), "{f:?}");
    }
    let echoes = s
        .execs_since(before)
        .into_iter()
        .filter(|e| e["filename"].as_str().is_some_and(|f| f.ends_with("/echo")))
        .count();
    assert_eq!(echoes, 5, "each shell after the fill was supervised");
    drop(s);
    drop(mounts);
}
