//! `agentsh session create|list|show|end`: an operator's sessions at run
//! time (the server's `/api/v1/sessions`; see `api::sessions`).

use crate::cli::approvals::ServerArgs;
use crate::cli::client::{error_text, ClientError};
use clap::Subcommand;
use std::path::PathBuf;
use std::time::Duration;

/// Making a session may hash the programs a new policy names.
const CREATE_TIMEOUT: Duration = Duration::from_secs(120);
const TIMEOUT: Duration = Duration::from_secs(30);

#[derive(Debug, Subcommand)]
pub enum SessionCommand {
    /// Make a session, usable at once: shells join it with AGENTSH_SESSION=ID in
    /// their environment (or shim.conf session=ID). Exit 2 for a bad id, policy,
    /// workspace or env rule (nothing is made), 1 if it exists.
    Create {
        /// The session id: 1-64 letters, digits, '-', '_', '.'.
        id: String,
        /// Its policy: a shipped name, a name under the policies directory, or a
        /// file [default: the server's top-level policy].
        #[arg(long, value_name = "NAME|FILE")]
        policy: Option<String>,
        /// ${WORKSPACE} (and ${SESSION_ROOT}) in its file rules: an existing directory.
        #[arg(long, value_name = "DIR")]
        workspace: Option<PathBuf>,
        /// Remove these variables from its shells' environment (a glob: "*_TOKEN").
        #[arg(long = "env-deny", value_name = "GLOB")]
        env_deny: Vec<String>,
        /// Keep only variables matching these globs.
        #[arg(long = "env-allow", value_name = "GLOB")]
        env_allow: Vec<String>,
        /// Set NAME=VALUE in its shells' environment (not LD_*, AGENTSH_*, ...).
        #[arg(long = "env-inject", value_name = "NAME=VALUE")]
        env_inject: Vec<String>,
        #[command(flatten)]
        limits: Box<LimitArgs>,
        #[command(flatten)]
        at: ServerArgs,
    },
    /// Print the sessions: id, policy, workspace, live trees, ended or not.
    List {
        /// JSON (one array) instead of a table.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        at: ServerArgs,
    },
    /// Print one session as JSON (its env rules name variables, never values).
    Show {
        id: String,
        #[command(flatten)]
        at: ServerArgs,
    },
    /// End a session: every new shell of it is refused (exit 126); its live
    /// trees run on and are listed. With --force, they are killed, and the
    /// session is forgotten (its events stay in the audit).
    End {
        id: String,
        /// Kill its live trees.
        #[arg(long)]
        force: bool,
        #[command(flatten)]
        at: ServerArgs,
    },
}

/// What an `agentsh session` command could not do; the usage errors exit 2.
#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    #[error("session id {0:?} is not valid: use 1-64 letters, digits, '-', '_', '.'")]
    InvalidId(String),
    #[error("--env-inject {0:?}: expected NAME=VALUE")]
    EnvInject(String),
    #[error("--workspace {}: {source}", path.display())]
    Workspace {
        path: PathBuf,
        source: std::io::Error,
    },
    /// The server refused what was asked (HTTP 400): its reason.
    #[error("{0}")]
    Rejected(String),
    #[error("HTTP {status}: {text}")]
    Status { status: u16, text: String },
    #[error(transparent)]
    Client(#[from] ClientError),
    #[error("{0}")]
    Json(#[from] serde_json::Error),
}

impl SessionError {
    /// A mistake in what was asked (exit 2), not a failure to do it.
    pub fn is_usage(&self) -> bool {
        matches!(
            self,
            SessionError::InvalidId(_)
                | SessionError::EnvInject(_)
                | SessionError::Workspace { .. }
                | SessionError::Rejected(_)
        )
    }
}

/// `session create`'s limits per tree (`vocab::limits`).
#[derive(Debug, Clone, clap::Args)]
pub struct LimitArgs {
    /// Each tree may have at most N processes and threads (cgroup v2
    /// pids.max; a fork over it fails with EAGAIN). Over its policy's
    /// limits:, as --memory, --cpu and --wall are.
    #[arg(long, value_name = "N")]
    pids: Option<u64>,
    /// Each tree's memory (512M, 2G, bytes); over it the tree is ended.
    #[arg(long, value_name = "SIZE")]
    memory: Option<String>,
    /// Each tree's CPU per second of wall time (0.5, 2, 50%).
    #[arg(long, value_name = "SHARE")]
    cpu: Option<String>,
    /// How long each tree may run (30m, 10s); then it is killed.
    #[arg(long, value_name = "DURATION")]
    wall: Option<String>,
    /// Where the limits cannot be applied, run its shells without them
    /// (said in their wrap_init events) instead of refusing them.
    #[arg(long)]
    limits_best_effort: bool,
}

type Result<T> = std::result::Result<T, SessionError>;

/// Runs one `agentsh session` command.
///
/// # Errors
/// What failed; [`SessionError::is_usage`] says which exit 2.
pub fn run(cmd: SessionCommand) -> Result<()> {
    match cmd {
        SessionCommand::Create {
            id,
            policy,
            workspace,
            env_deny,
            env_allow,
            env_inject,
            limits,
            at,
        } => {
            let mut body = create_body(
                &id,
                policy,
                workspace,
                EnvRules {
                    deny: env_deny,
                    allow: env_allow,
                    inject: env_inject,
                },
            )?;
            let LimitArgs {
                pids,
                memory,
                cpu,
                wall,
                limits_best_effort,
            } = *limits;
            let limits = crate::vocab::LimitsDoc {
                pids,
                memory,
                cpu,
                wall,
                compat: limits_best_effort.then_some(crate::vocab::LimitsCompat::BestEffort),
            };
            if limits != crate::vocab::LimitsDoc::default() {
                body["limits"] = serde_json::to_value(&limits)?;
            }
            create(&at, &body)
        }
        SessionCommand::List { json, at } => list(&at, json),
        SessionCommand::Show { id, at } => {
            let v = at
                .client(TIMEOUT)?
                .get_json(&format!("/api/v1/sessions/{id}"))?;
            println!("{}", serde_json::to_string_pretty(&v)?);
            Ok(())
        }
        SessionCommand::End { id, force, at } => end(&at, &id, force),
    }
}

/// `--env-deny`, `--env-allow` and `--env-inject` as given.
struct EnvRules {
    deny: Vec<String>,
    allow: Vec<String>,
    inject: Vec<String>,
}

/// The body of `POST /api/v1/sessions`; relative paths made absolute here
/// (they are the caller's, not the server's).
fn create_body(
    id: &str,
    policy: Option<String>,
    workspace: Option<PathBuf>,
    env: EnvRules,
) -> Result<serde_json::Value> {
    if !crate::session::valid_id(id) {
        return Err(SessionError::InvalidId(id.to_string()));
    }
    let mut inject = serde_json::Map::new();
    for kv in &env.inject {
        let Some((k, v)) = kv.split_once('=') else {
            return Err(SessionError::EnvInject(kv.clone()));
        };
        inject.insert(k.to_string(), serde_json::Value::String(v.to_string()));
    }
    let workspace = match workspace {
        Some(w) => Some(
            std::path::absolute(&w)
                .map_err(|source| SessionError::Workspace { path: w, source })?
                .to_string_lossy()
                .into_owned(),
        ),
        None => None,
    };
    let mut body = serde_json::json!({ "id": id });
    if let Some(p) = policy {
        // A relative file is the caller's, not the server's.
        let p = if p.contains('/') {
            std::path::absolute(&p).map_or(p.clone(), |a| a.to_string_lossy().into_owned())
        } else {
            p
        };
        body["policy"] = p.into();
    }
    if let Some(w) = workspace {
        body["workspace"] = w.into();
    }
    if !(env.deny.is_empty() && env.allow.is_empty() && inject.is_empty()) {
        body["env"] = serde_json::json!({
            "deny": env.deny,
            "allow": env.allow,
            "inject": inject,
        });
    }
    Ok(body)
}

/// `session create`: asks the server to make it; prints it.
fn create(at: &ServerArgs, body: &serde_json::Value) -> Result<()> {
    let client = at.client(CREATE_TIMEOUT)?;
    let (status, v) = client.call("POST", "/api/v1/sessions", Some(body), true)?;
    match status {
        200 | 201 => {
            println!("{}", line(&v));
            Ok(())
        }
        400 => Err(SessionError::Rejected(error_text(&v))),
        _ => Err(SessionError::Status {
            status,
            text: error_text(&v),
        }),
    }
}

/// `session list`: a line per session, or the server's JSON.
fn list(at: &ServerArgs, json: bool) -> Result<()> {
    let v = at.client(TIMEOUT)?.get_json("/api/v1/sessions")?;
    if json {
        println!("{v}");
        return Ok(());
    }
    for s in v.as_array().into_iter().flatten() {
        println!("{}", line(s));
    }
    Ok(())
}

/// `policy reload`: the running server reads its policies again; says
/// what each session runs now and what each running tree keeps.
///
/// # Errors
/// The server could not be reached, or refused (nothing changed: why).
pub fn policy_reload(at: &ServerArgs) -> Result<()> {
    // Compiling a policy may hash the programs it names.
    let client = at.client(Duration::from_secs(120))?;
    let (status, v) = client.call(
        "POST",
        "/api/v1/policy/reload",
        Some(&serde_json::json!({})),
        true,
    )?;
    if status == 400 {
        return Err(SessionError::Rejected(error_text(&v)));
    }
    if status != 200 {
        return Err(SessionError::Status {
            status,
            text: error_text(&v),
        });
    }
    for line in reload_lines(&v) {
        println!("{line}");
    }
    Ok(())
}

/// What `policy reload` prints of the server's answer.
fn reload_lines(v: &serde_json::Value) -> Vec<String> {
    let short = |h: &serde_json::Value| {
        h.as_str()
            .unwrap_or("")
            .chars()
            .take(12)
            .collect::<String>()
    };
    let mut out = Vec::new();
    for s in v["sessions"].as_array().into_iter().flatten() {
        let trees = s["trees"].as_array().cloned().unwrap_or_default();
        out.push(format!(
            "session {}: policy {} {} (sha256 {}{}); {} running tree(s) judged by it from their next call",
            s["session"].as_str().unwrap_or("?"),
            s["policy"].as_str().unwrap_or("?"),
            if s["changed"].as_bool() == Some(true) { "reloaded" } else { "unchanged" },
            short(&s["hash"]),
            if s["changed"].as_bool() == Some(true) {
                format!(", was {}", short(&s["previous_hash"]))
            } else {
                String::new()
            },
            trees.len(),
        ));
        for t in &trees {
            let kept: Vec<&str> = t["kept_from_start"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|k| k.as_str())
                .collect();
            if !kept.is_empty() {
                out.push(format!(
                    "  tree {}: keeps its start's {} (fixed by the kernel; new shells get the new ones)",
                    t["root_pid"],
                    kept.join(", ")
                ));
            }
        }
    }
    for (key, what) in [
        ("added", "made from the config"),
        (
            "not_in_config",
            "no longer in the config: kept (end it with `agentsh session end ID`)",
        ),
        ("not_applied", "changed in the config: needs a restart"),
    ] {
        let names: Vec<&str> = v[key]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|k| k.as_str())
            .collect();
        if !names.is_empty() {
            out.push(format!("{}: {what}", names.join(", ")));
        }
    }
    out
}

/// `session end [--force]`: ends (or deletes) it and says what became of
/// its live trees.
fn end(at: &ServerArgs, id: &str, force: bool) -> Result<()> {
    let client = at.client(TIMEOUT)?;
    let (status, v) = if force {
        client.call(
            "DELETE",
            &format!("/api/v1/sessions/{id}?force=true"),
            None,
            true,
        )?
    } else {
        client.call(
            "POST",
            &format!("/api/v1/sessions/{id}/end"),
            Some(&serde_json::json!({})),
            true,
        )?
    };
    if status != 200 {
        return Err(SessionError::Status {
            status,
            text: error_text(&v),
        });
    }
    let live: Vec<String> = v["live_trees"]
        .as_array()
        .into_iter()
        .flatten()
        .map(ToString::to_string)
        .collect();
    if force {
        println!(
            "session {id} deleted: {} process(es) of {} tree(s) killed",
            v["killed"],
            live.len()
        );
    } else if live.is_empty() {
        println!("session {id} ended: new shells are refused; no live trees");
    } else {
        println!(
            "session {id} ended: new shells are refused; {} live tree(s) run on (root pids \
             {}); `agentsh session end {id} --force` kills them",
            live.len(),
            live.join(" ")
        );
    }
    Ok(())
}

/// One session on one line.
fn line(s: &serde_json::Value) -> String {
    let trees = s["trees"].as_u64().unwrap_or(0);
    format!(
        "{}\tpolicy={}\tworkspace={}\ttrees={}{}",
        s["id"].as_str().unwrap_or("?"),
        s["policy"].as_str().unwrap_or("?"),
        s["workspace"].as_str().unwrap_or("-"),
        trees,
        if s["ended"].as_bool() == Some(true) {
            "\tENDED"
        } else {
            ""
        }
    )
}
