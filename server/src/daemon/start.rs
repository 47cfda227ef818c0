//! `agentsh server`'s start-up: one ordered sequence, from the
//! [`Start`] the CLI hands over to the API being served.
//!
//! Start-up order matters: signals are blocked before any thread exists;
//! the config, policy, audit log and token are loaded (`load`; any failure
//! stops the server with a message); what the host offers is probed
//! (`host`); the run directory is checked; the sessions are made, their
//! caches warmed (`warm`); then `serve` binds, marks agentsh active and
//! serves.
//!
//! Failure modes: each stage's failure is a [`StartError`] naming what to
//! fix, and the server exits before it binds its socket; a stage that can
//! go on without what it could not do (the open-file limit, the DNS stub)
//! logs it and goes on.

use super::error::{Result, StartError};
use super::{command, host, load, rundir, serve, signals, warm};
use crate::api::Api;
use crate::approval::Approvals;
use crate::audit::AuditLog;
use crate::config::Config;
use crate::limits::Limits;
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
    own_limits();
    let config_file = start.config_file;
    let config = load::trusted_config(config_file.as_deref())?;
    let policies = load::policies(&config)?;
    let policy = policies[0].clone();
    let audit = load::audit_log(&config)?;
    let policy_name = policy.name().to_string();
    if config.workspace.is_empty() {
        tracing::info!(
            "workspace is not set: file rules naming ${{WORKSPACE}} grant nothing (set \
             `workspace` in the config to the agent's working tree)"
        );
    }
    let prepared = crate::supervisor::prepare(policies.clone());
    host::report_landlock(&SessionLandlock::for_server(
        policy.clone(),
        &config,
        config_file.as_deref(),
    ));
    let token = load::operator_token(&config)?;
    let detected = host::detect(&config, &policy);
    // Without CAP_SYS_PTRACE, a tree of another uid is read with its ids.
    crate::tracee::access::match_owners(!detected.cap_sys_ptrace);
    let backend = host::backend(&config, &detected)?;
    let gate = host::readiness_gate(&detected, !start.command.is_empty(), backend, &report);
    // A standalone `agentsh wrap`'s server (it makes the wrap's session):
    // its run directory is its user's alone.
    let private = start.session.is_some() && command_stdio.is_some();
    let run_dir = prepare_run_dir(&config, private)?;
    let trees = Arc::new(Trees::new());
    let approvals = Arc::new(Approvals::new(&config.execve, trees.clone()));
    let supervisor = supervisor_context(&config, &policies, &audit, &approvals, &gate);
    // Nothing answers (no `ready`, no tree) before the indexes exist.
    prepared.wait().map_err(|e| StartError::Indexes(e.into()))?;
    let maker = crate::session::Maker {
        config: config.clone(),
        config_file: config_file.clone(),
        backend,
    };
    let sessions = make_sessions(&maker, start.session.as_deref())?;
    let cgroups = warm_sessions(&sessions, &run_dir);
    let serving = serve::Serving {
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
        maker: std::sync::RwLock::new(Arc::new(maker)),
        load_config: config_loader(),
        audit: serving.audit.clone(),
        supervisor,
        approvals,
        seccomp_config: SeccompConfig::default(),
        trees,
        limits: Arc::new(Limits::default()),
        token,
        detected,
        gate: serving.gate.clone(),
        cgroups,
    };
    serve::api_runtime()?.block_on(serve::serve(api, serving))
}

/// Fills every session's caches; when one asks for limits, makes the
/// cgroup delegation now, so the log says at start (not at the first
/// shell) where limited trees' cgroups go, or why they will be refused.
fn warm_sessions(
    sessions: &crate::session::Sessions,
    run_dir: &std::path::Path,
) -> crate::cgroup::Cgroups {
    let cgroups = crate::cgroup::Cgroups::default();
    for s in sessions.list() {
        warm::caches(&s.setup(), run_dir);
        if s.setup().limits.any() {
            let _ = cgroups.delegation();
        }
    }
    cgroups
}

/// Makes or checks the run directory, clears a stale socket, and makes the
/// fixed marker's directory (not a wrap's: the machine's shims are not its
/// business).
fn prepare_run_dir(config: &Config, private: bool) -> Result<PathBuf> {
    let run_dir = config.run_dir();
    rundir::prepare(&run_dir, private)?;
    rundir::clear_stale_socket(&config.server.socket)?;
    if let Some(owner) = agentsh_proto::seqpacket::owner_socket(&config.server.socket) {
        rundir::clear_stale_socket(&owner)?;
    }
    if !private {
        rundir::make_fixed_marker_dir();
    }
    Ok(run_dir)
}

/// What the supervisor of every tree shares; starts the DNS stub if a
/// policy wants it (one that cannot serve makes the server not ready:
/// `agentsh ready` and /healthz say why).
fn supervisor_context(
    config: &Config,
    policies: &[Arc<Policy>],
    audit: &Arc<AuditLog>,
    approvals: &Arc<Approvals>,
    gate: &crate::readiness::Gate,
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
            // a tree is then refused (rule dns_stub), and said so; the
            // server is not ready.
            Err(e) => {
                tracing::error!(
                    "egress dns stub: {e}: every DNS query of a supervised tree is refused \
                     (rule dns_stub); set egress.stub to a free IP:53"
                );
                gate.set(crate::readiness::Readiness::Unable(format!(
                    "the DNS stub a policy needs cannot serve ({e}): every lookup of a tree \
                     would be refused; set egress.stub to an address free here"
                )));
            }
        }
    }
    let ctx = Arc::new(SupervisorContext {
        limits: config.execve.clone(),
        audit: audit.clone(),
        approvals: approvals.clone(),
        audit_on_failure: config.audit.on_failure,
        dns,
        egress_compat: config.egress.compat,
        proxy: Box::new(crate::proxy::ProxyCell::new(crate::proxy::ProxySetup::of(
            config,
        ))),
        host: Arc::new(crate::tracee::host::RealHost),
        stops: Arc::new(crate::supervisor::RealStops),
        hops: crate::supervisor::shimhops::ShimHops::new(Box::new(|| {
            crate::installer::hop_files(std::path::Path::new("/"))
        })),
    });
    // A policy with http: rules: the CA is published before any tree needs
    // it (a failure is logged; those connects are refused).
    if policies.iter().any(|p| {
        p.egress()
            .is_some_and(|e| e.rules.iter().any(|r| r.http.is_some()))
    }) {
        let _ = ctx.proxy();
    }
    warn_unknown_secrets(config, policies);
    ctx
}

/// How a policy reload reads the config: checked as at start.
fn config_loader() -> crate::api::ConfigLoader {
    Box::new(|path| super::load::trusted_config(Some(path)).map_err(|e| e.to_string()))
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
            .map_err(StartError::DefaultSession)?,
    );
    let mut made: Vec<Arc<crate::session::Setup>> = vec![default.clone()];
    let _ = sessions.insert("default", Origin::Default, default.clone(), |_| false);
    for (id, section) in &maker.config.sessions {
        let spec = maker.config_spec(section);
        // Sessions made from one spec share its compiled rules.
        let setup = match made.iter().find(|m| m.spec == spec) {
            Some(m) => m.clone(),
            None => {
                let m = Arc::new(maker.make(spec, true).map_err(|source| {
                    StartError::ConfigSession {
                        id: id.clone(),
                        source,
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

/// The limits that end the server or silence its audit, at their hard
/// values (a tree cannot lower them: the filter refuses `prlimit64` on
/// another process): `RLIMIT_CPU` (its soft limit ends it with SIGXCPU
/// then SIGKILL), `RLIMIT_FSIZE` (an audit write past it fails with
/// EFBIG, which `audit.on_failure` decides about; SIGXFSZ stays blocked
/// with every other signal). A finite hard limit is said at start: the
/// server will meet it.
fn own_limits() {
    for (resource, name) in [
        (libc::RLIMIT_CPU, "CPU time (RLIMIT_CPU)"),
        (
            libc::RLIMIT_FSIZE,
            "file size (RLIMIT_FSIZE: audit writes past it fail)",
        ),
    ] {
        let mut lim = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: getrlimit writes one rlimit into the struct we own.
        if unsafe { libc::getrlimit(resource, &mut lim) } != 0 {
            let e = std::io::Error::last_os_error();
            tracing::warn!("cannot read the {name} limit: {e}");
            continue;
        }
        if lim.rlim_cur < lim.rlim_max {
            let from = lim.rlim_cur;
            lim.rlim_cur = lim.rlim_max;
            // SAFETY: setrlimit reads the struct; soft up to hard needs no
            // privilege.
            if unsafe { libc::setrlimit(resource, &lim) } != 0 {
                let e = std::io::Error::last_os_error();
                tracing::warn!(soft = from, "cannot raise the {name} limit: {e}");
            }
        }
        if lim.rlim_max != libc::RLIM_INFINITY {
            tracing::warn!(
                hard = lim.rlim_max,
                "the server runs with a finite {name} limit"
            );
        }
    }
}

/// A secret a policy injects that the config does not name: said at start,
/// not only at the first request it refuses.
fn warn_unknown_secrets(config: &Config, policies: &[Arc<Policy>]) {
    for p in policies {
        for r in p.egress().iter().flat_map(|e| e.rules.iter()) {
            for name in r.http.iter().flat_map(|h| h.secrets()) {
                if !config.secrets.contains_key(name) {
                    tracing::warn!(
                        "egress rule {:?} injects ${{secret:{name}}}, which the config's \
                         secrets: does not name: its allowed requests are refused (rule \
                         http_secret)",
                        r.name
                    );
                }
            }
        }
    }
}
