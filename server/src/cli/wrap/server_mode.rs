//! CMD started on a server (`--server unix:/PATH`, root's server, or
//! wrap's own through `--own-server`) the way the shim starts a shell:
//! wrap-init, the relay, `agentsh-unixwrap` exec'd in place with CMD as its
//! command.
//!
//! Failure modes: supervision that cannot be installed: 126 with the
//! reason, CMD never ran, unless `--allow-unsupervised` (CMD then runs
//! without, said on stderr and in the audit); an argument with a NUL byte:
//! 2.

use super::args::Wrap;
use super::command::{exec_plain, record_unsupervised, say};
use agentsh_proto::shimconf::{Mode, Server, ShimConf};
use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// Starts CMD the way the shim starts a shell, on the server at `socket`:
/// returns only when it could not.
pub(super) fn exec_under(w: &Wrap, session: &str, socket: &Path, real: &Path) -> i32 {
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
