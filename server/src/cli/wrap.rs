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

//!
//! Standalone's own parts (its files, its server's config, `--allow-host`,
//! the closing report) are in `standalone`.

mod standalone;

pub use standalone::{audit_of, socket_of, WrapFilesError};

use agentsh_proto::shimconf::{Mode, Server, ShimConf};
use standalone::{standalone, Dirs};
use std::ffi::{CString, OsStr, OsString};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

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
