//! Step 9, egress (policy `egress:`): 1,000 TCP connects, 10,000 UDP
//! datagrams and a 100 MB download with `curl`, each under a server whose
//! policy judges every destination (agent-observe with `egress: {default:
//! deny}` and a rule allowing loopback) against the same command
//! unsupervised. A connect and a datagram are each stopped, judged and
//! performed by the supervisor; the download's data path is not stopped at
//! all (only its one connect).
//!
//! Fails unless each supervised run judged its destinations (a `connect`
//! event per destination and tree in the server's audit trail).

use super::Bench;
use crate::audit::audit_lines;
use crate::report::Report;
use crate::timer::{run_timer, Spec};
use crate::workload::{entry, s};
use agentsh_tests::server::{server_base, TestServer};
use std::io::{Read, Write};
use std::net::{TcpListener, UdpSocket};

/// The download's size.
const DOWNLOAD: usize = 100 << 20;

/// agent-observe, every destination judged, loopback allowed.
fn policy() -> String {
    format!(
        "{}\negress:\n  default: deny\n  rules:\n    - name: loopback\n      \
         cidrs: [127.0.0.0/8]\n      protocol: any\n      decision: allow\n",
        agentsh_tests::sandbox::agent_observe_without_egress()
    )
}

/// A loopback TCP server: a connection that sends a request gets
/// [`DOWNLOAD`] bytes over HTTP/1.0; one that sends nothing is dropped.
fn http_server() -> Result<u16, String> {
    let l = TcpListener::bind("127.0.0.1:0").map_err(|e| e.to_string())?;
    let port = l.local_addr().map_err(|e| e.to_string())?.port();
    std::thread::spawn(move || {
        for c in l.incoming().flatten() {
            std::thread::spawn(move || {
                let mut c = c;
                let mut req = Vec::new();
                let mut buf = [0u8; 1024];
                while !req.windows(4).any(|w| w == b"\r\n\r\n") {
                    match c.read(&mut buf) {
                        Ok(0) | Err(_) => return,
                        Ok(n) => req.extend_from_slice(&buf[..n]),
                    }
                }
                let head = format!(
                    "HTTP/1.0 200 OK\r\nContent-Length: {DOWNLOAD}\r\nConnection: close\r\n\r\n"
                );
                if c.write_all(head.as_bytes()).is_err() {
                    return;
                }
                let chunk = vec![0u8; 1 << 16];
                let mut left = DOWNLOAD;
                while left > 0 {
                    let n = left.min(chunk.len());
                    if c.write_all(&chunk[..n]).is_err() {
                        return;
                    }
                    left -= n;
                }
            });
        }
    });
    Ok(port)
}

/// A loopback TCP listener that closes each connection as soon as it is
/// accepted (the connect loop's peer: closing first on this side keeps the
/// client's ports out of TIME_WAIT, which otherwise slows the unsupervised
/// loop down more than anything measured).
fn connect_sink() -> Result<u16, String> {
    let l = TcpListener::bind("127.0.0.1:0").map_err(|e| e.to_string())?;
    let port = l.local_addr().map_err(|e| e.to_string())?.port();
    // A backlog of 4096, not std's 128: an overflowing accept queue drops
    // SYNs, and each costs the unsupervised loop a 1 s retransmission.
    // SAFETY: listen() again on a listening socket only resizes its backlog.
    if unsafe { libc::listen(std::os::fd::AsRawFd::as_raw_fd(&l), 4096) } != 0 {
        return Err(format!("listen: {}", std::io::Error::last_os_error()));
    }
    std::thread::spawn(move || {
        for c in l.incoming() {
            drop(c);
        }
    });
    Ok(port)
}

/// A loopback UDP sink, drained.
fn udp_sink() -> Result<u16, String> {
    let u = UdpSocket::bind("127.0.0.1:0").map_err(|e| e.to_string())?;
    let port = u.local_addr().map_err(|e| e.to_string())?.port();
    std::thread::spawn(move || {
        let mut buf = [0u8; 2048];
        while u.recv_from(&mut buf).is_ok() {}
    });
    Ok(port)
}

/// Step 9: the three workloads supervised by an egress policy and
/// unsupervised.
pub fn egress(rep: &mut Report, b: &Bench<'_>) -> Result<(), String> {
    let port = http_server()?;
    let cport = connect_sink()?;
    let uport = udp_sink()?;
    let ns = b.shim_ns;
    let srv = TestServer::start_with(
        &server_base(),
        &policy(),
        &format!("workspace: {}\n", b.ws.display()),
        |program| {
            let mut c = ns.command(program);
            c.env("AGENTSH_LOG", "info");
            c
        },
    );
    ns.configure(&srv.url, "on");
    let audit = srv.dir.path().join("audit.jsonl");
    let connects = format!(
        "/usr/bin/python3 -c 'import socket\nfor i in range(1000):\n    s = socket.socket(); \
         s.connect((\"127.0.0.1\", {cport})); s.close()'"
    );
    let datagrams = format!(
        "/usr/bin/python3 -c 'import socket\ns = socket.socket(socket.AF_INET, \
         socket.SOCK_DGRAM)\nfor i in range(10000):\n    s.sendto(b\"x\" * 100, \
         (\"127.0.0.1\", {uport}))'"
    );
    let download = format!("curl -sf -o /dev/null http://127.0.0.1:{port}/big && echo ok");
    let rounds = if b.quick { 3 } else { 10 };
    let workloads = [
        ("1,000 connects", connects),
        ("10,000 UDP datagrams", datagrams),
        ("100 MB download (curl)", download),
    ];
    let mut entries = Vec::new();
    for (what, script) in &workloads {
        entries.push(entry(
            &format!("{what}, egress"),
            s(&["/bin/sh", "-c", script]),
            Some(b.shim_mnt),
        ));
        entries.push(entry(
            &format!("{what}, unsupervised"),
            s(&["/bin/sh", "-c", script]),
            Some(b.plain_mnt),
        ));
    }
    let spec = Spec {
        rounds,
        warmup: 1,
        entries,
    };
    let before = audit_lines(&audit).len();
    let samples = run_timer(b.ws, &spec, "egress", None)?;
    let events = audit_lines(&audit);
    let judged = |p: u16, proto: &str| {
        events[before.min(events.len())..]
            .iter()
            .filter(|e| {
                e["type"] == "connect"
                    && e["port"] == p
                    && e["protocol"] == proto
                    && e["decision"] == "allow"
            })
            .count()
    };
    // Each supervised run is a tree: one event per destination per tree.
    let runs = rounds + 1;
    let (tcp, conn, udp) = (
        judged(port, "tcp"),
        judged(cport, "tcp"),
        judged(uport, "udp"),
    );
    if tcp < runs || conn < runs || udp < runs {
        return Err(format!(
            "egress: expected ≥ {runs} judged destinations of each workload, saw {conn} \
             (connects), {udp} (datagrams), {tcp} (download): the supervised side did not run \
             under egress"
        ));
    }
    let labels: Vec<(String, String)> = workloads
        .iter()
        .map(|(w, _)| (format!("{w}, egress"), format!("{w}, unsupervised")))
        .collect();
    let ratios: Vec<(&str, &str, &str)> = labels
        .iter()
        .map(|(a, u)| (a.as_str(), u.as_str(), ""))
        .collect();
    rep.pair(
        "9. Egress: connects, datagrams and a download, every destination judged",
        "egress",
        &spec,
        &samples,
        &ratios,
    );
    rep.line(
        "\n(The supervised side runs under agent-observe with `egress: {default: deny}` and a rule \
         allowing 127.0.0.0/8; each connect and each datagram is stopped, judged and performed by \
         the supervisor; the download's data is not stopped.)",
    );
    drop(srv);
    Ok(())
}
