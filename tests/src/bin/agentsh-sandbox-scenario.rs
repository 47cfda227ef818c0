//! The SDK scenarios inside a sandbox of their own: a gVisor sandbox
//! (`runsc do`, where the ptrace backend is all there is) or a test mount
//! namespace (with `--backend ptrace`). Run as root, as a container's init
//! would: it lays the binaries out as an image layer does, runs
//! `agentsh shim install --bash`, sets `shim_install=on`, starts the server
//! (on the embedded defaults unless `--backend` forces one), starts an
//! SDK-style daemon that is *not* the server's child, and has it spawn
//! shells the way the SDKs do. Then it checks what came out, and what the
//! audit log says, and prints one line per check: `ok: ...` or `FAIL: ...`.
//! The last line is `scenario: N checks, M failed`; the exit status is 0
//! only when none failed.
//!
//! With `--modal` it does what docs/sdk-cookbook.md's Modal recipe says, read
//! from the page: the image layer's `agentsh` commands, and the sandbox's
//! start command (`modal-start`), exec'd as Modal execs an entrypoint argv
//! (no shell), instead of starting the server itself.
//!
//! Everything it writes lands in the sandbox's overlay (runsc) or the
//! namespace's overlays: never on the host.

use agentsh_tests::sdk::{e2b, runloop, tensorlake, Finished, Spawn, Supervisor};
use agentsh_tests::server::bin;
use serde_json::Value;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const SOCKET: &str = "/run/agentsh/api.sock";
const AUDIT: &str = "/var/log/agentsh/audit.jsonl";
const CONFIG: &str = "/etc/agentsh/config.yaml";

struct Checks {
    total: usize,
    failed: usize,
}

impl Checks {
    fn check(&mut self, what: &str, ok: bool, detail: impl FnOnce() -> String) {
        self.total += 1;
        if ok {
            println!("ok: {what}");
        } else {
            self.failed += 1;
            println!("FAIL: {what}: {}", detail());
        }
    }
}

/// The server this scenario started, while it runs (0: none): a failure
/// (fatal, or a panic) kills it, so nothing is left behind.
static SERVER: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

fn kill_server() {
    let pid = SERVER.swap(0, std::sync::atomic::Ordering::SeqCst);
    if pid != 0 {
        // SAFETY: kill takes two integers.
        unsafe { libc::kill(pid as i32, libc::SIGKILL) };
    }
}

fn fatal(what: &str) -> ! {
    kill_server();
    println!("FAIL: {what}");
    println!("scenario: aborted");
    std::process::exit(1);
}

fn run(cmd: &mut Command) -> std::process::Output {
    cmd.output()
        .unwrap_or_else(|e| fatal(&format!("cannot run {cmd:?}: {e}")))
}

/// The binaries as an image layer puts them: next to each other in /usr/bin.
fn lay_out_binaries() {
    for name in ["agentsh", "agentsh-unixwrap", "agentsh-shell-shim"] {
        let to = format!("/usr/bin/{name}");
        let tmp = format!("{to}.new");
        if let Err(e) = std::fs::copy(bin(name), &tmp).and_then(|_| std::fs::rename(&tmp, &to)) {
            fatal(&format!("cannot install {name} into /usr/bin: {e}"));
        }
    }
}

/// Starts the server: `agentsh server [--config PATH]`, or the `argv` of a
/// recipe's start command (a program on /usr/bin and its arguments).
fn start_server(config: Option<&str>, argv: Option<&[String]>) -> Child {
    let _ = std::fs::remove_file(SOCKET);
    let log = std::fs::File::create("/var/log/agentsh-scenario-server.log")
        .unwrap_or_else(|e| fatal(&format!("server log: {e}")));
    let mut c = match argv {
        Some(argv) => {
            let mut c = Command::new(format!("/usr/bin/{}", argv[0]));
            c.args(&argv[1..]);
            c
        }
        None => {
            let mut c = Command::new("/usr/bin/agentsh");
            c.arg("server");
            if let Some(path) = config {
                c.args(["--config", path]);
            }
            c
        }
    };
    let child: Child = c
        .stdin(Stdio::null())
        .stdout(log.try_clone().unwrap_or_else(|e| fatal(&e.to_string())))
        .stderr(log)
        .spawn()
        .unwrap_or_else(|e| fatal(&format!("cannot start the server: {e}")));
    SERVER.store(child.id(), std::sync::atomic::Ordering::SeqCst);
    let t = Instant::now();
    while !Path::new(SOCKET).exists() {
        if t.elapsed() > Duration::from_secs(120) {
            let log =
                std::fs::read_to_string("/var/log/agentsh-scenario-server.log").unwrap_or_default();
            fatal(&format!("the server did not start within 120 s:\n{log}"));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    child
}

/// SIGTERM from outside every tree stops the server; it must be gone
/// within 60 s (then SIGKILL, and the check fails).
fn stop_server(c: &mut Checks, mut server: Child) {
    // Stopped here; a failure from now on has no server to kill.
    SERVER.store(0, std::sync::atomic::Ordering::SeqCst);
    // SAFETY: kill takes two integers.
    unsafe { libc::kill(server.id() as i32, libc::SIGTERM) };
    let t = Instant::now();
    while t.elapsed() < Duration::from_secs(60) {
        if let Ok(Some(_)) = server.try_wait() {
            c.check(
                "SIGTERM from outside the trees stops the server",
                true,
                String::new,
            );
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = server.kill();
    let _ = server.wait();
    c.check(
        "SIGTERM from outside the trees stops the server",
        false,
        || "still running after 60 s; killed".into(),
    );
}

fn audit() -> Vec<Value> {
    std::fs::read_to_string(AUDIT)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

fn execs_of(base: &str) -> Vec<Value> {
    audit()
        .into_iter()
        .filter(|e| {
            e["type"] == "execve"
                && e["filename"]
                    .as_str()
                    .is_some_and(|f| f.rsplit('/').next() == Some(base))
        })
        .collect()
}

fn show(f: &Finished) -> String {
    format!(
        "code {:?} signal {:?} stdout {:?} stderr {:?}",
        f.code, f.signal, f.stdout, f.stderr
    )
}

/// Phase 1: ordinary SDK work under the defaults.
/// A session made with limits (`agentsh session create --pids`): where
/// `agentsh detect` says they cannot be applied here (gVisor has no cgroup
/// v2; a container's cgroupfs is read-only), its shells are refused with
/// the reason; where it says they can, they run.
fn limits(c: &mut Checks, sdk: &mut Supervisor, report: &Value) {
    let o =
        run(Command::new("/usr/bin/agentsh").args(["session", "create", "lim", "--pids", "64"]));
    c.check(
        "agentsh session create --pids 64 makes a session",
        o.status.success(),
        || String::from_utf8_lossy(&o.stderr).into_owned(),
    );
    let f = sdk.run(&Spawn::argv(&["/bin/sh", "-c", "echo ran"]).env("AGENTSH_SESSION", "lim"));
    if report["limits"]["available"] == true {
        c.check(
            "a session's limits apply where detect says they can",
            f.code == Some(0) && f.stdout == "ran\n",
            || show(&f),
        );
    } else {
        c.check(
            "limits that cannot be applied here refuse the session's shells, saying why",
            f.code == Some(126)
                && f.stdout.is_empty()
                && f.stderr.contains("limits (pids=64) cannot be applied"),
            || format!("{}\ndetect: {}", show(&f), report["limits"]),
        );
    }
}

fn ordinary(c: &mut Checks, sdk: &mut Supervisor) {
    let f = sdk.run(&runloop(
        "git init -q /tmp/sc-repo && test -d /tmp/sc-repo/.git && for i in 1 2 3; do echo n$i; done",
    ));
    c.check(
        "ordinary work runs (git init, a shell loop)",
        f.code == Some(0) && f.stdout == "n1\nn2\nn3\n",
        || show(&f),
    );
    let f = sdk.run(&e2b("echo hello | tr a-z A-Z"));
    c.check(
        "a pipeline through E2B's login bash",
        f.code == Some(0) && f.stdout.trim() == "HELLO",
        || show(&f),
    );
    // A root tree of the SDK daemon's (whose filter the server builds
    // from a template for that daemon) cannot change shim.conf: Landlock,
    // or where there is none the tracer, keeps agentsh's own files.
    let before = std::fs::read("/etc/agentsh/shim.conf").unwrap_or_default();
    let f = sdk.run(&e2b(
        "printf 'shim_install=off\\n' > /etc/agentsh/shim.conf; echo rc=$?",
    ));
    let after = std::fs::read("/etc/agentsh/shim.conf").unwrap_or_default();
    c.check(
        "a root SDK shell cannot change shim.conf",
        f.stdout.trim() != "rc=0" && f.stdout.trim().starts_with("rc=") && before == after,
        || {
            format!(
                "{}\nshim.conf now: {:?}",
                show(&f),
                String::from_utf8_lossy(&after)
            )
        },
    );
    // The shipped credential_files: a store in root's home is out of the
    // tree's reach (a mount namespace, or the fallback: Landlock's carve,
    // or where there is none the tracer's).
    let secret = "aws_secret_access_key=scenario-6c2d";
    let planted = std::fs::create_dir_all("/root/.aws")
        .and_then(|()| std::fs::write("/root/.aws/credentials", secret));
    let f = sdk.run(&e2b("cat /root/.aws/credentials; echo end"));
    c.check(
        "a credential store in root's home is not read",
        planted.is_ok() && f.stdout.contains("end") && !f.stdout.contains("scenario-6c2d"),
        || format!("planted {planted:?}: {}", show(&f)),
    );
    let f = sdk.run(&tensorlake("su -c true root >/dev/null; echo rc=$?"));
    c.check(
        "a nested su fails with 126",
        f.code == Some(0) && f.stdout.trim() == "rc=126",
        || show(&f),
    );
    let su = execs_of("su");
    c.check(
        "the denied su is audited with its rule",
        !su.is_empty()
            && su.iter().all(|e| {
                e["rule"] == "deny-privilege-escalation" && e["effective_action"] == "deny"
            }),
        || format!("{su:#?}"),
    );
    let f = sdk.run(&Spawn::argv(&["/bin/sh", "-c", "echo $$"]));
    c.check(
        "$$ is the pid the SDK spawned",
        f.stdout.trim() == f.pid.to_string(),
        || format!("spawned {}: {}", f.pid, show(&f)),
    );
    let f = sdk.run(&runloop("exit 42"));
    c.check("an exit status passes through", f.code == Some(42), || {
        show(&f)
    });
    let f = sdk.run(&Spawn::argv(&["/bin/sh", "-c", "kill -TERM $$; sleep 5"]));
    c.check(
        "a death by signal passes through",
        f.signal == Some(libc::SIGTERM),
        || show(&f),
    );
    let sh = execs_of("sh");
    c.check(
        "every shell was supervised (audited at depth 0)",
        sh.iter()
            .any(|e| e["depth"] == 0 && e["memory"] == "verified"),
        || format!("{sh:#?}"),
    );
}

/// A TCP listener of the scenario's own (outside every tree) on loopback,
/// and a shell command that connects to it and prints `connect N` (0:
/// connected; otherwise the errno).
fn loopback_probe() -> (std::net::TcpListener, String) {
    // On one of agent-default's dev-server ports (its network_rules are the
    // floor every connect keeps).
    let l = [5173, 3000, 4000, 5000, 8000, 8888, 9000]
        .iter()
        .find_map(|p| std::net::TcpListener::bind(("127.0.0.1", *p)).ok())
        .unwrap_or_else(|| fatal("no free dev-server port on loopback for the probe"));
    let port = l.local_addr().map_or(0, |a| a.port());
    let script = format!(
        "python3 -c 'import socket\nprint(\"connect\", socket.socket().connect_ex((\"127.0.0.1\", {port})))'"
    );
    (l, script)
}

/// Egress under agent-default (loopback over TCP allowed by
/// `local-dev-servers`): judged and made where the supervisor can take the
/// tree's socket; under gVisor (the ptrace backend, no `pidfd_getfd`)
/// judged where the call stops and let through as made, whatever
/// `egress.compat` says (nothing there is unjudged), DNS sent to the stub.
fn egress(c: &mut Checks, sdk: &mut Supervisor, gvisor: bool, compat: &str, netrace: Option<&str>) {
    let (_listener, script) = loopback_probe();
    let f = sdk.run(&Spawn::argv(&["/bin/sh", "-c", &script]));
    let connects: Vec<Value> = audit()
        .into_iter()
        .filter(|e| e["type"] == "connect" && e["ip"] == "127.0.0.1")
        .collect();
    let rule = |r: &str| connects.iter().any(|e| e["rule"] == r);
    match (gvisor, compat) {
        (false, _) => {
            c.check(
                "a connect to a local dev server is judged and made",
                f.stdout.trim() == "connect 0" && rule("local-dev-servers"),
                || format!("{}\n{connects:#?}", show(&f)),
            );
        }
        (true, "best_effort") => {
            c.check(
                "gVisor: a connect to a local dev server is judged where it stops and made",
                f.stdout.trim() == "connect 0"
                    && rule("local-dev-servers")
                    && !rule("egress_unenforceable"),
                || format!("{}\n{connects:#?}", show(&f)),
            );
            dns_through_the_stub(c, sdk);
            if let Some(netrace) = netrace {
                dns_sockaddrs(c, sdk, netrace);
            }
        }
        (true, _) => {
            c.check(
                "gVisor with egress.compat allow_unjudged: the connect is judged all the same",
                f.stdout.trim() == "connect 0"
                    && rule("local-dev-servers")
                    && !rule("allow_unjudged"),
                || format!("{}\n{connects:#?}", show(&f)),
            );
            let said = audit().into_iter().rev().find(|e| e["type"] == "wrap_init");
            c.check(
                "gVisor with allow_unjudged: the wrap-init lists no egress as not enforced",
                said.as_ref()
                    .is_some_and(|e| !e["not_enforced"].to_string().contains("egress")),
                || format!("{said:#?}"),
            );
        }
    }
}

/// A tree's DNS query, to whatever resolver `/etc/resolv.conf` names, is
/// sent to agentsh's stub (`dns: stub`), which refuses a name no rule of
/// agent-default could allow and audits it as the tree's.
fn dns_through_the_stub(c: &mut Checks, sdk: &mut Supervisor) {
    let name = "leak.attacker.example";
    let script = format!(
        "python3 -c 'import socket\ntry:\n  socket.getaddrinfo(\"{name}\", 80, socket.AF_INET)\n  print(\"resolved\")\nexcept socket.gaierror as e:\n  print(\"unresolved\")'"
    );
    let f = sdk.run(&Spawn::argv(&["/bin/sh", "-c", &script]));
    let events = audit();
    let asked = events
        .iter()
        .any(|e| e["type"] == "dns" && e["name"] == name && e["decision"] == "deny");
    let sent = events
        .iter()
        .any(|e| e["type"] == "connect" && e["port"] == 53 && e["rule"] == "dns_stub");
    c.check(
        "gVisor: a DNS query goes to agentsh's stub, which refuses a name no rule allows",
        f.stdout.trim() == "unresolved" && asked && sent,
        || {
            let dns: Vec<&Value> = events
                .iter()
                .filter(|e| e["type"] == "dns" || e["port"] == 53)
                .collect();
            format!("{}\n{dns:#?}", show(&f))
        },
    );
}

/// The three ways a query leaves a UDP socket, through `netrace dns` (a
/// static prober: `tests/attackers/netrace.c`), to an address nothing
/// answers at: connected, then sent (glibc's way), and sent to the
/// resolver from a bound socket, reach the stub (REFUSED: rcode 5) and the
/// caller's sockaddr still names its resolver afterwards; sent from a
/// socket with no address yet, refused (the stub could not tell it as the
/// tree's).
fn dns_sockaddrs(c: &mut Checks, sdk: &mut Supervisor, netrace: &str) {
    for (how, want) in [
        ("connect", "dns rcode 5\nsockaddr kept".to_string()),
        ("send", "dns rcode 5\nsockaddr kept".to_string()),
        (
            "unbound",
            format!("dns send {}\nsockaddr kept", libc::EACCES),
        ),
    ] {
        let script = format!("{netrace} dns 192.0.2.53 {how}.attacker.example {how}");
        let f = sdk.run(&Spawn::argv(&["/bin/sh", "-c", &script]));
        c.check(
            &format!("gVisor: a DNS query sent by {how} is judged as the stub's"),
            f.stdout.trim() == want,
            || show(&f),
        );
    }
}

fn pending_approval() -> Option<String> {
    // One JSON object per waiting exec, a line each.
    let o = run(Command::new("/usr/bin/agentsh").args(["approvals", "list", "--json"]));
    let line = String::from_utf8_lossy(&o.stdout)
        .lines()
        .next()?
        .to_string();
    let v: Value = serde_json::from_str(&line).ok()?;
    v["id"].as_str().map(str::to_string)
}

/// Phase 2: one approval granted, one timed out.
fn approvals(c: &mut Checks, sdk: &mut Supervisor) {
    let r = sdk.spawn(&runloop("id -u; echo rc=$?"));
    let t = Instant::now();
    let mut id = None;
    while id.is_none() && t.elapsed() < Duration::from_secs(60) {
        id = pending_approval();
        std::thread::sleep(Duration::from_millis(100));
    }
    c.check("a nested id waits for an operator", id.is_some(), || {
        "no pending approval within 15 s".into()
    });
    if let Some(id) = id {
        let o = run(Command::new("/usr/bin/agentsh").args(["approvals", "approve", &id]));
        c.check("the operator approves it", o.status.success(), || {
            String::from_utf8_lossy(&o.stderr).into_owned()
        });
    }
    let f = sdk.wait(r, Duration::from_secs(120));
    c.check("the approved id runs", f.stdout == "0\nrc=0\n", || show(&f));
    let r = sdk.spawn(&runloop("id -u; echo rc=$?"));
    let f = sdk.wait(r, Duration::from_secs(120));
    c.check(
        "an unanswered approval times out and is denied",
        f.stdout.trim() == "rc=126",
        || show(&f),
    );
    let outcomes: Vec<Value> = execs_of("id")
        .iter()
        .map(|e| e["approval_outcome"].clone())
        .collect();
    c.check(
        "the audit has one approved and one timed-out id",
        outcomes.contains(&Value::from("approved")) && outcomes.contains(&Value::from("timeout")),
        || format!("{outcomes:?}"),
    );
}

/// An egress rule with `http:` (issue 42): the tree's connect reaches
/// agentsh's proxy (under gVisor, the socket cannot be taken: the proxy's
/// address is written over the caller's sockaddr where it stops, and the
/// socket is booked once the connect returns), which lets a GET through
/// with the injected header and refuses a DELETE with a 403, never sent.
fn http_rules(c: &mut Checks, sdk: &mut Supervisor, backend: &str) {
    let up = agentsh_tests::http_upstream::HttpUpstream::start(
        Path::new("/tmp/agentsh-scenario-upstream"),
        std::net::Ipv4Addr::LOCALHOST,
        "upstream.test",
        false,
    );
    let port = up.port;
    std::fs::write(
        "/etc/agentsh/policies/http-sc.yaml",
        format!(
            "name: http-sc\ndefault: allow\negress:\n  default: deny\n  dns: host\n  rules:\n    - name: local-http\n      cidrs: [127.0.0.1/32]\n      ports: [{port}]\n      decision: allow\n      http:\n        default: deny\n        rules:\n          - {{name: read, methods: [GET], decision: allow}}\n        inject:\n          headers: {{Authorization: \"Bearer ${{secret:t}}\"}}\n"
        ),
    )
    .unwrap_or_else(|e| fatal(&format!("policy: {e}")));
    let secret = "/etc/agentsh/secret-t";
    std::fs::write(secret, "s3cr3t-in-the-server\n")
        .unwrap_or_else(|e| fatal(&format!("secret: {e}")));
    {
        use std::os::unix::fs::PermissionsExt;
        let _ = std::fs::set_permissions(secret, std::fs::Permissions::from_mode(0o600));
    }
    std::fs::write(
        CONFIG,
        format!(
            "policy: http-sc\nexecve:\n  backend: {backend}\nsecrets:\n  t: {{file: {secret}}}\n"
        ),
    )
    .unwrap_or_else(|e| fatal(&format!("config: {e}")));
    let server = start_server(Some(CONFIG), None);
    let f = sdk.run(&Spawn::argv(&[
        "/bin/sh",
        "-c",
        &format!("curl -s -w ' %{{http_code}}\\n' http://127.0.0.1:{port}/x; curl -s -X DELETE -w ' %{{http_code}}\\n' http://127.0.0.1:{port}/y; curl -s -o /dev/null -w '%{{http_code}}\\n' http://127.0.0.1:{port}/last"),
    ]));
    let reached = up.requests();
    let got = f.stdout.lines().map(str::to_string).collect::<Vec<_>>();
    c.check(
        "an egress rule with http: lets a GET through with the header it injects",
        got.first()
            .is_some_and(|l| l.ends_with(" 200") && l.contains("\"saw_authorization\": true"))
            && reached
                .iter()
                .any(|r| r["path"] == "/x" && r["authorization"] == "Bearer s3cr3t-in-the-server"),
        || format!("{}\n{reached:#?}", show(&f)),
    );
    c.check(
        "an egress rule with http: refuses a DELETE with a 403 that says why, never sent",
        f.stdout
            .contains("denied (rule default, egress rule local-http)")
            && f.stdout.ends_with("\n 403\n200\n")
            && !reached.iter().any(|r| r["method"] == "DELETE"),
        || format!("{}\n{reached:#?}", show(&f)),
    );
    stop_server(c, server);
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let forced = args
        .iter()
        .position(|a| a == "--backend")
        .and_then(|i| args.get(i + 1))
        .cloned();
    let modal = args.iter().any(|a| a == "--modal");
    // Laid out as an image would have it (agent-default runs no program
    // from /tmp).
    let netrace = args
        .iter()
        .position(|a| a == "--netrace")
        .and_then(|i| args.get(i + 1))
        .map(|from| {
            let to = "/usr/local/bin/netrace";
            std::fs::copy(from, to).unwrap_or_else(|e| fatal(&format!("netrace: {e}")));
            to.to_string()
        });
    let report = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        kill_server();
        report(info);
    }));
    let mut c = Checks {
        total: 0,
        failed: 0,
    };
    lay_out_binaries();
    let detect = run(Command::new("/usr/bin/agentsh").args(["detect", "--json"]));
    let report: Value = serde_json::from_slice(&detect.stdout).unwrap_or_default();
    println!(
        "detect: gvisor={} exec_backend={} user_notif={} landlock_abi={}",
        report["gvisor"],
        report["exec_backend"],
        report["seccomp_user_notif"]["available"],
        report["landlock_abi"]
    );
    let image: Vec<Vec<String>> = if modal {
        agentsh_tests::recipes::agentsh_run_commands("modal-image")
    } else {
        vec![["agentsh", "shim", "install", "--bash"]
            .iter()
            .map(ToString::to_string)
            .collect()]
    };
    for argv in &image {
        let o = run(Command::new(format!("/usr/bin/{}", argv[0])).args(&argv[1..]));
        c.check(&argv.join(" "), o.status.success(), || {
            String::from_utf8_lossy(&o.stderr).into_owned()
        });
    }
    // (The Modal recipe's `printf 'shim_install=on\n' > shim.conf`.)
    if let Err(e) = std::fs::write("/etc/agentsh/shim.conf", "shim_install=on\n") {
        fatal(&format!("shim.conf: {e}"));
    }
    let _ = std::fs::create_dir_all("/etc/agentsh/policies");
    let config = forced.as_ref().map(|b| {
        let text = format!("execve:\n  backend: {b}\n");
        std::fs::write(CONFIG, text).unwrap_or_else(|e| fatal(&format!("config: {e}")));
        CONFIG
    });
    let start: Option<Vec<String>> = modal.then(|| {
        agentsh_tests::recipes::one_line("modal-start")
            .split_whitespace()
            .map(str::to_string)
            .collect()
    });
    let server = start_server(config, start.as_deref());
    let mut sdk = Supervisor::start_command(Command::new(bin("sdk-supervisor")));
    ordinary(&mut c, &mut sdk);
    limits(&mut c, &mut sdk, &report);
    let gvisor = report["gvisor"] == true;
    egress(&mut c, &mut sdk, gvisor, "best_effort", netrace.as_deref());
    let wrap_inits: Vec<Value> = audit()
        .into_iter()
        .filter(|e| e["type"] == "wrap_init")
        .collect();
    c.check(
        "every wrap-init says the ptrace backend",
        !wrap_inits.is_empty() && wrap_inits.iter().all(|e| e["backend"] == "ptrace"),
        || format!("{wrap_inits:#?}"),
    );
    if report["landlock_abi"] == 0 {
        // The tracer keeps the file rules there (the path calls go to it):
        // the wrap-init no longer lists them as not enforced.
        c.check(
            "without Landlock the tracer keeps the file rules",
            wrap_inits.iter().all(|e| {
                !e["not_enforced"].to_string().contains("file rules")
                    && !e["not_enforced"]
                        .to_string()
                        .contains("agentsh's own files")
            }),
            || format!("{wrap_inits:#?}"),
        );
    }
    stop_server(&mut c, server);
    if gvisor {
        // The operator's fail-open choice for calls egress cannot judge:
        // under the tracer there are none, so it must change nothing.
        std::fs::write(CONFIG, "egress:\n  compat: allow_unjudged\n")
            .unwrap_or_else(|e| fatal(&format!("config: {e}")));
        let server = start_server(Some(CONFIG), None);
        egress(&mut c, &mut sdk, gvisor, "allow_unjudged", None);
        stop_server(&mut c, server);
    }
    std::fs::write(
        "/etc/agentsh/policies/approve-sc.yaml",
        "name: approve-sc\ndefault: allow\ncommand_rules:\n  - name: approve-nested-id\n    commands: [id]\n    context: [nested]\n    decision: approve\n",
    )
    .unwrap_or_else(|e| fatal(&format!("policy: {e}")));
    let backend = forced.as_deref().unwrap_or("auto");
    std::fs::write(
        CONFIG,
        format!("policy: approve-sc\nexecve:\n  backend: {backend}\n  approval_timeout: 3s\n"),
    )
    .unwrap_or_else(|e| fatal(&format!("config: {e}")));
    let server = start_server(Some(CONFIG), None);
    approvals(&mut c, &mut sdk);
    stop_server(&mut c, server);
    http_rules(&mut c, &mut sdk, backend);
    if c.failed > 0 {
        // The last server's warnings: why a handoff or a shell was refused
        // (the log lives in the sandbox, gone once it ends).
        let log =
            std::fs::read_to_string("/var/log/agentsh-scenario-server.log").unwrap_or_default();
        for line in log
            .lines()
            .filter(|l| l.contains("WARN") || l.contains("ERROR"))
            .take(40)
        {
            println!("server: {line}");
        }
    }
    println!("scenario: {} checks, {} failed", c.total, c.failed);
    std::process::exit(i32::from(c.failed > 0));
}
