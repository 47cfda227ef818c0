//! A policy reload: `agentsh policy reload` (`POST /api/v1/policy/reload`)
//! and SIGHUP. The config is read again (trusted as at start), every
//! session's policy is read again from where its spec names it (the
//! config's `policy`, `workspace` and `sessions:` for `default` and the
//! config's sessions; an API session's own spec), and each is compiled as
//! `policy check` and start-up compile it. Only if every one compiles is
//! anything changed: each session's new rules are put in place
//! ([`crate::session::Session::reload`]), so a running tree's next exec,
//! connect, DNS query and new HTTP connection are judged by them; new
//! trees start with the new filter and ruleset. A session whose policy
//! text and spec read the same as before is left as it is (no event). Sessions the config adds
//! are made. For each running tree, what the kernel fixed at its start and
//! the new policy changes (`filter`, `landlock`, `env`:
//! [`crate::policy::Policy::fixed_at_start`]) is said, in the answer and in
//! a `policy_reload` event per session.
//!
//! Not applied (said in the answer): config keys other than `policy`,
//! `workspace`, `policies_dir` and `sessions` (a restart applies them); a
//! session the config no longer names keeps running under its policy read
//! again (end it with `agentsh session end`); HTTP requests on a connection
//! the proxy took before the reload (the rule it was booked with).
//!
//! Failure modes: a config that cannot be read or trusted, or a session
//! whose policy, workspace or env does not compile: [`ReloadError`], naming
//! each; nothing changed. A DNS stub a new policy needs that cannot start:
//! the same.

use super::state::Api;
use crate::audit::{EventBody, PolicyReloadEvent, TreeKept};
use crate::session::{MakeError, Maker, Origin, Session, Setup, Spec};
use std::sync::Arc;

/// Who asked for a reload.
#[derive(Debug, Clone, Copy)]
pub struct By {
    /// `api` or `sighup`.
    pub how: &'static str,
    pub uid: u32,
    pub pid: u32,
}

/// Why nothing was reloaded.
#[derive(Debug, thiserror::Error)]
pub enum ReloadError {
    #[error("the config cannot be used: {0}")]
    Config(String),
    #[error("{}", .0.join("; "))]
    Sessions(Vec<String>),
    #[error("a policy sends DNS to agentsh's stub, which cannot start: {0}")]
    Stub(String),
}

/// What a reload did, per session.
#[derive(Debug, serde::Serialize)]
pub struct Reloaded {
    pub sessions: Vec<SessionReloaded>,
    /// Sessions the config names that did not exist: made now.
    pub added: Vec<String>,
    /// Config sessions the config no longer names: kept, their policy read
    /// again.
    pub not_in_config: Vec<String>,
    /// Config keys that changed and need a restart.
    pub not_applied: Vec<String>,
}

/// One session after a reload.
#[derive(Debug, serde::Serialize)]
pub struct SessionReloaded {
    pub session: String,
    pub policy: String,
    pub hash: String,
    pub previous_hash: String,
    /// Whether the policy's text or its spec changed (when not, nothing was
    /// replaced and no event written).
    pub changed: bool,
    pub trees: Vec<TreeKept>,
}

/// One reload at a time (the API and SIGHUP may ask together).
static RELOADING: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Reloads every session's policy (the module doc).
///
/// # Errors
/// See [`ReloadError`]: nothing was changed.
pub fn reload(api: &Api, by: By) -> Result<Reloaded, ReloadError> {
    let _one = RELOADING
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let old = api.maker();
    let read = match &old.config_file {
        Some(path) => (api.load_config)(path).map_err(ReloadError::Config)?,
        None => old.config.clone(),
    };
    let not_applied = needs_restart(&old.config, &read);
    let mut config = old.config.clone();
    config.policy = read.policy;
    config.workspace = read.workspace;
    config.policies_dir = read.policies_dir;
    config.sessions = read.sessions;
    let maker = Maker {
        config,
        config_file: old.config_file.clone(),
        backend: old.backend,
    };
    let Plan {
        made,
        reload: plan,
        add: added,
        not_in_config,
    } = plan(api, &maker)?;
    if made.iter().any(|m| m.policy.wants_dns_stub()) {
        super::sessions::start_stub(api).map_err(|e| ReloadError::Stub(e.to_string()))?;
    }
    *api.maker
        .write()
        .unwrap_or_else(std::sync::PoisonError::into_inner) = Arc::new(maker);
    let mut sessions = Vec::new();
    for (s, setup) in plan {
        let now = s.setup();
        if now.policy.hash() == setup.policy.hash() && now.spec == setup.spec {
            // Nothing to change: the rules stay (and what trees cached
            // under them), no event (a log rotation's SIGHUP changes none).
            sessions.push(unchanged(&s, &now));
            continue;
        }
        let before = s.reload(setup.clone());
        sessions.push(apply(api, by, &s, &before, &setup));
    }
    let mut added_ids = Vec::new();
    for (id, setup) in added {
        let trees = api.trees.clone();
        match api.sessions.insert(&id, Origin::Config, setup, |old| {
            trees.roots_of(&old.id).is_empty()
        }) {
            Ok(_) => added_ids.push(id),
            Err(e) => tracing::warn!(session = %id, "policy reload: session not made: {e:?}"),
        }
    }
    tracing::info!(
        by = by.how,
        by_uid = by.uid,
        by_pid = by.pid,
        sessions = sessions.len(),
        added = added_ids.len(),
        "policies reloaded"
    );
    Ok(Reloaded {
        sessions,
        added: added_ids,
        not_in_config,
        not_applied,
    })
}

/// What a reload will put in place, all compiled before anything changes.
struct Plan {
    made: Vec<Arc<Setup>>,
    reload: Vec<(Arc<Session>, Arc<Setup>)>,
    add: Vec<(String, Arc<Setup>)>,
    not_in_config: Vec<String>,
}

/// Compiles every live session's spec as `maker` makes it now, and the
/// sessions the config adds.
///
/// # Errors
/// Each session whose spec does not compile, named.
fn plan(api: &Api, maker: &Maker) -> Result<Plan, ReloadError> {
    let mut made: Vec<Arc<Setup>> = Vec::new();
    let mut errors = Vec::new();
    let mut plan: Vec<(Arc<Session>, Arc<Setup>)> = Vec::new();
    let mut not_in_config = Vec::new();
    for s in api.sessions.list().into_iter().filter(|s| !s.is_ended()) {
        let spec = match s.origin {
            Origin::Default => maker.default_spec(),
            Origin::Config => match maker.config.sessions.get(&s.id) {
                Some(section) => maker.config_spec(section),
                None => {
                    not_in_config.push(s.id.clone());
                    s.setup().spec.clone()
                }
            },
            Origin::Api => s.setup().spec.clone(),
        };
        match compiled(maker, &mut made, spec, s.origin != Origin::Default) {
            Ok(setup) => plan.push((s, setup)),
            Err(e) => errors.push(format!("session {:?}: {e}", s.id)),
        }
    }
    let mut added = Vec::new();
    for (id, section) in &maker.config.sessions {
        if api.sessions.get(id).is_some_and(|s| !s.is_ended()) {
            continue;
        }
        match compiled(maker, &mut made, maker.config_spec(section), true) {
            Ok(setup) => added.push((id.clone(), setup)),
            Err(e) => errors.push(format!("session {id:?}: {e}")),
        }
    }
    if !errors.is_empty() {
        return Err(ReloadError::Sessions(errors));
    }
    Ok(Plan {
        made,
        reload: plan,
        add: added,
        not_in_config,
    })
}

/// `spec` compiled, or the setup this reload already made of it.
fn compiled(
    maker: &Maker,
    made: &mut Vec<Arc<Setup>>,
    spec: Spec,
    check_workspace: bool,
) -> Result<Arc<Setup>, MakeError> {
    if let Some(m) = made.iter().find(|m| m.spec == spec) {
        return Ok(m.clone());
    }
    let m = Arc::new(maker.make(spec, check_workspace)?);
    made.push(m.clone());
    Ok(m)
}

/// Says and audits what session `s`'s reload changed, per running tree.
fn apply(api: &Api, by: By, s: &Session, before: &Setup, now: &Setup) -> SessionReloaded {
    let fixed_now = now.policy.fixed_at_start();
    let trees: Vec<TreeKept> = api
        .trees
        .started_with(&s.id)
        .into_iter()
        .map(|(root_pid, started)| TreeKept {
            root_pid,
            kept_from_start: started
                .fixed_at_start()
                .iter()
                .zip(&fixed_now)
                .filter(|(a, b)| a.1 != b.1)
                .map(|(a, _)| a.0.to_string())
                .collect(),
        })
        .collect();
    for t in trees.iter().filter(|t| !t.kept_from_start.is_empty()) {
        tracing::warn!(
            session = %s.id,
            root_pid = t.root_pid,
            "policy reload: this running tree keeps its start's {} (the kernel holds them; \
             new trees get the new ones)",
            t.kept_from_start.join(", ")
        );
    }
    api.audit.record(
        &s.id,
        EventBody::PolicyReload(Box::new(PolicyReloadEvent {
            by: by.how.to_string(),
            by_uid: by.uid,
            by_pid: by.pid,
            policy: now.policy_name.clone(),
            policy_source: now.spec.policy.clone(),
            hash: now.policy.hash().to_string(),
            previous_policy: before.policy_name.clone(),
            previous_hash: before.policy.hash().to_string(),
            trees: trees.clone(),
        })),
    );
    reloaded(s, before, now, trees)
}

/// A session whose policy and spec read the same as before.
fn unchanged(s: &Session, now: &Setup) -> SessionReloaded {
    SessionReloaded {
        changed: false,
        ..reloaded(s, now, now, Vec::new())
    }
}

/// What the answer says of session `s`, reloaded from `before` to `now`.
fn reloaded(s: &Session, before: &Setup, now: &Setup, trees: Vec<TreeKept>) -> SessionReloaded {
    SessionReloaded {
        session: s.id.clone(),
        policy: now.policy_name.clone(),
        hash: now.policy.hash().to_string(),
        previous_hash: before.policy.hash().to_string(),
        changed: true,
        trees,
    }
}

/// The config's keys besides the policies' that differ between `old` and
/// `new`: a restart applies them.
fn needs_restart(old: &crate::config::Config, new: &crate::config::Config) -> Vec<String> {
    let parts = |c: &crate::config::Config| {
        [
            ("server", format!("{:?}", c.server)),
            ("state_dir", format!("{:?}", c.state_dir)),
            ("audit", format!("{:?}", c.audit)),
            ("wrapper_binary", c.wrapper_binary.clone()),
            ("execve", format!("{:?}", c.execve)),
            ("landlock", format!("{:?}", c.landlock)),
            ("egress", format!("{:?}", c.egress)),
            ("secrets", format!("{:?}", c.secrets)),
        ]
    };
    parts(old)
        .into_iter()
        .zip(parts(new))
        .filter(|(a, b)| a.1 != b.1)
        .map(|(a, _)| a.0.to_string())
        .collect()
}
