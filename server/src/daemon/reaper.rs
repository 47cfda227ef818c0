//! `agentsh reaper` (internal): the process between the server and the
//! command it runs (`agentsh server -- CMD`, which `agentsh entrypoint`
//! uses), so that every shell the command starts stays a descendant of the
//! server.
//!
//! Why: without `CAP_SYS_PTRACE`, Yama's `ptrace_scope` 1 lets the server
//! read and trace only its descendants. A shell orphaned by its parent (a
//! double fork, `setsid cmd &`, a daemonizing tool) would be re-parented to
//! the container's init and leave the server's reach: every later exec of it
//! would be refused. This process is a child subreaper
//! (`PR_SET_CHILD_SUBREAPER`), so orphans of the command's tree come to it,
//! below the server, and it reaps them. It is a separate process, not the
//! server, because a reaper's `waitpid(-1)` would also take the ptrace stops
//! of the server's tracees.
//!
//! Signals: SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1 and SIGUSR2 are passed
//! to the command. If the server dies (its death signal: SIGTERM, and our
//! parent is no longer the server), every process below this one is killed
//! and it exits: a new server could not read them, and they could not exec
//! anything anyway. When the command exits, this exits with its status
//! (128+N for signal N); its leftover children are re-parented upwards.
//!
//! Failure modes: a command that cannot be started exits 127 (not found) or
//! 126, with the reason on stderr (the container log).

use nix::sys::signal::{kill, SigSet, Signal};
use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use nix::unistd::Pid;
use std::ffi::OsString;
use std::os::unix::process::CommandExt;
use std::process::Command;

fn say(msg: &str) {
    eprintln!("agentsh reaper: {msg}");
}

/// Blocks, in the calling thread, the signals a command's keeper takes
/// with sigwait (this reaper, and `agentsh entrypoint`): the stop and user
/// signals it passes on to the command, and SIGCHLD; returns that set.
///
/// # Errors
/// pthread_sigmask's errno.
pub fn block_forwarded() -> nix::Result<SigSet> {
    let mut handled = SigSet::empty();
    for s in [
        Signal::SIGTERM,
        Signal::SIGINT,
        Signal::SIGHUP,
        Signal::SIGQUIT,
        Signal::SIGUSR1,
        Signal::SIGUSR2,
        Signal::SIGCHLD,
    ] {
        handled.add(s);
    }
    handled.thread_block()?;
    Ok(handled)
}

/// Runs `command` below this process; returns the exit code for it.
/// `server` is the pid of the server that started us (our parent);
/// `tell_fd`, if given, gets the command's pid as one line and is closed
/// (the server protects it from trees' signals).
pub fn run(
    server: u32,
    nofile_soft: Option<u64>,
    join_pgid: Option<i32>,
    tell_fd: Option<i32>,
    command: &[OsString],
) -> i32 {
    // Ours alone: the command never inherits it.
    let tell = tell_fd.filter(|&f| f > 2).map(|f| {
        // SAFETY: the server passed us this fd to own; nothing else in this
        // process uses its number.
        let owned = unsafe { <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(f) };
        // SAFETY: fcntl on the fd we now own.
        unsafe { libc::fcntl(f, libc::F_SETFD, libc::FD_CLOEXEC) };
        std::fs::File::from(owned)
    });
    let Some((program, args)) = command.split_first() else {
        say("no command given");
        return 2;
    };
    // SAFETY: prctl with integer arguments; affects only this process.
    unsafe {
        libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
        libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM, 0, 0, 0);
    }
    let handled = match block_forwarded() {
        Ok(set) => set,
        Err(e) => {
            say(&format!("cannot block signals: {e}"));
            return 1;
        }
    };
    // The server may have died before the death signal was armed.
    if std::os::unix::process::parent_id() != server {
        say("the server that started this command is gone");
        return 1;
    }
    match spawn(program, args, join_pgid, nofile_soft) {
        Ok(child) => {
            if let Some(mut f) = tell {
                use std::io::Write;
                if let Err(e) = writeln!(f, "{child}") {
                    say(&format!("cannot tell the server the command's pid: {e}"));
                }
            }
            keep(child, server, &handled)
        }
        Err(code) => code,
    }
}

/// Starts the command (in `join_pgid`, with the soft open-file limit
/// `nofile_soft`, every signal unblocked); `Err`: the exit code when it
/// cannot be started (said).
fn spawn(
    program: &OsString,
    args: &[OsString],
    join_pgid: Option<i32>,
    nofile_soft: Option<u64>,
) -> Result<Pid, i32> {
    let mut cmd = Command::new(program);
    cmd.args(args);
    // SAFETY: between fork and exec the closure only calls setrlimit,
    // setpgid and pthread_sigmask (async-signal-safe) and allocates nothing.
    unsafe {
        cmd.pre_exec(move || {
            // `agentsh wrap`: back into the terminal's foreground group the
            // server left, so the terminal's ^C and ^Z reach the command
            // and not the server.
            if let Some(g) = join_pgid {
                if libc::setpgid(0, g) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
            }
            if let Some(soft) = nofile_soft {
                let mut lim = libc::rlimit {
                    rlim_cur: 0,
                    rlim_max: 0,
                };
                if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) == 0 {
                    lim.rlim_cur = soft.min(lim.rlim_max);
                    libc::setrlimit(libc::RLIMIT_NOFILE, &lim);
                }
            }
            SigSet::all().thread_unblock().map_err(std::io::Error::from)
        });
    }
    match cmd.spawn() {
        Ok(c) => Ok(Pid::from_raw(c.id() as i32)),
        Err(e) => {
            say(&format!("cannot run {}: {e}", program.to_string_lossy()));
            Err(if e.kind() == std::io::ErrorKind::NotFound {
                agentsh_proto::exit::NOT_FOUND
            } else {
                agentsh_proto::exit::REFUSED
            })
        }
    }
}

/// Passes signals to `child` and reaps orphans until it exits; returns
/// its exit code (128+N for signal N), or 1 when the server died.
fn keep(child: Pid, server: u32, handled: &SigSet) -> i32 {
    loop {
        let sig = match handled.wait() {
            Ok(s) => s,
            Err(e) => {
                say(&format!("sigwait failed: {e}"));
                continue;
            }
        };
        if sig != Signal::SIGCHLD {
            if std::os::unix::process::parent_id() != server {
                say("the agentsh server died: stopping every process of the command");
                kill_everything_below();
                return 1;
            }
            let _ = kill(child, sig);
            continue;
        }
        // Reap every child that has exited: the command, and orphans.
        loop {
            match waitpid(None, Some(WaitPidFlag::WNOHANG)) {
                Ok(WaitStatus::Exited(pid, code)) if pid == child => return code,
                Ok(WaitStatus::Signaled(pid, s, _)) if pid == child => return 128 + s as i32,
                Ok(WaitStatus::StillAlive) | Err(_) => break,
                Ok(_) => {}
            }
        }
    }
}

/// SIGKILLs every descendant of this process, round after round, until none
/// is left (a process being killed forks no more; orphans come back to us).
fn kill_everything_below() {
    let me = std::process::id();
    for _ in 0..64 {
        let below = descendants(me);
        if below.is_empty() {
            break;
        }
        for pid in below {
            // SAFETY: kill takes integers.
            unsafe { libc::kill(pid as i32, libc::SIGKILL) };
        }
        while let Ok(st) = waitpid(None, Some(WaitPidFlag::WNOHANG)) {
            if st == WaitStatus::StillAlive {
                break;
            }
        }
    }
}

/// Every process whose chain of parents leads to `root`.
fn descendants(root: u32) -> Vec<u32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let parents: Vec<(u32, u32)> = dir
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter_map(|pid| Some((pid, crate::tracee::proc_stat(pid).ok()?.ppid)))
        .collect();
    let mut out = vec![root];
    let mut i = 0;
    while i < out.len() {
        let p = out[i];
        out.extend(parents.iter().filter(|(_, pp)| *pp == p).map(|(c, _)| *c));
        i += 1;
    }
    out.remove(0);
    out
}
