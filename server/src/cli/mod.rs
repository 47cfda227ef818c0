//! The `agentsh` command line: the server (`agentsh server`, see `daemon`)
//! and the admin tools. One file per tool family: `approvals`, `lifecycle`
//! (`ready`, `entrypoint`), `events`, `policy_tools` (`policy test` and
//! `generate`), `session`, `wrap`, `client` (how every tool talks to the
//! server); `installer` (`agentsh shim ...`) has its own folder. Here: the
//! subcommands, and one small function per subcommand `main` dispatches to.
//!
//! Failure modes: every tool prints one line `agentsh: <what failed>` (its
//! module's error, as text) and exits non-zero (2 for bad input where the
//! tool says so); nothing here decides anything about a supervised tree.

pub mod approvals;
pub mod client;
mod events;
pub mod lifecycle;
mod policy_tools;
mod session;
pub(crate) mod wrap;

use crate::config::{ConfigError, CONFIG_HELP, EMBEDDED_CONFIG};
use crate::installer::{self, ShimCommand};
use crate::policy;
use clap::{CommandFactory, Parser, Subcommand};
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// What a tool of this file could not do.
#[derive(Debug, thiserror::Error)]
enum ToolError {
    #[error("{0} is not a number of seconds (0 or more)")]
    Seconds(f64),
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(transparent)]
    Ready(#[from] lifecycle::ReadyError),
    #[error("{0}")]
    Json(#[from] serde_json::Error),
    #[error("cannot render {page}: {source}")]
    RenderMan {
        page: String,
        source: std::io::Error,
    },
    #[error("cannot write {}: {source}", path.display())]
    WriteMan {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot create {}: {source}", dir.display())]
    ManDir {
        dir: PathBuf,
        source: std::io::Error,
    },
}

/// agentsh: kernel-enforced policy on every command an AI agent runs.
#[derive(Debug, Parser)]
#[command(
    name = "agentsh",
    version,
    about = "agentsh: kernel-enforced policy on every command an AI agent runs (server and admin CLI)",
    long_about = None
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the server: HTTP API, wrap-init, notify-fd handoff, exec supervisor, audit.
    #[command(after_help = CONFIG_HELP)]
    Server {
        /// YAML config file; without it the embedded defaults are used.
        #[arg(long, value_name = "PATH")]
        config: Option<PathBuf>,
        /// Print the embedded default config and exit.
        #[arg(long)]
        print_config: bool,
        /// Where `agentsh entrypoint` reads what became of CMD (internal).
        #[arg(long, hide = true, value_name = "FD")]
        report_fd: Option<i32>,
        /// A session to make at start besides `default` (internal: `agentsh wrap`).
        #[arg(long, hide = true, value_name = "ID")]
        session: Option<String>,
        /// The process group CMD joins (internal: `agentsh wrap`).
        #[arg(long, hide = true, value_name = "PGID")]
        command_pgid: Option<i32>,
        /// CMD's stdin is this fd, its stdout and stderr the next two
        /// (internal: `agentsh wrap`, whose terminal they are).
        #[arg(long, hide = true, value_name = "FD")]
        command_stdio: Option<i32>,
        /// A command to run below the server once it is ready (the SDK's
        /// daemon), so that every shell it starts descends from the server:
        /// what a server without CAP_SYS_PTRACE needs under Yama ptrace_scope 1
        /// (Docker's defaults on Ubuntu hosts). The server stops when CMD
        /// exits, with CMD's status; stop signals from outside every tree are
        /// passed to CMD. `agentsh entrypoint` runs the server this way.
        #[arg(last = true, value_name = "CMD")]
        command: Vec<std::ffi::OsString>,
    },
    /// Internal: the subreaper between the server and its CMD (see
    /// `agentsh server -- CMD`).
    #[command(hide = true)]
    Reaper {
        /// The server's pid (our parent).
        #[arg(long)]
        server: u32,
        /// The soft open-file limit to give CMD.
        #[arg(long)]
        nofile_soft: Option<u64>,
        /// The process group CMD joins (`agentsh wrap`).
        #[arg(long)]
        join_pgid: Option<i32>,
        #[arg(last = true, required = true)]
        command: Vec<std::ffi::OsString>,
    },
    /// Internal: the server's rehearsal shell (see `agentsh server`), started
    /// by the server itself before it is ready.
    #[command(hide = true)]
    Rehearse {
        /// The server's API socket.
        #[arg(long)]
        socket: PathBuf,
        /// The wrapper the server names (`wrapper_binary`).
        #[arg(long)]
        wrapper: Option<String>,
    },
    /// Policy tools.
    Policy {
        #[command(subcommand)]
        command: PolicyCommand,
    },
    /// Print a session's audit events (JSON Lines) from a running server, or
    /// search the audit log files (`events query`).
    #[command(args_conflicts_with_subcommands = true)]
    Events {
        #[command(subcommand)]
        query: Option<EventsCommand>,
        /// Session id (a standalone `agentsh wrap`'s too: its server while it
        /// runs, its audit file once it has ended).
        #[arg(long, default_value = "default")]
        session: String,
        /// Keep printing new events as they arrive.
        #[arg(long)]
        follow: bool,
        /// The server: unix:/PATH (its API socket; as root) or http://HOST:PORT
        /// (its TCP listener; with the operator token).
        #[arg(long, default_value = agentsh_proto::shimconf::DEFAULT_SERVER)]
        server: String,
        /// Output: `json` (one event per line) or `table` (readable columns).
        #[arg(long, value_enum, default_value = "json")]
        format: EventFormat,
    },
    /// List, decide and watch execs waiting for an operator (`decision: approve`).
    Approvals {
        #[command(subcommand)]
        command: approvals::ApprovalsCommand,
    },
    /// Make, list, show and end sessions of a running server: each task its own
    /// policy, workspace and environment rules. A shell joins one with
    /// AGENTSH_SESSION=ID in its environment (the first shell of a tree; its
    /// session is then fixed) or shim.conf session=ID. Sessions made here last
    /// until the server stops; the config's `sessions:` are made at every start.
    Session {
        #[command(subcommand)]
        command: session::SessionCommand,
    },
    /// Install, remove or inspect the shell shim (/bin/sh).
    Shim {
        #[command(subcommand)]
        command: ShimCommand,
    },
    /// Wait until a server is ready to supervise shells; exit 0 when it is, 1 at
    /// the timeout, or at once when the server says it cannot supervise shells
    /// here (the reason is printed).
    ///
    /// For start-up scripts: `agentsh server & agentsh ready --timeout 10 && exec DAEMON`.
    /// With --config, the address is the one that config file gives the server
    /// (so a unit's ExecStartPost follows a changed port). Run inside a shell
    /// agentsh supervises (an SDK's ready command), it exits 0 at once: that
    /// shell's supervision is the proof that its server is up.
    Ready {
        /// The server: unix:/PATH or http://HOST:PORT [default: unix:/run/agentsh/api.sock].
        #[arg(long, conflicts_with = "config")]
        server: Option<String>,
        /// Take the address from this server config file (server.socket).
        #[arg(long, value_name = "PATH")]
        config: Option<PathBuf>,
        /// Seconds to wait.
        #[arg(long, default_value_t = 10.0, value_name = "SECS")]
        timeout: f64,
    },
    /// A container's first process where there is no systemd: start the server,
    /// wait until it is ready, then run CMD (the SDK's daemon).
    ///
    /// CMD runs only once the server answers, so no shell of the sandbox starts
    /// before supervision is possible. SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1
    /// and SIGUSR2 are forwarded to CMD; when CMD exits, the server is stopped
    /// and the entrypoint exits with CMD's status (128+N for signal N). A
    /// server that dies is started again (a supervised tree cannot exec while
    /// it is down). Exit 1 when the server cannot be started, 127 when CMD is
    /// not found. Orphans re-parented to it are reaped.
    ///
    /// Docker: ENTRYPOINT ["agentsh", "entrypoint", "--"] with CMD ["envd"].
    /// Exec form matters: a shell-form entrypoint would run /bin/sh (the shim)
    /// before the server exists.
    #[command(verbatim_doc_comment)]
    Entrypoint {
        /// Server config file (as for `agentsh server --config`); embedded defaults without it.
        #[arg(long, value_name = "PATH")]
        config: Option<PathBuf>,
        /// Seconds to wait for the server to answer before giving up (exit 1).
        #[arg(long, default_value_t = 10.0, value_name = "SECS")]
        ready_timeout: f64,
        /// The command to run once the server is ready, with its arguments.
        #[arg(last = true, required = true, value_name = "CMD")]
        command: Vec<std::ffi::OsString>,
    },
    /// Run an AI coding agent (or any command) under agentsh's supervision on
    /// a developer's machine, without replacing /bin/sh and without root.
    ///
    /// Every exec of CMD's tree, at any depth, is judged by the policy
    /// (agent-default unless --policy), audited, and may wait for an operator
    /// (`agentsh approvals list|approve|deny --session ID` from another
    /// terminal); Landlock limits its files and ports, egress its
    /// destinations. Standalone (no server at /run/agentsh/api.sock, or
    /// --standalone): wrap runs a server of its own, as you, an ancestor of the
    /// whole tree; its files: $XDG_RUNTIME_DIR/agentsh/ID.sock (approvals),
    /// $XDG_STATE_HOME/agentsh/ID.jsonl (audit), ID.log (the server's log).
    /// With --server unix:/PATH: that server's policy, approvals and audit.
    ///
    /// Exit: CMD's status (128+N when it dies of signal N); 126 when
    /// supervision cannot be installed (CMD did not run; --allow-unsupervised
    /// runs it without, said on stderr and in the audit); 127 when CMD is not
    /// found; 2 for usage errors (and a policy with errors). Inside a
    /// supervised tree wrap refuses (126): the tree is supervised already.
    #[command(verbatim_doc_comment)]
    Wrap(wrap::Wrap),
    /// What this host offers agentsh: seccomp user-notify (WAIT_KILLABLE_RECV,
    /// SYNC_WAKE_UP), SECCOMP_RET_TRACE + ptrace, the Landlock ABI, fanotify
    /// permission events, gVisor, Yama, the capabilities that matter; and
    /// which backend and protections a wrap-init would get here.
    ///
    /// Every answer is probed for real in a short-lived child process. The
    /// server logs the same at start and serves it at GET /api/v1/status.
    #[command(verbatim_doc_comment)]
    Detect {
        /// One JSON object instead of text.
        #[arg(long)]
        json: bool,
        /// Take landlock.max_abi from this server config file.
        #[arg(long, value_name = "PATH")]
        config: Option<PathBuf>,
    },
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell).
    ///
    /// bash: agentsh completions bash > /usr/share/bash-completion/completions/agentsh
    #[command(verbatim_doc_comment)]
    Completions {
        /// The shell.
        shell: clap_complete::Shell,
    },
    /// Write man pages (agentsh.1 and one per subcommand) into DIR.
    Man {
        /// Output directory (created if missing).
        #[arg(long, value_name = "DIR")]
        dir: PathBuf,
    },
}

/// `agentsh events query`.
#[derive(Debug, Subcommand)]
enum EventsCommand {
    /// Search the audit log as written (the JSONL file and its rotated
    /// copies FILE.1, FILE.2, ..., oldest first); no server needed. Filters
    /// combine (all must hold).
    Query {
        /// Only this session.
        #[arg(long)]
        session: Option<String>,
        /// Only this policy decision: allow, deny, audit or approve.
        #[arg(long)]
        decision: Option<String>,
        /// Only events with this rule (a policy rule, or a refusal such as
        /// `loader_payload`).
        #[arg(long)]
        rule: Option<String>,
        /// Only the last DURATION: 90s, 15m, 2h, 7d.
        #[arg(long)]
        since: Option<String>,
        /// One JSON object per line instead of the table.
        #[arg(long)]
        json: bool,
        /// The log file.
        #[arg(long, default_value = "/var/log/agentsh/audit.jsonl")]
        file: std::path::PathBuf,
    },
}

#[derive(Debug, Clone, Copy, clap::ValueEnum)]
enum EventFormat {
    Json,
    Table,
}

#[derive(Debug, Subcommand)]
enum PolicyCommand {
    /// Validate a policy file; errors name the line and column. Exit 1 if invalid.
    Check {
        /// The policy YAML file.
        file: PathBuf,
    },
    /// Replay recorded exec events through a policy before enforcing it: print
    /// each event whose verdict would change (rule before -> after). Before is
    /// what was recorded, or --against's verdict. Exit 1 if an event that ran
    /// would be denied, 0 otherwise, 2 for bad input (a line that is not JSON is
    /// named; JSON that is not an event is skipped and counted).
    Test {
        /// The policy to test (a file, or a shipped name).
        file: PathBuf,
        /// The events: a JSON Lines file (audit.jsonl, `agentsh events`' output)
        /// or a session id of the running server.
        #[arg(long, value_name = "SESSION|PATH.jsonl")]
        events: String,
        /// Compare with this policy's verdicts instead of the recorded ones.
        #[arg(long, value_name = "FILE")]
        against: Option<PathBuf>,
        /// The server a session's events are read from.
        #[arg(long, default_value = agentsh_proto::shimconf::DEFAULT_SERVER)]
        server: String,
    },
    /// Write an allow-list policy of what ran (record under agent-observe, then
    /// lock): default deny, one allow rule per directory of the programs that
    /// ran (their interpreters and loader payloads too), at most as deep as they
    /// ran; the base's file, network, egress and env sections. Never allow-lists
    /// fileless execs, programs in /tmp, /var/tmp, /dev/shm or the agentsh CLI
    /// (listed as comments, as are agent-observe's would-deny findings).
    Generate {
        /// The events: a JSON Lines file or a session id of the running server.
        #[arg(long, value_name = "SESSION|PATH.jsonl")]
        from: String,
        /// The policy whose other sections the allow-list keeps.
        #[arg(long, default_value = "agent-default", value_name = "NAME|FILE")]
        base: String,
        /// Name programs by content (sha256:) instead of path.
        #[arg(long)]
        pin_hashes: bool,
        /// The policy's name [default: the output file's stem].
        #[arg(long)]
        name: Option<String>,
        /// Where to write it.
        #[arg(short = 'o', long = "output", value_name = "FILE")]
        output: PathBuf,
        /// The server a session's events are read from.
        #[arg(long, default_value = agentsh_proto::shimconf::DEFAULT_SERVER)]
        server: String,
    },
}

fn init_logging() {
    use tracing_subscriber::prelude::*;
    let filter = tracing_subscriber::EnvFilter::try_from_env("AGENTSH_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    // Audit events already go to the JSONL file and journald; the server's
    // own log stays readable without them.
    let fmt = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_target(false)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_filter(tracing_subscriber::filter::filter_fn(|m| {
            m.target() != "agentsh::audit"
        }));
    let journald = if std::path::Path::new("/run/systemd/journal/socket").exists() {
        tracing_journald::layer()
            .ok()
            .map(|l| l.with_syslog_identifier("agentsh".into()))
    } else {
        None
    };
    tracing_subscriber::registry()
        .with(filter)
        .with(fmt)
        .with(journald)
        .init();
}

/// A duration from a number of seconds given on the command line.
fn seconds(s: f64) -> Result<std::time::Duration, ToolError> {
    std::time::Duration::try_from_secs_f64(s).map_err(|_| ToolError::Seconds(s))
}

/// `agentsh man --dir DIR`: agentsh.1 plus agentsh-SUB[-SUB].1 for every subcommand.
fn write_man_pages(dir: &Path) -> Result<(), ToolError> {
    fn walk(cmd: clap::Command, name: String, dir: &Path) -> Result<(), ToolError> {
        let cmd = cmd.name(name.clone());
        let path = dir.join(format!("{name}.1"));
        let mut buf = Vec::new();
        clap_mangen::Man::new(cmd.clone())
            .render(&mut buf)
            .map_err(|source| ToolError::RenderMan {
                page: format!("{name}.1"),
                source,
            })?;
        std::fs::write(&path, buf).map_err(|source| ToolError::WriteMan {
            path: path.clone(),
            source,
        })?;
        for sub in cmd.get_subcommands() {
            // `help` is not a page of its own, nor is a hidden command.
            if sub.get_name() == "help" || sub.is_hide_set() {
                continue;
            }
            walk(sub.clone(), format!("{name}-{}", sub.get_name()), dir)?;
        }
        Ok(())
    }
    std::fs::create_dir_all(dir).map_err(|source| ToolError::ManDir {
        dir: dir.to_path_buf(),
        source,
    })?;
    // Without the `help` subcommands: SEE ALSO would name pages that are
    // not shipped (agentsh-help(1)).
    fn no_help(cmd: clap::Command) -> clap::Command {
        let names: Vec<String> = cmd
            .get_subcommands()
            .map(|s| s.get_name().to_string())
            .collect();
        names
            .into_iter()
            .fold(cmd.disable_help_subcommand(true), |c, n| {
                c.mut_subcommand(n, no_help)
            })
    }
    // The server's config keys as paragraphs: the terminal's table (keys,
    // defaults and text in columns) is wider than a man page (80 columns).
    let mut cmd = no_help(Cli::command()).mut_subcommand("server", |s| {
        s.after_help(config_help_paragraphs(CONFIG_HELP))
    });
    cmd.build();
    walk(cmd, "agentsh".into(), dir)
}

/// `CONFIG_HELP` (a table: key, default, text wrapped in a column) as one
/// paragraph per key, "KEY (default: VALUE): TEXT", for a page a man reader
/// fills to its width. Pure.
fn config_help_paragraphs(table: &str) -> String {
    let mut out: Vec<String> = Vec::new();
    for line in table.lines() {
        let indent = line.len() - line.trim_start().len();
        let text = line.trim();
        if text.is_empty() {
            continue;
        }
        match indent {
            // A key's first line: key, default, text, two spaces or more apart.
            2 => {
                let mut cols = text.splitn(2, "  ");
                let key = cols.next().unwrap_or("").trim();
                let rest = cols.next().unwrap_or("").trim_start();
                let (default, what) = match rest.split_once("  ") {
                    Some((d, w)) => (d.trim(), w.trim()),
                    None => (rest.trim(), ""),
                };
                out.push(format!("{key} (default: {default}): {what}"));
            }
            // The text's next line.
            i if i > 2 => match out.last_mut() {
                Some(p) => {
                    p.push(' ');
                    p.push_str(text);
                }
                None => out.push(text.to_string()),
            },
            _ => out.push(text.to_string()),
        }
    }
    out.join("\n\n")
}

/// A reader that went away (`agentsh events | head -1`) ends the output,
/// not the program with a panic: a write to a closed pipe (println!, or a
/// library writing completions) exits 0, quietly,
/// as the other tools of a pipeline do. Any other panic is reported as
/// usual.
fn quiet_on_closed_stdout() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let payload = info.payload();
        let msg = payload
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| payload.downcast_ref::<&str>().copied())
            .unwrap_or("");
        if msg.contains("Broken pipe") || msg.contains("BrokenPipe") {
            std::process::exit(0);
        }
        default(info);
    }));
}

/// The whole command line; the binary's `main` is this: one arm per
/// subcommand, each a function of its own (or of its tool's module).
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    if !cli.command.is_internal() {
        quiet_on_closed_stdout();
    }
    match cli.command {
        Command::Server {
            print_config: true, ..
        } => print_config(),
        Command::Server {
            config,
            report_fd,
            session,
            command_pgid,
            command_stdio,
            command,
            ..
        } => {
            init_logging();
            failure_if(crate::daemon::run(crate::daemon::Start {
                config_file: config,
                command,
                report_fd,
                session,
                command_pgid,
                command_stdio,
            }))
        }
        Command::Rehearse { socket, wrapper } => crate::daemon::rehearsal::child(&socket, wrapper),
        Command::Reaper {
            server,
            nofile_soft,
            join_pgid,
            command,
        } => exit_code(crate::daemon::reaper::run(
            server,
            nofile_soft,
            join_pgid,
            &command,
        )),
        Command::Policy { command } => policy_command(command),
        Command::Events {
            query: Some(query), ..
        } => failure_if(events_query(query)),
        Command::Events {
            session,
            follow,
            server,
            format,
            ..
        } => failure_if(events::print(&server, &session, follow, format)),
        Command::Approvals { command } => failure_if(approvals::run(command)),
        Command::Session { command } => session_command(command),
        // Inside a supervised shell the server's socket cannot be reached
        // (by design), but the shell's own supervision is the answer: its
        // server took it in, and this exec was let through by it.
        Command::Ready { .. } if agentsh_proto::marker::agentsh_filter_present() => {
            ExitCode::SUCCESS
        }
        Command::Ready {
            server,
            config,
            timeout,
        } => failure_if(ready(server, config, timeout)),
        Command::Entrypoint {
            config,
            ready_timeout,
            command,
        } => entrypoint(config, ready_timeout, command),
        Command::Wrap(w) => exit_code(wrap::run(w)),
        Command::Completions { shell } => completions(shell),
        Command::Man { dir } => failure_if(write_man_pages(&dir)),
        Command::Detect { json, config } => failure_if(detect(json, config.as_deref())),
        Command::Shim { command } => exit_code(installer::run(command)),
    }
}

impl Command {
    /// The server and its helpers (their output is a log, not a pipeline's).
    fn is_internal(&self) -> bool {
        matches!(
            self,
            Command::Server { .. } | Command::Reaper { .. } | Command::Rehearse { .. }
        )
    }
}

/// `agentsh server --print-config`.
fn print_config() -> ExitCode {
    print!("{EMBEDDED_CONFIG}");
    ExitCode::SUCCESS
}

/// `agentsh session ...`: a bad id, policy, workspace or env rule exits 2.
fn session_command(command: session::SessionCommand) -> ExitCode {
    match session::run(command) {
        Err(e) if e.is_usage() => usage_error(e),
        other => failure_if(other),
    }
}

/// `agentsh entrypoint`: a bad `--ready-timeout` exits 2.
fn entrypoint(config: Option<PathBuf>, ready_timeout: f64, command: Vec<OsString>) -> ExitCode {
    match seconds(ready_timeout) {
        Err(e) => usage_error(e),
        Ok(ready_timeout) => exit_code(lifecycle::run(lifecycle::Entrypoint {
            config,
            ready_timeout,
            command,
            wrap: None,
        })),
    }
}

/// `agentsh completions SHELL`.
fn completions(shell: clap_complete::Shell) -> ExitCode {
    clap_complete::generate(
        shell,
        &mut Cli::command(),
        "agentsh",
        &mut std::io::stdout(),
    );
    ExitCode::SUCCESS
}

/// Success, or the error on stderr as `agentsh: <what failed>` and exit 1.
fn failure_if<E: std::fmt::Display>(result: Result<(), E>) -> ExitCode {
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("agentsh: {e}");
            ExitCode::FAILURE
        }
    }
}

/// A usage error (bad input) on stderr, exit 2.
fn usage_error(e: impl std::fmt::Display) -> ExitCode {
    eprintln!("agentsh: {e}");
    ExitCode::from(2)
}

/// A tool's exit code, clamped to what an exit status holds.
fn exit_code(code: i32) -> ExitCode {
    ExitCode::from(code.clamp(0, 255) as u8)
}

/// `agentsh policy check|test|generate`; test and generate exit 2 for bad
/// input.
fn policy_command(command: PolicyCommand) -> ExitCode {
    match command {
        PolicyCommand::Check { file } => failure_if(policy_check(&file)),
        PolicyCommand::Test {
            file,
            events,
            against,
            server,
        } => match policy_tools::test(&file, &events, against.as_deref(), &server) {
            Ok(code) => ExitCode::from(code as u8),
            Err(e) => usage_error(e),
        },
        PolicyCommand::Generate {
            from,
            base,
            pin_hashes,
            name,
            output,
            server,
        } => match policy_tools::generate(
            &from,
            &base,
            pin_hashes,
            name.as_deref(),
            &output,
            &server,
        ) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => usage_error(e),
        },
    }
}

/// `agentsh policy check FILE`: the policy's summary, once it loads and
/// compiles as the server would compile it.
fn policy_check(file: &Path) -> Result<(), policy::PolicyError> {
    let summary = policy::check_file(file)?;
    // What the server does next with a policy at start: its
    // syscalls.block and exec_memory compiled into the filter.
    let p = policy::Policy::load(file)?;
    crate::filter::Filters::new(
        p.blocked_syscalls(),
        p.exec_memory_denied(),
        crate::filter::NetFilter::of(&p),
        agentsh_proto::wire::kernel_landlock_abi(),
        agentsh_proto::ExecBackend::Notify,
    )
    .map_err(|e| policy::PolicyError::Invalid {
        origin: file.display().to_string(),
        location: None,
        rule: None,
        message: e.to_string(),
    })?;
    println!("{summary}");
    Ok(())
}

/// `agentsh events query`.
fn events_query(query: EventsCommand) -> Result<(), events::EventsError> {
    let EventsCommand::Query {
        session,
        decision,
        rule,
        since,
        json,
        file,
    } = query;
    events::query(
        &file,
        &events::Filter {
            session,
            decision,
            rule,
            since,
        },
        json,
    )
}

/// `agentsh ready`: the address from `--server`, `--config` or the
/// default, then the wait.
fn ready(server: Option<String>, config: Option<PathBuf>, timeout: f64) -> Result<(), ToolError> {
    let url = match (server, config) {
        (Some(s), _) => s.trim_end_matches('/').to_string(),
        (None, Some(c)) => lifecycle::server_url(Some(&c))?,
        (None, None) => agentsh_proto::shimconf::DEFAULT_SERVER.to_string(),
    };
    Ok(lifecycle::wait_ready(&url, seconds(timeout)?)?)
}

/// `agentsh detect [--json] [--config C]`.
fn detect(json: bool, config: Option<&Path>) -> Result<(), ToolError> {
    let c = crate::config::Config::load(config)?;
    let r = crate::detect::detect(c.landlock.cap(), c.execve.backend);
    if json {
        println!("{}", serde_json::to_string_pretty(&r)?);
    } else {
        print!("{}", crate::detect::human(&r));
    }
    Ok(())
}
