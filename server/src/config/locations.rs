//! Where agentsh's own files are: refused in a directory every supervised
//! tree must be able to write ([`Config::check_own_locations`]).
//!
//! Why: trees never write beneath agentsh's files, and Landlock can only
//! grant a right on a whole subtree, so keeping a tree out of `/tmp/x` would
//! take create and delete on `/tmp` from every tree; anyone on the machine
//! could also create or squat paths there before the server.
//!
//! Failure modes: [`SharedLocation`], naming the setting, the path, the
//! shared directory and what to use instead. A path that does not exist yet
//! is judged by its longest existing prefix (symlinks followed).

use super::document::Config;
use super::error::SharedLocation;
use std::path::{Path, PathBuf};

impl Config {
    /// Refuses agentsh's own files in a directory every supervised tree must
    /// be able to write (any world-writable directory: `/tmp`, `/var/tmp`,
    /// `/dev/shm`, ...). Trees never write beneath agentsh's files, and
    /// Landlock can only grant a right on a whole subtree: to keep a tree out
    /// of `/tmp/x` it must withhold create and delete on `/tmp` itself, so
    /// `cp a /tmp/b` would fail in every tree. (Anyone on the machine can
    /// also create or squat paths in such a directory before the server.)
    /// Checked on the filesystem the server sees, before it writes anything.
    ///
    /// # Errors
    /// Which setting, where it is, why, and what to use instead.
    pub fn check_own_locations(&self, config_file: Option<&Path>) -> Result<(), SharedLocation> {
        let exe = std::env::current_exe().ok();
        let wrapper = self.wrapper_binary_path();
        let mut own: Vec<(&'static str, &Path, &'static str)> = vec![
            ("state_dir", &self.state_dir, "/var/lib/agentsh"),
            (
                "audit.jsonl",
                &self.audit.jsonl,
                "/var/log/agentsh/audit.jsonl",
            ),
            ("policies_dir", &self.policies_dir, "/etc/agentsh/policies"),
            // Checked again at start (root-owned, not writable by others);
            // here for the message about shared directories.
            (
                "server.socket",
                &self.server.socket,
                "/run/agentsh/api.sock",
            ),
            (
                "wrapper_binary",
                &wrapper,
                "/usr/bin/agentsh-unixwrap (install agentsh there)",
            ),
        ];
        if let Some(c) = config_file {
            own.push(("the config file", c, "/etc/agentsh/config.yaml"));
        }
        if let Some(e) = exe.as_deref() {
            own.push((
                "the agentsh binary",
                e,
                "/usr/bin/agentsh (install agentsh there)",
            ));
        }
        for (key, path, instead) in own {
            if let Some(shared) = shared_ancestor(&real_path(path), &world_writable_dir) {
                return Err(SharedLocation {
                    key,
                    path: path.to_path_buf(),
                    shared,
                    instead,
                });
            }
        }
        Ok(())
    }
}

/// `p` with its longest existing prefix canonicalized (symlinks followed),
/// the rest as written: the path the server will create.
fn real_path(p: &Path) -> PathBuf {
    let mut rest = Vec::new();
    let mut at = p;
    loop {
        if let Ok(c) = at.canonicalize() {
            return rest.iter().rev().fold(c, |acc, part| acc.join(part));
        }
        match (at.parent(), at.file_name()) {
            (Some(parent), Some(name)) => {
                rest.push(name.to_os_string());
                at = parent;
            }
            _ => return p.to_path_buf(),
        }
    }
}

/// A directory anyone may create entries in (mode o+w).
fn world_writable_dir(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p).is_ok_and(|m| m.is_dir() && m.permissions().mode() & 0o002 != 0)
}

/// The outermost directory at or above `p` that `shared` says every tree
/// writes, if any.
fn shared_ancestor(p: &Path, shared: &dyn Fn(&Path) -> bool) -> Option<PathBuf> {
    let mut ancestors: Vec<&Path> = p.ancestors().collect();
    ancestors.reverse();
    ancestors
        .into_iter()
        .find(|a| shared(a))
        .map(Path::to_path_buf)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_files_in_a_world_writable_directory_are_found() {
        let shared = |p: &Path| {
            ["/tmp", "/var/tmp", "/dev/shm", "/srv/open"].contains(&p.to_str().unwrap_or(""))
        };
        let cases: &[(&str, Option<&str>)] = &[
            ("/var/lib/agentsh", None),
            ("/var/log/agentsh/audit.jsonl", None),
            ("/tmp", Some("/tmp")),
            ("/tmp/agentsh", Some("/tmp")),
            ("/tmp/a/b/audit.jsonl", Some("/tmp")),
            ("/var/tmp/agentsh", Some("/var/tmp")),
            ("/dev/shm/x", Some("/dev/shm")),
            ("/srv/open/deeper/state", Some("/srv/open")),
            ("/srv/closed/state", None),
            ("/", None),
        ];
        for (path, want) in cases {
            assert_eq!(
                shared_ancestor(Path::new(path), &shared),
                want.map(PathBuf::from),
                "{path}"
            );
        }
    }

    #[test]
    fn state_under_tmp_is_refused_with_what_to_use() {
        let c = Config::from_yaml("state_dir: /tmp/agentsh-state\n", "t").unwrap();
        let e = c.check_own_locations(None).unwrap_err().to_string();
        assert!(
            e.starts_with("state_dir /tmp/agentsh-state is inside /tmp, which anyone can write"),
            "{e}"
        );
        assert!(e.contains("/var/lib/agentsh"), "{e}");
        let c = Config::from_yaml("audit: {jsonl: /var/tmp/a/audit.jsonl}\n", "t").unwrap();
        let e = c.check_own_locations(None).unwrap_err().to_string();
        assert!(
            e.starts_with("audit.jsonl /var/tmp/a/audit.jsonl is inside /var/tmp"),
            "{e}"
        );
        let e = Config::load(None)
            .unwrap()
            .check_own_locations(Some(Path::new("/tmp/x/config.yaml")))
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("the config file /tmp/x/config.yaml is inside /tmp"),
            "{e}"
        );
    }
}
