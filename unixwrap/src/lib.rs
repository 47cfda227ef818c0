//! `agentsh-unixwrap`: put the agentsh seccomp notify filter (and Landlock) on
//! a process, hand the notify fd to the server, then become the command.
//!
//! The shim execs unixwrap in place (same pid as the shell the SDK spawned), so
//! everything here happens in the process the SDK tracks. The sequence:
//! resolve the command → load the filter the server compiled (raw
//! `seccomp(2)`, NEW_LISTENER) →
//! send the notify fd up fd 3 → wait for the ACK → close every copy of the
//! notify fd, reap the relay → Landlock → strip `AGENTSH_*`, put the loader's
//! variables back → execve (already trapped, so the server sees it).
//!
//! The shim may also run these steps in its own process ([`run_in_place`]):
//! the same sequence, without the exec of this binary, its start-up and the
//! relay (the shim connected to the server's notify socket itself, before
//! anything was installed, and the fd goes straight up that connection).
//!
//! Failure modes: every failure is one line on the log fd and an exit status,
//! never output on stdout, and on stderr only the single refusal hint. 126 =
//! refused (including every failure after the filter is loaded: nothing may
//! run then), 127 = command not found. A kernel that refuses the filter before
//! anything was installed is a refusal too, unless `--on-kernel-refusal exec`
//! asks to run the command unsupervised.

pub mod ahead;
pub mod args;
pub mod error;
pub mod exec;
pub mod filter;
pub mod handoff;
pub mod landlock;
pub mod log;
pub mod mask;

use std::convert::Infallible;
use std::ffi::{c_int, CString, OsString};
use std::os::fd::{AsFd, BorrowedFd, IntoRawFd, OwnedFd, RawFd};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use agentsh_proto::env;
use agentsh_proto::marker::agentsh_filter_present;
use agentsh_proto::wire::Trap;
use agentsh_proto::SeccompConfig;

use crate::args::{Invocation, OnKernelRefusal};
use crate::error::{KernelRefusal, Refusal, WrapError};
use crate::exec::{ResolveError, SigpipeGuard};
use crate::handoff::Up;
use crate::log::Log;

/// Exit status: refused.
pub const EXIT_REFUSED: c_int = agentsh_proto::exit::REFUSED;
/// Exit status: command not found.
pub const EXIT_NOT_FOUND: c_int = agentsh_proto::exit::NOT_FOUND;

/// Runs unixwrap with the full argv (argv[0] included). Returns only when the
/// command could not be exec'd; the value is the exit status.
pub fn run(argv: Vec<OsString>) -> c_int {
    let sigpipe = SigpipeGuard::ignore();
    let log = Log::from_env_value(std::env::var_os(env::WRAPPER_LOG_FD).as_deref());
    let wrapped =
        read_setup(argv.get(1..).unwrap_or_default(), &log).and_then(|s| wrap(s, &log, &sigpipe));
    finish(wrapped, &log)
}

/// What the shim hands over when these steps run in its own process: the
/// invocation it would have given `agentsh-unixwrap`, the config wrap-init
/// answered (vetted here as the environment's is), and its SEQPACKET
/// connection to the server's notify socket, made before anything was
/// installed (fd 3 or above: 0-2 are the command's).
pub struct InPlace {
    pub invocation: Invocation,
    pub config: SeccompConfig,
    pub server: OwnedFd,
    /// How long the shim's wrap-init and its connection took (µs), for the
    /// log's `stages:` line.
    pub wrap_init_us: u128,
    pub connect_us: u128,
}

/// Runs unixwrap's steps in the calling process (the shim's: single
/// threaded, nothing of ours installed yet), with the environment as it is
/// (the loader's variables included: they reach the command as they would
/// through the exec path, and nothing of ours is loaded by a loader).
/// Returns only when the command could not be exec'd; the value is the exit
/// status, as [`run`]'s.
pub fn run_in_place(p: InPlace) -> c_int {
    let sigpipe = SigpipeGuard::ignore();
    let log = Log::from_env_value(std::env::var_os(env::WRAPPER_LOG_FD).as_deref());
    let wrapped = setup_in_place(p, &log).and_then(|s| wrap(s, &log, &sigpipe));
    finish(wrapped, &log)
}

/// The exit status and the one-line hint of a wrap that did not exec.
fn finish(wrapped: Result<Infallible, WrapError>, log: &Log) -> c_int {
    let err = match wrapped {
        Ok(never) => match never {},
        Err(e) => e,
    };
    let hint = err.hint();
    log!(log, "exit {}: {hint}", err.exit_code());
    log::stderr_hint(&hint);
    err.exit_code()
}

/// What unixwrap was asked to run, read from its arguments and the
/// environment the shim hands down.
struct Setup {
    inv: Invocation,
    /// The command as given, for messages.
    cmd: String,
    resolved: PathBuf,
    config: SeccompConfig,
    relay_pid: Option<libc::pid_t>,
    /// Where the notify fd goes: the relay, or the server itself.
    up: Up,
    /// The loader's variables of the caller's environment, for the command only.
    loader_env: Vec<Vec<u8>>,
    /// `AGENTSH_NOTIFY_SOCK_FD` as given (checked by [`notify_socket`]).
    sock_fd_value: Option<OsString>,
}

impl Setup {
    fn refused(&self, why: Refusal) -> WrapError {
        WrapError::Refused {
            cmd: self.cmd.clone(),
            why,
        }
    }

    /// The kernel cannot give what was asked, and nothing is installed yet.
    fn kernel_cannot(&self, what: KernelRefusal) -> WrapError {
        WrapError::KernelCannot {
            cmd: self.cmd.clone(),
            what,
        }
    }
}

/// The steps: read what to run; under an outer agentsh filter, run it (or
/// refuse); otherwise install supervision and exec the command, or — when the
/// kernel refused before anything was installed and the caller allows it —
/// exec it unsupervised.
fn wrap(setup: Setup, log: &Log, sigpipe: &SigpipeGuard) -> Result<Infallible, WrapError> {
    // Nested: never attempt a second listener (the kernel says EBUSY, and our
    // own filter answers a NEW_LISTENER request with EPERM anyway).
    if agentsh_filter_present() {
        log!(
            log,
            "already inside an agentsh filter; not loading a second one"
        );
        return match setup.inv.on_kernel_refusal {
            OnKernelRefusal::Refuse => Err(setup.refused(Refusal::Nested)),
            OnKernelRefusal::Exec => {
                log!(
                    log,
                    "--on-kernel-refusal exec: running the command under the outer agentsh filter"
                );
                let fd = args::parse_fd(env::NOTIFY_SOCK_FD, setup.sock_fd_value.as_deref()).ok();
                exec_unsupervised(&setup, fd, log, sigpipe)
            }
        };
    }
    let sock_fd = notify_socket(&setup)?;
    match install(&setup, sock_fd, log) {
        Ok(()) => exec_command(&setup, log, sigpipe),
        Err(WrapError::KernelCannot { what, .. })
            if setup.inv.on_kernel_refusal == OnKernelRefusal::Exec =>
        {
            log!(log, "kernel refused: {what}");
            log!(
                log,
                "--on-kernel-refusal exec: running the command UNSUPERVISED"
            );
            exec_unsupervised(&setup, Some(sock_fd), log, sigpipe)
        }
        Err(e) => {
            if let WrapError::KernelCannot { what, .. } = &e {
                log!(log, "kernel refused: {what}");
            }
            Err(e)
        }
    }
}

/// Arguments, the seccomp config, the relay pid, the loader's variables, and
/// the command resolved on `PATH`.
fn read_setup(args: &[OsString], log: &Log) -> Result<Setup, WrapError> {
    let inv = args::parse_args(args).map_err(WrapError::Usage)?;
    let cmd = inv.command.to_string_lossy().into_owned();
    let env_refusal = |e: String| WrapError::Refused {
        cmd: cmd.clone(),
        why: Refusal::Environment(e),
    };
    let config = args::parse_config(
        env::SECCOMP_CONFIG,
        std::env::var_os(env::SECCOMP_CONFIG).as_deref(),
    )
    .map_err(env_refusal)?;
    let relay_pid =
        args::parse_relay_pid(env::RELAY_PID, std::env::var_os(env::RELAY_PID).as_deref())
            .map_err(env_refusal)?;
    // Unset: unixwrap was not started by the shim, there are none.
    let loader_env = match std::env::var_os(env::LOADER_ENV) {
        None => Vec::new(),
        Some(v) => env::unpack_loader_env(std::os::unix::ffi::OsStrExt::as_bytes(v.as_os_str()))
            .map_err(env_refusal)?,
    };
    let resolved = resolve(&inv, &cmd, log)?;
    Ok(Setup {
        inv,
        cmd,
        resolved,
        config,
        relay_pid,
        up: Up::Relay,
        loader_env,
        sock_fd_value: std::env::var_os(env::NOTIFY_SOCK_FD),
    })
}

/// The setup of [`run_in_place`]: the config vetted as
/// [`args::parse_config`] vets the environment's, no relay, the notify fd
/// straight to the server.
fn setup_in_place(p: InPlace, log: &Log) -> Result<Setup, WrapError> {
    let InPlace {
        invocation: inv,
        config,
        server,
        wrap_init_us,
        connect_us,
    } = p;
    log!(
        log,
        "stages (shim): wrap-init={wrap_init_us}us connect={connect_us}us"
    );
    let cmd = inv.command.to_string_lossy().into_owned();
    // Owned from here by the steps, which close it after the ACK (or before
    // an unsupervised exec); close-on-exec meanwhile.
    let fd = server.into_raw_fd();
    let config = args::vet_config("the wrap-init answer", config).map_err(|e| {
        handoff::close_raw(fd);
        WrapError::Refused {
            cmd: cmd.clone(),
            why: Refusal::Environment(e),
        }
    })?;
    let resolved = resolve(&inv, &cmd, log).inspect_err(|_| handoff::close_raw(fd))?;
    let ack_timeout = Duration::from_secs(u64::from(config.ack_timeout_secs));
    // SAFETY: getpid cannot fail.
    let pid = unsafe { libc::getpid() } as u32;
    Ok(Setup {
        inv,
        cmd,
        resolved,
        config,
        relay_pid: None,
        up: Up::Server { pid, ack_timeout },
        loader_env: Vec::new(),
        sock_fd_value: Some(fd.to_string().into()),
    })
}

/// The command resolved on `PATH`.
fn resolve(inv: &Invocation, cmd: &str, log: &Log) -> Result<PathBuf, WrapError> {
    let resolved = match exec::resolve(&inv.command, std::env::var_os("PATH").as_deref()) {
        Ok(p) => p,
        Err(ResolveError::NotFound) => return Err(WrapError::NotFound { cmd: cmd.into() }),
        Err(ResolveError::NotExecutable(path)) => {
            return Err(WrapError::NotExecutable {
                cmd: cmd.into(),
                path,
            })
        }
    };
    log!(log, "command {cmd:?} resolved to {}", resolved.display());
    Ok(resolved)
}

/// The SEQPACKET socket the notify fd goes up (`AGENTSH_NOTIFY_SOCK_FD`).
fn notify_socket(setup: &Setup) -> Result<RawFd, WrapError> {
    args::parse_fd(env::NOTIFY_SOCK_FD, setup.sock_fd_value.as_deref())
        .and_then(|fd| {
            agentsh_proto::seqpacket::check_type(fd)
                .map(|()| fd)
                .map_err(|e| format!("{}: {e}", env::NOTIFY_SOCK_FD))
        })
        .map_err(|e| setup.refused(Refusal::Environment(e)))
}

/// Everything before the exec: kernel checks, daemon sockets hidden, the
/// filter loaded and handed over, the relay reaped, Landlock applied. The
/// order is the module doc's sequence and is kept as is (the masks, for
/// one, need mounts the filter forbids).
/// [`WrapError::KernelCannot`] means nothing was installed.
fn install(setup: &Setup, sock_fd: RawFd, log: &Log) -> Result<(), WrapError> {
    let config = &setup.config;
    check_kernel(setup)?;

    let t_decode = Instant::now();
    let prog = filter::program(config).map_err(|e| setup.refused(Refusal::Program(e)))?;
    let decode_us = t_decode.elapsed().as_micros();

    let has_admin = filter::has_cap_sys_admin().unwrap_or(false);
    // Daemon sockets out of the tree's sight, before the filter forbids
    // mounts (see `mask`).
    let mut stages = Stages::start();
    hide_paths(setup, has_admin, log)?;
    stages.mark("masks");
    let no_new_privs = no_new_privs_unless_admin(setup, has_admin, log)?;
    name_tracer(setup, log);
    let (loaded, courier) = load_filter(setup, sock_fd, &prog, decode_us, log)?;
    stages.mark("filter");

    // From here on the filter is installed: every failure is a refusal.
    let ahead = hand_over(setup, sock_fd, loaded, courier, log)?;
    stages.mark("handoff");
    if let Some(ll) = &config.landlock {
        restrict(setup, ll, ahead, no_new_privs, log)?;
    }
    stages.mark("landlock");
    log!(log, "stages: {stages}");
    Ok(())
}

/// How long each step of [`install`] took, for the log's `stages:` line
/// (what the install path's time is made of, on the machine it runs on).
struct Stages {
    at: Instant,
    done: Vec<(&'static str, u128)>,
}

impl Stages {
    fn start() -> Stages {
        Stages {
            at: Instant::now(),
            done: Vec::with_capacity(4),
        }
    }

    fn mark(&mut self, what: &'static str) {
        let now = Instant::now();
        self.done
            .push((what, now.duration_since(self.at).as_micros()));
        self.at = now;
    }
}

impl std::fmt::Display for Stages {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (i, (what, us)) in self.done.iter().enumerate() {
            write!(f, "{}{what}={us}us", if i == 0 { "" } else { " " })?;
        }
        Ok(())
    }
}

/// What the kernel must offer before anything is installed: user-notify
/// (notify backend) and the Landlock ABI the ruleset needs.
fn check_kernel(setup: &Setup) -> Result<(), WrapError> {
    let config = &setup.config;
    if config.backend.trap() == Trap::UserNotif {
        filter::probe_user_notif()
            .map_err(|e| setup.kernel_cannot(KernelRefusal::NoUserNotif(e)))?;
    }
    if let Some(ll) = &config.landlock {
        landlock::precheck(ll, ll.effective_abi(landlock::kernel_abi()))
            .map_err(|e| setup.kernel_cannot(KernelRefusal::Landlock(e)))?;
    }
    Ok(())
}

/// Names the server this process's ptracer (a backend that seizes the
/// root), before the filter (which refuses that prctl to the tree) and
/// before the handoff asks to be seized. Where it cannot be named, the
/// seize says whether it mattered: its refusal is the handoff's.
fn name_tracer(setup: &Setup, log: &Log) {
    let Some(tracer) = setup.config.tracer_pid else {
        return;
    };
    match handoff::name_tracer(tracer) {
        Ok(()) => log!(
            log,
            "named pid {tracer} (the server) this process's ptracer"
        ),
        Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
            log!(
                log,
                "no Yama here: pid {tracer} needs no naming to trace this process"
            );
        }
        Err(e) => log!(log, "PR_SET_PTRACER {tracer}: {e} (the seize decides)"),
    }
}

/// The daemon sockets and credential stores hidden and the
/// `exec_sources` places mounted `noexec`, after checking every path the
/// server sent.
fn hide_paths(setup: &Setup, has_admin: bool, log: &Log) -> Result<(), WrapError> {
    let config = &setup.config;
    if let Some(bad) = config.daemon_sockets.iter().find(|p| !mask::acceptable(p)) {
        return Err(setup.refused(Refusal::DaemonSocketPath(bad.clone())));
    }
    let noexec = config
        .landlock
        .as_ref()
        .map(|l| l.noexec_mounts.clone())
        .unwrap_or_default();
    if let Some(bad) = noexec
        .iter()
        .chain(&config.credential_files)
        .chain(&config.read_only_files)
        .find(|p| !mask::acceptable(p))
    {
        return Err(setup.refused(Refusal::DaemonSocketPath(bad.clone())));
    }
    let plan = mask::Plan {
        daemon_sockets: &config.daemon_sockets,
        credentials: &config.credential_files,
        read_only: &config.read_only_files,
        noexec: &noexec,
        has_admin,
        user_namespace: config.user_namespace,
    };
    let masked = mask::hide(&plan, log).map_err(|e| setup.refused(Refusal::Mask(e)))?;
    log!(log, "{masked}");
    Ok(())
}

/// `no_new_privs`, which an unprivileged filter load needs; with
/// CAP_SYS_ADMIN the filter loads without it. Returns whether it is set.
fn no_new_privs_unless_admin(setup: &Setup, has_admin: bool, log: &Log) -> Result<bool, WrapError> {
    if has_admin {
        log!(
            log,
            "CAP_SYS_ADMIN is effective: loading without no_new_privs"
        );
        return Ok(false);
    }
    filter::set_no_new_privs().map_err(|e| setup.kernel_cannot(KernelRefusal::NoNewPrivs(e)))?;
    log!(log, "no_new_privs set (no CAP_SYS_ADMIN)");
    Ok(true)
}

/// Loads the filter. For the notify backend, the thread that will send the
/// notify fd is cloned first, so its sendmsg is not trapped (see
/// `handoff::Courier`).
fn load_filter(
    setup: &Setup,
    sock_fd: RawFd,
    prog: &[libc::sock_filter],
    decode_us: u128,
    log: &Log,
) -> Result<(filter::Loaded, Option<handoff::Courier>), WrapError> {
    let config = &setup.config;
    // Straight to the server, the ptrace backend's request goes by the
    // courier too (see `handoff::Courier`).
    let courier = match (config.backend.trap(), setup.up) {
        (Trap::UserNotif, _) | (Trap::Tracer, Up::Server { .. }) => Some(
            handoff::Courier::start(sock_fd, setup.up)
                .map_err(|err| setup.refused(Refusal::Send { fd: sock_fd, err }))?,
        ),
        (Trap::Tracer, Up::Relay) => None,
    };
    let t_load = Instant::now();
    let loaded =
        filter::load(prog, config.wait_killable, config.backend.trap()).map_err(|e| match e {
            filter::LoadError::KernelRefused(e) => setup.kernel_cannot(KernelRefusal::Load(e)),
            filter::LoadError::ListenerExists => setup.refused(Refusal::ListenerExists),
            filter::LoadError::Failed(e) => setup.refused(Refusal::Load(e)),
        })?;
    let load_us = t_load.elapsed().as_micros();
    if loaded.wait_killable_refused {
        log!(
            log,
            "kernel refused WAIT_KILLABLE_RECV (EINVAL); loaded without it"
        );
    }
    log!(
        log,
        "filter loaded: backend={} flags={} insns={} decode={decode_us}us load={load_us}us",
        config.backend.name(),
        filter::flag_names(loaded.flags),
        prog.len()
    );
    Ok((loaded, courier))
}

/// Sends the notify fd (ptrace backend: the request to be traced), waits
/// for the ACK, closes every copy of the notify fd (or execve would block
/// forever) and reaps the relay. Straight from the server, the ACK may
/// carry the tree's Landlock ruleset, built ahead: returned.
fn hand_over(
    setup: &Setup,
    sock_fd: RawFd,
    loaded: filter::Loaded,
    courier: Option<handoff::Courier>,
    log: &Log,
) -> Result<Option<OwnedFd>, WrapError> {
    if !agentsh_filter_present() {
        return Err(setup.refused(Refusal::MarkerSilent));
    }
    // SAFETY: `notify_socket` proved `sock_fd` is an open socket; it is ours
    // (handed down by the shim) and only closed by `handoff::close_raw` below,
    // after the last use of this borrow.
    let sock = unsafe { BorrowedFd::borrow_raw(sock_fd) };
    let sent = match (&loaded.notify_fd, courier) {
        (Some(fd), Some(courier)) => courier.send(fd.as_fd()),
        (Some(_), None) => Err(std::io::Error::other(
            "no courier thread for the notify fd (backend mismatch)",
        )),
        // ptrace: the server seizes this process before it answers, so the
        // exec below is already a traced one.
        (None, Some(courier)) => courier.send_trace(),
        (None, None) => handoff::send_trace_request(sock),
    };
    sent.map_err(|err| setup.refused(Refusal::Send { fd: sock_fd, err }))?;
    let timeout = Duration::from_secs(u64::from(setup.config.ack_timeout_secs));
    let ruleset = match setup.up {
        Up::Server { .. } => handoff::wait_ack_from_server(sock, timeout),
        Up::Relay => handoff::wait_ack(sock, timeout).map(|()| None),
    }
    .map_err(|e| setup.refused(Refusal::Ack(e)))?;
    log!(log, "ACK accepted: the server supervises this tree");
    drop(loaded);
    handoff::close_raw(sock_fd);
    if let Some(pid) = setup.relay_pid {
        log!(
            log,
            "{}",
            handoff::reap_relay(pid, handoff::RELAY_EXIT_DEADLINE)
        );
    }
    Ok(ruleset)
}

/// Landlock: the server's ruleset when it sent one (built ahead) and this
/// thread takes it, else the tree's own, built here. The server's is closed
/// here either way.
fn restrict(
    setup: &Setup,
    ll: &agentsh_proto::LandlockConfig,
    ahead: Option<OwnedFd>,
    no_new_privs: bool,
    log: &Log,
) -> Result<(), WrapError> {
    if let Some(fd) = ahead {
        match ahead::restrict(fd.as_fd()) {
            Ok(()) => {
                log!(log, "{}", ahead::report_line(ll));
                return Ok(());
            }
            Err(e) => log!(
                log,
                "landlock: the server's ruleset not taken ({e}); building this tree's own"
            ),
        }
    }
    let report =
        landlock::apply(ll, no_new_privs, log).map_err(|e| setup.refused(Refusal::Landlock(e)))?;
    log!(log, "{report}");
    Ok(())
}

/// The fallback: nothing of ours is installed (or an outer agentsh filter
/// already is). Close fd 3 so the relay sees EOF, reap it, exec.
fn exec_unsupervised(
    setup: &Setup,
    sock_fd: Option<RawFd>,
    log: &Log,
    sigpipe: &SigpipeGuard,
) -> Result<Infallible, WrapError> {
    if let Some(fd) = sock_fd {
        handoff::close_raw(fd);
    }
    if let Some(pid) = setup.relay_pid {
        log!(
            log,
            "{}",
            handoff::reap_relay(pid, handoff::RELAY_EXIT_DEADLINE)
        );
    }
    exec_command(setup, log, sigpipe)
}

/// Strips `AGENTSH_*`, puts the loader's variables back, applies the
/// policy's `env:` rules (names logged, never values), execs the command.
fn exec_command(setup: &Setup, log: &Log, sigpipe: &SigpipeGuard) -> Result<Infallible, WrapError> {
    let mut envp = exec::command_env(std::env::vars_os(), &setup.loader_env);
    if let Some(rules) = &setup.config.env {
        let (kept, removed) = rules.apply(envp.into_iter().map(CString::into_bytes).collect());
        if !removed.is_empty() {
            log!(log, "env: removed {}", removed.join(" "));
        }
        envp = kept
            .into_iter()
            .filter_map(|e| CString::new(e).ok())
            .collect();
    }
    let argv = setup.inv.command_argv();
    log!(
        log,
        "exec {} argv0={:?}",
        setup.resolved.display(),
        argv[0].to_string_lossy()
    );
    sigpipe.restore();
    let err = exec::execve(&setup.resolved, &argv, &envp);
    let _ = SigpipeGuard::ignore();
    Err(WrapError::Exec {
        cmd: setup.cmd.clone(),
        path: setup.resolved.clone(),
        err,
    })
}
