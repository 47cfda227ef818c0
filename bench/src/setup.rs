//! Setting up a run: the agent's workspace under `/srv` (one of the roots
//! the default policy runs programs from, so the timer can run in a
//! supervised tree), the mount-namespace paths the timer enters, and the
//! servers. A workspace that cannot be made or filled fails the run; it is
//! removed however the run ends.

use agentsh_tests::ns::Namespace;
use agentsh_tests::server::{server_base, TestServer};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

/// The agent's workspace of this run, `/srv/agentsh-bench/ws-<pid>`: made
/// afresh with an empty `bin/`, removed on drop.
pub struct Workspace(PathBuf);

impl Workspace {
    /// # Errors
    /// The directory cannot be made.
    pub fn create() -> Result<Workspace, String> {
        let ws = PathBuf::from(format!("/srv/agentsh-bench/ws-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&ws);
        std::fs::create_dir_all(ws.join("bin")).map_err(|e| format!("{}: {e}", ws.display()))?;
        Ok(Workspace(ws))
    }

    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for Workspace {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
        // /srv/agentsh-bench itself, unless another run is using it.
        if let Some(parent) = self.0.parent() {
            let _ = std::fs::remove_dir(parent);
        }
    }
}

/// Copies `from` to `to`, executable.
pub fn copy_exec(from: &Path, to: &Path) -> Result<(), String> {
    std::fs::copy(from, to)
        .map_err(|e| format!("copy {} to {}: {e}", from.display(), to.display()))?;
    std::fs::set_permissions(to, std::fs::Permissions::from_mode(0o755))
        .map_err(|e| format!("chmod {}: {e}", to.display()))
}

/// `/proc/<holder>/ns/mnt` of `ns`: what the timer enters to run an entry there.
pub fn mount_ns_path(ns: &Namespace) -> String {
    format!("/proc/{}/ns/mnt", ns_pid(ns))
}

fn ns_pid(ns: &Namespace) -> String {
    // Namespace::path gives /proc/<holder>/root<p>; take the holder's pid from it.
    let p = ns.path("/");
    p.to_string_lossy()
        .trim_start_matches("/proc/")
        .split('/')
        .next()
        .unwrap_or_default()
        .to_string()
}

/// A server on the embedded defaults (policy `agent-default`) in `ns`, its
/// log at `log_filter`.
pub fn start_server(ns: &Namespace, ws: &Path, log_filter: &str) -> TestServer {
    start_server_with(ns, ws, log_filter, "")
}

/// [`start_server`] with more config (e.g. `execve: {backend: ptrace}`).
pub fn start_server_with(ns: &Namespace, ws: &Path, log_filter: &str, extra: &str) -> TestServer {
    let filter = log_filter.to_string();
    TestServer::start_on_default_policy(
        &server_base(),
        &format!("workspace: {}\n{extra}", ws.display()),
        move |program| {
            let mut c = ns.command(program);
            c.env("AGENTSH_LOG", filter);
            c
        },
    )
}
