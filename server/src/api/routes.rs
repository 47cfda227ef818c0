//! The API's routes (see the `api` module doc for who may call which).
//!
//! Errors are JSON `{"error": "..."}` with a 4xx/5xx status, never a guess.

use super::answer::{error, fail, json, read_body, read_json, Failure, Resp};
use super::peer::Peer;
use super::state::Api;
use crate::limits::Kind;
use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::header::AUTHORIZATION;
use hyper::{Method, Request, Response, StatusCode};
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

/// The longest `?wait=` a long-poll may ask for.
const MAX_WAIT: Duration = Duration::from_secs(60);

/// Serves one request; never fails (errors are responses).
///
/// # Errors
/// None: the `Result` is hyper's service shape.
/// Another user's requests wait for their pace
/// (`limits::REQUESTS_PER_SEC`); root's never do.
async fn paced(api: &Api, peer: &Peer) {
    if let Some(wait) = api.limits.pace(peer.key()) {
        tokio::time::sleep(wait).await;
    }
}

pub async fn handle(api: Arc<Api>, peer: Peer, req: Request<Incoming>) -> Result<Resp, Infallible> {
    paced(&api, &peer).await;
    let method = req.method().clone();
    let path = req.uri().path().to_string();
    let query = req.uri().query().unwrap_or("").to_string();
    let segs: Vec<&str> = path.trim_matches('/').split('/').collect();
    let resp = match (&method, segs.as_slice()) {
        (&Method::GET, ["healthz"]) => healthz(&api),
        (&Method::POST, ["api", "v1", "sessions", sid, "wrap-init"]) => {
            super::wrap_init::wrap_init(api, peer, sid.to_string(), req).await
        }
        _ => match operator(&api, &peer, &req).await {
            Err(r) => r.into(),
            Ok(requester) => match (&method, segs.as_slice()) {
                (&Method::GET, ["api", "v1", "sessions"]) => super::sessions::list(&api),
                (&Method::GET, ["api", "v1", "sessions", sid]) => super::sessions::show(&api, sid),
                (&Method::POST, ["api", "v1", "sessions", sid, "end"]) => {
                    super::sessions::end(&api, &requester, sid)
                }
                (&Method::DELETE, ["api", "v1", "sessions", sid]) => {
                    let force = query_param(&query, "force") == Some("true");
                    super::sessions::delete(api.clone(), requester, sid.to_string(), force).await
                }
                (&Method::GET, ["api", "v1", "status"]) => {
                    match serde_json::to_value(&api.detected) {
                        Ok(v) => json(
                            200,
                            &serde_json::json!({
                                "host": v,
                                "policy": api
                                    .sessions
                                    .get("default")
                                    .map(|s| s.setup().policy_name.clone()),
                                // A log that cannot be written is an operator's
                                // first question (issue 24).
                                "audit": {
                                    "writable": api.audit.healthy(),
                                    "write_failures": api.audit.write_failures(),
                                    "on_failure": format!("{:?}", api.config.audit.on_failure)
                                        .to_lowercase(),
                                    "otlp": api.audit.export_status().map(|(endpoint, failed)| {
                                        serde_json::json!({
                                            "endpoint": endpoint,
                                            "failed_requests": failed,
                                        })
                                    }),
                                },
                            }),
                        ),
                        Err(e) => error(500, format!("cannot serialize the status: {e}")),
                    }
                }
                (&Method::POST, ["api", "v1", "sessions"]) => match read_json(req).await {
                    Ok(v) => super::sessions::create(api.clone(), requester, v).await,
                    Err(e) => e.into(),
                },
                (&Method::GET, ["api", "v1", "sessions", sid, "events"]) => {
                    events(&api, &peer, sid, &query).await
                }
                (&Method::POST, ["api", "v1", "admin-sessions"]) => match read_json(req).await {
                    Ok(v) => admin_session(&api, &requester, &v),
                    Err(e) => e.into(),
                },
                (&Method::POST, ["api", "v1", "policy", "reload"]) => {
                    policy_reload(api.clone(), &requester).await
                }
                (&Method::GET, ["api", "v1", "approvals"]) => {
                    list_approvals(&api, &peer, &query).await
                }
                (&Method::POST, ["api", "v1", "approvals", id]) => {
                    decide_approval(api.clone(), peer, requester, id.to_string(), req).await
                }
                _ => error(404, format!("no route for {method} {path}")),
            },
        },
    };
    Ok(resp)
}

/// `POST /api/v1/policy/reload` (see `reload`): 200 with what was
/// reloaded, or 400 naming why nothing was.
async fn policy_reload(api: Arc<Api>, requester: &crate::approval::Requester) -> Resp {
    let (uid, pid) = match requester {
        crate::approval::Requester::Operator { uid, pid, .. } => (*uid, *pid),
        _ => (0, 0),
    };
    let by = super::reload::By {
        how: "api",
        uid,
        pid,
    };
    match tokio::task::spawn_blocking(move || super::reload::reload(&api, by)).await {
        Ok(Ok(done)) => match serde_json::to_value(&done) {
            Ok(v) => json(200, &v),
            Err(e) => error(500, format!("cannot serialize the reload's answer: {e}")),
        },
        Ok(Err(e)) => error(400, format!("policy reload refused, nothing changed: {e}")),
        Err(e) => error(500, format!("the reload did not finish: {e}")),
    }
}

/// `GET /healthz`: 200 `ok` when shells can be supervised; 503 with
/// `{"error", "ready": false, "permanent"}` otherwise (`permanent`: it will
/// not become ready by waiting, e.g. a missing capability).
fn healthz(api: &Api) -> Resp {
    use crate::readiness::Readiness;
    match api.gate.get() {
        Readiness::Ready => {
            let mut r = Response::new(Full::new(Bytes::from_static(b"ok\n")));
            *r.status_mut() = StatusCode::OK;
            r
        }
        Readiness::Starting(why) => json(
            503,
            &serde_json::json!({ "error": why, "ready": false, "permanent": false }),
        ),
        Readiness::Unable(why) => json(
            503,
            &serde_json::json!({
                "error": format!("agentsh cannot supervise shells here: {why}"),
                "ready": false,
                "permanent": true,
            }),
        ),
    }
}

/// Every route but `/healthz` and wrap-init: uid 0 on the Unix socket, the
/// token on TCP.
/// The operator routes' gate; returns who the operator is.
async fn operator(
    api: &Arc<Api>,
    peer: &Peer,
    req: &Request<Incoming>,
) -> Result<crate::approval::Requester, Failure> {
    use crate::approval::Requester;
    token_or_uid0(api, peer, req)?;
    let addr = match *peer {
        // Checked against the trees when it connected (see `api`).
        Peer::Local(c) => {
            return Ok(Requester::Operator {
                uid: c.uid,
                pid: c.pid,
                comm: String::new(),
            })
        }
        Peer::Tcp(addr) => addr,
    };
    // A TCP peer holding the token may still be a process of a supervised
    // tree (a root tree can read the token file where the policy does not
    // hide it): map the connection to its processes and refuse those.
    let port = api.config.tcp_port().unwrap_or(0);
    let approvals = api.approvals.clone();
    let who = tokio::task::spawn_blocking(move || approvals.identify(addr, port))
        .await
        .unwrap_or_else(|_| Requester::Unknown("identification failed".into()));
    match who {
        Requester::Operator { .. } | Requester::Remote(_) => Ok(who),
        Requester::InTree { why, .. } => {
            tracing::warn!("API call from inside a supervised tree refused: {why}");
            Err(fail(
                403,
                format!("no route serves a supervised process tree ({why})"),
            ))
        }
        Requester::Unknown(why) => Err(fail(
            403,
            format!("the requesting process cannot be identified ({why})"),
        )),
    }
}

fn token_or_uid0(api: &Api, peer: &Peer, req: &Request<Incoming>) -> Result<(), Failure> {
    // SAFETY: geteuid cannot fail.
    let own = unsafe { libc::geteuid() };
    match peer {
        // Root, or the user the server runs as (a standalone `agentsh wrap`:
        // whoever ran it is its operator; its trees, the same uid, were
        // refused when they connected, and cannot make this socket type).
        Peer::Local(c) if c.uid == 0 || c.uid == own => Ok(()),
        Peer::Local(c) => Err(fail(
            403,
            format!(
                "this route is for the operator (uid 0, or the server's own uid {own}); uid {} \
                 may call only wrap-init and /healthz",
                c.uid
            ),
        )),
        Peer::Tcp(_) => {
            let bearer = req
                .headers()
                .get(AUTHORIZATION)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.strip_prefix("Bearer "));
            match bearer {
                Some(t) if token_matches(&api.token, t) => Ok(()),
                _ => Err(fail(
                    401,
                    "the TCP API needs the operator token: Authorization: Bearer <contents of \
                     <state_dir>/approval.token> (root-only; the agentsh CLI reads it), or use \
                     the Unix socket as root",
                )),
            }
        }
    }
}

/// Constant time in the token's length.
fn token_matches(token: &str, presented: &str) -> bool {
    let (a, b) = (token.as_bytes(), presented.trim().as_bytes());
    !a.is_empty()
        && a.len() == b.len()
        && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// `POST /api/v1/admin-sessions`: records an `admin_session` event for the
/// operator process asking (the shim as `admin-shell`; see its module doc).
fn admin_session(api: &Api, who: &crate::approval::Requester, v: &serde_json::Value) -> Resp {
    let crate::approval::Requester::Operator { uid, pid, .. } = who else {
        return error(
            403,
            "only a local process outside every tree records an admin session",
        );
    };
    let ppid = crate::tracee::proc_stat(*pid).map_or(0, |s| s.ppid);
    let parent_comm = std::fs::read_to_string(format!("/proc/{ppid}/comm"))
        .map(|s| s.trim().to_string())
        .unwrap_or_default();
    let event = crate::audit::AdminSessionEvent {
        pid: *pid,
        ppid,
        uid: *uid,
        parent_comm,
        tty: v["tty"].as_str().unwrap_or("").chars().take(256).collect(),
    };
    tracing::warn!(pid, uid, "admin session started: unsupervised, by design");
    api.audit
        .record("admin", crate::audit::EventBody::AdminSession(event));
    json(201, &serde_json::json!({ "recorded": true }))
}

pub(super) fn query_param<'a>(query: &'a str, key: &str) -> Option<&'a str> {
    query
        .split('&')
        .filter_map(|kv| kv.split_once('='))
        .find(|(k, _)| *k == key)
        .map(|(_, v)| v)
}

/// `?after=N&wait=SECS`.
fn after_and_wait(query: &str, what: &str) -> Result<(u64, Duration), Failure> {
    let after = match query_param(query, "after").map(str::parse::<u64>) {
        None => 0,
        Some(Ok(n)) => n,
        Some(Err(_)) => return Err(fail(400, format!("after must be {what} (a whole number)"))),
    };
    let wait = match query_param(query, "wait").map(str::parse::<u64>) {
        None => Duration::ZERO,
        Some(Ok(n)) => Duration::from_secs(n).min(MAX_WAIT),
        Some(Err(_)) => return Err(fail(400, "wait must be a number of seconds")),
    };
    Ok((after, wait))
}

async fn events(api: &Api, peer: &Peer, sid: &str, query: &str) -> Resp {
    let (after, wait) = match after_and_wait(query, "an event id") {
        Ok(v) => v,
        Err(r) => return r.into(),
    };
    let ev = if wait.is_zero() {
        api.audit.events(sid, after)
    } else {
        let _slot = match api.limits.take(Kind::LongPoll, peer.key()) {
            Ok(s) => s,
            Err(e) => return error(429, e.to_string()),
        };
        api.audit.wait_events(sid, after, wait).await
    };
    match serde_json::to_value(&ev) {
        Ok(v) => json(200, &v),
        Err(e) => error(500, format!("cannot serialize events: {e}")),
    }
}

async fn list_approvals(api: &Api, peer: &Peer, query: &str) -> Resp {
    let (after, wait) = match after_and_wait(query, "a request seq") {
        Ok(v) => v,
        Err(r) => return r.into(),
    };
    let approvals = &api.approvals;
    let pending = if wait.is_zero() {
        approvals.pending(after)
    } else {
        let _slot = match api.limits.take(Kind::LongPoll, peer.key()) {
            Ok(s) => s,
            Err(e) => return error(429, e.to_string()),
        };
        approvals.wait_pending(after, wait).await
    };
    match serde_json::to_value(&pending) {
        Ok(v) => json(200, &v),
        Err(e) => error(500, format!("cannot serialize approvals: {e}")),
    }
}

/// `{"decision": "approve"|"deny", "reason": "...", "approver": "..."}`
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct DecisionBody {
    decision: String,
    #[serde(default)]
    reason: Option<String>,
    /// A name the operator gives; recorded next to what the server saw.
    #[serde(default)]
    approver: Option<String>,
}

async fn decide_approval(
    api: Arc<Api>,
    peer: Peer,
    requester: crate::approval::Requester,
    id: String,
    req: Request<Incoming>,
) -> Resp {
    use crate::approval::{DecideError, Requester};
    // A Unix operator also passes the stricter test (filters, not only
    // lineage): a decision from a tree would let it approve itself.
    let requester = match peer {
        Peer::Local(c) => {
            let trees = api.trees.clone();
            tokio::task::spawn_blocking(move || match trees.in_tree_or_filtered(c.pid) {
                Some(why) => Requester::InTree { pid: c.pid, why },
                None => Requester::Operator {
                    uid: c.uid,
                    pid: c.pid,
                    comm: std::fs::read_to_string(format!("/proc/{}/comm", c.pid))
                        .map(|s| s.trim().to_string())
                        .unwrap_or_default(),
                },
            })
            .await
            .unwrap_or_else(|_| Requester::Unknown("identification failed".into()))
        }
        Peer::Tcp(_) => requester,
    };
    match &requester {
        Requester::Operator { .. } | Requester::Remote(_) => {}
        Requester::InTree { why, .. } => {
            tracing::warn!(%id, "approval decision from inside a supervised tree refused: {why}");
            return error(
                403,
                format!("decisions cannot come from a supervised process tree ({why})"),
            );
        }
        Requester::Unknown(why) => {
            tracing::warn!(%id, "approval decision from an unidentified peer refused: {why}");
            return error(
                403,
                format!("the requesting process cannot be identified ({why})"),
            );
        }
    }
    let body = match read_body::<DecisionBody>(req).await {
        Ok(b) => b,
        Err(e) => return e.into(),
    };
    let approve = match body.decision.as_str() {
        "approve" => true,
        "deny" => false,
        other => {
            return error(
                400,
                format!("decision must be \"approve\" or \"deny\", not {other:?}"),
            )
        }
    };
    let mut approver = requester.label();
    if let Some(name) = body.approver.filter(|n| !n.trim().is_empty()) {
        approver = format!("{} via {approver}", name.trim());
    }
    match api
        .approvals
        .decide(&id, approve, approver.clone(), body.reason)
    {
        Ok(()) => json(
            200,
            &serde_json::json!({
                "id": id,
                "decision": body.decision,
                "approver": approver,
            }),
        ),
        Err(e @ DecideError::NotFound(_)) => error(404, e.to_string()),
        Err(e @ DecideError::AlreadyDecided(_)) => error(409, e.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_match_exactly() {
        let t = "ab".repeat(32);
        assert!(token_matches(&t, &t));
        assert!(token_matches(&t, &format!(" {t}\n")));
        assert!(!token_matches(&t, &"ab".repeat(31)));
        assert!(!token_matches(&t, &"ac".repeat(32)));
        assert!(!token_matches("", ""));
    }

    #[test]
    fn long_polls_are_capped() {
        let (a, w) = after_and_wait("after=3&wait=600", "x").unwrap();
        assert_eq!((a, w), (3, MAX_WAIT));
        assert!(after_and_wait("after=x", "x").is_err());
        assert!(after_and_wait("wait=-1", "x").is_err());
    }
}
