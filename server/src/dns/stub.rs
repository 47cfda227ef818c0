//! The stub resolver every supervised tree's DNS goes to (`egress.dns:
//! stub`): UDP and TCP on `egress.stub` (default 127.0.0.153:53).
//!
//! A query from a tree (known by its source: the supervisor registered the
//! socket in the [`Book`] when it made the tree's call to the stub) is
//! answered only if some egress rule could allow the name (else REFUSED:
//! the query never leaves the machine); an allowed one is forwarded to
//! `egress.resolvers`, and each address of the answer is bound to the name
//! for that tree. Every query of a tree is one `dns` audit event. A query
//! from a socket no tree registered comes from outside every tree (the
//! SDK's daemon, the server itself, when `/etc/resolv.conf` names the stub
//! for the whole machine) and is forwarded as a plain resolver would.
//!
//! Failure modes: a malformed query is answered FORMERR (or dropped, when
//! not even its header can be read), audited when a tree sent it, and the
//! stub keeps serving; no upstream answering in time is SERVFAIL; more than
//! [`IN_FLIGHT_MAX`] queries at once: the excess is dropped (logged), as a
//! busy resolver's are, and the client asks again.

use super::book::{Book, Querier};
use super::packet::{self, Question};
use crate::audit::{AuditLog, DnsEvent, EventBody};
use crate::policy::egress::Egress;
use crate::policy::{Decision, RULE_DEFAULT};
use crate::vocab::Refusal;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// The most queries being answered at once.
const IN_FLIGHT_MAX: usize = 256;
/// How long one upstream gets to answer.
const UPSTREAM_TIMEOUT: Duration = Duration::from_secs(3);

/// The running stub.
pub struct Stub {
    /// Where it listens (UDP and TCP).
    pub addr: SocketAddr,
    pub book: Book,
    upstream: Vec<SocketAddr>,
    audit: Arc<AuditLog>,
    in_flight: AtomicUsize,
    /// `execve.explain: stderr`: a refused query's asker is told why, once
    /// per (thread, name) (resolvers ask again, for each address family).
    explain: bool,
    told: std::sync::Mutex<crate::explain::Told<String>>,
}

/// Why the stub could not start.
#[derive(Debug, thiserror::Error)]
pub enum StubError {
    /// The address is taken, or not ours to bind (port 53 needs root or
    /// CAP_NET_BIND_SERVICE).
    #[error("cannot listen on {protocol} {addr} (egress.stub): {source}")]
    Listen {
        protocol: &'static str,
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("the stub's udp address: {0}")]
    LocalAddr(#[source] std::io::Error),
    #[error("cannot start the DNS stub: {0}")]
    Thread(#[source] std::io::Error),
}

/// Why no upstream answered a forwarded query (the tree gets SERVFAIL).
#[derive(Debug, thiserror::Error)]
enum UpstreamError {
    #[error(
        "no resolver configured (egress.resolvers, or a nameserver in /etc/resolv.conf other \
         than the stub)"
    )]
    NoResolver,
    #[error("{0}: an answer with another id")]
    OtherId(SocketAddr),
    #[error("{upstream}: {source}")]
    Io {
        upstream: SocketAddr,
        source: std::io::Error,
    },
}

/// A UDP socket and a TCP listener on the same address (`addr`, or with
/// port 0 one port both can have).
fn listen(addr: SocketAddr) -> Result<(UdpSocket, TcpListener, SocketAddr), StubError> {
    let attempts = if addr.port() == 0 { 50 } else { 1 };
    let mut attempt = 1;
    loop {
        let udp = UdpSocket::bind(addr).map_err(|source| StubError::Listen {
            protocol: "udp",
            addr,
            source,
        })?;
        let at = udp.local_addr().map_err(StubError::LocalAddr)?;
        match TcpListener::bind(at) {
            Ok(tcp) => return Ok((udp, tcp, at)),
            // Port 0: another try gets another port.
            Err(_) if attempt < attempts => attempt += 1,
            Err(source) => {
                return Err(StubError::Listen {
                    protocol: "tcp",
                    addr: at,
                    source,
                })
            }
        }
    }
}

impl Stub {
    /// Listens on `addr` and serves on threads of its own. Port 0: a port
    /// free for both UDP and TCP, chosen here (`agentsh wrap`, whose user
    /// cannot bind 53 and may run several at once).
    ///
    /// # Errors
    /// It cannot listen there, or cannot start its threads.
    pub fn start(
        addr: SocketAddr,
        upstream: Vec<SocketAddr>,
        audit: Arc<AuditLog>,
        explain: bool,
    ) -> Result<Arc<Stub>, StubError> {
        let (udp, tcp, addr) = listen(addr)?;
        let stub = Arc::new(Stub {
            addr,
            book: Book::default(),
            upstream,
            audit,
            in_flight: AtomicUsize::new(0),
            explain,
            told: std::sync::Mutex::default(),
        });
        let s = stub.clone();
        std::thread::Builder::new()
            .name("agentsh-dns-udp".into())
            .spawn(move || s.serve_udp(udp))
            .map_err(StubError::Thread)?;
        let s = stub.clone();
        std::thread::Builder::new()
            .name("agentsh-dns-tcp".into())
            .spawn(move || s.serve_tcp(tcp))
            .map_err(StubError::Thread)?;
        Ok(stub)
    }

    /// A slot for one more query, or `None` (too many at once).
    fn slot(self: &Arc<Self>) -> Option<Slot> {
        if self.in_flight.fetch_add(1, Ordering::SeqCst) >= IN_FLIGHT_MAX {
            self.in_flight.fetch_sub(1, Ordering::SeqCst);
            tracing::warn!("dns stub: {IN_FLIGHT_MAX} queries in flight; one dropped");
            return None;
        }
        Some(Slot(self.clone()))
    }

    fn serve_udp(self: Arc<Self>, udp: UdpSocket) {
        let udp = Arc::new(udp);
        let mut buf = vec![0u8; 65_536];
        loop {
            let (n, from) = match udp.recv_from(&mut buf) {
                Ok(x) => x,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    tracing::error!("dns stub: udp receive failed: {e}; serving on");
                    std::thread::sleep(Duration::from_millis(10));
                    continue;
                }
            };
            let Some(slot) = self.slot() else { continue };
            let query = buf[..n].to_vec();
            let udp = udp.clone();
            let spawned = std::thread::Builder::new()
                .name("agentsh-dns".into())
                .spawn(move || {
                    if let Some(r) = slot.0.answer(false, from, &query) {
                        let _ = udp.send_to(&r, from);
                    }
                    drop(slot);
                });
            if let Err(e) = spawned {
                tracing::error!("dns stub: cannot start a thread: {e}; query dropped");
            }
        }
    }

    fn serve_tcp(self: Arc<Self>, tcp: TcpListener) {
        loop {
            let (conn, from) = match tcp.accept() {
                Ok(x) => x,
                Err(e) => {
                    tracing::warn!("dns stub: accept failed: {e}");
                    std::thread::sleep(Duration::from_millis(10));
                    continue;
                }
            };
            let Some(slot) = self.slot() else { continue };
            let _ = std::thread::Builder::new()
                .name("agentsh-dns".into())
                .spawn(move || {
                    slot.0.serve_conn(conn, from);
                    drop(slot);
                });
        }
    }

    fn serve_conn(&self, mut conn: TcpStream, from: SocketAddr) {
        let _ = conn.set_read_timeout(Some(Duration::from_secs(10)));
        // A few queries per connection, as clients pipeline them.
        for _ in 0..16 {
            let mut len = [0u8; 2];
            if conn.read_exact(&mut len).is_err() {
                return;
            }
            let mut query = vec![0u8; usize::from(u16::from_be_bytes(len))];
            if conn.read_exact(&mut query).is_err() {
                return;
            }
            let Some(r) = self.answer(true, from, &query) else {
                return;
            };
            let mut out = (r.len() as u16).to_be_bytes().to_vec();
            out.extend_from_slice(&r);
            if conn.write_all(&out).is_err() {
                return;
            }
        }
    }

    /// The answer to one query from `from` (`None`: nothing to send).
    fn answer(&self, stream: bool, from: SocketAddr, query: &[u8]) -> Option<Vec<u8>> {
        let querier = self.book.querier(stream, from);
        let q = match packet::question(query) {
            Ok(q) => q,
            Err(m) => {
                if let Some(who) = &querier {
                    self.record(
                        who,
                        None,
                        Decision::Deny,
                        Refusal::DnsMalformed.rule(),
                        vec![],
                        Some(m.0),
                    );
                } else {
                    tracing::info!(%from, "dns stub: malformed query from outside the trees: {}", m.0);
                }
                return packet::formerr(query);
            }
        };
        let Some(who) = querier else {
            // Outside every tree: a plain resolver.
            return Some(match self.forward(stream, query, q.id) {
                Ok(r) => r,
                Err(_) => packet::reply(query, &q, 2),
            });
        };
        Some(self.answer_tree(&who, stream, query, &q))
    }

    /// A tree's query: the asking tree's session's policy decides (the
    /// supervisor sends only trees whose policy has `dns: stub` here); a
    /// name no rule could allow is refused here, an allowed one forwarded.
    fn answer_tree(&self, who: &Querier, stream: bool, query: &[u8], q: &Question) -> Vec<u8> {
        let policy = who.tree.policy();
        let Some(egress) = policy.egress() else {
            return self.refuse(
                who,
                query,
                q,
                "the tree's policy has no egress section: refused".into(),
            );
        };
        if !egress.could_allow_name(&q.name) {
            return self.refuse(
                who,
                query,
                q,
                format!(
                    "no egress rule could allow {:?}: refused here, the query did not leave \
                     the machine",
                    q.name
                ),
            );
        }
        match self.forward(stream, query, q.id) {
            Ok(r) => {
                self.bind_answers(who, egress, q, &r);
                r
            }
            Err(why) => {
                self.record(
                    who,
                    Some(q),
                    Decision::Allow,
                    &rule_for(egress, &q.name),
                    vec![],
                    Some(format!("no upstream answered: {why} (SERVFAIL)")),
                );
                packet::reply(query, q, 2)
            }
        }
    }

    /// REFUSED, audited with `message`, and explained to the asker.
    fn refuse(&self, who: &Querier, query: &[u8], q: &Question, message: String) -> Vec<u8> {
        if self.explain && self.first_telling(who.pid, &q.name) {
            crate::explain::tell(
                who.pid,
                &crate::explain::refused_name(&q.name, RULE_DEFAULT),
            );
        }
        self.record(
            who,
            Some(q),
            Decision::Deny,
            RULE_DEFAULT,
            vec![],
            Some(message),
        );
        packet::reply(query, q, 5)
    }

    /// Whether thread `pid` is to be told of `name`'s refusal now (the
    /// first time); remembered.
    fn first_telling(&self, pid: u32, name: &str) -> bool {
        self.told
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .first(pid, name.to_ascii_lowercase())
    }

    /// Binds each address of the upstream's answer `r` to the name for the
    /// asking tree, and audits the query as allowed.
    fn bind_answers(&self, who: &Querier, egress: &Egress, q: &Question, r: &[u8]) {
        let ips = match packet::answers(r) {
            Ok((_, a)) => a,
            Err(m) => {
                tracing::warn!("dns stub: an upstream answer for {:?}: {}", q.name, m.0);
                Vec::new()
            }
        };
        for (ip, ttl) in &ips {
            who.tree.bind(*ip, &q.name, *ttl);
        }
        let rule = rule_for(egress, &q.name);
        self.record(
            who,
            Some(q),
            Decision::Allow,
            &rule,
            ips.iter().map(|(ip, _)| ip.to_string()).collect(),
            None,
        );
    }

    /// Asks the upstreams in turn; the first answer with the query's id.
    fn forward(&self, stream: bool, query: &[u8], id: u16) -> Result<Vec<u8>, UpstreamError> {
        let mut last = UpstreamError::NoResolver;
        for up in &self.upstream {
            let got = if stream {
                ask_tcp(*up, query)
            } else {
                ask_udp(*up, query, id)
            };
            match got {
                Ok(r) if r.len() >= 2 && u16::from_be_bytes([r[0], r[1]]) == id => return Ok(r),
                Ok(_) => last = UpstreamError::OtherId(*up),
                Err(source) => {
                    last = UpstreamError::Io {
                        upstream: *up,
                        source,
                    }
                }
            }
        }
        Err(last)
    }

    fn record(
        &self,
        who: &Querier,
        q: Option<&Question>,
        decision: Decision,
        rule: &str,
        answers: Vec<String>,
        message: Option<String>,
    ) {
        if decision != Decision::Allow {
            tracing::info!(
                session = %who.tree.session_id, pid = who.pid, rule,
                name = q.map_or("-", |q| q.name.as_str()), "dns query refused"
            );
        }
        self.audit.record(
            &who.tree.session_id,
            EventBody::Dns(DnsEvent {
                pid: who.pid,
                name: q.map(|q| q.name.clone()),
                qtype: q.map(|q| packet::type_name(q.qtype)),
                rule: rule.to_string(),
                decision,
                answers,
                message,
            }),
        );
    }
}

/// The rule that lets `name` be asked: the first that could allow it, or
/// `default`.
fn rule_for(egress: &Egress, name: &str) -> String {
    egress
        .rules
        .iter()
        .find(|r| r.decision != Decision::Deny && r.hosts.iter().any(|h| h.matches(name)))
        .map_or_else(|| RULE_DEFAULT.into(), |r| r.name.clone())
}

/// One query being answered.
struct Slot(Arc<Stub>);

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

fn ask_udp(up: SocketAddr, query: &[u8], id: u16) -> std::io::Result<Vec<u8>> {
    let any: SocketAddr = if up.is_ipv4() {
        "0.0.0.0:0".parse().expect("literal")
    } else {
        "[::]:0".parse().expect("literal")
    };
    let s = UdpSocket::bind(any)?;
    s.connect(up)?;
    s.set_read_timeout(Some(UPSTREAM_TIMEOUT))?;
    s.send(query)?;
    let mut buf = vec![0u8; 65_536];
    let deadline = std::time::Instant::now() + UPSTREAM_TIMEOUT;
    loop {
        let n = s.recv(&mut buf)?;
        if n >= 2 && u16::from_be_bytes([buf[0], buf[1]]) == id {
            buf.truncate(n);
            return Ok(buf);
        }
        if std::time::Instant::now() >= deadline {
            return Err(std::io::ErrorKind::TimedOut.into());
        }
    }
}

fn ask_tcp(up: SocketAddr, query: &[u8]) -> std::io::Result<Vec<u8>> {
    let mut s = TcpStream::connect_timeout(&up, UPSTREAM_TIMEOUT)?;
    s.set_read_timeout(Some(UPSTREAM_TIMEOUT))?;
    let mut out = (query.len() as u16).to_be_bytes().to_vec();
    out.extend_from_slice(query);
    s.write_all(&out)?;
    let mut len = [0u8; 2];
    s.read_exact(&mut len)?;
    let mut r = vec![0u8; usize::from(u16::from_be_bytes(len))];
    s.read_exact(&mut r)?;
    Ok(r)
}
