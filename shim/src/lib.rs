//! agentsh-shell-shim: the program installed as `/bin/sh` (and optionally
//! `/bin/bash`) that puts kernel supervision on every shell an SDK spawns.
//!
//! Flow (docs/architecture.md, "The path of a shell"): pick the real shell from
//! argv[0]; if this process already runs under the agentsh filter, exec the
//! real shell in place with zero server calls; otherwise read the vetted
//! shim.conf, call wrap-init, connect to the notify socket it names and run
//! `agentsh-unixwrap`'s steps in this very process
//! ([`agentsh_unixwrap::run_in_place`]: filter, handoff straight to the
//! server, Landlock, exec), so the user's shell ends up as this pid. Other
//! callers of this library ([`supervise`]: `agentsh wrap`, whose process
//! has threads) fork the relay helper and exec `agentsh-unixwrap` instead. Every way that can
//! fail before anything is installed is decided by [`decide::fall_through`]:
//! `auto` runs the real shell unsupervised and logs it, `on` exits 126 with a
//! one-line hint on stderr. Diagnostics go to [`log`], never to the command's
//! output.
//!
//! The process state the shell inherits is untouched: the shim changes no
//! signal disposition or mask (see `main.rs` for SIGPIPE), no fd (its
//! connection to the notify socket is close-on-exec and closed after the
//! ACK; on the exec path, the one socketpair end it hands to unixwrap), no
//! cwd, umask or rlimit.

pub mod admin;
pub mod decide;
pub mod log;
pub mod relay;
pub mod wrapinit;

use agentsh_proto::hint::REAL_SHELL_MISSING;
use agentsh_proto::shimconf::{self, Mode, Server, ShimConf, SHIM_CONF_PATH};
use agentsh_proto::{active, env, marker, WrapInitRequest, WrapInitResponse};
use decide::{FallThrough, InstallFailure, ShellKind, Stands};
use std::ffi::{CStr, CString, OsStr};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;

/// Exit status for "refused to run" (the hint is on stderr).
pub const EXIT_REFUSED: i32 = agentsh_proto::exit::REFUSED;
/// Exit status for "the real shell is missing".
pub const EXIT_NOT_FOUND: i32 = agentsh_proto::exit::NOT_FOUND;
/// Set by the shim for unixwrap: the pid of the relay helper it must reap.
pub const RELAY_PID_ENV: &str = agentsh_proto::env::RELAY_PID;

/// Kept in the binary so the installer can recognise any shim version.
pub static SHIM_MARKER: &[u8] = agentsh_proto::install::SHIM_MARKER;

/// The whole shim. Returns only when the shell cannot be run; the value is
/// the exit status.
pub fn run(argv: &[&CStr]) -> i32 {
    std::hint::black_box(SHIM_MARKER.as_ptr());
    let argv0: &CStr = argv.first().copied().unwrap_or(c"sh");
    if admin::wanted(argv0.to_bytes()) {
        return admin::run(argv);
    }
    let (real, public) = match real_and_public(argv0) {
        Ok(p) => p,
        Err(code) => return code,
    };
    let real = real.as_str();
    // Nested shell: the tree is already supervised; a second listener would
    // fail with EBUSY anyway. No config read, no server call: the marker
    // prctl alone decides (see `agentsh_proto::marker`).
    if marker::agentsh_filter_present() {
        return exec_real(real, argv0, argv);
    }
    // A shell of the admin's session (`admin-shell`): the kernel says so,
    // and only code outside every tree can have made it say so.
    if marker::admin_session_present() {
        return exec_real(real, argv0, argv);
    }
    let env_mode = std::env::var_os(env::SHIM_INSTALL);
    let loaded = shimconf::load(SHIM_CONF_PATH);
    let mut settings = match decide::settings(loaded, env_mode.as_deref().map(OsStrExt::as_bytes)) {
        Ok(s) => s,
        Err(hint) => return refuse(&hint),
    };
    // The session the SDK chose for this command; a bad id is refused,
    // never replaced by shim.conf's.
    if let Some(id) = std::env::var_os(env::SESSION) {
        match id
            .to_str()
            .filter(|i| agentsh_proto::shimconf::valid_session_id(i))
        {
            Some(i) => settings.conf.session = i.to_string(),
            None if settings.mode == Mode::Off => {}
            None => {
                use agentsh_proto::hint::SESSION_NOT_OPEN;
                let name = env::SESSION;
                return refuse(&format!(
                    "agentsh-shell-shim: {name}={id:?} is not a session id (1-64 letters, \
                     digits, '-', '_', '.'); see {SESSION_NOT_OPEN}"
                ));
            }
        }
    }
    if let Some(note) = &settings.stderr_note {
        eprintln!("{note}");
        log::log(log::Priority::Warning, note);
    }
    for note in &settings.log_notes {
        log::log(log::Priority::Warning, note);
    }
    if settings.mode == Mode::Off {
        return exec_real(real, argv0, argv);
    }
    let target = Target {
        real,
        public: &public,
        argv0,
        argv,
    };
    let failure = match supervise_in_place(&target, &settings.conf, settings.mode) {
        InPlaceEnd::NotInstalled(f) => f,
        InPlaceEnd::Exit(code) => return code,
    };
    // Read only on this failure path: whether agentsh has run in this
    // container decides if `auto` may still fall through.
    let active = active::combined(&marker_path(&settings.conf), active::life().as_deref());
    let server = settings.conf.server.to_string();
    match decide::fall_through(settings.mode, &server, &failure, &active) {
        FallThrough::RunUnsupervised(msg) => {
            log::log(log::Priority::Warning, &msg);
            record_unsupervised(&settings.conf, argv, &msg);
            exec_real(real, argv0, argv)
        }
        FallThrough::Refuse(hint) => refuse(&hint),
    }
}

/// The real shell or program to run, and the path the SDK reached it by;
/// `Err` is the exit status of a refusal already said.
fn real_and_public(argv0: &CStr) -> Result<(String, String), i32> {
    let (real, public) = match own_program() {
        Stands::Shell => {
            let kind = ShellKind::from_argv0(argv0.to_bytes());
            (kind.real_path().to_string(), kind.public_path().to_string())
        }
        Stands::Program { real, public } => (real, public),
        Stands::Broken(hint) => return Err(refuse(&hint)),
    };
    check_real_shell(&real)?;
    Ok((real, public))
}

/// What this shim stands in for: a program installed with `agentsh shim
/// install --programs` is known by the file the kernel exec'd
/// (`/proc/self/exe`, whatever argv[0] says or which symlink led here);
/// anything else is a shell, told apart by argv[0].
fn own_program() -> Stands {
    // Without /proc: the path this process was exec'd with, its links
    // followed (a program shim must not run a shell in its place).
    let exe = std::fs::read_link("/proc/self/exe")
        .or_else(|_| exec_path().and_then(std::fs::canonicalize));
    let Ok(exe) = exe else {
        return Stands::Shell;
    };
    let Some(exe) = exe.to_str() else {
        return Stands::Shell;
    };
    // The file replaced since it was exec'd (an update of the shim).
    let exe = exe.strip_suffix(" (deleted)").unwrap_or(exe);
    let base = exe.rsplit('/').next().unwrap_or(exe);
    if base == "sh" || base == "bash" {
        return Stands::Shell;
    }
    let kept = std::fs::symlink_metadata(format!("{exe}.real")).is_ok();
    let link = std::fs::read_link(agentsh_proto::install::program_link(exe)).ok();
    let link = link.as_deref().and_then(std::path::Path::to_str);
    decide::stands_for(Some(exe), kept, link)
}

/// Where the "agentsh has run here" marker is: beside the API socket (for
/// an `http://` server, the default run directory).
fn marker_path(conf: &ShimConf) -> std::path::PathBuf {
    match &conf.server {
        Server::Unix(socket) => active::marker_for(socket),
        Server::Http(_) => active::marker_for(std::path::Path::new(
            agentsh_proto::shimconf::DEFAULT_SOCKET,
        )),
    }
}

/// An unsupervised run is logged (journald) by the caller; as root it is also
/// appended to `<run_dir>/unsupervised.jsonl`, which the server turns into
/// audit events when it starts. A non-root shell cannot write there: its
/// record is the journal's.
fn record_unsupervised(conf: &ShimConf, argv: &[&CStr], why: &str) {
    use std::io::Write;
    use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
    // SAFETY: geteuid cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        return;
    }
    let marker = marker_path(conf);
    let Some(dir) = marker.parent() else { return };
    let _ = std::fs::DirBuilder::new().mode(0o755).create(dir);
    let line = serde_json::json!({
        "unix_time": std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs()),
        "pid": std::process::id(),
        "ppid": std::os::unix::process::parent_id(),
        "uid": 0,
        "session": conf.session,
        "argv": argv.iter().map(|a| a.to_string_lossy()).collect::<Vec<_>>(),
        "reason": why,
        // Which life of the container it ran in: a record an image build
        // step left (a RUN after `agentsh shim install`) is from another.
        "life": active::life(),
    });
    let file = std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(dir.join(active::UNSUPERVISED_LOG));
    if let Ok(mut f) = file {
        let _ = f.write_all(format!("{line}\n").as_bytes());
    }
}

fn refuse(hint: &str) -> i32 {
    eprintln!("{hint}");
    log::log(log::Priority::Warning, hint);
    EXIT_REFUSED
}

/// The path this process was exec'd with (`AT_EXECFN`), for when /proc
/// cannot say which file it runs.
fn exec_path() -> std::io::Result<&'static OsStr> {
    // SAFETY: getauxval has no preconditions; AT_EXECFN is a NUL-terminated
    // string in the initial stack, valid for the process' lifetime.
    let p = unsafe { libc::getauxval(libc::AT_EXECFN) } as *const libc::c_char;
    if p.is_null() {
        return Err(std::io::Error::from(std::io::ErrorKind::NotFound));
    }
    // SAFETY: see above; the string lives as long as the process.
    let p: &'static CStr = unsafe { CStr::from_ptr(p) };
    Ok(OsStr::from_bytes(p.to_bytes()))
}

/// What `real` is, for a hint.
fn noun(real: &str) -> &'static str {
    if real.starts_with(decide::PROGRAMS_DIR) {
        "program"
    } else {
        "shell"
    }
}

/// The real shell must exist and must not be this binary (an install that
/// pointed the real-shell path back at the shim would exec itself forever).
fn check_real_shell(real: &str) -> Result<(), i32> {
    let target = match std::fs::metadata(real) {
        Ok(m) => m,
        Err(e) => {
            let hint = format!(
                "agentsh-shell-shim: the real {} {real} is missing ({e}); check the install with `agentsh shim status`; see {REAL_SHELL_MISSING}",
                noun(real)
            );
            eprintln!("{hint}");
            log::log(log::Priority::Warning, &hint);
            return Err(EXIT_NOT_FOUND);
        }
    };
    // No /proc: the path this process was exec'd with.
    let me =
        std::fs::metadata("/proc/self/exe").or_else(|_| exec_path().and_then(std::fs::metadata));
    if let Ok(me) = me {
        if me.dev() == target.dev() && me.ino() == target.ino() {
            let hint = decide::loop_hint(real);
            eprintln!("{hint}");
            log::log(log::Priority::Warning, &hint);
            return Err(EXIT_REFUSED);
        }
    }
    Ok(())
}

/// execv's the real shell with the original argv (argv[0] verbatim) and the
/// current environment. Returns only on failure.
fn exec_real(real: &str, argv0: &CStr, argv: &[&CStr]) -> i32 {
    let path = CString::new(real).expect("compile-time path has no NUL");
    let mut ptrs: Vec<*const libc::c_char> = Vec::with_capacity(argv.len() + 2);
    ptrs.push(argv0.as_ptr());
    ptrs.extend(argv.iter().skip(1).map(|a| a.as_ptr()));
    ptrs.push(std::ptr::null());
    // SAFETY: path and every argv pointer are NUL-terminated strings that
    // outlive the call; the array is NULL-terminated.
    unsafe { libc::execv(path.as_ptr(), ptrs.as_ptr()) };
    let e = std::io::Error::last_os_error();
    let hint = format!(
        "agentsh-shell-shim: cannot run the real {} {real}: {e}; check the install with `agentsh shim status`; see {REAL_SHELL_MISSING}",
        noun(real)
    );
    eprintln!("{hint}");
    log::log(log::Priority::Warning, &hint);
    if e.kind() == std::io::ErrorKind::NotFound {
        EXIT_NOT_FOUND
    } else {
        EXIT_REFUSED
    }
}

/// What the shim is about to run: the real program, the name the SDK used
/// for it (`agent_command` in wrap-init), and the argv as the SDK gave it.
pub struct Target<'a> {
    pub real: &'a str,
    pub public: &'a str,
    pub argv0: &'a CStr,
    pub argv: &'a [&'a CStr],
}

/// What [`supervise_in_place`] came to when it returns.
pub enum InPlaceEnd {
    /// Nothing was installed: the failure decides ([`decide::fall_through`]).
    NotInstalled(InstallFailure),
    /// unixwrap's steps ran and did not exec the command (they refused, or
    /// the command was not found): exit with this status, their hint said.
    Exit(i32),
}

/// wrap-init, a connection to the notify socket it names, then unixwrap's
/// steps in this process. For a single-threaded caller only (the shim):
/// the steps `unshare` a mount namespace and load a filter on the calling
/// thread, and neither covers other threads. Returns only when the command
/// was not exec'd.
pub fn supervise_in_place(target: &Target<'_>, conf: &ShimConf, mode: Mode) -> InPlaceEnd {
    let started = std::time::Instant::now();
    let request = WrapInitRequest {
        ruleset_ahead: true,
        ..wrap_init_request(target)
    };
    let resp = match wrapinit::call(conf, &request) {
        Ok(r) => r,
        Err(f) => return InPlaceEnd::NotInstalled(f),
    };
    let wrap_init_us = started.elapsed().as_micros();
    let invocation = agentsh_unixwrap::args::Invocation {
        argv0: Some(std::ffi::OsStr::from_bytes(target.argv0.to_bytes()).to_owned()),
        // A kernel that cannot supervise (gVisor: no user-notify) is not
        // something a tree can bring about, so `auto` keeps its
        // fall-through there (as `--on-kernel-refusal exec` on the exec path).
        on_kernel_refusal: if mode == Mode::Auto {
            agentsh_unixwrap::args::OnKernelRefusal::Exec
        } else {
            agentsh_unixwrap::args::OnKernelRefusal::Refuse
        },
        command: target.real.into(),
        args: target
            .argv
            .iter()
            .skip(1)
            .map(|a| std::ffi::OsStr::from_bytes(a.to_bytes()).to_owned())
            .collect(),
    };
    let timeout = std::time::Duration::from_secs(
        u64::from(resp.seccomp_config.ack_timeout_secs).clamp(1, 60),
    );
    let connecting = std::time::Instant::now();
    let server =
        match agentsh_proto::seqpacket::connect(std::path::Path::new(&resp.notify_socket), timeout)
            .and_then(above_stdio)
        {
            Ok(fd) => fd,
            Err(e) => {
                return InPlaceEnd::NotInstalled(InstallFailure::NotifySocket {
                    path: resp.notify_socket,
                    error: e.to_string(),
                })
            }
        };
    let connect_us = connecting.elapsed().as_micros();
    InPlaceEnd::Exit(agentsh_unixwrap::run_in_place(agentsh_unixwrap::InPlace {
        invocation,
        config: resp.seccomp_config,
        server,
        wrap_init_us,
        connect_us,
    }))
}

/// `fd` moved to 3 or above (close-on-exec), its low number closed again:
/// an SDK that started the shell with stdin, stdout or stderr closed gets
/// those slots back as it left them, for the command.
fn above_stdio(fd: std::os::fd::OwnedFd) -> std::io::Result<std::os::fd::OwnedFd> {
    use std::os::fd::{AsRawFd, FromRawFd};
    if fd.as_raw_fd() > 2 {
        return Ok(fd);
    }
    // SAFETY: F_DUPFD_CLOEXEC on an fd this process owns; the new fd is
    // owned by nobody else. `fd` is closed when dropped.
    let moved = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_DUPFD_CLOEXEC, 3) };
    if moved < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: see above.
    Ok(unsafe { std::os::fd::OwnedFd::from_raw_fd(moved) })
}

/// The wrap-init request for `target`.
fn wrap_init_request(target: &Target<'_>) -> WrapInitRequest {
    WrapInitRequest {
        agent_command: target.public.to_string(),
        agent_args: target
            .argv
            .iter()
            .skip(1)
            .map(|a| a.to_string_lossy().into_owned())
            .collect(),
        // SAFETY: geteuid cannot fail. The connection carries this euid
        // (SO_PEERCRED), which the server checks against it.
        caller_uid: unsafe { libc::geteuid() },
        // Names only: what the policy's `env:` removes is said in the
        // wrap-init event; values never leave this process.
        env_names: std::env::vars_os()
            .map(|(k, _)| k.to_string_lossy().into_owned())
            .collect(),
        env_url_passwords: std::env::vars_os()
            .filter(|(_, v)| {
                agentsh_proto::env::url_with_password(std::os::unix::ffi::OsStrExt::as_bytes(
                    v.as_os_str(),
                ))
            })
            .map(|(k, _)| k.to_string_lossy().into_owned())
            .collect(),
        ruleset_ahead: false,
    }
}

/// wrap-init, relay, exec unixwrap over `target`. Returns only the reason
/// it could not (nothing was installed then).
pub fn supervise(target: &Target<'_>, conf: &ShimConf, mode: Mode) -> InstallFailure {
    let req = wrap_init_request(target);
    let resp = match wrapinit::call(conf, &req) {
        Ok(r) => r,
        Err(f) => return f,
    };
    let wrapper_argv = match wrapper_argv(&resp, target, mode) {
        Ok(a) => a,
        Err(e) => return InstallFailure::BadResponse(e),
    };
    let plan =
        match relay::RelayPlan::new(&resp.notify_socket, resp.seccomp_config.ack_timeout_secs) {
            Ok(p) => p,
            Err(e) => return InstallFailure::BadResponse(e.to_string()),
        };
    let relay = match relay::start(&plan) {
        Ok(r) => r,
        Err(e) => return InstallFailure::Relay(e.to_string()),
    };
    let envp = match wrapper_env(&resp, relay.wrapper_fd, relay.pid) {
        Ok(e) => e,
        Err(e) => {
            relay.abandon();
            return InstallFailure::BadResponse(e);
        }
    };
    let Ok(path) = CString::new(resp.wrapper_binary.as_str()) else {
        relay.abandon();
        return InstallFailure::BadResponse("NUL in wrapper_binary".into());
    };
    let mut aptrs: Vec<*const libc::c_char> = wrapper_argv.iter().map(|a| a.as_ptr()).collect();
    aptrs.push(std::ptr::null());
    let mut eptrs: Vec<*const libc::c_char> = envp.iter().map(|a| a.as_ptr()).collect();
    eptrs.push(std::ptr::null());
    // SAFETY: all strings are NUL-terminated and outlive the call; both arrays
    // are NULL-terminated.
    unsafe { libc::execve(path.as_ptr(), aptrs.as_ptr(), eptrs.as_ptr()) };
    let error = std::io::Error::last_os_error().to_string();
    relay.abandon();
    InstallFailure::WrapperExec {
        path: resp.wrapper_binary,
        error,
    }
}

/// `wrapper_binary --argv0 <argv0> [--on-kernel-refusal exec] -- <real shell> <args...>`
fn wrapper_argv(
    resp: &WrapInitResponse,
    target: &Target<'_>,
    mode: Mode,
) -> Result<Vec<CString>, String> {
    let c = |s: &str| CString::new(s).map_err(|_| format!("NUL in {s:?}"));
    let mut v = vec![c(&resp.wrapper_binary)?];
    // unixwrap takes the next word verbatim, even a login shell's "-bash".
    v.push(c("--argv0")?);
    v.push(CString::from(target.argv0));
    // A kernel that cannot supervise (gVisor: no user-notify) is not something
    // a tree can bring about, so `auto` keeps its fall-through there.
    if mode == Mode::Auto {
        v.push(c("--on-kernel-refusal")?);
        v.push(c("exec")?);
    }
    v.push(c("--")?);
    v.push(c(target.real)?);
    v.extend(target.argv.iter().skip(1).map(|a| CString::from(*a)));
    Ok(v)
}

/// unixwrap's environment: the current one minus the dynamic loader's
/// variables ([`env::is_loader_var`]), which travel packed in
/// [`env::LOADER_ENV`] so unixwrap hands them to the user's shell only once
/// the filter and Landlock are in place; plus `wrapper_env` and the fd/pid
/// variables. (unixwrap is static, but a loader variable must not reach any
/// process of ours that runs before the filter, nor anything it might exec.)
///
/// # Errors
/// The config cannot be serialized.
fn wrapper_env(
    resp: &WrapInitResponse,
    notify_fd: i32,
    relay_pid: libc::pid_t,
) -> Result<Vec<CString>, String> {
    wrapper_env_from(resp, notify_fd, relay_pid, std::env::vars_os())
}

fn wrapper_env_from(
    resp: &WrapInitResponse,
    notify_fd: i32,
    relay_pid: libc::pid_t,
    vars: impl Iterator<Item = (std::ffi::OsString, std::ffi::OsString)>,
) -> Result<Vec<CString>, String> {
    // The answer carries the config once; unixwrap reads it from here.
    let config = serde_json::to_string(&resp.seccomp_config)
        .map_err(|e| format!("cannot serialize the seccomp config: {e}"))?;
    let mut kept = Vec::new();
    let mut loader: Vec<Vec<u8>> = Vec::new();
    for (k, v) in vars {
        let mut kv = k.as_bytes().to_vec();
        kv.push(b'=');
        kv.extend_from_slice(v.as_bytes());
        if env::is_loader_var(k.as_bytes()) {
            loader.push(kv);
        } else {
            kept.push((k, kv));
        }
    }
    let ours = [
        (env::SECCOMP_CONFIG.to_string(), config),
        (env::NOTIFY_SOCK_FD.to_string(), notify_fd.to_string()),
        (RELAY_PID_ENV.to_string(), relay_pid.to_string()),
        (
            env::LOADER_ENV.to_string(),
            env::pack_loader_env(loader.iter().map(Vec::as_slice)),
        ),
    ];
    // Ours win over the server's of the same name (one each).
    let set: Vec<(&str, &str)> = resp
        .wrapper_env
        .iter()
        .filter(|(k, _)| !ours.iter().any(|(o, _)| o == *k))
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .chain(ours.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .collect();
    let mut out = Vec::new();
    for (k, kv) in kept {
        if set.iter().any(|(sk, _)| sk.as_bytes() == k.as_bytes()) {
            continue;
        }
        if let Ok(c) = CString::new(kv) {
            out.push(c);
        }
    }
    for (k, v) in set {
        if let Ok(c) = CString::new(format!("{k}={v}")) {
            out.push(c);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use agentsh_proto::SeccompConfig;

    fn resp() -> WrapInitResponse {
        WrapInitResponse {
            wrapper_binary: "/usr/lib/agentsh/agentsh-unixwrap".into(),
            notify_socket: "/run/agentsh/n.sock".into(),
            seccomp_config: SeccompConfig::default(),
            wrapper_env: [
                ("AGENTSH_SECCOMP_CONFIG".to_string(), "{}".to_string()),
                ("AGENTSH_SESSION_ID".to_string(), "s".to_string()),
            ]
            .into(),
        }
    }

    #[test]
    fn wrapper_argv_keeps_argv0_and_args_verbatim() {
        let args = [c"-bash", c"-c", c"echo $$"];
        let t = Target {
            real: ShellKind::Bash.real_path(),
            public: ShellKind::Bash.public_path(),
            argv0: args[0],
            argv: &args,
        };
        let v = wrapper_argv(&resp(), &t, Mode::Auto).unwrap();
        let v: Vec<&str> = v.iter().map(|c| c.to_str().unwrap()).collect();
        assert_eq!(
            v,
            [
                "/usr/lib/agentsh/agentsh-unixwrap",
                "--argv0",
                "-bash",
                "--on-kernel-refusal",
                "exec",
                "--",
                "/usr/lib/agentsh/shells/bash",
                "-c",
                "echo $$"
            ]
        );
        let t = Target {
            real: ShellKind::Sh.real_path(),
            public: ShellKind::Sh.public_path(),
            argv0: c"sh",
            argv: &[c"sh"],
        };
        let v = wrapper_argv(&resp(), &t, Mode::On).unwrap();
        assert!(!v.iter().any(|c| c.to_bytes() == b"--on-kernel-refusal"));
    }

    #[test]
    fn wrapper_env_carries_fd_pid_and_server_env() {
        let e = wrapper_env(&resp(), 3, 4242).unwrap();
        let has = |s: &str| e.iter().any(|c| c.to_bytes() == s.as_bytes());
        assert!(has("AGENTSH_NOTIFY_SOCK_FD=3"));
        assert!(has("AGENTSH_RELAY_PID=4242"));
        assert!(has("AGENTSH_SESSION_ID=s"));
        // The config, serialized by the shim from the answer's one copy
        // (the server's of the same name loses: one entry).
        let config = serde_json::to_string(&SeccompConfig::default()).unwrap();
        assert!(has(&format!("AGENTSH_SECCOMP_CONFIG={config}")));
        let configs = e
            .iter()
            .filter(|c| c.to_bytes().starts_with(b"AGENTSH_SECCOMP_CONFIG="))
            .count();
        assert_eq!(configs, 1);
    }

    #[test]
    fn loader_variables_travel_packed_and_never_reach_unixwrap_directly() {
        let vars = [
            ("PATH", "/bin"),
            ("LD_PRELOAD", "/w/libp.so"),
            ("HOME", "/root"),
            ("GLIBC_TUNABLES", "glibc.malloc.check=3"),
            ("LD_AUDIT", "/w/audit.so"),
            ("AGENTSH_LOADER_ENV", "forged"),
        ]
        .into_iter()
        .map(|(k, v)| (std::ffi::OsString::from(k), std::ffi::OsString::from(v)));
        let e = wrapper_env_from(&resp(), 3, 4242, vars).unwrap();
        let names: Vec<&str> = e
            .iter()
            .map(|c| c.to_str().unwrap().split('=').next().unwrap())
            .collect();
        for gone in ["LD_PRELOAD", "GLIBC_TUNABLES", "LD_AUDIT"] {
            assert!(!names.contains(&gone), "{gone} in {names:?}");
        }
        assert!(names.contains(&"PATH") && names.contains(&"HOME"));
        let packed = e
            .iter()
            .find_map(|c| c.to_str().unwrap().strip_prefix("AGENTSH_LOADER_ENV="))
            .expect("the loader variables, packed");
        let back = env::unpack_loader_env(packed.as_bytes()).unwrap();
        assert_eq!(
            back,
            [
                b"LD_PRELOAD=/w/libp.so".to_vec(),
                b"GLIBC_TUNABLES=glibc.malloc.check=3".to_vec(),
                b"LD_AUDIT=/w/audit.so".to_vec()
            ]
        );
    }

    #[test]
    fn marker_is_in_the_binary_text() {
        assert!(std::str::from_utf8(SHIM_MARKER)
            .unwrap()
            .starts_with("agentsh-shell-shim"));
    }
}
