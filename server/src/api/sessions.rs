//! `/api/v1/sessions`: an operator makes, lists, ends and deletes sessions
//! at run time (`agentsh session ...`); the config's `sessions:` stays the
//! source of truth at start.
//!
//! * `POST /api/v1/sessions` `{"id", "policy"?, "workspace"?, "env"?}`:
//!   with only an id, a session with the default session's rules (made
//!   once: asked again, the existing one is answered); with a policy, a
//!   workspace or env rules, compiled now (blocking work on the blocking
//!   pool: a new policy's programs are hashed) and usable at once.
//! * `GET /api/v1/sessions[/{id}]`.
//! * `POST /api/v1/sessions/{id}/end`: new wrap-inits are refused (the shim
//!   exits 126); its live trees run on and are reported.
//! * `DELETE /api/v1/sessions/{id}[?force=true]`: refused while it has
//!   live trees, unless `force`, which kills them; ends and forgets it
//!   (its events stay in the audit).
//!
//! Each change is audited (`session` event). Failure modes: a bad id,
//! policy, workspace or env block is a 400 naming it, and nothing is made.

use super::answer::{error, json, Resp};
use super::state::Api;
use crate::approval::Requester;
use crate::audit::{EventBody, SessionEvent};
use crate::session::{MakeError, NotMade, Origin, Session, Setup, Spec};
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// `POST /api/v1/sessions`'s body.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct CreateBody {
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    policy: Option<String>,
    #[serde(default)]
    workspace: Option<String>,
    #[serde(default)]
    env: Option<agentsh_proto::env::EnvDoc>,
    /// Over the policy's `limits:`, key by key.
    #[serde(default)]
    limits: Option<crate::vocab::LimitsDoc>,
}

fn who(r: &Requester) -> (u32, u32) {
    match r {
        Requester::Operator { uid, pid, .. } => (*uid, *pid),
        _ => (0, 0),
    }
}

const BAD_ID: &str = "is not a session id: use 1-64 letters, digits, '-', '_', '.'";

/// One session as the API shows it.
pub(super) fn describe(api: &Api, s: &Session) -> serde_json::Value {
    let roots = api.trees.roots_of(&s.id);
    let env = s.setup().env.as_ref().map(|e| {
        serde_json::json!({
            "deny": e.deny,
            "allow": e.allow,
            "also_allow": e.also_allow,
            // Names only: a value may be a credential.
            "inject": e.inject.iter().map(|(k, _)| k).collect::<Vec<_>>(),
        })
    });
    serde_json::json!({
        "id": s.id,
        "created": s.created,
        "origin": s.origin,
        "policy": s.setup().policy_name,
        "policy_source": s.setup().spec.policy,
        "workspace": s.setup().spec.workspace,
        "env": env,
        "ended": s.is_ended(),
        "trees": roots.len(),
        "tree_pids": roots,
        "wrap_inits": s.wrap_inits.load(Ordering::Relaxed),
    })
}

pub(super) fn list(api: &Api) -> Resp {
    let v: Vec<_> = api
        .sessions
        .list()
        .iter()
        .map(|s| describe(api, s))
        .collect();
    json(200, &serde_json::Value::Array(v))
}

pub(super) fn show(api: &Api, id: &str) -> Resp {
    match api.sessions.get(id) {
        Some(s) => json(200, &describe(api, &s)),
        None => error(404, format!("no session {id:?} on this server")),
    }
}

/// What failed while a session was made on the blocking pool: its spec,
/// or the DNS stub its policy needs.
#[derive(Debug, thiserror::Error)]
pub(super) enum CreateError {
    #[error(transparent)]
    Spec(#[from] MakeError),
    #[error("making the session failed: {0}")]
    Making(#[source] tokio::task::JoinError),
    #[error(transparent)]
    Stub(#[from] crate::dns::DnsError),
    #[error("starting the DNS stub failed: {0}")]
    StubStarting(#[source] tokio::task::JoinError),
}

/// `POST /api/v1/sessions`: checks the body, compiles the session's rules
/// (or takes the default's), starts the DNS stub if its policy needs it,
/// then makes and audits it. Nothing is made until every step passed.
pub(super) async fn create(api: Arc<Api>, requester: Requester, v: serde_json::Value) -> Resp {
    let body: CreateBody = match serde_json::from_value(v) {
        Ok(b) => b,
        Err(e) => return error(400, format!("invalid session: {e}")),
    };
    let id = body.id.clone().unwrap_or_else(|| "default".into());
    if !crate::session::valid_id(&id) {
        return error(400, format!("session id {id:?} {BAD_ID}"));
    }
    let labels_only = body.policy.is_none()
        && body.workspace.is_none()
        && body.env.is_none()
        && body.limits.is_none();
    if labels_only {
        // A session under the default's rules, made once.
        if let Some(s) = api.sessions.get(&id).filter(|s| !s.is_ended()) {
            return json(200, &describe(&api, &s));
        }
    }
    let setup = match compile(&api, &body, labels_only).await {
        Ok(s) => s,
        Err(e) => return error(400, format!("session {id:?} not made: {e}")),
    };
    if setup.policy.wants_dns_stub() && api.supervisor.dns.get().is_none() {
        if let Err(e) = dns_stub_started(&api).await {
            return error(
                503,
                format!(
                    "session {id:?} not made: policy {:?} sends DNS to agentsh's stub, which \
                     cannot start: {e}; set egress.stub to a free IP:53",
                    setup.policy_name
                ),
            );
        }
    }
    insert(&api, &requester, &id, setup)
}

/// The session's compiled rules, on the blocking pool (a new policy's
/// programs are hashed): the default session's when the body names only an
/// id or the default's own spec.
async fn compile(
    api: &Arc<Api>,
    body: &CreateBody,
    labels_only: bool,
) -> Result<Arc<Setup>, CreateError> {
    let spec = Spec {
        policy: body
            .policy
            .clone()
            .unwrap_or_else(|| api.maker().config.policy.clone()),
        workspace: body.workspace.clone(),
        env: body.env.clone(),
        limits: body.limits.clone(),
    };
    let maker_api = api.clone();
    tokio::task::spawn_blocking(move || {
        let default = maker_api.sessions.get("default");
        match default.filter(|d| labels_only || d.setup().spec == spec) {
            Some(d) => Ok(d.setup()),
            None => Ok(maker_api.maker().make(spec, true).map(Arc::new)?),
        }
    })
    .await
    .unwrap_or_else(|e| Err(CreateError::Making(e)))
}

/// Starts the DNS stub, on the blocking pool (see [`start_stub`]).
async fn dns_stub_started(api: &Arc<Api>) -> Result<(), CreateError> {
    let a = api.clone();
    tokio::task::spawn_blocking(move || start_stub(&a))
        .await
        .unwrap_or_else(|e| Err(CreateError::StubStarting(e)))
}

/// Makes session `id` with `setup` and audits it; a refusal answers why.
fn insert(api: &Api, requester: &Requester, id: &str, setup: Arc<Setup>) -> Resp {
    let trees = api.trees.clone();
    let made = api.sessions.insert(id, Origin::Api, setup, |old| {
        trees.roots_of(&old.id).is_empty()
    });
    match made {
        Ok(s) => {
            let (by_uid, by_pid) = who(requester);
            tracing::info!(session = %id, policy = %s.setup().policy_name, "session created");
            api.audit.record(
                id,
                EventBody::Session(SessionEvent {
                    action: "created".into(),
                    by_uid,
                    by_pid,
                    policy: Some(s.setup().policy_name.clone()),
                    workspace: s.setup().spec.workspace.clone(),
                    live_trees: Vec::new(),
                    killed: None,
                }),
            );
            json(201, &describe(api, &s))
        }
        Err(NotMade::InvalidId) => error(400, format!("session id {id:?} {BAD_ID}")),
        Err(NotMade::Reserved) => error(
            400,
            format!("session id {id:?} is reserved for the server's own rehearsal shell"),
        ),
        Err(NotMade::TooMany) => error(
            429,
            format!(
                "session {id:?} not made: the server has {} sessions (ended ones count until \
                 deleted): delete ended ones (`agentsh session end ID --force`)",
                crate::session::MAX_SESSIONS
            ),
        ),
        Err(NotMade::Exists) => error(
            409,
            format!(
                "session {id:?} exists (ended sessions are replaced once their trees are gone): \
                 end it first, or choose another id"
            ),
        ),
    }
}

/// Starts the DNS stub for the first session made at run time whose
/// policy needs it (once: concurrent creations wait for the first).
pub(super) fn start_stub(api: &Api) -> Result<(), CreateError> {
    static STARTING: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _one = STARTING
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if api.supervisor.dns.get().is_some() {
        return Ok(());
    }
    let stub = crate::dns::start(&api.config, &api.audit)?;
    let _ = api.supervisor.dns.set(stub);
    Ok(())
}

/// `POST /api/v1/sessions/{id}/end`.
pub(super) fn end(api: &Api, requester: &Requester, id: &str) -> Resp {
    if id == "default" {
        return error(
            400,
            "the default session cannot end (shim.conf's session= names it); stop the server \
             to stop every tree",
        );
    }
    let Some(s) = api.sessions.get(id) else {
        return error(404, format!("no session {id:?} on this server"));
    };
    let first = !s.ended.swap(true, Ordering::SeqCst);
    let live = api.trees.roots_of(id);
    if first {
        let (by_uid, by_pid) = who(requester);
        tracing::info!(session = %id, live = live.len(), "session ended");
        api.audit.record(
            id,
            EventBody::Session(SessionEvent {
                action: "ended".into(),
                by_uid,
                by_pid,
                policy: None,
                workspace: None,
                live_trees: live.clone(),
                killed: None,
            }),
        );
    }
    json(
        200,
        &serde_json::json!({ "id": id, "ended": true, "live_trees": live }),
    )
}

/// `DELETE /api/v1/sessions/{id}[?force=true]`.
pub(super) async fn delete(api: Arc<Api>, requester: Requester, id: String, force: bool) -> Resp {
    if id == "default" {
        return error(400, "the default session cannot be deleted");
    }
    let Some(s) = api.sessions.get(&id) else {
        return error(404, format!("no session {id:?} on this server"));
    };
    let live = api.trees.roots_of(&id);
    if !live.is_empty() && !force {
        return error(
            409,
            format!(
                "session {id:?} has {} live tree(s) (root pids {live:?}): end it to refuse new \
                 shells and let them finish, or delete with force to kill them",
                live.len()
            ),
        );
    }
    // No new tree from here; a tree process that left the lineage dies at
    // its next supervised call.
    s.ended.store(true, Ordering::SeqCst);
    let killed = if force {
        s.doomed.store(true, Ordering::SeqCst);
        let (trees, sid) = (api.trees.clone(), id.clone());
        tokio::task::spawn_blocking(move || trees.kill_session(&sid))
            .await
            .unwrap_or(0)
    } else {
        0
    };
    api.sessions.remove(&id);
    let (by_uid, by_pid) = who(&requester);
    tracing::warn!(session = %id, force, killed, "session deleted");
    api.audit.record(
        &id,
        EventBody::Session(SessionEvent {
            action: "deleted".into(),
            by_uid,
            by_pid,
            policy: None,
            workspace: None,
            live_trees: live.clone(),
            killed: force.then_some(killed),
        }),
    );
    json(
        200,
        &serde_json::json!({ "id": id, "deleted": true, "live_trees": live, "killed": killed }),
    )
}
