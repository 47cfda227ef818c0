//! Egress at layer 7 (issue 42): an egress rule with `http:` has every
//! request to its destinations judged by method and path by agentsh's own
//! proxy, which the tree's connect reaches without its cooperation (the
//! supervisor makes the connect there), over TLS terminated with agentsh's
//! CA; allowed requests get the rule's headers (a credential the tree never
//! holds), refused ones a 403 that says why and never reach the upstream,
//! held ones wait for `agentsh approvals approve`.
//!
//! The upstream is real (Python's `http.server` over TLS with a CA of the
//! test's own, and `git http-backend` for Git's smart HTTP), its name
//! resolved through agentsh's DNS stub from the test's resolver; the
//! clients are curl, python (urllib and requests), node's fetch and git,
//! as root and as nobody. What reached the upstream is read from its own
//! log after a last allowed request, never from a wait.

// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

use agentsh_tests::dns::Upstream;
use agentsh_tests::http_upstream::{HttpUpstream, Kind};
use agentsh_tests::sandbox::{agent_default_without_egress, Sandbox, NOBODY};
use agentsh_tests::sdk::Spawn;
use agentsh_tests::server::{bin, require_root, unique_loopback};
use serde_json::Value;
use std::net::Ipv4Addr;
use std::os::unix::fs::PermissionsExt;
use std::time::{Duration, Instant};

const NAME: &str = "api.allowed.test";
/// The HTTP/2 upstream's name.
const H2_NAME: &str = "h2.allowed.test";
/// What the test's resolver answers for `*.allowed.test`.
const BOUND: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 3);
/// The secret the server holds.
const TOKEN: &str = "tok-4f1c2b9e-never-in-the-tree";

fn policy(port: u16, h2_port: u16) -> String {
    let base = agent_default_without_egress();
    let floor = "      - 8080\n";
    assert!(base.contains(floor), "agent-default's port list changed");
    let base = base.replacen(
        floor,
        &format!("{floor}      - {port}\n      - {h2_port}\n"),
        1,
    );
    format!(
        "{base}egress:\n  default: deny\n  dns: stub\n  rules:\n    - name: api\n      hosts: [\"{NAME}\"]\n      ports: [{port}]\n      decision: allow\n      http:\n        default: deny\n        rules:\n          - {{name: read, methods: [GET, HEAD], paths: [\"/repos/**\", \"/git/**\"], decision: allow}}\n          - {{name: fetch, methods: [POST], paths: [\"/git/*/git-upload-pack\"], decision: allow}}\n          - {{name: issues, methods: [POST], paths: [\"/repos/*/*/issues\"], decision: approve}}\n        inject:\n          headers: {{Authorization: \"Bearer ${{secret:gh}}\"}}\n    - name: h2api\n      hosts: [\"{H2_NAME}\"]\n      ports: [{h2_port}]\n      decision: allow\n      http:\n        default: deny\n        rules:\n          - {{name: read, methods: [GET], decision: allow}}\n        inject:\n          headers: {{Authorization: \"Bearer ${{secret:gh}}\"}}\n"
    )
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

fn http_events(s: &Sandbox) -> Vec<Value> {
    s.events()
        .into_iter()
        .filter(|e| e["type"] == "http")
        .collect()
}

fn scenario(uid: Option<u32>, extra: &str) {
    if !require_root("egress_http") {
        return;
    }
    let dns = Upstream::start(".allowed.test", BOUND);
    let stub = unique_loopback();
    // One per scenario: this file's tests run side by side in one process.
    static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    let work = std::env::temp_dir().join(format!(
        "agentsh-egress-http-{}-{}-{n}",
        std::process::id(),
        uid.unwrap_or(0)
    ));
    let _ = std::fs::remove_dir_all(&work);
    let up = HttpUpstream::start(&work, BOUND, NAME, true);
    let h2 = HttpUpstream::start_kind(&work.join("h2"), BOUND, H2_NAME, Kind::H2);
    // A bare repository to clone (and to try to push to).
    let seed = work.join("seed");
    let git = |dir: &std::path::Path, args: &[&str]| {
        let o = std::process::Command::new("git")
            .args(args)
            .current_dir(dir)
            .env("GIT_AUTHOR_NAME", "t")
            .env("GIT_AUTHOR_EMAIL", "t@t")
            .env("GIT_COMMITTER_NAME", "t")
            .env("GIT_COMMITTER_EMAIL", "t@t")
            .output()
            .unwrap();
        assert!(
            o.status.success(),
            "git {args:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
    };
    std::fs::create_dir_all(&seed).unwrap();
    git(&seed, &["init", "-q", "-b", "main"]);
    std::fs::write(seed.join("README"), "hello\n").unwrap();
    git(&seed, &["add", "README"]);
    git(&seed, &["commit", "-qm", "first"]);
    git(
        &up.repos,
        &["clone", "-q", "--bare", seed.to_str().unwrap(), "r.git"],
    );
    git(
        &up.repos.join("r.git"),
        &["config", "http.receivepack", "true"],
    );

    let config = format!(
        "egress:\n  stub: \"{stub}:53\"\n  resolvers: [\"127.0.0.1:{}\"]\n  ca: /etc/agentsh/ca.pem\n  upstream_roots: [\"{}\", \"{}\"]\nsecrets:\n  gh: {{file: /srv/secret-gh}}\n{extra}",
        dns.port,
        up.ca.display(),
        h2.ca.display()
    );
    let mut s = Sandbox::with_setup(&policy(up.port, h2.port), uid, &config, |ns| {
        let p = ns.path("/srv/secret-gh");
        std::fs::write(&p, format!("{TOKEN}\n")).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).unwrap();
    });
    std::fs::write(
        s.host_path("/etc/resolv.conf"),
        format!("nameserver {stub}\noptions timeout:5 attempts:1\n"),
    )
    .unwrap();
    let port = up.port;
    let url = format!("https://{NAME}:{port}");
    let ca = "/etc/agentsh/ca.pem";
    let bundle = "/etc/agentsh/ca-bundle.pem";
    assert!(s.host_path(ca).exists(), "the CA is published at start");

    // curl: an allowed GET reaches the upstream with the token; the tree's
    // proxy variables play no part (set to nowhere, then unset).
    let out = ok(
        &mut s,
        &format!("HTTPS_PROXY=http://127.0.0.9:1 https_proxy=http://127.0.0.9:1 NO_PROXY= curl -sS --noproxy '*' --cacert {ca} {url}/repos/a/b"),
    );
    let v: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
    assert_eq!(v["saw_authorization"], true, "{v}");
    assert_eq!(v["path"], "/repos/a/b");
    // Refused: another method, an unlisted path, a path not in normal form.
    for (args, path, rule) in [
        ("-X DELETE", "/repos/a/b", "default"),
        ("", "/user", "default"),
        ("--path-as-is", "/repos/../user", "http_path_form"),
    ] {
        let out = ok(
            &mut s,
            &format!("curl -sS {args} --cacert {ca} -w '\\n%{{http_code}}' {url}{path}"),
        );
        assert!(out.ends_with("\n403"), "{args} {path}: {out}");
        assert!(
            out.contains(&format!("denied (rule {rule}, egress rule api)")),
            "{args} {path}: {out}"
        );
    }
    // A chunked request body of 100 KiB reaches the upstream whole (the
    // connection kept alive for a second request).
    let out = ok(
        &mut s,
        &format!("head -c 102400 /dev/zero > /tmp/body-$$ && curl -sS -X GET -H 'Transfer-Encoding: chunked' --data-binary @/tmp/body-$$ --cacert {ca} {url}/repos/chunked {url}/repos/second; rm -f /tmp/body-$$"),
    );
    assert!(
        out.contains("\"path\": \"/repos/chunked\", \"len\": 102400"),
        "chunked: {out}"
    );
    assert!(
        out.contains("\"path\": \"/repos/second\""),
        "keep-alive: {out}"
    );
    // A client that does not trust agentsh's CA fails closed.
    let r = s.sh(&format!("curl -sS {url}/repos/untrusted"));
    assert_eq!(
        r.code,
        Some(60),
        "curl without the CA: {}{}",
        r.stdout,
        r.stderr
    );
    // By address, once the name is resolved (the address is bound to the
    // name for this tree): judged the same.
    let out = ok(
        &mut s,
        &format!("getent hosts {NAME} >/dev/null; curl -sS -X DELETE --cacert {ca} --resolve {NAME}:{port}:{BOUND} -w '\\n%{{http_code}}' {url}/repos/by-ip"),
    );
    assert!(out.ends_with("\n403"), "by address: {out}");

    // python: urllib with the bundle, requests with REQUESTS_CA_BUNDLE.
    let out = ok(
        &mut s,
        &format!("SSL_CERT_FILE={bundle} python3 -c '\nimport urllib.request, urllib.error, json\nprint(json.load(urllib.request.urlopen(\"{url}/repos/py/urllib\"))[\"saw_authorization\"])\ntry:\n  urllib.request.urlopen(urllib.request.Request(\"{url}/repos/py/urllib\", data=b\"x\", method=\"PUT\"))\nexcept urllib.error.HTTPError as e:\n  print(e.code, e.read().decode().strip())'"),
    );
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.first(), Some(&"True"), "{out}");
    assert!(
        lines
            .get(1)
            .is_some_and(|l| l.starts_with("403 agentsh: PUT")),
        "{out}"
    );
    // requests: where the tree's python has it (this machine's system
    // python, which nobody's tree runs, has not).
    if uid.is_none() {
        let out = ok(
            &mut s,
            &format!("REQUESTS_CA_BUNDLE={bundle} python3 -c '\nimport requests\nr = requests.get(\"{url}/repos/py/requests\")\nprint(r.status_code, r.json()[\"saw_authorization\"])\nprint(requests.patch(\"{url}/repos/py/requests\").status_code)'"),
    );
        assert_eq!(out.trim(), "200 True\n403", "requests: {out}");
    }
    // node's fetch.
    let out = ok(
        &mut s,
        &format!("NODE_EXTRA_CA_CERTS={ca} node -e '\n(async () => {{\n  const a = await fetch(\"{url}/repos/node/fetch\");\n  console.log(a.status, (await a.json()).saw_authorization);\n  const b = await fetch(\"{url}/admin\", {{method: \"POST\", body: \"x\"}});\n  console.log(b.status);\n}})()'"),
    );
    assert_eq!(out.trim(), "200 true\n403", "node: {out}");
    // git: a clone is allowed (GET info/refs, POST git-upload-pack); a push
    // is refused at its POST git-receive-pack (git shows the status, not
    // the body).
    let out = ok(
        &mut s,
        &format!("cd /tmp && rm -rf clone-{u} && GIT_SSL_CAINFO={ca} git clone -q {url}/git/r.git clone-{u} && cat clone-{u}/README && cd clone-{u} && echo more >> README && git -c user.name=a -c user.email=a@a commit -qam second && if GIT_SSL_CAINFO={ca} git push -q origin main 2>/tmp/push-{u}.err; then echo pushed; else echo refused; grep -c 'HTTP 403' /tmp/push-{u}.err || cat /tmp/push-{u}.err; fi", u = format!("{}-{}-{n}", std::process::id(), uid.unwrap_or(0))),
    );
    assert_eq!(out.trim(), "hello\nrefused\n1", "git: {out}");

    // HTTP/2 where the client offers it and the upstream chose it: curl
    // speaks HTTP/2 to agentsh, agentsh to the upstream; a refused request
    // is a 403 over HTTP/2 too.
    let h2url = format!("https://{H2_NAME}:{}", h2.port);
    let out = ok(
        &mut s,
        &format!("curl -sS --http2 --cacert {ca} -w '\\n%{{http_version}}' {h2url}/v2/x; echo; curl -sS --http2 -X POST --cacert {ca} -o /dev/null -w '%{{http_version}} %{{http_code}}' {h2url}/v2/x"),
    );
    let lines: Vec<&str> = out.lines().collect();
    let v: Value = serde_json::from_str(lines[0]).unwrap_or_else(|e| panic!("{e}: {out}"));
    assert_eq!(
        (v["version"].as_str(), v["saw_authorization"].as_bool()),
        (Some("2.0"), Some(true)),
        "{out}"
    );
    assert_eq!(&lines[1..], ["2", "2 403"], "{out}");
    // An upgrade is judged at its request: allowed, the connection becomes
    // the upstream's (an echo); on a refused path, a 403. Only WebSocket
    // is relayed: an h2c upgrade (HTTP/2 whose requests would go by
    // unjudged) goes on without its upgrade and gets an HTTP/1.1 answer.
    let up_script = |path: &str, upgrade: &str| {
        format!("python3 -c '\nimport socket, ssl\nc = ssl.create_default_context(cafile=\"{ca}\").wrap_socket(socket.create_connection((\"{NAME}\", {port})), server_hostname=\"{NAME}\")\nc.sendall(b\"GET {path} HTTP/1.1\\r\\nHost: {NAME}:{port}\\r\\nConnection: Upgrade\\r\\nUpgrade: {upgrade}\\r\\n\\r\\n\")\nf = c.makefile(\"rb\")\nprint(f.readline().decode().split()[1])\nwhile f.readline() not in (b\"\\r\\n\", b\"\"):\n  pass\nc.sendall(b\"ping\\n\")\nprint(f.readline().decode().strip())'")
    };
    let out = ok(&mut s, &up_script("/repos/ws", "websocket"));
    assert_eq!(out.trim(), "101\npong:ping", "upgrade: {out}");
    let out = ok(&mut s, &up_script("/ws-elsewhere", "websocket"));
    assert!(out.starts_with("403\n"), "refused upgrade: {out}");
    let r = s.sh(&up_script("/repos/ws", "h2c"));
    assert!(
        r.stdout.starts_with("200\n"),
        "an h2c upgrade was relayed: {}{}",
        r.stdout,
        r.stderr
    );

    // The tree never holds the token: not in its environment, its files,
    // or anything it got back.
    // (The token is not named in the script: its argv is audited.)
    let r = s.sh(&format!(
        "cat /srv/secret-gh; env; tr '\\0' '\\n' < /proc/self/environ; curl -s --cacert {ca} {url}/repos/echo"
    ));
    assert!(
        r.stdout.contains("saw_authorization"),
        "{}{}",
        r.stdout,
        r.stderr
    );
    assert!(
        !r.stdout.contains(TOKEN) && !r.stderr.contains(TOKEN),
        "{}{}",
        r.stdout,
        r.stderr
    );
    assert!(
        r.stderr.contains("secret-gh"),
        "the secret file is unreadable: {}",
        r.stderr
    );

    // approve: the request waits for an operator, released by the CLI.
    let running = s.sup.spawn(&Spawn::argv(&[
        "/bin/sh",
        "-c",
        &format!("curl -sS -X POST -d title=x --cacert {ca} -w '\\n%{{http_code}}' {url}/repos/a/b/issues"),
    ]));
    let deadline = Instant::now() + Duration::from_secs(60);
    let id = loop {
        let pending = s.srv.get_json("/api/v1/approvals");
        if let Some(r) = pending
            .as_array()
            .and_then(|a| a.iter().find(|r| r["kind"] == "http"))
        {
            assert_eq!(
                r["filename"],
                format!("POST https://{NAME}/repos/a/b/issues"),
                "{r}"
            );
            break r["id"].as_str().unwrap().to_string();
        }
        assert!(
            Instant::now() < deadline,
            "no http approval: {pending}\n{}",
            s.srv.log()
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    let o = std::process::Command::new(bin("agentsh"))
        .args([
            "approvals",
            "approve",
            &id,
            "--server",
            &s.srv.url,
            "--token-file",
        ])
        .arg(s.srv.dir.path().join("state").join("approval.token"))
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "approve: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    let done = s.sup.wait(running, Duration::from_secs(120));
    assert!(
        done.stdout.trim().ends_with("\n200"),
        "approved POST: {}{}",
        done.stdout,
        done.stderr
    );

    // What reached the upstream: the allowed requests, each with the
    // token; never a refused one.
    ok(
        &mut s,
        &format!("curl -s --cacert {ca} {url}/repos/last >/dev/null"),
    );
    let reached = up.requests_until("/repos/last");
    for r in &reached {
        assert_eq!(r["authorization"], format!("Bearer {TOKEN}"), "{r}");
        let m = r["method"].as_str().unwrap();
        let p = r["path"].as_str().unwrap();
        assert!(
            (m == "GET" && (p.starts_with("/repos/") || p.starts_with("/git/")))
                || (m == "POST" && (p == "/repos/a/b/issues" || p.ends_with("/git-upload-pack"))),
            "a refused request reached the upstream: {r}"
        );
        assert!(!p.contains("untrusted") && !p.contains(".."), "{r}");
    }
    assert!(
        reached.iter().any(|r| r["path"] == "/repos/a/b/issues"),
        "{reached:?}"
    );

    // Audited: one http event per request, with method, path, rule and
    // status; never the token.
    let ev = http_events(&s);
    let find = |m: &str, p: &str| {
        ev.iter()
            .find(|e| e["method"] == m && e["path"] == p)
            .unwrap_or_else(|| panic!("no http event for {m} {p}: {ev:?}"))
            .clone()
    };
    let g = find("GET", "/repos/a/b");
    assert_eq!(
        (
            g["rule"].as_str(),
            g["decision"].as_str(),
            g["status"].as_u64()
        ),
        (Some("read"), Some("allow"), Some(200)),
        "{g}"
    );
    assert_eq!(g["injected"], serde_json::json!(["authorization"]), "{g}");
    let d = find("DELETE", "/repos/a/b");
    assert_eq!(
        (d["rule"].as_str(), d["decision"].as_str()),
        (Some("default"), Some("deny")),
        "{d}"
    );
    assert!(
        d.get("status").is_none(),
        "a refused request has no upstream status: {d}"
    );
    let a = find("POST", "/repos/a/b/issues");
    assert_eq!(
        (a["decision"].as_str(), a["effective_action"].as_str()),
        (Some("approve"), Some("allow")),
        "{a}"
    );
    let all = serde_json::to_string(&s.events()).unwrap();
    assert!(!all.contains(TOKEN), "the token is in the audit");
    let _ = std::fs::remove_dir_all(&work);
}

#[test]
fn http_rules_judge_requests_and_inject_credentials_as_root() {
    scenario(None, "");
}

#[test]
fn http_rules_judge_requests_and_inject_credentials_as_nobody() {
    scenario(Some(NOBODY), "");
}

#[test]
fn http_rules_judge_requests_and_inject_credentials_under_the_ptrace_backend() {
    scenario(None, "execve:\n  backend: ptrace\n");
}
