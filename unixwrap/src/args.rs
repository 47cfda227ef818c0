//! The command line and the environment contract of `agentsh-unixwrap`.
//!
//! ```text
//! agentsh-unixwrap [--argv0 NAME] [--on-kernel-refusal refuse|exec] -- CMD [ARGS...]
//! ```
//!
//! Environment (set by the shim, all removed before the command runs):
//! `AGENTSH_NOTIFY_SOCK_FD` (required: the SOCK_SEQPACKET end the notify fd
//! goes up), `AGENTSH_SECCOMP_CONFIG` (required: JSON
//! [`agentsh_proto::SeccompConfig`]), `AGENTSH_WRAPPER_LOG_FD` (optional:
//! diagnostics), `AGENTSH_RELAY_PID` (optional: the relay helper, our child,
//! reaped after the ACK).
//!
//! Everything here is pure: values in, typed result or a message out, so the
//! rules are unit-tested without a kernel. Failure modes: any malformed input
//! is an error naming the offending value; nothing is guessed, because a
//! wrapper that guesses can end up running a command without its filter.

use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStrExt;

use agentsh_proto::wire::SECCOMP_CONFIG_VERSION;
use agentsh_proto::SeccompConfig;

/// What to do when the kernel refuses the notify filter before anything was installed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnKernelRefusal {
    /// Exit 126: nothing runs unsupervised (the default).
    Refuse,
    /// Run the command without agentsh's filter (the shim's `auto` mode).
    Exec,
}

/// The parsed command line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Invocation {
    /// argv[0] for the command; `None` means CMD as given.
    pub argv0: Option<OsString>,
    pub on_kernel_refusal: OnKernelRefusal,
    /// The command as given (resolved through PATH later).
    pub command: OsString,
    /// Arguments after CMD.
    pub args: Vec<OsString>,
}

impl Invocation {
    /// The argv the command gets: `--argv0` (verbatim) or CMD as given, then ARGS.
    pub fn command_argv(&self) -> Vec<OsString> {
        let mut v = Vec::with_capacity(self.args.len() + 1);
        v.push(self.argv0.clone().unwrap_or_else(|| self.command.clone()));
        v.extend(self.args.iter().cloned());
        v
    }
}

pub const USAGE: &str =
    "usage: agentsh-unixwrap [--argv0 NAME] [--on-kernel-refusal refuse|exec] -- CMD [ARGS...]";

/// Parses the arguments after argv[0]. Options come before a mandatory `--`.
///
/// # Errors
/// A message naming the offending argument (the caller appends [`USAGE`]).
pub fn parse_args(args: &[OsString]) -> Result<Invocation, String> {
    let mut argv0 = None;
    let mut on_kernel_refusal = OnKernelRefusal::Refuse;
    let mut it = args.iter();
    loop {
        let Some(a) = it.next() else {
            return Err("missing `-- CMD`".into());
        };
        match a.as_bytes() {
            b"--" => break,
            b"--argv0" => {
                let v = it.next().ok_or("--argv0 needs a value")?;
                argv0 = Some(v.clone());
            }
            b"--on-kernel-refusal" => {
                let v = it.next().ok_or("--on-kernel-refusal needs a value")?;
                on_kernel_refusal = match v.as_bytes() {
                    b"refuse" => OnKernelRefusal::Refuse,
                    b"exec" => OnKernelRefusal::Exec,
                    _ => {
                        return Err(format!(
                            "--on-kernel-refusal {}: accepted values are refuse, exec",
                            v.to_string_lossy()
                        ))
                    }
                };
            }
            _ => return Err(format!("unknown argument {:?}", a.to_string_lossy())),
        }
    }
    let command = it.next().ok_or("missing CMD after `--`")?.clone();
    if command.is_empty() {
        return Err("CMD is empty".into());
    }
    Ok(Invocation {
        argv0,
        on_kernel_refusal,
        command,
        args: it.cloned().collect(),
    })
}

/// Parses an fd number handed down in the environment. fds 0-2 belong to the
/// command and are never ours.
///
/// # Errors
/// A message naming the variable and its value.
pub fn parse_fd(name: &str, value: Option<&OsStr>) -> Result<i32, String> {
    let v = value.ok_or_else(|| format!("{name} is not set"))?;
    let s = v
        .to_str()
        .ok_or_else(|| format!("{name} is not valid UTF-8"))?;
    match s.parse::<i32>() {
        Ok(fd) if fd > 2 => Ok(fd),
        Ok(fd) => Err(format!(
            "{name}={fd}: fds 0-2 belong to the command, expected 3 or above"
        )),
        Err(_) => Err(format!("{name}={s:?} is not an fd number")),
    }
}

/// Parses `AGENTSH_RELAY_PID`: `None` if unset; a pid must be above 1.
///
/// # Errors
/// A message naming the value.
pub fn parse_relay_pid(name: &str, value: Option<&OsStr>) -> Result<Option<i32>, String> {
    let Some(v) = value else { return Ok(None) };
    match v.to_str().and_then(|s| s.parse::<i32>().ok()) {
        Some(pid) if pid > 1 => Ok(Some(pid)),
        _ => Err(format!(
            "{name}={:?} is not a process id",
            v.to_string_lossy()
        )),
    }
}

/// Parses and vets `AGENTSH_SECCOMP_CONFIG`.
///
/// # Errors
/// Unset, not JSON, not a `SeccompConfig`, an unknown `version`, or an
/// `ack_timeout_secs` of 0.
pub fn parse_config(name: &str, value: Option<&OsStr>) -> Result<SeccompConfig, String> {
    let v = value.ok_or_else(|| format!("{name} is not set"))?;
    let cfg: SeccompConfig = serde_json::from_slice(v.as_bytes())
        .map_err(|e| format!("{name} is not a valid seccomp config: {e}"))?;
    vet_config(name, cfg)
}

/// What [`parse_config`] checks of a config already parsed (the shim's,
/// when unixwrap's steps run in its process): the version this unixwrap
/// knows, and an ACK timeout of at least a second.
///
/// # Errors
/// A message naming `name` and what is wrong.
pub fn vet_config(name: &str, cfg: SeccompConfig) -> Result<SeccompConfig, String> {
    if cfg.version != SECCOMP_CONFIG_VERSION {
        return Err(format!(
            "{name}: config version {} is not supported (this unixwrap knows version {SECCOMP_CONFIG_VERSION}); \
             upgrade agentsh-unixwrap to match the server",
            cfg.version
        ));
    }
    if cfg.ack_timeout_secs == 0 {
        return Err(format!("{name}: ack_timeout_secs must be at least 1"));
    }
    Ok(cfg)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn os(v: &[&str]) -> Vec<OsString> {
        v.iter().map(OsString::from).collect()
    }

    #[test]
    fn minimal_command_line() {
        let i = parse_args(&os(&["--", "sh", "-c", "echo hi"])).unwrap();
        assert_eq!(i.command, "sh");
        assert_eq!(i.on_kernel_refusal, OnKernelRefusal::Refuse);
        assert_eq!(i.command_argv(), os(&["sh", "-c", "echo hi"]));
    }

    #[test]
    fn options_before_double_dash() {
        let i = parse_args(&os(&[
            "--on-kernel-refusal",
            "exec",
            "--argv0",
            "-sh",
            "--",
            "/bin/sh",
            "--argv0",
        ]))
        .unwrap();
        assert_eq!(i.on_kernel_refusal, OnKernelRefusal::Exec);
        // Options after `--` belong to the command.
        assert_eq!(i.command_argv(), os(&["-sh", "--argv0"]));
    }

    #[test]
    fn malformed_command_lines_are_errors() {
        for bad in [
            &[][..],
            &["sh"][..],
            &["--"][..],
            &["--", ""][..],
            &["--argv0"][..],
            &["--on-kernel-refusal", "maybe", "--", "sh"][..],
            &["-x", "--", "sh"][..],
        ] {
            assert!(parse_args(&os(bad)).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn fd_numbers() {
        assert_eq!(parse_fd("X", Some(OsStr::new("3"))), Ok(3));
        assert!(parse_fd("X", None).unwrap_err().contains("not set"));
        assert!(parse_fd("X", Some(OsStr::new("2"))).is_err());
        assert!(parse_fd("X", Some(OsStr::new("-1"))).is_err());
        assert!(parse_fd("X", Some(OsStr::new("three"))).is_err());
    }

    #[test]
    fn relay_pid() {
        assert_eq!(parse_relay_pid("X", None), Ok(None));
        assert_eq!(parse_relay_pid("X", Some(OsStr::new("42"))), Ok(Some(42)));
        assert!(parse_relay_pid("X", Some(OsStr::new("1"))).is_err());
        assert!(parse_relay_pid("X", Some(OsStr::new("x"))).is_err());
    }

    #[test]
    fn config_versions_and_json() {
        assert!(parse_config("X", Some(OsStr::new(r#"{"version":2}"#))).is_ok());
        let e = parse_config("X", Some(OsStr::new(r#"{"version":1}"#))).unwrap_err();
        assert!(e.contains("version 1"), "{e}");
        assert!(parse_config("X", Some(OsStr::new("{"))).is_err());
        assert!(parse_config("X", None).is_err());
        assert!(parse_config(
            "X",
            Some(OsStr::new(r#"{"version":2,"ack_timeout_secs":0}"#))
        )
        .is_err());
    }
}
