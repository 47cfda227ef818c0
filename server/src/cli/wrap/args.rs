//! `agentsh wrap`'s options, as clap parses them (their doc comments are
//! the `--help` and man page texts).
//!
//! Failure modes: none here; clap refuses options that do not parse.

use std::ffi::OsString;
use std::path::PathBuf;

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
    /// A variable the agent itself needs that the policy's `env.deny`
    /// removes (agent-default removes names like credentials: `*_KEY`,
    /// `*_TOKEN`, `*SECRET*`...), e.g. its model's API key
    /// (ANTHROPIC_API_KEY, OPENAI_API_KEY): passed to CMD, and so to what it
    /// runs. Repeatable; `*` for any run of characters. Standalone only.
    #[arg(long = "keep-env", value_name = "NAME")]
    pub keep_env: Vec<String>,
    /// What a known agent needs, as --allow-host and --keep-env would give
    /// it: claude-code (api.anthropic.com, ANTHROPIC_API_KEY), codex
    /// (api.openai.com, chatgpt.com, OPENAI_API_KEY), gemini
    /// (generativelanguage.googleapis.com, cloudcode-pa.googleapis.com,
    /// oauth2.googleapis.com, GEMINI_API_KEY, GOOGLE_API_KEY), aider
    /// (api.openai.com, api.anthropic.com and their keys). Standalone only.
    #[arg(long = "agent", value_name = "NAME")]
    pub agent: Option<String>,
    /// A place wrap keeps read-only that the agent may write after all
    /// (wrap keeps shell startup files, git's hooks and config, autostart
    /// and systemd user units and your PATH's own bin directories read-only,
    /// so nothing the agent plants runs later outside it): as listed in
    /// docs/wrap.md (`~/.bashrc`, `${WORKSPACE}/.git/config`), or that
    /// path under your home or the workspace; `crontab` gives back the
    /// programs that schedule jobs (crontab, at, batch), which wrap
    /// refuses. Repeatable. Standalone only.
    #[arg(long = "writable", value_name = "PATH")]
    pub writable: Vec<String>,
    /// A credential for the policy's `http.inject` (`${secret:NAME}`), held
    /// by wrap's server and never by the agent: NAME=env:VAR takes it from
    /// your environment (and VAR is removed from the agent's), NAME=file:PATH
    /// from a file of yours of mode 600. Repeatable. Standalone only.
    #[arg(long = "secret", value_name = "NAME=env:VAR|NAME=file:PATH")]
    pub secrets: Vec<String>,
    /// No start line and no session report on stderr.
    #[arg(long)]
    pub quiet: bool,
    /// How many runs' files (audit, server log, state) stay under
    /// $XDG_STATE_HOME/agentsh: at each start the older runs wrap made are
    /// removed, newest kept by their audit's last change; 0 keeps every
    /// run. Standalone only.
    #[arg(long, default_value_t = 100, value_name = "N")]
    pub keep_runs: usize,
    /// Internal: CMD below wrap's own server (trust the user's server,
    /// socket and wrapper).
    #[arg(long, hide = true)]
    pub own_server: bool,
    /// The command and its arguments.
    #[arg(last = true, required = true, value_name = "CMD")]
    pub command: Vec<OsString>,
}
