//! Audit events exported as OpenTelemetry log records over OTLP/HTTP
//! (`audit.otlp.endpoint`, off by default), for users who outgrow the JSONL
//! file: a collector takes them to whatever store they query.
//!
//! Built on the OpenTelemetry crates (`opentelemetry_sdk`'s batch processor
//! on its own thread, `opentelemetry-otlp`'s protobuf encoding and retries);
//! the HTTP request itself is made by [`PlainHttp`], a small blocking
//! HTTP/1.1 client run on that thread: the endpoint is plain `http://`, a
//! collector on the machine or beside it (one that forwards over TLS is how
//! events leave it encrypted).
//!
//! Each event is one record: its JSON line as the body (what `audit.jsonl`
//! holds), `event.name` `agentsh.<type>`, and the session, event id,
//! decision and rule as attributes for the collector's filters; severity
//! WARN for a deny, INFO otherwise.
//!
//! Failure modes: the JSONL file stays the record of what happened; an
//! export that fails (collector down, refused) is retried by the exporter,
//! then said in the server log (`audit export to OTLP failed`), and counted
//! (`GET /api/v1/status`: `audit.otlp.failed_requests`); the batch queue
//! (2,048 records) drops what does not fit while the collector is away: the
//! SDK logs the first drop and, at the server's stop, how many there were
//! (target `opentelemetry_sdk`). An endpoint that is
//! not a plain `http://host:port[/path]` URL stops the server at start.

use opentelemetry::logs::{AnyValue, LogRecord, Logger, LoggerProvider, Severity};
use opentelemetry_otlp::{WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::logs::{SdkLogger, SdkLoggerProvider};
use std::io::{Read, Write};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// The path OTLP/HTTP receivers take logs on.
pub const LOGS_PATH: &str = "/v1/logs";
/// How long one request may take, connecting included.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// The most of a response read (a collector answers with a small status).
const MAX_RESPONSE: u64 = 1 << 20;

/// An `audit.otlp.endpoint` the server cannot export to (it does not start).
#[derive(Debug, thiserror::Error)]
pub enum EndpointError {
    #[error(
        "audit.otlp.endpoint {0:?}: https is not built in; send to a collector on this machine \
         or beside it over http:// (e.g. http://127.0.0.1:4318) and let it forward over TLS"
    )]
    Https(String),
    #[error("audit.otlp.endpoint {0:?} is not an http:// URL (e.g. http://127.0.0.1:4318)")]
    NotHttp(String),
    #[error("audit.otlp.endpoint {endpoint:?}: the port {port:?} is not a number")]
    Port { endpoint: String, port: String },
    #[error(
        "audit.otlp.endpoint {0:?}: no host (or credentials in the URL, which are not supported)"
    )]
    NoHost(String),
    #[error("audit.otlp.endpoint {endpoint:?}: {source}")]
    Build {
        endpoint: String,
        source: opentelemetry_otlp::ExporterBuildError,
    },
}

/// Why one export request failed (said in the server log and counted).
#[derive(Debug, thiserror::Error)]
enum SendError {
    #[error("{addr}: {source}")]
    Resolve {
        addr: String,
        source: std::io::Error,
    },
    #[error("{0}: no address")]
    NoAddress(String),
    #[error("connect {target}: {source}")]
    Connect {
        target: std::net::SocketAddr,
        source: std::io::Error,
    },
    #[error("{0}")]
    SetTimeout(#[source] std::io::Error),
    #[error("send to {target}: {source}")]
    Write {
        target: std::net::SocketAddr,
        source: std::io::Error,
    },
    #[error("read from {target}: {source}")]
    Read {
        target: std::net::SocketAddr,
        source: std::io::Error,
    },
    #[error("the response has no end of headers")]
    NoEndOfHeaders,
    #[error("the response head is not text")]
    HeadNotText,
    #[error("no status in {0:?}")]
    NoStatus(String),
    #[error("{0}")]
    Response(#[from] http::Error),
}

/// A running export: the SDK's provider and the logger events go through.
pub struct Exporter {
    provider: SdkLoggerProvider,
    logger: SdkLogger,
    failed_requests: Arc<AtomicU64>,
    endpoint: String,
}

impl std::fmt::Debug for Exporter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Exporter")
            .field("endpoint", &self.endpoint)
            .finish_non_exhaustive()
    }
}

/// `endpoint` as `(host:port, full URL)`; a URL with no path gets
/// [`LOGS_PATH`], as OTLP's `OTEL_EXPORTER_OTLP_ENDPOINT` does.
///
/// # Errors
/// Not `http://`, no host, or a port that is not a number.
pub fn parse_endpoint(endpoint: &str) -> Result<(String, String), EndpointError> {
    let rest = endpoint.strip_prefix("http://").ok_or_else(|| {
        if endpoint.starts_with("https://") {
            EndpointError::Https(endpoint.to_string())
        } else {
            EndpointError::NotHttp(endpoint.to_string())
        }
    })?;
    let (authority, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, ""),
    };
    let (host, port) = match authority.rsplit_once(':') {
        Some((h, p)) if !h.ends_with(']') || h.starts_with('[') => {
            let port: u16 = p.parse().map_err(|_| EndpointError::Port {
                endpoint: endpoint.to_string(),
                port: p.to_string(),
            })?;
            (h, port)
        }
        _ => (authority, 80),
    };
    if host.is_empty() || host.contains('@') {
        return Err(EndpointError::NoHost(endpoint.to_string()));
    }
    let path = if path.is_empty() || path == "/" {
        LOGS_PATH
    } else {
        path
    };
    Ok((
        format!("{host}:{port}"),
        format!("http://{host}:{port}{path}"),
    ))
}

impl Exporter {
    /// Starts exporting to `endpoint` (`None` when it is empty: off).
    ///
    /// # Errors
    /// The endpoint is not usable (see [`parse_endpoint`]) or the SDK's
    /// exporter cannot be built.
    pub fn start(endpoint: &str) -> Result<Option<Exporter>, EndpointError> {
        if endpoint.is_empty() {
            return Ok(None);
        }
        let (addr, url) = parse_endpoint(endpoint)?;
        let failed_requests = Arc::new(AtomicU64::new(0));
        let client = PlainHttp {
            addr,
            failed_requests: failed_requests.clone(),
        };
        let exporter = opentelemetry_otlp::LogExporter::builder()
            .with_http()
            .with_http_client(client)
            .with_endpoint(url.clone())
            .with_timeout(REQUEST_TIMEOUT)
            .build()
            .map_err(|source| EndpointError::Build {
                endpoint: endpoint.to_string(),
                source,
            })?;
        let resource = opentelemetry_sdk::Resource::builder_empty()
            .with_service_name("agentsh")
            .build();
        let provider = SdkLoggerProvider::builder()
            .with_resource(resource)
            .with_batch_exporter(exporter)
            .build();
        let logger = provider.logger("agentsh.audit");
        tracing::info!(endpoint = %url, "audit events are exported as OTLP logs");
        Ok(Some(Exporter {
            provider,
            logger,
            failed_requests,
            endpoint: url,
        }))
    }

    /// Queues an audit event for export: `line` is its JSON line.
    pub fn export(&self, session_id: &str, id: u64, line: &str) {
        let v: serde_json::Value = serde_json::from_str(line).unwrap_or_default();
        let kind = v["type"].as_str().unwrap_or("event").to_string();
        let mut r = self.logger.create_log_record();
        r.set_event_name(event_name(&kind));
        r.set_timestamp(std::time::SystemTime::now());
        let deny = v["decision"].as_str() == Some("deny");
        r.set_severity_number(if deny { Severity::Warn } else { Severity::Info });
        r.set_severity_text(if deny { "WARN" } else { "INFO" });
        r.set_body(AnyValue::String(line.to_string().into()));
        r.add_attribute("agentsh.session.id", session_id.to_string());
        r.add_attribute("agentsh.event.id", id as i64);
        r.add_attribute("agentsh.event.type", kind);
        for key in ["decision", "rule"] {
            if let Some(s) = v[key].as_str() {
                r.add_attribute(format!("agentsh.{key}"), s.to_string());
            }
        }
        self.logger.emit(r);
    }

    /// Requests that failed since start (each also in the server log).
    pub fn failed_requests(&self) -> u64 {
        self.failed_requests.load(Ordering::Relaxed)
    }

    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// Sends what is queued, waiting for the exporter, and ends the export
    /// (at a stop: the SDK then also logs how many records it dropped).
    pub fn flush(&self) {
        if let Err(e) = self.provider.shutdown_with_timeout(REQUEST_TIMEOUT) {
            tracing::warn!("audit export to OTLP: sending what was queued at stop failed: {e}");
        }
    }
}

/// `event.name` for an event type: a static string per type, as the SDK
/// wants one.
fn event_name(kind: &str) -> &'static str {
    match kind {
        "execve" => "agentsh.execve",
        "connect" => "agentsh.connect",
        "dns" => "agentsh.dns",
        "wrap_init" => "agentsh.wrap_init",
        "handoff" => "agentsh.handoff",
        "unsupervised_run" => "agentsh.unsupervised_run",
        "signal" => "agentsh.signal",
        "admin_session" => "agentsh.admin_session",
        "session" => "agentsh.session",
        _ => "agentsh.event",
    }
}

/// A blocking HTTP/1.1 client for the exporter's POSTs: one connection per
/// request (`Connection: close`), a timeout on every step. Runs on the
/// batch processor's own thread.
#[derive(Debug)]
struct PlainHttp {
    /// `host:port` to connect to.
    addr: String,
    failed_requests: Arc<AtomicU64>,
}

impl PlainHttp {
    fn send(
        &self,
        request: &http::Request<bytes::Bytes>,
    ) -> Result<http::Response<bytes::Bytes>, SendError> {
        use std::net::ToSocketAddrs;
        let target = self
            .addr
            .to_socket_addrs()
            .map_err(|source| SendError::Resolve {
                addr: self.addr.clone(),
                source,
            })?
            .next()
            .ok_or_else(|| SendError::NoAddress(self.addr.clone()))?;
        let mut s = std::net::TcpStream::connect_timeout(&target, REQUEST_TIMEOUT)
            .map_err(|source| SendError::Connect { target, source })?;
        s.set_read_timeout(Some(REQUEST_TIMEOUT))
            .and_then(|()| s.set_write_timeout(Some(REQUEST_TIMEOUT)))
            .map_err(SendError::SetTimeout)?;
        let path = request
            .uri()
            .path_and_query()
            .map_or("/", http::uri::PathAndQuery::as_str);
        let mut head = format!(
            "{} {path} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\nContent-Length: {}\r\n",
            request.method(),
            self.addr,
            request.body().len()
        );
        for (k, v) in request.headers() {
            if k == http::header::HOST || k == http::header::CONTENT_LENGTH {
                continue;
            }
            if let Ok(v) = v.to_str() {
                head.push_str(&format!("{k}: {v}\r\n"));
            }
        }
        head.push_str("\r\n");
        s.write_all(head.as_bytes())
            .and_then(|()| s.write_all(request.body()))
            .map_err(|source| SendError::Write { target, source })?;
        let mut raw = Vec::new();
        s.take(MAX_RESPONSE)
            .read_to_end(&mut raw)
            .map_err(|source| SendError::Read { target, source })?;
        parse_response(&raw)
    }
}

/// A whole HTTP/1.1 response (the server closed the connection) as
/// [`http::Response`].
fn parse_response(raw: &[u8]) -> Result<http::Response<bytes::Bytes>, SendError> {
    let end = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or(SendError::NoEndOfHeaders)?;
    let head = std::str::from_utf8(&raw[..end]).map_err(|_| SendError::HeadNotText)?;
    let status: u16 = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| SendError::NoStatus(head.lines().next().unwrap_or("").to_string()))?;
    let mut body = &raw[end + 4..];
    for line in head.lines().skip(1) {
        if let Some((k, v)) = line.split_once(':') {
            if k.trim().eq_ignore_ascii_case("content-length") {
                if let Ok(n) = v.trim().parse::<usize>() {
                    body = &body[..n.min(body.len())];
                }
            }
        }
    }
    http::Response::builder()
        .status(status)
        .body(bytes::Bytes::copy_from_slice(body))
        .map_err(SendError::Response)
}

impl opentelemetry_http::HttpClient for PlainHttp {
    // What `#[async_trait]` makes of the trait's `async fn`, written out:
    // the work is blocking and done before the future is returned (the
    // batch processor's thread runs it; nothing else waits on it).
    fn send_bytes<'a, 'b>(
        &'a self,
        request: http::Request<bytes::Bytes>,
    ) -> std::pin::Pin<
        Box<
            dyn std::future::Future<
                    Output = Result<http::Response<bytes::Bytes>, opentelemetry_http::HttpError>,
                > + Send
                + 'b,
        >,
    >
    where
        'a: 'b,
        Self: 'b,
    {
        let result = self.send(&request).map_err(|e| {
            let n = self.failed_requests.fetch_add(1, Ordering::Relaxed) + 1;
            tracing::warn!(failures = n, "audit export to OTLP failed: {e}");
            opentelemetry_http::HttpError::from(e)
        });
        let result = result.inspect(|r| {
            if !r.status().is_success() {
                let n = self.failed_requests.fetch_add(1, Ordering::Relaxed) + 1;
                tracing::warn!(
                    failures = n,
                    status = r.status().as_u16(),
                    "audit export to OTLP failed: the collector answered {}",
                    r.status()
                );
            }
        });
        Box::pin(std::future::ready(result))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_are_plain_http_with_the_logs_path_added() {
        assert_eq!(
            parse_endpoint("http://127.0.0.1:4318").unwrap(),
            (
                "127.0.0.1:4318".into(),
                "http://127.0.0.1:4318/v1/logs".into()
            )
        );
        assert_eq!(
            parse_endpoint("http://collector/otlp/v1/logs").unwrap(),
            (
                "collector:80".into(),
                "http://collector:80/otlp/v1/logs".into()
            )
        );
        assert_eq!(
            parse_endpoint("http://[::1]:4318/").unwrap().0,
            "[::1]:4318"
        );
        let https = parse_endpoint("https://otel.example:4318")
            .unwrap_err()
            .to_string();
        assert!(https.contains("https is not built in"), "{https}");
        assert!(parse_endpoint("127.0.0.1:4318").is_err());
        assert!(parse_endpoint("http://:4318").is_err());
        assert!(parse_endpoint("http://host:port").is_err());
        assert!(parse_endpoint("http://user:pw@host:1").is_err());
    }

    #[test]
    fn a_response_is_read_to_its_length() {
        let r = parse_response(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nokEXTRA").unwrap();
        assert_eq!(r.status(), 200);
        assert_eq!(&r.body()[..], b"ok");
        assert!(parse_response(b"HTTP/1.1 200 OK\r\n").is_err());
        assert!(parse_response(b"garbage\r\n\r\n").is_err());
    }
}
