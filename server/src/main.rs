//! `agentsh`: the server and its admin CLI.

use agentsh::api::{self, Api};
use agentsh::approval::{self, Approvals};
use agentsh::audit::AuditLog;
use agentsh::config::{Config, CONFIG_HELP, EMBEDDED_CONFIG};
use agentsh::filter::Filters;
use agentsh::lifecycle;
use agentsh::policy::landlock::SessionLandlock;
use agentsh::policy::{self, Policy};
use agentsh::session::Sessions;
use agentsh::shim_install::{self, ShimCommand};
use agentsh::supervisor::SupervisorContext;
use agentsh_proto::SeccompConfig;
use clap::{CommandFactory, Parser, Subcommand};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

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
    /// Run the server: HTTP API, wrap-init, notify-fd intake, exec supervisor, audit.
    #[command(after_help = CONFIG_HELP)]
    Server {
        /// YAML config file; without it the embedded defaults are used.
        #[arg(long, value_name = "PATH")]
        config: Option<PathBuf>,
        /// Print the embedded default config and exit.
        #[arg(long)]
        print_config: bool,
    },
    /// Policy tools.
    Policy {
        #[command(subcommand)]
        command: PolicyCommand,
    },
    /// Print a session's audit events (JSON Lines) from a running server.
    Events {
        /// Session id.
        #[arg(long, default_value = "default")]
        session: String,
        /// Keep printing new events as they arrive.
        #[arg(long)]
        follow: bool,
        /// Server API base URL.
        #[arg(long, default_value = agentsh_proto::shimconf::DEFAULT_SERVER)]
        server: String,
        /// Output: `json` (one event per line) or `table` (readable columns).
        #[arg(long, value_enum, default_value = "json")]
        format: EventFormat,
    },
    /// List, decide and watch execs waiting for an operator (`decision: approve`).
    Approvals {
        #[command(subcommand)]
        command: approval::cli::ApprovalsCommand,
    },
    /// Install, remove or inspect the shell shim (/bin/sh).
    Shim {
        #[command(subcommand)]
        command: ShimCommand,
    },
    /// Wait until a server answers GET /healthz; exit 0 when it does, 1 at the timeout.
    ///
    /// For start-up scripts: `agentsh server & agentsh ready --timeout 10 && exec DAEMON`.
    /// With --config, the address is the one that config file gives the server
    /// (so a unit's ExecStartPost follows a changed port).
    Ready {
        /// Server API base URL [default: http://127.0.0.1:18080].
        #[arg(long, conflicts_with = "config")]
        server: Option<String>,
        /// Take the address from this server config file (server.http.addr).
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

fn run_server(config: Option<PathBuf>) -> Result<(), String> {
    init_logging();
    raise_fd_limit();
    let config_file = config;
    let config = Config::load(config_file.as_deref()).map_err(|e| e.to_string())?;
    let policy = Policy::resolve(&config.policy, &config.policies_dir)
        .map_err(|e| format!("cannot load policy {:?}: {e}", config.policy))?;
    let audit = AuditLog::open(&config.audit.jsonl, config.audit.memory_events_per_session)
        .map_err(|e| {
            format!(
                "cannot open audit log {}: {e} (set audit.jsonl in the config)",
                config.audit.jsonl.display()
            )
        })?;
    let audit = Arc::new(audit);
    let filters = Filters::new(policy.blocked_syscalls(), config.landlock.effective_abi())
        .map_err(|e| format!("policy {:?}: {e}", config.policy))?;
    let policy_name = policy.name().to_string();
    let policy = Arc::new(policy);
    let landlock = SessionLandlock::for_server(policy.clone(), &config, config_file.as_deref());
    landlock_startup_report(&landlock);
    let (token, token_path) = approval::create_token_file(&config.state_dir).map_err(|e| {
        format!(
            "cannot write the approval token under {}: {e} (state_dir must be writable by the server)",
            config.state_dir.display()
        )
    })?;
    tracing::info!(token_file = %token_path.display(), "approval token written (root-only)");
    let approvals = Arc::new(Approvals::new(&config.execve, audit.clone(), token));
    let supervisor = Arc::new(SupervisorContext {
        policy,
        limits: config.execve.clone(),
        audit: audit.clone(),
        approvals,
    });
    let http = tiny_http::Server::http(&config.server.http.addr).map_err(|e| {
        format!(
            "cannot listen on {} (server.http.addr): {e}",
            config.server.http.addr
        )
    })?;
    tracing::info!(
        addr = %config.server.http.addr,
        policy = %policy_name,
        audit = %config.audit.jsonl.display(),
        wrapper = %config.wrapper_binary_path().display(),
        "agentsh server ready"
    );
    let api = Arc::new(Api {
        config,
        sessions: Sessions::default(),
        audit,
        supervisor,
        seccomp_config: SeccompConfig::default(),
        filters,
        policy_name,
        landlock,
    });
    api::serve(api, Arc::new(http));
    Ok(())
}

/// Raises the soft open-file limit to the hard one: each supervised tree holds
/// its notify fd (plus short-lived /proc and pidfd descriptors) for its whole
/// life, so the usual soft limit of 1024 would cap the number of trees. If the
/// limit cannot be raised the server still runs; a tree that cannot be taken in
/// fails its wrap-init (closed), and this says why in advance.
fn raise_fd_limit() {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes one rlimit into the struct we own.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
        let e = std::io::Error::last_os_error();
        tracing::warn!("cannot read the open-file limit: {e}");
        return;
    }
    if lim.rlim_cur >= lim.rlim_max {
        return;
    }
    let from = lim.rlim_cur;
    lim.rlim_cur = lim.rlim_max;
    // SAFETY: setrlimit reads the struct; raising soft up to hard needs no privilege.
    if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &lim) } != 0 {
        let e = std::io::Error::last_os_error();
        tracing::warn!(
            soft = from,
            hard = lim.rlim_max,
            "cannot raise the open-file limit: {e}"
        );
    } else {
        tracing::debug!(from, to = lim.rlim_max, "raised the open-file limit");
    }
}

/// Logs, once, what every tree's Landlock ruleset will hold (as for root).
fn landlock_startup_report(landlock: &SessionLandlock) {
    let c = landlock.compile(0);
    tracing::info!(
        compat = ?c.summary.compat,
        handled_fs = ?c.summary.handled_fs,
        fs_rules = c.summary.fs_rules,
        connect_ports = ?c.summary.tcp_connect_ports,
        bind_ports = ?c.summary.tcp_bind_ports,
        protected = ?landlock.protection().no_write,
        "landlock ruleset for supervised trees"
    );
    if c.summary.api_port_reachable {
        tracing::warn!(
            "the policy leaves TCP connect unrestricted, so supervised trees can reach the API \
             port; Landlock cannot deny one port among all (list the allowed ports in network_rules)"
        );
    }
    for w in &c.warnings {
        tracing::warn!("landlock: {w}");
    }
}

/// One event as a table row.
fn table_row(ev: &serde_json::Value) -> String {
    let s = |k: &str| ev.get(k).and_then(|v| v.as_str()).unwrap_or("").to_string();
    let n = |k: &str| ev.get(k).map(|v| v.to_string()).unwrap_or_default();
    let time = s("timestamp").get(11..23).unwrap_or("").to_string();
    match ev.get("type").and_then(|v| v.as_str()) {
        Some("execve") => {
            let argv: Vec<String> = ev["argv"]
                .as_array()
                .map(|a| {
                    a.iter()
                        .filter_map(|x| x.as_str().map(String::from))
                        .collect()
                })
                .unwrap_or_default();
            let mut cmd = argv.join(" ");
            if cmd.len() > 60 {
                cmd.truncate(57);
                cmd.push_str("...");
            }
            format!(
                "{:<5} {:<12} {:<7} {:<5} {:<7} {:<6} {:<26} {}  [{}]",
                n("id"),
                time,
                n("pid"),
                n("depth"),
                s("decision"),
                s("effective_action"),
                s("rule"),
                cmd,
                s("filename")
            )
        }
        Some(other) => format!("{:<5} {:<12} {other}", n("id"), time),
        None => ev.to_string(),
    }
}

fn print_events(
    server: &str,
    session: &str,
    follow: bool,
    format: EventFormat,
) -> Result<(), String> {
    let agent = ureq::Agent::new_with_defaults();
    let mut after = 0u64;
    if matches!(format, EventFormat::Table) {
        println!(
            "{:<5} {:<12} {:<7} {:<5} {:<7} {:<6} {:<26} COMMAND  [PROGRAM]",
            "ID", "TIME", "PID", "DEPTH", "POLICY", "ACTION", "RULE"
        );
    }
    loop {
        let wait = if follow { 30 } else { 0 };
        let url = format!("{server}/api/v1/sessions/{session}/events?after={after}&wait={wait}");
        let events: Vec<serde_json::Value> = agent
            .get(&url)
            .call()
            .map_err(|e| format!("cannot reach the agentsh server at {server}: {e}"))?
            .body_mut()
            .read_json()
            .map_err(|e| format!("unexpected answer from {url}: {e}"))?;
        for ev in &events {
            match format {
                EventFormat::Json => println!("{ev}"),
                EventFormat::Table => println!("{}", table_row(ev)),
            }
            if let Some(id) = ev.get("id").and_then(|v| v.as_u64()) {
                after = after.max(id);
            }
        }
        if !follow {
            return Ok(());
        }
    }
}

/// A duration from a number of seconds given on the command line.
fn seconds(s: f64) -> Result<std::time::Duration, String> {
    std::time::Duration::try_from_secs_f64(s)
        .map_err(|_| format!("{s} is not a number of seconds (0 or more)"))
}

/// `agentsh man --dir DIR`: agentsh.1 plus agentsh-SUB[-SUB].1 for every subcommand.
fn write_man_pages(dir: &std::path::Path) -> Result<(), String> {
    fn walk(cmd: clap::Command, name: String, dir: &std::path::Path) -> Result<(), String> {
        let cmd = cmd.name(name.clone());
        let path = dir.join(format!("{name}.1"));
        let mut buf = Vec::new();
        clap_mangen::Man::new(cmd.clone())
            .render(&mut buf)
            .map_err(|e| format!("cannot render {name}.1: {e}"))?;
        std::fs::write(&path, buf).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
        for sub in cmd.get_subcommands() {
            if sub.get_name() == "help" {
                continue;
            }
            walk(sub.clone(), format!("{name}-{}", sub.get_name()), dir)?;
        }
        Ok(())
    }
    std::fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let mut cmd = Cli::command();
    cmd.build();
    walk(cmd, "agentsh".into(), dir)
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Server {
            print_config: true, ..
        } => {
            print!("{EMBEDDED_CONFIG}");
            Ok(())
        }
        Command::Server { config, .. } => run_server(config),
        Command::Policy {
            command: PolicyCommand::Check { file },
        } => match policy::check_file(&file) {
            Ok(summary) => {
                println!("{summary}");
                Ok(())
            }
            Err(e) => Err(e.to_string()),
        },
        Command::Events {
            session,
            follow,
            server,
            format,
        } => print_events(server.trim_end_matches('/'), &session, follow, format),
        Command::Approvals { command } => approval::cli::run(command),
        Command::Ready {
            server,
            config,
            timeout,
        } => {
            let url = match (server, config) {
                (Some(s), _) => Ok(s.trim_end_matches('/').to_string()),
                (None, Some(c)) => lifecycle::server_url(Some(&c)),
                (None, None) => Ok(agentsh_proto::shimconf::DEFAULT_SERVER.to_string()),
            };
            url.and_then(|u| seconds(timeout).and_then(|t| lifecycle::wait_ready(&u, t)))
        }
        Command::Entrypoint {
            config,
            ready_timeout,
            command,
        } => {
            let ready_timeout = match seconds(ready_timeout) {
                Ok(t) => t,
                Err(e) => {
                    eprintln!("agentsh: {e}");
                    return ExitCode::from(2);
                }
            };
            let code = lifecycle::run(lifecycle::Entrypoint {
                config,
                ready_timeout,
                command,
            });
            return ExitCode::from(code.clamp(0, 255) as u8);
        }
        Command::Completions { shell } => {
            clap_complete::generate(
                shell,
                &mut Cli::command(),
                "agentsh",
                &mut std::io::stdout(),
            );
            Ok(())
        }
        Command::Man { dir } => write_man_pages(&dir),
        Command::Shim { command } => {
            let code = shim_install::run(command);
            return ExitCode::from(code.clamp(0, 255) as u8);
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(msg) => {
            eprintln!("agentsh: {msg}");
            ExitCode::FAILURE
        }
    }
}
