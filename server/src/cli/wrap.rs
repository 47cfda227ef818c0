//! `agentsh wrap -- CMD`: the same supervision for a coding agent on a
//! developer's machine, without replacing `/bin/sh` and without root.
//!
//! Two ways, one exec path (the server's supervisor; nothing copied):
//! * **Standalone** (the default when no server answers at
//!   `/run/agentsh/api.sock`): wrap starts an `agentsh server` of its own, as
//!   the invoking user, with CMD as the server's command (as `agentsh
//!   entrypoint` does), so the server is an ancestor of the whole tree (ptrace
//!   and `/proc` reads work under Yama 1 without privileges). Its files are
//!   the user's: the API socket (approvals) at
//!   `$XDG_RUNTIME_DIR/agentsh/<session>.sock`, state and config under
//!   `$XDG_STATE_HOME/agentsh/<session>/`, the audit at
//!   `$XDG_STATE_HOME/agentsh/<session>.jsonl`, the server's log beside it.
//!   The server runs in a process group of its own; CMD joins the group the
//!   terminal gave wrap, so ^C and ^Z are the agent's.
//! * **Server mode** (`--server unix:/PATH`): wrap-init on that server, like
//!   the shim, so its policy, approvals and audit apply.
//!
//! Either way CMD itself is started the way the shim starts a shell
//! (`agentsh_shell_shim::supervise`: wrap-init, the relay, `agentsh-unixwrap`
//! exec'd in place with CMD as its command), trusting root's server or, for
//! wrap's own server, the invoking user's files only.
//!
//! Failure modes: inside a supervised tree, refused (126); CMD not found
//! (127); supervision that cannot be installed (the server does not start or
//! refuses, the kernel lacks what the policy needs): 126 with the reason,
//! CMD never ran, unless `--allow-unsupervised`, which runs it without and
//! says so on stderr and in the audit.

use crate::cli::lifecycle::{self, Entrypoint, WrapServer};
use agentsh_proto::shimconf::{Mode, Server, ShimConf};
use std::ffi::{CString, OsStr, OsString};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// How long wrap waits for its own server to start CMD.
const READY_TIMEOUT: Duration = Duration::from_secs(20);

/// `agentsh wrap`'s options.
#[derive(Debug, Clone, clap::Args)]
pub struct Wrap {
    /// Policy: a shipped name (agent-default, agent-strict, agent-observe), a
    /// name under the policies directory, or a file.
    #[arg(long, value_name = "NAME|FILE")]
    pub policy: Option<String>,
    /// The session id [default: wrap-<time>-<pid>].
    #[arg(long, value_name = "ID")]
    pub session: Option<String>,
    /// The agent's workspace (${WORKSPACE} in file rules) [default: the current directory].
    #[arg(long, value_name = "DIR")]
    pub workspace: Option<PathBuf>,
    /// Use this server (unix:/PATH, a root server) instead of one of wrap's own.
    #[arg(long, value_name = "unix:/PATH", conflicts_with = "standalone")]
    pub server: Option<String>,
    /// Run a server of wrap's own even if one answers at /run/agentsh/api.sock.
    #[arg(long)]
    pub standalone: bool,
    /// The audit file of wrap's own server [default: $XDG_STATE_HOME/agentsh/ID.jsonl].
    #[arg(long, value_name = "FILE")]
    pub audit: Option<PathBuf>,
    /// If supervision cannot be installed, run CMD anyway, without it (said
    /// on stderr and in the audit). Without this, wrap exits 126 instead.
    #[arg(long)]
    pub allow_unsupervised: bool,
    /// A name the agent itself must reach, e.g. its model's API
    /// (api.anthropic.com, api.openai.com): allowed on port 443 by an egress
    /// rule put before the policy's own (after its deny rules). Repeatable;
    /// `*.example.com` for the names below one. Standalone only.
    #[arg(long = "allow-host", value_name = "HOST")]
    pub allow_hosts: Vec<String>,
    /// No start line and no session report on stderr.
    #[arg(long)]
    pub quiet: bool,
    /// Internal: CMD below wrap's own server (trust the user's server,
    /// socket and wrapper).
    #[arg(long, hide = true)]
    pub own_server: bool,
    /// The command and its arguments.
    #[arg(last = true, required = true, value_name = "CMD")]
    pub command: Vec<OsString>,
}

fn say(msg: &str) {
    eprintln!("agentsh wrap: {msg}");
}

/// Runs `agentsh wrap`; returns the exit status.
pub fn run(w: Wrap) -> i32 {
    if agentsh_proto::marker::agentsh_filter_present() {
        say(
            "this process already runs under agentsh's supervision (a supervised tree): wrap \
             is not nested; run the command directly, it is supervised already",
        );
        return agentsh_proto::exit::REFUSED;
    }
    let Some(program) = w.command.first() else {
        say("no command given: agentsh wrap [OPTIONS] -- CMD [ARGS...]");
        return 2;
    };
    let Some(real) = resolve(program) else {
        say(&format!("{}: command not found", program.to_string_lossy()));
        return agentsh_proto::exit::NOT_FOUND;
    };
    if !w.allow_hosts.is_empty() && w.server.is_some() && !w.own_server {
        say("--allow-host changes the policy of wrap's own server; with --server, the server's policy decides (add the rule there)");
        return 2;
    }
    let session = w.session.clone().unwrap_or_else(new_session_id);
    if !crate::session::valid_id(&session) {
        say(&format!(
            "--session {session:?}: use letters, digits, '-', '_' and '.' only"
        ));
        return 2;
    }
    match (
        &w.server,
        w.standalone || w.server.is_none() && !root_server_answers(),
    ) {
        (Some(s), _) => match s.strip_prefix("unix:") {
            Some(path) => exec_under(&w, &session, Path::new(path), &real),
            None => {
                say(&format!(
                    "--server {s:?}: give the server's API socket as unix:/PATH"
                ));
                2
            }
        },
        (None, false) => exec_under(
            &w,
            &session,
            Path::new(agentsh_proto::shimconf::DEFAULT_SOCKET),
            &real,
        ),
        (None, true) => standalone(&w, &session),
    }
}

/// `CMD` as found on `PATH` (a name with a `/` as is).
fn resolve(program: &OsStr) -> Option<PathBuf> {
    let p = Path::new(program);
    if program.as_bytes().contains(&b'/') {
        return p.is_file().then(|| p.to_path_buf());
    }
    let path = std::env::var_os("PATH").unwrap_or_else(|| "/usr/bin:/bin".into());
    std::env::split_paths(&path)
        .map(|d| d.join(p))
        .find(|c| is_executable(c))
}

fn is_executable(p: &Path) -> bool {
    let Ok(c) = CString::new(p.as_os_str().as_bytes()) else {
        return false;
    };
    // SAFETY: a NUL-terminated path.
    p.is_file() && unsafe { libc::access(c.as_ptr(), libc::X_OK) } == 0
}

fn new_session_id() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    format!("wrap-{secs}-{}", std::process::id())
}

/// Whether a root server answers at the default socket (then wrap uses it).
fn root_server_answers() -> bool {
    use std::os::unix::fs::MetadataExt;
    let sock = Path::new(agentsh_proto::shimconf::DEFAULT_SOCKET);
    std::fs::symlink_metadata(sock).is_ok_and(|m| m.uid() == 0)
        && crate::cli::client::Client::new(&format!("unix:{}", sock.display()), None)
            .map(|c| c.with_timeout(Duration::from_secs(2)))
            .and_then(|c| c.call("GET", "/healthz", None, false))
            .is_ok_and(|(status, _)| status == 200)
}

/// Starts CMD the way the shim starts a shell, on the server at `socket`:
/// returns only when it could not.
fn exec_under(w: &Wrap, session: &str, socket: &Path, real: &Path) -> i32 {
    let conf = ShimConf {
        mode: Mode::On,
        server: Server::Unix(socket.to_path_buf()),
        session: session.to_string(),
        // wrap's own server names the unixwrap beside this agentsh; a root
        // server, the one the machine's shim.conf allows (as for the shim).
        wrapper: if w.own_server {
            wrapper_beside_us().map(|p| p.to_string_lossy().into_owned())
        } else {
            machine_wrapper()
        },
        // SAFETY: getuid cannot fail.
        also_trusted_uid: w.own_server.then(|| unsafe { libc::getuid() }),
    };
    let argv: Vec<CString> = match w
        .command
        .iter()
        .map(|a| CString::new(a.as_bytes()))
        .collect::<Result<_, _>>()
    {
        Ok(v) => v,
        Err(_) => {
            say("an argument contains a NUL byte");
            return 2;
        }
    };
    let argv_refs: Vec<&std::ffi::CStr> = argv.iter().map(CString::as_c_str).collect();
    let real_s = real.to_string_lossy().into_owned();
    let public = w.command[0].to_string_lossy().into_owned();
    let target = agentsh_shell_shim::Target {
        real: &real_s,
        public: &public,
        argv0: argv_refs[0],
        argv: &argv_refs,
    };
    let failure = agentsh_shell_shim::supervise(&target, &conf, Mode::On);
    let see = failure
        .hint()
        .map(|h| format!("; see {h}"))
        .unwrap_or_default();
    let why = format!("supervision could not be installed: {failure}{see}");
    if !w.allow_unsupervised {
        say(&format!(
            "{why}; {public} did not run (--allow-unsupervised runs it without supervision)"
        ));
        return agentsh_proto::exit::REFUSED;
    }
    say(&format!(
        "{why}; running {public} UNSUPERVISED (--allow-unsupervised)"
    ));
    tracing::warn!(session, command = %public, "running UNSUPERVISED: {why}");
    record_unsupervised(w, session, &why);
    exec_plain(real, &argv)
}

/// The wrapper the machine's shim.conf allows (`wrapper=`), read with the
/// shim's own rules (a file not root-owned is not trusted); `None`: the
/// packaged locations.
fn machine_wrapper() -> Option<String> {
    match agentsh_proto::shimconf::load(agentsh_proto::shimconf::SHIM_CONF_PATH) {
        agentsh_proto::shimconf::Loaded::Trusted(c) => c.wrapper,
        _ => None,
    }
}

/// The `agentsh-unixwrap` next to this binary.
fn wrapper_beside_us() -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?;
    Some(exe.parent()?.join("agentsh-unixwrap"))
}

/// An unsupervised run, in wrap's own audit file (standalone); a server's
/// audit is the server's to write (its log has the journal line).
fn record_unsupervised(w: &Wrap, session: &str, why: &str) {
    let Some(path) = w.audit.clone().or_else(|| {
        (w.server.is_none() || w.own_server)
            .then(|| Dirs::of(session).ok().map(|d| d.audit))
            .flatten()
    }) else {
        return;
    };
    match crate::audit::AuditLog::open(&path, 16) {
        Ok(log) => {
            log.record(
                session,
                crate::audit::EventBody::UnsupervisedRun(crate::audit::UnsupervisedEvent {
                    ran_at: chrono_like_now(),
                    pid: std::process::id(),
                    ppid: std::os::unix::process::parent_id(),
                    // SAFETY: getuid cannot fail.
                    uid: unsafe { libc::getuid() },
                    argv: w
                        .command
                        .iter()
                        .map(|a| a.to_string_lossy().into_owned())
                        .collect(),
                    reason: format!("agentsh wrap --allow-unsupervised: {why}"),
                }),
            );
        }
        Err(e) => say(&format!(
            "cannot record the unsupervised run in {}: {e}",
            path.display()
        )),
    }
}

fn chrono_like_now() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    format!("unix:{secs}")
}

fn exec_plain(real: &Path, argv: &[CString]) -> i32 {
    let Ok(path) = CString::new(real.as_os_str().as_bytes()) else {
        return agentsh_proto::exit::NOT_FOUND;
    };
    let mut ptrs: Vec<*const libc::c_char> = argv.iter().map(|a| a.as_ptr()).collect();
    ptrs.push(std::ptr::null());
    // SAFETY: NUL-terminated strings that outlive the call; a
    // NULL-terminated array.
    unsafe { libc::execv(path.as_ptr(), ptrs.as_ptr()) };
    say(&format!(
        "cannot run {}: {}",
        real.display(),
        std::io::Error::last_os_error()
    ));
    agentsh_proto::exit::REFUSED
}

/// The API socket of standalone wrap `session` (for `agentsh approvals
/// --session`), as the user who ran it finds it.
///
/// # Errors
/// Neither XDG_STATE_HOME nor HOME says where; or no such socket.
pub fn socket_of(session: &str) -> Result<PathBuf, String> {
    let d = Dirs::of(session)?;
    if std::fs::symlink_metadata(&d.socket).is_err() {
        return Err(format!(
            "no agentsh wrap session {session:?} of this user is running (no socket at {}); \
             run this as the user who ran `agentsh wrap`, with the same XDG_RUNTIME_DIR",
            d.socket.display()
        ));
    }
    Ok(d.socket)
}

/// The audit file of standalone wrap `session` of this user, if there is one.
pub fn audit_of(session: &str) -> Option<PathBuf> {
    Dirs::of(session)
        .ok()
        .map(|d| d.audit)
        .filter(|a| a.is_file())
}

/// Where a standalone wrap keeps its files.
struct Dirs {
    /// `$XDG_STATE_HOME/agentsh` (`~/.local/state/agentsh`).
    base: PathBuf,
    /// `<base>/<session>`: the server's state and config.
    state: PathBuf,
    /// `$XDG_RUNTIME_DIR/agentsh` (else `<state>/run`): the API socket's.
    run: PathBuf,
    socket: PathBuf,
    audit: PathBuf,
    log: PathBuf,
}

impl Dirs {
    fn of(session: &str) -> Result<Dirs, String> {
        let env_dir = |k: &str| {
            std::env::var_os(k)
                .filter(|v| !v.is_empty() && Path::new(v).is_absolute())
                .map(PathBuf::from)
        };
        let base = match env_dir("XDG_STATE_HOME") {
            Some(d) => d.join("agentsh"),
            None => env_dir("HOME")
                .ok_or("neither XDG_STATE_HOME nor HOME is set: nowhere to keep the audit")?
                .join(".local/state/agentsh"),
        };
        let state = base.join(session);
        // The runtime directory: XDG_RUNTIME_DIR, else /run/user/UID where
        // it is this user's, else beside the state.
        let run = env_dir("XDG_RUNTIME_DIR")
            .or_else(|| {
                use std::os::unix::fs::MetadataExt;
                // SAFETY: getuid cannot fail.
                let uid = unsafe { libc::getuid() };
                let d = PathBuf::from(format!("/run/user/{uid}"));
                std::fs::metadata(&d)
                    .is_ok_and(|m| m.is_dir() && m.uid() == uid)
                    .then_some(d)
            })
            .map_or_else(|| state.join("run"), |d| d.join("agentsh"));
        let socket = run.join(format!("{session}.sock"));
        if socket.as_os_str().len() > 107 {
            return Err(format!(
                "the API socket's path {} is longer than a Unix socket's 107 bytes: set \
                 XDG_RUNTIME_DIR to a short directory of yours (mode 0700), or use a shorter \
                 --session",
                socket.display()
            ));
        }
        Ok(Dirs {
            socket,
            audit: base.join(format!("{session}.jsonl")),
            log: base.join(format!("{session}.log")),
            base,
            state,
            run,
        })
    }

    /// Makes the directories, each 0700 where wrap creates it.
    fn make(&self) -> Result<(), String> {
        use std::os::unix::fs::DirBuilderExt;
        for d in [&self.base, &self.state, &self.run] {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(d)
                .map_err(|e| format!("cannot create {}: {e}", d.display()))?;
        }
        Ok(())
    }
}

/// Standalone: wrap's own server, CMD below it (through `agentsh wrap
/// --own-server`, which starts it as the shim starts a shell).
fn standalone(w: &Wrap, session: &str) -> i32 {
    let dirs = match Dirs::of(session) {
        Ok(d) => d,
        Err(e) => {
            say(&e);
            return agentsh_proto::exit::REFUSED;
        }
    };
    if let Err(e) = dirs.make() {
        say(&e);
        return agentsh_proto::exit::REFUSED;
    }
    let audit = w.audit.clone().unwrap_or_else(|| dirs.audit.clone());
    let workspace = match &w.workspace {
        Some(d) => d.clone(),
        None => match std::env::current_dir() {
            Ok(d) => d,
            Err(e) => {
                say(&format!("the current directory: {e}"));
                return 2;
            }
        },
    };
    if !workspace.is_dir() {
        say(&format!(
            "--workspace {}: not a directory",
            workspace.display()
        ));
        return 2;
    }
    let mut policy = w.policy.clone().unwrap_or_else(|| "agent-default".into());
    if !w.allow_hosts.is_empty() {
        match with_hosts(&policy, &w.allow_hosts) {
            Ok(text) => {
                let derived = dirs.state.join("policy.yaml");
                if let Err(e) = write_private(&derived, &text) {
                    say(&format!("cannot write {}: {e}", derived.display()));
                    return agentsh_proto::exit::REFUSED;
                }
                policy = derived.to_string_lossy().into_owned();
            }
            Err(e) => {
                say(&e);
                return 2;
            }
        }
    }
    let config = config_text(&dirs, &audit, &policy, &workspace);
    let config_path = dirs.state.join("config.yaml");
    if let Err(e) = write_private(&config_path, &config) {
        say(&format!("cannot write {}: {e}", config_path.display()));
        return agentsh_proto::exit::REFUSED;
    }
    // The policy is checked before anything starts: its errors, with
    // line:col, are the user's to fix (exit 2), not a refusal.
    if let Err(e) = crate::config::Config::load(Some(&config_path))
        .map_err(|e| e.to_string())
        .and_then(|c| {
            crate::policy::Policy::resolve(&c.policy, &c.policies_dir).map_err(|e| e.to_string())
        })
    {
        say(&format!("policy {policy:?}: {e}"));
        return 2;
    }
    let exe = match std::env::current_exe() {
        Ok(e) => e,
        Err(e) => {
            say(&format!("cannot find the agentsh binary: {e}"));
            return agentsh_proto::exit::REFUSED;
        }
    };
    let mut command: Vec<OsString> = vec![
        exe.into_os_string(),
        "wrap".into(),
        "--own-server".into(),
        "--server".into(),
        format!("unix:{}", dirs.socket.display()).into(),
        "--session".into(),
        session.into(),
        "--audit".into(),
        audit.clone().into_os_string(),
    ];
    if w.allow_unsupervised {
        command.push("--allow-unsupervised".into());
    }
    command.push("--".into());
    command.extend(w.command.iter().cloned());
    // SAFETY: getpgrp cannot fail.
    let pgid = unsafe { libc::getpgrp() };
    if !w.quiet {
        say(&format!(
            "session {session}: policy {policy}, workspace {}; approvals: agentsh approvals \
             list --session {session}; audit: {}{}",
            workspace.display(),
            audit.display(),
            // SAFETY: geteuid cannot fail.
            if unsafe { libc::geteuid() } == 0 {
                ""
            } else {
                " (as an ordinary user: the daemon sockets of other users are not hidden, and \
                 only this user's processes can be supervised)"
            }
        ));
    }
    let ran = lifecycle::run_or_unable(Entrypoint {
        config: Some(config_path),
        ready_timeout: READY_TIMEOUT,
        command,
        wrap: Some(WrapServer {
            session: session.to_string(),
            log: dirs.log.clone(),
            pgid,
        }),
    });
    let code = match ran {
        Ok(code) => code,
        Err(lifecycle::Unable { code, why }) => {
            let why = format!("supervision could not be installed: {why}");
            let public = w.command[0].to_string_lossy().into_owned();
            if !w.allow_unsupervised {
                say(&format!(
                    "{why}; {public} did not run (--allow-unsupervised runs it without \
                     supervision)"
                ));
                return code;
            }
            say(&format!(
                "{why}; running {public} UNSUPERVISED (--allow-unsupervised)"
            ));
            let with_audit = Wrap {
                audit: Some(audit.clone()),
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
            return exec_plain(&real, &argv);
        }
    };
    if !w.quiet {
        report(session, &audit);
    }
    code
}

/// The name of the egress rule `--allow-host` adds.
const ALLOW_HOST_RULE: &str = "wrap-allow-host";

/// The policy `name_or_path` (as the server would find it: a file, a file
/// in the policies directory, or a shipped one) with an egress rule
/// allowing `hosts` on 443 after its leading deny rules (so a name that
/// resolves into cloud metadata stays refused).
fn with_hosts(name_or_path: &str, hosts: &[String]) -> Result<String, String> {
    use serde_yaml_ng::{Mapping, Value};
    for h in hosts {
        crate::policy::egress::parse_host(h).map_err(|e| format!("--allow-host {h:?}: {e}"))?;
    }
    let text = if name_or_path.contains('/') || name_or_path.ends_with(".yaml") {
        std::fs::read_to_string(name_or_path).map_err(|e| format!("policy {name_or_path}: {e}"))?
    } else {
        let dir = crate::config::Config::load(None).map_or_else(
            |_| PathBuf::from("/etc/agentsh/policies"),
            |c| c.policies_dir,
        );
        match std::fs::read_to_string(dir.join(format!("{name_or_path}.yaml"))) {
            Ok(t) => t,
            Err(_) => crate::policy::shipped(name_or_path)
                .ok_or_else(|| format!("policy {name_or_path:?}: no such policy"))?
                .to_string(),
        }
    };
    let mut doc: Value =
        serde_yaml_ng::from_str(&text).map_err(|e| format!("policy {name_or_path}: {e}"))?;
    let key = |k: &str| Value::String(k.into());
    let Some(egress) = doc.get_mut("egress").and_then(Value::as_mapping_mut) else {
        return Err(format!(
            "--allow-host: policy {name_or_path} has no egress section, so it judges no \
             destination (every one is allowed as far as its network_rules' ports go)"
        ));
    };
    let rules = egress
        .entry(key("rules"))
        .or_insert_with(|| Value::Sequence(Vec::new()));
    let Some(rules) = rules.as_sequence_mut() else {
        return Err(format!("policy {name_or_path}: egress.rules is not a list"));
    };
    let at = rules
        .iter()
        .take_while(|r| r.get("decision").and_then(Value::as_str) == Some("deny"))
        .count();
    let mut rule = Mapping::new();
    rule.insert(key("name"), key(ALLOW_HOST_RULE));
    rule.insert(
        key("hosts"),
        Value::Sequence(hosts.iter().map(|h| key(h)).collect()),
    );
    rule.insert(
        key("ports"),
        Value::Sequence(vec![Value::Number(443.into())]),
    );
    rule.insert(key("decision"), key("allow"));
    rules.insert(at, Value::Mapping(rule));
    serde_yaml_ng::to_string(&doc).map_err(|e| e.to_string())
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
        "# Written by `agentsh wrap` for this session.\nserver:\n  socket: {}\n{policy_line}\
         workspace: {}\nstate_dir: {}\naudit:\n  jsonl: {}\n\
         # The user cannot bind port 53: the DNS stub takes a free port (trees'\n\
         # queries to any resolver are sent to it).\negress:\n  stub: \"127.0.0.153:0\"\n",
        q(&dirs.socket),
        q(workspace),
        q(&dirs.state),
        q(audit),
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
    }

    #[test]
    fn allow_host_puts_a_rule_after_the_deny_rules() {
        let text = with_hosts("agent-default", &["api.anthropic.com".into()]).unwrap();
        let p = crate::policy::Policy::from_yaml(&text, "t").unwrap();
        let e = p.egress().unwrap();
        assert_eq!(e.rules[0].name, "no-cloud-metadata");
        assert_eq!(e.rules[1].name, ALLOW_HOST_RULE);
        assert!(e.could_allow_name("api.anthropic.com"));
        assert!(!e.could_allow_name("s3cr3t.attacker.example"));
        let names = ["api.anthropic.com".to_string()];
        let v = crate::policy::egress::judge_destination(
            e,
            &crate::policy::egress::Destination {
                ip: "203.0.113.9".parse().unwrap(),
                port: 443,
                protocol: crate::policy::egress::Protocol::Tcp,
                names: &names,
            },
        );
        assert_eq!(
            (v.decision, v.rule.as_str()),
            (crate::policy::Decision::Allow, ALLOW_HOST_RULE)
        );
        // Metadata stays refused whatever the name resolves to.
        let v = crate::policy::egress::judge_destination(
            e,
            &crate::policy::egress::Destination {
                ip: "169.254.169.254".parse().unwrap(),
                port: 443,
                protocol: crate::policy::egress::Protocol::Tcp,
                names: &names,
            },
        );
        assert_eq!(v.decision, crate::policy::Decision::Deny);
        assert!(with_hosts("agent-default", &["https://x/y".into()]).is_err());
    }
}
