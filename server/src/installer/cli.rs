//! `agentsh shim install|uninstall|status`: the subcommand and its help.

use super::*;
use std::path::PathBuf;

const INSTALL_HELP: &str = "\
Replaces /bin/sh (and with --bash also /bin/bash) by agentsh-shell-shim, which \
puts every shell the container runs under agentsh's kernel supervision.

What it does, for each shell N:
  /bin/N.real                  the original /bin/N (same inode; a symlink stays a symlink)
  /usr/lib/agentsh/shells/N    symlink to /bin/N.real, the path the shim execs (keeps `comm` = N)
  /bin/N                       the shim, copied in atomically (write + rename)
  dpkg                         a local diversion /bin/N -> /bin/N.real when a dpkg database
                               exists in the root, so package upgrades cannot re-link /bin/N
  /etc/agentsh/shim.conf       the documented default (root:root 0644), only if absent

With --programs, the same for each program an SDK may run without a shell \
(`sb.exec(\"python3\", ...)`, `podman exec CTR node ...`): the shim goes at the \
program's own file (every symlink to it followed: python3 -> python3.11 puts it \
at /usr/bin/python3.11), the original is kept as PATH.real, and \
/usr/lib/agentsh/programs/NAME links to it. Such a program run from outside \
every supervised tree is supervised before it starts, in its own process \
(same pid, argv, environment, stdio and exit status); run inside a tree, \
it is exec'd straight through. `--programs sdk` names the interpreters the \
SDKs run directly (python3, python, node, nodejs, ruby, php; those absent are \
skipped); \
a program named but absent is refused. Programs installed once stay \
installed when install runs again.

Running it again is a no-op (or updates the shim binary). `agentsh shim uninstall` \
restores the original files and removes only what install created. With --root, \
everything happens inside DIR (an image being built, a test root); dpkg-divert is \
pointed at DIR's database with --root, and skipped when DIR has no dpkg database.";

/// The `agentsh shim ...` subcommands.
#[derive(Debug, clap::Subcommand)]
pub enum ShimCommand {
    /// Install the shim as /bin/sh (and optionally /bin/bash and programs).
    #[command(long_about = INSTALL_HELP)]
    Install {
        /// Also replace /bin/bash.
        #[arg(long)]
        bash: bool,
        /// Also stand in for these programs (names, absolute paths, or
        /// `sdk`: python3, python, node, nodejs, ruby, php where present),
        /// comma-separated.
        #[arg(long, value_name = "LIST")]
        programs: Vec<String>,
        /// Root directory of the system to change.
        #[arg(long, value_name = "DIR", default_value = "/")]
        root: PathBuf,
        /// The agentsh-shell-shim binary to install [default: next to this agentsh binary].
        #[arg(long, value_name = "PATH")]
        shim_binary: Option<PathBuf>,
    },
    /// Restore the original shells and programs and remove what `install` created.
    Uninstall {
        /// Root directory of the system to change.
        #[arg(long, value_name = "DIR", default_value = "/")]
        root: PathBuf,
    },
    /// Show what is installed. Exit 0 when the shim is installed and consistent.
    Status {
        /// Root directory of the system to inspect.
        #[arg(long, value_name = "DIR", default_value = "/")]
        root: PathBuf,
    },
}

/// Runs a `shim` subcommand; returns the process exit code.
pub fn run(cmd: ShimCommand) -> i32 {
    let mut out = io::stdout();
    let result = match cmd {
        ShimCommand::Install {
            bash,
            programs,
            root,
            shim_binary,
        } => default_shim_binary(shim_binary).and_then(|shim| {
            install(
                &InstallOptions {
                    root,
                    bash,
                    programs,
                    shim_binary: shim,
                },
                &mut out,
            )
        }),
        ShimCommand::Uninstall { root } => uninstall(&root, &mut out),
        ShimCommand::Status { root } => {
            return match status(&root) {
                Ok(s) => {
                    let _ = write!(out, "{}", s.report);
                    i32::from(!s.installed_and_consistent)
                }
                Err(e) => {
                    eprintln!("agentsh shim status: {e}");
                    2
                }
            }
        }
    };
    match result {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("agentsh shim: {e}");
            1
        }
    }
}

pub(super) fn default_shim_binary(given: Option<PathBuf>) -> Result<PathBuf, InstallError> {
    if let Some(p) = given {
        return Ok(p);
    }
    let exe = std::env::current_exe().map_err(|e| InstallError::Io {
        what: "locating the agentsh binary".into(),
        source: e,
    })?;
    Ok(exe.with_file_name("agentsh-shell-shim"))
}
