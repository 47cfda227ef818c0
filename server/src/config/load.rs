//! Reading the config: the file (or the embedded defaults) parsed, then
//! checked as a whole ([`Config::from_yaml`], [`Config::load`]).
//!
//! Why checked here: a config that cannot be read or parsed is an error at
//! start-up (the server does not run on a guess), and a value that parses but
//! cannot work (an address, a socket path, a zero limit, a reserved session
//! id) is refused with the key it came from; a session's env rules are
//! checked here so the error has its place (line and column) in the file.
//!
//! Failure modes: [`ConfigError`] (read, parse, invalid, a session's env),
//! naming the file and the key.

use super::document::Config;
use super::error::{ConfigError, Invalid};
use super::help::EMBEDDED_CONFIG;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

impl Config {
    /// Parses config text; `origin` names it in errors.
    pub fn from_yaml(text: &str, origin: &str) -> Result<Config, ConfigError> {
        let cfg: Config = if text.trim().is_empty() {
            Config::default()
        } else {
            serde_yaml_ng::from_str(text).map_err(|source| ConfigError::Parse {
                origin: origin.to_string(),
                source,
            })?
        };
        cfg.validate().map_err(|source| ConfigError::Invalid {
            origin: origin.to_string(),
            source,
        })?;
        // A session's env rules, checked here so the error has its place
        // in the file (the rest of a session is checked as it is made).
        for (id, section) in &cfg.sessions {
            if let Some(Err(e)) = section.env.clone().map(agentsh_proto::env::EnvDoc::compile) {
                let place = value_position(text, "sessions:", &e.value)
                    .map_or_else(String::new, |(l, c)| format!("{l}:{c}: "));
                return Err(ConfigError::SessionEnv {
                    origin: origin.to_string(),
                    place,
                    id: id.clone(),
                    message: e.message,
                });
            }
        }
        Ok(cfg)
    }

    /// Loads `path`, or the embedded defaults when `path` is `None`.
    pub fn load(path: Option<&Path>) -> Result<Config, ConfigError> {
        match path {
            None => Config::from_yaml(EMBEDDED_CONFIG, "embedded defaults"),
            Some(p) => {
                let text = std::fs::read_to_string(p).map_err(|source| ConfigError::Read {
                    path: p.to_path_buf(),
                    source,
                })?;
                Config::from_yaml(&text, &p.display().to_string())
            }
        }
    }

    fn validate(&self) -> Result<(), Invalid> {
        let http = &self.server.http;
        if !http.addr.is_empty() && http.addr.parse::<SocketAddr>().is_err() {
            return Err(Invalid::HttpAddr(http.addr.clone()));
        }
        if http.wrap_init && http.addr.is_empty() {
            return Err(Invalid::WrapInitWithoutAddr);
        }
        let sock = self.server.socket.to_string_lossy();
        if agentsh_proto::shimconf::Server::parse(&format!("unix:{sock}")).is_none()
            || self
                .server
                .socket
                .parent()
                .is_none_or(|p| p == Path::new("/"))
        {
            return Err(Invalid::Socket(sock.into_owned()));
        }
        if self.execve.max_argc == 0 || self.execve.max_argv_bytes == 0 {
            return Err(Invalid::ArgvLimits);
        }
        if self.execve.approval_timeout.is_zero()
            || self.execve.approval_timeout > std::time::Duration::from_secs(86_400)
        {
            return Err(Invalid::ApprovalTimeout);
        }
        if self.landlock.max_abi > 64 {
            return Err(Invalid::LandlockAbi(self.landlock.max_abi));
        }
        self.egress.stub_addr()?;
        self.egress.upstream("")?;
        if self.policy.trim().is_empty() {
            return Err(Invalid::NoPolicy);
        }
        if !(self.workspace.is_empty() || self.workspace.starts_with('/')) {
            return Err(Invalid::Workspace(self.workspace.clone()));
        }
        for id in self.sessions.keys() {
            if id == "default" {
                return Err(Invalid::DefaultSession);
            }
            if !agentsh_proto::shimconf::valid_session_id(id) {
                return Err(Invalid::SessionId(id.clone()));
            }
            if id == agentsh_proto::shimconf::REHEARSAL_SESSION {
                return Err(Invalid::ReservedSession(id.clone()));
            }
        }
        Ok(())
    }
}

/// Line and column (1-based) of `value` (plain or quoted) on a line after
/// the line `after` (a top-level key), if it is there.
fn value_position(text: &str, after: &str, value: &str) -> Option<(usize, usize)> {
    let start = text.lines().position(|l| l.trim_end() == after)?;
    let spellings = [
        format!("\"{value}\""),
        format!("'{value}'"),
        value.to_string(),
    ];
    text.lines().enumerate().skip(start + 1).find_map(|(i, l)| {
        spellings
            .iter()
            .find_map(|s| l.find(s.as_str()))
            .map(|byte| (i + 1, l[..byte].chars().count() + 1))
    })
}

/// [`super::secrets::take_from_environment`] for the secrets of the config at `file` (the
/// embedded defaults when `None`); a config that does not load takes
/// nothing (its loader says why, later, where it is loaded for real).
pub fn take_for_config(file: Option<&std::path::Path>) {
    if let Ok(c) = Config::load(file) {
        super::secrets::take_from_environment(&c.secrets);
    }
}

#[cfg(test)]
#[path = "load_tests.rs"]
mod tests;

/// Where an image keeps agentsh's config: read when no `--config` names
/// one (`agentsh server`, `entrypoint`, `ready`, `detect`, `ca path`).
pub const DEFAULT_CONFIG_FILE: &str = "/etc/agentsh/config.yaml";

/// The config file a command reads: the one named, else
/// [`DEFAULT_CONFIG_FILE`] unless nothing is at that name (a dangling link,
/// a directory or a name that cannot be looked at too: reading it then
/// fails, naming it, rather than the
/// server running silently on other rules than the image's), else none
/// (the embedded defaults).
///
/// Why: a start command that forgot `--config` used to run on the embedded
/// defaults, and everything the image put in its config (secrets to
/// inject, sessions, egress) silently did nothing.
pub fn config_file(named: Option<PathBuf>) -> Option<PathBuf> {
    config_file_under(named, Path::new("/"))
}

/// [`config_file`] with the filesystem's root at `root` (tests).
pub fn config_file_under(named: Option<PathBuf>, root: &Path) -> Option<PathBuf> {
    named.or_else(|| {
        let at = root.join(DEFAULT_CONFIG_FILE.trim_start_matches('/'));
        // Only "nothing there" falls back to the defaults: a name that
        // cannot be looked at (EACCES) is read, and the read says why.
        match at.symlink_metadata() {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            _ => Some(at),
        }
    })
}

#[cfg(test)]
mod default_file_tests {
    use super::*;

    #[test]
    fn the_named_file_then_the_images_then_the_embedded_defaults() {
        let root = std::env::temp_dir().join(format!("agentsh-cfg-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(root.join("etc/agentsh")).unwrap();
        let named = PathBuf::from("/srv/mine.yaml");
        assert_eq!(
            config_file_under(Some(named.clone()), &root),
            Some(named.clone())
        );
        assert_eq!(
            config_file_under(None, &root),
            None,
            "none there: the defaults"
        );
        let at = root.join("etc/agentsh/config.yaml");
        std::os::unix::fs::symlink("/nonexistent/config.yaml", &at).unwrap();
        assert_eq!(
            config_file_under(None, &root),
            Some(at.clone()),
            "a dangling link is read (and fails, named), not passed over"
        );
        assert!(Config::load(config_file_under(None, &root).as_deref()).is_err());
        std::fs::remove_file(&at).unwrap();
        std::fs::write(&at, "workspace: /srv/ws\n").unwrap();
        let c = Config::load(config_file_under(None, &root).as_deref()).unwrap();
        assert_eq!(c.workspace, "/srv/ws", "the image's config is the one read");
        assert_eq!(config_file_under(Some(named.clone()), &root), Some(named));
        std::fs::remove_dir_all(&root).unwrap();
    }
}
