//! Starting the server where there is no service manager: `agentsh ready`
//! (wait until a server answers) and `agentsh entrypoint` (a container's
//! first process: start the server, wait until it is ready, then run the
//! SDK's daemon under it).

use crate::cli::client::Client;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, SigSet, Signal};
use nix::sys::wait::{waitpid, WaitPidFlag};
use nix::unistd::Pid;

/// How often readiness is polled.
const POLL: Duration = Duration::from_millis(25);
/// How long a stopping server gets after SIGTERM before SIGKILL.
const STOP_GRACE: Duration = Duration::from_secs(5);
/// Pause before a server that died is started again.
const RESTART_PAUSE: Duration = Duration::from_secs(1);

/// One readiness probe: `GET /healthz` answered 200.
pub fn probe(client: &Client) -> Result<(), String> {
    match client.call("GET", "/healthz", None, false)? {
        (200, _) => Ok(()),
        (status, _) => Err(format!("/healthz answered HTTP {status}")),
    }
}

fn client(server: &str) -> Result<Client, String> {
    Ok(Client::new(server, None)?.with_timeout(Duration::from_secs(2)))
}

/// `agentsh ready`: waits until the server at `server` answers `/healthz`.
pub fn wait_ready(server: &str, timeout: Duration) -> Result<(), String> {
    let client = client(server)?;
    let deadline = Instant::now() + timeout;
    loop {
        match probe(&client) {
            Ok(()) => return Ok(()),
            Err(e) if Instant::now() >= deadline => {
                return Err(format!(
                    "the agentsh server at {server} did not answer /healthz within {}s (last error: {e})",
                    timeout.as_secs_f32()
                ))
            }
            Err(_) => std::thread::sleep(POLL),
        }
    }
}

/// The API (its Unix socket, as `unix:/path`) of the server a config file describes.
pub fn server_url(config: Option<&Path>) -> Result<String, String> {
    let c = crate::config::Config::load(config).map_err(|e| e.to_string())?;
    Ok(format!("unix:{}", c.server.socket.display()))
}

/// What the entrypoint runs.
pub struct Entrypoint {
    pub config: Option<PathBuf>,
    pub ready_timeout: Duration,
    pub command: Vec<OsString>,
}

fn say(msg: &str) {
    // The entrypoint's own diagnostics go to its stderr: the container log,
    // not a supervised command's output.
    eprintln!("agentsh entrypoint: {msg}");
}

fn start_server(config: Option<&Path>) -> Result<Child, String> {
    let exe =
        std::env::current_exe().map_err(|e| format!("cannot find the agentsh binary: {e}"))?;
    let mut cmd = Command::new(exe);
    cmd.arg("server");
    if let Some(c) = config {
        cmd.arg("--config").arg(c);
    }
    cmd.stdin(Stdio::null());
    unblock_in_child(&mut cmd);
    cmd.spawn()
        .map_err(|e| format!("cannot start `agentsh server`: {e}"))
}

/// The entrypoint blocks the signals it handles; its children must not
/// inherit that.
fn unblock_in_child(cmd: &mut Command) {
    use std::os::unix::process::CommandExt;
    // SAFETY: the closure runs between fork and exec and only calls
    // pthread_sigmask (async-signal-safe), allocating nothing.
    unsafe {
        cmd.pre_exec(|| SigSet::all().thread_unblock().map_err(std::io::Error::from));
    }
}

/// Waits until the server answers, failing early if it exits.
fn await_server(server: &mut Child, url: &str, timeout: Duration) -> Result<(), String> {
    let client = client(url)?;
    let deadline = Instant::now() + timeout;
    loop {
        if let Ok(Some(st)) = server.try_wait() {
            return Err(format!(
                "`agentsh server` exited during start-up ({st}); its log is above"
            ));
        }
        match probe(&client) {
            Ok(()) => return Ok(()),
            Err(e) if Instant::now() >= deadline => {
                return Err(format!(
                    "`agentsh server` did not answer {url}/healthz within {}s (last error: {e})",
                    timeout.as_secs_f32()
                ))
            }
            Err(_) => std::thread::sleep(POLL),
        }
    }
}

fn stop(child: &mut Child) {
    let pid = Pid::from_raw(child.id() as i32);
    let _ = kill(pid, Signal::SIGTERM);
    let deadline = Instant::now() + STOP_GRACE;
    while Instant::now() < deadline {
        if let Ok(Some(_)) = child.try_wait() {
            return;
        }
        std::thread::sleep(POLL);
    }
    let _ = child.kill();
    let _ = child.wait();
}

fn code_of(st: ExitStatus) -> i32 {
    use std::os::unix::process::ExitStatusExt;
    st.code()
        .or_else(|| st.signal().map(|s| 128 + s))
        .unwrap_or(1)
}

/// Runs the entrypoint; returns the exit code of the command (or 1 when
/// the server cannot be started, 127/126 when the command cannot be).
///
/// Long because it owns two processes' lifetimes (the server and the
/// command) and every exit path must stop the server; one body keeps each
/// `stop` next to its return.
pub fn run(ep: Entrypoint) -> i32 {
    let Some((program, args)) = ep.command.split_first() else {
        say("no command given: agentsh entrypoint [OPTIONS] -- CMD [ARGS...]");
        return 2;
    };
    let url = match server_url(ep.config.as_deref()) {
        Ok(u) => u,
        Err(e) => {
            say(&e);
            return 1;
        }
    };
    // Block the signals handled below before any child or thread exists;
    // they are taken with sigwait.
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
    if let Err(e) = handled.thread_block() {
        say(&format!("cannot block signals: {e}"));
        return 1;
    }
    let mut server = match start_server(ep.config.as_deref()) {
        Ok(c) => c,
        Err(e) => {
            say(&e);
            return 1;
        }
    };
    if let Err(e) = await_server(&mut server, &url, ep.ready_timeout) {
        say(&e);
        stop(&mut server);
        return 1;
    }
    let mut cmd = Command::new(program);
    cmd.args(args);
    unblock_in_child(&mut cmd);
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => {
            say(&format!("cannot run {}: {e}", program.to_string_lossy()));
            stop(&mut server);
            return if e.kind() == std::io::ErrorKind::NotFound {
                agentsh_proto::exit::NOT_FOUND
            } else {
                agentsh_proto::exit::REFUSED
            };
        }
    };
    let child_pid = Pid::from_raw(child.id() as i32);
    loop {
        let sig = match handled.wait() {
            Ok(s) => s,
            Err(e) => {
                say(&format!("sigwait failed: {e}"));
                continue;
            }
        };
        if sig != Signal::SIGCHLD {
            // Forwarded to the command; its exit ends the entrypoint.
            let _ = kill(child_pid, sig);
            continue;
        }
        // One SIGCHLD may stand for several exits: look at each exited
        // child without reaping it, then deal with it.
        while let Some(pid) = peek_exited() {
            if pid == child.id() as i32 {
                let st = child.wait();
                stop(&mut server);
                return st.map_or(1, code_of);
            }
            if pid == server.id() as i32 {
                let st = server.wait();
                say(&format!(
                    "`agentsh server` exited ({}); supervised commands cannot run until it is \
                     back: starting it again",
                    st.map_or_else(|e| e.to_string(), |s| s.to_string())
                ));
                std::thread::sleep(RESTART_PAUSE);
                match start_server(ep.config.as_deref())
                    .and_then(|mut s| await_server(&mut s, &url, ep.ready_timeout).map(|()| s))
                {
                    Ok(s) => server = s,
                    Err(e) => {
                        say(&format!("{e}; stopping the command"));
                        let _ = kill(child_pid, Signal::SIGTERM);
                        let st = child.wait();
                        return st.map_or(1, code_of).max(1);
                    }
                }
                continue;
            }
            // An orphan re-parented to us (a container's first process
            // inherits them): reap it.
            let _ = waitpid(Pid::from_raw(pid), Some(WaitPidFlag::WNOHANG));
        }
    }
}

/// The pid of a child that has exited, left unreaped (`WNOWAIT`).
fn peek_exited() -> Option<i32> {
    // SAFETY: zeroed siginfo_t is a valid out-parameter for waitid.
    let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
    // SAFETY: waitid writes only into `info`.
    let r = unsafe {
        libc::waitid(
            libc::P_ALL,
            0,
            &mut info,
            libc::WEXITED | libc::WNOHANG | libc::WNOWAIT,
        )
    };
    // SAFETY: si_pid is set by waitid (0 when no child has exited).
    let pid = unsafe { info.si_pid() };
    (r == 0 && pid > 0).then_some(pid)
}
