//! `agentsh shim install|uninstall|status`: puts agentsh-shell-shim in place of /bin/sh.
//!
//! (Being written: see issue 3.)

/// The `agentsh shim ...` subcommands.
#[derive(Debug, clap::Subcommand)]
pub enum ShimCommand {
    /// Install the shim as /bin/sh (and optionally /bin/bash).
    Install,
    /// Restore the original shells.
    Uninstall,
    /// Show what is installed.
    Status,
}

/// Runs a `shim` subcommand; returns the process exit code.
pub fn run(cmd: ShimCommand) -> i32 {
    eprintln!("agentsh shim: {cmd:?} is not implemented yet");
    2
}
