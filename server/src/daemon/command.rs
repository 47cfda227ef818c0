//! The command the server runs below itself (`agentsh server -- CMD`;
//! `agentsh entrypoint` uses it).
//!
//! The command runs below `agentsh reaper` (see `reaper`), started once
//! the API is up and the server is ready (see `readiness`). When it exits the server exits
//! with its status; a stop signal from outside every tree is passed to it
//! instead of stopping the server at once. An optional report fd (from
//! `agentsh entrypoint`) gets one line per event: `started <pid>` (the
//! reaper), `unable <reason>`, `exit <code>`.
//!
//! Failure modes: a command that cannot be started ends the server with
//! status 127 or 126, reported; a report fd that cannot be written is
//! logged and otherwise ignored (the exit status still says it).

use std::ffi::OsString;
use std::io::Write;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

/// The reaper's pid while the command runs (0: none), for the stop signals.
static RUNNING: AtomicU32 = AtomicU32::new(0);

/// The command's process (the reaper) while it runs.
pub fn running() -> Option<u32> {
    match RUNNING.load(Ordering::Relaxed) {
        0 => None,
        pid => Some(pid),
    }
}

/// Where the entrypoint reads what happened.
#[derive(Clone)]
pub struct Report(Option<Arc<Mutex<std::fs::File>>>);

impl Report {
    /// Takes fd `fd` (given by `agentsh entrypoint`), if any.
    pub fn from_fd(fd: Option<i32>) -> Report {
        Report(fd.filter(|&f| f > 2).map(|f| {
            // SAFETY: the entrypoint passed us this fd to own; nothing else in
            // this process uses its number.
            let owned = unsafe { OwnedFd::from_raw_fd(f) };
            // Not inherited by the command.
            // SAFETY: fcntl on the fd we now own.
            unsafe { libc::fcntl(f, libc::F_SETFD, libc::FD_CLOEXEC) };
            Arc::new(Mutex::new(std::fs::File::from(owned)))
        }))
    }

    pub fn line(&self, text: &str) {
        if let Some(f) = &self.0 {
            let mut f = f.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            let one = text.replace('\n', " ");
            if let Err(e) = writeln!(f, "{one}") {
                tracing::warn!("cannot write to the entrypoint's report fd: {e}");
            }
        }
    }
}

/// What to run below the server.
pub struct Spawn {
    pub command: Vec<OsString>,
    /// The soft open-file limit the server started with (the server raises
    /// its own; the command gets the usual one back).
    pub nofile_soft: Option<u64>,
    /// The process group the command joins (`agentsh wrap`).
    pub pgid: Option<i32>,
    /// The command's stdin, stdout and stderr when not the server's.
    pub stdio: Option<[OwnedFd; 3]>,
}

/// Takes fds `first`, `first + 1`, `first + 2` (given by `agentsh wrap`) as
/// the command's stdio; not inherited by anything else the server starts.
pub fn take_stdio(first: Option<i32>) -> Option<[OwnedFd; 3]> {
    let first = first.filter(|&f| f > 2)?;
    let take = |f: i32| {
        // SAFETY: wrap passed us these fds to own; nothing else in this
        // process uses their numbers.
        unsafe { libc::fcntl(f, libc::F_SETFD, libc::FD_CLOEXEC) };
        // SAFETY: as above.
        unsafe { OwnedFd::from_raw_fd(f) }
    };
    Some([take(first), take(first + 1), take(first + 2)])
}

/// Starts the command below the reaper, on a thread that waits for it and
/// then ends the server with its status (`on_exit` removes what the server
/// must not leave behind first).
pub fn start(spawn: Spawn, report: Report, on_exit: impl FnOnce() + Send + 'static) {
    let thread = std::thread::Builder::new()
        .name("agentsh-command".into())
        .spawn(move || {
            let code = run_below_reaper(&spawn, &report);
            report.line(&format!("exit {code}"));
            tracing::info!(code, "the command ended: stopping the server");
            on_exit();
            std::process::exit(code);
        });
    if let Err(e) = thread {
        tracing::error!("cannot start the command's thread: {e}");
    }
}

fn run_below_reaper(spawn: &Spawn, report: &Report) -> i32 {
    let exe = match std::env::current_exe() {
        Ok(e) => e,
        Err(e) => {
            tracing::error!("cannot find the agentsh binary to start the command: {e}");
            return agentsh_proto::exit::REFUSED;
        }
    };
    let mut cmd = std::process::Command::new(exe);
    cmd.arg("reaper")
        .arg("--server")
        .arg(std::process::id().to_string());
    if let Some(n) = spawn.nofile_soft {
        cmd.arg("--nofile-soft").arg(n.to_string());
    }
    if let Some(g) = spawn.pgid {
        cmd.arg("--join-pgid").arg(g.to_string());
    }
    // The reaper tells the command's pid through a pipe; both are then
    // protected from every tree's signals (their death ends the sandbox).
    let told = tell_fd_for(&mut cmd);
    cmd.arg("--").args(&spawn.command);
    if let Some([i, o, e]) = &spawn.stdio {
        let copy = |f: &OwnedFd| f.try_clone().map(std::process::Stdio::from);
        match (copy(i), copy(o), copy(e)) {
            (Ok(i), Ok(o), Ok(e)) => {
                cmd.stdin(i).stdout(o).stderr(e);
            }
            _ => {
                tracing::error!(
                    "cannot hand the command its terminal: {}",
                    std::io::Error::last_os_error()
                );
                return agentsh_proto::exit::REFUSED;
            }
        }
    }
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => {
            tracing::error!("cannot start the command: {e}");
            return agentsh_proto::exit::REFUSED;
        }
    };
    let reaper = child.id();
    crate::filter::keep(reaper);
    RUNNING.store(reaper, Ordering::Relaxed);
    report.line(&format!("started {reaper}"));
    tracing::info!(pid = reaper, command = ?spawn.command, "command started below the server");
    let command_pid = told.and_then(|(r, w)| {
        drop(w);
        read_told(r)
    });
    if let Some(pid) = command_pid {
        crate::filter::keep(pid);
        tracing::info!(pid, "the command's process: protected from trees' signals");
    }
    let st = child.wait();
    RUNNING.store(0, Ordering::Relaxed);
    crate::filter::unkeep(reaper);
    if let Some(pid) = command_pid {
        crate::filter::unkeep(pid);
    }
    use std::os::unix::process::ExitStatusExt;
    match st {
        Ok(s) => s
            .code()
            .or_else(|| s.signal().map(|n| 128 + n))
            .unwrap_or(1),
        Err(e) => {
            tracing::error!("cannot wait for the command: {e}");
            1
        }
    }
}

/// A pipe whose write end the reaper gets (`--tell-fd`), for the
/// command's pid; `None` (said): no pipe, the command is not protected.
fn tell_fd_for(cmd: &mut std::process::Command) -> Option<(OwnedFd, OwnedFd)> {
    match tell_pipe() {
        Ok((r, w)) => {
            let fd = w.as_raw_fd();
            cmd.arg("--tell-fd").arg(fd.to_string());
            // SAFETY: between fork and exec the closure only calls fcntl
            // (async-signal-safe) on an fd this process owns.
            unsafe {
                cmd.pre_exec(move || {
                    libc::fcntl(fd, libc::F_SETFD, 0);
                    Ok(())
                });
            }
            Some((r, w))
        }
        Err(e) => {
            tracing::warn!(
                "no pipe to learn the command's pid ({e}): trees may signal the command"
            );
            None
        }
    }
}

/// A pipe whose ends are close-on-exec (the write end is made inheritable
/// for the reaper alone, in its `pre_exec`).
fn tell_pipe() -> std::io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0; 2];
    // SAFETY: pipe2 writes two fds into our array.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: two fresh fds nothing else owns.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// The command's pid as the reaper told it (`None`: it could not start it,
/// or said nothing readable; logged).
fn read_told(r: OwnedFd) -> Option<u32> {
    use std::io::Read;
    let mut line = String::new();
    if let Err(e) = std::fs::File::from(r).read_to_string(&mut line) {
        tracing::warn!("cannot read the command's pid from the reaper: {e}");
        return None;
    }
    let pid = line.trim().parse().ok();
    if pid.is_none() && !line.is_empty() {
        tracing::warn!(line = %line.trim(), "the reaper told no pid");
    }
    pid
}
