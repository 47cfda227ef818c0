//! The rehearsal shell: before a server says it is ready, it runs a shell
//! (`sh -c :`, [`SHELLS`] times) the whole way a sandbox's shell goes — a
//! process of its own (`agentsh rehearse`, the shim's code) calls wrap-init
//! on the API socket, takes unixwrap's steps in place as the shim does
//! (the notify fd handed over, the Landlock ruleset built ahead by the
//! server), and the tree's supervisor judges its exec — so that the
//! first shell after `ready` finds that path already run (the server's code
//! paged in, its threads and allocations made) and costs what later shells
//! cost (issue 20: about 0.7-0.9 ms of a 7 ms shell before this).
//!
//! What keeps it from being a way around supervision: its session
//! ([`REHEARSAL_SESSION`]) cannot be made (config, API, `agentsh wrap`); a
//! wrap-init naming it is accepted only from the rehearsal's own process,
//! while it runs (other shells' wrap-inits wait for its end, a few
//! milliseconds, then are served); any other process naming it is refused
//! as by a server still starting while it runs, as for an unknown session
//! after. Its tree runs under the default session's rules (policy,
//! filter, Landlock); a decision that would wait (`approve`) or rewrite the
//! exec (`redirect`) is a refusal there, so no operator is ever asked about
//! it. Its events are made and serialized like any other but written
//! nowhere (no audit id is used up): they are the server's, not an agent's.
//!
//! Failure modes: a rehearsal shell that fails (no `/bin/sh`, a wrapper
//! that cannot run, a policy that refuses `sh`) or does not end within
//! [`DEADLINE`] (then killed) is logged, ends the rehearsal (no more of its
//! shells run) and changes nothing else: the server becomes ready all the
//! same, its first shell only slower. A server that cannot supervise shells
//! here (`Unable`) rehearses nothing. Each way a shell fails is a
//! `RehearsalError` variant.

use crate::api::Api;
use crate::readiness::Readiness;
use crate::session::Session;
use agentsh_proto::shimconf::{Mode, Server, ShimConf, REHEARSAL_SESSION};
use std::io::{BufRead, Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::Path;
use std::process::{Command, ExitCode, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long the rehearsal may take before it is killed.
pub const DEADLINE: Duration = Duration::from_secs(10);

/// How many shells are rehearsed, one after the other. One shell left the
/// first real shell about half of its extra: what is first used is not
/// only the server's code but the threads a shell happens to be served on
/// (the API's two workers, the blocking pool's threads, each with its own
/// allocator arena and stack); step 7 of `bench/run.sh`, alternating on a
/// quiet machine: first / later 1.17-1.21× with none, 1.11-1.18× with one,
/// 1.04-1.07× with three.
const SHELLS: usize = 3;

/// What the rehearsal's shell runs.
const SHELL: &str = "/bin/sh";

/// Why a rehearsal shell failed (logged; the server becomes ready all
/// the same).
#[derive(Debug, thiserror::Error)]
enum RehearsalError {
    #[error("cannot start `agentsh rehearse`: {0}")]
    Start(#[source] std::io::Error),
    #[error("cannot wait for it: {0}")]
    Wait(#[source] std::io::Error),
    #[error("its waiter failed: {0}")]
    Waiter(#[source] tokio::task::JoinError),
    #[error("did not end within {DEADLINE:?}; killed")]
    Deadline,
    /// It exited non-zero; what it said on stderr.
    #[error("exit status {code}: {said}")]
    Exit { code: i32, said: String },
    #[error("killed by signal {signal}: {said}")]
    Signal { signal: i32, said: String },
}

/// Readies the rehearsal, before the API is served: `/healthz` answers
/// 503 (starting) and other shells' wrap-inits wait until it is over.
/// `None`: nothing to rehearse (the server cannot supervise shells here).
pub fn prepare(api: &Api) -> Option<Arc<Session>> {
    if api.gate.get() != Readiness::Ready {
        return None;
    }
    let default = api.sessions.get(agentsh_proto::shimconf::DEFAULT_SESSION)?;
    api.gate.rehearsal.begin();
    api.gate.set(Readiness::Starting(
        "its rehearsal shell is running (a few milliseconds)".into(),
    ));
    Some(Arc::new(Session::unlisted(
        REHEARSAL_SESSION,
        default.setup(),
    )))
}

/// Runs the rehearsal [`prepare`] readied (the API being served), then
/// says the server is ready.
pub async fn run(api: &Arc<Api>, session: Option<Arc<Session>>) {
    let Some(session) = session else {
        return;
    };
    let started = Instant::now();
    // The first that fails ends the rehearsal.
    let outcome = async {
        for _ in 0..SHELLS {
            rehearse(api, session.clone()).await?;
        }
        Ok::<(), RehearsalError>(())
    }
    .await;
    api.gate.set(Readiness::Ready);
    api.gate.rehearsal.end();
    let ms = started.elapsed().as_millis() as u64;
    match outcome {
        Ok(()) => tracing::info!(
            ms,
            shells = SHELLS,
            "rehearsal shell ran (its events are not audited)"
        ),
        Err(e) => tracing::warn!(
            ms,
            "rehearsal shell: {e}; the server is ready, its first shell may be slower"
        ),
    }
}

async fn rehearse(api: &Arc<Api>, session: Arc<Session>) -> Result<(), RehearsalError> {
    let pids = Arc::new([AtomicU32::new(0), AtomicU32::new(0)]);
    let waited = tokio::task::spawn_blocking({
        let (api, pids) = (api.clone(), pids.clone());
        move || start_and_wait(&api, session, &pids)
    });
    let (status, said) = match tokio::time::timeout(DEADLINE, waited).await {
        Ok(Ok(r)) => r?,
        Ok(Err(e)) => return Err(RehearsalError::Waiter(e)),
        Err(_) => {
            // The shell's process (the wrapper's, then the shell's), then
            // `agentsh rehearse`, which reaps it (not reaped yet: the waiter
            // still waits for it).
            for pid in pids.iter().rev() {
                match pid.load(Ordering::SeqCst) {
                    0 => {}
                    // SAFETY: kill takes any pid.
                    p => unsafe {
                        libc::kill(p as libc::pid_t, libc::SIGKILL);
                    },
                }
            }
            return Err(RehearsalError::Deadline);
        }
    };
    match (libc::WIFEXITED(status), libc::WEXITSTATUS(status)) {
        (true, 0) => Ok(()),
        (true, code) => Err(RehearsalError::Exit { code, said }),
        _ => Err(RehearsalError::Signal {
            signal: libc::WTERMSIG(status),
            said,
        }),
    }
}

/// Starts `agentsh rehearse`, admits the process it starts the shell in,
/// lets it go and waits; the wait status and what it said on stderr.
///
/// The shell's process is not the server's child but `agentsh rehearse`'s:
/// under the ptrace backend the server's tracer thread traces it, and a
/// tracee whose parent is in the tracer's own process is reaped by the
/// tracer's wait (the parent never sees it end), while a wait for it from
/// another thread would take the tracer's stops. `agentsh rehearse` is
/// never traced, and waits for the shell's process as any parent does.
fn start_and_wait(
    api: &Api,
    session: Arc<Session>,
    pids: &[AtomicU32; 2],
) -> Result<(i32, String), RehearsalError> {
    let wrapper = api.config.wrapper_binary_path();
    let mut child = Command::new("/proc/self/exe")
        .arg0("agentsh")
        .arg("rehearse")
        .arg("--socket")
        .arg(&api.config.server.socket)
        .arg("--wrapper")
        .arg(&wrapper)
        .env_clear()
        .env(
            "PATH",
            "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        )
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(RehearsalError::Start)?;
    pids[0].store(child.id(), Ordering::SeqCst);
    // The shell's process: its pid, one line.
    let mut line = String::new();
    if let Some(out) = child.stdout.take() {
        let _ = std::io::BufReader::new(out).read_line(&mut line);
    }
    let shell: Option<u32> = line.trim().parse().ok();
    if let Some(pid) = shell {
        pids[1].store(pid, Ordering::SeqCst);
        api.gate.rehearsal.admit(pid, session);
        // Its wrap-init is taken only now that its pid is known.
        if let Some(mut go) = child.stdin.take() {
            let _ = go.write_all(b"g");
        }
    }
    drop(child.stdin.take());
    let status = child.wait().map_err(RehearsalError::Wait)?;
    // What it said, without waiting for a process that may keep the pipe.
    let mut said = String::new();
    if let Some(mut e) = child.stderr.take() {
        // SAFETY: F_SETFL on a pipe fd we own.
        unsafe { libc::fcntl(e.as_raw_fd(), libc::F_SETFL, libc::O_NONBLOCK) };
        let mut buf = [0u8; 4096];
        if let Ok(n) = e.read(&mut buf) {
            said = String::from_utf8_lossy(&buf[..n]).trim().to_string();
        }
    }
    Ok((status.into_raw(), said))
}

/// `agentsh rehearse` (internal): starts the shell's process, says its pid
/// on stdout and waits for it, exiting with its status (128+N for signal
/// N). That process waits for the server's go (one byte on stdin), then
/// starts `sh -c :` as the shim starts a shell, on the server at `socket`,
/// in the rehearsal session.
pub fn child(socket: &Path, wrapper: Option<String>) -> ExitCode {
    use nix::sys::wait::{waitpid, WaitStatus};
    use nix::unistd::{fork, ForkResult};
    // The server starts its children with every signal blocked.
    let _ = nix::sys::signal::SigSet::all().thread_unblock();
    // SAFETY: this process has one thread (nothing here started another).
    match unsafe { fork() } {
        Ok(ForkResult::Child) => std::process::exit(shell(socket, wrapper)),
        Ok(ForkResult::Parent { child }) => {
            let mut out = std::io::stdout();
            let _ = writeln!(out, "{child}").and_then(|()| out.flush());
            loop {
                match waitpid(child, None) {
                    Ok(WaitStatus::Exited(_, code)) => return ExitCode::from(code as u8),
                    Ok(WaitStatus::Signaled(_, sig, _)) => return ExitCode::from(128 + sig as u8),
                    Ok(_) | Err(nix::errno::Errno::EINTR) => {}
                    Err(e) => {
                        eprintln!("agentsh rehearse: cannot wait for the shell: {e}");
                        return ExitCode::from(2);
                    }
                }
            }
        }
        Err(e) => {
            eprintln!("agentsh rehearse: cannot fork: {e}");
            ExitCode::from(2)
        }
    }
}

/// The shell's process; its exit status when it could not become the shell.
fn shell(socket: &Path, wrapper: Option<String>) -> i32 {
    let mut go = [0u8; 1];
    if !matches!(std::io::stdin().read(&mut go), Ok(1)) {
        eprintln!("agentsh rehearse: no go from the server");
        return 2;
    }
    let conf = ShimConf {
        mode: Mode::On,
        server: Server::Unix(socket.to_path_buf()),
        session: REHEARSAL_SESSION.to_string(),
        wrapper,
        // SAFETY: getuid cannot fail. The server's socket is its user's.
        also_trusted_uid: Some(unsafe { libc::getuid() }),
    };
    let argv = [c"sh", c"-c", c":"];
    let target = agentsh_shell_shim::Target {
        real: SHELL,
        public: "sh",
        argv0: argv[0],
        argv: &argv,
    };
    // The way the shim goes: unixwrap's steps in this (single-threaded)
    // process, the ruleset built ahead by the server.
    match agentsh_shell_shim::supervise_in_place(&target, &conf, Mode::On) {
        agentsh_shell_shim::InPlaceEnd::NotInstalled(failure) => {
            eprintln!("supervision could not be installed: {failure}");
            agentsh_proto::exit::REFUSED
        }
        // unixwrap's steps refused (their hint is on stderr).
        agentsh_shell_shim::InPlaceEnd::Exit(code) => code,
    }
}
