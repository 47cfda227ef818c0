//! One request through the proxy: the name it is for must be one the
//! egress rule names (and, over TLS, the name the handshake was for); its
//! method and path are judged (`policy::http_loose::judge_loosely`); a refused
//! one gets a 403 whose body says which rule and why, and never reaches the
//! upstream; a held one waits for an operator; an allowed one gets the
//! rule's headers (replacing the request's own of those names) and goes on
//! to the destination the tree connected to. Every request is one `http`
//! event: method, host, path (no query), rule, decision, status; never a
//! header value or a body.
//!
//! Failure modes: a secret that cannot be read refuses the request (403,
//! rule `http_secret`, the reason without the value); an upstream that
//! cannot be reached or fails the request: 502 (rule `http_upstream`).

use super::book::{names_host, Booking};
use super::hold;
use super::redact::{self, Redactor};
use super::state::Proxy;
use super::upstream::{Sender, UpstreamError};
use crate::audit::{Action, EventBody, HttpEvent};
use crate::config::secrets::{self, SecretSource};
use crate::policy::http::{HttpVerdict, Inject, Piece};
use crate::policy::http_loose::{judge_loosely, OVERRIDE_HEADERS};
use crate::policy::Decision;
use crate::vocab::Refusal;
use bytes::Bytes;
use http_body_util::{combinators::BoxBody, BodyExt, Full};
use hyper::body::Incoming;
use hyper::header::{HeaderName, HeaderValue};
use hyper::{Request, Response, StatusCode};
use std::collections::BTreeMap;
use std::sync::Arc;

pub(super) type Body = BoxBody<Bytes, hyper::Error>;

/// A request of a connection refused whatever its method and path.
pub(super) const RULE_HOST: &str = Refusal::HttpHost.rule();
pub(super) const RULE_SECRET: &str = Refusal::HttpSecret.rule();
pub(super) const RULE_UPSTREAM: &str = Refusal::HttpUpstream.rule();

/// What every request of one connection shares.
pub(super) struct Conn {
    pub proxy: Arc<Proxy>,
    pub booking: Booking,
    /// The name the TLS handshake was for (`None`: plain HTTP).
    pub tls_name: Option<String>,
    /// Why the connection's name is refused (every request gets a 403).
    pub refused_name: Option<String>,
    /// The connection onwards, or why there is none.
    pub upstream: Result<Sender, UpstreamError>,
    /// The client speaks HTTP/2 to us.
    pub h2: bool,
}

/// What one request came to, for its event.
struct Outcome {
    rule: String,
    decision: Decision,
    status: Option<u16>,
    injected: Vec<String>,
    message: Option<String>,
    approval: Option<hold::Ended>,
}

/// The request's name: its authority (HTTP/2, absolute form) or Host
/// header, lower case, without a port.
fn host_of(req: &Request<Incoming>) -> Option<String> {
    let raw = req
        .uri()
        .authority()
        .map(|a| a.host().to_string())
        .or_else(|| {
            let h = req.headers().get(hyper::header::HOST)?.to_str().ok()?;
            let h = h.trim();
            Some(match h.strip_prefix('[') {
                Some(v6) => v6.split(']').next().unwrap_or_default().to_string(),
                None => h.rsplit_once(':').map_or(h, |(n, _)| n).to_string(),
            })
        })?;
    let h = raw.trim_end_matches('.').to_ascii_lowercase();
    (!h.is_empty()).then_some(h)
}

fn text(status: StatusCode, body: String) -> Response<Body> {
    let mut r = Response::new(Full::new(Bytes::from(body)).map_err(|n| match n {}).boxed());
    *r.status_mut() = status;
    r.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    r
}

/// Serves one request (never an error: what goes wrong is a response).
pub(super) async fn handle(
    c: Arc<Conn>,
    req: Request<Incoming>,
) -> Result<Response<Body>, std::convert::Infallible> {
    let method = req.method().as_str().to_string();
    let path = req.uri().path().to_string();
    let host = host_of(&req).unwrap_or_default();
    let scheme = if c.tls_name.is_some() {
        "https"
    } else {
        "http"
    };
    let b = &c.booking;
    let shown = format!("{method} {scheme}://{host}{path}");
    let refuse = |rule: &str, why: String| {
        (
            Outcome {
                rule: rule.to_string(),
                decision: Decision::Deny,
                status: None,
                injected: Vec::new(),
                message: Some(why.clone()),
                approval: None,
            },
            text(
                StatusCode::FORBIDDEN,
                format!(
                    "agentsh: {shown} denied (rule {rule}, egress rule {}): {why}\n",
                    b.rule
                ),
            ),
        )
    };
    let (outcome, resp) = if let Some(why) = &c.refused_name {
        refuse(RULE_HOST, why.clone())
    } else if host.is_empty() {
        refuse(RULE_HOST, "the request names no host".into())
    } else if let Some(tls) = c
        .tls_name
        .as_deref()
        .filter(|t| !t.eq_ignore_ascii_case(&host))
    {
        refuse(
            RULE_HOST,
            format!("the request is for {host} on a connection made for {tls}"),
        )
    } else if !names_host(&b.hosts, &host) {
        refuse(
            RULE_HOST,
            format!("{host} is not among the hosts of egress rule {}", b.rule),
        )
    } else {
        judged(&c, req, &method, &host, &shown).await
    };
    record(&c, &method, scheme, &host, &path, outcome);
    Ok(resp)
}

/// A request whose name is the connection's: judged by method and path.
async fn judged(
    c: &Arc<Conn>,
    req: Request<Incoming>,
    method: &str,
    host: &str,
    shown: &str,
) -> (Outcome, Response<Body>) {
    let b = &c.booking;
    let v = verdict(b, &req, method);
    let deny = |rule: &str, why: String, approval: Option<hold::Ended>| {
        (
            Outcome {
                rule: rule.to_string(),
                decision: Decision::Deny,
                status: None,
                injected: Vec::new(),
                message: Some(why.clone()),
                approval,
            },
            text(
                StatusCode::FORBIDDEN,
                format!(
                    "agentsh: {shown} denied (rule {rule}, egress rule {}): {why}\n",
                    b.rule
                ),
            ),
        )
    };
    let mut approval = None;
    match v.decision {
        Decision::Allow => {}
        Decision::Approve => {
            let ended = hold::ask(&c.proxy, b, shown, &v.rule).await;
            if !ended.allow {
                let why = ended.why();
                return deny(&v.rule, why, Some(ended));
            }
            approval = Some(ended);
        }
        _ => {
            let why = v
                .why
                .clone()
                .unwrap_or_else(|| "the http rule denies it".into());
            return deny(&v.rule, why, None);
        }
    }
    let decision = v.decision;
    let mut req = req;
    let (injected, values) = match inject(&c.proxy, b, &mut req) {
        Ok(got) => got,
        Err(why) => {
            let (mut o, r) = deny(RULE_SECRET, why.to_string(), approval);
            o.decision = Decision::Deny;
            return (o, r);
        }
    };
    let scan =
        Redactor::new(&values).map(|r| (r, redacted_event(c, method, host, req.uri().path())));
    let f = forward(c, req, host, scan).await;
    let (status, resp, message) = (f.status, f.resp, f.message);
    // No answer from the upstream (it cannot be reached or verified, or it
    // failed the request), or one that cannot be checked for the
    // credential: agentsh's own 502, audited as its refusal.
    let (rule, decision) = match (&status, &message, f.unscannable) {
        (None, Some(_), true) => (RULE_SECRET.to_string(), Decision::Deny),
        (None, Some(_), false) => (RULE_UPSTREAM.to_string(), Decision::Deny),
        _ => (v.rule, decision),
    };
    let o = Outcome {
        rule,
        decision,
        status,
        injected,
        message,
        approval,
    };
    (o, resp)
}

/// The request judged by its egress rule's `http:`, as written and as a
/// lax upstream could read it (its path, its method-override headers).
fn verdict(b: &Booking, req: &Request<Incoming>, method: &str) -> HttpVerdict {
    let overrides: Vec<String> = OVERRIDE_HEADERS
        .iter()
        .flat_map(|h| req.headers().get_all(*h))
        .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
        .collect();
    let target = req.uri().path_and_query().map_or("/", |p| p.as_str());
    judge_loosely(&b.http, method, target, &overrides)
}

/// Why a rule's header cannot be set: the request is refused (rule
/// `http_secret`), the reason said without the value.
#[derive(Debug, thiserror::Error)]
enum InjectError {
    #[error("the credential cannot be added: {0}")]
    Secret(#[source] secrets::SecretError),
    #[error("header {name}: {source}")]
    Name {
        name: String,
        #[source]
        source: hyper::header::InvalidHeaderName,
    },
    /// Never the value itself: it may hold the secret.
    #[error("header {0}: its value is not a header value")]
    Value(String),
}

/// Sets the rule's headers (replacing the request's own); their names.
fn inject(
    proxy: &Proxy,
    b: &Booking,
    req: &mut Request<Incoming>,
) -> Result<(Vec<String>, Vec<String>), InjectError> {
    let mut names = Vec::new();
    let mut values = Vec::new();
    for i in &b.http.inject {
        let (name, v, secrets) = header(&proxy.secrets, i)?;
        req.headers_mut().remove(&name);
        req.headers_mut().insert(name, v);
        names.push(i.name.clone());
        values.extend(secrets);
    }
    if !values.is_empty() {
        // What comes back is scanned for them: it must be scannable.
        req.headers_mut().insert(
            hyper::header::ACCEPT_ENCODING,
            HeaderValue::from_static("identity"),
        );
    }
    Ok((names, values))
}

/// The header `i` names, its value with the secrets it names filled in
/// (marked sensitive: never logged), and those secrets' values.
fn header(
    secrets: &BTreeMap<String, SecretSource>,
    i: &Inject,
) -> Result<(HeaderName, HeaderValue, Vec<String>), InjectError> {
    let mut value = String::new();
    let mut used = Vec::new();
    for p in &i.value {
        match p {
            Piece::Text(t) => value.push_str(t),
            Piece::Secret(s) => {
                let v = secrets::secret(secrets, s).map_err(InjectError::Secret)?;
                value.push_str(&v);
                used.push(v);
            }
        }
    }
    let name = HeaderName::from_bytes(i.name.as_bytes()).map_err(|source| InjectError::Name {
        name: i.name.clone(),
        source,
    })?;
    let mut v = HeaderValue::from_str(&value).map_err(|_| InjectError::Value(i.name.clone()))?;
    v.set_sensitive(true);
    Ok((name, v, used))
}

/// Hop-by-hop headers, never forwarded (but an upgrade's own).
const HOP: &[&str] = &[
    "connection",
    "proxy-connection",
    "keep-alive",
    "te",
    "transfer-encoding",
    "upgrade",
    "proxy-authorization",
    "proxy-authenticate",
];

/// A WebSocket upgrade: the one upgrade relayed. Any other (`h2c`: HTTP/2
/// in the clear, whose requests would go by unjudged) is sent on without
/// its upgrade headers, and answered as the HTTP/1.1 request it also is.
fn is_upgrade(h: &hyper::HeaderMap) -> bool {
    h.get(hyper::header::UPGRADE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| {
            v.split(',')
                .all(|t| t.trim().eq_ignore_ascii_case("websocket"))
        })
        && h.get(hyper::header::CONNECTION)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| {
                v.split(',')
                    .any(|t| t.trim().eq_ignore_ascii_case("upgrade"))
            })
}

/// What [`forward`] came to.
struct Forwarded {
    /// The upstream's status (`None`: agentsh answered).
    status: Option<u16>,
    resp: Response<Body>,
    /// Why agentsh answered.
    message: Option<String>,
    /// agentsh answered because the response could not be scanned for
    /// the credential it added.
    unscannable: bool,
}

impl Forwarded {
    fn upstream(status: u16, resp: Response<Body>) -> Forwarded {
        Forwarded {
            status: Some(status),
            resp,
            message: None,
            unscannable: false,
        }
    }

    fn ours(status: StatusCode, text_: String, why: String, unscannable: bool) -> Forwarded {
        Forwarded {
            status: None,
            resp: text(status, text_),
            message: Some(why),
            unscannable,
        }
    }
}

/// The `http` event of a response in which the credential was found and
/// overwritten, recorded when its body ends (nothing found: none).
fn redacted_event(c: &Arc<Conn>, method: &str, host: &str, path: &str) -> redact::OnEnd {
    let c = c.clone();
    let (method, host, path) = (method.to_string(), host.to_string(), path.to_string());
    Box::new(move |found| {
        if found == 0 {
            return;
        }
        let scheme = if c.tls_name.is_some() {
            "https"
        } else {
            "http"
        };
        let why = format!(
            "the response held the credential agentsh added to the request ({found} times): \
             each overwritten with '*' before the tree saw it"
        );
        tracing::warn!(session = %c.booking.session_id, %host, %path, found, "{why}");
        let o = Outcome {
            rule: RULE_SECRET.to_string(),
            decision: Decision::Allow,
            status: None,
            injected: Vec::new(),
            message: Some(why),
            approval: None,
        };
        record(&c, &method, scheme, &host, &path, o);
    })
}

/// Sends the request on: the upstream's answer (scanned for the added
/// credential when `scan` is given), or agentsh's own and why.
async fn forward(
    c: &Arc<Conn>,
    mut req: Request<Incoming>,
    host: &str,
    scan: Option<(Redactor, redact::OnEnd)>,
) -> Forwarded {
    let upstream = match &c.upstream {
        Ok(u) => u,
        Err(why) => {
            return Forwarded::ours(
                StatusCode::BAD_GATEWAY,
                format!("agentsh: the upstream cannot be reached (rule {RULE_UPSTREAM}): {why}\n"),
                why.to_string(),
                false,
            )
        }
    };
    let upgrade = !c.h2 && !upstream.is_h2() && is_upgrade(req.headers());
    let down_upgrade = upgrade.then(|| hyper::upgrade::on(&mut req));
    let scheme = if c.tls_name.is_some() {
        "https"
    } else {
        "http"
    };
    let (parts, body) = onward(req, upgrade, upstream.is_h2(), scheme, host);
    let mut resp = match upstream.send(Request::from_parts(parts, body)).await {
        Ok(r) => r,
        Err(why) => {
            return Forwarded::ours(
                StatusCode::BAD_GATEWAY,
                format!("agentsh: the upstream failed the request (rule {RULE_UPSTREAM}): {why}\n"),
                why.to_string(),
                false,
            )
        }
    };
    let status = resp.status().as_u16();
    let scan = match screen(resp.headers_mut(), scan) {
        Ok(scan) => scan,
        Err(why) => {
            return Forwarded::ours(
                StatusCode::BAD_GATEWAY,
                format!("agentsh: {status} refused (rule {RULE_SECRET}): {why}\n"),
                why,
                true,
            )
        }
    };
    if let (Some(down), true) = (down_upgrade, status == 101) {
        let up = hyper::upgrade::on(&mut resp);
        tokio::spawn(async move {
            if let (Ok(d), Ok(u)) = (down.await, up.await) {
                let d = hyper_util::rt::TokioIo::new(d);
                let u = hyper_util::rt::TokioIo::new(u);
                redact::tunnel(d, u, scan).await;
            }
        });
        return Forwarded::upstream(status, resp.map(BodyExt::boxed));
    }
    if c.h2 {
        for h in HOP {
            resp.headers_mut().remove(*h);
        }
    }
    let resp = match scan {
        Some((r, on_end)) => resp.map(|b| redact::Redacted::new(b, r, on_end).boxed()),
        None => resp.map(BodyExt::boxed),
    };
    Forwarded::upstream(status, resp)
}

/// The response's headers with the credential overwritten, and the scan
/// to go on with over its body; `Err`: why the body cannot be scanned.
fn screen(
    headers: &mut hyper::HeaderMap,
    scan: Option<(Redactor, redact::OnEnd)>,
) -> Result<Option<(Redactor, redact::OnEnd)>, String> {
    let Some((mut r, on_end)) = scan else {
        return Ok(None);
    };
    if let Some(why) = redact::encoded(headers) {
        return Err(why);
    }
    for v in headers.values_mut() {
        let (out, hit) = r.whole(v.as_bytes());
        if hit {
            *v = HeaderValue::from_bytes(&out).unwrap_or_else(|_| HeaderValue::from_static("*"));
        }
    }
    Ok(Some((r, on_end)))
}

/// The request as it goes on: hop-by-hop headers dropped (an upgrade's
/// own kept), and the target in the upstream's form (absolute for HTTP/2,
/// origin-form with a Host header for HTTP/1.1).
fn onward(
    req: Request<Incoming>,
    upgrade: bool,
    h2: bool,
    scheme: &str,
    host: &str,
) -> (hyper::http::request::Parts, Incoming) {
    let (mut parts, body) = req.into_parts();
    // A chunked body stays chunked to an HTTP/1.1 upstream (hyper frames
    // it again; for a GET it would send none without the header).
    let chunked = !h2
        && !parts.headers.contains_key(hyper::header::CONTENT_LENGTH)
        && parts
            .headers
            .get_all(hyper::header::TRANSFER_ENCODING)
            .iter()
            .any(|v| {
                v.to_str()
                    .is_ok_and(|v| v.to_ascii_lowercase().contains("chunked"))
            });
    let keep = |n: &HeaderName| {
        !HOP.contains(&n.as_str()) || (upgrade && (n == "connection" || n == "upgrade"))
    };
    let headers: Vec<_> = parts
        .headers
        .iter()
        .filter(|(n, _)| keep(n))
        .map(|(n, v)| (n.clone(), v.clone()))
        .collect();
    parts.headers.clear();
    for (n, v) in headers {
        parts.headers.append(n, v);
    }
    if chunked {
        parts.headers.insert(
            hyper::header::TRANSFER_ENCODING,
            HeaderValue::from_static("chunked"),
        );
    }
    let pq = parts
        .uri
        .path_and_query()
        .map_or_else(|| "/".to_string(), |p| p.as_str().to_string());
    let authority = parts
        .uri
        .authority()
        .map(ToString::to_string)
        .or_else(|| {
            parts
                .headers
                .get(hyper::header::HOST)
                .and_then(|h| h.to_str().ok())
                .map(str::to_string)
        })
        .unwrap_or_else(|| host.to_string());
    if h2 {
        parts.headers.remove(hyper::header::HOST);
        parts.version = hyper::Version::HTTP_2;
        parts.uri = format!("{scheme}://{authority}{pq}")
            .parse()
            .unwrap_or_else(|_| parts.uri.clone());
    } else {
        if !parts.headers.contains_key(hyper::header::HOST) {
            if let Ok(v) = HeaderValue::from_str(&authority) {
                parts.headers.insert(hyper::header::HOST, v);
            }
        }
        parts.version = hyper::Version::HTTP_11;
        parts.uri = pq.parse().unwrap_or_else(|_| parts.uri.clone());
    }
    (parts, body)
}

/// The request's one event.
fn record(c: &Conn, method: &str, scheme: &str, host: &str, path: &str, o: Outcome) {
    let b = &c.booking;
    let approved = o.approval.as_ref();
    c.proxy.audit.record(
        &b.session_id,
        EventBody::Http(HttpEvent {
            pid: b.pid,
            method: method.to_string(),
            scheme: scheme.to_string(),
            host: host.to_string(),
            path: path.to_string(),
            ip: b.dest.ip().to_string(),
            port: b.dest.port(),
            egress_rule: b.rule.clone(),
            rule: o.rule,
            decision: if approved.is_some() {
                Decision::Approve
            } else {
                o.decision
            },
            status: o.status,
            injected: o.injected,
            message: o.message,
            effective_action: approved.map(|a| if a.allow { Action::Allow } else { Action::Deny }),
            approval: approved.map(super::hold::Ended::record),
        }),
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    fn inject(name: &str, value: Vec<Piece>) -> Inject {
        Inject {
            name: name.into(),
            value,
        }
    }

    #[test]
    fn a_rules_header_is_set_marked_sensitive() {
        let (name, v, secrets) = header(
            &BTreeMap::new(),
            &inject("x-team", vec![Piece::Text("blue".into())]),
        )
        .unwrap();
        assert!(secrets.is_empty(), "{secrets:?}");
        assert_eq!(name, "x-team");
        assert_eq!(v, "blue");
        assert!(v.is_sensitive());
    }

    #[test]
    fn a_header_that_cannot_be_set_says_why_and_never_the_value() {
        let e = header(
            &BTreeMap::new(),
            &inject("authorization", vec![Piece::Secret("gh".into())]),
        )
        .unwrap_err();
        assert!(
            matches!(&e, InjectError::Secret(secrets::SecretError::Unknown(n)) if n == "gh"),
            "{e:?}"
        );
        assert_eq!(
            e.to_string(),
            "the credential cannot be added: secret \"gh\" is not in the server config's secrets:"
        );

        let e = header(&BTreeMap::new(), &inject("x bad", vec![])).unwrap_err();
        assert!(
            matches!(&e, InjectError::Name { name, .. } if name == "x bad"),
            "{e:?}"
        );
        assert!(e.to_string().starts_with("header x bad: "), "{e}");

        let e = header(
            &BTreeMap::new(),
            &inject("x-token", vec![Piece::Text("s3cr\net".into())]),
        )
        .unwrap_err();
        assert!(
            matches!(&e, InjectError::Value(n) if n == "x-token"),
            "{e:?}"
        );
        assert_eq!(
            e.to_string(),
            "header x-token: its value is not a header value"
        );
        assert!(!e.to_string().contains("s3cr"), "{e}");
    }
}
