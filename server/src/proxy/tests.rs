//! The proxy's refusals, each driven through the real proxy (its accept
//! loop, `serve` and `request`) on loopback, without root: a proxy started
//! with a CA in a scratch directory, a connection booked as the egress
//! family books it (from a policy's real `http:` rule), a request written
//! by hand, and a fake upstream on 127.0.0.1 that records what reaches it.
//! Each test states the answer (status, the body naming the rule), the
//! `http` event, and whether the request reached the upstream.

use super::book::Booking;
use super::run::ProxySetup;
use super::state::Proxy;
use crate::audit::AuditLog;
use crate::config::secrets::SecretSource;
use crate::policy::Policy;
use crate::vocab::Refusal;
use serde_json::Value;
use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

const SESSION: &str = "proxy-tests";
/// The thread whose connect the booking names (never looked up).
const PID: u32 = 4343;
/// How long a test waits for an answer.
const WAIT: Duration = Duration::from_secs(20);

/// A running proxy and its audit.
struct Lab {
    proxy: Arc<Proxy>,
    audit: Arc<AuditLog>,
    dir: PathBuf,
}

impl Drop for Lab {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A proxy whose CA is made in a scratch directory (and is the one root
/// upstreams are verified against, besides the system's).
fn lab(tag: &str, secrets: BTreeMap<String, SecretSource>) -> Lab {
    lab_holding(tag, secrets, Duration::from_secs(10))
}

/// As [`lab`], with requests held for an operator for at most `timeout`.
fn lab_holding(tag: &str, secrets: BTreeMap<String, SecretSource>, timeout: Duration) -> Lab {
    let dir =
        std::env::temp_dir().join(format!("agentsh-proxy-tests-{}-{tag}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("a scratch directory");
    let (ca_key, ca) = (dir.join("ca.key"), dir.join("ca.pem"));
    super::ca::Ca::load_or_make(&ca_key, &ca).expect("a CA");
    let setup = ProxySetup {
        ca_key,
        ca: ca.clone(),
        upstream_roots: vec![ca],
        secrets,
        explain: false,
    };
    let limits = crate::config::ExecveSection {
        explain: crate::config::Explain::Off,
        approval_timeout: timeout,
        ..Default::default()
    };
    let audit = Arc::new(AuditLog::in_memory(1024));
    let approvals = Arc::new(crate::approval::Approvals::new(
        &limits,
        Arc::new(crate::trees::Trees::new()),
    ));
    let proxy = Proxy::start(&setup, audit.clone(), approvals).expect("the proxy starts");
    Lab { proxy, audit, dir }
}

/// The policy's first egress rule's booking for a connect to `dest`.
fn booking(policy_yaml: &str, dest: SocketAddr, host: Option<&str>) -> Booking {
    let policy = Policy::from_yaml(policy_yaml, "proxy_tests").expect("the policy compiles");
    let rule = &policy.egress().expect("egress").rules[0];
    Booking {
        session_id: SESSION.into(),
        pid: PID,
        dest,
        host: host.map(str::to_string),
        rule: rule.name.clone(),
        hosts: rule.hosts.clone(),
        http: rule.http.clone().expect("the rule has http:"),
    }
}

/// An egress rule `api` for api.example.com with `http` as its `http:`.
fn policy(http: &str) -> String {
    format!(
        "name: proxy-tests\ndefault: allow\negress:\n  default: deny\n  rules:\n    - name: api\n      \
         hosts: [api.example.com]\n      ports: [80, 443]\n      decision: allow\n      http:\n{http}"
    )
}

/// Reads, then allows what no rule names.
const READS: &str =
    "        default: deny\n        rules:\n          - {name: reads, methods: [GET], \
                     paths: [\"/repos/**\"], decision: allow}\n          - {name: no-admin, paths: \
                     [\"/admin/**\"], decision: deny}\n";

/// An upstream on loopback that takes one connection and answers one
/// request 200; what reached it, once the proxy let go of it.
struct Upstream {
    addr: SocketAddr,
    seen: std::thread::JoinHandle<Vec<u8>>,
}

fn upstream() -> Upstream {
    upstream_answering(|_| {
        b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok".to_vec()
    })
}

/// [`upstream`], answering with the pieces `answer` makes of the request
/// it got, each written (and flushed) on its own.
fn upstream_answering(answer: fn(&str) -> Vec<u8>) -> Upstream {
    upstream_pieces(move |r| vec![answer(r)])
}

fn upstream_pieces<F>(answer: F) -> Upstream
where
    F: FnOnce(&str) -> Vec<Vec<u8>> + Send + 'static,
{
    let l = TcpListener::bind("127.0.0.1:0").expect("a loopback listener");
    let addr = l.local_addr().expect("its address");
    let seen = std::thread::spawn(move || {
        let Ok((mut s, _)) = l.accept() else {
            return Vec::new();
        };
        let _ = s.set_read_timeout(Some(WAIT));
        let mut got = Vec::new();
        let mut buf = [0u8; 4096];
        while !got.windows(4).any(|w| w == b"\r\n\r\n") {
            match s.read(&mut buf) {
                Ok(0) | Err(_) => return got,
                Ok(n) => got.extend_from_slice(&buf[..n]),
            }
        }
        for piece in answer(&String::from_utf8_lossy(&got)) {
            let _ = s.write_all(&piece);
            let _ = s.flush();
            std::thread::sleep(Duration::from_millis(20));
        }
        got
    });
    Upstream { addr, seen }
}

impl Upstream {
    /// What reached it (empty: nothing).
    fn seen(self) -> String {
        String::from_utf8_lossy(&self.seen.join().expect("the upstream thread")).into_owned()
    }
}

/// A loopback address nothing listens on.
fn nobody() -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").expect("a loopback listener");
    l.local_addr().expect("its address")
}

/// Connects to the proxy as a tree's redirected connect, books it, sends
/// `request` and reads the answer to its end: (status, body).
fn exchange(lab: &Lab, b: Booking, request: &str) -> (u16, String) {
    let mut s = TcpStream::connect(lab.proxy.v4).expect("the proxy accepts");
    s.set_read_timeout(Some(WAIT)).expect("a timeout");
    lab.proxy.book(s.local_addr().expect("a local address"), b);
    s.write_all(request.as_bytes())
        .expect("the request is sent");
    let mut got = Vec::new();
    let _ = s.read_to_end(&mut got);
    answer(&got)
}

/// The status and body of an HTTP/1.1 response.
fn answer(raw: &[u8]) -> (u16, String) {
    let text = String::from_utf8_lossy(raw);
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    (status, body.to_string())
}

fn get(path: &str, host: &str) -> String {
    format!("GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n")
}

/// The session's events, as the audit writes them.
fn events(lab: &Lab) -> Vec<Value> {
    lab.audit
        .events(SESSION, 0)
        .iter()
        .map(|e| serde_json::to_value(e).expect("an event serialises"))
        .collect()
}

/// An event's (rule, decision).
fn decided(e: &Value) -> (&str, &str) {
    (
        e["rule"].as_str().unwrap_or_default(),
        e["decision"].as_str().unwrap_or_default(),
    )
}

/// The session's one event, an `http` event of egress rule `api`.
fn only_event(lab: &Lab) -> Value {
    let mut e = events(lab);
    assert_eq!(e.len(), 1, "{e:?}");
    let e = e.remove(0);
    assert_eq!(e["type"], "http", "{e}");
    assert_eq!(e["egress_rule"], "api", "{e}");
    e
}

/// A secret `gh` in a root-only file of its own (removed by the caller).
fn secret_gh(tag: &str, value: &str) -> (PathBuf, BTreeMap<String, SecretSource>) {
    let secret = std::env::temp_dir().join(format!(
        "agentsh-proxy-tests-{}-secret-{tag}",
        std::process::id()
    ));
    {
        use std::os::unix::fs::OpenOptionsExt;
        let _ = std::fs::remove_file(&secret);
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&secret)
            .expect("the secret's file");
        f.write_all(format!("{value}\n").as_bytes())
            .expect("the secret");
    }
    let secrets = BTreeMap::from([(
        "gh".to_string(),
        SecretSource {
            file: Some(secret.clone()),
            env: None,
        },
    )]);
    (secret, secrets)
}

/// READS with the `gh` secret injected as a bearer token.
fn reads_injecting() -> String {
    format!(
        "{READS}        inject:\n          headers: {{Authorization: \"Bearer ${{secret:gh}}\"}}\n"
    )
}

/// Issue 61: an upstream that echoes the request's headers (a debug
/// endpoint, httpbin's `/headers`) in its body and in a header of its
/// own: the tree gets the answer with the credential agentsh added
/// overwritten, never the value, and the overwriting is audited.
#[test]
fn an_upstream_echoing_the_injected_credential_hands_none_of_it_back() {
    let (secret, secrets) = secret_gh("echo", "s3cret-echo/9+z");
    let lab = lab("echo", secrets);
    let up = upstream_answering(|req| {
        let auth = req
            .lines()
            .find_map(|l| {
                l.strip_prefix("authorization: ")
                    .or_else(|| l.strip_prefix("Authorization: "))
            })
            .unwrap_or("none")
            .trim()
            .to_string();
        let json = serde_json::json!({"headers": {"Authorization": auth}}).to_string();
        let body = format!(
            "{json}\nquery=?t={}\n",
            auth.replace('/', "%2F").replace('+', "%2B")
        );
        format!(
            "HTTP/1.1 200 OK\r\nX-Echo: {auth}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        )
        .into_bytes()
    });
    let b = booking(
        &policy(&reads_injecting()),
        up.addr,
        Some("api.example.com"),
    );
    let mut s = TcpStream::connect(lab.proxy.v4).expect("the proxy accepts");
    s.set_read_timeout(Some(WAIT)).expect("a timeout");
    lab.proxy.book(s.local_addr().expect("a local address"), b);
    s.write_all(
        b"GET /repos/a HTTP/1.1\r\nHost: api.example.com\r\nAccept-Encoding: gzip\r\nConnection: close\r\n\r\n",
    )
    .expect("the request is sent");
    let mut got = Vec::new();
    let _ = s.read_to_end(&mut got);
    let _ = std::fs::remove_file(&secret);
    let raw = String::from_utf8_lossy(&got).into_owned();
    assert!(raw.starts_with("HTTP/1.1 200"), "{raw}");
    assert!(!raw.contains("s3cret"), "the credential came back: {raw}");
    assert!(
        raw.contains("Bearer ***************")
            && raw.to_ascii_lowercase().contains("x-echo: bearer ***"),
        "{raw}"
    );
    let seen = up.seen().to_ascii_lowercase();
    assert!(
        seen.contains("authorization: bearer s3cret-echo/9+z"),
        "{seen}"
    );
    assert!(
        seen.contains("accept-encoding: identity") && !seen.contains("gzip"),
        "the upstream was let compress what must be scanned: {seen}"
    );
    let e = events(&lab);
    assert_eq!(e.len(), 2, "{e:?}");
    assert_eq!(decided(&e[0]), ("reads", "allow"));
    assert_eq!(decided(&e[1]), (Refusal::HttpSecret.rule(), "allow"));
    let why = e[1]["message"].as_str().unwrap_or_default();
    assert!(why.contains("3 times") && !why.contains("s3cret"), "{why}");
}

/// The echo written in pieces, the credential cut between two of them
/// (a chunked body): still overwritten.
#[test]
fn an_echo_split_between_chunks_is_overwritten_all_the_same() {
    let (secret, secrets) = secret_gh("chunks", "tok-chunked-77");
    let lab = lab("chunks", secrets);
    let up = upstream_pieces(|_| {
        let chunk = |s: &str| format!("{:x}\r\n{s}\r\n", s.len()).into_bytes();
        vec![
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n".to_vec(),
            chunk("{\"auth\": \"Bearer tok-chu"),
            chunk("nked-77\"}"),
            b"0\r\n\r\n".to_vec(),
        ]
    });
    let b = booking(
        &policy(&reads_injecting()),
        up.addr,
        Some("api.example.com"),
    );
    let (status, body) = exchange(&lab, b, &get("/repos/a", "api.example.com"));
    let _ = std::fs::remove_file(&secret);
    assert_eq!(status, 200, "{body}");
    assert!(
        !body.contains("tok-chu") && !body.contains("nked-77"),
        "{body}"
    );
    assert!(body.contains("**************"), "{body}");
}

/// A response that comes compressed although identity was asked for
/// cannot be scanned: refused (502, rule http_secret), audited.
#[test]
fn an_encoded_answer_to_a_credentialed_request_is_refused() {
    let (secret, secrets) = secret_gh("gzip", "tok-gzip-1");
    let lab = lab("gzip", secrets);
    let up = upstream_answering(|_| {
        b"HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nContent-Length: 4\r\nConnection: close\r\n\r\n\x1f\x8b\x08\x00".to_vec()
    });
    let b = booking(
        &policy(&reads_injecting()),
        up.addr,
        Some("api.example.com"),
    );
    let (status, body) = exchange(&lab, b, &get("/repos/a", "api.example.com"));
    let _ = std::fs::remove_file(&secret);
    assert_eq!(status, 502, "{body}");
    assert!(
        body.contains("rule http_secret") && body.contains("gzip"),
        "{body}"
    );
    let e = only_event(&lab);
    assert_eq!(decided(&e), (Refusal::HttpSecret.rule(), "deny"));
    assert!(e["status"].is_null(), "{e}");
}

#[test]
fn an_allowed_request_reaches_the_upstream_with_the_rules_header() {
    let secret =
        std::env::temp_dir().join(format!("agentsh-proxy-tests-{}-gh", std::process::id()));
    {
        use std::os::unix::fs::OpenOptionsExt;
        let _ = std::fs::remove_file(&secret);
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&secret)
            .expect("the secret's file");
        f.write_all(b"s3cret\n").expect("the secret");
    }
    let secrets = BTreeMap::from([(
        "gh".to_string(),
        SecretSource {
            file: Some(secret.clone()),
            env: None,
        },
    )]);
    let lab = lab("allowed", secrets);
    let up = upstream();
    let http = format!(
        "{READS}        inject:\n          headers: {{Authorization: \"Bearer ${{secret:gh}}\"}}\n"
    );
    let b = booking(&policy(&http), up.addr, Some("api.example.com"));
    let (status, body) = exchange(&lab, b, &get("/repos/a/b", "api.example.com"));
    let _ = std::fs::remove_file(&secret);
    assert_eq!((status, body.as_str()), (200, "ok"));
    let seen = up.seen().to_ascii_lowercase();
    assert!(seen.starts_with("get /repos/a/b http/1.1"), "{seen}");
    assert!(seen.contains("authorization: bearer s3cret"), "{seen}");
    let e = only_event(&lab);
    assert_eq!(decided(&e), ("reads", "allow"));
    assert_eq!(e["status"], 200);
    assert_eq!(e["injected"], serde_json::json!(["authorization"]));
}

#[test]
fn a_request_an_http_rule_denies_gets_403_naming_the_rule_and_never_reaches_the_upstream() {
    let lab = lab("rule", BTreeMap::new());
    let up = upstream();
    let b = booking(&policy(READS), up.addr, Some("api.example.com"));
    let (status, body) = exchange(&lab, b, &get("/admin/users", "api.example.com"));
    assert_eq!(status, 403, "{body}");
    assert!(
        body.contains("denied (rule no-admin, egress rule api)"),
        "{body}"
    );
    let e = only_event(&lab);
    assert_eq!(decided(&e), ("no-admin", "deny"));
    assert_eq!(e["path"], "/admin/users");
    assert!(e["status"].is_null(), "{e}");
    assert_eq!(up.seen(), "");
}

#[test]
fn a_request_no_http_rule_names_gets_the_default_deny() {
    let lab = lab("default", BTreeMap::new());
    let up = upstream();
    let b = booking(&policy(READS), up.addr, Some("api.example.com"));
    let (status, body) = exchange(&lab, b, &get("/gists", "api.example.com"));
    assert_eq!(status, 403, "{body}");
    assert!(body.contains("(rule default, egress rule api)"), "{body}");
    let e = only_event(&lab);
    assert_eq!(decided(&e), ("default", "deny"));
    assert_eq!(up.seen(), "");
}

#[test]
fn a_path_not_in_normal_form_is_refused_whatever_the_rules_say() {
    let lab = lab("path-form", BTreeMap::new());
    let rule = Refusal::HttpPathForm.rule();
    // `reads` would allow both by their text.
    for path in ["/repos/a/../../admin/x", "/repos/a%2F..%2Fadmin"] {
        let up = upstream();
        let b = booking(&policy(READS), up.addr, Some("api.example.com"));
        let (status, body) = exchange(&lab, b, &get(path, "api.example.com"));
        assert_eq!(status, 403, "{path}: {body}");
        assert!(
            body.contains(&format!("(rule {rule}, egress rule api)")),
            "{body}"
        );
        assert_eq!(up.seen(), "", "{path}");
    }
    let e = events(&lab);
    assert_eq!(e.len(), 2, "{e:?}");
    for e in &e {
        assert_eq!(decided(e), (rule, "deny"), "{e}");
        assert!(e["message"].is_string(), "{e}");
    }
}

#[test]
fn a_request_for_a_name_the_egress_rule_does_not_name_is_refused() {
    let lab = lab("host", BTreeMap::new());
    let rule = Refusal::HttpHost.rule();
    let cases = [
        (
            get("/repos/a/b", "evil.example"),
            "evil.example is not among the hosts",
        ),
        // HTTP/1.0 needs no Host: a request naming none is refused too.
        (
            "GET /repos/a/b HTTP/1.0\r\n\r\n".to_string(),
            "the request names no host",
        ),
    ];
    for (request, why) in &cases {
        let up = upstream();
        let b = booking(&policy(READS), up.addr, Some("api.example.com"));
        let (status, body) = exchange(&lab, b, request);
        assert_eq!(status, 403, "{body}");
        assert!(
            body.contains(&format!("(rule {rule}, egress rule api)")),
            "{body}"
        );
        assert!(body.contains(why), "{body}");
        assert_eq!(up.seen(), "");
    }
    let e = events(&lab);
    assert_eq!(e.len(), 2, "{e:?}");
    for e in &e {
        assert_eq!(decided(e), (rule, "deny"), "{e}");
    }
    assert_eq!(e[0]["host"], "evil.example");
}

#[test]
fn an_allowed_request_whose_secret_cannot_be_read_is_refused_without_it() {
    // No `secrets:` entry for gh: it cannot be had.
    let lab = lab("secret", BTreeMap::new());
    let up = upstream();
    let http = format!(
        "{READS}        inject:\n          headers: {{Authorization: \"Bearer ${{secret:gh}}\"}}\n"
    );
    let b = booking(&policy(&http), up.addr, Some("api.example.com"));
    let (status, body) = exchange(&lab, b, &get("/repos/a/b", "api.example.com"));
    let rule = Refusal::HttpSecret.rule();
    assert_eq!(status, 403, "{body}");
    assert!(
        body.contains(&format!("(rule {rule}, egress rule api)")),
        "{body}"
    );
    assert!(body.contains("\"gh\""), "{body}");
    let e = only_event(&lab);
    assert_eq!(decided(&e), (rule, "deny"));
    assert!(
        e["message"].as_str().is_some_and(|m| m.contains("\"gh\"")),
        "{e}"
    );
    assert_eq!(up.seen(), "");
}

#[test]
fn an_allowed_request_whose_upstream_cannot_be_reached_gets_502() {
    let lab = lab("upstream", BTreeMap::new());
    let dest = nobody();
    let b = booking(&policy(READS), dest, Some("api.example.com"));
    let (status, body) = exchange(&lab, b, &get("/repos/a/b", "api.example.com"));
    let rule = Refusal::HttpUpstream.rule();
    assert_eq!(status, 502, "{body}");
    assert!(body.contains(&format!("(rule {rule})")), "{body}");
    assert!(
        body.contains(&format!("cannot connect to {dest}")),
        "{body}"
    );
    // The event is agentsh's refusal (the http rule allowed the request),
    // with why it got no answer and no upstream status.
    let e = only_event(&lab);
    assert_eq!(decided(&e), (rule, "deny"));
    assert!(e["status"].is_null(), "{e}");
    assert!(
        e["message"]
            .as_str()
            .is_some_and(|m| m.contains("cannot connect")),
        "{e}"
    );
}

#[test]
fn an_allowed_request_the_upstream_drops_gets_502() {
    let lab = lab("upstream-drops", BTreeMap::new());
    // Takes the connection, then closes it without an answer.
    let l = TcpListener::bind("127.0.0.1:0").expect("a loopback listener");
    let dest = l.local_addr().expect("its address");
    let closer = std::thread::spawn(move || {
        if let Ok((mut s, _)) = l.accept() {
            let _ = s.set_read_timeout(Some(WAIT));
            let _ = s.read(&mut [0u8; 1024]);
        }
    });
    let b = booking(&policy(READS), dest, Some("api.example.com"));
    let (status, body) = exchange(&lab, b, &get("/repos/a/b", "api.example.com"));
    closer.join().expect("the upstream thread");
    assert_eq!(status, 502, "{body}");
    assert!(
        body.contains(&format!("(rule {})", Refusal::HttpUpstream.rule())),
        "{body}"
    );
    let e = only_event(&lab);
    assert_eq!(decided(&e), (Refusal::HttpUpstream.rule(), "deny"));
    assert!(e["status"].is_null(), "{e}");
    assert!(e["message"].is_string(), "{e}");
}

/// A TLS client of the proxy trusting the lab's CA: the answer to
/// `request` on a connection for `sni`.
fn exchange_tls(lab: &Lab, b: Booking, sni: &str, request: &str) -> (u16, String) {
    use rustls::pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    let ca = rustls::pki_types::CertificateDer::from_pem_file(lab.dir.join("ca.pem"))
        .expect("the CA's certificate");
    roots.add(ca).expect("the CA as a root");
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("TLS versions")
        .with_root_certificates(roots)
        .with_no_client_auth();
    let name = rustls::pki_types::ServerName::try_from(sni.to_string()).expect("a name");
    let conn = rustls::ClientConnection::new(Arc::new(config), name).expect("a TLS client");
    let s = TcpStream::connect(lab.proxy.v4).expect("the proxy accepts");
    s.set_read_timeout(Some(WAIT)).expect("a timeout");
    lab.proxy.book(s.local_addr().expect("a local address"), b);
    let mut tls = rustls::StreamOwned::new(conn, s);
    tls.write_all(request.as_bytes())
        .expect("the request is sent");
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    // A peer that closes without close_notify ends the read with an error.
    while let Ok(n) = tls.read(&mut buf) {
        if n == 0 {
            break;
        }
        got.extend_from_slice(&buf[..n]);
    }
    answer(&got)
}

#[test]
fn tls_for_a_name_the_egress_rule_does_not_name_is_refused_without_contacting_the_upstream() {
    let lab = lab("tls-name", BTreeMap::new());
    let up = upstream();
    let b = booking(&policy(READS), up.addr, Some("api.example.com"));
    let (status, body) = exchange_tls(&lab, b, "evil.example", &get("/repos/a/b", "evil.example"));
    let rule = Refusal::HttpHost.rule();
    assert_eq!(status, 403, "{body}");
    assert!(
        body.contains(&format!("(rule {rule}, egress rule api)")),
        "{body}"
    );
    assert!(body.contains("TLS for evil.example"), "{body}");
    let e = only_event(&lab);
    assert_eq!(decided(&e), (rule, "deny"));
    assert_eq!(e["scheme"], "https");
    // Not even connected to.
    drop(TcpStream::connect(up.addr));
    assert_eq!(up.seen(), "");
}

#[test]
fn a_request_for_another_name_than_its_tls_connection_is_refused() {
    let lab = lab("tls-host", BTreeMap::new());
    // The upstream is not reached either way (nothing listens there).
    let b = booking(&policy(READS), nobody(), Some("api.example.com"));
    let (status, body) = exchange_tls(
        &lab,
        b,
        "api.example.com",
        &get("/repos/a/b", "other.example"),
    );
    let rule = Refusal::HttpHost.rule();
    assert_eq!(status, 403, "{body}");
    assert!(
        body.contains("the request is for other.example on a connection made for api.example.com"),
        "{body}"
    );
    let e = only_event(&lab);
    assert_eq!(decided(&e), (rule, "deny"));
}

#[test]
fn a_held_request_no_operator_answers_gets_403_once_its_approval_times_out() {
    let lab = lab_holding("held", BTreeMap::new(), Duration::from_millis(300));
    let up = upstream();
    let http = "        default: deny\n        rules:\n          - {name: ask-writes, methods: \
                [POST], decision: approve}\n";
    let b = booking(&policy(http), up.addr, Some("api.example.com"));
    let request = "POST /repos/a/b/issues HTTP/1.1\r\nHost: api.example.com\r\n\
                   Content-Length: 0\r\nConnection: close\r\n\r\n";
    let (status, body) = exchange(&lab, b, request);
    assert_eq!(status, 403, "{body}");
    assert!(
        body.contains("denied (rule ask-writes, egress rule api)"),
        "{body}"
    );
    assert!(body.contains("timed out"), "{body}");
    let e = only_event(&lab);
    assert_eq!(e["rule"], "ask-writes", "{e}");
    assert_eq!(e["effective_action"], "deny", "{e}");
    assert_eq!(e["approval_outcome"], "timeout", "{e}");
    assert_eq!(up.seen(), "");
}

/// Issue 61: the paths and methods lax upstreams read as a denied one
/// (Tomcat's `..;`, matrix parameters, case-insensitive servers, NFKC,
/// method-override headers and `_method`) are refused by the rule that
/// denies what they would read as, and never reach the upstream.
#[test]
fn requests_a_lax_upstream_reads_as_denied_ones_never_reach_it() {
    let lab = lab("lax", BTreeMap::new());
    let http = "        default: allow\n        rules:\n          - {name: no-private, paths: [\"/private/**\"], decision: deny}\n          - {name: no-delete, methods: [DELETE], decision: deny}\n";
    for (request, rule) in [
        (get("/public/..;/private/x", "api.example.com"), "no-private"),
        (get("/private;x/y", "api.example.com"), "no-private"),
        (get("/private%3bx/y", "api.example.com"), "no-private"),
        (get("/PRIVATE/x", "api.example.com"), "no-private"),
        (get("/%EF%BD%90rivate/x", "api.example.com"), "no-private"),
        (get("/public/x?_method=DELETE", "api.example.com"), "no-delete"),
        (
            "POST /public/x HTTP/1.1\r\nHost: api.example.com\r\nX-HTTP-Method-Override: DELETE\r\nContent-Length: 0\r\nConnection: close\r\n\r\n".to_string(),
            "no-delete",
        ),
    ] {
        let up = upstream();
        let b = booking(&policy(http), up.addr, Some("api.example.com"));
        let (status, body) = exchange(&lab, b, &request);
        assert_eq!(status, 403, "{request}: {body}");
        assert!(
            body.contains(&format!("(rule {rule}, egress rule api)")),
            "{request}: {body}"
        );
        assert_eq!(up.seen(), "", "{request} reached the upstream");
    }
    // The same rules let an ordinary request through.
    let up = upstream();
    let b = booking(&policy(http), up.addr, Some("api.example.com"));
    let (status, _) = exchange(&lab, b, &get("/public/x", "api.example.com"));
    assert_eq!(status, 200);
}
