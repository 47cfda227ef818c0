//! Whether the server is ready to supervise, and the command it runs below
//! itself (`agentsh server -- CMD`; `agentsh entrypoint` uses it).
//!
//! Ready means a shell the SDK's daemon starts can be supervised. That
//! depends on what the kernel lets the server read ([`Reach`], probed at
//! start by `detect`): every tree; only its descendants (no
//! `CAP_SYS_PTRACE` under Yama's `ptrace_scope` 1: Docker's defaults on
//! Ubuntu hosts) — then only a server that starts the daemon itself is
//! ready, and wrap-init refuses shells from elsewhere; or nothing. A server
//! that is not ready keeps serving, so `agentsh ready`, `agentsh detect`,
//! `/api/v1/status` and every refused shell say why.
//!
//! The command runs below `agentsh reaper` (see `reaper`), started once
//! the API is up and the server is ready. When it exits the server exits
//! with its status; a stop signal from outside every tree is passed to it
//! instead of stopping the server at once. An optional report fd (from
//! `agentsh entrypoint`) gets one line per event: `started <pid>` (the
//! reaper), `unable <reason>`, `exit <code>`.
//!
//! Failure modes: a command that cannot be started ends the server with
//! status 127 or 126, reported; a report fd that cannot be written is
//! logged and otherwise ignored (the exit status still says it).

use crate::detect::{reach_remedy, Reach};
use crate::session::Session;
use std::ffi::OsString;
use std::io::Write;
use std::os::fd::{FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock};

/// Whether shells can be supervised now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Readiness {
    /// Not yet: the reason (start-up work still running).
    Starting(String),
    Ready,
    /// Never, as things are: the reason and what to do.
    Unable(String),
}

/// The server's readiness, and the trees it may take.
#[derive(Debug)]
pub struct Gate {
    state: RwLock<Readiness>,
    /// Only shells descending from the server can be supervised.
    pub descendants_only: bool,
    /// The remedy to name when a shell is refused for not descending.
    pub remedy: String,
    /// The rehearsal shell's process while it runs (see `rehearsal`).
    pub rehearsal: Stage,
}

impl Gate {
    /// The gate for a server whose probes say `reach`; `has_command`: it
    /// starts the SDK's daemon itself (`agentsh server -- CMD`).
    pub fn new(reach: Reach, yama: Option<u32>, has_command: bool) -> Gate {
        let remedy = reach_remedy(reach, yama).unwrap_or_default();
        let state = match reach {
            Reach::Any => Readiness::Ready,
            Reach::Descendants if has_command => Readiness::Ready,
            Reach::Descendants | Reach::Nothing => Readiness::Unable(remedy.clone()),
        };
        Gate {
            state: RwLock::new(state),
            descendants_only: reach == Reach::Descendants,
            remedy,
            rehearsal: Default::default(),
        }
    }

    pub fn get(&self) -> Readiness {
        self.state
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// Moves a starting server on (start-up work done) or marks it unable.
    pub fn set(&self, r: Readiness) {
        let mut s = self
            .state
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        // Unable is final.
        if !matches!(*s, Readiness::Unable(_)) {
            *s = r;
        }
    }
}

/// The rehearsal shell (see `rehearsal`): whether it is under way, and its
/// process and the session its shell gets once started. Other shells'
/// wrap-inits wait for its end ([`Stage::over`]) rather than be refused.
pub struct Stage {
    admitted: Mutex<Option<(u32, Arc<Session>)>>,
    /// True from [`Stage::begin`] to [`Stage::end`].
    under_way: tokio::sync::watch::Sender<bool>,
}

impl Default for Stage {
    fn default() -> Stage {
        Stage {
            admitted: Mutex::new(None),
            under_way: tokio::sync::watch::Sender::new(false),
        }
    }
}

impl std::fmt::Debug for Stage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let pid = self.lock().as_ref().map(|(p, _)| *p);
        f.debug_tuple("Stage").field(&pid).finish()
    }
}

impl Stage {
    fn lock(&self) -> std::sync::MutexGuard<'_, Option<(u32, Arc<Session>)>> {
        self.admitted.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub fn begin(&self) {
        self.under_way.send_replace(true);
    }

    /// Process `pid` is the rehearsal's: its wrap-init gets `session`.
    pub fn admit(&self, pid: u32, session: Arc<Session>) {
        *self.lock() = Some((pid, session));
    }

    pub fn end(&self) {
        *self.lock() = None;
        self.under_way.send_replace(false);
    }

    /// Returns once no rehearsal is under way (at once if none is).
    pub async fn over(&self) {
        let mut rx = self.under_way.subscribe();
        let _ = rx.wait_for(|under_way| !*under_way).await;
    }

    /// The rehearsal's session, for a wrap-init from process `pid` naming
    /// it; `None` for any other process, or when no rehearsal runs.
    pub fn session_for(&self, pid: Option<u32>) -> Option<Arc<Session>> {
        match (&*self.lock(), pid) {
            (Some((p, s)), Some(pid)) if *p == pid => Some(s.clone()),
            _ => None,
        }
    }
}

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
    RUNNING.store(child.id(), Ordering::Relaxed);
    report.line(&format!("started {}", child.id()));
    tracing::info!(pid = child.id(), command = ?spawn.command, "command started below the server");
    let st = child.wait();
    RUNNING.store(0, Ordering::Relaxed);
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

/// Whether `pid` descends from this process (its chain of parents reaches
/// us). Unreadable or too long: no.
pub fn descends_from_us(pid: u32) -> bool {
    let me = std::process::id();
    let mut p = pid;
    for _ in 0..256 {
        if p == me {
            return true;
        }
        if p <= 1 {
            return false;
        }
        p = match crate::tracee::proc_stat(p) {
            Ok(s) => s.ppid,
            Err(_) => return false,
        };
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_wrap_init_waits_for_the_rehearsal_to_end_and_only_then() {
        let stage = Arc::new(Stage::default());
        // None under way: at once.
        tokio::time::timeout(std::time::Duration::from_secs(5), stage.over())
            .await
            .expect("no rehearsal: no wait");
        stage.begin();
        let waiting = tokio::spawn({
            let stage = stage.clone();
            async move { stage.over().await }
        });
        // Still waiting after the runtime has run it as far as it goes.
        for _ in 0..100 {
            tokio::task::yield_now().await;
        }
        assert!(
            !waiting.is_finished(),
            "a wrap-init went on during the rehearsal"
        );
        assert!(stage.session_for(Some(1)).is_none());
        stage.end();
        tokio::time::timeout(std::time::Duration::from_secs(5), waiting)
            .await
            .expect("the end releases it")
            .expect("joins");
    }
}
