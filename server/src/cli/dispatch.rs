//! `main`: the command line parsed, then one arm per subcommand, each a
//! function of this file or of its tool's module; the exit status of each.
//! Also what every run needs first: the log (the server's), and a quiet end
//! when the reader of the output goes away.
//!
//! Failure modes: every tool prints one line `agentsh: <what failed>` (its
//! module's error, as text) and exits non-zero (2 for bad input where the
//! tool says so).

use super::command::{CaCommand, Cli, Command, EventsCommand, PolicyCommand};
use super::man::{write_man_pages, ManError};
use super::{approvals, events, lifecycle, policy_tools, session, wrap};
use crate::config::{ConfigError, EMBEDDED_CONFIG};
use crate::installer;
use crate::policy;
use clap::{CommandFactory, Parser};
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
    #[error(transparent)]
    Man(#[from] ManError),
}

/// The server's log: stderr (without the audit events) and the journal
/// where there is one; `AGENTSH_LOG` filters it (default `info`).
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
        } => server(crate::daemon::Start {
            config_file: crate::config::config_file(config),
            command,
            report_fd,
            session,
            command_pgid,
            command_stdio,
        }),
        Command::Rehearse { socket, wrapper } => crate::daemon::rehearsal::child(&socket, wrapper),
        Command::Reaper {
            server,
            nofile_soft,
            join_pgid,
            tell_fd,
            command,
        } => exit_code(crate::daemon::reaper::run(
            server,
            nofile_soft,
            join_pgid,
            tell_fd,
            &command,
        )),
        Command::Policy { command } => policy_command(command),
        Command::Ca {
            command: CaCommand::Path { config },
        } => failure_if(ca_path(crate::config::config_file(config).as_deref())),
        Command::Events {
            query: Some(EventsCommand::Verify { file }),
            ..
        } => events::verify(&file),
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
        Command::Ready {
            server,
            config,
            timeout,
            server_only,
        } => ready_command(server, config, timeout, server_only),
        Command::Entrypoint {
            config,
            ready_timeout,
            command,
        } => entrypoint(crate::config::config_file(config), ready_timeout, command),
        Command::Wrap(w) => exit_code(wrap::run(w)),
        Command::Completions { shell } => completions(shell),
        Command::Man { dir } => failure_if(write_man_pages(&dir)),
        Command::Detect { json, config } => failure_if(detect(json, config)),
        Command::Shim { command } => exit_code(installer::run(command)),
    }
}

/// `agentsh ready`, and the two places it answers without asking a server.
fn ready_command(
    server: Option<String>,
    config: Option<PathBuf>,
    timeout: f64,
    server_only: bool,
) -> ExitCode {
    // Inside a supervised shell the server's socket cannot be reached (by
    // design), but the shell's own supervision is the answer: its server
    // took it in, and this exec was let through by it.
    if agentsh_proto::marker::agentsh_filter_present() {
        return ExitCode::SUCCESS;
    }
    // The probe shell of an outer `agentsh ready`, run unsupervised:
    // unixwrap would have removed the variable (see `probe`).
    if std::env::var_os(super::probe::PROBE_ENV).is_some() {
        eprintln!("agentsh ready: this shell is not supervised by agentsh");
        return ExitCode::from(super::probe::UNSUPERVISED as u8);
    }
    let config = crate::config::config_file(config);
    failure_if(ready(server, config, timeout, server_only))
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

/// `agentsh server`: before any thread, the config's `env:` secrets are
/// taken out of the environment the kernel shows and the command would
/// inherit (issue 61); then logging, then the server.
fn server(start: crate::daemon::Start) -> ExitCode {
    crate::config::take_for_config(start.config_file.as_deref());
    init_logging();
    failure_if(crate::daemon::run(start))
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
/// `agentsh ca path`: the CA's certificate, made first where there is none.
fn ca_path(config: Option<&std::path::Path>) -> Result<(), String> {
    let config = crate::config::Config::load(config).map_err(|e| e.to_string())?;
    let ca = crate::proxy::ca::Ca::load_or_make(&config.ca_key_path(), &config.egress.ca)
        .map_err(|e| e.to_string())?;
    println!("{}", ca.cert_path.display());
    Ok(())
}

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
        PolicyCommand::Reload { at } => match crate::cli::session::policy_reload(&at) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("agentsh policy reload: {e}");
                ExitCode::from(1)
            }
        },
        PolicyCommand::Test {
            file,
            events,
            against,
            session,
            server,
        } => match policy_tools::test(
            &file,
            &events,
            against.as_deref(),
            session.as_deref(),
            &server,
        ) {
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
        p.judges_exec_maps(),
        p.reads_unjudged(),
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
    } = query
    else {
        return Ok(());
    };
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
fn ready(
    server: Option<String>,
    config: Option<PathBuf>,
    timeout: f64,
    server_only: bool,
) -> Result<(), ToolError> {
    let url = match (server, config) {
        (Some(s), _) => s.trim_end_matches('/').to_string(),
        (None, Some(c)) => lifecycle::server_url(Some(&c))?,
        (None, None) => agentsh_proto::shimconf::DEFAULT_SERVER.to_string(),
    };
    let timeout = seconds(timeout)?;
    let started = std::time::Instant::now();
    lifecycle::wait_ready(&url, timeout)?;
    if server_only {
        return Ok(());
    }
    // The shell gets what is left of the wait, and at least the time a
    // loaded machine's first shell takes.
    let left = timeout.saturating_sub(started.elapsed());
    match super::probe::shell(left.max(std::time::Duration::from_secs(30))) {
        super::probe::Outcome::Supervised => {
            for line in crate::installer::coverage(Path::new("/")) {
                println!("{line}");
            }
            Ok(())
        }
        other => Err(lifecycle::ReadyError::Shell(other.describe()).into()),
    }
}

/// `agentsh detect [--json] [--config C]`.
fn detect(json: bool, config: Option<PathBuf>) -> Result<(), ToolError> {
    let c = crate::config::Config::load(crate::config::config_file(config).as_deref())?;
    let r = crate::detect::detect(c.landlock.cap(), c.execve.backend);
    if json {
        println!("{}", serde_json::to_string_pretty(&r)?);
    } else {
        print!("{}", crate::detect::human(&r));
        for line in crate::installer::coverage(Path::new("/")) {
            println!("{line}");
        }
    }
    Ok(())
}
