//! The shim's decisions as pure functions: which shell, which mode, and what a
//! failure means. No I/O here, so every row of the decision table in
//! docs/shim.md ("How the shim decides") is a unit test.

use agentsh_proto::active::State as Active;
use agentsh_proto::hint::{
    EGRESS_NOT_ENFORCEABLE, REAL_SHELL_IS_SHIM, REAL_SHELL_MISSING, REFUSES_UNSUPERVISED,
    SERVER_CANNOT_READ, SESSION_NOT_OPEN, SHIMCONF_IGNORED, SHIMCONF_INVALID,
};
use agentsh_proto::shimconf::{Loaded, Mode, ShimConf, SHIM_CONF_PATH};

/// Where the installer puts the real shells, under names whose basename is the
/// shell's own (`sh`, `bash`): `comm` is the basename of the exec'd path, so
/// `ps` and `pgrep -x sh` see `sh`, not `sh.real`. Each entry is a symlink to
/// `/bin/<name>.real`. Must match the installer (`agentsh shim install`).
pub use agentsh_proto::install::REAL_SHELL_DIR;

/// Which real shell the shim stands in for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ShellKind {
    Sh,
    Bash,
}

impl ShellKind {
    /// From argv[0]'s basename; a leading `-` (login shell) is ignored.
    /// Anything other than `bash` is `sh`: the shim is only ever installed as
    /// `/bin/sh` or `/bin/bash`, and `sh` is the conservative reading.
    pub fn from_argv0(argv0: &[u8]) -> ShellKind {
        match agentsh_proto::install::called_as(argv0) {
            b"bash" => ShellKind::Bash,
            _ => ShellKind::Sh,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            ShellKind::Sh => "sh",
            ShellKind::Bash => "bash",
        }
    }

    /// The real shell's comm-preserving path, e.g. `/usr/lib/agentsh/shells/sh`.
    pub fn real_path(self) -> &'static str {
        match self {
            ShellKind::Sh => agentsh_proto::install::REAL_SH,
            ShellKind::Bash => agentsh_proto::install::REAL_BASH,
        }
    }

    /// The public path reported to the server as `agent_command`.
    pub fn public_path(self) -> &'static str {
        match self {
            ShellKind::Sh => "/bin/sh",
            ShellKind::Bash => "/bin/bash",
        }
    }
}

/// What a shim binary stands in for, from the file it was exec'd from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Stands {
    /// A shell (`/bin/sh`, `/bin/bash`, or a shim not installed as a
    /// program): which one, argv[0] says ([`ShellKind::from_argv0`]).
    Shell,
    /// A program installed with `agentsh shim install --programs`: exec
    /// `real` (its link in [`PROGRAMS_DIR`]); `public` is its own path.
    Program { real: String, public: String },
    /// A program shim whose link is missing or points elsewhere: refuse
    /// with this hint, never run something else in its place.
    Broken(String),
}

pub use agentsh_proto::install::PROGRAMS_DIR;

/// [`Stands`], from `exe` (the shim's own path, `/proc/self/exe`),
/// whether `<exe>.real` exists, and the target of `PROGRAMS_DIR/<basename>`
/// if that is a symlink. A program shim is one whose kept original or
/// whose link exists; `sh` and `bash` are always shells.
pub fn stands_for(exe: Option<&str>, real_kept: bool, link: Option<&str>) -> Stands {
    let Some(exe) = exe.filter(|e| e.starts_with('/')) else {
        return Stands::Shell;
    };
    let base = exe.rsplit('/').next().unwrap_or(exe);
    if base.is_empty() || base == "sh" || base == "bash" || (!real_kept && link.is_none()) {
        return Stands::Shell;
    }
    let want = format!("{exe}.real");
    let real = agentsh_proto::install::program_link(exe);
    match link {
        Some(t) if t == want && real_kept => Stands::Program {
            real,
            public: exe.to_string(),
        },
        _ => Stands::Broken(format!(
            "agentsh-shell-shim: {exe} is agentsh's shim for a program, but {real} \
             does not lead to its original {want}{}; repair it with `agentsh shim install \
             --programs {exe}` and check `agentsh shim status`; see {REAL_SHELL_MISSING}",
            if real_kept { "" } else { " (which is missing)" },
        )),
    }
}

/// The settings the shim acts on, after vetting shim.conf and the environment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    pub mode: Mode,
    /// shim.conf as trusted (defaults when absent or distrusted).
    pub conf: ShimConf,
    /// One line for stderr when shim.conf was distrusted.
    pub stderr_note: Option<String>,
    /// Lines for the diagnostics log (never the command's output).
    pub log_notes: Vec<String>,
}

/// shim.conf and `AGENTSH_SHIM_INSTALL` combined; `Err` is an exit-126 hint.
///
/// The environment can only make the mode stricter. An unparsable value is read
/// as `on` (fail closed): a typo must not silently leave a tree unsupervised.
pub fn settings(loaded: Loaded, env_mode: Option<&[u8]>) -> Result<Settings, String> {
    let mut log_notes = Vec::new();
    let (conf, stderr_note) = match loaded {
        Loaded::Trusted(c) => (c, None),
        Loaded::Absent => (ShimConf::default(), None),
        Loaded::Untrusted { reason } => {
            let c = ShimConf {
                mode: Mode::On,
                ..ShimConf::default()
            };
            let note = format!(
                "agentsh-shell-shim: {reason}; ignoring it and acting as shim_install=on (make it root-owned and mode 0644); see {SHIMCONF_IGNORED}"
            );
            (c, Some(note))
        }
        Loaded::Invalid(e) => {
            return Err(format!(
                "agentsh-shell-shim: {SHIM_CONF_PATH} line {}: {}; fix the file (see {SHIMCONF_INVALID})",
                e.line, e.message
            ))
        }
    };
    let mode = match env_mode {
        None => conf.mode,
        Some(v) => match std::str::from_utf8(v).ok().and_then(Mode::parse) {
            Some(m) => conf.mode.stricter(m),
            None => {
                log_notes.push(format!(
                    "{}={:?} is not one of off, auto, on; acting as on",
                    agentsh_proto::env::SHIM_INSTALL,
                    String::from_utf8_lossy(v)
                ));
                Mode::On
            }
        },
    };
    Ok(Settings {
        mode,
        conf,
        stderr_note,
        log_notes,
    })
}

/// Why the kernel install could not start. Every variant happens before
/// anything was installed, so `auto` may still fall through.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InstallFailure {
    /// Connection refused, timeout, DNS, ...
    Unreachable(String),
    /// The server answered with a non-2xx status, and said why (its
    /// `error`, cleaned) and where to read more (a known `hint` anchor).
    Status {
        status: u16,
        reason: Option<String>,
        hint: Option<&'static str>,
    },
    /// A 2xx answer that is not a usable `WrapInitResponse`.
    BadResponse(String),
    /// What answered is not agentsh as shim.conf describes it: the socket or
    /// its directory is not root's, the peer is not root, or the wrapper it
    /// names is not the allowed, root-owned one.
    Untrusted(String),
    /// The server asked for no kernel install (empty `wrapper_binary` or `notify_socket`).
    NoKernelInstall,
    /// socketpair/fork of the relay helper failed.
    Relay(String),
    /// The server's notify socket could not be connected to (the shim
    /// connects before anything is installed, when it runs unixwrap's steps
    /// in its own process).
    NotifySocket { path: String, error: String },
    /// `wrapper_binary` could not be exec'd.
    WrapperExec { path: String, error: String },
}

impl std::fmt::Display for InstallFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            InstallFailure::Unreachable(e) => write!(f, "wrap-init unreachable: {e}"),
            InstallFailure::Status {
                status,
                reason: Some(r),
                ..
            } => write!(f, "the agentsh server refused (HTTP {status}): {r}"),
            InstallFailure::Status { status, .. } => write!(f, "wrap-init answered HTTP {status}"),
            InstallFailure::BadResponse(e) => write!(f, "wrap-init answer unusable: {e}"),
            InstallFailure::Untrusted(e) => write!(f, "not trusting the server: {e}"),
            InstallFailure::NoKernelInstall => {
                write!(f, "wrap-init returned no wrapper_binary/notify_socket")
            }
            InstallFailure::Relay(e) => write!(f, "cannot start the relay helper: {e}"),
            InstallFailure::NotifySocket { path, error } => {
                write!(
                    f,
                    "cannot connect to the server's notify socket {path}: {error}"
                )
            }
            InstallFailure::WrapperExec { path, error } => write!(f, "cannot run {path}: {error}"),
        }
    }
}

impl InstallFailure {
    /// The troubleshooting section the server named for this refusal.
    pub fn hint(&self) -> Option<&'static str> {
        match self {
            InstallFailure::Status { hint, .. } => *hint,
            _ => None,
        }
    }
}

/// What to do after an [`InstallFailure`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FallThrough {
    /// `auto`: run the real shell unsupervised; the string goes to the log.
    RunUnsupervised(String),
    /// `on`: exit 126; the string is the one-line hint for stderr.
    Refuse(String),
}

/// The decision table's failure rows. `active` is the marker's state (see
/// `agentsh_proto::active`): under `auto`, a failure runs the shell
/// unsupervised only while agentsh has not yet run in this container's
/// life; afterwards it is a refusal, as under `on`.
pub fn fall_through(
    mode: Mode,
    server: &str,
    failure: &InstallFailure,
    active: &Active,
) -> FallThrough {
    match (mode, active) {
        // wrap-init answered, so agentsh runs here whatever the marker says:
        // a notify socket that cannot be reached now is never a reason to
        // run unsupervised.
        (Mode::Auto | Mode::On, _) if matches!(failure, InstallFailure::NotifySocket { .. }) => {
            FallThrough::Refuse(format!(
                "agentsh-shell-shim: {failure}; the agentsh server answered, so the shell does \
                 not run unsupervised: retry, and read the server's log; see {REFUSES_UNSUPERVISED}"
            ))
        }
        // `off` never gets this far; if it did, running unsupervised is what it asks for.
        (Mode::Off, _) | (Mode::Auto, Active::Absent | Active::Stale) => {
            FallThrough::RunUnsupervised(format!(
                "{failure}; shim_install=auto and agentsh has not started in this container yet: running the shell UNSUPERVISED (server {server})"
            ))
        }
        // The server refused this shell and named why: its reason is the
        // hint, and its section the place to read.
        (Mode::Auto | Mode::On, _) if failure.hint() == Some(SERVER_CANNOT_READ) => {
            FallThrough::Refuse(format!(
                "agentsh-shell-shim: {failure}; see {SERVER_CANNOT_READ}"
            ))
        }
        (Mode::Auto | Mode::On, _) if failure.hint() == Some(EGRESS_NOT_ENFORCEABLE) => {
            FallThrough::Refuse(format!(
                "agentsh-shell-shim: {failure}; see {EGRESS_NOT_ENFORCEABLE}"
            ))
        }
        // The server is up and named the session: a shell of another task
        // must not run under the wrong session's rules, nor without any.
        (Mode::Auto | Mode::On, _) if failure.hint() == Some(SESSION_NOT_OPEN) => {
            FallThrough::Refuse(format!("agentsh-shell-shim: {failure}; see {SESSION_NOT_OPEN}"))
        }
        (Mode::Auto, Active::Current(_)) => FallThrough::Refuse(format!(
            "agentsh-shell-shim: {failure}; agentsh has already run in this container, so shim_install=auto refuses to run unsupervised: {}; see {REFUSES_UNSUPERVISED}",
            remedy(failure, &format!("start the agentsh server ({server}) again"))
        )),
        (Mode::On, _) => FallThrough::Refuse(format!(
            "agentsh-shell-shim: {failure}; shim_install=on refuses to run unsupervised: {}; see {REFUSES_UNSUPERVISED}",
            remedy(failure, &format!("start the agentsh server ({server}) or fix {SHIM_CONF_PATH}"))
        )),
    }
}

/// What to do: a server that may be running but whose files the shim
/// cannot trust needs its files fixed, not a restart.
fn remedy(failure: &InstallFailure, otherwise: &str) -> String {
    match failure {
        InstallFailure::Untrusted(_) => {
            "fix the ownership or mode named above (agentsh trusts only root-owned files in \
             directories nobody else can write)"
                .to_string()
        }
        _ => otherwise.to_string(),
    }
}

/// The hint when the real shell is the shim itself.
pub fn loop_hint(real: &str) -> String {
    format!(
        "agentsh-shell-shim: {real} is this shim itself, not a real shell; repair the install with `agentsh shim uninstall` then `agentsh shim install`; see {REAL_SHELL_IS_SHIM}"
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use agentsh_proto::shimconf::ParseError;

    /// A server whose files cannot be trusted is running: the advice is to
    /// fix them, not to start it again; anything else keeps "start it".
    #[test]
    fn the_refusal_advises_what_fixes_the_failure() {
        let untrusted = InstallFailure::Untrusted("/run/agentsh has mode 777".into());
        let down = InstallFailure::Unreachable("no agentsh server socket at x".into());
        for mode in [Mode::On, Mode::Auto] {
            let active = Active::Current(Default::default());
            let FallThrough::Refuse(m) = fall_through(mode, "unix:/x", &untrusted, &active) else {
                panic!("{mode:?}: not a refusal");
            };
            assert!(
                m.contains("fix the ownership or mode") && !m.contains("start the agentsh"),
                "{m}"
            );
            let FallThrough::Refuse(m) = fall_through(mode, "unix:/x", &down, &active) else {
                panic!("{mode:?}: not a refusal");
            };
            assert!(m.contains("start the agentsh server (unix:/x)"), "{m}");
        }
    }

    /// After a wrap-init that answered, the notify socket's failure is a
    /// refusal even under `auto` before agentsh's marker exists.
    #[test]
    fn a_notify_socket_out_of_reach_is_never_a_fall_through() {
        let f = InstallFailure::NotifySocket {
            path: "@agentsh-notify-1".into(),
            error: "Connection refused".into(),
        };
        for (mode, active) in [
            (Mode::Auto, Active::Absent),
            (Mode::Auto, Active::Stale),
            (Mode::Auto, Active::Current(Default::default())),
            (Mode::On, Active::Absent),
        ] {
            let got = fall_through(mode, "unix:/x", &f, &active);
            assert!(
                matches!(&got, FallThrough::Refuse(m) if m.contains("server answered")),
                "{mode:?} {active:?}: {got:?}"
            );
        }
    }

    #[test]
    fn a_program_shim_runs_its_own_original_and_nothing_else() {
        let program = |real: &str, public: &str| Stands::Program {
            real: real.into(),
            public: public.into(),
        };
        let py = "/usr/bin/python3.11";
        let link = Some("/usr/bin/python3.11.real");
        for (exe, kept, l, want) in [
            (
                Some(py),
                true,
                link,
                program("/usr/lib/agentsh/programs/python3.11", py),
            ),
            // Shells are told apart by argv[0], as before.
            (Some("/usr/bin/sh"), true, None, Stands::Shell),
            (
                Some("/usr/bin/bash"),
                true,
                Some("/usr/bin/bash.real"),
                Stands::Shell,
            ),
            // Not installed as anything (a build tree's binary): a shell.
            (
                Some("/build/agentsh-shell-shim"),
                false,
                None,
                Stands::Shell,
            ),
            (None, true, link, Stands::Shell),
            (Some("relative/x"), true, link, Stands::Shell),
        ] {
            assert_eq!(stands_for(exe, kept, l), want, "{exe:?} {kept} {l:?}");
        }
        // A link gone, pointing elsewhere, or an original gone: refused,
        // never a shell run with the program's arguments.
        for (kept, l) in [
            (true, None),
            (true, Some("/usr/bin/perl.real")),
            (true, Some("/bin/sh.real")),
            (false, link),
        ] {
            match stands_for(Some(py), kept, l) {
                Stands::Broken(h) => {
                    assert!(h.contains(py) && h.contains("agentsh shim install"), "{h}");
                }
                other => panic!("{kept} {l:?}: {other:?}"),
            }
        }
    }

    #[test]
    fn shell_kind_from_argv0() {
        for (a, k) in [
            (&b"sh"[..], ShellKind::Sh),
            (b"/bin/sh", ShellKind::Sh),
            (b"-sh", ShellKind::Sh),
            (b"bash", ShellKind::Bash),
            (b"-bash", ShellKind::Bash),
            (b"/usr/bin/bash", ShellKind::Bash),
            (b"dash", ShellKind::Sh),
            (b"", ShellKind::Sh),
            (b"/bin/", ShellKind::Sh),
            (b"bash/", ShellKind::Sh),
        ] {
            assert_eq!(
                ShellKind::from_argv0(a),
                k,
                "{}",
                String::from_utf8_lossy(a)
            );
        }
    }

    #[test]
    fn real_paths_keep_the_shell_basename() {
        for k in [ShellKind::Sh, ShellKind::Bash] {
            assert_eq!(k.real_path(), format!("{REAL_SHELL_DIR}/{}", k.name()));
        }
    }

    fn trusted(mode: Mode) -> Loaded {
        Loaded::Trusted(ShimConf {
            mode,
            ..ShimConf::default()
        })
    }

    #[test]
    fn env_only_strengthens() {
        let m = |l, e: Option<&str>| settings(l, e.map(str::as_bytes)).unwrap().mode;
        assert_eq!(m(trusted(Mode::On), Some("off")), Mode::On);
        assert_eq!(m(trusted(Mode::Auto), Some("off")), Mode::Auto);
        assert_eq!(m(trusted(Mode::Off), Some("auto")), Mode::Auto);
        assert_eq!(m(trusted(Mode::Auto), Some("on")), Mode::On);
        assert_eq!(m(trusted(Mode::Off), None), Mode::Off);
        assert_eq!(m(Loaded::Absent, None), Mode::Auto);
    }

    #[test]
    fn invalid_env_value_fails_closed_and_is_logged() {
        let s = settings(trusted(Mode::Off), Some(b"yes")).unwrap();
        assert_eq!(s.mode, Mode::On);
        assert_eq!(s.log_notes.len(), 1);
        assert!(s.stderr_note.is_none());
    }

    #[test]
    fn untrusted_conf_means_on_with_a_stderr_reason() {
        let s = settings(
            Loaded::Untrusted {
                reason: "/etc/agentsh/shim.conf is writable by group or others (mode 664)".into(),
            },
            Some(b"off"),
        )
        .unwrap();
        assert_eq!(s.mode, Mode::On);
        let note = s.stderr_note.unwrap();
        assert!(
            note.contains("writable by group") && !note.contains('\n'),
            "{note}"
        );
        assert_eq!(
            s.conf.server.to_string(),
            agentsh_proto::shimconf::DEFAULT_SERVER
        );
    }

    #[test]
    fn invalid_conf_refuses_naming_file_and_line() {
        let e = settings(
            Loaded::Invalid(ParseError {
                line: 7,
                message: "shim_install=\"yes\" is not valid; accepted values: auto, on, off".into(),
            }),
            None,
        )
        .unwrap_err();
        assert!(e.contains("/etc/agentsh/shim.conf line 7"), "{e}");
        assert!(e.contains("auto, on, off"), "{e}");
    }

    #[test]
    fn failures_fall_through_only_in_auto_before_agentsh_ran() {
        let f = InstallFailure::Status {
            status: 503,
            reason: None,
            hint: None,
        };
        for active in [Active::Absent, Active::Stale] {
            match fall_through(Mode::Auto, "unix:/x", &f, &active) {
                FallThrough::RunUnsupervised(m) => assert!(m.contains("503")),
                other => panic!("{other:?}"),
            }
        }
        let ran = Active::Current("boot=a pid1=1".into());
        for mode in [Mode::Auto, Mode::On] {
            for active in [Active::Absent, ran.clone()] {
                if mode == Mode::Auto && active == Active::Absent {
                    continue;
                }
                match fall_through(mode, "unix:/x", &f, &active) {
                    FallThrough::Refuse(h) => assert!(
                        h.starts_with("agentsh-shell-shim: ") && !h.contains('\n'),
                        "{h}"
                    ),
                    other => panic!("{mode:?} {active:?}: {other:?}"),
                }
            }
        }
        // Whatever the failure: busy, impersonated, gone.
        for f in [
            InstallFailure::Unreachable("timeout".into()),
            InstallFailure::Untrusted("peer uid 1000".into()),
            InstallFailure::BadResponse("x".into()),
        ] {
            assert!(matches!(
                fall_through(Mode::Auto, "unix:/x", &f, &ran),
                FallThrough::Refuse(_)
            ));
        }
    }
}
