//! End-to-end runs of the real `agentsh-unixwrap` on the real kernel.
//!
//! The test process plays relay and server (see `common`). Each test is one
//! scenario; its name states the behaviour. Root is required (see
//! `common::require_root`).

// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

mod common;

use std::time::{Duration, Instant};

use agentsh_proto::handoff::Ack;
use agentsh_proto::{FsAccess, FsRule, LandlockCompat, LandlockConfig};
use common::*;

macro_rules! root_or_skip {
    () => {
        if !require_root() {
            return;
        }
    };
}

#[test]
fn exec_proceeds_and_output_arrives_only_after_ack() {
    root_or_skip!();
    let w = spawn(Spec::new(&["--", "sh", "-c", "echo hello"]));
    let fd = w.recv_notify_fd();
    // Before the ACK nothing may run: no output within 200ms.
    let mut pfd = libc::pollfd {
        fd: std::os::fd::AsRawFd::as_raw_fd(w.child.stdout.as_ref().unwrap()),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd.
    let ready = unsafe { libc::poll(&mut pfd, 1, 200) };
    assert_eq!(ready, 0, "output before the ACK");
    w.send_ack(Ack::Accepted);
    let r = Responder::start(fd, allow_all());
    let out = w.finish(T);
    assert_eq!(out.code(), Some(0), "{out:#?}");
    assert_eq!(out.stdout, "hello\n");
    assert!(
        out.stderr.is_empty(),
        "diagnostics leaked to stderr: {out:#?}"
    );
    assert!(out.log.contains("ACK accepted"), "{}", out.log);
    assert!(!r.paths().is_empty());
}

#[test]
fn execs_are_trapped_at_every_depth() {
    root_or_skip!();
    let w = spawn(Spec::new(&["--", "sh", "-c", "/bin/true; echo done"]));
    let r = w.accept(allow_all());
    let out = w.finish(T);
    assert_eq!(out.code(), Some(0), "{out:#?}");
    assert_eq!(out.stdout, "done\n");
    let paths = r.paths();
    assert!(paths[0].ends_with("/sh"), "{paths:?}");
    assert!(paths.iter().any(|p| p == "/bin/true"), "{paths:?}");
}

#[test]
fn responder_eacces_makes_nested_exec_fail_with_permission_denied() {
    root_or_skip!();
    let w = spawn(Spec::new(&["--", "sh", "-c", "/bin/true; echo rc=$?"]));
    let r = w.accept(Box::new(|p| (p == "/bin/true").then_some(libc::EACCES)));
    let out = w.finish(T);
    assert!(out.stdout.contains("rc=126"), "{out:#?}");
    assert!(out.stderr.contains("Permission denied"), "{out:#?}");
    drop(r.join());
}

#[test]
fn refused_ack_exits_126_and_the_command_never_runs() {
    root_or_skip!();
    let w = spawn(Spec::new(&["--", "sh", "-c", "echo RAN"]));
    let _fd = w.recv_notify_fd();
    w.send_ack(Ack::Refused);
    let out = w.finish(T);
    out.assert_refused("refused the notify fd");
}

#[test]
fn missing_ack_within_deadline_exits_126() {
    root_or_skip!();
    let mut c = default_config();
    c.ack_timeout_secs = 1;
    let w = spawn(Spec::new(&["--", "sh", "-c", "echo RAN"]).config(&c));
    let _fd = w.recv_notify_fd();
    let start = Instant::now();
    let out = w.finish(T);
    out.assert_refused("no ACK");
    assert!(start.elapsed() < Duration::from_secs(5));
}

#[test]
fn relay_closing_without_ack_exits_126() {
    root_or_skip!();
    let w = spawn(Spec::new(&["--", "sh", "-c", "echo RAN"]));
    let _fd = w.recv_notify_fd();
    // SAFETY: shutting down our own socket.
    unsafe { libc::shutdown(std::os::fd::AsRawFd::as_raw_fd(&w.sock), libc::SHUT_RDWR) };
    let out = w.finish(T);
    out.assert_refused("without an ACK");
}

#[test]
fn missing_notify_sock_fd_is_refused() {
    root_or_skip!();
    let mut s = Spec::new(&["--", "sh", "-c", "echo RAN"]);
    s.sock_fd_env = None;
    spawn(s)
        .finish(T)
        .assert_refused("AGENTSH_NOTIFY_SOCK_FD is not set");
}

#[test]
fn notify_sock_fd_that_is_not_a_number_is_refused() {
    root_or_skip!();
    let mut s = Spec::new(&["--", "sh", "-c", "echo RAN"]);
    s.sock_fd_env = Some("three".into());
    spawn(s).finish(T).assert_refused("not an fd number");
}

#[test]
fn notify_sock_fd_that_is_not_open_is_refused() {
    root_or_skip!();
    let mut s = Spec::new(&["--", "sh", "-c", "echo RAN"]);
    s.sock_fd_env = Some("87".into());
    spawn(s).finish(T).assert_refused("fd 87 is not open");
}

#[test]
fn notify_sock_fd_that_is_not_a_seqpacket_socket_is_refused() {
    root_or_skip!();
    let mut s = Spec::new(&["--", "sh", "-c", "echo RAN"]);
    s.sock_fd_env = Some("4".into()); // the log pipe
    spawn(s).finish(T).assert_refused("fd 4 is not a socket");
}

#[test]
fn malformed_config_json_is_refused() {
    root_or_skip!();
    let mut s = Spec::new(&["--", "sh", "-c", "echo RAN"]);
    s.config = Some("{not json".into());
    spawn(s)
        .finish(T)
        .assert_refused("not a valid seccomp config");
}

#[test]
fn missing_config_is_refused() {
    root_or_skip!();
    let mut s = Spec::new(&["--", "sh", "-c", "echo RAN"]);
    s.config = None;
    spawn(s)
        .finish(T)
        .assert_refused("AGENTSH_SECCOMP_CONFIG is not set");
}

#[test]
fn unknown_config_version_is_refused() {
    root_or_skip!();
    let mut c = default_config();
    c.version = 99;
    spawn(Spec::new(&["--", "sh", "-c", "echo RAN"]).config(&c))
        .finish(T)
        .assert_refused("config version 99 is not supported");
}

#[test]
fn config_without_a_filter_is_refused() {
    root_or_skip!();
    let mut c = default_config();
    c.filter = String::new();
    spawn(Spec::new(&["--", "sh", "-c", "echo RAN"]).config(&c))
        .finish(T)
        .assert_refused("carries no seccomp filter");
}

#[test]
fn a_filter_that_never_traps_is_refused_before_anything_loads() {
    root_or_skip!();
    // A caller-chosen "allow everything" program: loaded, it would leave every
    // exec unsupervised.
    let mut c = default_config();
    c.filter = agentsh_proto::bpf::encode_program(&[libc::sock_filter {
        code: 0x06,
        jt: 0,
        jf: 0,
        k: libc::SECCOMP_RET_ALLOW,
    }]);
    spawn(Spec::new(&["--", "sh", "-c", "echo RAN"]).config(&c))
        .finish(T)
        .assert_refused("never answers USER_NOTIF");
    c.filter = "not base64!".into();
    spawn(Spec::new(&["--", "sh", "-c", "echo RAN"]).config(&c))
        .finish(T)
        .assert_refused("not valid base64");
}

#[test]
fn bad_command_line_is_refused() {
    root_or_skip!();
    spawn(Spec::new(&["sh", "-c", "echo RAN"]))
        .finish(T)
        .assert_refused("usage: agentsh-unixwrap");
}

#[test]
fn command_not_found_exits_127() {
    root_or_skip!();
    let out = spawn(Spec::new(&["--", "agentsh-no-such-command"])).finish(T);
    assert_eq!(out.code(), Some(127), "{out:#?}");
    assert_eq!(
        out.stderr,
        "agentsh-unixwrap: agentsh-no-such-command: command not found; see docs/troubleshooting.md#the-real-shell-is-missing-or-cannot-run\n"
    );
    assert!(out.stdout.is_empty());
}

#[test]
fn argv0_is_preserved_verbatim() {
    root_or_skip!();
    let w = spawn(Spec::new(&[
        "--argv0",
        "-sh",
        "--",
        "python3",
        "-c",
        "print(open('/proc/self/cmdline','rb').read().split(b'\\0')[0].decode())",
    ]));
    let r = w.accept(allow_all());
    let out = w.finish(T);
    assert_eq!(out.stdout, "-sh\n", "{out:#?}");
    drop(r.join());
}

#[test]
fn argv0_defaults_to_the_command_as_given() {
    root_or_skip!();
    let w = spawn(Spec::new(&[
        "--",
        "python3",
        "-c",
        "print(open('/proc/self/cmdline','rb').read().split(b'\\0')[0].decode())",
    ]));
    let r = w.accept(allow_all());
    let out = w.finish(T);
    assert_eq!(out.stdout, "python3\n", "{out:#?}");
    drop(r.join());
}

#[test]
fn no_agentsh_variable_reaches_the_command() {
    root_or_skip!();
    let mut s = Spec::new(&["--", "env"]);
    s.env.push(("AGENTSH_SHIM_INSTALL".into(), "on".into()));
    s.env.push(("AGENTSH_ANYTHING".into(), "x".into()));
    s.env.push(("KEEP_ME".into(), "1".into()));
    let w = spawn(s);
    let r = w.accept(allow_all());
    let out = w.finish(T);
    assert_eq!(out.code(), Some(0), "{out:#?}");
    assert!(!out.stdout.contains("AGENTSH_"), "{}", out.stdout);
    assert!(out.stdout.contains("KEEP_ME=1"), "{}", out.stdout);
    drop(r.join());
}

/// Runs a python3 snippet under the filter and returns its stdout.
fn python_inside(code: &str) -> String {
    let w = spawn(Spec::new(&["--", PYTHON, "-c", code]));
    let r = w.accept(allow_all());
    let out = w.finish(T);
    assert_eq!(out.code(), Some(0), "{out:#?}");
    drop(r.join());
    out.stdout
}

const ERRNO_OF: &str = "import ctypes\nl = ctypes.CDLL(None, use_errno=True)\n\
def e(*a):\n    ctypes.set_errno(0)\n    r = l.syscall(*a)\n    return ctypes.get_errno() if r == -1 else 0\n";

#[test]
fn blocklisted_syscalls_fail_with_eperm() {
    root_or_skip!();
    // Outside the filter: umount2 of a missing path is ENOENT, bpf with a
    // bogus command is EINVAL. Inside: both EPERM.
    let code = format!(
        "{ERRNO_OF}print(e({}, b'/nonexistent-agentsh', 0), e({}, 0xffff, 0, 0))",
        libc::SYS_umount2,
        libc::SYS_bpf
    );
    let out = python_inside(&code);
    assert_eq!(out.trim(), format!("{} {}", libc::EPERM, libc::EPERM));
}

#[test]
fn new_listener_requests_fail_with_eperm_inside() {
    root_or_skip!();
    // seccomp(SET_MODE_FILTER, NEW_LISTENER, NULL): EFAULT outside, EPERM inside.
    let code = format!("{ERRNO_OF}print(e({}, 1, 8, None))", libc::SYS_seccomp);
    assert_eq!(python_inside(&code).trim(), libc::EPERM.to_string());
}

#[test]
fn marker_is_answered_inside_the_tree_and_not_outside() {
    root_or_skip!();
    assert!(!agentsh_proto::marker::agentsh_filter_present());
    let code = format!(
        "{ERRNO_OF}print(e({}, {}, {}, 0, 0, 0))",
        libc::SYS_prctl,
        agentsh_proto::marker::MARKER_PRCTL_OPTION,
        agentsh_proto::marker::MARKER_PRCTL_ARG
    );
    assert_eq!(
        python_inside(&code).trim(),
        agentsh_proto::marker::MARKER_ERRNO.to_string()
    );
}

fn nested_spec(extra: &str) -> Spec {
    let inner_cfg = serde_json::to_string(&default_config()).unwrap();
    let script = format!(
        "AGENTSH_SECCOMP_CONFIG=\"$INNER_CFG\" AGENTSH_NOTIFY_SOCK_FD=9 exec \"$UW\" {extra} -- /bin/echo inner"
    );
    let mut s = Spec::new(&["--", "sh", "-c", &script]);
    s.env.push(("INNER_CFG".into(), inner_cfg));
    s.env.push(("UW".into(), UNIXWRAP.into()));
    s
}

#[test]
fn nested_unixwrap_refuses_with_a_clear_message() {
    root_or_skip!();
    let w = spawn(nested_spec(""));
    let r = w.accept(allow_all());
    let out = w.finish(T);
    out.assert_refused("already supervised by agentsh");
    assert!(!r.paths().iter().any(|p| p == "/bin/echo"));
}

#[test]
fn nested_unixwrap_with_exec_fallback_runs_under_the_outer_filter() {
    root_or_skip!();
    let w = spawn(nested_spec("--on-kernel-refusal exec"));
    let r = w.accept(allow_all());
    let out = w.finish(T);
    assert_eq!(out.code(), Some(0), "{out:#?}");
    assert_eq!(out.stdout, "inner\n");
    // The outer supervisor still saw the inner command's exec.
    assert!(r.paths().iter().any(|p| p == "/bin/echo"));
}

#[test]
fn sigpipe_default_disposition_reaches_the_command() {
    root_or_skip!();
    let w = spawn(Spec::new(&[
        "--",
        "sh",
        "-c",
        "yes | head -1; grep SigIgn /proc/self/status",
    ]));
    let r = w.accept(allow_all());
    let out = w.finish(Duration::from_secs(10));
    assert!(out.stdout.starts_with("y\n"), "{out:#?}");
    let mask = out
        .stdout
        .lines()
        .nth(1)
        .unwrap()
        .split_whitespace()
        .nth(1)
        .unwrap();
    let mask = u64::from_str_radix(mask, 16).unwrap();
    assert_eq!(
        mask & (1 << (libc::SIGPIPE - 1)),
        0,
        "SIGPIPE ignored in the command"
    );
    drop(r.join());
}

#[test]
fn sigpipe_ignored_by_the_caller_stays_ignored() {
    root_or_skip!();
    let mut s = Spec::new(&["--", "grep", "SigIgn", "/proc/self/status"]);
    s.ignore_sigpipe = true;
    let w = spawn(s);
    let r = w.accept(allow_all());
    let out = w.finish(T);
    let mask = out.stdout.split_whitespace().nth(1).unwrap();
    let mask = u64::from_str_radix(mask, 16).unwrap();
    assert_ne!(mask & (1 << (libc::SIGPIPE - 1)), 0, "{out:#?}");
    drop(r.join());
}

#[test]
fn supervisor_gone_makes_the_next_exec_fail_and_nothing_further_runs() {
    root_or_skip!();
    let mut s = Spec::new(&[
        "--",
        "sh",
        "-c",
        "read x; /bin/echo SHOULD-NOT-RUN; echo rc=$?",
    ]);
    s.stdin = true;
    let mut w = spawn(s);
    let fd = w.recv_notify_fd();
    w.send_ack(Ack::Accepted);
    // Answer the exec of sh, then go away.
    let r = Responder::start_limited(fd, allow_all(), 1);
    let seen = r.join();
    assert_eq!(seen.len(), 1);
    feed(w.stdin(), "go\n");
    let out = w.finish(T);
    assert!(!out.stdout.contains("SHOULD-NOT-RUN"), "{out:#?}");
    assert!(!out.stdout.contains("rc=0"), "{out:#?}");
    // dash vforks its simple commands, and a vfork goes to the supervisor
    // too (a vfork child may not vfork): with nobody there the vfork
    // itself fails (ENOSYS) and dash stops with "Cannot fork"; a shell
    // that forks instead gets ENOSYS at the exec.
    assert!(
        (out.stdout.contains("rc=") && out.stderr.contains("Function not implemented"))
            || out.stderr.contains("Cannot fork"),
        "{out:#?}"
    );
}

#[test]
fn relay_child_is_reaped_before_the_command_runs() {
    root_or_skip!();
    // sh plays the shim: it forks a short-lived "relay", then execs unixwrap
    // in place. The command checks it has no child at all (no zombie).
    let script = format!("(exit 0) & AGENTSH_RELAY_PID=$! exec \"$UW\" -- {PYTHON} -c \"$PY\"");
    let mut s = Spec::new(&["-c", &script]);
    s.program = Some("/bin/sh".into());
    s.env.push(("UW".into(), UNIXWRAP.into()));
    s.env.push((
        "PY".into(),
        "import os\ntry:\n    print(os.waitpid(-1, os.WNOHANG))\nexcept ChildProcessError:\n    print('no-children')".into(),
    ));
    let w = spawn(s);
    let r = w.accept(allow_all());
    let out = w.finish(T);
    assert_eq!(out.stdout, "no-children\n", "{out:#?}");
    assert!(out.log.contains("reaped (exit status 0)"), "{}", out.log);
    drop(r.join());
}

#[test]
fn relay_that_does_not_exit_is_killed_and_reaped() {
    root_or_skip!();
    let script = "sleep 30 & AGENTSH_RELAY_PID=$! exec \"$UW\" -- /bin/echo ok";
    let mut s = Spec::new(&["-c", script]);
    s.program = Some("/bin/sh".into());
    s.env.push(("UW".into(), UNIXWRAP.into()));
    let w = spawn(s);
    let r = w.accept(allow_all());
    let out = w.finish(T);
    assert_eq!(out.stdout, "ok\n", "{out:#?}");
    assert!(out.log.contains("killed by signal 9"), "{}", out.log);
    drop(r.join());
}

fn landlock(f: impl FnOnce(&mut LandlockConfig)) -> agentsh_proto::SeccompConfig {
    let mut ll = LandlockConfig {
        compat: LandlockCompat::BestEffort,
        handled_fs: vec![],
        fs_rules: vec![],
        tcp_connect_ports: None,
        tcp_bind_ports: None,
        scope_signals: false,
        scope_abstract_unix: false,
        max_abi: None,
        noexec_mounts: vec![],
    };
    f(&mut ll);
    let mut c = default_config();
    c.landlock = Some(ll);
    c
}

fn tempdir(tag: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("agentsh-unixwrap-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

#[test]
fn landlock_denies_reads_outside_the_allowed_paths() {
    root_or_skip!();
    let dir = tempdir("ll-read");
    let secret = dir.join("secret");
    std::fs::write(&secret, "s3cret\n").unwrap();
    let read = |p: &str| FsRule {
        path: p.into(),
        access: vec![FsAccess::Read],
    };
    let cfg = landlock(|ll| {
        ll.handled_fs = vec![FsAccess::Read];
        ll.fs_rules = [
            "/usr",
            "/lib",
            "/lib64",
            "/bin",
            "/etc",
            "/nonexistent-agentsh",
        ]
        .into_iter()
        .map(read)
        .collect();
    });
    let script = format!(
        "cat /etc/hostname >/dev/null && echo allowed-ok; cat {}; echo rc=$?",
        secret.display()
    );
    let w = spawn(Spec::new(&["--", "sh", "-c", &script]).config(&cfg));
    let r = w.accept(allow_all());
    let out = w.finish(T);
    std::fs::remove_dir_all(&dir).unwrap();
    assert!(out.stdout.contains("allowed-ok"), "{out:#?}");
    assert!(!out.stdout.contains("s3cret"), "{out:#?}");
    assert!(out.stdout.contains("rc=1"), "{out:#?}");
    assert!(out.stderr.contains("Permission denied"), "{out:#?}");
    assert!(out.log.contains("status=fully_enforced"), "{}", out.log);
    assert!(
        out.log.contains("\"/nonexistent-agentsh\" skipped"),
        "{}",
        out.log
    );
    drop(r.join());
}

/// A grant the server computed for a plain file (a carve lists entries that
/// are not symlinks) that the tree turned into a symlink to a file it must not
/// read, before unixwrap opened it: no symlink is followed, the grant is
/// skipped, the secret stays unreadable (issue 21).
#[test]
fn landlock_grants_never_follow_a_symlink_swapped_in() {
    root_or_skip!();
    let dir = tempdir("ll-swap");
    let secret = dir.join("secret");
    std::fs::write(&secret, "s3cret\n").unwrap();
    let entry = dir.join("entry");
    let _ = std::fs::remove_file(&entry);
    std::os::unix::fs::symlink(&secret, &entry).unwrap();
    let read = |p: &str| FsRule {
        path: p.into(),
        access: vec![FsAccess::Read],
    };
    let cfg = landlock(|ll| {
        ll.handled_fs = vec![FsAccess::Read];
        ll.fs_rules = ["/usr", "/lib", "/lib64", "/bin", "/etc"]
            .into_iter()
            .map(read)
            .chain(std::iter::once(read(&entry.display().to_string())))
            .collect();
    });
    let script = format!("cat {}; echo rc=$?", secret.display());
    let w = spawn(Spec::new(&["--", "sh", "-c", &script]).config(&cfg));
    let r = w.accept(allow_all());
    let out = w.finish(T);
    std::fs::remove_dir_all(&dir).unwrap();
    assert!(!out.stdout.contains("s3cret"), "{out:#?}");
    assert!(out.stdout.contains("rc=1"), "{out:#?}");
    assert!(out.log.contains("entry\" skipped"), "{}", out.log);
    drop(r.join());
}

#[test]
fn landlock_read_rules_leave_cross_directory_rename_working() {
    root_or_skip!();
    let dir = tempdir("ll-mv");
    std::fs::create_dir_all(dir.join("a")).unwrap();
    std::fs::create_dir_all(dir.join("b")).unwrap();
    std::fs::write(dir.join("a/x"), "x").unwrap();
    let cfg = landlock(|ll| {
        ll.handled_fs = vec![FsAccess::Read];
        ll.fs_rules = vec![FsRule {
            path: "/".into(),
            access: vec![FsAccess::Read],
        }];
    });
    // os.rename, not mv: mv falls back to copy+unlink on EXDEV.
    let code = format!(
        "import os\nos.rename('{0}/a/x', '{0}/b/x')\nprint('moved')",
        dir.display()
    );
    let w = spawn(Spec::new(&["--", PYTHON, "-c", &code]).config(&cfg));
    let r = w.accept(allow_all());
    let out = w.finish(T);
    let moved = dir.join("b/x").exists();
    std::fs::remove_dir_all(&dir).unwrap();
    assert_eq!(out.stdout, "moved\n", "{out:#?}");
    assert!(moved);
    drop(r.join());
}

#[test]
fn landlock_denies_tcp_connect_to_unlisted_ports() {
    root_or_skip!();
    let allowed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let denied = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let (pa, pd) = (
        allowed.local_addr().unwrap().port(),
        denied.local_addr().unwrap().port(),
    );
    let cfg = landlock(|ll| ll.tcp_connect_ports = Some(vec![pa]));
    let code = format!(
        "import socket\n\
def c(p):\n    try:\n        socket.create_connection(('127.0.0.1', p), timeout=5).close(); return 'ok'\n    except OSError as e:\n        return str(e.errno)\n\
print(c({pa}), c({pd}))"
    );
    // Without CAP_SYS_ADMIN, so the no_new_privs path of Landlock runs too.
    let mut s = Spec::new(&["--", PYTHON, "-c", &code]).config(&cfg);
    s.drop_cap_sys_admin = true;
    let w = spawn(s);
    let r = w.accept(allow_all());
    let out = w.finish(T);
    assert_eq!(
        out.stdout.trim(),
        format!("ok {}", libc::EACCES),
        "{out:#?}"
    );
    assert!(out.log.contains("no_new_privs=true"), "{}", out.log);
    drop(r.join());
}

#[test]
fn landlock_scopes_signals_to_the_tree() {
    root_or_skip!();
    let cfg = landlock(|ll| {
        ll.compat = LandlockCompat::Required;
        ll.scope_signals = true;
    });
    // kill(1, 0) probes permission without sending anything.
    let code = format!("{ERRNO_OF}print(e({}, 1, 0))", libc::SYS_kill);
    let w = spawn(Spec::new(&["--", PYTHON, "-c", &code]).config(&cfg));
    let r = w.accept(allow_all());
    let out = w.finish(T);
    assert_eq!(out.stdout.trim(), libc::EPERM.to_string(), "{out:#?}");
    drop(r.join());
}

#[cfg(target_arch = "x86_64")]
#[test]
fn i386_execve_through_int80_is_trapped_too() {
    root_or_skip!();
    // Maps code and a path below 4 GiB, then calls execve via `int 0x80`
    // (i386 nr 11). The responder denies it: -EACCES comes back.
    let code = "import ctypes\n\
l = ctypes.CDLL(None, use_errno=True)\n\
l.mmap.restype = ctypes.c_void_p\n\
l.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]\n\
a = l.mmap(None, 4096, 7, 0x22 | 0x40, -1, 0)\n\
p = b'/agentsh-i386-probe\\0'\n\
c = b'\\x53\\xb8\\x0b\\x00\\x00\\x00\\xbb' + (a + 256).to_bytes(4, 'little') + b'\\x31\\xc9\\x31\\xd2\\xcd\\x80\\x5b\\xc3'\n\
ctypes.memmove(a, c, len(c)); ctypes.memmove(a + 256, p, len(p))\n\
print(ctypes.CFUNCTYPE(ctypes.c_int)(a)())\n";
    let w = spawn(Spec::new(&["--", PYTHON, "-c", code]));
    let r = w.accept(Box::new(|p| {
        (p == "/agentsh-i386-probe").then_some(libc::EACCES)
    }));
    let out = w.finish(T);
    assert_eq!(
        out.code(),
        Some(0),
        "no IA32 emulation on this kernel? {out:#?}"
    );
    assert_eq!(out.stdout.trim(), format!("-{}", libc::EACCES), "{out:#?}");
    const AUDIT_ARCH_I386: u32 = 0x4000_0003;
    let seen = r.join();
    assert!(
        seen.iter()
            .any(|e| e.path == "/agentsh-i386-probe" && e.arch == AUDIT_ARCH_I386),
        "{seen:?}"
    );
}

#[test]
fn no_new_privs_is_set_only_without_cap_sys_admin() {
    root_or_skip!();
    let nnp = |drop_cap: bool| {
        let mut s = Spec::new(&["--", "grep", "NoNewPrivs", "/proc/self/status"]);
        s.drop_cap_sys_admin = drop_cap;
        let w = spawn(s);
        let r = w.accept(allow_all());
        let out = w.finish(T);
        drop(r.join());
        assert_eq!(out.code(), Some(0), "{out:#?}");
        out.stdout.split_whitespace().nth(1).unwrap().to_string()
    };
    assert_eq!(nnp(false), "0");
    assert_eq!(nnp(true), "1");
}

/// SECCOMP_FILTER_FLAG_NEW_LISTENER
const NEW_LISTENER: u64 = 8;
/// SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV
const WAIT_KILLABLE_RECV: u64 = 32;

#[test]
fn kernel_refusing_new_listener_exits_126_and_nothing_runs() {
    root_or_skip!();
    let mut s = Spec::new(&["--", "sh", "-c", "echo RAN"]);
    s.pre_filter = Some(refuse_seccomp_flags(NEW_LISTENER, libc::EINVAL));
    let out = spawn(s).finish(T);
    out.assert_refused("the kernel cannot supervise this command");
    assert!(out.stderr.contains("nothing was installed"), "{out:#?}");
}

#[test]
fn kernel_refusal_with_exec_fallback_runs_the_command_unsupervised() {
    root_or_skip!();
    let mut s = Spec::new(&["--on-kernel-refusal", "exec", "--", "sh", "-c", "echo RAN"]);
    s.pre_filter = Some(refuse_seccomp_flags(NEW_LISTENER, libc::EINVAL));
    let w = spawn(s);
    // The relay's end sees EOF, never a notify fd.
    let mut buf = [0u8; 8];
    // SAFETY: a live buffer; blocking recv until EOF or data.
    let n = unsafe {
        libc::recv(
            std::os::fd::AsRawFd::as_raw_fd(&w.sock),
            buf.as_mut_ptr().cast(),
            buf.len(),
            0,
        )
    };
    assert_eq!(n, 0, "expected EOF on the relay's end");
    let out = w.finish(T);
    assert_eq!(out.code(), Some(0), "{out:#?}");
    assert_eq!(out.stdout, "RAN\n");
    assert!(out.stderr.is_empty(), "{out:#?}");
    assert!(out.log.contains("UNSUPERVISED"), "{}", out.log);
}

#[test]
fn wait_killable_refused_falls_back_to_a_plain_listener() {
    root_or_skip!();
    let mut s = Spec::new(&["--", "sh", "-c", "echo RAN"]);
    s.pre_filter = Some(refuse_seccomp_flags(WAIT_KILLABLE_RECV, libc::EINVAL));
    let w = spawn(s);
    let r = w.accept(allow_all());
    let out = w.finish(T);
    assert_eq!(out.stdout, "RAN\n", "{out:#?}");
    assert!(
        out.log.contains("refused WAIT_KILLABLE_RECV"),
        "{}",
        out.log
    );
    assert!(out.log.contains("flags=NEW_LISTENER insns"), "{}", out.log);
    assert!(!r.paths().is_empty());
}

#[test]
fn existing_listener_ebusy_is_refused_even_with_exec_fallback() {
    root_or_skip!();
    let mut s = Spec::new(&["--on-kernel-refusal", "exec", "--", "sh", "-c", "echo RAN"]);
    s.pre_filter = Some(refuse_seccomp_flags(NEW_LISTENER, libc::EBUSY));
    spawn(s).finish(T).assert_refused("listener already exists");
}
