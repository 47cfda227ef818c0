//! The HTTP API (tiny_http, a few worker threads).
//!
//! `GET /healthz`, `POST /api/v1/sessions`, `POST /api/v1/sessions/{id}/wrap-init`,
//! `GET /api/v1/sessions/{id}/events[?after=N&wait=SECS]`, `GET /api/v1/sessions`,
//! `GET /api/v1/approvals[?after=SEQ&wait=SECS]` (long-poll), `POST /api/v1/approvals/{id}`
//! (operator only: see `approval`).
//! Errors are JSON `{"error": "..."}` with a 4xx/5xx status, never a guess.

use crate::audit::{AuditLog, EventBody, WrapInitEvent};
use crate::config::Config;
use crate::intake;
use crate::session::Sessions;
use crate::supervisor::SupervisorContext;
use agentsh_proto::{SeccompConfig, WrapInitRequest, WrapInitResponse};
use std::collections::BTreeMap;
use std::io::Read;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;
use tiny_http::{Header, Method, Request, Response};

/// Everything a request handler needs.
pub struct Api {
    pub config: Config,
    pub sessions: Sessions,
    pub audit: Arc<AuditLog>,
    pub supervisor: Arc<SupervisorContext>,
    /// Flags and deadlines of every tree's config (its filter comes from `filters`).
    pub seccomp_config: SeccompConfig,
    /// Compiles (and caches) each tree's seccomp program.
    pub filters: crate::filter::Filters,
    pub policy_name: String,
    /// Compiles the policy's Landlock part per wrap-init (workspace, caller's home).
    pub landlock: crate::policy::landlock::SessionLandlock,
}

const MAX_BODY: u64 = 1 << 20;
const WORKERS: usize = 4;

/// Serves HTTP on `server` until it is closed. Blocks.
pub fn serve(api: Arc<Api>, server: Arc<tiny_http::Server>) {
    let mut handles = Vec::new();
    for i in 0..WORKERS {
        let api = api.clone();
        let server = server.clone();
        let h = std::thread::Builder::new()
            .name(format!("agentsh-http-{i}"))
            .spawn(move || {
                while let Ok(req) = server.recv() {
                    handle(&api, req);
                }
            });
        match h {
            Ok(h) => handles.push(h),
            Err(e) => tracing::error!("cannot start HTTP worker: {e}"),
        }
    }
    for h in handles {
        let _ = h.join();
    }
}

fn json_response(status: u16, body: &serde_json::Value) -> Response<std::io::Cursor<Vec<u8>>> {
    let header = Header::from_bytes(&b"Content-Type"[..], &b"application/json"[..])
        .expect("static header is valid");
    Response::from_data(body.to_string().into_bytes())
        .with_status_code(status)
        .with_header(header)
}

fn error(status: u16, msg: impl Into<String>) -> Response<std::io::Cursor<Vec<u8>>> {
    json_response(status, &serde_json::json!({ "error": msg.into() }))
}

fn handle(api: &Api, mut req: Request) {
    let url = req.url().to_string();
    let (path, query) = url.split_once('?').unwrap_or((url.as_str(), ""));
    let segs: Vec<&str> = path.trim_matches('/').split('/').collect();
    let method = req.method().clone();
    let resp = match (&method, segs.as_slice()) {
        (Method::Get, ["healthz"]) => Response::from_string("ok\n").with_status_code(200),
        (Method::Get, ["api", "v1", "sessions"]) => list_sessions(api),
        (Method::Post, ["api", "v1", "sessions"]) => match read_json(&mut req) {
            Ok(v) => create_session(api, &v),
            Err(e) => e,
        },
        (Method::Post, ["api", "v1", "sessions", sid, "wrap-init"]) => {
            match read_body::<WrapInitRequest>(&mut req) {
                Ok(body) => wrap_init(api, sid, body),
                Err(e) => e,
            }
        }
        (Method::Get, ["api", "v1", "sessions", sid, "events"]) => events(api, sid, query),
        (Method::Get, ["api", "v1", "approvals"]) => list_approvals(api, query),
        (Method::Post, ["api", "v1", "approvals", id]) => decide_approval(api, &mut req, id),
        _ => error(404, format!("no route for {method} {path}")),
    };
    if let Err(e) = req.respond(resp) {
        tracing::debug!("HTTP response not delivered: {e}");
    }
}

type HttpResult<T> = Result<T, Response<std::io::Cursor<Vec<u8>>>>;

fn read_raw(req: &mut Request) -> HttpResult<Vec<u8>> {
    let mut body = Vec::new();
    req.as_reader()
        .take(MAX_BODY + 1)
        .read_to_end(&mut body)
        .map_err(|e| error(400, format!("cannot read request body: {e}")))?;
    if body.len() as u64 > MAX_BODY {
        return Err(error(413, "request body larger than 1 MiB"));
    }
    Ok(body)
}

fn read_body<T: serde::de::DeserializeOwned>(req: &mut Request) -> HttpResult<T> {
    let body = read_raw(req)?;
    serde_json::from_slice(&body).map_err(|e| error(400, format!("invalid JSON body: {e}")))
}

fn read_json(req: &mut Request) -> HttpResult<serde_json::Value> {
    let body = read_raw(req)?;
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(serde_json::json!({}));
    }
    serde_json::from_slice(&body).map_err(|e| error(400, format!("invalid JSON body: {e}")))
}

fn list_sessions(api: &Api) -> Response<std::io::Cursor<Vec<u8>>> {
    let v: Vec<serde_json::Value> = api
        .sessions
        .list()
        .iter()
        .map(|s| {
            serde_json::json!({
                "id": s.id,
                "created": s.created,
                "trees": s.trees.load(Ordering::Relaxed),
                "wrap_inits": s.wrap_inits.load(Ordering::Relaxed),
            })
        })
        .collect();
    json_response(200, &serde_json::Value::Array(v))
}

fn create_session(api: &Api, v: &serde_json::Value) -> Response<std::io::Cursor<Vec<u8>>> {
    let id = v.get("id").and_then(|x| x.as_str()).unwrap_or("default");
    match api.sessions.get_or_create(id) {
        Some(s) => json_response(
            201,
            &serde_json::json!({ "id": s.id, "created": s.created }),
        ),
        None => error(
            400,
            format!("session id {id:?} is not valid: use 1-64 letters, digits, '-', '_', '.'"),
        ),
    }
}

fn wrap_init(api: &Api, sid: &str, body: WrapInitRequest) -> Response<std::io::Cursor<Vec<u8>>> {
    let started = std::time::Instant::now();
    let Some(session) = api.sessions.get_or_create(sid) else {
        return error(400, format!("session id {sid:?} is not valid"));
    };
    let wrapper = api.config.wrapper_binary_path();
    if !wrapper.is_file() {
        // The shim treats a 5xx as "cannot install": auto falls through, on refuses.
        return error(
            503,
            format!(
                "wrapper_binary {} does not exist; set wrapper_binary in the config",
                wrapper.display()
            ),
        );
    }
    let socket = match intake::open_notify_socket(
        api.supervisor.clone(),
        &api.config.notify_dir(),
        &session.id,
        body.caller_uid,
    ) {
        Ok(p) => p,
        Err(e) => {
            tracing::error!("wrap-init: {e}");
            return error(500, e.to_string());
        }
    };
    session.wrap_inits.fetch_add(1, Ordering::Relaxed);
    let mut seccomp_config = api.seccomp_config.clone();
    let mut landlock = api.landlock.compile(body.caller_uid);
    crate::policy::landlock::cap_abi(&mut landlock, api.config.landlock.cap());
    // The SDK daemon's pid and the tree's process group come from the peer of
    // wrap-init once it is a unix socket; until then the server protects itself.
    let filter = match api.filters.for_tree(None, None) {
        Ok(f) => f,
        Err(e) => {
            tracing::error!("wrap-init: {e}");
            return error(500, e.to_string());
        }
    };
    seccomp_config.filter = filter.encoded.clone();
    let compiled_us = started.elapsed().as_micros() as u64;
    for w in &landlock.warnings {
        tracing::warn!(session = %session.id, uid = body.caller_uid, "landlock: {w}");
    }
    seccomp_config.landlock = Some(landlock.config);
    let config_json = match serde_json::to_string(&seccomp_config) {
        Ok(s) => s,
        Err(e) => return error(500, format!("cannot serialize seccomp config: {e}")),
    };
    let mut wrapper_env = BTreeMap::new();
    wrapper_env.insert(agentsh_proto::env::SECCOMP_CONFIG.to_string(), config_json);
    wrapper_env.insert("AGENTSH_SESSION_ID".to_string(), session.id.clone());
    let notify_socket = socket.to_string_lossy().into_owned();
    api.audit.record(
        &session.id,
        EventBody::WrapInit(WrapInitEvent {
            caller_uid: body.caller_uid,
            agent_command: body.agent_command,
            agent_args: body.agent_args,
            notify_socket: notify_socket.clone(),
            policy: api.policy_name.clone(),
            landlock: Some(landlock.summary),
            seccomp: Some(filter.summary.clone()),
        }),
    );
    let resp = WrapInitResponse {
        wrapper_binary: wrapper.to_string_lossy().into_owned(),
        notify_socket,
        seccomp_config,
        wrapper_env,
    };
    let out = match serde_json::to_value(&resp) {
        Ok(v) => json_response(200, &v),
        Err(e) => error(500, format!("cannot serialize response: {e}")),
    };
    tracing::debug!(
        session = %session.id,
        compiled_us,
        us = started.elapsed().as_micros() as u64,
        "wrap-init answered"
    );
    out
}

fn query_param<'a>(query: &'a str, key: &str) -> Option<&'a str> {
    query
        .split('&')
        .filter_map(|kv| kv.split_once('='))
        .find(|(k, _)| *k == key)
        .map(|(_, v)| v)
}

fn events(api: &Api, sid: &str, query: &str) -> Response<std::io::Cursor<Vec<u8>>> {
    let after = match query_param(query, "after").map(str::parse::<u64>) {
        None => 0,
        Some(Ok(n)) => n,
        Some(Err(_)) => return error(400, "after must be an event id (a whole number)"),
    };
    let wait = match query_param(query, "wait").map(str::parse::<u64>) {
        None => 0,
        Some(Ok(n)) => n.min(60),
        Some(Err(_)) => return error(400, "wait must be a number of seconds"),
    };
    let ev = if wait > 0 {
        api.audit.wait_events(sid, after, Duration::from_secs(wait))
    } else {
        api.audit.events(sid, after)
    };
    match serde_json::to_value(&ev) {
        Ok(v) => json_response(200, &v),
        Err(e) => error(500, format!("cannot serialize events: {e}")),
    }
}

fn list_approvals(api: &Api, query: &str) -> Response<std::io::Cursor<Vec<u8>>> {
    let after = match query_param(query, "after").map(str::parse::<u64>) {
        None => 0,
        Some(Ok(n)) => n,
        Some(Err(_)) => return error(400, "after must be a request seq (a whole number)"),
    };
    let wait = match query_param(query, "wait").map(str::parse::<u64>) {
        None => 0,
        Some(Ok(n)) => n,
        Some(Err(_)) => return error(400, "wait must be a number of seconds"),
    };
    let approvals = &api.supervisor.approvals;
    let pending = if wait > 0 {
        approvals.wait_pending(after, Duration::from_secs(wait))
    } else {
        approvals.pending(after)
    };
    match serde_json::to_value(&pending) {
        Ok(v) => json_response(200, &v),
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

fn decide_approval(api: &Api, req: &mut Request, id: &str) -> Response<std::io::Cursor<Vec<u8>>> {
    use crate::approval::{DecideError, Requester};
    let approvals = &api.supervisor.approvals;
    let bearer = req
        .headers()
        .iter()
        .find(|h| h.field.equiv("Authorization"))
        .and_then(|h| h.value.as_str().strip_prefix("Bearer ").map(str::to_string));
    match bearer {
        Some(t) if approvals.token_matches(&t) => {}
        _ => {
            return error(
                401,
                "deciding needs the operator token: Authorization: Bearer <contents of \
                 <state_dir>/approval.token> (root-only; `agentsh approvals` reads it)",
            )
        }
    }
    let server_port = api
        .config
        .server
        .http
        .addr
        .parse::<std::net::SocketAddr>()
        .map(|a| a.port())
        .unwrap_or(0);
    let Some(peer) = req.remote_addr().copied() else {
        return error(403, "the requesting process cannot be identified");
    };
    let requester = approvals.identify(peer, server_port);
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
    let body = match read_body::<DecisionBody>(req) {
        Ok(b) => b,
        Err(e) => return e,
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
    match approvals.decide(id, approve, approver.clone(), body.reason) {
        Ok(()) => json_response(
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
