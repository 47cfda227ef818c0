//! Sessions: each task's policy, workspace and environment rules, under
//! which its trees are supervised and its events kept.
//!
//! `default` is made at start from the config's top-level `policy` and
//! `workspace`; the config's `sessions:` adds others at start; an operator
//! adds and ends them at run time (`/api/v1/sessions`, `agentsh session`).
//! Each session has its own compiled policy, Landlock ruleset (with its
//! workspace), seccomp filter and env rules ([`Setup`]); sessions whose
//! policies name the same programs share one identity index. A tree's
//! session is chosen by its first shell (shim.conf `session=`, or
//! `AGENTSH_SESSION` in that shell's environment) and is fixed for the
//! tree's life: nested shells never call wrap-init, and a tree cannot reach
//! the API to ask for another.
//!
//! A session id is a short token of letters, digits, `-`, `_`, `.`: it
//! appears in socket file names and URLs, so anything else is refused.
//!
//! Failure modes: a policy that does not load, a workspace that is not an
//! existing directory, an `env` block that does not compile: a
//! [`MakeError`] naming it, and nothing is made. An ended session refuses wrap-init (the
//! shim then exits 126); a session's trees killed by `force` are killed by
//! lineage, and a process that left its tree's lineage (double fork) is
//! killed at its next supervised call (see [`Session::doomed`]).

use crate::config::Config;
use crate::policy::Policy;
use crate::supervisor::{LiveRules, TreeRules};
use agentsh_proto::env::{EnvDoc, EnvRules};
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

pub use agentsh_proto::shimconf::valid_session_id as valid_id;

/// What a session is made from: as written in the config or sent to the
/// API.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct Spec {
    /// A shipped policy's name, a name under `policies_dir`, or a path.
    pub policy: String,
    /// `${WORKSPACE}` / `${SESSION_ROOT}`; `None`: rules naming it are
    /// skipped (logged).
    pub workspace: Option<String>,
    /// The session's own env rules (its policy's `env:` applies too).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub env: Option<EnvDoc>,
    /// The session's own `limits:` (over its policy's, key by key).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub limits: Option<crate::vocab::LimitsDoc>,
}

/// A session's compiled rules (shared by sessions made from one spec).
pub struct Setup {
    pub spec: Spec,
    /// The policy's own name (`name:` in it).
    pub policy_name: String,
    pub policy: Arc<Policy>,
    /// The session's env rules merged with its policy's.
    pub env: Option<EnvRules>,
    /// Compiles (and caches) each tree's seccomp program.
    pub filters: crate::filter::Filters,
    /// The policy's Landlock part per wrap-init (workspace, caller's home).
    pub landlock: crate::policy::landlock::SessionLandlock,
    /// The daemon sockets to hide, resolved once while nothing changes.
    pub daemon_sockets: crate::policy::daemon_sockets::HiddenCache,
    /// What the supervisor judges the session's trees by.
    pub rules: Arc<TreeRules>,
    /// What each tree may use (its cgroup's limits; none: no cgroup).
    pub limits: crate::vocab::Limits,
}

/// Why a session's [`Setup`] was not made: what in its spec cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum MakeError {
    #[error("a session needs a policy (a shipped name, a name under policies_dir, or a path)")]
    NoPolicy,
    #[error("workspace {0:?} must be an absolute path")]
    RelativeWorkspace(String),
    #[error(
        "workspace {0:?} is not a directory: create it first (the session's ${{WORKSPACE}} \
         must exist)"
    )]
    NoWorkspace(String),
    #[error("cannot load policy {name:?}: {source}")]
    Policy {
        name: String,
        source: Box<crate::policy::PolicyError>,
    },
    /// The session's own `env:` block does not compile.
    #[error("env.{}: {}", .0.field, .0.message)]
    Env(agentsh_proto::env::EnvError),
    #[error("policy {name:?}: {source}")]
    Filter {
        name: String,
        source: crate::filter::FilterError,
    },
    /// The session's `limits:` over its policy's do not read.
    #[error("{0}")]
    Limits(crate::vocab::LimitsError),
    /// The identity index of the programs the policy names (the
    /// supervisor's error, said as is).
    #[error("{0}")]
    Index(Box<dyn std::error::Error + Send + Sync>),
}

/// Makes [`Setup`]s: what every session shares (the config, the backend).
pub struct Maker {
    pub config: Config,
    pub config_file: Option<PathBuf>,
    pub backend: agentsh_proto::ExecBackend,
}

impl Maker {
    /// The default session's spec: the config's top-level `policy` and
    /// `workspace`.
    pub fn default_spec(&self) -> Spec {
        Spec {
            policy: self.config.policy.clone(),
            workspace: (!self.config.workspace.is_empty()).then(|| self.config.workspace.clone()),
            env: None,
            limits: None,
        }
    }

    /// The spec of `sessions.<id>` in the config (its policy defaults to
    /// the top-level one).
    pub fn config_spec(&self, s: &crate::config::SessionSection) -> Spec {
        Spec {
            policy: s
                .policy
                .clone()
                .unwrap_or_else(|| self.config.policy.clone()),
            workspace: s.workspace.clone().filter(|w| !w.is_empty()),
            env: s.env.clone(),
            limits: s.limits.clone(),
        }
    }

    /// Compiles `spec`. Blocking: it may hash the programs a new policy
    /// names (its identity index).
    ///
    /// # Errors
    /// What in `spec` cannot be used, named.
    pub fn make(&self, spec: Spec, check_workspace: bool) -> Result<Setup, MakeError> {
        if spec.policy.trim().is_empty() {
            return Err(MakeError::NoPolicy);
        }
        if let Some(w) = &spec.workspace {
            if !w.starts_with('/') {
                return Err(MakeError::RelativeWorkspace(w.clone()));
            }
            if check_workspace && !std::path::Path::new(w).is_dir() {
                return Err(MakeError::NoWorkspace(w.clone()));
            }
        }
        let policy = Policy::resolve(&spec.policy, &self.config.policies_dir).map_err(|e| {
            MakeError::Policy {
                name: spec.policy.clone(),
                source: Box::new(e),
            }
        })?;
        for w in policy.shadowed_rules() {
            tracing::warn!("policy {:?}: {w}", spec.policy);
        }
        let own_env = match &spec.env {
            Some(doc) => Some(crate::policy::env::compile(doc.clone()).map_err(MakeError::Env)?),
            None => None,
        };
        let env = EnvRules::merged(own_env.as_ref(), policy.env());
        let limits = crate::vocab::Limits::from_doc(&crate::vocab::merge_limits(
            policy.limits(),
            spec.limits.as_ref(),
        ))
        .map_err(MakeError::Limits)?;
        let filters = crate::filter::Filters::new(
            policy.blocked_syscalls(),
            policy.exec_memory_denied(),
            policy.judges_exec_maps(),
            policy.reads_unjudged(),
            crate::filter::NetFilter::of(&policy),
            self.config.landlock.effective_abi(),
            self.backend,
        )
        .map_err(|source| MakeError::Filter {
            name: spec.policy.clone(),
            source,
        })?;
        say_reads_unjudged(&policy, &filters, &spec.policy);
        let policy = Arc::new(policy);
        let landlock = crate::policy::landlock::SessionLandlock::for_session(
            policy.clone(),
            spec.workspace.clone(),
            &self.config,
            self.config_file.as_deref(),
        );
        let index =
            crate::supervisor::index_for(&policy).map_err(|e| MakeError::Index(e.into()))?;
        Ok(Setup {
            policy_name: policy.name().to_string(),
            spec,
            env,
            filters,
            landlock,
            daemon_sockets: Default::default(),
            rules: Arc::new(TreeRules {
                policy: policy.clone(),
                index,
            }),
            policy,
            limits,
        })
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Origin {
    /// `default`, from the top-level `policy`/`workspace`.
    Default,
    /// `sessions:` in the config.
    Config,
    /// `POST /api/v1/sessions` (or `agentsh wrap --session`).
    Api,
}

pub struct Session {
    pub id: String,
    pub created: String,
    pub origin: Origin,
    /// Its compiled rules ([`Session::setup`]): a policy reload replaces
    /// them ([`Session::reload`]).
    setup: std::sync::RwLock<Arc<Setup>>,
    /// What its running trees are judged by (replaced with `setup`).
    pub rules: Arc<LiveRules>,
    /// wrap-init calls made for this session (live trees: `trees::Trees::count`).
    pub wrap_inits: AtomicU64,
    /// Ended: every new wrap-init is refused.
    pub ended: AtomicBool,
    /// Its trees are being killed (`DELETE ...?force=true`): a tree process
    /// the lineage walk missed is killed at its next supervised call.
    pub doomed: Arc<AtomicBool>,
}

impl Session {
    fn new(id: &str, origin: Origin, setup: Arc<Setup>) -> Session {
        Session {
            id: id.to_string(),
            created: crate::audit::rfc3339_now(),
            origin,
            rules: LiveRules::new(setup.rules.clone()),
            setup: std::sync::RwLock::new(setup),
            wrap_inits: AtomicU64::new(0),
            ended: AtomicBool::new(false),
            doomed: Arc::new(AtomicBool::new(false)),
        }
    }

    /// A session kept in no [`Sessions`]: the rehearsal shell's (see
    /// `daemon::rehearsal`), with the rules of `setup`.
    pub fn unlisted(id: &str, setup: Arc<Setup>) -> Session {
        Session::new(id, Origin::Default, setup)
    }

    /// Its compiled rules now (what a new tree starts with).
    pub fn setup(&self) -> Arc<Setup> {
        self.setup
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// Puts `setup` in place: new trees start with it, and running trees'
    /// next calls are judged by its rules. Returns the setup it replaced.
    pub fn reload(&self, setup: Arc<Setup>) -> Arc<Setup> {
        let mut held = self
            .setup
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        self.rules.replace(setup.rules.clone());
        std::mem::replace(&mut *held, setup)
    }

    pub fn is_ended(&self) -> bool {
        self.ended.load(Ordering::SeqCst)
    }
}

/// The most sessions a server keeps (ended ones included, until deleted):
/// each holds its compiled rules.
pub const MAX_SESSIONS: usize = 1024;

/// Why a session was not made.
#[derive(Debug, PartialEq, Eq)]
pub enum NotMade {
    InvalidId,
    /// The id of the server's rehearsal shell
    /// ([`agentsh_proto::shimconf::REHEARSAL_SESSION`]).
    Reserved,
    /// It exists and has not ended (or has live trees).
    Exists,
    /// [`MAX_SESSIONS`] exist.
    TooMany,
}

#[derive(Default)]
pub struct Sessions {
    map: Mutex<HashMap<String, Arc<Session>>>,
}

impl Sessions {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<Session>>> {
        self.map
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Makes session `id` with `setup`. An ended session of that id is
    /// replaced when `replaceable` says its trees are gone.
    ///
    /// # Errors
    /// The id is not acceptable, or a session of that id exists.
    pub fn insert(
        &self,
        id: &str,
        origin: Origin,
        setup: Arc<Setup>,
        replaceable: impl FnOnce(&Session) -> bool,
    ) -> Result<Arc<Session>, NotMade> {
        if !valid_id(id) {
            return Err(NotMade::InvalidId);
        }
        if id == agentsh_proto::shimconf::REHEARSAL_SESSION {
            return Err(NotMade::Reserved);
        }
        let mut map = self.lock();
        if let Some(old) = map.get(id) {
            if !(old.is_ended() && replaceable(old)) {
                return Err(NotMade::Exists);
            }
        } else if map.len() >= MAX_SESSIONS {
            return Err(NotMade::TooMany);
        }
        let s = Arc::new(Session::new(id, origin, setup));
        map.insert(id.to_string(), s.clone());
        Ok(s)
    }

    pub fn get(&self, id: &str) -> Option<Arc<Session>> {
        self.lock().get(id).cloned()
    }

    /// Forgets session `id` (its events stay in the audit).
    pub fn remove(&self, id: &str) -> Option<Arc<Session>> {
        self.lock().remove(id)
    }

    pub fn list(&self) -> Vec<Arc<Session>> {
        let mut v: Vec<_> = self.lock().values().cloned().collect();
        v.sort_by(|a, b| a.id.cmp(&b.id));
        v
    }
}

/// `tracer_reads: unjudged`, the policy's own choice, said in the log:
/// what it gives up where the tracer keeps the file rules, and that it
/// changes nothing elsewhere.
fn say_reads_unjudged(
    policy: &crate::policy::Policy,
    filters: &crate::filter::Filters,
    name: &str,
) {
    if !policy.reads_unjudged() {
        return;
    }
    if filters.traces_files() {
        tracing::warn!(
            "policy {name:?}: tracer_reads: unjudged: {}",
            crate::policy::Policy::reads_unjudged_cost()
        );
    } else {
        tracing::info!(
            "policy {name:?}: tracer_reads: unjudged changes nothing here (the tracer does not \
             keep the file rules: Landlock does, or nothing does)"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids() {
        assert!(valid_id("default"));
        assert!(valid_id("ci-1.run_2"));
        for bad in ["", ".", "..", "a/b", "a b", &"x".repeat(65)] {
            assert!(!valid_id(bad), "{bad:?}");
        }
    }

    fn maker(dir: &std::path::Path) -> Maker {
        Maker {
            config: Config {
                policies_dir: dir.to_path_buf(),
                ..Config::default()
            },
            config_file: None,
            backend: agentsh_proto::ExecBackend::Notify,
        }
    }

    #[test]
    fn made_once_and_replaced_only_once_ended() {
        let dir = std::env::temp_dir().join(format!("agentsh-sessions-{}", std::process::id()));
        let m = maker(&dir);
        let setup = Arc::new(m.make(m.default_spec(), false).unwrap());
        let s = Sessions::default();
        let a = s.insert("x", Origin::Api, setup.clone(), |_| true).unwrap();
        assert_eq!(
            s.insert("x", Origin::Api, setup.clone(), |_| true).err(),
            Some(NotMade::Exists)
        );
        assert_eq!(
            s.insert("../x", Origin::Api, setup.clone(), |_| true).err(),
            Some(NotMade::InvalidId)
        );
        a.ended.store(true, Ordering::SeqCst);
        // Ended with live trees: kept.
        assert_eq!(
            s.insert("x", Origin::Api, setup.clone(), |_| false).err(),
            Some(NotMade::Exists)
        );
        let b = s.insert("x", Origin::Api, setup.clone(), |_| true).unwrap();
        assert!(!Arc::ptr_eq(&a, &b) && !b.is_ended());
        assert_eq!(s.list().len(), 1);
        // Bounded: each holds its compiled rules.
        for i in 1..MAX_SESSIONS {
            s.insert(&format!("s{i}"), Origin::Api, setup.clone(), |_| true)
                .unwrap();
        }
        assert_eq!(
            s.insert("one-more", Origin::Api, setup, |_| true).err(),
            Some(NotMade::TooMany)
        );
    }

    #[test]
    fn bad_specs_are_named_and_make_nothing() {
        let dir = std::env::temp_dir().join(format!("agentsh-sessions-b-{}", std::process::id()));
        let m = maker(&dir);
        let spec = |policy: &str, workspace: Option<&str>, env: Option<EnvDoc>| Spec {
            policy: policy.into(),
            workspace: workspace.map(Into::into),
            env,
            limits: None,
        };
        let err = |s| m.make(s, true).err().unwrap().to_string();
        assert!(err(spec("no-such-policy", None, None)).contains("no-such-policy"));
        assert!(err(spec("agent-strict", Some("relative"), None)).contains("absolute"));
        assert!(err(spec("agent-strict", Some("/nonexistent/ws"), None))
            .contains("\"/nonexistent/ws\" is not a directory"));
        let inject = EnvDoc {
            inject: [("LD_PRELOAD".to_string(), "/x.so".to_string())].into(),
            ..EnvDoc::default()
        };
        assert!(err(spec("agent-strict", None, Some(inject))).contains("LD_PRELOAD"));
        let glob = EnvDoc {
            deny: vec!["A-B".into()],
            ..EnvDoc::default()
        };
        assert!(err(spec("agent-strict", None, Some(glob))).contains("env.deny"));
        // The session's env and the policy's both apply.
        let own = EnvDoc {
            deny: vec!["*_TOKEN".into()],
            ..EnvDoc::default()
        };
        let s = m
            .make(spec("agent-strict", Some("/"), Some(own)), true)
            .unwrap();
        let env = s.env.unwrap();
        assert!(!env.keeps(b"GH_TOKEN"));
        assert_eq!(s.policy_name, "agent-strict");
    }
}
