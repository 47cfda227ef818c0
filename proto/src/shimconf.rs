//! `/etc/agentsh/shim.conf`: the shim's only source of settings that could weaken it.
//!
//! Format: `key=value` lines, `#` comments, blank lines. Keys:
//! `shim_install=auto|on|off` (default `auto`), `server=` (the API: a Unix
//! socket `unix:/run/agentsh/api.sock` by default, or an `http://` base URL),
//! `session=` (default `default`), `wrapper=` (the one agentsh-unixwrap path
//! the shim will run; default: the packaged locations, see
//! [`DEFAULT_WRAPPERS`]).
//!
//! Trust: the file counts only if it is a regular file owned by root and not
//! writable by group or others. An untrusted or unreadable file is treated as
//! absent *and* the mode becomes `on` (the shim refuses to be weakened).
//! A malformed file is an error the shim reports with file, line and the
//! accepted values; it never guesses.

use std::fmt;
use std::io::Read;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};

/// The fixed, compile-time location. No environment variable relocates it.
pub const SHIM_CONF_PATH: &str = "/etc/agentsh/shim.conf";
/// The API socket the server listens on by default.
pub const DEFAULT_SOCKET: &str = "/run/agentsh/api.sock";
/// `server=` when shim.conf does not say.
pub const DEFAULT_SERVER: &str = "unix:/run/agentsh/api.sock";
/// Is `id` acceptable as a session id? It appears in socket file names and
/// URLs: 1-64 letters, digits, `-`, `_`, `.`, and not `.` or `..`.
pub fn valid_session_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= 64
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.')
        && id != "."
        && id != ".."
}

/// `session=` when shim.conf does not say.
pub const DEFAULT_SESSION: &str = "default";
/// The session of the server's own rehearsal shell (run once before it says
/// it is ready; see the server's `daemon::rehearsal`): no session of this id
/// can be made, only the rehearsal's process can start a shell in it, and
/// its events are not written to the audit.
pub const REHEARSAL_SESSION: &str = "agentsh.rehearsal";
/// Where packaging installs agentsh-unixwrap: without a `wrapper=` line the
/// shim runs a `wrapper_binary` only if it is one of these (and root-owned).
pub const DEFAULT_WRAPPERS: &[&str] = &[
    "/usr/bin/agentsh-unixwrap",
    "/usr/lib/agentsh/agentsh-unixwrap",
    "/usr/libexec/agentsh/agentsh-unixwrap",
    "/usr/local/bin/agentsh-unixwrap",
];

/// Where the API is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Server {
    /// A Unix SOCK_SEQPACKET socket (the default; trees cannot reach it).
    Unix(std::path::PathBuf),
    /// An `http://` base URL (for operators who run the server elsewhere).
    Http(String),
}

impl Server {
    /// `unix:/abs/path` or `http://host:port`.
    pub fn parse(value: &str) -> Option<Server> {
        if let Some(p) = value.strip_prefix("unix:") {
            let ok = p.starts_with('/')
                && p.len() < 108
                && !p.contains('\0')
                && !p.split('/').any(|c| c == "." || c == "..");
            return ok.then(|| Server::Unix(p.into()));
        }
        if value.starts_with("http://") && value.len() > "http://".len() {
            return Some(Server::Http(value.trim_end_matches('/').to_string()));
        }
        None
    }
}

impl fmt::Display for Server {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Server::Unix(p) => write!(f, "unix:{}", p.display()),
            Server::Http(u) => f.write_str(u),
        }
    }
}

/// Install mode, ordered from weakest to strictest.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Mode {
    /// Run the real shell unsupervised.
    Off,
    /// Install when possible; fall through (logged) when the server or kernel cannot.
    Auto,
    /// Install or refuse to run (exit 126).
    On,
}

impl Mode {
    /// `off`, `auto` or `on`.
    pub fn parse(s: &str) -> Option<Mode> {
        match s {
            "off" => Some(Mode::Off),
            "auto" => Some(Mode::Auto),
            "on" => Some(Mode::On),
            _ => None,
        }
    }

    /// The shim.conf spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Off => "off",
            Mode::Auto => "auto",
            Mode::On => "on",
        }
    }

    /// The stricter of two modes: the environment can only strengthen.
    pub fn stricter(self, other: Mode) -> Mode {
        self.max(other)
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
/// A parsed shim.conf.
pub struct ShimConf {
    /// `shim_install=`.
    pub mode: Mode,
    /// `server=`.
    pub server: Server,
    /// `session=`.
    pub session: String,
    /// The one wrapper path accepted; `None`: [`DEFAULT_WRAPPERS`].
    pub wrapper: Option<String>,
    /// Besides root, the one uid whose server, socket, directories and
    /// wrapper are trusted. Never read from shim.conf (always `None` there):
    /// only `agentsh wrap` sets it, to its own uid, for the server it
    /// started itself as that user.
    pub also_trusted_uid: Option<u32>,
}

impl Default for ShimConf {
    fn default() -> Self {
        ShimConf {
            mode: Mode::Auto,
            server: Server::Unix(DEFAULT_SOCKET.into()),
            session: DEFAULT_SESSION.to_string(),
            wrapper: None,
            also_trusted_uid: None,
        }
    }
}

impl ShimConf {
    /// Whether files and peers owned by `uid` are trusted: root's always,
    /// and [`ShimConf::also_trusted_uid`]'s.
    pub fn trusts(&self, uid: u32) -> bool {
        uid == 0 || self.also_trusted_uid == Some(uid)
    }

    /// Is `path` a wrapper this configuration lets the shim run?
    pub fn wrapper_allowed(&self, path: &str) -> bool {
        match &self.wrapper {
            Some(w) => w == path,
            None => DEFAULT_WRAPPERS.contains(&path),
        }
    }
}

/// A line of shim.conf that cannot be accepted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParseError {
    /// 1-based line number.
    pub line: usize,
    /// What is wrong and what is accepted.
    pub message: String,
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "line {}: {}", self.line, self.message)
    }
}

/// Parses the text of a shim.conf.
pub fn parse(text: &str) -> Result<ShimConf, ParseError> {
    let mut conf = ShimConf::default();
    for (idx, raw) in text.lines().enumerate() {
        let line = idx + 1;
        let l = raw.trim();
        if l.is_empty() || l.starts_with('#') {
            continue;
        }
        let err = |message: String| ParseError { line, message };
        let (key, value) = l
            .split_once('=')
            .ok_or_else(|| err(format!("expected key=value, found {l:?}")))?;
        let (key, value) = (key.trim(), value.trim());
        match key {
            "shim_install" => {
                conf.mode = Mode::parse(value).ok_or_else(|| {
                    err(format!(
                        "shim_install={value:?} is not valid; accepted values: auto, on, off"
                    ))
                })?;
            }
            "server" => {
                conf.server = Server::parse(value).ok_or_else(|| {
                    err(format!(
                        "server={value:?} is not valid; expected unix:/ABSOLUTE/PATH (default {DEFAULT_SERVER}) or an http:// base URL"
                    ))
                })?;
            }
            "wrapper" => {
                if !value.starts_with('/') || value.split('/').any(|c| c == "." || c == "..") {
                    return Err(err(format!(
                        "wrapper={value:?} is not valid; expected the absolute path of agentsh-unixwrap"
                    )));
                }
                conf.wrapper = Some(value.to_string());
            }
            "session" => {
                if !valid_session_id(value) {
                    return Err(err(format!(
                        "session={value:?} is not valid; accepted: 1-64 letters, digits, '-', \
                         '_', '.'"
                    )));
                }
                conf.session = value.to_string();
            }
            other => {
                return Err(err(format!(
                    "unknown key {other:?}; accepted keys: shim_install, server, session, wrapper"
                )))
            }
        }
    }
    Ok(conf)
}

/// What reading shim.conf produced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Loaded {
    /// A trusted file, parsed.
    Trusted(ShimConf),
    /// No file: defaults apply.
    Absent,
    /// The file exists but cannot be trusted or read; the shim must act as `on`.
    Untrusted {
        /// Why (owner, mode, not a regular file, unreadable).
        reason: String,
    },
    /// A trusted file that does not parse; the shim must refuse to run.
    Invalid(ParseError),
}

/// Reads and vets the shim.conf at `path` (the shim passes [`SHIM_CONF_PATH`]).
pub fn load(path: &str) -> Loaded {
    let file = match std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_CLOEXEC | libc::O_NOCTTY | libc::O_NONBLOCK)
        .open(path)
    {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Loaded::Absent,
        Err(e) => {
            return Loaded::Untrusted {
                reason: format!("{path} cannot be opened: {e}"),
            }
        }
    };
    // Checked on the open file, so the file vetted is the file read.
    let meta = match file.metadata() {
        Ok(m) => m,
        Err(e) => {
            return Loaded::Untrusted {
                reason: format!("{path} cannot be inspected: {e}"),
            }
        }
    };
    if let Err(reason) = vet(path, meta.is_file(), meta.uid(), meta.mode()) {
        return Loaded::Untrusted { reason };
    }
    let mut text = String::new();
    if let Err(e) = (&file).take(64 * 1024).read_to_string(&mut text) {
        return Loaded::Untrusted {
            reason: format!("{path} cannot be read: {e}"),
        };
    }
    // An existing file with no setting at all was truncated or written
    // empty: nothing in it was meant as "defaults", and below Landlock ABI 3
    // a root tree can truncate it. It means `on`.
    let has_setting = text.lines().any(|l| {
        let l = l.trim();
        !l.is_empty() && !l.starts_with('#')
    });
    if !has_setting {
        return Loaded::Untrusted {
            reason: format!("{path} holds no setting (empty: truncated?)"),
        };
    }
    match parse(&text) {
        Ok(c) => Loaded::Trusted(c),
        Err(e) => Loaded::Invalid(e),
    }
}

fn vet(path: &str, is_file: bool, uid: u32, mode: u32) -> Result<(), String> {
    if !is_file {
        return Err(format!("{path} is not a regular file"));
    }
    if uid != 0 {
        return Err(format!("{path} is owned by uid {uid}, not root"));
    }
    if mode & 0o022 != 0 {
        return Err(format!(
            "{path} is writable by group or others (mode {:o})",
            mode & 0o7777
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_file_gives_defaults() {
        assert_eq!(parse("").unwrap(), ShimConf::default());
        assert_eq!(parse("# only a comment\n\n").unwrap(), ShimConf::default());
    }

    #[test]
    fn reads_every_key() {
        let c = parse("shim_install = on\nserver=http://127.0.0.1:9000/\nsession=ci-1\n").unwrap();
        assert_eq!(c.mode, Mode::On);
        assert_eq!(c.server, Server::Http("http://127.0.0.1:9000".into()));
        assert_eq!(c.session, "ci-1");
        let c = parse("server=unix:/run/x/api.sock\nwrapper=/opt/a/agentsh-unixwrap\n").unwrap();
        assert_eq!(c.server, Server::Unix("/run/x/api.sock".into()));
        assert!(c.wrapper_allowed("/opt/a/agentsh-unixwrap"));
        assert!(!c.wrapper_allowed("/usr/bin/agentsh-unixwrap"));
        assert!(ShimConf::default().wrapper_allowed("/usr/bin/agentsh-unixwrap"));
        assert!(!ShimConf::default().wrapper_allowed("/tmp/agentsh-unixwrap"));
    }

    #[test]
    fn invalid_mode_names_line_and_accepted_values() {
        let e = parse("# x\nshim_install=yes\n").unwrap_err();
        assert_eq!(e.line, 2);
        assert!(e.message.contains("auto, on, off"), "{}", e.message);
    }

    #[test]
    fn unknown_key_and_missing_equals_are_errors() {
        assert_eq!(parse("shim_instal=off").unwrap_err().line, 1);
        assert_eq!(parse("\n\nshim_install").unwrap_err().line, 3);
        assert!(parse("server=https://x").is_err());
        assert!(parse("server=unix:relative.sock").is_err());
        assert!(parse("server=unix:/run/../tmp/x.sock").is_err());
        assert!(parse("wrapper=agentsh-unixwrap").is_err());
        assert!(parse("session=a/b").is_err());
    }

    #[test]
    fn env_can_only_strengthen() {
        assert_eq!(Mode::On.stricter(Mode::Off), Mode::On);
        assert_eq!(Mode::Off.stricter(Mode::Auto), Mode::Auto);
        assert_eq!(Mode::Auto.stricter(Mode::On), Mode::On);
    }

    #[test]
    fn vetting_rules() {
        assert!(vet("f", true, 0, 0o100644).is_ok());
        assert!(vet("f", true, 0, 0o100664).is_err());
        assert!(vet("f", true, 0, 0o100646).is_err());
        assert!(vet("f", true, 1000, 0o100644).is_err());
        assert!(vet("f", false, 0, 0o040755).is_err());
    }

    #[test]
    fn missing_file_is_absent() {
        assert_eq!(load("/nonexistent/agentsh/shim.conf"), Loaded::Absent);
    }
}
