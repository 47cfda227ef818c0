//! wrap-init: once `admission` has passed the shell (who asks, whether this
//! server can supervise it, its session), the tree's filter, Landlock
//! ruleset, notify socket and daemon-socket masks, and the audit event;
//! then the task that waits for the handoff. On the hot path of every
//! shell (`bench/run.sh` measures it): the blocking part runs in place
//! (`block_in_place`) and reuses what the session's caches hold.
//!
//! Failure modes: every refusal is a JSON error the shim prints (and
//! refuses to run the shell): 429 over the caller's notify-socket limit,
//! 503 for egress that cannot be enforced under `egress.compat: required`
//! or a missing wrapper, 500 for a filter, socket or config that cannot be
//! made. Nothing is left behind by a refusal: what is compiled comes
//! before anything is created, and the notify socket's slot is given back.

use super::admission;
use super::answer::{error, fail, json_bytes, read_body, Failure, Resp};
use super::peer::Peer;
use super::state::Api;
use crate::audit::{EventBody, WrapInitEvent};
use crate::handoff::{self, Caller};
use crate::laps::Laps;
use crate::limits::Kind;
use crate::session::{Session, Setup};
use agentsh_proto::env::EnvRules;
use agentsh_proto::{WrapInitRequest, WrapInitResponse};
use hyper::body::Incoming;
use hyper::Request;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

pub(super) async fn wrap_init(
    api: Arc<Api>,
    peer: Peer,
    sid: String,
    req: Request<Incoming>,
) -> Resp {
    let started = std::time::Instant::now();
    let mut laps = Laps::new(tracing::enabled!(tracing::Level::DEBUG));
    // One user's shells wait for their turn, not everyone's (`limits`).
    let _turn = api.limits.turn(peer.key()).await;
    laps.lap("turn");
    let caller = match admission::caller_of(&api, &peer).await {
        Ok(c) => c,
        Err(r) => return r.into(),
    };
    laps.lap("caller");
    let body: WrapInitRequest = match read_body(req).await {
        Ok(b) => b,
        Err(r) => return r.into(),
    };
    laps.lap("body");
    if body.caller_uid != caller.uid {
        return error(
            403,
            format!(
                "caller_uid {} does not match the connecting process's uid {}",
                body.caller_uid, caller.uid
            ),
        );
    }
    // A shell that comes while the server rehearses waits for it (a few
    // milliseconds; it is bounded by `rehearsal::DEADLINE`).
    if sid != agentsh_proto::shimconf::REHEARSAL_SESSION {
        api.gate.rehearsal.over().await;
    }
    let slot = match api.limits.take(Kind::NotifySocket, peer.key()) {
        Ok(s) => s,
        Err(e) => return error(429, e.to_string()),
    };
    laps.lap("gate");
    let prep_api = api.clone();
    // In place on this worker (its other tasks move to another thread): a
    // hop to the blocking pool and back cost ~130 µs of two thread wake-ups
    // on a loaded 2-core machine, and the steps ran slower on a cold CPU
    // (docs/benchmarks.md). A current-thread runtime (tests) cannot.
    let prepared = if tokio::runtime::Handle::current().runtime_flavor()
        == tokio::runtime::RuntimeFlavor::MultiThread
    {
        tokio::task::block_in_place(move || prepare_wrap_init(&prep_api, &sid, body, caller))
    } else {
        tokio::task::spawn_blocking(move || prepare_wrap_init(&prep_api, &sid, body, caller))
            .await
            .unwrap_or_else(|e| Err(fail(500, format!("wrap-init failed: {e}"))))
    };
    let (resp, pending) = match prepared {
        Ok(p) => p,
        Err(r) => return r.into(),
    };
    laps.lap("prepare");
    tokio::spawn(handoff::take_handoff(
        api.supervisor.clone(),
        api.trees.clone(),
        pending,
        slot,
    ));
    // Straight to bytes: the answer is the largest on the hot path (the
    // filter and the path rules), no value tree in between.
    let out = match serde_json::to_vec(&resp) {
        Ok(v) => json_bytes(200, v),
        Err(e) => error(500, format!("cannot serialize response: {e}")),
    };
    laps.lap("serialize");
    tracing::debug!(
        uid = caller.uid,
        us = started.elapsed().as_micros() as u64,
        laps = laps.text(),
        "wrap-init answered"
    );
    out
}

/// The ruleset's warnings for one wrap-init, in the server's log. An unset
/// variable (no `workspace` configured) is a configuration, said once at
/// start, not a warning at every shell.
fn say_landlock_warnings(session: &str, uid: u32, warnings: &[String]) {
    for w in warnings {
        if w.contains("its variable has no value") {
            tracing::debug!(session, uid, "landlock: {w}");
        } else {
            tracing::warn!(session, uid, "landlock: {w}");
        }
    }
}

/// The blocking part of wrap-init, its checks in the order they must run:
/// who may have a tree here and in which session (`admission::admit`),
/// what this host cannot enforce ([`egress_gap`]), the wrapper; then the
/// tree's filter, ruleset and notify socket ([`open_tree`]), its config
/// and the audit event.
///
/// Long because each step takes what the one before it made, in the order
/// of the checks; each is a call.
fn prepare_wrap_init(
    api: &Api,
    sid: &str,
    body: WrapInitRequest,
    caller: Caller,
) -> Result<(WrapInitResponse, handoff::Pending), Failure> {
    let started = std::time::Instant::now();
    let mut laps = Laps::new(tracing::enabled!(tracing::Level::DEBUG));
    let session = admission::admit(api, sid, caller)?;
    laps.lap("admit");
    let setup = &session.setup();
    let backend = setup.filters.backend();
    let egress_gap = egress_gap(api, &setup.policy, backend)?;
    laps.lap("egress");
    let wrapper = wrapper_binary(api)?;
    laps.lap("wrapper");
    let (cap_eff, creds) = super::credentials::for_caller(setup, caller);
    laps.lap("creds");
    let Opened {
        lineage,
        filter,
        backend,
        landlock,
        ruleset_reused,
        mut pending,
    } = open_tree(api, &session, caller, creds.as_ref())?;
    laps.lap("open_tree");
    session
        .wrap_inits
        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let mut seccomp_config = tree_seccomp_config(api, &filter.encoded, backend);
    let mut not_enforced = tree_not_enforced(setup, &landlock.summary, backend);
    if let Some(why) = egress_gap {
        not_enforced.push(unjudged_egress(api, backend, &why));
    }
    let limits = limit_tree(api, setup, caller, &mut pending, &mut not_enforced)?;
    laps.lap("limits");
    let compiled_us = started.elapsed().as_micros() as u64;
    say_landlock_warnings(&session.id, caller.uid, &landlock.warnings);
    // Built by this server while the shim loads its filter, for a shim that
    // asks for it and whose root resolves paths as this process does.
    let ahead = body.ruleset_ahead.then_some(caller.pid).flatten();
    if let Some(pid) = ahead.filter(|&p| agentsh_unixwrap::ahead::same_view(p)) {
        pending.build_ahead(landlock.config.clone(), pid);
    }
    laps.lap("ahead");
    seccomp_config.landlock = Some(landlock.config);
    let (env_removed, env_injected) =
        env_changes(&body.env_names, &body.env_url_passwords, setup.env.as_ref());
    seccomp_config.env = setup.env.clone();
    let (daemon_sockets, masks_reused) = masks(
        api,
        setup,
        (caller, cap_eff),
        creds.as_ref(),
        &mut seccomp_config,
    );
    laps.lap("masks");
    let wrapper_env = wrapper_env(&session.id);
    let notify_socket = pending.path.to_string_lossy().into_owned();
    api.audit.record(
        &session.id,
        EventBody::WrapInit(Box::new(WrapInitEvent {
            caller_uid: caller.uid,
            agent_command: body.agent_command,
            agent_args: body.agent_args,
            notify_socket: notify_socket.clone(),
            policy: setup.policy_name.clone(),
            landlock: Some(landlock.summary),
            seccomp: Some(filter.summary.clone()),
            daemon_sockets: Some(daemon_sockets),
            credential_files: creds.map(|c| c.summary),
            shim_pid: caller.pid,
            daemon_pid: lineage.as_ref().and_then(|l| l.parent),
            backend,
            not_enforced,
            env_removed,
            env_injected,
            limits,
        })),
    );
    laps.lap("event");
    tracing::debug!(
        session = %session.id,
        compiled_us,
        laps = laps.text(),
        ruleset_reused,
        masks_reused,
        "wrap-init prepared"
    );
    let response = WrapInitResponse {
        wrapper_binary: wrapper.to_string_lossy().into_owned(),
        notify_socket,
        seccomp_config,
        wrapper_env,
    };
    Ok((response, pending))
}

/// The server's seccomp config with this tree's filter and backend; a
/// backend that seizes the root names the server as its tracer
/// (`PR_SET_PTRACER`, before the seize).
fn tree_seccomp_config(
    api: &Api,
    filter: &str,
    backend: agentsh_proto::ExecBackend,
) -> agentsh_proto::SeccompConfig {
    let mut config = api.seccomp_config.clone();
    config.filter = filter.to_owned();
    config.backend = backend;
    if crate::supervisor::backend::of(backend).facts().seizes_root {
        config.tracer_pid = Some(std::process::id());
    }
    config
}

/// Why the policy's egress cannot be enforced here ([`egress_unenforceable`]);
/// refused when `egress.compat` is `required`.
fn egress_gap(
    api: &Api,
    policy: &crate::policy::Policy,
    backend: agentsh_proto::ExecBackend,
) -> Result<Option<String>, Failure> {
    let gap = egress_unenforceable(api, policy, backend);
    if let Some(why) = &gap {
        if api.config.egress.compat == crate::config::EgressCompat::Required {
            tracing::warn!("wrap-init refused: egress.compat is required and {why}");
            return Err(fail(
                503,
                format!(
                    "the policy's egress cannot be enforced here ({why}) and egress.compat is \
                     required: give the container CAP_SYS_PTRACE (`docker run --cap-add \
                     SYS_PTRACE`), or set egress.compat: best_effort (a send naming a \
                     destination is then refused) or allow_unjudged (it runs as made, audited)"
                ),
            )
            .with_hint(agentsh_proto::hint::EGRESS_NOT_ENFORCEABLE));
        }
    }
    Ok(gap)
}

/// The wrapper the shim is to exec (`wrapper_binary`), which must exist.
fn wrapper_binary(api: &Api) -> Result<PathBuf, Failure> {
    let wrapper = api.config.wrapper_binary_path();
    if !wrapper.is_file() {
        // The shim treats a 5xx as "cannot install": it refuses (126) once
        // agentsh has run in this container.
        return Err(fail(
            503,
            format!(
                "wrapper_binary {} does not exist; set wrapper_binary in the config",
                wrapper.display()
            ),
        ));
    }
    Ok(wrapper)
}

/// What a wrap-init makes for its tree (see [`open_tree`]).
struct Opened {
    /// The shim's place: its parent (the SDK daemon) and process groups.
    lineage: Option<handoff::Lineage>,
    filter: Arc<crate::filter::CompiledFilter>,
    backend: agentsh_proto::ExecBackend,
    landlock: crate::policy::landlock::CompiledLandlock,
    /// The ruleset came from the cache.
    ruleset_reused: bool,
    pending: handoff::Pending,
}

/// The tree's cgroup with its session's limits (`cgroup`), the shell's
/// process moved in before its command runs; the summary for the event.
/// Where the limits cannot be applied: a refusal naming why, or, under
/// `limits.compat: best_effort`, a tree without them, said in the log and
/// in `not_enforced`.
fn limit_tree(
    api: &Api,
    setup: &Setup,
    caller: Caller,
    pending: &mut handoff::Pending,
    not_enforced: &mut Vec<String>,
) -> Result<Option<String>, Failure> {
    let limits = &setup.limits;
    if !limits.any() {
        return Ok(None);
    }
    let placed = match (api.cgroups.delegation(), caller.pid) {
        (Ok(d), Some(pid)) => d.place(limits, pid).map_err(|e| e.to_string()),
        (Err(why), _) => Err(why.to_string()),
        (_, None) => Err("the kernel did not name the calling process (SO_PEERCRED)".into()),
    };
    match placed {
        Ok(cg) => {
            let summary = format!("{} in {}", limits.summary(), cg.dir.display());
            pending.limit(cg);
            Ok(Some(summary))
        }
        Err(why) if limits.compat == crate::vocab::LimitsCompat::BestEffort => {
            tracing::warn!(
                uid = caller.uid,
                "limits ({}) not applied, the tree runs without them                  (limits.compat: best_effort): {why}",
                limits.summary()
            );
            not_enforced.push(format!("limits ({}): {why}", limits.summary()));
            Ok(None)
        }
        Err(why) => {
            tracing::warn!(
                uid = caller.uid,
                "wrap-init refused: limits cannot be applied: {why}"
            );
            Err(fail(
                503,
                format!(
                    "the session's limits ({}) cannot be applied here: {why}; or set                      limits.compat: best_effort (the tree then runs without them, said in                      its wrap_init event)",
                    limits.summary()
                ),
            ))
        }
    }
}

/// The tree's seccomp filter, Landlock ruleset and notify socket, in that
/// order: what is compiled (or taken from a cache) comes before anything
/// is created, so a failure leaves nothing behind. The ruleset takes
/// `credential_files`' Landlock fallback where the plan says.
fn open_tree(
    api: &Api,
    session: &Session,
    caller: Caller,
    credentials: Option<&super::credentials::CredentialPlan>,
) -> Result<Opened, Failure> {
    let setup = &session.setup();
    // The shim's parent is the SDK daemon; both are protected from the
    // tree's signals (the filter's register rules), with their groups.
    let lineage = caller.pid.map(handoff::Lineage::of);
    let daemon = lineage.and_then(|l| {
        Some(crate::filter::ProcessId {
            pid: l.parent?,
            pgid: l.parent_pgrp?,
        })
    });
    let filter = setup
        .filters
        .for_tree(daemon, lineage.and_then(|l| l.pgrp), caller.pid)
        .map_err(|e| {
            tracing::error!("wrap-init: {e}");
            fail(500, e.to_string())
        })?;
    let backend = setup.filters.backend();
    let (mut landlock, ruleset_reused) = setup
        .landlock
        .compile_or_reuse(caller.uid, super::credentials::carves(credentials));
    crate::policy::landlock::cap_abi(&mut landlock, api.config.landlock.cap());
    let pending = handoff::open_notify_socket(
        &session.id,
        caller,
        backend,
        crate::supervisor::TreeTerms {
            exec_places: landlock.exec_places.clone(),
            rules: session.rules.clone(),
            started_with: setup.policy.clone(),
            doomed: session.doomed.clone(),
            files: tree_file_rules(&setup.filters, &landlock.config, credentials),
        },
    )
    .map_err(|e| {
        tracing::error!("wrap-init: {e}");
        fail(500, e.to_string())
    })?;
    Ok(Opened {
        lineage,
        filter,
        backend,
        landlock,
        ruleset_reused,
        pending,
    })
}

/// The file rules the supervisor keeps for a tree: all of them where the
/// tracer judges its path calls (no Landlock), or, where Landlock keeps
/// them and the calls that change files come to the supervisor, to explain
/// what Landlock refuses.
fn tree_file_rules(
    filters: &crate::filter::Filters,
    config: &agentsh_proto::LandlockConfig,
    credentials: Option<&super::credentials::CredentialPlan>,
) -> Option<crate::supervisor::TreeFiles> {
    use crate::supervisor::{FileRules, TreeFiles};
    if filters.traces_files() {
        Some(TreeFiles::Kept(std::sync::Arc::new(
            FileRules::from_config(config),
        )))
    } else if filters.explains_writes() {
        // The places unixwrap's mounts keep read-only: a change there is
        // explained too (the kernel's EROFS), canonical as the rules are.
        let read_only = crate::supervisor::ReadOnly {
            covered: credentials
                .map(|c| {
                    c.read_only
                        .iter()
                        .filter_map(|p| std::fs::canonicalize(p).ok())
                        .filter_map(|p| p.to_str().map(str::to_string))
                        .collect()
                })
                .unwrap_or_default(),
            absent: credentials
                .map(|c| c.read_only_absent.clone())
                .unwrap_or_default(),
            absent_parents: credentials
                .map(|c| c.read_only_absent_parents.clone())
                .unwrap_or_default(),
        };
        Some(TreeFiles::Explained(
            std::sync::Arc::new(config.clone()),
            std::sync::Arc::new(read_only),
        ))
    } else {
        None
    }
}

/// The `not_enforced` line for egress this host cannot enforce (`why`):
/// what its connects and sends get instead, by whether the backend can put
/// fds into the tree and by `egress.compat`.
fn unjudged_egress(api: &Api, backend: agentsh_proto::ExecBackend, why: &str) -> String {
    let unjudged = api.config.egress.compat == crate::config::EgressCompat::AllowUnjudged;
    let installs = crate::supervisor::backend::of(backend)
        .facts()
        .can_install_fds;
    match (installs, unjudged) {
        (true, false) => format!(
            "egress ({why}): a send that names a destination is refused; connects are \
             judged and made on sockets of the supervisor's own"
        ),
        (true, true) => format!(
            "egress ({why}): a send that names a destination runs unjudged \
             (egress.compat: allow_unjudged); connects are judged and made on sockets of \
             the supervisor's own"
        ),
        (false, false) => {
            format!("egress ({why}): every connect and send it would judge is refused")
        }
        (false, true) => format!(
            "egress ({why}): every connect and send runs unjudged, DNS included \
             (egress.compat: allow_unjudged)"
        ),
    }
}

/// What the tree's unixwrap covers in its mount namespace (daemon sockets,
/// credential stores), in its config; the event's daemon-socket summary,
/// and whether the sockets came from the cache.
fn masks(
    api: &Api,
    setup: &Setup,
    (caller, cap_eff): (Caller, Option<u64>),
    credentials: Option<&super::credentials::CredentialPlan>,
    config: &mut agentsh_proto::SeccompConfig,
) -> (crate::audit::DaemonSocketsSummary, bool) {
    let (hidden, reused) = hidden_daemon_sockets(api, setup);
    config.daemon_sockets = hidden.clone();
    super::credentials::apply(credentials, config);
    let summary = crate::audit::DaemonSocketsSummary {
        hidden,
        mechanism: masking_mechanism(caller, cap_eff),
    };
    (summary, reused)
}

/// The daemon sockets the tree's unixwrap hides, and whether they came
/// from the cache (resolved once while nothing they were read from changes).
fn hidden_daemon_sockets(api: &Api, setup: &Setup) -> (Vec<String>, bool) {
    let run_dir = api.config.run_dir();
    setup
        .daemon_sockets
        .hidden_or_reused(setup.policy.daemon_sockets(), run_dir.to_str())
}

/// What unixwrap is started with besides its config (which the answer
/// carries once, in `seccomp_config`): the tree's session.
fn wrapper_env(session: &str) -> BTreeMap<String, String> {
    let mut env = BTreeMap::new();
    env.insert(
        agentsh_proto::env::SESSION_ID.to_string(),
        session.to_string(),
    );
    env
}

/// The policy's `env:`, applied by unixwrap at its final exec: which of the
/// names the shim sent it removes from the shell's environment, and which
/// it sets. Names only, never a value.
fn env_changes(
    names: &[String],
    url_passwords: &[String],
    rules: Option<&EnvRules>,
) -> (Vec<String>, Vec<String>) {
    match rules {
        Some(r) => (
            names
                .iter()
                .filter(|n| {
                    let by_value = r.deny_url_passwords
                        && url_passwords.contains(n)
                        && !r
                            .keep
                            .iter()
                            .any(|g| agentsh_proto::env::glob(g.as_bytes(), n.as_bytes()));
                    !n.starts_with(agentsh_proto::env::PREFIX)
                        && (!r.keeps(n.as_bytes()) || by_value)
                        && !r.inject.iter().any(|(k, _)| k == *n)
                })
                .cloned()
                .collect(),
            r.inject.iter().map(|(k, _)| k.clone()).collect(),
        ),
        None => (Vec::new(), Vec::new()),
    }
}

/// Why the policy's egress cannot be enforced on this host (`None`: it
/// can, the policy has none, or it allows every destination so there is
/// nothing to enforce): the supervisor takes a tree's sockets with
/// `pidfd_getfd`, or, under a backend that judges calls where they stop
/// (ptrace), needs nothing of the kind.
fn egress_unenforceable(
    api: &Api,
    policy: &crate::policy::Policy,
    backend: agentsh_proto::ExecBackend,
) -> Option<String> {
    let probe = &api.detected.pidfd_getfd;
    let enforcing = policy.egress().is_some_and(|e| !e.allows_everything());
    (enforcing && !probe.available && !judges_in_place(backend)).then(|| {
        probe
            .detail
            .clone()
            .unwrap_or_else(|| "pidfd_getfd is refused".into())
    })
}

/// The backend judges a network call where it stops (ptrace): every
/// connect the filter traps is judged, `network_rules`' TCP connect ports
/// with it.
fn judges_in_place(backend: agentsh_proto::ExecBackend) -> bool {
    crate::supervisor::backend::of(backend)
        .facts()
        .judges_in_place
}

/// [`not_enforced`] for a tree of `setup` under `backend`.
fn tree_not_enforced(
    setup: &Setup,
    l: &crate::policy::landlock::LandlockSummary,
    backend: agentsh_proto::ExecBackend,
) -> Vec<String> {
    let connects_judged = judges_in_place(backend) && setup.policy.egress().is_some();
    not_enforced(l, setup.filters.traces_files(), connects_judged)
}

/// What the tree does not get on this host, said rather than implied: with
/// no Landlock at all the network rules do not exist, nor the file rules
/// and the protection of agentsh's own files unless the tracer keeps them
/// (`tracer_files`: the ptrace backend judges the path calls), nor the TCP
/// connect ports unless the tracer keeps them (`connects_judged`: it judges
/// every connect, for the policy's egress).
fn not_enforced(
    l: &crate::policy::landlock::LandlockSummary,
    tracer_files: bool,
    connects_judged: bool,
) -> Vec<String> {
    if l.kernel_abi > 0 {
        return Vec::new();
    }
    let mut v = Vec::new();
    if !l.handled_fs.is_empty() && !tracer_files {
        v.push("file rules (no Landlock on this kernel)".to_string());
        v.push("the protection of agentsh's own files (no Landlock)".to_string());
    }
    match (
        l.tcp_connect_ports.is_some() && !connects_judged,
        l.tcp_bind_ports.is_some(),
    ) {
        (true, _) => v.push("network rules (no Landlock on this kernel)".to_string()),
        (false, true) => v.push(
            "network rules' TCP bind ports (no Landlock on this kernel; connect ports are kept \
             by the tracer)"
                .to_string(),
        ),
        (false, false) => {}
    }
    v
}

/// How the tree's unixwrap will hide daemon sockets: a private mount
/// namespace needs CAP_SYS_ADMIN in the caller (`cap_eff`, read from the
/// shim's /proc status); without it, a non-root tree is kept out by the
/// sockets' own root-only modes, and a root tree is not kept out (said
/// plainly).
fn masking_mechanism(caller: Caller, cap_eff: Option<u64>) -> String {
    match cap_eff {
        Some(_) if super::credentials::has_admin(cap_eff) => "mount namespace".into(),
        Some(_) if caller.uid != 0 => "not hidden (no CAP_SYS_ADMIN): the sockets' own modes keep this non-root tree out of root-only sockets".into(),
        Some(_) => "NOT HIDDEN: a root tree without CAP_SYS_ADMIN can reach them".into(),
        None => "unknown (the caller's capabilities cannot be read)".into(),
    }
}
