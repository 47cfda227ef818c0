//! Step "http" (issue 42): HTTPS requests to a destination whose egress
//! rule has `http:` (through agentsh's proxy: TLS terminated with agentsh's
//! CA, each request judged, a header injected, TLS again to the upstream)
//! against the same requests to a destination whose rule has none (the
//! connect judged, the bytes not read), both supervised, and the direct
//! ones unsupervised. The upstreams are the tests' Python TLS servers on
//! loopback; curl makes 100 requests on one connection.
//!
//! Fails unless the proxied run's requests were judged (an `http` event
//! each in the server's audit trail).

use super::Bench;
use crate::audit::audit_lines;
use crate::report::{fmt_us, stats, Report};
use crate::timer::{run_timer, Spec};
use crate::workload::{entry, s};
use agentsh_tests::http_upstream::HttpUpstream;
use agentsh_tests::server::{server_base, TestServer};
use std::net::Ipv4Addr;

const NAME: &str = "bench.test";
const REQUESTS: usize = 100;

fn policy(proxied: u16, direct: u16) -> String {
    format!(
        "{}\negress:\n  default: deny\n  rules:\n    - name: through-agentsh\n      \
         cidrs: [127.0.0.3/32]\n      ports: [{proxied}]\n      decision: allow\n      http:\n        \
         default: allow\n        inject:\n          headers: {{X-Bench: \"1\"}}\n    - name: direct\n      \
         cidrs: [127.0.0.4/32]\n      ports: [{direct}]\n      decision: allow\n",
        agentsh_tests::sandbox::agent_observe_without_egress()
    )
}

/// curl fetching `REQUESTS` URLs over one connection.
fn curl(ca: &str, ip: Ipv4Addr, port: u16) -> String {
    let url = format!("https://{NAME}:{port}/x");
    let urls = vec![url.as_str(); REQUESTS].join(" ");
    format!("curl -sf --cacert {ca} --resolve {NAME}:{port}:{ip} {urls} > /dev/null")
}

/// The step: three entries side by side.
pub fn http(rep: &mut Report, b: &Bench<'_>) -> Result<(), String> {
    let dir = b.ws.join("http-upstreams");
    let through = HttpUpstream::start(&dir.join("p"), Ipv4Addr::new(127, 0, 0, 3), NAME, true);
    let direct = HttpUpstream::start(&dir.join("d"), Ipv4Addr::new(127, 0, 0, 4), NAME, true);
    let ca = b.ws.join("agentsh-ca/ca.pem");
    let ns = b.shim_ns;
    let srv = TestServer::start_with(
        &server_base(),
        &policy(through.port, direct.port),
        &format!(
            "workspace: {}\negress:\n  ca: {}\n  upstream_roots: [\"{}\"]\n",
            b.ws.display(),
            ca.display(),
            through.ca.display()
        ),
        |program| ns.command(program),
    );
    ns.configure(&srv.url, "on");
    let audit = srv.dir.path().join("audit.jsonl");
    let proxied = curl(&ca.display().to_string(), through.ip, through.port);
    let plain = curl(&direct.ca.display().to_string(), direct.ip, direct.port);
    let labels = [
        "100 HTTPS requests through agentsh's proxy",
        "100 HTTPS requests direct, supervised",
        "100 HTTPS requests direct, unsupervised",
    ];
    let rounds = if b.quick { 3 } else { 10 };
    let spec = Spec {
        rounds,
        warmup: 1,
        entries: vec![
            entry(labels[0], s(&["/bin/sh", "-c", &proxied]), Some(b.shim_mnt)),
            entry(labels[1], s(&["/bin/sh", "-c", &plain]), Some(b.shim_mnt)),
            entry(labels[2], s(&["/bin/sh", "-c", &plain]), Some(b.plain_mnt)),
        ],
    };
    let samples = run_timer(b.ws, &spec, "http", None)?;
    let judged = audit_lines(&audit)
        .iter()
        .filter(|e| e["type"] == "http" && e["decision"] == "allow" && e["status"] == 200)
        .count();
    let want = REQUESTS * (rounds + 1);
    if judged < want {
        return Err(format!(
            "http: expected ≥ {want} judged requests, saw {judged}: the proxied side did not go \
             through agentsh's proxy"
        ));
    }
    rep.pair(
        "HTTP. 100 HTTPS requests on one connection (curl), through agentsh's proxy (an egress rule with http:) and direct",
        "http",
        &spec,
        &samples,
        &[(labels[0], labels[1], ""), (labels[1], labels[2], "")],
    );
    let per = |l: &str| stats(&samples[l]).median_us / REQUESTS as f64;
    rep.line(&format!(
        "\nPer request (including the connection's setup, spread over 100): {} through the proxy, {} direct supervised, {} unsupervised.",
        fmt_us(per(labels[0])),
        fmt_us(per(labels[1])),
        fmt_us(per(labels[2])),
    ));
    drop(srv);
    Ok(())
}
