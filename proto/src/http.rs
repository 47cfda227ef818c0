//! A minimal HTTP/1.1 client over agentsh's Unix SOCK_SEQPACKET API socket,
//! and over TCP for an operator's `http://` listener ([`call_tcp`]): the
//! shim's one HTTP client.
//!
//! The shim runs for every shell in the container and must stay small, so
//! this is not a general client: one request per connection
//! (`Connection: close`), the request sent as one record, the response read
//! record by record until it is complete (`Content-Length` or chunked) or the
//! server closes. The caller checks the peer's credentials (`SO_PEERCRED`)
//! before anything is sent: the shim talks only to a root-owned server.
//!
//! Failure modes: every way the exchange can fail is an [`Error`] variant
//! saying which step failed; a response larger than the caller's limit is an
//! error, never a truncated body.

use crate::seqpacket::{self, PeerCred};
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;
use std::time::Duration;

/// The largest record either side sends; requests must fit in one.
pub const MAX_RECORD: usize = 64 * 1024;

/// One request.
#[derive(Debug, Clone, Copy)]
pub struct Request<'a> {
    /// `GET` or `POST`.
    pub method: &'a str,
    /// Path and query, e.g. `/api/v1/sessions/default/wrap-init`.
    pub target: &'a str,
    /// A JSON body, or empty.
    pub body: &'a [u8],
    /// An operator token for `Authorization: Bearer`.
    pub bearer: Option<&'a str>,
}

/// A complete response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    /// The HTTP status.
    pub status: u16,
    /// The body (chunked encoding undone).
    pub body: Vec<u8>,
    /// Who answered.
    pub peer: PeerCred,
}

/// Why there is no response.
#[derive(Debug)]
pub enum Error {
    /// The socket could not be reached (ENOENT, ECONNREFUSED, EPERM, ...).
    Connect(io::Error),
    /// The peer is not who the caller accepts.
    Peer(String),
    /// Sending or receiving failed (timeouts included).
    Io(io::Error),
    /// The answer is not HTTP we understand, or exceeds the limit.
    Malformed(String),
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Error::Connect(e) => write!(f, "cannot connect: {e}"),
            Error::Peer(e) => write!(f, "refusing the peer: {e}"),
            Error::Io(e) => write!(f, "exchange failed: {e}"),
            Error::Malformed(e) => write!(f, "malformed answer: {e}"),
        }
    }
}

impl std::error::Error for Error {}

/// Connects to the API socket `socket` (through its owner's door where
/// this process may: [`seqpacket::connect_api`]), lets `check_peer` vet
/// who listens there, sends `req` and returns the response (body at most
/// `max_body` bytes).
///
/// # Errors
/// See [`Error`].
pub fn call(
    socket: &Path,
    timeout: Duration,
    check_peer: impl FnOnce(&PeerCred) -> Result<(), String>,
    req: &Request<'_>,
    max_body: usize,
) -> Result<Response, Error> {
    let fd = seqpacket::connect_api(socket, timeout).map_err(Error::Connect)?;
    let peer = seqpacket::peer_cred(fd.as_fd()).map_err(Error::Io)?;
    if peer.pid != std::process::id() {
        check_peer(&peer).map_err(Error::Peer)?;
        return exchange(&fd, peer, req, max_body, None);
    }
    // A kernel that answers SO_PEERCRED with this process's own
    // credentials (gVisor) names no peer: the server's first record does,
    // in its SCM_CREDENTIALS, checked before a byte of the answer is read.
    seqpacket::enable_passcred(fd.as_fd()).map_err(Error::Io)?;
    exchange(
        &fd,
        peer,
        req,
        max_body,
        Some((Box::new(check_peer), timeout)),
    )
}

/// A check of who answers, made on the first record's credentials, and how
/// long to wait for that record.
type FirstRecordCheck<'a> = (
    Box<dyn FnOnce(&PeerCred) -> Result<(), String> + 'a>,
    Duration,
);

/// The credentials of the next record on `fd`, waiting up to `timeout`.
fn creds_of_next_record(fd: &OwnedFd, timeout: Duration) -> Result<PeerCred, Error> {
    let mut p = libc::pollfd {
        fd: std::os::fd::AsRawFd::as_raw_fd(fd),
        events: libc::POLLIN,
        revents: 0,
    };
    let ms = libc::c_int::try_from(timeout.as_millis()).unwrap_or(libc::c_int::MAX);
    // SAFETY: one valid pollfd.
    let rc = unsafe { libc::poll(&mut p, 1, ms) };
    if rc <= 0 {
        return Err(Error::Io(if rc == 0 {
            std::io::Error::from(std::io::ErrorKind::TimedOut)
        } else {
            std::io::Error::last_os_error()
        }));
    }
    match seqpacket::peek_creds(fd.as_fd()) {
        Ok(Some(c)) => Ok(c),
        Ok(None) => Err(Error::Peer(
            "the kernel names no peer (SO_PEERCRED is this process) and the answer carries no \
             SCM_CREDENTIALS"
                .into(),
        )),
        Err(e) => Err(Error::Io(e)),
    }
}

/// `http://HOST[:PORT]` (no path) as a socket address: an IP literal as is
/// (IPv6 in brackets), a name through the system resolver; port 80 when
/// none is given.
///
/// # Errors
/// Not `http://`, a path, a bad port, or a name that does not resolve.
pub fn tcp_addr(base: &str) -> Result<std::net::SocketAddr, String> {
    use std::net::{IpAddr, SocketAddr, ToSocketAddrs};
    let auth = base
        .strip_prefix("http://")
        .ok_or_else(|| format!("{base}: not an http:// address"))?
        .trim_end_matches('/');
    if auth.contains('/') {
        return Err(format!("{base}: no path may follow the address"));
    }
    let (host, port) = match auth.rsplit_once(':') {
        Some((h, p)) if !h.is_empty() && (!h.contains(':') || h.ends_with(']')) => (
            h,
            p.parse::<u16>()
                .map_err(|_| format!("{base}: bad port {p:?}"))?,
        ),
        _ => (auth, 80),
    };
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    if let Ok(ip) = bare.parse::<IpAddr>() {
        return Ok(SocketAddr::new(ip, port));
    }
    (bare, port)
        .to_socket_addrs()
        .map_err(|e| format!("{base}: cannot resolve {bare}: {e}"))?
        .next()
        .ok_or_else(|| format!("{base}: {bare} has no address"))
}

/// Sends `req` to an HTTP listener at `addr` over TCP and returns the status
/// and body (at most `max_body` bytes). `connect` bounds the connection,
/// `io` each read and write.
///
/// # Errors
/// See [`Error`] (there is no peer to check on TCP).
pub fn call_tcp(
    addr: std::net::SocketAddr,
    connect: Duration,
    io: Duration,
    req: &Request<'_>,
    max_body: usize,
) -> Result<(u16, Vec<u8>), Error> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect_timeout(&addr, connect).map_err(Error::Connect)?;
    s.set_read_timeout(Some(io)).map_err(Error::Io)?;
    s.set_write_timeout(Some(io)).map_err(Error::Io)?;
    s.write_all(&encode(req)).map_err(Error::Io)?;
    let mut buf: Vec<u8> = Vec::with_capacity(4096);
    let mut chunk = [0u8; 4096];
    loop {
        let n = match s.read(&mut chunk) {
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(Error::Io(e)),
        };
        if n == 0 {
            return parse(&buf, max_body)?.ok_or_else(|| {
                Error::Malformed(format!(
                    "the server closed after {} bytes of an incomplete answer",
                    buf.len()
                ))
            });
        }
        buf.extend_from_slice(&chunk[..n]);
        if buf.len() > max_body + 16 * 1024 {
            return Err(Error::Malformed(format!(
                "answer larger than {max_body} bytes"
            )));
        }
        if let Some(answer) = parse(&buf, max_body)? {
            return Ok(answer);
        }
    }
}

/// The request's bytes.
pub fn encode(req: &Request<'_>) -> Vec<u8> {
    let mut head = format!(
        "{} {} HTTP/1.1\r\nHost: agentsh\r\nConnection: close\r\nContent-Length: {}\r\n",
        req.method,
        req.target,
        req.body.len()
    );
    if !req.body.is_empty() {
        head.push_str("Content-Type: application/json\r\n");
    }
    if let Some(t) = req.bearer {
        head.push_str("Authorization: Bearer ");
        head.push_str(t);
        head.push_str("\r\n");
    }
    head.push_str("\r\n");
    let mut out = head.into_bytes();
    out.extend_from_slice(req.body);
    out
}

fn exchange(
    fd: &OwnedFd,
    mut peer: PeerCred,
    req: &Request<'_>,
    max_body: usize,
    first: Option<FirstRecordCheck<'_>>,
) -> Result<Response, Error> {
    let bytes = encode(req);
    if bytes.len() > MAX_RECORD {
        return Err(Error::Malformed(format!(
            "request of {} bytes exceeds one {MAX_RECORD}-byte record",
            bytes.len()
        )));
    }
    // The request carries our credentials: the server's proof of who asks.
    seqpacket::send_record_with_creds(fd.as_fd(), &bytes).map_err(Error::Io)?;
    if let Some((check, timeout)) = first {
        peer = creds_of_next_record(fd, timeout)?;
        check(&peer).map_err(Error::Peer)?;
    }
    let mut buf: Vec<u8> = Vec::with_capacity(4096);
    let mut rec = vec![0u8; MAX_RECORD];
    loop {
        let n = seqpacket::recv_record(fd.as_fd(), &mut rec).map_err(Error::Io)?;
        if n == 0 {
            return match parse(&buf, max_body)? {
                Some((status, body)) => Ok(Response { status, body, peer }),
                None => Err(Error::Malformed(format!(
                    "the server closed after {} bytes of an incomplete answer",
                    buf.len()
                ))),
            };
        }
        buf.extend_from_slice(&rec[..n]);
        if buf.len() > max_body + 16 * 1024 {
            return Err(Error::Malformed(format!(
                "answer larger than {max_body} bytes"
            )));
        }
        if let Some((status, body)) = parse(&buf, max_body)? {
            return Ok(Response { status, body, peer });
        }
    }
}

/// `Some` once `buf` holds a complete response; `None` if more is needed.
///
/// # Errors
/// Anything that is not a well-formed HTTP/1.1 response.
pub fn parse(buf: &[u8], max_body: usize) -> Result<Option<(u16, Vec<u8>)>, Error> {
    let bad = |m: &str| Error::Malformed(m.to_string());
    let Some(end) = find(buf, b"\r\n\r\n") else {
        if buf.len() > 16 * 1024 {
            return Err(bad("response headers longer than 16 KiB"));
        }
        return Ok(None);
    };
    let head = std::str::from_utf8(&buf[..end]).map_err(|_| bad("headers are not UTF-8"))?;
    let mut lines = head.split("\r\n");
    let status_line = lines.next().unwrap_or_default();
    let mut parts = status_line.splitn(3, ' ');
    let (version, code) = (parts.next(), parts.next());
    if !version.is_some_and(|v| v.starts_with("HTTP/1.")) {
        return Err(Error::Malformed(format!("status line {status_line:?}")));
    }
    let status: u16 = code
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| Error::Malformed(format!("status line {status_line:?}")))?;
    let mut length: Option<usize> = None;
    let mut chunked = false;
    for l in lines {
        let Some((k, v)) = l.split_once(':') else {
            return Err(Error::Malformed(format!("header line {l:?}")));
        };
        let (k, v) = (k.trim(), v.trim());
        if k.eq_ignore_ascii_case("content-length") {
            length = Some(
                v.parse()
                    .map_err(|_| bad("Content-Length is not a number"))?,
            );
        } else if k.eq_ignore_ascii_case("transfer-encoding") {
            chunked = v.eq_ignore_ascii_case("chunked");
        }
    }
    let rest = &buf[end + 4..];
    if chunked {
        return dechunk(rest, max_body).map(|b| b.map(|b| (status, b)));
    }
    match length {
        Some(n) if n > max_body => Err(Error::Malformed(format!(
            "answer of {n} bytes exceeds {max_body}"
        ))),
        Some(n) if rest.len() >= n => Ok(Some((status, rest[..n].to_vec()))),
        Some(_) => Ok(None),
        // No length: the body runs to the close, which the caller sees as
        // EOF; until then it is incomplete.
        None => Ok(None),
    }
}

fn dechunk(mut rest: &[u8], max_body: usize) -> Result<Option<Vec<u8>>, Error> {
    let mut body = Vec::new();
    loop {
        let Some(eol) = find(rest, b"\r\n") else {
            return Ok(None);
        };
        let size_text = std::str::from_utf8(&rest[..eol])
            .ok()
            .and_then(|s| s.split(';').next())
            .map(str::trim)
            .ok_or_else(|| Error::Malformed("chunk size".into()))?;
        let size = usize::from_str_radix(size_text, 16)
            .map_err(|_| Error::Malformed(format!("chunk size {size_text:?}")))?;
        rest = &rest[eol + 2..];
        if size == 0 {
            return Ok(Some(body));
        }
        if body.len() + size > max_body {
            return Err(Error::Malformed(format!("answer exceeds {max_body} bytes")));
        }
        if rest.len() < size + 2 {
            return Ok(None);
        }
        body.extend_from_slice(&rest[..size]);
        rest = &rest[size + 2..];
    }
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tcp_addresses_parse_literals_and_refuse_paths() {
        assert_eq!(
            tcp_addr("http://127.0.0.1:18080").unwrap(),
            "127.0.0.1:18080".parse().unwrap()
        );
        assert_eq!(
            tcp_addr("http://[::1]:9/").unwrap(),
            "[::1]:9".parse().unwrap()
        );
        assert_eq!(
            tcp_addr("http://10.0.0.1").unwrap(),
            "10.0.0.1:80".parse().unwrap()
        );
        assert!(tcp_addr("http://127.0.0.1:9/api").is_err());
        assert!(tcp_addr("https://127.0.0.1:9").is_err());
        assert!(tcp_addr("http://127.0.0.1:x").is_err());
    }

    #[test]
    fn a_tcp_exchange_reads_the_whole_answer() {
        use std::io::{Read, Write};
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let t = std::thread::spawn(move || {
            let (mut c, _) = l.accept().unwrap();
            let mut got = [0u8; 512];
            let n = c.read(&mut got).unwrap();
            assert!(got[..n].starts_with(b"POST /x HTTP/1.1\r\n"));
            c.write_all(b"HTTP/1.1 201 Created\r\nContent-Length: 2\r\n\r\n")
                .unwrap();
            c.write_all(b"ok").unwrap();
        });
        let req = Request {
            method: "POST",
            target: "/x",
            body: b"{}",
            bearer: None,
        };
        let limit = Duration::from_secs(30);
        let (status, body) = call_tcp(addr, limit, limit, &req, 1024).unwrap();
        assert_eq!((status, body.as_slice()), (201, &b"ok"[..]));
        t.join().unwrap();
    }

    #[test]
    fn encodes_one_request() {
        let r = encode(&Request {
            method: "POST",
            target: "/x",
            body: b"{}",
            bearer: Some("t"),
        });
        let s = String::from_utf8(r).unwrap();
        assert!(s.starts_with("POST /x HTTP/1.1\r\n"), "{s}");
        assert!(s.contains("Content-Length: 2\r\n"));
        assert!(s.contains("Authorization: Bearer t\r\n"));
        assert!(s.ends_with("\r\n\r\n{}"));
    }

    #[test]
    fn parses_length_and_chunked_bodies_and_waits_for_more() {
        let full = b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nhello";
        assert_eq!(parse(full, 100).unwrap(), Some((200, b"hello".to_vec())));
        assert_eq!(parse(&full[..full.len() - 1], 100).unwrap(), None);
        assert_eq!(parse(b"HTTP/1.1 200 OK\r\n", 100).unwrap(), None);
        let ch = b"HTTP/1.1 404 Not Found\r\ntransfer-encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n";
        assert_eq!(parse(ch, 100).unwrap(), Some((404, b"abcde".to_vec())));
        assert_eq!(parse(&ch[..ch.len() - 5], 100).unwrap(), None);
    }

    #[test]
    fn refuses_what_is_not_http_or_too_big() {
        assert!(parse(b"SSH-2.0-x\r\n\r\n", 100).is_err());
        assert!(parse(b"HTTP/1.1 2x0 OK\r\n\r\n", 100).is_err());
        assert!(parse(b"HTTP/1.1 200 OK\r\ncontent-length: 500\r\n\r\n", 100).is_err());
        assert!(parse(b"HTTP/1.1 200 OK\r\nbroken\r\n\r\n", 100).is_err());
    }
}
