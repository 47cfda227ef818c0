//! Starting the server where there is no service manager: `agentsh ready`
//! (wait until a server is ready to supervise) and `agentsh entrypoint` (a
//! container's first process: start the server with the SDK's daemon as its
//! command, so the daemon and every shell it starts descend from the server,
//! see `daemon::command`).
//!
//! Failure modes: a server that cannot be started, or says it cannot
//! supervise shells here, ends the entrypoint with 1 (`agentsh wrap`'s: 126)
//! and the reason on stderr, the command never run; a server that dies later
//! is started again with its command (wrap's is not: the command was stopped
//! with it, 126).

use crate::cli::client::{Client, ClientError};
use crate::config::ConfigError;
use std::ffi::OsString;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
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

/// Why `agentsh ready` did not see a ready server.
#[derive(Debug, thiserror::Error)]
pub enum ReadyError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(transparent)]
    Client(#[from] ClientError),
    /// The server says it cannot supervise shells here: its reason.
    #[error("{0}")]
    Unable(String),
    /// The server answers, but a shell started here is not supervised.
    #[error("the agentsh server is up, but {0}")]
    Shell(String),
    #[error(
        "the agentsh server at {server} did not answer /healthz as ready within {secs}s (last \
         answer: {last})"
    )]
    Timeout {
        server: String,
        secs: f32,
        last: String,
    },
}

/// Why the entrypoint's command never ran.
#[derive(Debug, thiserror::Error)]
pub enum LaunchError {
    #[error("no command given: agentsh entrypoint [OPTIONS] -- CMD [ARGS...]")]
    NoCommand,
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error("cannot block signals: {0}")]
    BlockSignals(#[source] nix::Error),
    #[error("cannot find the agentsh binary: {0}")]
    Exe(#[source] std::io::Error),
    #[error("cannot create a pipe: {0}")]
    Pipe(#[source] std::io::Error),
    #[error("cannot copy an fd: {0}")]
    CopyFd(#[source] std::io::Error),
    #[error("cannot open the server's log {}: {source}", log.display())]
    Log {
        log: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot open /dev/null: {0}")]
    DevNull(#[source] std::io::Error),
    #[error("cannot start `agentsh server`: {0}")]
    Spawn(#[source] std::io::Error),
    /// The server says it cannot supervise shells here: its reason.
    #[error("agentsh cannot supervise shells here: {0}")]
    Unable(String),
    #[error("`agentsh server` exited during start-up ({0}); its log is above")]
    ExitedEarly(std::process::ExitStatus),
    #[error("`agentsh server` did not start the command within {0}s")]
    NotStarted(f32),
    /// wrap's server logs to a file: its last word (or what failed here),
    /// and where the log is.
    #[error("{reason} (the server's log: {})", log.display())]
    WrapServer { reason: String, log: PathBuf },
}

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
        Err(e) => Err(NotReady::Yet(e.to_string())),
    }
}

fn client(server: &str) -> Result<Client, ClientError> {
    Ok(Client::new(server, None)?.with_timeout(Duration::from_secs(2)))
}

/// How long `wait_ready` waits quietly before it says what it waits for.
const PROGRESS_AFTER: Duration = Duration::from_secs(2);

/// `agentsh ready`: waits until the server at `server` answers `/healthz`.
///
/// # Errors
/// A bad address, the server says it never will be, or the timeout.
pub fn wait_ready(server: &str, timeout: Duration) -> Result<(), ReadyError> {
    let client = client(server)?;
    let started = Instant::now();
    let deadline = started + timeout;
    let mut said = false;
    loop {
        match probe(&client) {
            Ok(()) => return Ok(()),
            Err(NotReady::Never(why)) => return Err(ReadyError::Unable(why)),
            // A wait of seconds says what it waits for, once (stderr).
            Err(NotReady::Yet(_)) if !said && started.elapsed() >= PROGRESS_AFTER => {
                said = true;
                eprintln!(
                    "agentsh: waiting for the agentsh server at {server} to be ready (up to {}s)",
                    timeout.as_secs_f32()
                );
            }
            Err(NotReady::Yet(last)) if Instant::now() >= deadline => {
                return Err(ReadyError::Timeout {
                    server: server.to_string(),
                    secs: timeout.as_secs_f32(),
                    last,
                })
            }
            Err(NotReady::Yet(_)) => std::thread::sleep(POLL),
        }
    }
}

/// The API (its Unix socket, as `unix:/path`) of the server a config file describes.
///
/// # Errors
/// The config cannot be read or is invalid.
pub fn server_url(config: Option<&Path>) -> Result<String, ConfigError> {
    let c = crate::config::Config::load(config)?;
    Ok(format!("unix:{}", c.server.socket.display()))
}

/// What the entrypoint runs.
pub struct Entrypoint {
    pub config: Option<PathBuf>,
    pub ready_timeout: Duration,
    pub command: Vec<OsString>,
    /// `agentsh wrap`'s own server (`None`: a container's entrypoint).
    pub wrap: Option<WrapServer>,
}

/// How `agentsh wrap` runs its server differently from a container's
/// entrypoint: in a process group of its own (the terminal's ^C and ^Z are
/// the command's, which joins the group the terminal gave wrap), its log
/// in a file (the terminal is the agent's), never started again (a tree
/// whose supervisor died ends with it: exit 126).
pub struct WrapServer {
    pub session: String,
    pub log: PathBuf,
    /// wrap's process group, which the command joins.
    pub pgid: i32,
}

fn say(msg: &str) {
    // The entrypoint's own diagnostics go to its stderr: the container log,
    // not a supervised command's output.
    eprintln!("agentsh entrypoint: {msg}");
}

/// `say`, under wrap's name when it is wrap's server.
fn say_as(wrap: bool, msg: &str) {
    if wrap {
        eprintln!("agentsh wrap: {msg}");
    } else {
        say(msg);
    }
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

/// The server gets the report pipe's write end as this fd, blocking.
const REPORT_FD: i32 = 3;

/// Starts `agentsh server [--config C] --report-fd N -- CMD`.
fn start_server(
    config: Option<&Path>,
    command: &[OsString],
    wrap: Option<&WrapServer>,
) -> Result<Started, LaunchError> {
    let exe = std::env::current_exe().map_err(LaunchError::Exe)?;
    let (read_end, write_end) = report_pipe()?;
    let mut cmd = Command::new(exe);
    cmd.arg("server");
    if let Some(c) = config {
        cmd.arg("--config").arg(c);
    }
    cmd.arg("--report-fd").arg(REPORT_FD.to_string());
    let report_w = high(write_end.as_raw_fd())?;
    drop(write_end);
    let own = match wrap {
        Some(w) => Some(wrap_server_fds(&mut cmd, w)?),
        None => None,
    };
    cmd.arg("--").args(command);
    cmd.envs(crate::config::secrets::held_all());
    arm_server_child(&mut cmd, report_w.as_raw_fd(), own.as_ref());
    let server = cmd.spawn().map_err(LaunchError::Spawn)?;
    drop(report_w);
    drop(own);
    Ok(Started {
        server,
        report: std::fs::File::from(read_end),
        pending: String::new(),
        command_pid: None,
        exited: None,
    })
}

/// The pipe the server reports on: (read end, write end), both close-on-exec
/// and non-blocking.
fn report_pipe() -> Result<(OwnedFd, OwnedFd), LaunchError> {
    let mut fds = [0i32; 2];
    // SAFETY: pipe2 writes two fds into the array we own.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC | libc::O_NONBLOCK) } != 0 {
        return Err(LaunchError::Pipe(std::io::Error::last_os_error()));
    }
    // SAFETY: both fds were just created and are owned by nobody else.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// A copy of `fd` numbered 10 or above: every fd the server's child moves
/// is first put above the numbers it moves fds to (3..=6), so no move
/// overwrites another's source.
fn high(fd: i32) -> Result<OwnedFd, LaunchError> {
    // SAFETY: F_DUPFD_CLOEXEC makes a new fd we own.
    let n = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 10) };
    if n < 0 {
        return Err(LaunchError::CopyFd(std::io::Error::last_os_error()));
    }
    // SAFETY: just made, owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(n) })
}

/// wrap's server: its own stdin is /dev/null and its stdout and stderr
/// its log; the command's are wrap's (the terminal), handed over as fds
/// 4, 5, 6 (`--command-stdio 4`). Adds the arguments; returns the fds to
/// move: wrap's stdin, stdout, stderr, /dev/null, the log.
fn wrap_server_fds(cmd: &mut Command, w: &WrapServer) -> Result<[OwnedFd; 5], LaunchError> {
    cmd.arg("--session").arg(&w.session);
    cmd.arg("--command-pgid").arg(w.pgid.to_string());
    cmd.arg("--command-stdio").arg(COMMAND_STDIO.to_string());
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&w.log)
        .map_err(|source| LaunchError::Log {
            log: w.log.clone(),
            source,
        })?;
    let null = std::fs::File::open("/dev/null").map_err(LaunchError::DevNull)?;
    Ok([
        high(0)?,
        high(1)?,
        high(2)?,
        high(null.as_raw_fd())?,
        high(log.as_raw_fd())?,
    ])
}

/// What the server's child does before exec: the report pipe to
/// [`REPORT_FD`] (blocking), wrap's fds moved into place (`own`), out of the
/// terminal's foreground group for wrap, a death signal, signals unblocked.
fn arm_server_child(cmd: &mut Command, report_w: i32, own: Option<&[OwnedFd; 5]>) {
    use std::os::unix::process::CommandExt;
    let moves: Option<[i32; 5]> = own.map(|o| {
        [
            o[0].as_raw_fd(),
            o[1].as_raw_fd(),
            o[2].as_raw_fd(),
            o[3].as_raw_fd(),
            o[4].as_raw_fd(),
        ]
    });
    // SAFETY: between fork and exec the closure only calls dup2, fcntl, prctl,
    // setpgid and pthread_sigmask (async-signal-safe) and allocates nothing.
    unsafe {
        cmd.pre_exec(move || {
            let mv = |from: i32, to: i32| {
                if libc::dup2(from, to) < 0 {
                    Err(std::io::Error::last_os_error())
                } else {
                    Ok(())
                }
            };
            mv(report_w, REPORT_FD)?;
            let flags = libc::fcntl(REPORT_FD, libc::F_GETFL);
            libc::fcntl(REPORT_FD, libc::F_SETFL, flags & !libc::O_NONBLOCK);
            if let Some([stdin, stdout, stderr, null, log]) = moves {
                mv(stdin, COMMAND_STDIO)?;
                mv(stdout, COMMAND_STDIO + 1)?;
                mv(stderr, COMMAND_STDIO + 2)?;
                mv(null, 0)?;
                mv(log, 1)?;
                mv(log, 2)?;
                // wrap's server: out of the terminal's foreground group.
                if libc::setpgid(0, 0) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
            }
            // The server (and so the command) stops if the entrypoint dies.
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM, 0, 0, 0);
            SigSet::all().thread_unblock().map_err(std::io::Error::from)
        });
    }
}

/// Waits until the server has started the command, failing early if it
/// says it cannot supervise shells here or exits.
fn await_command(s: &mut Started, timeout: Duration) -> Result<(), LaunchError> {
    let deadline = Instant::now() + timeout;
    loop {
        let lines = s.lines();
        if let Some(why) = lines.iter().find_map(|l| match l {
            Line::Unable(why) => Some(why.clone()),
            _ => None,
        }) {
            return Err(LaunchError::Unable(why));
        }
        if lines
            .iter()
            .any(|l| matches!(l, Line::Started | Line::Exit))
        {
            // Ended at once: the exit is reported as the command's.
            return Ok(());
        }
        if let Ok(Some(st)) = s.server.try_wait() {
            return Err(LaunchError::ExitedEarly(st));
        }
        if Instant::now() >= deadline {
            return Err(LaunchError::NotStarted(timeout.as_secs_f32()));
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
/// the server is stopped.
fn launch(ep: &Entrypoint) -> Result<Started, LaunchError> {
    let mut s = start_server(ep.config.as_deref(), &ep.command, ep.wrap.as_ref())?;
    if let Err(e) = await_command(&mut s, ep.ready_timeout) {
        stop(&mut s.server);
        // wrap's server logs to a file: its last word is the reason.
        return Err(match &ep.wrap {
            Some(w) => {
                let last = std::fs::read_to_string(&w.log).ok().and_then(|t| {
                    t.lines()
                        .rev()
                        .find_map(|l| l.strip_prefix("agentsh: ").map(str::to_string))
                });
                LaunchError::WrapServer {
                    reason: last.unwrap_or_else(|| e.to_string()),
                    log: w.log.clone(),
                }
            }
            None => e,
        });
    }
    Ok(s)
}

/// Runs the entrypoint; returns the exit code of the command (or 1 when
/// the server cannot be started or cannot supervise shells here, 127/126
/// when the command cannot be).
pub fn run(ep: Entrypoint) -> i32 {
    match run_or_unable(ep) {
        Ok(code) => code,
        Err(Unable { code, why }) => {
            say(&why.to_string());
            code
        }
    }
}

/// The command never ran: its server could not be started or could not
/// supervise (`why`); `code` is the entrypoint's exit status for it.
pub struct Unable {
    pub code: i32,
    pub why: LaunchError,
}

/// [`run`], with a failure to start the command returned rather than said
/// (`agentsh wrap` decides what comes of it).
///
/// # Errors
/// The server could not be started, or says it cannot supervise here.
pub fn run_or_unable(ep: Entrypoint) -> Result<i32, Unable> {
    // wrap: the command never ran, so the exit is 126 (supervision could not
    // be installed), as the interface says.
    let failed = if ep.wrap.is_some() {
        agentsh_proto::exit::REFUSED
    } else {
        1
    };
    if ep.command.is_empty() {
        return Err(Unable {
            code: 2,
            why: LaunchError::NoCommand,
        });
    }
    if let Err(e) = server_url(ep.config.as_deref()) {
        return Err(Unable {
            code: 1,
            why: e.into(),
        });
    }
    // `env:` secrets out of this process's environment (PID 1's, under
    // `agentsh entrypoint`: a root tree could read it, and the command
    // would inherit them), before any thread; each server started gets
    // them (issue 61).
    crate::config::take_for_config(ep.config.as_deref());
    // Block the signals handled below before any child or thread exists;
    // they are taken with sigwait.
    let handled = crate::daemon::reaper::block_forwarded().map_err(|e| Unable {
        code: 1,
        why: LaunchError::BlockSignals(e),
    })?;
    // The command's orphans, and the command's reaper if the server dies,
    // come to us (as they would to a container's init) to be reaped.
    // SAFETY: prctl with integer arguments.
    unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) };
    let cur = launch(&ep).map_err(|why| Unable { code: failed, why })?;
    Ok(Keeper { ep, handled, cur }.run())
}

/// The entrypoint once its server runs: passes signals on, reaps, and
/// starts a server that died again (not wrap's).
struct Keeper {
    ep: Entrypoint,
    /// The signals taken with sigwait (blocked).
    handled: SigSet,
    cur: Started,
}

impl Keeper {
    /// Until the command has exited; returns the entrypoint's exit code.
    fn run(mut self) -> i32 {
        let wrap = self.ep.wrap.is_some();
        loop {
            let (sig, from_terminal) = match wait_signal(&self.handled) {
                Ok(s) => s,
                Err(e) => {
                    say_as(wrap, &format!("sigwait failed: {e}"));
                    continue;
                }
            };
            if sig != Signal::SIGCHLD && wrap && from_terminal {
                // The terminal's ^C or ^\ went to its foreground group, the
                // command included: passing it on would deliver it twice.
                continue;
            }
            if sig != Signal::SIGCHLD {
                self.forward(sig);
                continue;
            }
            if let Some(code) = self.reap() {
                return code;
            }
        }
    }

    /// Forwards `sig` to the command (through its reaper); its exit ends
    /// the server, which ends the entrypoint.
    fn forward(&self, sig: Signal) {
        match self.cur.command_pid {
            Some(pid) => {
                let _ = kill(Pid::from_raw(pid), sig);
            }
            None => {
                let _ = kill(Pid::from_raw(self.cur.server.id() as i32), sig);
            }
        }
    }

    /// One SIGCHLD may stand for several exits: looks at each exited child
    /// without reaping it, then deals with it. `Some`: the exit code the
    /// entrypoint ends with.
    fn reap(&mut self) -> Option<i32> {
        while let Some(pid) = peek_exited() {
            if pid != self.cur.server.id() as i32 {
                // An orphan re-parented to us: reap it.
                let _ = waitpid(Pid::from_raw(pid), Some(WaitPidFlag::WNOHANG));
                continue;
            }
            if let Some(code) = self.server_exited() {
                return Some(code);
            }
        }
        None
    }

    /// The server has exited: with the command's status (the end), or
    /// died: wrap's ends with it, the entrypoint's is started again.
    fn server_exited(&mut self) -> Option<i32> {
        let st = self.cur.server.wait();
        self.cur.lines();
        if let Some(code) = self.cur.exited {
            return Some(code);
        }
        let st = st.map_or_else(|e| e.to_string(), |s| s.to_string());
        if let Some(w) = &self.ep.wrap {
            // Its tree's execs fail from now on (the filter's listener
            // is gone), and the reaper has stopped the command: say so,
            // never start an unsupervised second life.
            say_as(
                true,
                &format!(
                    "the supervisor (agentsh server) died ({st}): the command was stopped \
                     with it; see {}",
                    w.log.display()
                ),
            );
            return Some(agentsh_proto::exit::REFUSED);
        }
        say(&format!(
            "`agentsh server` exited ({st}); its command and every shell below it are \
             stopped with it (a new server can supervise only what it starts): starting \
             both again"
        ));
        std::thread::sleep(RESTART_PAUSE);
        match launch(&self.ep) {
            Ok(s) => {
                self.cur = s;
                None
            }
            Err(why) => {
                say(&why.to_string());
                Some(1)
            }
        }
    }
}

/// The next signal of `set` (blocked), and whether the kernel sent it on
/// behalf of a terminal (`SI_KERNEL`: ^C, ^\\, a hangup) rather than a
/// process (`kill`).
fn wait_signal(set: &SigSet) -> std::io::Result<(Signal, bool)> {
    loop {
        // SAFETY: zeroed siginfo_t is a valid out-parameter.
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        // SAFETY: a valid signal set and out-pointer.
        let n = unsafe { libc::sigwaitinfo(set.as_ref(), &mut info) };
        if n < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        let sig = Signal::try_from(n).map_err(std::io::Error::from)?;
        return Ok((sig, info.si_code == libc::SI_KERNEL));
    }
}

/// Where wrap's server finds the command's stdin (stdout, stderr: the next
/// two).
const COMMAND_STDIO: i32 = 4;

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
