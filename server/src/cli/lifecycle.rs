//! Starting the server where there is no service manager: `agentsh ready`
//! (wait until a server is ready to supervise) and `agentsh entrypoint` (a
//! container's first process: start the server with the SDK's daemon as its
//! command, so the daemon and every shell it starts descend from the server,
//! see `daemon::command`).

use crate::cli::client::Client;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
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

/// Why a readiness probe failed.
pub enum NotReady {
    /// Worth waiting for (no answer yet, or still starting).
    Yet(String),
    /// Waiting will not help: the server says it cannot supervise shells here.
    Never(String),
}

/// One readiness probe: `GET /healthz` answered 200.
pub fn probe(client: &Client) -> Result<(), NotReady> {
    match client.call("GET", "/healthz", None, false) {
        Ok((200, _)) => Ok(()),
        Ok((status, body)) => {
            let why = body["error"].as_str().map_or_else(
                || format!("/healthz answered HTTP {status}"),
                str::to_string,
            );
            if body["permanent"].as_bool() == Some(true) {
                Err(NotReady::Never(why))
            } else {
                Err(NotReady::Yet(why))
            }
        }
        Err(e) => Err(NotReady::Yet(e)),
    }
}

fn client(server: &str) -> Result<Client, String> {
    Ok(Client::new(server, None)?.with_timeout(Duration::from_secs(2)))
}

/// How long `wait_ready` waits quietly before it says what it waits for.
const PROGRESS_AFTER: Duration = Duration::from_secs(2);

/// `agentsh ready`: waits until the server at `server` answers `/healthz`.
pub fn wait_ready(server: &str, timeout: Duration) -> Result<(), String> {
    let client = client(server)?;
    let started = Instant::now();
    let deadline = started + timeout;
    let mut said = false;
    loop {
        match probe(&client) {
            Ok(()) => return Ok(()),
            Err(NotReady::Never(why)) => return Err(why),
            // A wait of seconds says what it waits for, once (stderr).
            Err(NotReady::Yet(_)) if !said && started.elapsed() >= PROGRESS_AFTER => {
                said = true;
                eprintln!(
                    "agentsh: waiting for the agentsh server at {server} to be ready (up to {}s)",
                    timeout.as_secs_f32()
                );
            }
            Err(NotReady::Yet(e)) if Instant::now() >= deadline => {
                return Err(format!(
                    "the agentsh server at {server} did not answer /healthz as ready within {}s (last answer: {e})",
                    timeout.as_secs_f32()
                ))
            }
            Err(NotReady::Yet(_)) => std::thread::sleep(POLL),
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

/// A server started with the command, and the pipe it reports on.
struct Started {
    server: Child,
    report: std::fs::File,
    /// What has been read of the report and not yet taken as lines.
    pending: String,
    /// The command's process (the reaper), once the server said.
    command_pid: Option<i32>,
    /// The command's exit status, once the server said.
    exited: Option<i32>,
}

/// What the server reported.
enum Line {
    Started,
    Unable(String),
    Exit,
}

impl Started {
    /// The lines read so far, without blocking.
    fn lines(&mut self) -> Vec<Line> {
        use std::io::Read;
        let mut buf = [0u8; 4096];
        loop {
            match self.report.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => self.pending.push_str(&String::from_utf8_lossy(&buf[..n])),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(_) => break,
            }
        }
        let mut out = Vec::new();
        while let Some(i) = self.pending.find('\n') {
            let line: String = self.pending.drain(..=i).collect();
            let line = line.trim_end();
            let (word, rest) = line.split_once(' ').unwrap_or((line, ""));
            match word {
                "started" => {
                    if let Ok(pid) = rest.parse() {
                        self.command_pid = Some(pid);
                        out.push(Line::Started);
                    }
                }
                "unable" => out.push(Line::Unable(rest.to_string())),
                "exit" => {
                    if let Ok(code) = rest.parse() {
                        self.exited = Some(code);
                        out.push(Line::Exit);
                    }
                }
                _ => {}
            }
        }
        out
    }
}

/// Starts `agentsh server [--config C] --report-fd N -- CMD`.
fn start_server(config: Option<&Path>, command: &[OsString]) -> Result<Started, String> {
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
    use std::os::unix::process::CommandExt;
    let exe =
        std::env::current_exe().map_err(|e| format!("cannot find the agentsh binary: {e}"))?;
    let mut fds = [0i32; 2];
    // SAFETY: pipe2 writes two fds into the array we own.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC | libc::O_NONBLOCK) } != 0 {
        return Err(format!(
            "cannot create a pipe: {}",
            std::io::Error::last_os_error()
        ));
    }
    // SAFETY: both fds were just created and are owned by nobody else.
    let (read_end, write_end) =
        unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    // The server gets the write end as fd 3, blocking.
    const REPORT_FD: i32 = 3;
    let mut cmd = Command::new(exe);
    cmd.arg("server");
    if let Some(c) = config {
        cmd.arg("--config").arg(c);
    }
    cmd.arg("--report-fd").arg(REPORT_FD.to_string());
    cmd.arg("--").args(command);
    let w = write_end.as_raw_fd();
    // SAFETY: between fork and exec the closure only calls dup2, fcntl, prctl
    // and pthread_sigmask (async-signal-safe) and allocates nothing.
    unsafe {
        cmd.pre_exec(move || {
            if libc::dup2(w, REPORT_FD) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            let flags = libc::fcntl(REPORT_FD, libc::F_GETFL);
            libc::fcntl(REPORT_FD, libc::F_SETFL, flags & !libc::O_NONBLOCK);
            // The server (and so the command) stops if the entrypoint dies.
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM, 0, 0, 0);
            SigSet::all().thread_unblock().map_err(std::io::Error::from)
        });
    }
    let server = cmd
        .spawn()
        .map_err(|e| format!("cannot start `agentsh server`: {e}"))?;
    drop(write_end);
    Ok(Started {
        server,
        report: std::fs::File::from(read_end),
        pending: String::new(),
        command_pid: None,
        exited: None,
    })
}

/// Waits until the server has started the command, failing early if it
/// says it cannot supervise shells here or exits.
fn await_command(s: &mut Started, timeout: Duration) -> Result<(), String> {
    let deadline = Instant::now() + timeout;
    loop {
        let lines = s.lines();
        if let Some(why) = lines.iter().find_map(|l| match l {
            Line::Unable(why) => Some(why.clone()),
            _ => None,
        }) {
            return Err(format!("agentsh cannot supervise shells here: {why}"));
        }
        if lines
            .iter()
            .any(|l| matches!(l, Line::Started | Line::Exit))
        {
            // Ended at once: the exit is reported as the command's.
            return Ok(());
        }
        if let Ok(Some(st)) = s.server.try_wait() {
            return Err(format!(
                "`agentsh server` exited during start-up ({st}); its log is above"
            ));
        }
        if Instant::now() >= deadline {
            return Err(format!(
                "`agentsh server` did not start the command within {}s",
                timeout.as_secs_f32()
            ));
        }
        std::thread::sleep(POLL);
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

/// Starts the server with the command and waits for it to run; on failure
/// the server is stopped and the entrypoint's exit code returned.
fn launch(ep: &Entrypoint) -> Result<Started, i32> {
    let mut s = match start_server(ep.config.as_deref(), &ep.command) {
        Ok(s) => s,
        Err(e) => {
            say(&e);
            return Err(1);
        }
    };
    if let Err(e) = await_command(&mut s, ep.ready_timeout) {
        say(&e);
        stop(&mut s.server);
        return Err(1);
    }
    Ok(s)
}

/// Runs the entrypoint; returns the exit code of the command (or 1 when
/// the server cannot be started or cannot supervise shells here, 127/126
/// when the command cannot be).
///
/// Long because it owns the server's lifetime, and with it the command's:
/// every exit path must stop the server; one body keeps each `stop` next to
/// its return.
pub fn run(ep: Entrypoint) -> i32 {
    if ep.command.is_empty() {
        say("no command given: agentsh entrypoint [OPTIONS] -- CMD [ARGS...]");
        return 2;
    }
    if let Err(e) = server_url(ep.config.as_deref()) {
        say(&e);
        return 1;
    }
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
    // The command's orphans, and the command's reaper if the server dies,
    // come to us (as they would to a container's init) to be reaped.
    // SAFETY: prctl with integer arguments.
    unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) };
    let mut cur = match launch(&ep) {
        Ok(s) => s,
        Err(code) => return code,
    };
    loop {
        let sig = match handled.wait() {
            Ok(s) => s,
            Err(e) => {
                say(&format!("sigwait failed: {e}"));
                continue;
            }
        };
        if sig != Signal::SIGCHLD {
            // Forwarded to the command (through its reaper); its exit ends
            // the server, which ends the entrypoint.
            match cur.command_pid {
                Some(pid) => {
                    let _ = kill(Pid::from_raw(pid), sig);
                }
                None => {
                    let _ = kill(Pid::from_raw(cur.server.id() as i32), sig);
                }
            }
            continue;
        }
        // One SIGCHLD may stand for several exits: look at each exited
        // child without reaping it, then deal with it.
        while let Some(pid) = peek_exited() {
            if pid != cur.server.id() as i32 {
                // An orphan re-parented to us: reap it.
                let _ = waitpid(Pid::from_raw(pid), Some(WaitPidFlag::WNOHANG));
                continue;
            }
            let st = cur.server.wait();
            cur.lines();
            if let Some(code) = cur.exited {
                return code;
            }
            say(&format!(
                "`agentsh server` exited ({}); its command and every shell below it are \
                 stopped with it (a new server can supervise only what it starts): starting \
                 both again",
                st.map_or_else(|e| e.to_string(), |s| s.to_string())
            ));
            std::thread::sleep(RESTART_PAUSE);
            cur = match launch(&ep) {
                Ok(s) => s,
                Err(code) => return code.max(1),
            };
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
