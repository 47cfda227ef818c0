//! How the API answers: JSON bodies, errors as `{"error": "..."}` with a
//! 4xx/5xx status (and, for refusals the shim explains, a `hint`), and the
//! reading of request bodies (at most 1 MiB). Shared by `routes` and
//! `wrap_init`.
//!
//! Failure modes: a body too large or not JSON is a 400 [`Failure`].

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper::header::{HeaderValue, CONTENT_TYPE};
use hyper::{Request, Response, StatusCode};

pub(super) type Resp = Response<Full<Bytes>>;

const MAX_BODY: usize = 1 << 20;

pub(super) fn json(status: u16, body: &serde_json::Value) -> Resp {
    json_bytes(status, body.to_string().into_bytes())
}

/// A JSON answer already serialized.
pub(super) fn json_bytes(status: u16, body: Vec<u8>) -> Resp {
    let mut r = Response::new(Full::new(Bytes::from(body)));
    *r.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    r.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    r
}

pub(super) fn error(status: u16, msg: impl Into<String>) -> Resp {
    fail(status, msg).into()
}

/// An error answer not yet rendered (small, so `Result`s stay cheap).
#[derive(Debug)]
pub(super) struct Failure {
    status: u16,
    msg: String,
    /// A section of `docs/troubleshooting.md` (`agentsh_proto::hint`) the
    /// shim names instead of its generic one.
    hint: Option<&'static str>,
}

pub(super) fn fail(status: u16, msg: impl Into<String>) -> Failure {
    Failure {
        status,
        msg: msg.into(),
        hint: None,
    }
}

impl Failure {
    pub(super) fn with_hint(mut self, hint: &'static str) -> Failure {
        self.hint = Some(hint);
        self
    }
}

impl From<Failure> for Resp {
    fn from(f: Failure) -> Resp {
        match f.hint {
            Some(h) => json(f.status, &serde_json::json!({ "error": f.msg, "hint": h })),
            None => json(f.status, &serde_json::json!({ "error": f.msg })),
        }
    }
}

pub(super) async fn read_raw(req: Request<Incoming>) -> Result<Bytes, Failure> {
    match Limited::new(req.into_body(), MAX_BODY).collect().await {
        Ok(c) => Ok(c.to_bytes()),
        Err(e) => Err(fail(
            400,
            format!("cannot read the request body (at most 1 MiB): {e}"),
        )),
    }
}

pub(super) async fn read_body<T: serde::de::DeserializeOwned>(
    req: Request<Incoming>,
) -> Result<T, Failure> {
    let body = read_raw(req).await?;
    serde_json::from_slice(&body).map_err(|e| fail(400, format!("invalid JSON body: {e}")))
}

pub(super) async fn read_json(req: Request<Incoming>) -> Result<serde_json::Value, Failure> {
    let body = read_raw(req).await?;
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(serde_json::json!({}));
    }
    serde_json::from_slice(&body).map_err(|e| fail(400, format!("invalid JSON body: {e}")))
}
