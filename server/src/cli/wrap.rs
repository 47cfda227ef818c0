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
//! The rooms: `args` (wrap's options), `start` (which way, after the
//! checks), `server_mode` (CMD started on a server, as the shim starts a
//! shell), `standalone` (wrap's own server: its config, the closing report),
//! `derived` (the policy it runs, with `--allow-host` and `--keep-env`),
//! `profiles` (`--agent`: what known agents need), `files` (where a standalone wrap keeps its files),
//! `command` (CMD found on `PATH`, or run without supervision and recorded).

mod args;
mod command;
mod derived;
mod files;
mod profiles;
mod prune;
mod server_mode;
mod standalone;
mod start;

pub use args::Wrap;
pub use files::{audit_of, socket_of, WrapFilesError};
pub use start::run;
