//! The escape suite: what an agent might try to get around agentsh, run
//! through the shim from an SDK-style daemon (a sibling of the server) under
//! the shipped `agent-default` policy, once as root inside the tree and once
//! as an unprivileged user. Every attempt must fail, and the audit must say
//! why: the exec event and rule that denied it, or, for what the kernel
//! refuses on its own (Landlock, the seccomp blocklist), the error the
//! command got plus the ruleset the wrap-init event records.
//!
//! Every attempt runs in a subshell, so it is nested (depth >= 1) as
//! anything an agent's program starts would be. The suite runs at the
//! kernel's own Landlock ABI and again with `landlock.max_abi` at 4 and at 2
//! (E2B's 6.1 kernel): an attempt that only a newer ABI stops says so
//! (`min_abi`), is listed as not enforced there, and is what the security
//! model's per-ABI table documents. Needs root, Landlock ABI >= 6.

// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

use agentsh_tests::sandbox::{Listener, Sandbox, AGENT_DEFAULT, NOBODY, WORKSPACE};
use agentsh_tests::sdk::Spawn;
use agentsh_tests::server::{bin, require_root};
use serde_json::Value;

/// Why an attempt must fail.
enum Why {
    /// The supervisor denied an exec: this rule, on a program whose exec'd
    /// or resolved path contains `path`.
    Rule { rule: &'static str, path: String },
    /// The kernel refused: the command's stderr contains `error`, and the
    /// ruleset the tree was given (the wrap-init event) satisfies `ruleset`.
    Kernel {
        error: &'static str,
        /// Judges the whole wrap-init event (`landlock`, `seccomp`, ...).
        ruleset: fn(&Value, &Ctx) -> bool,
    },
}

struct Attempt {
    name: &'static str,
    /// Runs before the attempt; must succeed.
    setup: String,
    attempt: String,
    why: Why,
    /// Extra environment on the SDK spawn.
    env: Vec<(&'static str, String)>,
    /// The lowest Landlock ABI at which agentsh stops it (0: any).
    min_abi: i64,
}

/// Values attempts refer to.
struct Ctx {
    api_socket: String,
    marker: String,
    server_pid: u32,
    daemon_pid: u32,
    api_port: u16,
    denied_port: u16,
    state_dir: String,
    audit_file: String,
    agentsh: String,
    fexec: String,
    /// An abstract Unix socket a process outside the tree listens on.
    abstract_name: String,
}

fn rule(name: &'static str, setup: &str, attempt: &str, rule: &'static str, path: &str) -> Attempt {
    Attempt {
        name,
        setup: setup.into(),
        attempt: attempt.into(),
        why: Why::Rule {
            rule,
            path: path.into(),
        },
        env: Vec::new(),
        min_abi: 0,
    }
}

fn kernel(
    name: &'static str,
    setup: &str,
    attempt: &str,
    error: &'static str,
    ruleset: fn(&Value, &Ctx) -> bool,
) -> Attempt {
    Attempt {
        name,
        setup: setup.into(),
        attempt: attempt.into(),
        why: Why::Kernel { error, ruleset },
        env: Vec::new(),
        min_abi: 0,
    }
}

fn handles(e: &Value, what: &str) -> bool {
    e["landlock"]["handled_fs"]
        .as_array()
        .is_some_and(|a| a.iter().any(|x| x == what))
}

fn writes_handled(r: &Value, _: &Ctx) -> bool {
    handles(r, "write") && handles(r, "create") && handles(r, "delete")
}

/// Signals to processes outside the tree: Landlock's scope (ABI >= 6), or
/// below it the seccomp filter's signal guard (register rules plus the
/// supervisor's user-notify check).
fn signals_guarded(e: &Value, _: &Ctx) -> bool {
    let abi = e["landlock"]["kernel_abi"].as_i64().unwrap_or(0);
    (abi >= 6 && e["landlock"]["scope_signals"] == true)
        || e["seccomp"]["signal_guard"] == "user_notif"
}

/// A Landlock domain (any ABI) keeps ptrace-style access to processes outside it.
fn in_a_landlock_domain(e: &Value, _: &Ctx) -> bool {
    e["landlock"]["kernel_abi"].as_i64().unwrap_or(0) >= 1
}

fn reads_handled(r: &Value, _: &Ctx) -> bool {
    handles(r, "read")
}

fn port_not_allowed(e: &Value, port: u16) -> bool {
    let r = &e["landlock"];
    r["api_port_reachable"] == false
        && r["kernel_abi"].as_i64().unwrap_or(0) >= 4
        && r["tcp_connect_ports"]
            .as_array()
            .is_some_and(|a| !a.iter().any(|p| p.as_u64() == Some(u64::from(port))))
}

fn attempts(c: &Ctx) -> Vec<Attempt> {
    let py = "/usr/bin/python3";
    let memfd = format!(
        "{py} -c 'import os; fd = os.memfd_create(\"x\"); \
         os.write(fd, open(\"/usr/bin/true\", \"rb\").read()); os.execve(fd, [\"x\"], {{}})'"
    );
    let memfd_path = format!(
        "{py} -c 'import os; fd = os.memfd_create(\"x\"); \
         os.write(fd, open(\"/usr/bin/true\", \"rb\").read()); os.execv(\"/proc/self/fd/%d\" % fd, [\"x\"])'"
    );
    let ld = ["/lib64/ld-linux-x86-64.so.2", "/lib/ld-linux-aarch64.so.1"]
        .into_iter()
        .find(|p| std::path::Path::new(p).exists())
        .expect("the dynamic loader");
    let preload_c =
        "printf '#include <unistd.h>\\n__attribute__((constructor)) static void f(void) \
                     { write(2, \"preload-ran\\\\n\", 12); }\\n' > /srv/ws/p.c && \
                     cc -shared -fPIC -o /srv/ws/libp.so /srv/ws/p.c";
    let mut v = vec![
        // --- renamed or copied binaries ---
        rule("copy to /tmp and run", "cp /usr/bin/true /tmp/t-@T@-$$", "/tmp/t-@T@-$$", "default", "/tmp/t-"),
        rule("copy to /dev/shm and run", "cp /usr/bin/true /dev/shm/t-@T@-$$", "/dev/shm/t-@T@-$$", "default", "/dev/shm/t-"),
        rule("copy to /var/tmp and run", "cp /usr/bin/true /var/tmp/t-@T@-$$", "/var/tmp/t-@T@-$$", "default", "/var/tmp/t-"),
        // A copy is recognised by its content (the identity index).
        rule(
            "curl copied and renamed in the workspace",
            "cp /usr/bin/curl /srv/ws/fetch",
            &format!("/srv/ws/fetch -sS --max-time 3 http://127.0.0.1:{}/", c.denied_port),
            "deny-nested-network-tools",
            "/srv/ws/fetch",
        ),
        // --- symlinks ---
        rule("symlink to su", "ln -sf /usr/bin/su /srv/ws/notsu", "/srv/ws/notsu -c id", "deny-privilege-escalation", "/usr/bin/su"),
        rule("symlink to curl", "ln -sf /usr/bin/curl /srv/ws/fetch2", "/srv/ws/fetch2 --version", "deny-nested-network-tools", "/usr/bin/curl"),
        rule(
            "workspace symlink to a program in /tmp",
            "cp /usr/bin/true /tmp/u-@T@-$$ && ln -sf /tmp/u-@T@-$$ /srv/ws/u",
            "/srv/ws/u",
            "default",
            "/tmp/u-",
        ),
        // --- the dynamic loader ---
        rule("ld.so runs curl", "true", &format!("{ld} /usr/bin/curl --version"), "deny-nested-network-tools", ld),
        rule("ld.so runs a file in /tmp", "cp /usr/bin/true /tmp/v-@T@-$$", &format!("{ld} /tmp/v-@T@-$$"), "loader_payload", ld),
        rule("ld.so runs su", "true", &format!("{ld} /usr/bin/su -c id"), "deny-privilege-escalation", ld),
        // The loader's payload is resolved as the loader will open it and
        // judged like an exec; one the tree can change after the decision
        // (its own files, its directories) is refused outright.
        rule(
            "ld.so runs a workspace symlink to curl",
            "ln -sf /usr/bin/curl /srv/ws/x5",
            &format!("{ld} /srv/ws/x5 --version"),
            "loader_payload",
            ld,
        ),
        rule(
            "ld.so runs an exact copy of curl",
            "cp /usr/bin/curl /srv/ws/c7",
            &format!("{ld} /srv/ws/c7 --version"),
            "loader_payload",
            ld,
        ),
        rule(
            "ld.so runs curl through /proc/self/fd",
            "true",
            &format!("exec 3</usr/bin/curl; {ld} /proc/self/fd/3 --version"),
            "loader_payload",
            ld,
        ),
        rule(
            "ld.so finds a program by a bare name in its library path",
            "true",
            &format!("{ld} --library-path /usr/bin curl --version"),
            "unparsable_wrapper",
            ld,
        ),
        // A loader is known by its content.
        rule(
            "a renamed copy of the loader runs curl",
            &format!("cp {ld} /srv/ws/myld"),
            "/srv/ws/myld /usr/bin/curl --version",
            "deny-nested-network-tools",
            "/srv/ws/myld",
        ),
        // --- multi-call binaries and loaders by another name ---
        rule(
            "a multi-call binary run as -wget (a login name)",
            "printf 'int main(void) { return 0; }\\n' > /srv/ws/bb.c && cc -o /srv/ws/busybox /srv/ws/bb.c",
            &format!("{py} -c 'import os; os.execv(\"/srv/ws/busybox\", [\"-wget\", \"-q\", \"http://127.0.0.1:1/\"])'"),
            "deny-nested-network-tools",
            "/srv/ws/busybox",
        ),
        rule(
            "valgrind runs curl",
            "true",
            "valgrind --tool=none /usr/bin/curl --version",
            "deny-foreign-loaders",
            "valgrind",
        ),
        // --- interpreters exec'ing directly ---
        rule(
            "python execv curl",
            "true",
            &format!("{py} -c 'import os; os.execv(\"/usr/bin/curl\", [\"curl\", \"--version\"])'"),
            "deny-nested-network-tools",
            "/usr/bin/curl",
        ),
        rule(
            "perl exec su",
            "true",
            "/usr/bin/perl -e 'exec \"/usr/bin/su\", \"-c\", \"id\" or die \"exec: $!\\n\"'",
            "deny-privilege-escalation",
            "/usr/bin/su",
        ),
        rule(
            "python execv a file in /tmp",
            "cp /usr/bin/true /tmp/w-@T@-$$",
            &format!("{py} -c 'import os, sys; os.execv(sys.argv[1], [\"w\"])' /tmp/w-@T@-$$"),
            "default",
            "/tmp/w-",
        ),
        // --- memfd / fexecve / deleted files ---
        rule("memfd + fexecve", "true", &memfd, "fileless_exec", "memfd:"),
        rule("memfd through /proc/self/fd", "true", &memfd_path, "fileless_exec", "memfd:"),
        rule(
            "fexecve of a deleted file",
            // The helper is copied into the workspace: where the build put
            // it may be no place the policy lets programs run from.
            &format!("cp /usr/bin/true /srv/ws/d-$$ && cp {} /srv/ws/fx-$$", c.fexec),
            "exec 3</srv/ws/d-$$; rm /srv/ws/d-$$; /srv/ws/fx-$$ /proc/self/fd/3 d",
            "fileless_exec",
            "(deleted)",
        ),
        // --- shebang scripts ---
        rule(
            "script whose interpreter is su",
            "printf '#!/usr/bin/su -c id\\n' > /srv/ws/s1 && chmod +x /srv/ws/s1",
            "/srv/ws/s1",
            "deny-privilege-escalation",
            "/srv/ws/s1",
        ),
        rule(
            "script whose interpreter is curl",
            "printf '#!/usr/bin/curl --version\\n' > /srv/ws/s2 && chmod +x /srv/ws/s2",
            "/srv/ws/s2",
            "deny-nested-network-tools",
            "/srv/ws/s2",
        ),
        rule(
            "script whose interpreter is a workspace symlink to curl",
            "ln -sf /usr/bin/curl /srv/ws/innocent && \
             printf '#!/srv/ws/innocent --version\\n' > /srv/ws/s3 && chmod +x /srv/ws/s3",
            "/srv/ws/s3",
            "deny-nested-network-tools",
            "/srv/ws/s3",
        ),
        rule(
            "script whose interpreter is a script whose interpreter is curl",
            "printf '#!/usr/bin/curl --version\\n' > /srv/ws/i1 && chmod +x /srv/ws/i1 && \
             printf '#!/srv/ws/i1\\n' > /srv/ws/s4 && chmod +x /srv/ws/s4",
            "/srv/ws/s4",
            "deny-nested-network-tools",
            "/srv/ws/s4",
        ),
        rule(
            "script run by #!/usr/bin/env curl",
            "printf '#!/usr/bin/env curl\\n' > /srv/ws/s5 && chmod +x /srv/ws/s5",
            "/srv/ws/s5",
            "deny-nested-network-tools",
            "/srv/ws/s5",
        ),
        rule(
            "script in /tmp",
            "printf '#!/bin/sh\\necho ran\\n' > /tmp/s-@T@-$$ && chmod +x /tmp/s-@T@-$$",
            "/tmp/s-@T@-$$",
            "default",
            "/tmp/s-",
        ),
        // --- environment tricks ---
        rule(
            "AGENTSH_* in a nested shell",
            "true",
            "AGENTSH_SHIM_INSTALL=off AGENTSH_SERVER=http://127.0.0.1:1 \
             AGENTSH_SECCOMP_CONFIG='{\"version\":1}' sh -c 'curl --version'",
            "deny-nested-network-tools",
            "/curl",
        ),
        rule(
            "LD_PRELOAD into a nested shell",
            preload_c,
            "LD_PRELOAD=/srv/ws/libp.so sh -c 'curl --version'",
            "deny-nested-network-tools",
            "/curl",
        ),
        // --- attacks on agentsh itself ---
        rule("run the agentsh CLI", "true", &format!("{} approvals list", c.agentsh), "deny-agentsh-cli", "/agentsh"),
        kernel("kill the server", "true", &format!("kill -9 {}", c.server_pid), "", signals_guarded),
        kernel("stop the server", "true", &format!("kill -STOP {}", c.server_pid), "", signals_guarded),
        kernel("signal the SDK daemon", "true", &format!("kill -TERM {}", c.daemon_pid), "", signals_guarded),
        kernel(
            "ptrace the server",
            "true",
            &format!("strace -p {} -e trace=none", c.server_pid),
            "Operation not permitted",
            in_a_landlock_domain,
        ),
        kernel(
            "write the server's memory",
            "true",
            &format!("{py} -c 'open(\"/proc/{}/mem\", \"r+b\")'", c.server_pid),
            "PermissionError",
            in_a_landlock_domain,
        ),
        kernel(
            "steal the server's notify fds through /proc",
            "true",
            &format!(
                "{py} -c 'import os; [os.open(\"/proc/{0}/fd/\" + f, os.O_RDWR) for f in os.listdir(\"/proc/{0}/fd\")]'",
                c.server_pid
            ),
            "PermissionError",
            in_a_landlock_domain,
        ),
        kernel(
            "talk to the API socket",
            "true",
            &format!(
                "{py} -c 'import socket; s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET); \
                 s.connect(\"{}\"); s.send(b\"GET /api/v1/sessions HTTP/1.1\\r\\n\\r\\n\"); \
                 assert s.recv(99).startswith(b\"HTTP\")'",
                c.api_socket
            ),
            "PermissionError",
            |_, _| true,
        ),
        kernel(
            "take the API socket's name",
            "true",
            &format!("rm -f {0} && ln -s /dev/null {0}", c.api_socket),
            "",
            |_, _| true,
        ),
        kernel(
            "remove the active marker",
            "true",
            &format!("rm {}", c.marker),
            "",
            writes_handled,
        ),
        kernel(
            "turn the shim off in shim.conf",
            "true",
            "echo shim_install=off > /etc/agentsh/shim.conf",
            "Permission denied",
            writes_handled,
        ),
        kernel("remove shim.conf", "true", "rm /etc/agentsh/shim.conf", "", writes_handled),
        kernel("replace /bin/sh", "true", "cp /usr/bin/true /bin/sh", "", writes_handled),
        kernel(
            "put a real shell first on PATH",
            "true",
            "cp /bin/sh.real /usr/local/bin/sh",
            "",
            writes_handled,
        ),
        Attempt {
            min_abi: 4,
            ..kernel(
            "reach the API port",
            "true",
            &format!("bash -c 'echo GET / > /dev/tcp/127.0.0.1/{}'", c.api_port),
            "Permission denied",
            |r, c| port_not_allowed(r, c.api_port),
        )
        },
        kernel(
            "read the approval token",
            "true",
            &format!("cat {}/approval.token", c.state_dir),
            "Permission denied",
            reads_handled,
        ),
        kernel(
            "write the audit log",
            "true",
            &format!("echo '{{}}' >> {}", c.audit_file),
            "",
            writes_handled,
        ),
        // --- network to a denied port ---
        Attempt {
            min_abi: 4,
            ..kernel(
            "bash /dev/tcp to a denied port",
            "true",
            &format!("bash -c 'echo hi > /dev/tcp/127.0.0.1/{}'", c.denied_port),
            "Permission denied",
            |r, c| port_not_allowed(r, c.denied_port),
        )
        },
        Attempt {
            min_abi: 4,
            ..kernel(
            "python connect to a denied port",
            "true",
            &format!(
                "{py} -c 'import socket; socket.create_connection((\"127.0.0.1\", {}), 3)'",
                c.denied_port
            ),
            "PermissionError",
            |r, c| port_not_allowed(r, c.denied_port),
        )
        },
        // Abstract sockets have no file for Landlock's file rules; the
        // abstract-socket scope (ABI 6) keeps a tree to its own. Below it a
        // root daemon's abstract socket is reachable: the security model's
        // ABI table says so, and kernel_surface.rs measures it.
        Attempt {
            min_abi: 6,
            ..kernel(
            "connect to an abstract socket outside the tree",
            "true",
            &format!(
                "{py} -c 'import socket; s = socket.socket(socket.AF_UNIX); s.connect(\"\\0{}\")'",
                c.abstract_name
            ),
            "PermissionError",
            |r, _| r["landlock"]["scope_abstract_unix"] == true,
        )
        },
        // --- writing outside the workspace ---
        kernel("write /etc", "true", "echo x > /etc/agentsh-escape", "Permission denied", writes_handled),
        kernel("create beside the workspace", "true", "touch /srv/outside", "", writes_handled),
        kernel("create in /opt", "true", "mkdir /opt/agentsh-escape", "", writes_handled),
        kernel("write /var/lib", "true", "echo x > /var/lib/agentsh-escape", "", writes_handled),
    ];
    // The SDK's own spawn carries AGENTSH_* (the environment may only strengthen).
    v.push(Attempt {
        env: vec![
            ("AGENTSH_SHIM_INSTALL", "off".into()),
            ("AGENTSH_SERVER", "http://127.0.0.1:1".into()),
        ],
        ..rule(
            "AGENTSH_* on the SDK spawn",
            "true",
            "curl --version",
            "deny-nested-network-tools",
            "/curl",
        )
    });
    v
}

/// The wrap-init event of the latest tree (its whole record).
fn last_wrap_init(sb: &Sandbox) -> Value {
    sb.events()
        .into_iter()
        .rev()
        .find(|e| e["type"] == "wrap_init")
        .unwrap_or(Value::Null)
}

/// What names one suite run's scratch copies (`@T@` in an attempt): the
/// test process's pid, the time and the run's number, so no other run,
/// earlier or concurrent (this file's tests run on parallel threads of one
/// process), uses it, and one run's cleanup never removes another's copy.
fn scratch_token() -> String {
    static RUN: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    format!(
        "{}x{nanos}r{}",
        std::process::id(),
        RUN.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    )
}

/// Removes one run's scratch copies the trees could not (a tree may not
/// delete in /var/tmp under `agent-default`).
fn remove_scratch(tok: &str) {
    let mark = format!("-{tok}-");
    for dir in ["/tmp", "/var/tmp", "/dev/shm"] {
        let Ok(entries) = std::fs::read_dir(dir) else {
            continue;
        };
        for e in entries.flatten() {
            if e.file_name().to_string_lossy().contains(&mark) {
                let _ = std::fs::remove_file(e.path());
            }
        }
    }
}

fn run_suite(uid: Option<u32>, max_abi: Option<i64>) {
    run_suite_with(uid, max_abi, "");
}

/// [`run_suite`] with more server config (the ptrace backend).
fn run_suite_with(uid: Option<u32>, max_abi: Option<i64>, more: &str) {
    let denied = Listener::start();
    let extra = max_abi
        .map(|a| format!("landlock:\n  max_abi: {a}\n"))
        .unwrap_or_default()
        + more;
    let mut sb = Sandbox::with_config(&escape_policy(), uid, &extra);
    let state = sb.srv.dir.path().join("state");
    let abi = max_abi
        .unwrap_or(i64::MAX)
        .min(agentsh_proto::wire::kernel_landlock_abi());
    // One per suite run (the runs of this file share a process).
    static RUN: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let abstract_name = format!(
        "agentsh-test-abstract-{}-{}",
        std::process::id(),
        RUN.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    );
    let _abstract = {
        use std::os::linux::net::SocketAddrExt;
        let addr =
            std::os::unix::net::SocketAddr::from_abstract_name(abstract_name.as_bytes()).unwrap();
        std::os::unix::net::UnixListener::bind_addr(&addr).unwrap()
    };
    let c = Ctx {
        abstract_name,
        api_socket: sb.srv.socket.display().to_string(),
        marker: sb
            .srv
            .socket
            .with_file_name(agentsh_proto::active::MARKER)
            .display()
            .to_string(),
        server_pid: sb.srv.pid(),
        daemon_pid: sb.sup.pid,
        api_port: sb
            .srv
            .addr
            .rsplit(':')
            .next()
            .and_then(|p| p.parse().ok())
            .unwrap_or(0),
        denied_port: denied.port,
        state_dir: state.display().to_string(),
        audit_file: sb.srv.dir.path().join("audit.jsonl").display().to_string(),
        agentsh: bin("agentsh").display().to_string(),
        fexec: bin("agentsh-test-fexec").display().to_string(),
    };
    let who = format!(
        "{} at Landlock ABI {abi}",
        if uid.is_some() {
            "unprivileged"
        } else {
            "root"
        }
    );
    let mut failures = Vec::new();
    let mut not_enforced = Vec::new();
    let tok = scratch_token();
    for a in attempts(&c) {
        if a.min_abi > abi {
            not_enforced.push(a.name);
            continue;
        }
        let mark = sb.mark();
        // Scratch copies are named for this run (`@T@`), so a copy an earlier
        // run could not remove never collides with this one; the tree removes
        // what it may, the test the rest (this machine's /tmp, /var/tmp,
        // /dev/shm).
        let script = format!(
            "cd {WORKSPACE} && {} && echo SETUP-OK; ({}); echo ATTEMPT-RC=$?; \
             rm -f /tmp/?-{tok}-$$ /var/tmp/?-{tok}-$$ /dev/shm/?-{tok}-$$",
            a.setup.replace("@T@", &tok),
            a.attempt.replace("@T@", &tok)
        );
        let mut spawn = Spawn::argv(&["/bin/sh", "-c", &script]);
        for (k, v) in &a.env {
            spawn = spawn.env(k, v);
        }
        let f = sb.spawn(&spawn);
        let rc = f
            .stdout
            .lines()
            .find_map(|l| l.strip_prefix("ATTEMPT-RC="))
            .and_then(|x| x.trim().parse::<i32>().ok());
        let ctx = format!("[{who}] {}: {f:?}", a.name);
        if !f.stdout.contains("SETUP-OK") {
            failures.push(format!("{ctx}\n  setup failed"));
            continue;
        }
        if rc == Some(0) || rc.is_none() {
            failures.push(format!("{ctx}\n  the attempt did not fail (rc {rc:?})"));
            continue;
        }
        match &a.why {
            Why::Rule { rule, path } => {
                let execs = sb.execs_since(mark);
                let hit = execs.iter().any(|e| {
                    e["decision"] == "deny"
                        && e["rule"] == *rule
                        && [&e["filename"], &e["resolved"]]
                            .iter()
                            .any(|f| f.as_str().is_some_and(|f| f.contains(path.as_str())))
                });
                if !hit {
                    failures.push(format!(
                        "{ctx}\n  no deny by rule {rule} on a path with {path:?}; execs: {}",
                        execs
                            .iter()
                            .map(|e| format!(
                                "{} {} {} {}",
                                e["filename"], e["resolved"], e["decision"], e["rule"]
                            ))
                            .collect::<Vec<_>>()
                            .join(" | ")
                    ));
                }
            }
            Why::Kernel { error, ruleset } => {
                if !f.stderr.contains(error) {
                    failures.push(format!("{ctx}\n  stderr lacks {error:?}"));
                }
                let r = last_wrap_init(&sb);
                if !ruleset(&r, &c) {
                    failures.push(format!(
                        "{ctx}\n  the recorded ruleset does not show why: {r}"
                    ));
                }
                if let Some(e) = sb
                    .execs_since(mark)
                    .into_iter()
                    .find(|e| e["effective_action"] == "deny")
                {
                    failures.push(format!(
                        "{ctx}\n  expected the kernel to refuse, but an exec was denied: {e}"
                    ));
                }
            }
        }
    }
    // Still alive and still supervising after all that.
    assert!(
        sb.srv
            .try_call("GET", "/healthz", None)
            .is_ok_and(|(s, _)| s == 200),
        "the server must survive the suite: {}",
        sb.srv.log()
    );
    let f = sb.sh("(curl --version >/dev/null 2>&1); echo rc=$?");
    assert!(f.stdout.contains("rc=126"), "still supervised: {f:?}");
    // The tree's record says which ABI it got.
    assert_eq!(
        last_wrap_init(&sb)["landlock"]["kernel_abi"].as_i64(),
        Some(abi),
        "{who}"
    );
    eprintln!("[{who}] not enforced at this ABI (see the security model): {not_enforced:?}");
    remove_scratch(&tok);
    assert!(
        failures.is_empty(),
        "{} attempt(s) misbehaved:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn escape_attempts_fail_and_are_explained_as_root() {
    if !require_root("escape_attempts_fail_and_are_explained_as_root") {
        return;
    }
    run_suite(None, None);
}

#[test]
fn escape_attempts_fail_and_are_explained_as_an_unprivileged_user() {
    if !require_root("escape_attempts_fail_and_are_explained_as_an_unprivileged_user") {
        return;
    }
    run_suite(Some(NOBODY), None);
}

#[test]
fn escape_attempts_at_landlock_abi_4_as_root_and_as_a_user() {
    if !require_root("escape_attempts_at_landlock_abi_4_as_root_and_as_a_user") {
        return;
    }
    run_suite(None, Some(4));
    run_suite(Some(NOBODY), Some(4));
}

#[test]
fn escape_attempts_at_landlock_abi_2_as_root_and_as_a_user() {
    if !require_root("escape_attempts_at_landlock_abi_2_as_root_and_as_a_user") {
        return;
    }
    run_suite(None, Some(2));
    run_suite(Some(NOBODY), Some(2));
}

/// The ptrace backend (gVisor, Modal): the same suite, judged by the same
/// supervisor through the tracer.
#[test]
fn escape_attempts_under_the_ptrace_backend_as_root_and_as_a_user() {
    if !require_root("escape_attempts_under_the_ptrace_backend_as_root_and_as_a_user") {
        return;
    }
    let ptrace = "execve:\n  backend: ptrace\n";
    run_suite_with(None, None, ptrace);
    run_suite_with(Some(NOBODY), Some(2), ptrace);
}

/// agent-default with a name rule for network tools in nested commands:
/// agent-default itself judges their traffic by destination (egress), but
/// the mechanisms tested here (renamed copies, links, loaders, wrappers,
/// `#!` chains, multi-call binaries) need a program the policy names, and
/// curl is the one most attacks reach for.
fn escape_policy() -> String {
    let rule = "command_rules:\n  - name: deny-nested-network-tools\n    commands: [curl, wget, \
                nc, \"nc.*\", ncat, netcat, socat, ssh, scp, telnet]\n    context: [nested]\n    \
                decision: deny\n    message: network tools are not allowed in nested commands \
                (this test's policy)\n";
    assert!(AGENT_DEFAULT.contains("\ncommand_rules:\n"));
    AGENT_DEFAULT.replacen("\ncommand_rules:\n", &format!("\n{rule}"), 1)
}
