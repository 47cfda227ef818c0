//! Judging a call's destinations (`judge::judge_all`), branch by branch,
//! without root: real policy YAML, calls copied by hand (as `copy` leaves
//! them), on `testkit`'s bench (its audit read back from the JSONL file).
//! Each test states what the caller is answered (how many messages may go,
//! the errno) and what is audited (rule, decision).
//!
//! Judging works on the copies only: it asks the kernel and `/proc` nothing
//! (each judgement checks that the bench's host double was asked nothing
//! and the call was not answered). The one thing it could ask the kernel,
//! telling a refused caller why on its stderr (`execve.explain: stderr`),
//! goes through the call's `tell`, which these tests record.

use super::call::{Call, EgressTree};
use super::copy::Copied;
use super::judge::{judge_all, Judged};
use super::sockaddr::sockaddr_of;
use super::state::{DestKey, EgressState};
use crate::policy::egress::Protocol;
use crate::supervisor::seam::Caught;
use crate::supervisor::testkit::{Bench, RecordingStop, SESSION};
use crate::vocab::{Passage, Refusal};
use agentsh_proto::netabi::{NetCall, Width};
use serde_json::Value;
use std::cell::RefCell;
use std::net::SocketAddr;

/// The calling thread the events name (never looked up: judging reads no
/// `/proc`).
const TID: u32 = 4242;

thread_local! {
    /// The lines this test's thread told callers: (tid, line).
    static TOLD: RefCell<Vec<(u32, String)>> = const { RefCell::new(Vec::new()) };
}

/// The call's `tell`: records the line (judging runs on the test's
/// thread).
fn tell(tid: u32, line: &str) -> bool {
    TOLD.with(|t| t.borrow_mut().push((tid, line.to_string())));
    true
}

/// What callers were told so far on this thread.
fn told() -> Vec<(u32, String)> {
    TOLD.with(|t| t.borrow().clone())
}

/// One tree under a policy, on the bench, with its egress state.
struct Fixture {
    bench: Bench,
    state: EgressState,
    /// The thread whose calls are judged next.
    tid: u32,
}

/// A proxy setup whose CA key cannot be read or made (its directory is
/// under a file): the proxy never starts, without root or network.
fn proxy_that_cannot_start() -> crate::proxy::ProxySetup {
    crate::proxy::ProxySetup {
        ca_key: "/dev/null/agentsh-tests/ca.key".into(),
        ca: "/dev/null/agentsh-tests/ca.pem".into(),
        upstream_roots: Vec::new(),
        secrets: Default::default(),
        explain: false,
    }
}

impl Fixture {
    /// A DNS stub started on `at` (a free port of it) as the context's;
    /// where it listens.
    fn stub_on(&mut self, at: &str) -> std::net::SocketAddr {
        let stub =
            crate::dns::Stub::start(addr(at), Vec::new(), self.bench.ctx.audit.clone(), false)
                .unwrap_or_else(|e| panic!("a stub on {at}: {e}"));
        let listening = stub.addr;
        assert!(self.bench.ctx.dns.set(stub).is_ok());
        listening
    }

    fn new(yaml: &str) -> Fixture {
        let mut bench = Bench::new(yaml, |_| {});
        // Never the server's own CA (a test run as root would make one).
        bench.ctx.proxy = Box::new(crate::proxy::ProxyCell::new(proxy_that_cannot_start()));
        Fixture {
            bench,
            state: EgressState::default(),
            tid: TID,
        }
    }

    /// Judges one call of `call` naming `dests` (one message each, as a
    /// `sendmmsg` names several) on an inet socket of `protocol`; the
    /// answer and the messages as judging left them.
    fn judge(
        &mut self,
        call: NetCall,
        protocol: Protocol,
        dests: &[&str],
    ) -> (Judged, Vec<Copied>) {
        let b = &mut self.bench;
        let rules = b.tree.rules();
        let egress = rules.policy.egress().expect("the policy has egress");
        let caught = Caught {
            tid: self.tid,
            tgid: Some(self.tid),
            arch: 0,
            nr: 0,
            args: [0; 6],
        };
        let stop = RecordingStop::new(false);
        let k = Call {
            ctx: &b.ctx,
            tree: &b.tree,
            c: &caught,
            call,
            width: Width::W64,
            stop: &stop,
            tell,
        };
        let mut st = EgressTree {
            tasks: &mut b.tasks,
            egress: &mut self.state,
        };
        st.egress.judged_by(&rules.policy);
        let mut messages: Vec<Copied> = dests.iter().map(|d| copied(addr(d))).collect();
        let j = judge_all(&k, &mut st, egress, protocol, libc::AF_INET, &mut messages);
        // The caller (`handle`) answers from what judging returns.
        let (answers, asked) = (stop.answers(), b.host.calls());
        assert!(answers.is_empty(), "judging answered the call: {answers:?}");
        assert!(
            asked.is_empty(),
            "judging asked the kernel or /proc: {asked:?}"
        );
        (j, messages)
    }

    /// A connect on a TCP socket to `dest`.
    fn connect(&mut self, dest: &str) -> Judged {
        self.judge(NetCall::Connect, Protocol::Tcp, &[dest]).0
    }

    /// Every event written, in order.
    fn events(&self) -> Vec<Value> {
        self.bench.events()
    }
}

fn addr(s: &str) -> SocketAddr {
    s.parse().expect("an address")
}

/// A message naming `dest`, as `copy` leaves it.
fn copied(dest: SocketAddr) -> Copied {
    Copied {
        addr: sockaddr_of(dest, libc::AF_INET).expect("an IPv4 sockaddr"),
        data: b"payload".to_vec(),
        control: Vec::new(),
        flags: 0,
        clipped: false,
        len_at: None,
        addr_at: 0,
        places: Vec::new(),
    }
}

/// The one event's (type, rule, decision).
fn what(e: &Value) -> (&str, &str, &str) {
    (
        e["type"].as_str().unwrap_or_default(),
        e["rule"].as_str().unwrap_or_default(),
        e["decision"].as_str().unwrap_or_default(),
    )
}

fn refused(j: &Judged) -> bool {
    j.allowed == 0 && j.refusal == Some(libc::EACCES)
}

fn passed(j: &Judged, n: usize) -> bool {
    j.allowed == n && j.refusal.is_none() && j.approve.is_none() && j.to_proxy.is_none()
}

const BASE: &str = "name: judge-tests\ndefault: allow\n";

/// A UDP query to a resolver, refused (not sent to the stub) with one
/// `connect` event of rule `why`: the events.
fn dns_query_refused(f: &mut Fixture, why: Refusal) -> Vec<serde_json::Value> {
    let (j, _) = f.judge(NetCall::Sendto, Protocol::Udp, &["10.0.0.2:53"]);
    assert!(refused(&j), "allowed {} refusal {:?}", j.allowed, j.refusal);
    assert!(!j.to_stub);
    let events = f.events();
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(what(&events[0]), ("connect", why.rule(), "deny"));
    events
}

#[test]
fn dns_under_dns_stub_is_refused_while_the_stub_is_not_running() {
    let mut f = Fixture::new(&format!("{BASE}egress:\n  default: allow\n  dns: stub\n"));
    let events = dns_query_refused(&mut f, Refusal::DnsStubDown);
    assert_eq!(events[0]["port"], 53);
    assert_eq!(events[0]["protocol"], "udp");
    assert!(events[0]["message"]
        .as_str()
        .is_some_and(|m| m.contains("not running")));
    // Asked again: refused again, audited once.
    let (j, _) = f.judge(NetCall::Sendto, Protocol::Udp, &["10.0.0.2:53"]);
    assert!(refused(&j));
    assert_eq!(f.events().len(), 1);
}

#[test]
fn dns_under_dns_stub_is_sent_to_the_stub_whatever_resolver_it_names() {
    let mut f = Fixture::new(&format!("{BASE}egress:\n  default: deny\n  dns: stub\n"));
    let at = f.stub_on("127.0.0.1:0");
    let (j, messages) = f.judge(NetCall::Sendto, Protocol::Udp, &["10.0.0.2:53"]);
    assert!(j.to_stub);
    assert_eq!((j.allowed, j.refusal), (1, None));
    // The message now goes to the stub, not where the tree sent it.
    assert_eq!(messages[0].addr, sockaddr_of(at, libc::AF_INET).unwrap());
    let events = f.events();
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(
        what(&events[0]),
        ("connect", Passage::DnsStub.rule(), "allow")
    );
    assert_eq!(events[0]["ip"], "10.0.0.2");
    assert!(events[0]["message"]
        .as_str()
        .is_some_and(|m| m.contains(&at.to_string())));
}

#[test]
fn a_tcp_port_network_rules_close_is_refused_though_egress_allows_it() {
    let mut f = Fixture::new(&format!(
        "{BASE}network_rules:\n  - name: web-only\n    ports: [443]\n    direction: connect\n    \
         decision: allow\negress:\n  default: allow\n"
    ));
    let j = f.connect("93.184.216.34:80");
    assert!(refused(&j), "allowed {} refusal {:?}", j.allowed, j.refusal);
    // The open port, the same address: allowed by egress's default.
    let j = f.connect("93.184.216.34:443");
    assert!(passed(&j, 1));
    let events = f.events();
    assert_eq!(events.len(), 2, "{events:?}");
    assert_eq!(
        what(&events[0]),
        ("connect", Refusal::NetworkRules.rule(), "deny")
    );
    assert_eq!(events[0]["port"], 80);
    assert_eq!(what(&events[1]), ("connect", "default", "allow"));
    // UDP is not under the TCP floor.
    let (j, _) = f.judge(NetCall::Sendto, Protocol::Udp, &["93.184.216.34:80"]);
    assert!(passed(&j, 1));
}

#[test]
fn a_destination_a_rule_denies_is_refused_and_audited_with_the_rules_name() {
    let mut f = Fixture::new(&format!(
        "{BASE}egress:\n  default: allow\n  rules:\n    - name: no-metadata\n      cidrs: \
         [169.254.169.254/32]\n      protocol: any\n      decision: deny\n"
    ));
    let j = f.connect("169.254.169.254:80");
    assert!(refused(&j), "allowed {} refusal {:?}", j.allowed, j.refusal);
    let events = f.events();
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(what(&events[0]), ("connect", "no-metadata", "deny"));
    assert_eq!(events[0]["ip"], "169.254.169.254");
    assert_eq!(events[0]["pid"], TID);
    assert_eq!(events[0]["syscall"], "connect");
}

#[test]
fn a_destination_no_rule_names_gets_the_default_deny() {
    let mut f = Fixture::new(&format!("{BASE}egress:\n  default: deny\n"));
    let j = f.connect("203.0.113.7:443");
    assert!(refused(&j));
    let events = f.events();
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(
        what(&events[0]),
        ("connect", crate::policy::RULE_DEFAULT, "deny")
    );
}

#[test]
fn a_sendmmsg_batch_stops_at_its_first_refused_destination() {
    let mut f = Fixture::new(&format!(
        "{BASE}egress:\n  default: deny\n  rules:\n    - name: resolver\n      cidrs: \
         [10.0.0.2]\n      protocol: udp\n      decision: allow\n"
    ));
    let (j, _) = f.judge(
        NetCall::Sendmmsg,
        Protocol::Udp,
        &["10.0.0.2:5353", "198.51.100.1:5353", "10.0.0.2:5353"],
    );
    // The first may go; the batch ends at the second.
    assert_eq!((j.allowed, j.refusal), (1, Some(libc::EACCES)));
    let events = f.events();
    let rules: Vec<_> = events.iter().map(what).collect();
    assert_eq!(
        rules,
        [
            ("connect", "resolver", "allow"),
            ("connect", "default", "deny")
        ]
    );
}

const APPROVE: &str = "egress:\n  default: deny\n  rules:\n    - name: ask-first\n      cidrs: \
                       [192.0.2.10]\n      ports: [443]\n      decision: approve\n";

#[test]
fn a_destination_a_rule_holds_is_handed_to_the_operator_unaudited() {
    let mut f = Fixture::new(&format!("{BASE}{APPROVE}"));
    let j = f.connect("192.0.2.10:443");
    // The call may go once approved: the caller holds it.
    assert_eq!((j.allowed, j.refusal), (1, None));
    let (key, rule, host) = j.approve.expect("held for an operator");
    assert_eq!(
        key,
        DestKey {
            ip: "192.0.2.10".parse().unwrap(),
            port: 443,
            protocol: Protocol::Tcp,
        }
    );
    assert_eq!((rule.as_str(), host), ("ask-first", None));
    // Audited when the approval ends, not here.
    assert!(f.events().is_empty(), "{:?}", f.events());
}

#[test]
fn a_destination_approved_for_the_tree_is_allowed_without_asking_again() {
    let mut f = Fixture::new(&format!("{BASE}{APPROVE}"));
    let key = DestKey {
        ip: "192.0.2.10".parse().unwrap(),
        port: 443,
        protocol: Protocol::Tcp,
    };
    f.state.approved.lock().unwrap().insert(key);
    let j = f.connect("192.0.2.10:443");
    assert!(passed(&j, 1));
    assert!(f.events().is_empty(), "{:?}", f.events());
}

#[test]
fn a_destination_to_approve_in_a_sendmmsg_batch_is_refused_and_audited() {
    let mut f = Fixture::new(&format!(
        "{BASE}egress:\n  default: allow\n  rules:\n    - name: ask-first\n      cidrs: \
         [192.0.2.10]\n      protocol: udp\n      decision: approve\n"
    ));
    let (j, _) = f.judge(
        NetCall::Sendmmsg,
        Protocol::Udp,
        &["198.51.100.1:9", "192.0.2.10:9"],
    );
    assert_eq!((j.allowed, j.refusal), (1, Some(libc::EACCES)));
    assert!(j.approve.is_none());
    let events = f.events();
    let rules: Vec<_> = events.iter().map(what).collect();
    assert_eq!(
        rules,
        [
            ("connect", "default", "allow"),
            ("connect", "ask-first", "deny")
        ]
    );
    assert!(events[1]["message"]
        .as_str()
        .is_some_and(|m| m.contains("sendmmsg")));
}

const HTTP_RULE: &str = "egress:\n  default: deny\n  rules:\n    - name: api\n      cidrs: \
                         [192.0.2.20]\n      ports: [443]\n      decision: allow\n      http:\n        \
                         default: allow\n";

#[test]
fn a_send_naming_a_destination_whose_rule_has_http_is_unenforceable() {
    let mut f = Fixture::new(&format!("{BASE}{HTTP_RULE}"));
    // TCP fast open: only a connect can be sent to the proxy.
    let (j, _) = f.judge(NetCall::Sendto, Protocol::Tcp, &["192.0.2.20:443"]);
    assert!(refused(&j), "allowed {} refusal {:?}", j.allowed, j.refusal);
    let events = f.events();
    let last = events.last().expect("an event");
    assert_eq!(
        what(last),
        ("connect", Refusal::EgressUnenforceable.rule(), "deny")
    );
    assert_eq!(last["ip"], "192.0.2.20");
    assert!(last["message"]
        .as_str()
        .is_some_and(|m| m.contains("fast open")));
}

#[test]
fn a_connect_whose_rule_has_http_is_unenforceable_while_the_proxy_cannot_start() {
    let mut f = Fixture::new(&format!("{BASE}{HTTP_RULE}"));
    let j = f.connect("192.0.2.20:443");
    assert!(refused(&j), "allowed {} refusal {:?}", j.allowed, j.refusal);
    assert!(j.to_proxy.is_none());
    let events = f.events();
    let last = events.last().expect("an event");
    assert_eq!(
        what(last),
        ("connect", Refusal::EgressUnenforceable.rule(), "deny")
    );
    assert!(last["message"]
        .as_str()
        .is_some_and(|m| m.contains("proxy is not running")));
    // The same destination without http: on UDP is judged as any other.
    let (j, _) = f.judge(NetCall::Sendto, Protocol::Udp, &["192.0.2.20:443"]);
    assert!(refused(&j));
}

#[test]
fn each_destination_is_judged_and_audited_once_per_tree() {
    let mut f = Fixture::new(&format!(
        "{BASE}egress:\n  default: deny\n  rules:\n    - name: one\n      cidrs: \
         [192.0.2.30]\n      ports: [443]\n      decision: allow\n"
    ));
    for _ in 0..3 {
        assert!(passed(&f.connect("192.0.2.30:443"), 1));
        assert!(refused(&f.connect("192.0.2.31:443")));
    }
    let events = f.events();
    let rules: Vec<_> = events.iter().map(what).collect();
    assert_eq!(
        rules,
        [("connect", "one", "allow"), ("connect", "default", "deny")]
    );
    // Another port is another destination.
    assert!(refused(&f.connect("192.0.2.30:80")));
    assert_eq!(f.events().len(), 3);
}

#[test]
fn a_destination_is_judged_again_once_the_tree_resolved_a_name_to_it() {
    let mut f = Fixture::new(&format!(
        "{BASE}egress:\n  default: deny\n  dns: stub\n  rules:\n    - name: api\n      \
         hosts: [api.example.com]\n      ports: [443]\n      decision: allow\n"
    ));
    let ip = "192.0.2.40".parse().unwrap();
    assert!(refused(&f.connect("192.0.2.40:443")));
    // The tree resolves api.example.com to it through the stub.
    f.state.names(&f.bench.tree).bind(ip, "api.example.com", 60);
    let j = f.connect("192.0.2.40:443");
    assert!(passed(&j, 1));
    let events = f.events();
    let rules: Vec<_> = events.iter().map(what).collect();
    assert_eq!(
        rules,
        [("connect", "default", "deny"), ("connect", "api", "allow")]
    );
    assert_eq!(events[1]["host"], "api.example.com");
    // The names unchanged: the decision is reused.
    assert!(passed(&f.connect("192.0.2.40:443"), 1));
    assert_eq!(f.events().len(), 2);
}

#[test]
fn a_refused_caller_is_told_why_once_per_thread_and_destination() {
    let mut f = Fixture::new(&format!(
        "{BASE}egress:\n  default: allow\n  rules:\n    - name: no-metadata\n      cidrs: \
         [169.254.169.254/32]\n      protocol: any\n      decision: deny\n"
    ));
    f.bench.ctx.limits.explain = crate::config::Explain::Stderr;
    for _ in 0..2 {
        assert!(refused(&f.connect("169.254.169.254:80")));
    }
    // Allowed: nothing to tell.
    assert!(passed(&f.connect("198.51.100.1:80"), 1));
    f.tid = TID + 1;
    assert!(refused(&f.connect("169.254.169.254:80")));
    let told = told();
    let tids: Vec<u32> = told.iter().map(|(t, _)| *t).collect();
    assert_eq!(tids, [TID, TID + 1], "{told:?}");
    for (_, line) in &told {
        assert!(line.contains("169.254.169.254"), "{line}");
        assert!(line.contains("(rule no-metadata)"), "{line}");
    }
}

#[test]
fn nothing_is_told_under_explain_off() {
    let mut f = Fixture::new(&format!("{BASE}egress:\n  default: deny\n  dns: stub\n"));
    assert!(refused(&f.connect("203.0.113.7:443")));
    let (j, _) = f.judge(NetCall::Sendto, Protocol::Udp, &["10.0.0.2:53"]);
    assert!(refused(&j));
    assert!(told().is_empty(), "{:?}", told());
    // The same refusals under explain: stderr are told.
    f.bench.ctx.limits.explain = crate::config::Explain::Stderr;
    f.tid = TID + 1;
    assert!(refused(&f.connect("203.0.113.7:443")));
    let (j, _) = f.judge(NetCall::Sendto, Protocol::Udp, &["10.0.0.2:53"]);
    assert!(refused(&j));
    let told = told();
    assert_eq!(told.len(), 2, "{told:?}");
    assert!(told[0].1.contains("(rule default)"), "{told:?}");
    assert!(
        told[1]
            .1
            .contains(&format!("(rule {})", Refusal::DnsStubDown.rule())),
        "{told:?}"
    );
}

/// A proxy setup with its CA in a scratch directory (made at its start).
fn proxy_in(dir: &std::path::Path) -> crate::proxy::ProxySetup {
    crate::proxy::ProxySetup {
        ca_key: dir.join("ca.key"),
        ca: dir.join("ca.pem"),
        upstream_roots: vec![dir.join("ca.pem")],
        secrets: Default::default(),
        explain: false,
    }
}

#[test]
fn a_connect_whose_rule_has_http_is_made_to_the_proxy_and_booked_with_what_was_judged() {
    let dir =
        std::env::temp_dir().join(format!("agentsh-judge-tests-{}-proxy", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let mut f = Fixture::new(&format!("{BASE}{HTTP_RULE}"));
    f.bench.ctx.proxy = Box::new(crate::proxy::ProxyCell::new(proxy_in(&dir)));
    let (j, messages) = f.judge(NetCall::Connect, Protocol::Tcp, &["192.0.2.20:443"]);
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!((j.allowed, j.refusal), (1, None));
    assert!(j.approve.is_none());
    let to = j.to_proxy.expect("made to the proxy");
    // The tree's connect goes to the proxy, never to the destination.
    assert_eq!(
        messages[0].addr,
        sockaddr_of(to.proxy.addr_for(libc::AF_INET), libc::AF_INET).unwrap()
    );
    assert_ne!(
        messages[0].addr,
        sockaddr_of(addr("192.0.2.20:443"), libc::AF_INET).unwrap()
    );
    assert_eq!(to.booking.dest, addr("192.0.2.20:443"));
    assert_eq!((to.booking.rule.as_str(), to.booking.pid), ("api", TID));
    assert_eq!(to.booking.session_id, SESSION);
    let events = f.events();
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(what(&events[0]), ("connect", "api", "allow"));
}

#[test]
fn a_connect_held_for_an_operator_whose_rule_has_http_goes_to_the_proxy_once_approved() {
    let dir = std::env::temp_dir().join(format!("agentsh-judge-tests-{}-held", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let mut f = Fixture::new(&format!(
        "{BASE}egress:\n  default: deny\n  rules:\n    - name: ask-api\n      cidrs: \
         [192.0.2.21]\n      ports: [443]\n      decision: approve\n      http:\n        \
         default: allow\n"
    ));
    f.bench.ctx.proxy = Box::new(crate::proxy::ProxyCell::new(proxy_in(&dir)));
    let (j, messages) = f.judge(NetCall::Connect, Protocol::Tcp, &["192.0.2.21:443"]);
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!((j.allowed, j.refusal), (1, None));
    let (_, rule, _) = j.approve.expect("held for an operator");
    assert_eq!(rule, "ask-api");
    let to = j.to_proxy.expect("then made to the proxy");
    assert_eq!(
        messages[0].addr,
        sockaddr_of(to.proxy.addr_for(libc::AF_INET), libc::AF_INET).unwrap()
    );
    assert_eq!(to.booking.rule, "ask-api");
    assert!(f.events().is_empty(), "{:?}", f.events());
}

#[test]
fn dns_to_a_stub_of_another_address_family_is_refused_and_audited() {
    let mut f = Fixture::new(&format!("{BASE}egress:\n  default: allow\n  dns: stub\n"));
    // A stub on IPv6 loopback; the tree's socket is AF_INET: the query
    // cannot be sent to it, and must not go around it.
    f.stub_on("[::1]:0");
    let events = dns_query_refused(&mut f, Refusal::EgressUnenforceable);
    assert!(events[0]["message"]
        .as_str()
        .is_some_and(|m| m.contains("address family")));
}
