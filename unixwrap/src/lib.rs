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
//! Failure modes: every failure is one line on the log fd and an exit status,
//! never output on stdout, and on stderr only the single refusal hint. 126 =
//! refused (including every failure after the filter is loaded: nothing may
//! run then), 127 = command not found. A kernel that refuses the filter before
//! anything was installed is a refusal too, unless `--on-kernel-refusal exec`
//! asks to run the command unsupervised.

pub mod args;
pub mod exec;
pub mod filter;
pub mod handoff;
pub mod landlock;
pub mod log;
pub mod mask;

use agentsh_proto::hint::{KERNEL_CANNOT_SUPERVISE, REAL_SHELL_MISSING, UNIXWRAP_REFUSED};
use std::ffi::{c_int, OsString};
use std::os::fd::{AsFd, BorrowedFd, RawFd};
use std::path::Path;
use std::time::{Duration, Instant};

use agentsh_proto::env;
use agentsh_proto::marker::agentsh_filter_present;

use crate::args::{Invocation, OnKernelRefusal};
use crate::exec::{ResolveError, SigpipeGuard};
use crate::log::Log;

/// Exit status: refused.
pub const EXIT_REFUSED: c_int = agentsh_proto::exit::REFUSED;
/// Exit status: command not found.
pub const EXIT_NOT_FOUND: c_int = agentsh_proto::exit::NOT_FOUND;

/// How a run ends when it does not exec: the status and the one stderr line.
#[derive(Debug)]
struct Exit {
    code: c_int,
    stderr: String,
}

fn refuse(msg: impl std::fmt::Display) -> Exit {
    Exit {
        code: EXIT_REFUSED,
        stderr: format!("agentsh: {msg}"),
    }
}

/// Runs unixwrap with the full argv (argv[0] included). Returns only when the
/// command could not be exec'd; the value is the exit status.
pub fn run(argv: Vec<OsString>) -> c_int {
    let sigpipe = SigpipeGuard::ignore();
    let log = Log::from_env_value(std::env::var_os(env::WRAPPER_LOG_FD).as_deref());
    let exit = wrap(argv.get(1..).unwrap_or_default(), &log, &sigpipe);
    log!(log, "exit {}: {}", exit.code, exit.stderr);
    log::stderr_hint(&exit.stderr);
    exit.code
}

fn wrap(args: &[OsString], log: &Log, sigpipe: &SigpipeGuard) -> Exit {
    let inv = match args::parse_args(args) {
        Ok(i) => i,
        Err(e) => {
            return refuse(format!(
                "agentsh-unixwrap: {e} ({}); see {UNIXWRAP_REFUSED}",
                args::USAGE
            ))
        }
    };
    let cmd = inv.command.to_string_lossy().into_owned();
    let refuse_cmd = |msg: &dyn std::fmt::Display| {
        refuse(format!(
            "refusing to run {cmd}: {msg}; see {UNIXWRAP_REFUSED}"
        ))
    };

    let config = match args::parse_config(
        env::SECCOMP_CONFIG,
        std::env::var_os(env::SECCOMP_CONFIG).as_deref(),
    ) {
        Ok(c) => c,
        Err(e) => return refuse_cmd(&e),
    };
    let relay_pid =
        match args::parse_relay_pid(env::RELAY_PID, std::env::var_os(env::RELAY_PID).as_deref()) {
            Ok(p) => p,
            Err(e) => return refuse_cmd(&e),
        };
    // The loader's variables of the caller's environment, for the command
    // only (unset: unixwrap was not started by the shim, there are none).
    let loader_env = match std::env::var_os(env::LOADER_ENV) {
        None => Vec::new(),
        Some(v) => {
            match env::unpack_loader_env(std::os::unix::ffi::OsStrExt::as_bytes(v.as_os_str())) {
                Ok(l) => l,
                Err(e) => return refuse_cmd(&e),
            }
        }
    };

    let resolved = match exec::resolve(&inv.command, std::env::var_os("PATH").as_deref()) {
        Ok(p) => p,
        Err(ResolveError::NotFound) => {
            return Exit {
                code: EXIT_NOT_FOUND,
                stderr: format!(
                    "agentsh-unixwrap: {cmd}: command not found; see {REAL_SHELL_MISSING}"
                ),
            }
        }
        Err(ResolveError::NotExecutable(p)) => {
            return refuse(format!(
                "{cmd}: permission denied ({} is not an executable file); see {REAL_SHELL_MISSING}",
                p.display()
            ))
        }
    };
    log!(log, "command {cmd:?} resolved to {}", resolved.display());

    let sock_fd_value = std::env::var_os(env::NOTIFY_SOCK_FD);

    // Nested: never attempt a second listener (the kernel says EBUSY, and our
    // own filter answers a NEW_LISTENER request with EPERM anyway).
    if agentsh_filter_present() {
        log!(
            log,
            "already inside an agentsh filter; not loading a second one"
        );
        return match inv.on_kernel_refusal {
            OnKernelRefusal::Refuse => refuse_cmd(
                &"already supervised by agentsh (nested unixwrap); a second filter must not be loaded",
            ),
            OnKernelRefusal::Exec => {
                log!(log, "--on-kernel-refusal exec: running the command under the outer agentsh filter");
                let fd = args::parse_fd(env::NOTIFY_SOCK_FD, sock_fd_value.as_deref()).ok();
                exec_unsupervised(&inv, &resolved, &loader_env, fd, relay_pid, log, sigpipe)
            }
        };
    }

    let sock_fd =
        match args::parse_fd(env::NOTIFY_SOCK_FD, sock_fd_value.as_deref()).and_then(|fd| {
            handoff::check_seqpacket(fd)
                .map(|()| fd)
                .map_err(|e| format!("{}: {e}", env::NOTIFY_SOCK_FD))
        }) {
            Ok(fd) => fd,
            Err(e) => return refuse_cmd(&e),
        };
    // SAFETY: check_seqpacket just proved `sock_fd` is an open socket; it is
    // ours (handed down by the shim) and only closed by `handoff::close_raw`
    // after the last use of this borrow.
    let sock = unsafe { BorrowedFd::borrow_raw(sock_fd) };

    let kernel_refused = |what: String| -> Exit {
        log!(log, "kernel refused: {what}");
        match inv.on_kernel_refusal {
            OnKernelRefusal::Refuse => refuse(format!(
                "refusing to run {cmd}: the kernel cannot supervise this command ({what}); nothing was installed; see {KERNEL_CANNOT_SUPERVISE}"
            )),
            OnKernelRefusal::Exec => {
                log!(
                    log,
                    "--on-kernel-refusal exec: running the command UNSUPERVISED"
                );
                exec_unsupervised(&inv, &resolved, &loader_env, Some(sock_fd), relay_pid, log, sigpipe)
            }
        }
    };

    if let Err(e) = filter::probe_user_notif() {
        return kernel_refused(format!("no seccomp user notification: {e}"));
    }
    if let Some(ll) = &config.landlock {
        if let Err(e) = landlock::precheck(ll, ll.effective_abi(landlock::kernel_abi())) {
            return kernel_refused(e);
        }
    }

    let t_decode = Instant::now();
    let prog = match filter::program(&config) {
        Ok(p) => p,
        Err(e) => return refuse_cmd(&format!("{}: {e}", env::SECCOMP_CONFIG)),
    };
    let decode_us = t_decode.elapsed().as_micros();

    let has_admin = filter::has_cap_sys_admin().unwrap_or(false);
    // Daemon sockets out of the tree's sight, before the filter forbids
    // mounts (see `mask`).
    if let Some(bad) = config.daemon_sockets.iter().find(|p| !mask::acceptable(p)) {
        return refuse_cmd(&format!("daemon_sockets: {bad:?} is not an absolute path"));
    }
    match mask::hide(&config.daemon_sockets, has_admin, log) {
        Ok(m) => log!(log, "{m}"),
        Err(e) => return refuse_cmd(&e),
    }

    let no_new_privs = match filter::has_cap_sys_admin() {
        Ok(true) => {
            log!(
                log,
                "CAP_SYS_ADMIN is effective: loading without no_new_privs"
            );
            false
        }
        Ok(false) | Err(_) => {
            if let Err(e) = filter::set_no_new_privs() {
                return kernel_refused(format!("PR_SET_NO_NEW_PRIVS: {e}"));
            }
            log!(log, "no_new_privs set (no CAP_SYS_ADMIN)");
            true
        }
    };

    let t_load = Instant::now();
    let loaded = match filter::load(&prog, config.wait_killable) {
        Ok(l) => l,
        Err(filter::LoadError::KernelRefused(e)) => {
            return kernel_refused(format!("seccomp(SET_MODE_FILTER, NEW_LISTENER): {e}"))
        }
        Err(filter::LoadError::ListenerExists) => {
            return refuse_cmd(
                &"a seccomp listener already exists in this process's filter chain (EBUSY); \
                  a second one must not be loaded",
            )
        }
        Err(filter::LoadError::Failed(e)) => {
            return refuse_cmd(&format!("loading the seccomp filter: {e}"))
        }
    };
    let load_us = t_load.elapsed().as_micros();
    if loaded.wait_killable_refused {
        log!(
            log,
            "kernel refused WAIT_KILLABLE_RECV (EINVAL); loaded without it"
        );
    }
    log!(
        log,
        "filter loaded: flags={} insns={} decode={decode_us}us load={load_us}us",
        filter::flag_names(loaded.flags),
        prog.len()
    );

    // From here on the filter is installed: every failure is a refusal.
    if !agentsh_filter_present() {
        return refuse_cmd(&"the seccomp filter loaded but its marker does not answer");
    }
    if let Err(e) = handoff::send_notify_fd(sock, loaded.notify_fd.as_fd()) {
        return refuse_cmd(&format!("sending the notify fd on fd {sock_fd}: {e}"));
    }
    let timeout = Duration::from_secs(u64::from(config.ack_timeout_secs));
    if let Err(e) = handoff::wait_ack(sock, timeout) {
        return refuse_cmd(&e);
    }
    log!(log, "ACK accepted: the server supervises this tree");

    // No copy of the notify fd may survive into the exec, or execve blocks forever.
    drop(loaded);
    handoff::close_raw(sock_fd);
    if let Some(pid) = relay_pid {
        log!(
            log,
            "{}",
            handoff::reap_relay(pid, handoff::RELAY_EXIT_DEADLINE)
        );
    }

    if let Some(ll) = &config.landlock {
        match landlock::apply(ll, no_new_privs, log) {
            Ok(report) => log!(log, "{report}"),
            Err(e) => return refuse_cmd(&e),
        }
    }

    exec_command(&inv, &resolved, &loader_env, log, sigpipe)
}

/// The fallback: nothing of ours is installed (or an outer agentsh filter
/// already is). Close fd 3 so the relay sees EOF, reap it, exec.
fn exec_unsupervised(
    inv: &Invocation,
    resolved: &Path,
    loader_env: &[Vec<u8>],
    sock_fd: Option<RawFd>,
    relay_pid: Option<libc::pid_t>,
    log: &Log,
    sigpipe: &SigpipeGuard,
) -> Exit {
    if let Some(fd) = sock_fd {
        handoff::close_raw(fd);
    }
    if let Some(pid) = relay_pid {
        log!(
            log,
            "{}",
            handoff::reap_relay(pid, handoff::RELAY_EXIT_DEADLINE)
        );
    }
    exec_command(inv, resolved, loader_env, log, sigpipe)
}

fn exec_command(
    inv: &Invocation,
    resolved: &Path,
    loader_env: &[Vec<u8>],
    log: &Log,
    sigpipe: &SigpipeGuard,
) -> Exit {
    let envp = exec::command_env(std::env::vars_os(), loader_env);
    let argv = inv.command_argv();
    log!(
        log,
        "exec {} argv0={:?}",
        resolved.display(),
        argv[0].to_string_lossy()
    );
    sigpipe.restore();
    let e = exec::execve(resolved, &argv, &envp);
    let _ = SigpipeGuard::ignore();
    let cmd = inv.command.to_string_lossy();
    if e.raw_os_error() == Some(libc::ENOENT) {
        Exit {
            code: EXIT_NOT_FOUND,
            stderr: format!("agentsh-unixwrap: {cmd}: {e}; see {REAL_SHELL_MISSING}"),
        }
    } else {
        refuse(format!(
            "cannot exec {cmd} ({}): {e}; see {REAL_SHELL_MISSING}",
            resolved.display()
        ))
    }
}
