//! The command line as clap parses it: `agentsh` and its subcommands, their
//! options and help texts (which `--help`, the man pages and the shell
//! completions are made of).
//!
//! Failure modes: none here; clap refuses a command line that does not
//! parse (exit 2, with its usage).

use super::events::EventFormat;
use super::{approvals, session, wrap};
use crate::config::CONFIG_HELP;
use crate::installer::ShimCommand;
use clap::{Parser, Subcommand};
use std::path::PathBuf;

/// agentsh: kernel-enforced policy on every command an AI agent runs.
#[derive(Debug, Parser)]
#[command(
    name = "agentsh",
    version,
    about = "agentsh: kernel-enforced policy on every command an AI agent runs (server and admin CLI)",
    long_about = None
)]
pub(super) struct Cli {
    #[command(subcommand)]
    pub(super) command: Command,
}

#[derive(Debug, Subcommand)]
pub(super) enum Command {
    /// Run the server: HTTP API, wrap-init, notify-fd handoff, exec supervisor, audit.
    #[command(after_help = CONFIG_HELP)]
    Server {
        /// YAML config file [default: /etc/agentsh/config.yaml where it exists,
        /// else the embedded defaults].
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
        /// An fd that gets CMD's pid (the server protects it from trees).
        #[arg(long)]
        tell_fd: Option<i32>,
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
    /// agentsh's egress CA: egress rules with `http:` have their TLS
    /// terminated by agentsh with certificates it signs, so images trust it.
    Ca {
        #[command(subcommand)]
        command: CaCommand,
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
    /// Wait until a server is ready to supervise shells, then check that a
    /// shell started from here is supervised; exit 0 when it is, 1 at the
    /// timeout, when the server says it cannot supervise shells here, or when
    /// a shell started from here is refused or runs unsupervised (the reason
    /// is printed).
    ///
    /// The check starts `/bin/sh -c 'exec agentsh ready'` the way SDKs start
    /// shells, from where `ready` runs (run it where the SDK's daemon runs
    /// its commands: a `docker exec`, an SDK's ready command): the shell's own
    /// filter answers. For start-up scripts: `agentsh server & agentsh ready
    /// --timeout 10 && exec DAEMON`. With --config, the address is the one
    /// that config file gives the server (so a unit's ExecStartPost follows a
    /// changed port). Run inside a shell agentsh supervises (an SDK's ready
    /// command), it exits 0 at once: that shell's supervision is the proof.
    Ready {
        /// The server: unix:/PATH or http://HOST:PORT [default: the socket
        /// /etc/agentsh/config.yaml gives where it exists, else unix:/run/agentsh/api.sock].
        #[arg(long, conflicts_with = "config")]
        server: Option<String>,
        /// Take the address from this server config file (server.socket)
        /// [default: /etc/agentsh/config.yaml where it exists].
        #[arg(long, value_name = "PATH")]
        config: Option<PathBuf>,
        /// Seconds to wait.
        #[arg(long, default_value_t = 10.0, value_name = "SECS")]
        timeout: f64,
        /// Only wait for the server to answer ready; start no shell (where
        /// /bin/sh is not agentsh's shim, e.g. a server for `agentsh wrap`).
        #[arg(long)]
        server_only: bool,
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
        /// Server config file (as for `agentsh server --config`) [default:
        /// /etc/agentsh/config.yaml where it exists, else the embedded defaults].
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
        /// Take landlock.max_abi from this server config file [default:
        /// /etc/agentsh/config.yaml where it exists].
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
pub(super) enum CaCommand {
    /// Print where the CA's certificate is (`egress.ca`), making the CA first
    /// when there is none yet (its key: <state_dir>/ca.key, root-only).
    /// `ca-bundle.pem` beside it holds the system's roots and it. An image
    /// build runs this, then adds the certificate to the system store
    /// (Debian: copy it to /usr/local/share/ca-certificates/agentsh.crt and
    /// run update-ca-certificates); see docs/sdk-cookbook.md.
    Path {
        /// The server's config file (its state_dir and egress.ca) [default:
        /// /etc/agentsh/config.yaml where it exists].
        #[arg(long, value_name = "PATH")]
        config: Option<PathBuf>,
    },
}

#[derive(Debug, Subcommand)]
pub(super) enum EventsCommand {
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
    /// Check the audit log's hash chain (every line names the digest of
    /// the one before it, across rotations): the log and its rotated copies
    /// (FILE.N ... FILE.1, FILE), oldest first. Exit 0 when intact; 1 with
    /// the first line whose link is broken (the line before it was changed,
    /// or lines were removed, inserted or moved); 2 when it cannot be read.
    #[command(verbatim_doc_comment)]
    Verify {
        /// The log file.
        #[arg(long, default_value = "/var/log/agentsh/audit.jsonl")]
        file: std::path::PathBuf,
    },
}

#[derive(Debug, Subcommand)]
pub(super) enum PolicyCommand {
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
        /// Replay only this session's events. Without it, events of several
        /// sessions are replayed only for the sessions that ran under FILE's
        /// policy (the others ran under other rules: their recorded verdicts
        /// are no baseline for FILE); the ones left out are named.
        #[arg(long, value_name = "ID")]
        session: Option<String>,
        /// The server a session's events are read from.
        #[arg(long, default_value = agentsh_proto::shimconf::DEFAULT_SERVER)]
        server: String,
    },
    /// Write an allow-list policy of what ran (record under agent-observe, then
    /// lock): default deny, one allow rule per directory of the programs that
    /// ran (their interpreters and loader payloads too), at most as deep as they
    /// ran; the base's file, network, egress and env sections. Never allow-lists
    /// fileless execs, programs in /tmp, /var/tmp, /dev/shm, the agentsh CLI,
    /// nor what the base denies or agent-observe's would-deny findings name
    /// (they ran while recorded and stay denied; each listed as a comment).
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
    /// Make a running server read its config's policies again and judge its
    /// running trees by them: each tree's next exec, connect and DNS query
    /// (and each new HTTP connection) get the new rules; what the kernel
    /// fixed at a tree's start (its seccomp filter, Landlock ruleset,
    /// environment) stays, and is named per tree. Every policy is compiled
    /// first: one that does not compile changes nothing (exit 1, the reason
    /// said). SIGHUP to the server does the same. Config keys other than
    /// policy, workspace, policies_dir and sessions need a restart (named).
    Reload {
        #[command(flatten)]
        at: crate::cli::approvals::ServerArgs,
    },
}

impl Command {
    /// The server and its helpers (their output is a log, not a pipeline's).
    pub(super) fn is_internal(&self) -> bool {
        matches!(
            self,
            Command::Server { .. } | Command::Reaper { .. } | Command::Rehearse { .. }
        )
    }
}
