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

use crate::api::{self, peer::Limits, transport::SeqpacketListener, Api};
use crate::approval::{self, Approvals};
use crate::audit::AuditLog;
use crate::config::Config;
use crate::policy::landlock::SessionLandlock;
use crate::policy::Policy;
use crate::session::Sessions;
use crate::supervisor::SupervisorContext;
use crate::trees::Trees;
use agentsh_proto::SeccompConfig;
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

/// Runs the server; returns only on a start-up error.
///
/// Long because start-up is one ordered sequence (signals blocked before any
/// thread exists, the run directory before the socket, the marker only after
/// binding), and reading it top to bottom is how one checks the order.
///
/// # Errors
/// What could not be started, and why.
pub fn run(start: Start) -> Result<(), String> {
    let Start {
        config_file,
        command,
        report_fd,
        session: extra_session,
        command_pgid,
        command_stdio,
    } = start;
    let report = command::Report::from_fd(report_fd);
    let command_stdio = command::take_stdio(command_stdio);
    signals::block_all()?;
    let nofile_soft = raise_fd_limit();
    if let Some(path) = config_file.as_deref() {
        trust_config(path)?;
    }
    let config = Config::load(config_file.as_deref()).map_err(|e| e.to_string())?;
    config.check_own_locations(config_file.as_deref())?;
    // Every session's policy loads before anything starts (the indexes
    // and the rest are compiled below, once the backend is known).
    let mut policies = vec![Policy::resolve(&config.policy, &config.policies_dir)
        .map_err(|e| format!("cannot load policy {:?}: {e}", config.policy))?];
    for (id, s) in &config.sessions {
        if let Some(p) = &s.policy {
            policies.push(
                Policy::resolve(p, &config.policies_dir)
                    .map_err(|e| format!("sessions.{id}: cannot load policy {p:?}: {e}"))?,
            );
        }
    }
    let policies: Vec<Arc<Policy>> = policies.into_iter().map(Arc::new).collect();
    let policy = policies[0].clone();
    let audit = AuditLog::open(&config.audit.jsonl, config.audit.memory_events_per_session)
        .map_err(|e| {
            format!(
                "cannot open audit log {}: {e} (set audit.jsonl in the config)",
                config.audit.jsonl.display()
            )
        })?;
    let audit = Arc::new(audit);
    if let Some(exporter) = crate::otlp::Exporter::start(&config.audit.otlp.endpoint)? {
        audit.export_to(exporter);
    }
    let policy_name = policy.name().to_string();
    let prepared = crate::supervisor::prepare(policies.clone());
    landlock_startup_report(&SessionLandlock::for_server(
        policy.clone(),
        &config,
        config_file.as_deref(),
    ));
    let (token, token_path) = approval::create_token_file(&config.state_dir).map_err(|e| {
        format!(
            "cannot write the operator token under {}: {e} (state_dir must be writable by the server)",
            config.state_dir.display()
        )
    })?;
    tracing::info!(token_file = %token_path.display(), "operator token written (root-only)");
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
        if !detected.pidfd_getfd.available && e.allows_everything() {
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
        } else if config.egress.compat == crate::config::EgressCompat::AllowUnjudged {
            tracing::warn!(
                "egress NOT ENFORCED where it cannot be judged: {} here, so the supervisor \
                 cannot take a tree's sockets, and egress.compat is allow_unjudged: what it \
                 cannot judge (every connect and send under the ptrace backend; a send naming a \
                 destination under notify) runs as the tree made it, audited with rule \
                 allow_unjudged",
                detected
                    .pidfd_getfd
                    .detail
                    .as_deref()
                    .unwrap_or("pidfd_getfd is refused")
            );
        } else {
            tracing::warn!(
                "egress: {} here, so the supervisor cannot take a tree's sockets: every connect \
                 and send the policy's egress judges is refused (EACCES, audited \
                 egress_unenforceable). Give the container CAP_SYS_PTRACE (Docker's default \
                 seccomp profile refuses pidfd_getfd without it), or set egress.compat: \
                 allow_unjudged to run them unjudged",
                detected
                    .pidfd_getfd
                    .detail
                    .as_deref()
                    .unwrap_or("pidfd_getfd is refused")
            );
        }
    }
    // Without CAP_SYS_PTRACE, a tree of another uid is read with its ids.
    crate::tracee::access::match_owners(!detected.cap_sys_ptrace);
    let gate = Arc::new(command::Gate::new(
        detected.tree_access.reach(),
        detected.yama_ptrace_scope,
        !command.is_empty(),
    ));
    if let command::Readiness::Unable(why) = gate.get() {
        tracing::error!("not ready: no shell can be supervised: {why}");
        report.line(&format!("unable {why}"));
    }
    // Fail closed at start: a server that can supervise no exec serves none.
    let backend = crate::detect::choose_backend(
        config.execve.backend,
        &detected.seccomp_user_notif,
        &detected.seccomp_trace_ptrace,
    )?;
    if backend == agentsh_proto::ExecBackend::Ptrace && detected.landlock_abi == 0 {
        tracing::warn!(
            "ptrace backend without Landlock: command rules are enforced; file and network \
             rules and the protection of agentsh's own files are NOT (see docs/security-model.md)"
        );
    }
    let run_dir = config.run_dir();
    // A standalone `agentsh wrap`'s server (it makes the wrap's session):
    // its run directory is its user's alone.
    let private = extra_session.is_some() && command_stdio.is_some();
    rundir::prepare(&run_dir, private)?;
    rundir::clear_stale_socket(&config.server.socket)?;
    if !private {
        rundir::make_fixed_marker_dir();
    }
    let trees = Arc::new(Trees::new());
    let approvals = Arc::new(Approvals::new(&config.execve, trees.clone()));
    // One stub serves every session whose policy has `dns: stub` (each
    // query judged by the asking tree's session's policy); a session made
    // later that needs it starts it then.
    let dns = std::sync::OnceLock::new();
    if policies.iter().any(|p| p.wants_dns_stub()) {
        match crate::dns::start(&config, &audit) {
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
    let supervisor = Arc::new(SupervisorContext {
        limits: config.execve.clone(),
        audit: audit.clone(),
        approvals: approvals.clone(),
        audit_on_failure: config.audit.on_failure,
        dns,
        egress_compat: config.egress.compat,
    });
    // Nothing answers (no `ready`, no tree) before the indexes exist.
    prepared.wait()?;
    let maker = crate::session::Maker {
        config: config.clone(),
        config_file: config_file.clone(),
        backend,
    };
    let sessions = make_sessions(&maker, extra_session.as_deref())?;
    for s in sessions.list() {
        warm_caches(&s.setup, &run_dir);
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("agentsh-api")
        // A wrap-init's blocking part runs on this pool: the thread a shell
        // after a quiet spell finds is one already made (issue 20).
        .thread_keep_alive(BLOCKING_KEEP_ALIVE)
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the API runtime: {e}"))?;
    runtime.block_on(async move {
        let unix = SeqpacketListener::bind(&config.server.socket, 1024).map_err(|e| {
            format!(
                "cannot listen on {} (server.socket): {e}",
                config.server.socket.display()
            )
        })?;
        rundir::open_socket_mode(&config.server.socket)?;
        let tcp = match config.server.http.addr.as_str() {
            "" => None,
            addr => Some(
                tokio::net::TcpListener::bind(addr)
                    .await
                    .map_err(|e| format!("cannot listen on {addr} (server.http.addr): {e}"))?,
            ),
        };
        // The first wrap-init's threads, made now: a blocking-pool thread
        // and (its stack cached by libc when it ends) a tree's.
        let _ = tokio::task::spawn_blocking(warm_tree_thread).await;
        // Not a wrap's: the machine's shims are not its business.
        rundir::write_marker(&run_dir, !private)?;
        rundir::ingest_unsupervised(&run_dir, &audit);
        signals::spawn_waiter(trees.clone(), config.server.socket.clone(), audit.clone());
        let api = Arc::new(Api {
            config: config.clone(),
            sessions,
            maker,
            audit: audit.clone(),
            supervisor,
            approvals,
            seccomp_config: SeccompConfig::default(),
            trees,
            limits: Arc::new(Limits::default()),
            token,
            detected,
            gate: gate.clone(),
        });
        // One shell the whole way before `ready` (503 until it is over).
        let rehearsal = rehearsal::prepare(&api);
        if let Some(tcp) = tcp {
            tokio::spawn(api::serve_tcp(api.clone(), tcp));
        }
        let serving = tokio::spawn(api::serve_unix(api.clone(), unix));
        rehearsal::run(&api, rehearsal).await;
        if !command.is_empty() && gate.get() == command::Readiness::Ready {
            let socket = config.server.socket.clone();
            let audit = audit.clone();
            command::start(
                command::Spawn {
                    command,
                    nofile_soft,
                    pgid: command_pgid,
                    stdio: command_stdio,
                },
                report,
                move || {
                    let _ = std::fs::remove_file(&socket);
                    audit.flush_export();
                },
            );
        }
        tracing::info!(
            socket = %config.server.socket.display(),
            tcp = %config.server.http.addr,
            policy = %policy_name,
            audit = %config.audit.jsonl.display(),
            wrapper = %config.wrapper_binary_path().display(),
            "agentsh server ready"
        );
        serving.await.map_err(|e| format!("the API stopped: {e}"))?;
        Ok(())
    })
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
fn make_sessions(maker: &crate::session::Maker, extra: Option<&str>) -> Result<Sessions, String> {
    use crate::session::Origin;
    let sessions = Sessions::default();
    let default = Arc::new(
        maker
            .make(maker.default_spec(), false)
            .map_err(|e| format!("the default session: {e}"))?,
    );
    let mut made: Vec<Arc<crate::session::Setup>> = vec![default.clone()];
    let _ = sessions.insert("default", Origin::Default, default.clone(), |_| false);
    for (id, section) in &maker.config.sessions {
        let spec = maker.config_spec(section);
        // Sessions made from one spec share its compiled rules.
        let setup = match made.iter().find(|m| m.spec == spec) {
            Some(m) => m.clone(),
            None => {
                let m = Arc::new(
                    maker
                        .make(spec, true)
                        .map_err(|e| format!("sessions.{id}: {e}"))?,
                );
                made.push(m.clone());
                m
            }
        };
        sessions
            .insert(id, Origin::Config, setup, |_| false)
            .map_err(|e| format!("sessions.{id}: {e:?}"))?;
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
fn trust_config(path: &std::path::Path) -> Result<(), String> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(path).map_err(|e| format!("config {}: {e}", path.display()))?;
    // SAFETY: geteuid has no preconditions.
    let euid = unsafe { libc::geteuid() };
    if m.uid() != 0 && m.uid() != euid {
        return Err(format!(
            "config {} is owned by uid {}: only root (or the server's own user) may own the file \
             that decides what agentsh enforces; `chown root {}`",
            path.display(),
            m.uid(),
            path.display()
        ));
    }
    if m.mode() & 0o022 != 0 {
        return Err(format!(
            "config {} has mode {:o}: group or others could change what agentsh enforces; \
             `chmod go-w {}`",
            path.display(),
            m.mode() & 0o7777,
            path.display()
        ));
    }
    Ok(())
}
