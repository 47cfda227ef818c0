//! `agentsh server`: start-up and the long-running daemon.
//!
//! Start-up order matters: signals are blocked before any thread exists;
//! the config, policy, audit log and token are loaded (any failure stops the
//! server with a message); the run directory is checked; the API socket is
//! bound (only once the identity index, built on its own thread from the
//! moment the policy is loaded, is ready: the first exec must not wait for
//! it); the `active` marker is written only then (a server that cannot
//! serve must not make `auto` shims refuse); the unsupervised runs the root
//! shims recorded before agentsh started become audit events; then the API
//! is served until a stop signal from outside every tree.

pub mod command;
pub mod reaper;
pub mod rehearsal;
pub mod rundir;
pub mod signals;

use crate::api::{self, Api};
use crate::approval::{self, Approvals};
use crate::audit::AuditLog;
use crate::config::{Config, ConfigError, SharedLocation};
use crate::limits::Limits;
use crate::policy::landlock::SessionLandlock;
use crate::policy::{Policy, PolicyError};
use crate::readiness::{Gate, Readiness};
use crate::session::Sessions;
use crate::supervisor::SupervisorContext;
use crate::transport::SeqpacketListener;
use crate::trees::Trees;
use agentsh_proto::SeccompConfig;
use rundir::RunDirError;
use std::ffi::OsString;
use std::path::PathBuf;
use std::sync::Arc;

/// How `agentsh server` was started.
#[derive(Debug, Default)]
pub struct Start {
    pub config_file: Option<PathBuf>,
    /// `-- CMD ARGS`: run below the server once ready (see `command`).
    pub command: Vec<OsString>,
    /// Where `agentsh entrypoint` reads what became of the command.
    pub report_fd: Option<i32>,
    /// A session made at start besides `default` (`agentsh wrap --session`).
    pub session: Option<String>,
    /// The process group the command joins (`agentsh wrap`: the terminal's
    /// foreground group it was started in, which the server has left).
    pub command_pgid: Option<i32>,
    /// The command's stdin is this fd, its stdout and stderr the next two
    /// (`agentsh wrap`: its terminal; the server's own are its log).
    pub command_stdio: Option<i32>,
}

/// Errors from other modules whose error types are their own business (a
/// text today, a typed error tomorrow): kept as the source, said as is.
type Foreign = Box<dyn std::error::Error + Send + Sync>;

/// What stops the server at start, each saying what to fix.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("cannot block signals: {0}")]
    BlockSignals(#[source] nix::Error),
    #[error("config {}: {source}", path.display())]
    ConfigUnreadable {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(
        "config {} is owned by uid {uid}: only root (or the server's own user) may own the file \
         that decides what agentsh enforces; `chown root {}`",
        path.display(),
        path.display()
    )]
    ConfigOwner { path: PathBuf, uid: u32 },
    #[error(
        "config {} has mode {mode:o}: group or others could change what agentsh enforces; \
         `chmod go-w {}`",
        path.display(),
        path.display()
    )]
    ConfigMode { path: PathBuf, mode: u32 },
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(transparent)]
    OwnLocation(#[from] SharedLocation),
    #[error("cannot load policy {name:?}: {source}")]
    Policy {
        name: String,
        source: Box<PolicyError>,
    },
    #[error("sessions.{id}: cannot load policy {name:?}: {source}")]
    SessionPolicy {
        id: String,
        name: String,
        source: Box<PolicyError>,
    },
    #[error("cannot open audit log {}: {source} (set audit.jsonl in the config)", path.display())]
    Audit {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(transparent)]
    Otlp(#[from] crate::otlp::EndpointError),
    #[error(
        "cannot write the operator token under {}: {source} (state_dir must be writable by the \
         server)",
        dir.display()
    )]
    Token {
        dir: PathBuf,
        source: std::io::Error,
    },
    /// No exec backend works here (`detect::choose_backend`'s reason).
    #[error(transparent)]
    NoBackend(crate::detect::NoBackend),
    #[error(transparent)]
    RunDir(#[from] RunDirError),
    /// The policies' identity index could not be built.
    #[error("{0}")]
    Indexes(Foreign),
    #[error("the default session: {0}")]
    DefaultSession(Foreign),
    #[error("sessions.{id}: {source}")]
    ConfigSession { id: String, source: Foreign },
    #[error("sessions.{id}: {reason:?}")]
    ConfigSessionNotMade {
        id: String,
        reason: crate::session::NotMade,
    },
    #[error("cannot start the API runtime: {0}")]
    Runtime(#[source] std::io::Error),
    #[error("cannot listen on {} (server.socket): {source}", socket.display())]
    Listen {
        socket: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot listen on {addr} (server.http.addr): {source}")]
    ListenTcp {
        addr: String,
        source: std::io::Error,
    },
    #[error("the API stopped: {0}")]
    ApiStopped(#[source] tokio::task::JoinError),
}

type Result<T> = std::result::Result<T, StartError>;

/// Runs the server; returns only on a start-up error.
///
/// Start-up is one ordered sequence (signals blocked before any thread
/// exists, the run directory before the socket, the marker only after
/// binding): each line below is a stage, read top to bottom to check the
/// order.
///
/// # Errors
/// What could not be started, and why.
pub fn run(start: Start) -> Result<()> {
    let report = command::Report::from_fd(start.report_fd);
    let command_stdio = command::take_stdio(start.command_stdio);
    signals::block_all().map_err(StartError::BlockSignals)?;
    let nofile_soft = raise_fd_limit();
    let config_file = start.config_file;
    let config = load_config(config_file.as_deref())?;
    let policies = load_policies(&config)?;
    let policy = policies[0].clone();
    let audit = open_audit(&config)?;
    let policy_name = policy.name().to_string();
    let prepared = crate::supervisor::prepare(policies.clone());
    landlock_startup_report(&SessionLandlock::for_server(
        policy.clone(),
        &config,
        config_file.as_deref(),
    ));
    let token = write_token(&config)?;
    let detected = detect_host(&config, &policy);
    // Without CAP_SYS_PTRACE, a tree of another uid is read with its ids.
    crate::tracee::access::match_owners(!detected.cap_sys_ptrace);
    let gate = readiness_gate(&detected, !start.command.is_empty(), &report);
    let backend = choose_backend(&config, &detected)?;
    // A standalone `agentsh wrap`'s server (it makes the wrap's session):
    // its run directory is its user's alone.
    let private = start.session.is_some() && command_stdio.is_some();
    let run_dir = prepare_run_dir(&config, private)?;
    let trees = Arc::new(Trees::new());
    let approvals = Arc::new(Approvals::new(&config.execve, trees.clone()));
    let supervisor = supervisor_context(&config, &policies, &audit, &approvals);
    // Nothing answers (no `ready`, no tree) before the indexes exist.
    prepared.wait().map_err(|e| StartError::Indexes(e.into()))?;
    let maker = crate::session::Maker {
        config: config.clone(),
        config_file: config_file.clone(),
        backend,
    };
    let sessions = make_sessions(&maker, start.session.as_deref())?;
    for s in sessions.list() {
        warm_caches(&s.setup, &run_dir);
    }
    let serving = Serving {
        run_dir,
        private,
        policy_name,
        audit,
        command: command::Spawn {
            command: start.command,
            nofile_soft,
            pgid: start.command_pgid,
            stdio: command_stdio,
        },
        report,
        gate,
    };
    let api = Api {
        config,
        sessions,
        maker,
        audit: serving.audit.clone(),
        supervisor,
        approvals,
        seccomp_config: SeccompConfig::default(),
        trees,
        limits: Arc::new(Limits::default()),
        token,
        detected,
        gate: serving.gate.clone(),
    };
    api_runtime()?.block_on(serve(api, serving))
}

/// Checks (trusted owner and mode) and loads the config, and refuses
/// agentsh's own files in a directory anyone can write.
fn load_config(config_file: Option<&std::path::Path>) -> Result<Config> {
    if let Some(path) = config_file {
        trust_config(path)?;
    }
    let config = Config::load(config_file)?;
    config.check_own_locations(config_file)?;
    Ok(config)
}

/// Every session's policy, the default's first, loaded before anything
/// starts (the indexes and the rest are compiled later, once the backend
/// is known).
fn load_policies(config: &Config) -> Result<Vec<Arc<Policy>>> {
    let mut policies = vec![
        Policy::resolve(&config.policy, &config.policies_dir).map_err(|source| {
            StartError::Policy {
                name: config.policy.clone(),
                source: Box::new(source),
            }
        })?,
    ];
    for (id, s) in &config.sessions {
        if let Some(p) = &s.policy {
            policies.push(Policy::resolve(p, &config.policies_dir).map_err(|source| {
                StartError::SessionPolicy {
                    id: id.clone(),
                    name: p.clone(),
                    source: Box::new(source),
                }
            })?);
        }
    }
    Ok(policies.into_iter().map(Arc::new).collect())
}

/// The audit log, exporting to OTLP when the config says so.
fn open_audit(config: &Config) -> Result<Arc<AuditLog>> {
    let audit = AuditLog::open(&config.audit.jsonl, config.audit.memory_events_per_session)
        .map_err(|source| StartError::Audit {
            path: config.audit.jsonl.clone(),
            source,
        })?;
    let audit = Arc::new(audit);
    if let Some(exporter) = crate::otlp::Exporter::start(&config.audit.otlp.endpoint)? {
        audit.export_to(exporter);
    }
    Ok(audit)
}

/// Writes the operator token file (root-only) and returns the token.
fn write_token(config: &Config) -> Result<String> {
    let (token, token_path) =
        approval::create_token_file(&config.state_dir).map_err(|source| StartError::Token {
            dir: config.state_dir.clone(),
            source,
        })?;
    tracing::info!(token_file = %token_path.display(), "operator token written (root-only)");
    Ok(token)
}

/// Probes what this host offers (`agentsh detect`) and logs it, with what
/// that means for the policy's egress.
fn detect_host(config: &Config, policy: &Policy) -> crate::detect::Report {
    let detected = crate::detect::detect(config.landlock.cap(), config.execve.backend);
    tracing::info!(
        backend = %detected.backend,
        user_notif = detected.seccomp_user_notif.available,
        trace = detected.seccomp_trace_ptrace.available,
        landlock_abi = detected.landlock_abi,
        gvisor = detected.gvisor,
        "what this host offers agentsh (agentsh detect)"
    );
    for p in &detected.protections {
        tracing::info!("{p}");
    }
    if let Some(e) = policy.egress() {
        log_egress_enforcement(e.allows_everything(), &detected, config.egress.compat);
    }
    detected
}

/// Says, once, how the policy's egress is enforced on this host: whether
/// the supervisor can take a tree's sockets (`pidfd_getfd`), and if not,
/// what `egress.compat` makes of what it cannot judge.
fn log_egress_enforcement(
    allows_everything: bool,
    detected: &crate::detect::Report,
    compat: crate::config::EgressCompat,
) {
    let refused = || {
        detected
            .pidfd_getfd
            .detail
            .as_deref()
            .unwrap_or("pidfd_getfd is refused")
    };
    if !detected.pidfd_getfd.available && allows_everything {
        tracing::info!(
            "egress: pidfd_getfd is refused here, and the policy allows every destination: \
             connects and sends run as made, each destination audited from the caller's \
             memory"
        );
    } else if detected.pidfd_getfd.available {
        tracing::info!(
            "egress: every destination a tree names is judged and the call made for it (the \
             supervisor takes the tree's socket with pidfd_getfd)"
        );
    } else if compat == crate::config::EgressCompat::AllowUnjudged {
        tracing::warn!(
            "egress NOT ENFORCED where it cannot be judged: {} here, so the supervisor \
             cannot take a tree's sockets, and egress.compat is allow_unjudged: what it \
             cannot judge (every connect and send under the ptrace backend; a send naming a \
             destination under notify) runs as the tree made it, audited with rule \
             allow_unjudged",
            refused()
        );
    } else {
        tracing::warn!(
            "egress: {} here, so the supervisor cannot take a tree's sockets: every connect \
             and send the policy's egress judges is refused (EACCES, audited \
             egress_unenforceable). Give the container CAP_SYS_PTRACE (Docker's default \
             seccomp profile refuses pidfd_getfd without it), or set egress.compat: \
             allow_unjudged to run them unjudged",
            refused()
        );
    }
}

/// Which shells can be supervised as things are; when none can, said in
/// the log and to `agentsh entrypoint` (the server still runs and says
/// why at `/healthz`).
fn readiness_gate(
    detected: &crate::detect::Report,
    has_command: bool,
    report: &command::Report,
) -> Arc<Gate> {
    let gate = Arc::new(Gate::new(
        detected.tree_access.reach(),
        detected.yama_ptrace_scope,
        has_command,
    ));
    if let Readiness::Unable(why) = gate.get() {
        tracing::error!("not ready: no shell can be supervised: {why}");
        report.line(&format!("unable {why}"));
    }
    gate
}

/// The exec backend; fails closed at start: a server that can supervise no
/// exec serves none.
fn choose_backend(
    config: &Config,
    detected: &crate::detect::Report,
) -> Result<agentsh_proto::ExecBackend> {
    let backend = crate::detect::choose_backend(config.execve.backend, |k| detected.probe_of(k))
        .map_err(StartError::NoBackend)?;
    if detected.landlock_abi == 0 {
        tracing::warn!(
            "{} backend without Landlock: command rules are enforced; file and network rules and \
             the protection of agentsh's own files are NOT (see docs/security-model.md)",
            backend.name()
        );
    }
    Ok(backend)
}

/// Makes or checks the run directory, clears a stale socket, and makes the
/// fixed marker's directory (not a wrap's: the machine's shims are not its
/// business).
fn prepare_run_dir(config: &Config, private: bool) -> Result<PathBuf> {
    let run_dir = config.run_dir();
    rundir::prepare(&run_dir, private)?;
    rundir::clear_stale_socket(&config.server.socket)?;
    if !private {
        rundir::make_fixed_marker_dir();
    }
    Ok(run_dir)
}

/// What the supervisor of every tree shares; starts the DNS stub if a
/// policy wants it.
fn supervisor_context(
    config: &Config,
    policies: &[Arc<Policy>],
    audit: &Arc<AuditLog>,
    approvals: &Arc<Approvals>,
) -> Arc<SupervisorContext> {
    // One stub serves every session whose policy has `dns: stub` (each
    // query judged by the asking tree's session's policy); a session made
    // later that needs it starts it then.
    let dns = std::sync::OnceLock::new();
    if policies.iter().any(|p| p.wants_dns_stub()) {
        match crate::dns::start(config, audit) {
            Ok(stub) => {
                let _ = dns.set(stub);
            }
            // Fail closed without taking the server down: every DNS call of
            // a tree is then refused (rule dns_stub), and said so.
            Err(e) => tracing::error!(
                "egress dns stub: {e}: every DNS query of a supervised tree is refused (rule \
                 dns_stub); set egress.stub to a free IP:53"
            ),
        }
    }
    Arc::new(SupervisorContext {
        limits: config.execve.clone(),
        audit: audit.clone(),
        approvals: approvals.clone(),
        audit_on_failure: config.audit.on_failure,
        dns,
        egress_compat: config.egress.compat,
    })
}

/// The API's runtime: two workers, and a blocking pool whose threads stay.
fn api_runtime() -> Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("agentsh-api")
        // A wrap-init's blocking part runs on this pool: the thread a shell
        // after a quiet spell finds is one already made (issue 20).
        .thread_keep_alive(BLOCKING_KEEP_ALIVE)
        .enable_all()
        .build()
        .map_err(StartError::Runtime)
}

/// What serving needs besides the [`Api`] itself.
struct Serving {
    run_dir: PathBuf,
    /// A standalone `agentsh wrap`'s server.
    private: bool,
    policy_name: String,
    audit: Arc<AuditLog>,
    /// `-- CMD`, started once the server is ready (an empty command: none).
    command: command::Spawn,
    report: command::Report,
    gate: Arc<Gate>,
}

/// Binds, marks agentsh active, rehearses one shell, starts the command and
/// serves until stopped.
async fn serve(api: Api, s: Serving) -> Result<()> {
    let (unix, tcp) = listen(&api.config).await?;
    // The first wrap-init's threads, made now: a blocking-pool thread
    // and (its stack cached by libc when it ends) a tree's.
    let _ = tokio::task::spawn_blocking(warm_tree_thread).await;
    // Not a wrap's: the machine's shims are not its business.
    rundir::write_marker(&s.run_dir, !s.private)?;
    rundir::ingest_unsupervised(&s.run_dir, &s.audit);
    let config = api.config.clone();
    signals::spawn_waiter(
        api.trees.clone(),
        config.server.socket.clone(),
        s.audit.clone(),
    );
    let api = Arc::new(api);
    // One shell the whole way before `ready` (503 until it is over).
    let rehearsal = rehearsal::prepare(&api);
    if let Some(tcp) = tcp {
        tokio::spawn(api::serve_tcp(api.clone(), tcp));
    }
    let serving = tokio::spawn(api::serve_unix(api.clone(), unix));
    rehearsal::run(&api, rehearsal).await;
    if !s.command.command.is_empty() && s.gate.get() == Readiness::Ready {
        start_command(s.command, s.report, &config, &s.audit);
    }
    tracing::info!(
        socket = %config.server.socket.display(),
        tcp = %config.server.http.addr,
        policy = %s.policy_name,
        audit = %config.audit.jsonl.display(),
        wrapper = %config.wrapper_binary_path().display(),
        "agentsh server ready"
    );
    serving.await.map_err(StartError::ApiStopped)?;
    Ok(())
}

/// The API socket (open to every uid) and the optional TCP listener.
async fn listen(config: &Config) -> Result<(SeqpacketListener, Option<tokio::net::TcpListener>)> {
    let unix = SeqpacketListener::bind(&config.server.socket, 1024).map_err(|source| {
        StartError::Listen {
            socket: config.server.socket.clone(),
            source,
        }
    })?;
    rundir::open_socket_mode(&config.server.socket)?;
    let tcp = match config.server.http.addr.as_str() {
        "" => None,
        addr => Some(
            tokio::net::TcpListener::bind(addr)
                .await
                .map_err(|source| StartError::ListenTcp {
                    addr: addr.to_string(),
                    source,
                })?,
        ),
    };
    Ok((unix, tcp))
}

/// Starts `-- CMD` below the server; when it ends, the socket goes and the
/// export is flushed before the server exits with its status.
fn start_command(
    spawn: command::Spawn,
    report: command::Report,
    config: &Config,
    audit: &Arc<AuditLog>,
) {
    let socket = config.server.socket.clone();
    let audit = audit.clone();
    command::start(spawn, report, move || {
        let _ = std::fs::remove_file(&socket);
        audit.flush_export();
    });
}

/// Raises the soft open-file limit to the hard one: each supervised tree holds
/// its notify fd (plus short-lived /proc and pidfd descriptors) for its whole
/// life, so the usual soft limit of 1024 would cap the number of trees. If the
/// limit cannot be raised the server still runs; a tree that cannot be taken in
/// fails its wrap-init (closed), and this says why in advance.
/// Returns the soft limit it started with (what children get back).
fn raise_fd_limit() -> Option<u64> {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes one rlimit into the struct we own.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
        let e = std::io::Error::last_os_error();
        tracing::warn!("cannot read the open-file limit: {e}");
        return None;
    }
    if lim.rlim_cur >= lim.rlim_max {
        return Some(lim.rlim_cur);
    }
    let from = lim.rlim_cur;
    lim.rlim_cur = lim.rlim_max;
    // SAFETY: setrlimit reads the struct; raising soft up to hard needs no privilege.
    if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &lim) } != 0 {
        let e = std::io::Error::last_os_error();
        tracing::warn!(
            soft = from,
            hard = lim.rlim_max,
            "cannot raise the open-file limit: {e}"
        );
    } else {
        tracing::debug!(from, to = lim.rlim_max, "raised the open-file limit");
    }
    Some(from)
}

/// Computes before the server answers what a wrap-init would otherwise
/// compute on its way (the Landlock ruleset of root and of each login user
/// in `/etc/passwd`, the daemon sockets to hide), so the first shell after
/// `ready` costs what later ones cost (issue 20). A result is kept only
/// once what it was read from has settled (see `policy::stamp`): the
/// directories the server just made have not, so a second try follows that
/// long after the first (about 0.1 s, while the identity index builds on its
/// own thread). What is still not kept then is computed by the first
/// wrap-init that needs it, as it would have been.
fn warm_caches(setup: &crate::session::Setup, run_dir: &std::path::Path) {
    const TRIES: usize = 2;
    let (landlock, daemon_sockets) = (&setup.landlock, &setup.daemon_sockets);
    let started = std::time::Instant::now();
    let uids = login_uids();
    let mut tries = 0;
    let all_kept = loop {
        tries += 1;
        for &uid in &uids {
            if !landlock.is_cached(uid) {
                landlock.compile(uid);
            }
        }
        if !daemon_sockets.is_cached() {
            daemon_sockets.hidden(setup.policy.daemon_sockets(), run_dir.to_str());
        }
        let kept = daemon_sockets.is_cached() && uids.iter().all(|&u| landlock.is_cached(u));
        if kept || tries == TRIES {
            break kept;
        }
        std::thread::sleep(crate::policy::landlock::SETTLE);
    };
    tracing::debug!(
        ?uids,
        tries,
        all_kept,
        ms = started.elapsed().as_millis() as u64,
        "wrap-init caches warmed"
    );
}

/// `default` (the top-level policy and workspace), the config's
/// `sessions:`, and a standalone `agentsh wrap`'s session (the default's
/// rules under its own name).
fn make_sessions(maker: &crate::session::Maker, extra: Option<&str>) -> Result<Sessions> {
    use crate::session::Origin;
    let sessions = Sessions::default();
    let default = Arc::new(
        maker
            .make(maker.default_spec(), false)
            .map_err(|e| StartError::DefaultSession(e.into()))?,
    );
    let mut made: Vec<Arc<crate::session::Setup>> = vec![default.clone()];
    let _ = sessions.insert("default", Origin::Default, default.clone(), |_| false);
    for (id, section) in &maker.config.sessions {
        let spec = maker.config_spec(section);
        // Sessions made from one spec share its compiled rules.
        let setup =
            match made.iter().find(|m| m.spec == spec) {
                Some(m) => m.clone(),
                None => {
                    let m = Arc::new(maker.make(spec, true).map_err(|e| {
                        StartError::ConfigSession {
                            id: id.clone(),
                            source: e.into(),
                        }
                    })?);
                    made.push(m.clone());
                    m
                }
            };
        sessions
            .insert(id, Origin::Config, setup, |_| false)
            .map_err(|reason| StartError::ConfigSessionNotMade {
                id: id.clone(),
                reason,
            })?;
        tracing::info!(session = %id, "session made from the config");
    }
    if let Some(id) = extra {
        if sessions
            .insert(id, Origin::Api, default, |_| false)
            .is_err()
        {
            tracing::warn!("session {id:?} cannot be made (not a valid session id, the rehearsal shell's reserved id, or it exists)");
        }
    }
    Ok(sessions)
}

/// How long an idle thread of the API runtime's blocking pool is kept.
const BLOCKING_KEEP_ALIVE: std::time::Duration = std::time::Duration::from_secs(3600);

/// Starts and ends a thread as a tree's supervisor thread is started, so
/// the first tree's finds a stack ready (libc keeps those of ended threads).
fn warm_tree_thread() {
    let t = std::thread::Builder::new()
        .name("agentsh-tree".into())
        .spawn(|| std::hint::black_box([0u8; 64 * 1024])[0]);
    if let Ok(t) = t {
        let _ = t.join();
    }
}

/// Root, and each user of `/etc/passwd` with a uid from 1000 (how login
/// users are numbered) below `nobody`'s, as many as the ruleset cache keeps.
fn login_uids() -> Vec<u32> {
    let passwd = std::fs::read_to_string("/etc/passwd").unwrap_or_default();
    let mut uids = vec![0];
    for uid in passwd
        .lines()
        .filter_map(|l| l.split(':').nth(2)?.parse::<u32>().ok())
        .filter(|u| (1000..65534).contains(u))
    {
        if uids.len() < crate::policy::landlock::CACHED_UIDS && !uids.contains(&uid) {
            uids.push(uid);
        }
    }
    uids
}

/// Logs, once, what every tree's Landlock ruleset will hold (as for root).
fn landlock_startup_report(landlock: &SessionLandlock) {
    let c = landlock.compile(0);
    tracing::info!(
        compat = ?c.summary.compat,
        handled_fs = ?c.summary.handled_fs,
        fs_rules = c.summary.fs_rules,
        connect_ports = ?c.summary.tcp_connect_ports,
        bind_ports = ?c.summary.tcp_bind_ports,
        protected = ?landlock.protection().no_write,
        "landlock ruleset for supervised trees"
    );
    for w in &c.warnings {
        tracing::warn!("landlock: {w}");
    }
}

/// The config decides what is enforced, so the server runs only one no one
/// else could have changed, as the shim trusts only such a shim.conf:
/// owned by root (or by the server's own user) and writable by no group or
/// other.
///
/// # Errors
/// What is wrong with the file, and the command that fixes it.
fn trust_config(path: &std::path::Path) -> Result<()> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(path).map_err(|source| StartError::ConfigUnreadable {
        path: path.to_path_buf(),
        source,
    })?;
    // SAFETY: geteuid has no preconditions.
    let euid = unsafe { libc::geteuid() };
    if m.uid() != 0 && m.uid() != euid {
        return Err(StartError::ConfigOwner {
            path: path.to_path_buf(),
            uid: m.uid(),
        });
    }
    if m.mode() & 0o022 != 0 {
        return Err(StartError::ConfigMode {
            path: path.to_path_buf(),
            mode: m.mode() & 0o7777,
        });
    }
    Ok(())
}
