//! End-to-end: the control plane. No process of a supervised tree can talk
//! to agentsh, take its place, or crowd it out; and `auto` does not fall
//! open once agentsh has run. Each test is an attack, run on the real
//! kernel through the shim and an SDK-style daemon (a sibling of the
//! server), as root and as an unprivileged user where it matters.

// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

use agentsh_tests::ns::Namespace;
use agentsh_tests::sandbox::{Sandbox, AGENT_DEFAULT, NOBODY, WORKSPACE};
use agentsh_tests::sdk::{self, Supervisor};
use agentsh_tests::server::{require_root, with_private_marker_dir, TestServer};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Talks to agentsh from inside a tree every way it can: the Unix API
/// socket (raw HTTP over SEQPACKET, and over a stream socket), the TCP
/// listener with a token it was handed, wrap-init on both. Prints one line
/// per attempt: `name: <outcome>`; an outcome starting with `HTTP` means
/// the server answered something.
const PROBE: &str = r#"
import os, socket, sys
sock, port, token = sys.argv[1], int(sys.argv[2]), sys.argv[3]
def http(send, name, req):
    try:
        got = send(req)
        first = got.split(b"\r\n")[0].decode(errors="replace") if got else "closed without an answer"
        print(name + ": " + first)
    except Exception as e:
        print(name + ": " + type(e).__name__ + ": " + str(e))
def unix(kind):
    def send(req):
        s = socket.socket(socket.AF_UNIX, kind)
        s.settimeout(5)
        s.connect(sock)
        s.send(req)
        return s.recv(65536)
    return send
def tcp(req):
    s = socket.create_connection(("127.0.0.1", port), 3)
    s.settimeout(5)
    s.sendall(req)
    return s.recv(65536)
def tfo(req):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.settimeout(5)
    s.sendto(req, 0x20000000, ("127.0.0.1", port))
    return s.recv(65536)
get = b"GET /api/v1/sessions HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n"
auth = ("GET /api/v1/sessions HTTP/1.1\r\nHost: a\r\nAuthorization: Bearer " + token + "\r\nConnection: close\r\n\r\n").encode()
body = b'{"agent_command":"/bin/sh","agent_args":[],"caller_uid":' + str(os.geteuid()).encode() + b'}'
wrap = b"POST /api/v1/sessions/default/wrap-init HTTP/1.1\r\nHost: a\r\nContent-Length: " + str(len(body)).encode() + b"\r\nConnection: close\r\n\r\n" + body
http(unix(socket.SOCK_SEQPACKET), "unix-read", get)
http(unix(socket.SOCK_SEQPACKET), "unix-wrap-init", wrap)
http(unix(socket.SOCK_STREAM), "unix-stream", get)
http(tcp, "tcp-read-with-token", auth)
http(tcp, "tcp-wrap-init", wrap)
http(tfo, "tcp-fast-open-with-token", auth)
"#;

fn no_route_serves_a_tree(uid: Option<u32>) {
    let mut sb = Sandbox::new(AGENT_DEFAULT, uid);
    std::fs::write(sb.host_path(&format!("{WORKSPACE}/probe.py")), PROBE).unwrap();
    let port = sb.srv.addr.rsplit(':').next().unwrap().to_string();
    let mark = sb.mark();
    // Nested, as an agent's program would be; the token is handed in: a
    // root tree might find it where a policy does not hide the state dir.
    let f = sb.sh(&format!(
        "(/usr/bin/python3 {WORKSPACE}/probe.py {} {port} {}); echo probe-rc=$?",
        sb.srv.socket.display(),
        sb.srv.token()
    ));
    assert!(f.stdout.contains("probe-rc=0"), "{f:?}");
    for name in [
        "unix-read",
        "unix-wrap-init",
        "unix-stream",
        "tcp-read-with-token",
        "tcp-wrap-init",
        "tcp-fast-open-with-token",
    ] {
        let line = f
            .stdout
            .lines()
            .find(|l| l.starts_with(&format!("{name}: ")))
            .unwrap_or_else(|| panic!("no {name} line: {f:?}"));
        assert!(
            !line.contains("HTTP/1.1 2"),
            "{name}: a tree was served: {line}\n{f:?}"
        );
    }
    // No wrap-init came from the tree.
    let inits = sb
        .events()
        .into_iter()
        .filter(|e| e["type"] == "wrap_init" && e["id"].as_u64().is_some_and(|i| i > mark))
        .count();
    assert_eq!(inits, 1, "only the SDK command's own wrap-init: {f:?}");
    // The server is fine and still supervising.
    let f = sb.sh("(su -c true root >/dev/null 2>&1); echo rc=$?");
    assert!(f.stdout.contains("rc=126"), "{f:?}");
}

#[test]
fn no_api_route_serves_a_tree_running_as_root() {
    if !require_root("no_api_route_serves_a_tree_running_as_root") {
        return;
    }
    no_route_serves_a_tree(None);
}

#[test]
fn no_api_route_serves_a_tree_running_as_a_user() {
    if !require_root("no_api_route_serves_a_tree_running_as_a_user") {
        return;
    }
    no_route_serves_a_tree(Some(NOBODY));
}

/// Holds as many API connections as it can and keeps asking for more,
/// wrap-inits and long-polls included, until killed.
const FLOOD: &str = r#"
import socket, sys, threading, time
sock = sys.argv[1]
body = b'{"agent_command":"/bin/sh","agent_args":[],"caller_uid":65534}'
wrap = b"POST /api/v1/sessions/default/wrap-init HTTP/1.1\r\nHost: a\r\nContent-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body
poll = b"GET /api/v1/sessions/default/events?wait=60 HTTP/1.1\r\nHost: a\r\n\r\n"
held = []
def hold():
    while True:
        try:
            s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
            s.connect(sock)
            held.append(s)
            if len(held) > 400:
                held.pop(0).close()
        except Exception:
            time.sleep(0.01)
def ask(req):
    while True:
        try:
            s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
            s.settimeout(70)
            s.connect(sock)
            s.send(req)
            s.recv(65536)
            s.close()
        except Exception:
            time.sleep(0.01)
# root's own door first: closed to every other user.
door = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
try:
    door.connect(sys.argv[2])
    said = "door=open"
except PermissionError:
    said = "door=EACCES"
except Exception as e:
    said = "door=" + type(e).__name__
for t in [hold] * 2 + [lambda: ask(wrap)] * 4 + [lambda: ask(poll)] * 4:
    threading.Thread(target=t, daemon=True).start()
print("flooding", said, flush=True)
# Its pulse: the test knows the flood runs again after a SIGCONT.
while True:
    print("tick", time.monotonic_ns(), flush=True)
    time.sleep(0.005)
"#;

/// CLOCK_MONOTONIC in nanoseconds (Python's `time.monotonic_ns`).
fn monotonic_ns() -> u64 {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: t is a valid timespec.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut t) };
    assert_eq!(rc, 0);
    t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64
}

/// Waits until every thread of `pid` is stopped (state `T`).
fn wait_until_stopped(pid: i32) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let states: Vec<String> = std::fs::read_dir(format!("/proc/{pid}/task"))
            .unwrap()
            .flatten()
            .filter_map(|t| std::fs::read_to_string(t.path().join("stat")).ok())
            .filter_map(|s| s.rsplit_once(") ").map(|(_, r)| r[..1].to_string()))
            .collect();
        if !states.is_empty() && states.iter().all(|s| s == "T") {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the flood did not stop: {states:?}"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Another local user (uid 1001, neither root nor the flooder) asks the
/// shared socket for `/healthz`: milliseconds from connect to answer. A
/// blocking connect, as agentsh's own clients make (a full accept queue
/// makes a non-blocking one fail with EAGAIN).
fn other_users_healthz(socket: &std::path::Path) -> f64 {
    const ASK: &str = "import socket, sys, time\n\
        t = time.perf_counter()\n\
        s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)\n\
        s.connect(sys.argv[1])\n\
        s.settimeout(30)\n\
        s.send(b'GET /healthz HTTP/1.1\\r\\nHost: a\\r\\n\\r\\n')\n\
        r = s.recv(65536)\n\
        assert r.startswith(b'HTTP/1.1 200'), r\n\
        print((time.perf_counter() - t) * 1e3)\n";
    let o = Command::new("/usr/bin/setpriv")
        .args([
            "--reuid=1001",
            "--regid=1001",
            "--clear-groups",
            "/usr/bin/python3",
            "-c",
            ASK,
        ])
        .arg(socket)
        .output()
        .expect("run python3 as uid 1001");
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "another user's /healthz: {out} {}",
        String::from_utf8_lossy(&o.stderr)
    );
    out.trim().parse().expect("milliseconds")
}

#[test]
fn a_flood_from_another_local_user_does_not_stop_supervision() {
    if !require_root("a_flood_from_another_local_user_does_not_stop_supervision") {
        return;
    }
    let srv = TestServer::start(
        "name: p\ndefault: allow\ncommand_rules:\n  - {name: no-nested-curl, commands: [curl], context: [nested], decision: deny}\n",
        "",
    );
    let ns = Namespace::new();
    ns.install_shim(true);
    ns.configure(&srv.url, "auto");
    let mut sup = Supervisor::start(&ns, false);
    let command = sdk::tensorlake("echo pid=$$; curl --version >/dev/null 2>&1; echo curl-rc=$?");
    // One run, timed: supervised (the nested curl is denied), not refused,
    // not unsupervised.
    let mut one = || -> Duration {
        let t = Instant::now();
        let f = sup.run(&command);
        let took = t.elapsed();
        assert_eq!(f.code, Some(0), "{f:?}\n{}", srv.log());
        assert!(f.stdout.contains("curl-rc=126"), "{f:?}\n{}", srv.log());
        took
    };
    // The first shell of a tree warms what the next ones find: not counted.
    let _ = one();
    let script = srv.dir.path().join("flood.py");
    std::fs::write(&script, FLOOD).unwrap();
    // Another local user, outside every tree: not the SDK, not a tree.
    let mut flood = Command::new("/usr/bin/setpriv")
        .args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "/usr/bin/python3",
        ])
        .arg(&script)
        .arg(&srv.socket)
        .arg(agentsh_proto::seqpacket::owner_socket(&srv.socket).unwrap())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start the flood");
    // Killed whatever happens (a failed assertion too, stopped or not).
    struct Reap(std::process::Child);
    impl Drop for Reap {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let mut out = std::io::BufReader::new(flood.stdout.take().unwrap());
    let flood = Reap(flood);
    let mut first = String::new();
    std::io::BufRead::read_line(&mut out, &mut first).unwrap();
    // The owner's door exists, and refuses the flooder.
    assert_eq!(first.trim(), "flooding door=EACCES");
    // Its pulse: the CLOCK_MONOTONIC of its latest tick.
    let pulse = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let beat = pulse.clone();
    std::thread::spawn(move || {
        for line in std::io::BufRead::lines(out).map_while(Result::ok) {
            if let Some(ns) = line.strip_prefix("tick ").and_then(|n| n.parse().ok()) {
                beat.store(ns, std::sync::atomic::Ordering::SeqCst);
            }
        }
    });
    // The flood is at the server's limits before the SDK's commands start.
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    while !srv.log().contains("too many") {
        assert!(
            std::time::Instant::now() < deadline,
            "the flood never reached a per-peer limit: {}",
            srv.log()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // Quiet and flooded runs in turn (the flooder stopped, then running
    // again), so a load beside the test weighs on both alike.
    let pid = flood.0.id() as i32;
    let (mut quiet, mut took) = (Vec::new(), Vec::new());
    for _ in 0..5 {
        // SAFETY: kill takes integers.
        assert_eq!(unsafe { libc::kill(pid, libc::SIGSTOP) }, 0);
        wait_until_stopped(pid);
        quiet.push(one());
        let resumed = monotonic_ns();
        // SAFETY: kill takes integers.
        assert_eq!(unsafe { libc::kill(pid, libc::SIGCONT) }, 0);
        let deadline = Instant::now() + Duration::from_secs(60);
        while pulse.load(std::sync::atomic::Ordering::SeqCst) <= resumed {
            assert!(Instant::now() < deadline, "the flood did not run again");
            std::thread::sleep(Duration::from_millis(1));
        }
        took.push(one());
    }
    // Another user than the flooder, not root: its connection waits behind
    // what the flood has queued on the shared socket, at the pace of the
    // flood's refusals, a short queue long.
    let other: Vec<f64> = (0..3).map(|_| other_users_healthz(&srv.socket)).collect();
    drop(flood);
    eprintln!("SDK commands took {quiet:?} with the flood stopped, {took:?} under it");
    eprintln!("another user's /healthz under it: {other:?} ms");
    // Served beside the flood, not behind it: root's shells come through
    // the owner's door (a queue of their own), the flood's refusals and the
    // connections it gave up on are closed at accept at a bounded pace (its
    // connects then wait in the kernel, burning nothing), its requests are
    // paced and its wrap-inits take turns. (Measured on a quiet 2-core VM:
    // 1.2-1.4x the quiet time, from 4.4-5.8x before the door and the pace,
    // about 15x before the turns; with two CPU hogs beside the test,
    // 0.9-1.2x, the runs in turn.)
    let median = |v: &mut Vec<Duration>| {
        v.sort();
        v[v.len() / 2]
    };
    let (q, f) = (median(&mut quiet), median(&mut took));
    assert!(
        f <= q * 3 && took.iter().all(|t| *t < Duration::from_secs(2)),
        "root's shells waited behind the flood: {took:?} vs {quiet:?} without it"
    );
    // The others' wait is milliseconds (measured: 16-35 ms), not seconds.
    assert!(
        other.iter().all(|ms| *ms < 500.0),
        "another user waited behind the flood: {other:?} ms"
    );
    assert!(
        srv.log().contains("too many"),
        "the flood never reached a per-peer limit: {}",
        srv.log()
    );
}

/// Runs in a tree, in the background, while the server is killed: tries to
/// take the API socket's name and the TCP port every 10 ms for `secs`,
/// printing what it managed on its stdout (`won: ...`; a file opened for
/// writing after the server died would fail: with no supervisor left, every
/// call the filter sends it fails, ENOSYS).
const IMPOSTOR: &str = r#"
import os, socket, sys, time
sock, port, secs = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
won = set()
end = time.time() + secs
held = []
while time.time() < end:
    for kind, name in [(socket.SOCK_SEQPACKET, "unix-seqpacket"), (socket.SOCK_STREAM, "unix-stream")]:
        try:
            os.unlink(sock)
            won.add("unlink")
        except Exception:
            pass
        try:
            s = socket.socket(socket.AF_UNIX, kind)
            s.bind(sock)
            s.listen(8)
            held.append(s)
            won.add(name)
        except Exception:
            pass
    try:
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.bind(("127.0.0.1", port))
        s.listen(8)
        held.append(s)
        won.add("tcp-port")
    except Exception:
        pass
    time.sleep(0.01)
print("won:", " ".join(sorted(won)), flush=True)
"#;

#[test]
fn a_tree_cannot_take_the_api_endpoint_while_the_server_restarts() {
    if !require_root("a_tree_cannot_take_the_api_endpoint_while_the_server_restarts") {
        return;
    }
    let mut sb = Sandbox::new(AGENT_DEFAULT, None);
    std::fs::write(sb.host_path(&format!("{WORKSPACE}/impostor.py")), IMPOSTOR).unwrap();
    let port = sb.srv.addr.rsplit(':').next().unwrap().to_string();
    // Started supervised; keeps running (no exec needed) after the server dies.
    let f = sb.sh(&format!(
        "(setsid /usr/bin/python3 {WORKSPACE}/impostor.py {} {port} 6 </dev/null >{WORKSPACE}/impostor.log 2>&1 &); echo started",
        sb.srv.socket.display()
    ));
    assert!(f.stdout.contains("started"), "{f:?}");
    std::thread::sleep(Duration::from_millis(500));
    sb.srv.kill();
    // While it is down and the tree tries: the next SDK command is refused,
    // never run by an impostor's wrapper.
    for _ in 0..3 {
        std::thread::sleep(Duration::from_millis(700));
        let f = sb.sh("echo ran-unsupervised");
        assert_eq!(f.code, Some(126), "{f:?}");
        assert!(!f.stdout.contains("ran-unsupervised"), "{f:?}");
    }
    let log = sb.host_path(&format!("{WORKSPACE}/impostor.log"));
    let deadline = Instant::now() + Duration::from_secs(20);
    let won = loop {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        if let Some(line) = text.lines().find_map(|l| l.strip_prefix("won:")) {
            break line.to_string();
        }
        assert!(
            Instant::now() < deadline,
            "the impostor never reported: {text:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    for what in ["unlink", "unix-seqpacket", "unix-stream"] {
        assert!(
            !won.split_whitespace().any(|w| w == what),
            "a tree managed to {what} at the API socket: {won}"
        );
    }
    // The TCP port is an operator's listener the shim never uses: a tree
    // binding it while the server is down gains nothing (documented).
    eprintln!("impostor reached: {won:?}");
    // Back: supervised again.
    let ns_cmd = |p| sb.ns.command(p);
    sb.srv.restart_with(ns_cmd);
    let f = sb.sh("(su -c true root >/dev/null 2>&1); echo rc=$?");
    assert!(f.stdout.contains("rc=126"), "{f:?}");
}

#[test]
fn the_server_ignores_stop_signals_from_a_filtered_process_and_obeys_others() {
    if !require_root("the_server_ignores_stop_signals_from_a_filtered_process_and_obeys_others") {
        return;
    }
    let mut srv = TestServer::start("name: p\ndefault: allow\n", "");
    let pid = srv.pid();
    // A sender carrying one seccomp filter more than the server (as a
    // process reparented out of a tree would), aiming at every thread.
    let tids: Vec<String> = std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    let script = format!(
        "import ctypes, os, signal\n\
         libc = ctypes.CDLL(None, use_errno=True)\n\
         libc.prctl(38, 1, 0, 0, 0)  # PR_SET_NO_NEW_PRIVS\n\
         # a filter that allows everything: RET_ALLOW\n\
         prog = (ctypes.c_uint64 * 1)(0x7fff000000000006)\n\
         class F(ctypes.Structure): _fields_ = [('len', ctypes.c_ushort), ('filt', ctypes.c_void_p)]\n\
         f = F(1, ctypes.addressof(prog))\n\
         assert libc.prctl(22, 2, ctypes.byref(f), 0, 0) == 0, ctypes.get_errno()\n\
         for t in {tids:?}:\n    \
             for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT):\n        \
                 os.kill(int(t), s)  # kill(tid) signals the whole process\n\
         print('sent')\n"
    );
    let out = Command::new("/usr/bin/python3")
        .args(["-c", &script])
        .output()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("sent"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Wait for the server to have taken them (its log says so), not for a time.
    let deadline = Instant::now() + Duration::from_secs(60);
    while !srv.log().contains("signal from a supervised tree ignored") {
        assert!(Instant::now() < deadline, "no signal taken: {}", srv.log());
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(
        srv.try_call("GET", "/healthz", None)
            .is_ok_and(|(s, _)| s == 200),
        "the server obeyed a signal from a filtered sender: {}",
        srv.log()
    );
    // The operator (no extra filter) stops it.
    // SAFETY: kill has no memory preconditions.
    assert_eq!(unsafe { libc::kill(pid as i32, libc::SIGTERM) }, 0);
    let deadline = Instant::now() + Duration::from_secs(60);
    while srv.try_call("GET", "/healthz", None).is_ok() {
        assert!(
            Instant::now() < deadline,
            "SIGTERM from the operator ignored"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(!srv.socket.exists(), "the socket is removed on a stop");
    srv.kill();
}

/// Log rotation: after `mv audit.jsonl audit.jsonl.1`, SIGHUP from the
/// operator reopens the log (it used to stop the server): later events land
/// in the new file, earlier ones stay in the renamed one, none is lost, and
/// the server runs on.
#[test]
fn sighup_reopens_the_audit_log_after_a_rotation() {
    if !require_root("sighup_reopens_the_audit_log_after_a_rotation") {
        return;
    }
    use agentsh_tests::relay::{run_wrapped, WrapOptions};
    let srv = TestServer::start("name: p\ndefault: allow\n", "");
    let log = srv.dir.path().join("audit.jsonl");
    let rotated = srv.dir.path().join("audit.jsonl.1");
    let opts = WrapOptions::default();
    let out = run_wrapped(&srv.url, "before", &["/bin/sh", "-c", "/bin/true"], &opts);
    assert!(out.status.success(), "{out:?}");
    std::fs::rename(&log, &rotated).unwrap();
    // SAFETY: kill has no memory preconditions.
    assert_eq!(unsafe { libc::kill(srv.pid() as i32, libc::SIGHUP) }, 0);
    let deadline = Instant::now() + Duration::from_secs(60);
    while !srv.log().contains("audit log reopened") {
        assert!(Instant::now() < deadline, "no reopen: {}", srv.log());
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = run_wrapped(&srv.url, "after", &["/bin/sh", "-c", "/bin/true"], &opts);
    assert!(out.status.success(), "{out:?}");
    assert!(
        srv.try_call("GET", "/healthz", None)
            .is_ok_and(|(s, _)| s == 200),
        "the server stopped on SIGHUP"
    );
    let old = std::fs::read_to_string(&rotated).unwrap();
    let new = std::fs::read_to_string(&log).unwrap();
    assert!(old.contains("\"session_id\":\"before\""), "{old}");
    assert!(!old.contains("\"session_id\":\"after\""), "{old}");
    assert!(new.contains("\"session_id\":\"after\""), "{new}");
    assert!(
        new.lines().chain(old.lines()).all(|l| l.ends_with('}')),
        "a cut line"
    );
    // The hash chain runs across the rotation (issue 45): intact, it
    // verifies; one event changed, or one removed, breaks it at the next.
    let verify = || {
        Command::new(agentsh_tests::server::bin("agentsh"))
            .args(["events", "verify", "--file"])
            .arg(&log)
            .output()
            .unwrap()
    };
    let o = verify();
    assert!(
        o.status.success() && String::from_utf8_lossy(&o.stdout).contains("the chain is intact"),
        "{o:?}"
    );
    let lines: Vec<&str> = new.lines().collect();
    // An event of "after" with one before and one after it.
    let k = (1..lines.len().saturating_sub(1))
        .find(|&i| lines[i].contains("\"session_id\":\"after\""))
        .unwrap_or_else(|| panic!("no event of after inside the new file: {new}"));
    let changed = lines[k].replacen("\"session_id\":\"after\"", "\"session_id\":\"other\"", 1);
    assert_ne!(changed, lines[k]);
    let mut edited: Vec<&str> = lines.clone();
    edited[k] = &changed;
    std::fs::write(&log, edited.join("\n") + "\n").unwrap();
    let o = verify();
    assert_eq!(o.status.code(), Some(1), "{o:?}");
    assert!(
        String::from_utf8_lossy(&o.stdout).contains(&format!("audit.jsonl:{} ", k + 2)),
        "the break is named at the line after the change: {o:?}"
    );
    let mut removed: Vec<&str> = lines.clone();
    removed.remove(k);
    std::fs::write(&log, removed.join("\n") + "\n").unwrap();
    assert_eq!(verify().status.code(), Some(1));
    std::fs::write(&log, &new).unwrap();
    assert!(verify().status.success());
}

#[test]
fn live_trees_are_counted_per_session() {
    if !require_root("live_trees_are_counted_per_session") {
        return;
    }
    use agentsh_tests::relay::{spawn_wrapped, WrapOptions};
    let srv = TestServer::start("name: p\ndefault: allow\n", "");
    let trees = |srv: &TestServer| -> Vec<(String, u64)> {
        srv.get_json("/api/v1/sessions")
            .as_array()
            .unwrap()
            .iter()
            .map(|s| {
                (
                    s["id"].as_str().unwrap().to_string(),
                    s["trees"].as_u64().unwrap(),
                )
            })
            // `default` always exists (with no tree here).
            .filter(|(id, n)| id != "default" || *n != 0)
            .collect()
    };
    let w = spawn_wrapped(
        &srv.url,
        "counted",
        &["/bin/sleep", "3"],
        &WrapOptions::default(),
    );
    let deadline = Instant::now() + Duration::from_secs(60);
    while trees(&srv) != [("counted".to_string(), 1)] {
        assert!(
            Instant::now() < deadline,
            "never counted: {:?}",
            trees(&srv)
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let (relay, _) = w.wait();
    assert!(relay.is_ok());
    let deadline = Instant::now() + Duration::from_secs(60);
    while trees(&srv) != [("counted".to_string(), 0)] {
        assert!(
            Instant::now() < deadline,
            "never forgotten: {:?}",
            trees(&srv)
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A root-only daemon that starts a program for whoever connects: the kind
/// of socket (docker, systemd, the system bus) a tree must not reach.
const EXEC_DAEMON: &str = r#"
import os, socket, subprocess, sys
path = sys.argv[1]
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.bind(path)
os.chmod(path, 0o600)
s.listen(16)
print("ready", flush=True)
while True:
    c, _ = s.accept()
    c.recv(1024)
    out = subprocess.run(["/usr/bin/grep", "Seccomp_filters", "/proc/self/status"], capture_output=True).stdout
    c.sendall(b"ran outside any tree: " + out)
    c.close()
"#;

/// From inside a tree: reach the daemon directly, through a symlink, a hard
/// link and the daemon's own /proc root. One line per attempt.
const REACH: &str = r#"
import os, socket, sys
path, pid, ws = sys.argv[1], sys.argv[2], sys.argv[3]
# Links go on the socket's own filesystem (/dev/shm), where a tree may write.
ws = "/dev/shm/reach-" + str(os.getpid())
os.mkdir(ws)
def reach(name, p):
    try:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(5)
        s.connect(p)
        s.send(b"go")
        print(name + ": " + s.recv(1024).decode(errors="replace").strip())
    except Exception as e:
        print(name + ": " + type(e).__name__ + ": " + str(e))
reach("direct", path)
try:
    os.symlink(path, ws + "/via-symlink")
except Exception as e:
    print("symlink-create: " + str(e))
reach("symlink", ws + "/via-symlink")
try:
    os.link(path, ws + "/via-hardlink")
    reach("hardlink", ws + "/via-hardlink")
except Exception as e:
    print("hardlink: " + type(e).__name__ + ": " + str(e))
reach("proc-root", "/proc/" + pid + "/root" + path)
for n in os.listdir(ws):
    os.unlink(ws + "/" + n)
os.rmdir(ws)
"#;

fn daemon_socket_scenario(uid: Option<u32>, grant: bool) -> String {
    // In /dev/shm: the tree may create files there (agent-default), so a
    // hard link to the socket on the same filesystem is a real attempt.
    daemon_socket_scenario_in("/dev/shm", uid, grant, true, None)
}

/// [`daemon_socket_scenario`] with the daemon's socket directory in `base`,
/// named in the policy's `daemon_sockets.deny` or (`listed` false) not;
/// `flood`: before the tree starts, 4,200 entries are made in its /run
/// (`Flood`), as a root tree that may write there (no Landlock, or a
/// policy granting /run) could.
fn daemon_socket_scenario_in(
    base: &str,
    uid: Option<u32>,
    grant: bool,
    listed: bool,
    flood: Option<Flood>,
) -> String {
    use agentsh_tests::server::TempDir;
    let dir = TempDir::new_in(std::path::Path::new(base), "daemon");
    std::fs::set_permissions(
        dir.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o700),
    )
    .unwrap();
    let sock = dir.path().join("ctl.sock");
    let script_dir = TempDir::new("daemon-script");
    let script = script_dir.path().join("daemon.py");
    std::fs::write(&script, EXEC_DAEMON).unwrap();
    let mut daemon = Command::new("/usr/bin/python3")
        .arg(&script)
        .arg(&sock)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut first = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(daemon.stdout.as_mut().unwrap()),
        &mut first,
    )
    .unwrap();
    assert_eq!(first.trim(), "ready");
    let deny = if listed {
        format!("  deny: [{}]\n", sock.display())
    } else {
        String::new()
    };
    let section = if grant {
        format!("daemon_sockets:\n{deny}  allow: [{}]\n", sock.display())
    } else if listed {
        format!("daemon_sockets:\n{deny}")
    } else {
        String::new()
    };
    let policy = format!("{AGENT_DEFAULT}\n{section}");
    let mut sb = Sandbox::new(&policy, uid);
    if let Some(flood) = flood {
        for i in 0..4200 {
            let p = sb.host_path(&format!("/run/flood-{i}"));
            match flood {
                Flood::Files => std::fs::write(p, "").unwrap(),
                Flood::Directories => std::fs::create_dir(p).unwrap(),
            }
        }
    }
    std::fs::write(sb.host_path(&format!("{WORKSPACE}/reach.py")), REACH).unwrap();
    let f = sb.sh(&format!(
        "(/usr/bin/python3 {WORKSPACE}/reach.py {} {} {WORKSPACE})",
        sock.display(),
        daemon.id()
    ));
    let _ = daemon.kill();
    let _ = daemon.wait();
    let ruleset = sb
        .events()
        .into_iter()
        .rev()
        .find(|e| e["type"] == "wrap_init")
        .map(|e| e["daemon_sockets"].clone())
        .unwrap_or_default();
    format!("{}\n--\n{ruleset}\n--\n{f:?}", f.stdout)
}

#[test]
fn a_root_tree_cannot_reach_a_root_only_daemon_socket_any_way_but_a_policy_grant_makes_it_reachable(
) {
    if !require_root("a_root_tree_cannot_reach_a_root_only_daemon_socket") {
        return;
    }
    let out = daemon_socket_scenario(None, false);
    for attempt in ["direct", "symlink", "hardlink", "proc-root"] {
        let line = out
            .lines()
            .find(|l| l.starts_with(&format!("{attempt}: ")))
            .unwrap_or_else(|| panic!("no {attempt} line:\n{out}"));
        assert!(
            !line.contains("ran outside"),
            "{attempt} reached the daemon:\n{out}"
        );
    }
    assert!(out.contains("mount namespace"), "{out}");
    // Granted by the policy: the tree reaches it (and the daemon's program
    // runs outside any tree: no seccomp filter).
    let out = daemon_socket_scenario(None, true);
    for attempt in ["direct", "symlink", "hardlink"] {
        let line = out
            .lines()
            .find(|l| l.starts_with(&format!("{attempt}: ")))
            .unwrap_or_default();
        assert!(line.contains("ran outside any tree"), "{attempt}:\n{out}");
    }
}

/// A root daemon nobody listed, with its socket in a directory of its own
/// under /run (the test servers' directory, which the test namespace's
/// private /run shares): hidden by default (every socket beneath /run is, but the
/// journal's and name caches'); the policy's allow makes it reachable.
#[test]
fn a_root_tree_cannot_reach_an_unlisted_root_daemons_socket_under_run() {
    if !require_root("a_root_tree_cannot_reach_an_unlisted_root_daemons_socket_under_run") {
        return;
    }
    let out = daemon_socket_scenario_in(
        agentsh_tests::sandbox::SERVER_BASE,
        None,
        false,
        false,
        None,
    );
    for attempt in ["direct", "symlink", "proc-root"] {
        let line = out
            .lines()
            .find(|l| l.starts_with(&format!("{attempt}: ")))
            .unwrap_or_else(|| panic!("no {attempt} line:\n{out}"));
        assert!(
            !line.contains("ran outside"),
            "{attempt} reached the daemon:\n{out}"
        );
    }
    let out =
        daemon_socket_scenario_in(agentsh_tests::sandbox::SERVER_BASE, None, true, false, None);
    let line = out
        .lines()
        .find(|l| l.starts_with("direct: "))
        .unwrap_or_default();
    assert!(line.contains("ran outside any tree"), "{out}");
}

/// What a flood of /run is made of.
#[derive(Clone, Copy, Debug)]
enum Flood {
    Files,
    Directories,
}

/// A /run flooded before the next shell starts (4,200 empty files; 4,200
/// directories: what a root tree that may write there could do) does not
/// make that shell's walk stop short of a root daemon's socket beneath
/// /run: files do not count against the walk's bound, and a walk cut by
/// directories hides what it did not reach whole.
#[test]
fn a_root_tree_flooding_run_does_not_unhide_a_daemon_socket() {
    if !require_root("a_root_tree_flooding_run_does_not_unhide_a_daemon_socket") {
        return;
    }
    for what in [Flood::Files, Flood::Directories] {
        let out = daemon_socket_scenario_in(
            agentsh_tests::sandbox::SERVER_BASE,
            None,
            false,
            false,
            Some(what),
        );
        for attempt in ["direct", "symlink", "proc-root"] {
            let line = out
                .lines()
                .find(|l| l.starts_with(&format!("{attempt}: ")))
                .unwrap_or_else(|| panic!("{what:?}: no {attempt} line:\n{out}"));
            assert!(
                !line.contains("ran outside"),
                "{what:?}: {attempt} reached the daemon:\n{out}"
            );
        }
    }
}

/// A root daemon nobody listed whose socket lives outside /run (as
/// `/var/lib/incus/unix.socket` does; here `/dev/shm`, where a tree may also
/// make links): found in the kernel's socket table and hidden from a root
/// tree, every way. A listener the tree itself started in an earlier
/// command (reparented since) stays reachable.
#[test]
fn a_root_tree_cannot_reach_an_unlisted_daemon_listening_outside_run() {
    if !require_root("a_root_tree_cannot_reach_an_unlisted_daemon_listening_outside_run") {
        return;
    }
    let out = daemon_socket_scenario_in("/dev/shm", None, false, false, None);
    for attempt in ["direct", "symlink", "hardlink", "proc-root"] {
        let line = out
            .lines()
            .find(|l| l.starts_with(&format!("{attempt}: ")))
            .unwrap_or_else(|| panic!("no {attempt} line:\n{out}"));
        assert!(
            !line.contains("ran outside"),
            "{attempt} reached the daemon:\n{out}"
        );
    }
    let mut sb = Sandbox::new(AGENT_DEFAULT, None);
    let started = sb.sh(&format!(
        "nohup python3 -c 'import socket, os\n\
         s = socket.socket(socket.AF_UNIX); s.bind(\"{WORKSPACE}/dev.sock\"); s.listen()\n\
         while True:\n    c, _ = s.accept()\n    try: c.sendall(b\"dev-server-answered\")\n    except OSError: pass\n    c.close()' \
         >/dev/null 2>&1 &\n\
         until python3 -c 'import socket; socket.socket(socket.AF_UNIX).connect(\"{WORKSPACE}/dev.sock\")' 2>/dev/null; do sleep 0.05; done; echo UP"
    ));
    assert!(started.stdout.contains("UP"), "{started:?}");
    let f = sb.sh(&format!(
        "python3 -c 'import socket; s = socket.socket(socket.AF_UNIX); \
         s.connect(\"{WORKSPACE}/dev.sock\"); print(s.recv(64).decode())'"
    ));
    let _ = sb.sh("pkill -f dev.sock");
    let ruleset = sb
        .events()
        .into_iter()
        .rev()
        .find(|e| e["type"] == "wrap_init")
        .map(|e| e["daemon_sockets"].clone())
        .unwrap_or_default();
    assert!(f.stdout.contains("dev-server-answered"), "{f:?} {ruleset}");
}

#[test]
fn a_user_tree_cannot_reach_a_root_only_daemon_socket() {
    if !require_root("a_user_tree_cannot_reach_a_root_only_daemon_socket") {
        return;
    }
    let out = daemon_socket_scenario(Some(NOBODY), false);
    for attempt in ["direct", "symlink", "proc-root"] {
        let line = out
            .lines()
            .find(|l| l.starts_with(&format!("{attempt}: ")))
            .unwrap_or_else(|| panic!("no {attempt} line:\n{out}"));
        assert!(
            !line.contains("ran outside"),
            "{attempt} reached the daemon:\n{out}"
        );
    }
    assert!(out.contains("the sockets' own modes"), "{out}");
}

/// A server started with a low soft file-size limit (and an unlimited hard
/// one) raises it at start: its audit is not cut off at 64 bytes (a write
/// past the soft limit fails with EFBIG, and no event would be kept).
#[test]
fn a_server_started_with_a_low_soft_file_size_limit_still_audits() {
    if !require_root("a_server_started_with_a_low_soft_file_size_limit_still_audits") {
        return;
    }
    use agentsh_tests::relay::{run_wrapped, WrapOptions};
    use agentsh_tests::server::ServerFiles;
    use std::os::unix::process::CommandExt;
    let files = ServerFiles::write(
        &agentsh_tests::server::server_base(),
        Some("name: p\ndefault: allow\n"),
        "",
    );
    let srv = TestServer::start_files(files, |program| {
        let mut c = with_private_marker_dir(program);
        // SAFETY: setrlimit is async-signal-safe; nothing is allocated.
        unsafe {
            c.pre_exec(|| {
                let lim = libc::rlimit {
                    rlim_cur: 64,
                    rlim_max: libc::RLIM_INFINITY,
                };
                if libc::setrlimit(libc::RLIMIT_FSIZE, &lim) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        c
    });
    let out = run_wrapped(
        &srv.url,
        "fsize",
        &["/bin/sh", "-c", "/bin/true; /bin/echo done"],
        &WrapOptions::default(),
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("done"));
    let execs = srv.exec_events("fsize");
    assert!(
        execs
            .iter()
            .any(|e| e["filename"] == "/bin/true" || e["filename"] == "/usr/bin/true"),
        "{execs:?}\n{}",
        srv.log()
    );
    assert!(
        !srv.log().contains("audit JSONL write failed"),
        "{}",
        srv.log()
    );
}

/// No `workspace` configured (the shipped config.yaml's `""`) is a
/// configuration, said once at start, not a warning at every shell
/// (issue 45).
#[test]
fn an_unset_workspace_is_said_once_not_warned_at_every_shell() {
    if !require_root("an_unset_workspace_is_said_once_not_warned_at_every_shell") {
        return;
    }
    use agentsh_tests::relay::{run_wrapped, WrapOptions};
    let srv = TestServer::start(AGENT_DEFAULT, "");
    for i in 0..3 {
        let out = run_wrapped(
            &srv.url,
            &format!("ws{i}"),
            &["/bin/sh", "-c", "/bin/echo done"],
            &WrapOptions::default(),
        );
        assert!(String::from_utf8_lossy(&out.stdout).contains("done"));
    }
    let log = srv.log();
    assert_eq!(log.matches("workspace is not set").count(), 1, "{log}");
    assert!(
        !log.lines()
            .any(|l| l.contains("WARN") && l.contains("WORKSPACE")),
        "{log}"
    );
}

/// A full disk under the audit log (a real, small tmpfs): no event leaves a
/// partial line, the failure is said on the server's stderr, and with
/// `audit.on_failure: refuse` nothing runs unaudited (until space is back).
#[test]
fn a_full_audit_filesystem_loses_no_line_and_refuse_mode_runs_nothing() {
    if !require_root("a_full_audit_filesystem_loses_no_line_and_refuse_mode_runs_nothing") {
        return;
    }
    use agentsh_tests::relay::{run_wrapped, WrapOptions};
    use agentsh_tests::server::ServerFiles;
    /// Unmounts what the test mounted on this machine, whatever happens.
    struct Mount(String);
    impl Drop for Mount {
        fn drop(&mut self) {
            let _ = Command::new("umount").args(["-l", &self.0]).status();
            let _ = std::fs::remove_dir(&self.0);
        }
    }
    for refuse in [false, true] {
        let base = std::path::Path::new(agentsh_tests::sandbox::SERVER_BASE);
        let fill = format!(
            "{}/auditfill-{}-{refuse}",
            base.display(),
            std::process::id()
        );
        std::fs::create_dir_all(&fill).unwrap();
        let ok = Command::new("mount")
            .args(["-t", "tmpfs", "-o", "size=256k,mode=0755", "tmpfs", &fill])
            .status()
            .unwrap();
        assert!(ok.success());
        let _mount = Mount(fill.clone());
        let files = ServerFiles::write(base, Some("name: p\ndefault: allow\n"), "");
        let jsonl = format!("{fill}/audit.jsonl");
        let config = std::fs::read_to_string(&files.config).unwrap();
        let old = format!("jsonl: {}", files.dir.path().join("audit.jsonl").display());
        assert!(config.contains(&old), "{config}");
        let on_failure = if refuse { "refuse" } else { "continue" };
        std::fs::write(
            &files.config,
            config.replace(&old, &format!("jsonl: {jsonl}\n  on_failure: {on_failure}")),
        )
        .unwrap();
        let srv = TestServer::start_files(files, with_private_marker_dir);
        let opts = WrapOptions::default();
        let run = |s: &str| run_wrapped(&srv.url, s, &["/bin/sh", "-c", "/bin/echo done"], &opts);
        // Thirty execs: more events than the log's last, partly used page
        // holds (a full tmpfs still takes writes into a page it has).
        let many = |s: &str| {
            run_wrapped(
                &srv.url,
                s,
                &[
                    "/bin/sh",
                    "-c",
                    "i=0; while [ $i -lt 30 ]; do /bin/true; i=$((i+1)); done; /bin/echo done",
                ],
                &opts,
            )
        };
        assert!(String::from_utf8_lossy(&run("room").stdout).contains("done"));
        // Fill it: not one more byte (whole pages, then what is left).
        for (bs, name) in [("4k", "pad"), ("1", "pad2")] {
            let _ = Command::new("dd")
                .args([
                    "if=/dev/zero",
                    &format!("of={fill}/{name}"),
                    &format!("bs={bs}"),
                ])
                .output()
                .unwrap();
        }
        let out = many("full");
        let said = srv.log();
        assert!(
            said.contains("audit JSONL write failed"),
            "not said: {said}"
        );
        // The operator's status says it too.
        let st = srv.get_json("/api/v1/status");
        assert_eq!(st["audit"]["writable"], false, "{st}");
        assert!(
            st["audit"]["write_failures"].as_u64().unwrap_or(0) > 0,
            "{st}"
        );
        assert_eq!(st["audit"]["on_failure"], on_failure, "{st}");
        let text = std::fs::read_to_string(&jsonl).unwrap();
        for l in text.lines() {
            assert!(
                serde_json::from_str::<serde_json::Value>(l).is_ok(),
                "a partial line: {l:?}"
            );
        }
        assert!(text.ends_with('\n'), "the file ends mid-line");
        let ran = String::from_utf8_lossy(&out.stdout).contains("done");
        assert_eq!(ran, !refuse, "refuse={refuse}: {out:?}");
        if refuse {
            assert!(said.contains("audit_unavailable"), "{said}");
            // Space is back: after the refusal that finds the log writable
            // again, commands run.
            std::fs::remove_file(format!("{fill}/pad")).unwrap();
            std::fs::remove_file(format!("{fill}/pad2")).unwrap();
            let back =
                (0..5).any(|_| String::from_utf8_lossy(&run("back").stdout).contains("done"));
            assert!(back, "never ran again: {}", srv.log());
        }
    }
}

/// A mistyped `session=` (issue 24): wrap-init for a session the server
/// does not have is refused with 404 and what to do, creates nothing, and
/// the shim refuses the shell (126) rather than start a session nobody
/// watches; once the operator creates it, the same wrap-init is served.
#[test]
fn an_unknown_session_is_refused_not_created() {
    if !require_root("an_unknown_session_is_refused_not_created") {
        return;
    }
    let srv = TestServer::start("name: p\ndefault: allow\n", "");
    let body = serde_json::json!({
        "agent_command": "/bin/sh",
        "agent_args": [],
        "caller_uid": 0
    });
    let (status, answer) = srv.call("POST", "/api/v1/sessions/defualt/wrap-init", Some(&body));
    assert_eq!(status, 404, "{answer}");
    let text = answer.to_string();
    assert!(
        text.contains("\\\"defualt\\\" does not exist") && text.contains("session=default"),
        "{text}"
    );
    let ids: Vec<String> = srv
        .get_json("/api/v1/sessions")
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["id"].as_str().unwrap_or("").to_string())
        .collect();
    assert_eq!(ids, vec!["default".to_string()], "nothing was created");
    // Through a shim with that session=: refused, the shell never runs.
    let ns = Namespace::new();
    ns.install_shim(false);
    ns.write_shim_conf(
        &format!(
            "shim_install=on\nserver={}\nsession=defualt\nwrapper={}\n",
            srv.url,
            agentsh_tests::server::bin("agentsh-unixwrap").display()
        ),
        0o644,
    );
    let out = ns.run(&["/bin/sh", "-c", "echo ran"], &[]);
    assert_eq!(out.status.code(), Some(126), "{out:?}");
    assert!(!String::from_utf8_lossy(&out.stdout).contains("ran"));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("404"),
        "{out:?}"
    );
    // Created by the operator, it is served.
    let (status, _) = srv.call(
        "POST",
        "/api/v1/sessions",
        Some(&serde_json::json!({ "id": "defualt" })),
    );
    assert_eq!(status, 201);
    let (status, answer) = srv.call("POST", "/api/v1/sessions/defualt/wrap-init", Some(&body));
    assert_eq!(status, 200, "{answer}");
}

/// A minimal OTLP/HTTP receiver: every request's first line, content type
/// and body. It answers the first request 503 (a collector not ready yet)
/// and the others 200.
struct Receiver {
    port: u16,
    got: std::sync::Arc<std::sync::Mutex<Vec<Received>>>,
}

/// A request's first line, content type and body.
type Received = (String, String, Vec<u8>);

impl Receiver {
    fn start() -> Receiver {
        use std::io::{BufRead, BufReader, Read, Write};
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        let got = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let g = got.clone();
        std::thread::spawn(move || {
            for (n, conn) in l.incoming().enumerate() {
                let Ok(mut conn) = conn else { continue };
                let mut r = BufReader::new(conn.try_clone().unwrap());
                let mut first = String::new();
                let _ = r.read_line(&mut first);
                let (mut len, mut ctype) = (0usize, String::new());
                loop {
                    let mut h = String::new();
                    if r.read_line(&mut h).unwrap_or(0) == 0 || h == "\r\n" {
                        break;
                    }
                    let (k, v) = h.split_once(':').unwrap_or((&h, ""));
                    match k.to_ascii_lowercase().as_str() {
                        "content-length" => len = v.trim().parse().unwrap_or(0),
                        "content-type" => ctype = v.trim().to_string(),
                        _ => {}
                    }
                }
                let mut body = vec![0u8; len];
                let _ = r.read_exact(&mut body);
                let status = if n == 0 {
                    "503 Service Unavailable"
                } else {
                    "200 OK"
                };
                g.lock()
                    .unwrap()
                    .push((first.trim().to_string(), ctype, body));
                let _ = conn.write_all(
                    format!(
                        "HTTP/1.1 {status}\r\nContent-Type: application/x-protobuf\r\n\
                         Content-Length: 0\r\n\r\n"
                    )
                    .as_bytes(),
                );
            }
        });
        Receiver { port, got }
    }

    /// Whether a 200-answered request's body holds `what`.
    fn received(&self, what: &str) -> bool {
        self.got
            .lock()
            .unwrap()
            .iter()
            .skip(1)
            .any(|(_, _, b)| b.windows(what.len()).any(|w| w == what.as_bytes()))
    }

    fn wait_for(&self, what: &str, srv: &TestServer) {
        let deadline = Instant::now() + Duration::from_secs(60);
        while !self.received(what) {
            assert!(
                Instant::now() < deadline,
                "{what:?} never reached the receiver; server log:\n{}",
                srv.log()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// Issue 24: with `audit.otlp.endpoint`, every audit event also reaches an
/// OTLP/HTTP receiver as a log record (protobuf on `/v1/logs`, the event's
/// JSON line as its body, the event name and session as attributes); a
/// refused request is retried, said in the log and counted in the status;
/// what is queued when the server stops is sent before it exits.
#[test]
fn audit_events_are_exported_as_otlp_logs_to_a_receiver() {
    use agentsh_tests::relay::{run_wrapped, WrapOptions};
    use agentsh_tests::server::ServerFiles;
    if !require_root("audit_events_are_exported_as_otlp_logs_to_a_receiver") {
        return;
    }
    let rx = Receiver::start();
    let base = std::path::Path::new(agentsh_tests::sandbox::SERVER_BASE);
    let files = ServerFiles::write(base, Some("name: p\ndefault: allow\n"), "");
    let config = std::fs::read_to_string(&files.config).unwrap();
    let old = format!("jsonl: {}", files.dir.path().join("audit.jsonl").display());
    assert!(config.contains(&old), "{config}");
    std::fs::write(
        &files.config,
        config.replace(
            &old,
            &format!("{old}\n  otlp:\n    endpoint: http://127.0.0.1:{}", rx.port),
        ),
    )
    .unwrap();
    let mut srv = TestServer::start_files(files, with_private_marker_dir);
    let opts = WrapOptions::default();
    let out = run_wrapped(
        &srv.url,
        "otlp",
        &["/bin/sh", "-c", "/bin/echo otlp-first-marker"],
        &opts,
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("otlp-first-marker"));
    rx.wait_for("otlp-first-marker", &srv);
    {
        let got = rx.got.lock().unwrap();
        let (line, ctype, _) = &got[1];
        assert_eq!(line, "POST /v1/logs HTTP/1.1", "{got:?}");
        assert_eq!(ctype, "application/x-protobuf");
    }
    for attr in [
        "agentsh.execve",
        "agentsh.wrap_init",
        "agentsh.session.id",
        "service.name",
    ] {
        assert!(rx.received(attr), "no {attr:?} in what was exported");
    }
    // The 503 was retried, said and counted.
    let log = srv.log();
    assert!(log.contains("audit export to OTLP failed"), "{log}");
    let st = srv.get_json("/api/v1/status");
    assert_eq!(
        st["audit"]["otlp"]["endpoint"],
        format!("http://127.0.0.1:{}/v1/logs", rx.port),
        "{st}"
    );
    assert!(
        st["audit"]["otlp"]["failed_requests"].as_u64().unwrap_or(0) >= 1,
        "{st}"
    );
    // Events still queued when the server is told to stop are sent first.
    let out = run_wrapped(
        &srv.url,
        "otlp",
        &["/bin/sh", "-c", "/bin/echo otlp-last-marker"],
        &opts,
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("otlp-last-marker"));
    let pid = srv.pid();
    // SAFETY: kill takes integers; the pid is our child's.
    unsafe { libc::kill(pid as libc::pid_t, libc::SIGTERM) };
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        let state = stat.rsplit_once(") ").map(|(_, r)| r.chars().next());
        if state == Some(Some('Z')) || stat.is_empty() {
            break;
        }
        assert!(Instant::now() < deadline, "the server did not stop");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(
        rx.received("otlp-last-marker"),
        "the event queued at stop was not sent; log:\n{}",
        srv.log()
    );
    srv.kill();
    // An endpoint the server cannot use stops it at start, saying why.
    let files = ServerFiles::write(base, Some("name: p\ndefault: allow\n"), "");
    let config = std::fs::read_to_string(&files.config).unwrap();
    std::fs::write(
        &files.config,
        config.replace(
            &format!("jsonl: {}", files.dir.path().join("audit.jsonl").display()),
            &format!(
                "jsonl: {}\n  otlp:\n    endpoint: https://collector.example:4318",
                files.dir.path().join("audit.jsonl").display()
            ),
        ),
    )
    .unwrap();
    let mut child = Command::new(agentsh_tests::server::bin("agentsh"))
        .args(["server", "--config"])
        .arg(&files.config)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // A deadline for a process that should exit at once, not a timing claim.
    let deadline = Instant::now() + Duration::from_secs(30);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("the server started on an https endpoint");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(
        err.contains("audit.otlp.endpoint") && err.contains("https is not built in"),
        "{err}"
    );
}
