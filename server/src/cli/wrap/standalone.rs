//! A standalone `agentsh wrap`: wrap's own server, as the invoking user,
//! with CMD below it (through `agentsh wrap --own-server`). Its files: the
//! API socket at `$XDG_RUNTIME_DIR/agentsh/<session>.sock`, state and config
//! under `$XDG_STATE_HOME/agentsh/<session>/`, the audit and the server's
//! log beside them; `--allow-host` makes a policy of its own there; at the
//! end one paragraph says what was judged. Where the files are: `files`.
//!
//! Failure modes: nowhere to keep the files, a directory or file that
//! cannot be written, or the binary not found: 126, CMD never ran; a bad
//! workspace, `--allow-host` or policy: 2 (the user's to fix); a server
//! that cannot supervise: 126 unless `--allow-unsupervised`.

use super::args::Wrap;
use super::command::{exec_plain, record_unsupervised, resolve, say};
use super::derived::DeriveError;
use super::files::{Dirs, WrapFilesError};
use crate::cli::lifecycle::{self, Entrypoint, WrapServer};
use crate::config::secrets::SecretSource;
use crate::config::ConfigError;
use crate::policy::PolicyError;
use std::ffi::{CString, OsString};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// How long wrap waits for its own server to start CMD.
const READY_TIMEOUT: Duration = Duration::from_secs(20);

/// Why a standalone wrap stops before its server starts.
#[derive(Debug, thiserror::Error)]
enum SetupError {
    #[error(transparent)]
    Files(#[from] WrapFilesError),
    #[error("the current directory: {0}")]
    CurrentDir(#[source] std::io::Error),
    #[error("--workspace {}: not a directory", .0.display())]
    Workspace(PathBuf),
    #[error(transparent)]
    Derive(#[from] DeriveError),
    #[error("cannot write {}: {source}", path.display())]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("policy {policy:?}: {source}")]
    Config { policy: String, source: ConfigError },
    #[error("policy {policy:?}: {source}")]
    Policy { policy: String, source: PolicyError },
    #[error("cannot find the agentsh binary: {0}")]
    Exe(#[source] std::io::Error),
    #[error("--secret {0:?}: write NAME=env:VAR or NAME=file:/ABSOLUTE/PATH")]
    Secret(String),
    #[error("--secret {0:?}: its variable is also named by --keep-env (the agent would hold it)")]
    SecretKept(String),
}

impl SetupError {
    /// 2 for what the user gave (workspace, `--allow-host`, policy), 126
    /// (supervision could not be installed) for the rest.
    fn exit_code(&self) -> i32 {
        match self {
            SetupError::CurrentDir(_)
            | SetupError::Workspace(_)
            | SetupError::Derive(_)
            | SetupError::Secret(_)
            | SetupError::SecretKept(_)
            | SetupError::Config { .. }
            | SetupError::Policy { .. } => 2,
            SetupError::Files(_) | SetupError::Write { .. } | SetupError::Exe(_) => {
                agentsh_proto::exit::REFUSED
            }
        }
    }
}

/// Standalone: wrap's own server, CMD below it (through `agentsh wrap
/// --own-server`, which starts it as the shim starts a shell).
pub(super) fn standalone(w: &Wrap, session: &str) -> i32 {
    let setup = match Setup::prepare(w, session) {
        Ok(s) => s,
        Err(e) => {
            say(&e.to_string());
            return e.exit_code();
        }
    };
    if !w.quiet {
        setup.say_start(session);
    }
    let ran = lifecycle::run_or_unable(Entrypoint {
        config: Some(setup.config_path),
        ready_timeout: READY_TIMEOUT,
        command: setup.command,
        wrap: Some(WrapServer {
            session: session.to_string(),
            log: setup.dirs.log.clone(),
            // SAFETY: getpgrp cannot fail.
            pgid: unsafe { libc::getpgrp() },
        }),
    });
    let code = match ran {
        Ok(code) => code,
        Err(lifecycle::Unable { code, why }) => {
            return unsupervised(w, session, &setup.audit, code, &why);
        }
    };
    if !w.quiet {
        report(session, &setup.audit);
    }
    code
}

/// What a standalone wrap's server is started with.
struct Setup {
    dirs: Dirs,
    audit: PathBuf,
    workspace: PathBuf,
    /// The policy as the user named it (`--policy`, or agent-default).
    named: String,
    config_path: PathBuf,
    /// `agentsh wrap --own-server ... -- CMD`, the server's command.
    command: Vec<OsString>,
    /// Names of wrap's environment the policy keeps from CMD.
    removed: Vec<String>,
}

impl Setup {
    /// Makes the directories, the policy (`--allow-host`) and the config,
    /// and checks the policy before anything starts.
    fn prepare(w: &Wrap, session: &str) -> Result<Setup, SetupError> {
        let dirs = Dirs::of(session)?;
        dirs.make()?;
        let pruned = super::prune::prune(&dirs.base, w.keep_runs, session);
        if !pruned.is_empty() && !w.quiet {
            say(&format!(
                "removed the files of {} earlier runs under {} (the newest {} stay: --keep-runs)",
                pruned.len(),
                dirs.base.display(),
                w.keep_runs
            ));
        }
        let audit = w.audit.clone().unwrap_or_else(|| dirs.audit.clone());
        let workspace = workspace_of(w)?;
        let secrets = secrets_of(w)?;
        let policy = policy_of(w, &dirs, &workspace, &secrets)?;
        let config = config_text(&dirs, &audit, &policy, &workspace) + &secrets_text(&secrets);
        let config_path = dirs.state.join("config.yaml");
        write_private(&config_path, &config).map_err(|source| SetupError::Write {
            path: config_path.clone(),
            source,
        })?;
        let removed = removed_names(&check_policy(&config_path, &policy)?);
        let command = own_server_command(w, session, &dirs, &audit)?;
        Ok(Setup {
            dirs,
            audit,
            workspace,
            named: w.policy.clone().unwrap_or_else(|| "agent-default".into()),
            config_path,
            command,
            removed,
        })
    }

    /// The start line: the session, where its approvals and audit are.
    fn say_start(&self, session: &str) {
        say(&format!(
            "session {session}: policy {}, workspace {}; to answer approvals, run in another \
             terminal: agentsh approvals watch --session {session}; audit: {}{}",
            self.named,
            self.workspace.display(),
            self.audit.display(),
            // SAFETY: geteuid cannot fail.
            if unsafe { libc::geteuid() } == 0 {
                ""
            } else {
                " (as an ordinary user: the daemon sockets of other users are not hidden, and \
                 only this user's processes can be supervised)"
            }
        ));
        if !self.removed.is_empty() {
            say(&format!(
                "kept from the agent's environment by the policy's env rules (secrets stay out \
                 of the tree): {}; pass one the agent needs with --keep-env NAME",
                self.removed.join(" ")
            ));
        }
    }
}

/// `--workspace`, else the current directory; it must be a directory.
fn workspace_of(w: &Wrap) -> Result<PathBuf, SetupError> {
    let workspace = match &w.workspace {
        Some(d) => d.clone(),
        None => std::env::current_dir().map_err(SetupError::CurrentDir)?,
    };
    if !workspace.is_dir() {
        return Err(SetupError::Workspace(workspace));
    }
    Ok(workspace)
}

/// `--policy` (agent-default without it), as a copy with `--allow-host`'s
/// rule, `--keep-env`'s names and the files wrap keeps read-only (minus
/// `--writable`'s), written to the session's state.
fn policy_of(
    w: &Wrap,
    dirs: &Dirs,
    workspace: &Path,
    secrets: &[(String, SecretSource)],
) -> Result<String, SetupError> {
    let policy = w.policy.clone().unwrap_or_else(|| "agent-default".into());
    // The policy as given is checked first: its errors name its own file
    // and lines, not the copy's.
    if policy.contains('/') || policy.ends_with(".yaml") || policy.ends_with(".yml") {
        crate::policy::Policy::load(Path::new(&policy)).map_err(|source| SetupError::Policy {
            policy: policy.clone(),
            source,
        })?;
    }
    let home = std::env::var("HOME").ok();
    let writable = super::derived::writable_entries(
        &w.writable,
        home.as_deref(),
        &workspace.to_string_lossy(),
    );
    let deny_env: Vec<String> = secrets.iter().filter_map(|(_, s)| s.env.clone()).collect();
    // The user's own bin directories ahead of the system's on PATH.
    let path_dirs = match (std::env::var("PATH"), home.as_deref()) {
        (Ok(path), Some(h)) => super::derived::path_dirs_in_home(&path, h),
        _ => Vec::new(),
    };
    let text = super::derived::derived_with(
        &policy,
        &w.allow_hosts,
        &w.keep_env,
        &writable,
        &deny_env,
        &path_dirs,
    )?;
    let derived = dirs.state.join("policy.yaml");
    write_private(&derived, &text).map_err(|source| SetupError::Write {
        path: derived.clone(),
        source,
    })?;
    Ok(derived.to_string_lossy().into_owned())
}

/// The policy is checked before anything starts: its errors, with line:col,
/// are the user's to fix (exit 2), not a refusal.
fn check_policy(config_path: &Path, policy: &str) -> Result<crate::policy::Policy, SetupError> {
    let c =
        crate::config::Config::load(Some(config_path)).map_err(|source| SetupError::Config {
            policy: policy.to_string(),
            source,
        })?;
    crate::policy::Policy::resolve(&c.policy, &c.policies_dir).map_err(|source| {
        SetupError::Policy {
            policy: policy.to_string(),
            source,
        }
    })
}

/// The names of wrap's own environment the policy's `env` keeps from CMD
/// (said at start: the agent may need one, e.g. its API key).
fn removed_names(p: &crate::policy::Policy) -> Vec<String> {
    let Some(rules) = p.env() else {
        return Vec::new();
    };
    let mut names: Vec<String> = std::env::vars_os()
        .map(|(k, _)| k)
        .filter(|k| !rules.keeps(k.as_bytes()))
        .map(|k| k.to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

/// `agentsh wrap --own-server --server unix:SOCKET --session ID --audit
/// FILE [--allow-unsupervised] -- CMD`: CMD started below wrap's server.
fn own_server_command(
    w: &Wrap,
    session: &str,
    dirs: &Dirs,
    audit: &Path,
) -> Result<Vec<OsString>, SetupError> {
    let exe = std::env::current_exe().map_err(SetupError::Exe)?;
    let mut command: Vec<OsString> = vec![
        exe.into_os_string(),
        "wrap".into(),
        "--own-server".into(),
        "--server".into(),
        format!("unix:{}", dirs.socket.display()).into(),
        "--session".into(),
        session.into(),
        "--audit".into(),
        audit.as_os_str().to_os_string(),
    ];
    if w.allow_unsupervised {
        command.push("--allow-unsupervised".into());
    }
    command.push("--".into());
    command.extend(w.command.iter().cloned());
    Ok(command)
}

/// The server could not supervise (`why`): without `--allow-unsupervised`
/// CMD does not run (`code`); with it, CMD runs unsupervised, said on stderr
/// and in wrap's audit.
fn unsupervised(
    w: &Wrap,
    session: &str,
    audit: &Path,
    code: i32,
    why: &lifecycle::LaunchError,
) -> i32 {
    let why = format!("supervision could not be installed: {why}");
    let public = w.command[0].to_string_lossy().into_owned();
    if !w.allow_unsupervised {
        say(&format!(
            "{why}; {public} did not run (--allow-unsupervised runs it without supervision)"
        ));
        return code;
    }
    say(&format!(
        "{why}; running {public} UNSUPERVISED (--allow-unsupervised)"
    ));
    let with_audit = Wrap {
        audit: Some(audit.to_path_buf()),
        ..w.clone()
    };
    record_unsupervised(&with_audit, session, &why);
    let Some(real) = resolve(&w.command[0]) else {
        return agentsh_proto::exit::NOT_FOUND;
    };
    let argv: Vec<CString> = w
        .command
        .iter()
        .filter_map(|a| CString::new(a.as_bytes()).ok())
        .collect();
    exec_plain(&real, &argv)
}

/// `--secret`'s credentials, checked.
fn secrets_of(w: &Wrap) -> Result<Vec<(String, SecretSource)>, SetupError> {
    let mut out = Vec::new();
    for s in &w.secrets {
        let bad = || SetupError::Secret(s.clone());
        let (name, source) = s.split_once('=').ok_or_else(bad)?;
        let token = |t: &str| {
            !t.is_empty()
                && t.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
        };
        if !token(name) {
            return Err(bad());
        }
        let source = match source.split_once(':') {
            Some(("env", var)) if token(var) => {
                if w.keep_env.iter().any(|k| k == var) {
                    return Err(SetupError::SecretKept(s.clone()));
                }
                SecretSource {
                    file: None,
                    env: Some(var.to_string()),
                }
            }
            Some(("file", path)) if path.starts_with('/') => SecretSource {
                file: Some(PathBuf::from(path)),
                env: None,
            },
            _ => return Err(bad()),
        };
        out.push((name.to_string(), source));
    }
    Ok(out)
}

/// The config's `secrets:` for `--secret`.
fn secrets_text(secrets: &[(String, SecretSource)]) -> String {
    if secrets.is_empty() {
        return String::new();
    }
    let q = |t: &str| serde_json::to_string(t).unwrap_or_default();
    let mut out = String::from("secrets:\n");
    for (name, s) in secrets {
        match (&s.env, &s.file) {
            (Some(var), _) => out.push_str(&format!("  {}: {{env: {}}}\n", q(name), q(var))),
            (None, Some(f)) => out.push_str(&format!(
                "  {}: {{file: {}}}\n",
                q(name),
                q(&f.to_string_lossy())
            )),
            (None, None) => {}
        }
    }
    out
}

/// The server's config for a standalone wrap.
fn config_text(dirs: &Dirs, audit: &Path, policy: &str, workspace: &Path) -> String {
    let q = |p: &Path| serde_json::to_string(&p.to_string_lossy()).unwrap_or_default();
    let policy_line = if policy.contains('/') {
        let abs = std::fs::canonicalize(policy).unwrap_or_else(|_| PathBuf::from(policy));
        format!("policy: {}\n", q(&abs))
    } else {
        format!(
            "policy: {}\n",
            serde_json::to_string(policy).unwrap_or_default()
        )
    };
    format!(
        "{}\nserver:\n  socket: {}\n{policy_line}\
         workspace: {}\nstate_dir: {}\naudit:\n  jsonl: {}\n\
         # The user cannot bind port 53: the DNS stub takes a free port (trees'\n\
         # queries to any resolver are sent to it).\negress:\n  stub: \"127.0.0.153:0\"\n\
         # One CA per user for egress rules with http: (its key's directory\n\
         # is never a tree's to read).\n  ca: {}\n  ca_key: {}\n\
         # A person answers approvals from another terminal: two minutes.\n\
         execve:\n  approval_timeout: 2m\n",
        super::prune::MARK,
        q(&dirs.socket),
        q(workspace),
        q(&dirs.state),
        q(audit),
        q(&dirs.base.join("ca.pem")),
        q(&dirs.base.join("ca-key").join(crate::config::CA_KEY_FILE)),
    )
}

fn write_private(path: &Path, text: &str) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)?;
    f.write_all(text.as_bytes())
}

/// The one paragraph on stderr when wrap ends: what was judged, where the
/// record is.
fn report(session: &str, audit: &Path) {
    let text = std::fs::read_to_string(audit).unwrap_or_default();
    let (mut execs, mut denied, mut approvals, mut connects) = (0u64, 0u64, 0u64, 0u64);
    for line in text.lines() {
        let Ok(e) = serde_json::from_str::<serde_json::Value>(line) else {
            continue;
        };
        if e["session_id"] != session {
            continue;
        }
        let refused = e["effective_action"] == "deny"
            || e["decision"] == "deny" && e["effective_action"].is_null();
        match e["type"].as_str() {
            Some("execve") => {
                execs += 1;
                denied += u64::from(refused);
            }
            Some("connect") => {
                connects += 1;
                denied += u64::from(refused);
            }
            _ => {}
        }
        approvals += u64::from(e["approval_id"].is_string());
    }
    say(&format!(
        "session {session} ended: {execs} execs and {connects} destinations judged, {denied} \
         refused, {approvals} approvals asked; audit: {}",
        audit.display()
    ));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_config_names_the_session_files_and_a_free_stub_port() {
        let dirs = Dirs {
            base: "/h/.local/state/agentsh".into(),
            state: "/h/.local/state/agentsh/s1".into(),
            run: "/run/user/1000/agentsh".into(),
            socket: "/run/user/1000/agentsh/s1.sock".into(),
            audit: "/h/.local/state/agentsh/s1.jsonl".into(),
            log: "/h/.local/state/agentsh/s1.log".into(),
        };
        let text = config_text(&dirs, &dirs.audit, "agent-default", Path::new("/w s"));
        let c = crate::config::Config::from_yaml(&text, "t").unwrap();
        assert_eq!(c.server.socket, dirs.socket);
        assert_eq!(c.state_dir, dirs.state);
        assert_eq!(c.policy, "agent-default");
        assert!(text.contains("workspace: \"/w s\""), "{text}");
        assert_eq!(c.egress.stub_addr().unwrap().port(), 0);
        assert_eq!(
            c.execve.approval_timeout,
            std::time::Duration::from_secs(120),
            "a person switching terminals has time to answer"
        );
    }
}
