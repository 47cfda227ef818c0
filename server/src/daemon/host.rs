//! What this host offers agentsh, probed once at start (`agentsh
//! detect`), and what follows from it: which shells can be supervised
//! (the readiness gate), which exec backend runs, and what is said in the
//! log about what is and is not enforced here.
//!
//! Failure modes: no exec backend works here: [`StartError::NoBackend`]
//! (a server that can supervise no exec serves none). A host where no
//! shell can be supervised is not an error: the server runs and says why
//! (log, `agentsh entrypoint`'s report, `/healthz`).

use super::command;
use super::error::{Result, StartError};
use crate::config::Config;
use crate::detect::Reach;
use crate::policy::landlock::SessionLandlock;
use crate::policy::Policy;
use crate::readiness::{Gate, Readiness};
use crate::supervisor::backend::Facts;
use std::sync::Arc;

/// Probes what this host offers (`agentsh detect`) and logs it, with what
/// that means for the policy's egress.
pub(super) fn detect(config: &Config, policy: &Policy) -> crate::detect::Report {
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
        let in_place =
            crate::detect::choose_backend(config.execve.backend, |k| detected.probe_of(k))
                .is_ok_and(|b| crate::supervisor::backend::of(b).facts().judges_in_place);
        if in_place {
            tracing::info!(
                "egress: every destination a tree names is judged where its call stops (the \
                 tracer holds the caller's threads through the call) and the call runs as made"
            );
        } else {
            log_egress_enforcement(e.allows_everything(), &detected, config.egress.compat);
        }
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
             cannot judge (a send naming a destination) runs as the tree made it, audited \
             with rule allow_unjudged",
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
pub(super) fn readiness_gate(
    detected: &crate::detect::Report,
    has_command: bool,
    backend: agentsh_proto::ExecBackend,
    report: &command::Report,
) -> Arc<Gate> {
    let facts = crate::supervisor::backend::of(backend).facts();
    let reach = detected.tree_access.reach();
    if !detected.cap_sys_ptrace {
        tracing::info!(
            "{}",
            without_cap_sys_ptrace(reach, detected.yama_ptrace_scope, facts)
        );
    }
    let gate = Arc::new(Gate::new(
        reach,
        detected.yama_ptrace_scope,
        has_command,
        facts.seizes_root,
    ));
    if let Readiness::Unable(why) = gate.get() {
        tracing::error!("not ready: no shell can be supervised: {why}");
        report.line(&format!("unable {why}"));
    }
    gate
}

/// What the start log says of a server without `CAP_SYS_PTRACE`: how it
/// reads trees, and which shells it can take as this host's ptrace rules
/// stand (`reach`, from the probes; `yama`, Yama's `ptrace_scope`) under a
/// backend of facts `f`. Where only descendants can be reached, a backend
/// that seizes each tree's root takes a shell it did not start too (the
/// shell names the server its ptracer first); any other takes only the
/// trees started below the server (the readiness gate decides the same).
fn without_cap_sys_ptrace(reach: Reach, yama: Option<u32>, f: &Facts) -> String {
    let reading = "no CAP_SYS_PTRACE: trees are read and watched with their owners' credentials; \
                   a process that changed its credentials and has not exec'd since cannot be \
                   read (its execs are refused)";
    let rules = match yama {
        Some(s) => format!("Yama ptrace_scope {s}"),
        None => "this host".to_string(),
    };
    match reach {
        Reach::Any => format!("{reading}; every tree can be reached, started here or not"),
        Reach::Descendants if f.seizes_root => format!(
            "{reading}; {rules} lets the server reach only the processes it started, but the {} \
             backend seizes a shell it did not start once the shell names the server its ptracer \
             (PR_SET_PTRACER): where that seize is refused all the same, the shell exits 126 \
             with the reason",
            f.kind.name()
        ),
        Reach::Descendants => format!(
            "{reading}; {rules} lets the server reach only the processes it started, so the {} \
             backend supervises only trees started below the server (agentsh entrypoint)",
            f.kind.name()
        ),
        Reach::Nothing => format!(
            "{reading}; {rules} lets the server reach not even its own children: no tree can \
             be supervised"
        ),
    }
}

/// The exec backend; fails closed at start: a server that can supervise no
/// exec serves none.
pub(super) fn backend(
    config: &Config,
    detected: &crate::detect::Report,
) -> Result<agentsh_proto::ExecBackend> {
    let backend = crate::detect::choose_backend(config.execve.backend, |k| detected.probe_of(k))
        .map_err(StartError::NoBackend)?;
    if detected.landlock_abi == 0 {
        let said = without_landlock(crate::supervisor::backend::of(backend).facts());
        if said.warns {
            tracing::warn!("{}", said.text);
        } else {
            tracing::info!("{}", said.text);
        }
    }
    Ok(backend)
}

/// A line of the start log, and whether it is a warning.
#[derive(Debug)]
struct Said {
    warns: bool,
    text: String,
}

/// What trees get on a kernel without Landlock under a backend of facts
/// `f`: which calls the backend judges itself (every exec; the path calls
/// where it keeps the file rules; under a policy with `egress`, the
/// network calls where it judges them in place, `network_rules`' TCP
/// connect ports with them), and what nothing enforces. A warning when the
/// file rules and the protection of agentsh's own files are among the
/// latter. Wrap-init lists the same per tree, exactly (`not_enforced`).
fn without_landlock(f: &Facts) -> Said {
    let mut judged = vec!["every exec (command rules)"];
    let mut not = Vec::new();
    if f.judges_files_without_landlock {
        judged.push("every path call (file rules, the protection of agentsh's own files)");
    } else {
        not.extend(["file rules", "the protection of agentsh's own files"]);
    }
    if f.judges_in_place {
        judged.push(
            "every connect and every send naming a destination under a policy with `egress` \
             (network_rules' TCP connect ports with them)",
        );
        not.push(
            "network_rules' TCP bind ports (and their connect ports under a policy without \
             `egress`)",
        );
    } else {
        not.push("network rules");
    }
    Said {
        warns: !f.judges_files_without_landlock,
        text: format!(
            "no Landlock on this kernel: the {} backend judges {}; {} are NOT enforced (see \
             docs/security-model.md)",
            f.kind.name(),
            list(&judged),
            list(&not),
        ),
    }
}

/// `a`, `a and b`, `a, b and c`.
fn list(items: &[&str]) -> String {
    match items {
        [] => String::new(),
        [one] => (*one).to_string(),
        [rest @ .., last] => format!("{} and {last}", rest.join(", ")),
    }
}

/// Logs, once, what every tree's Landlock ruleset will hold (as for root).
pub(super) fn report_landlock(landlock: &SessionLandlock) {
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
        // An unset variable (no `workspace` configured) is a configuration,
        // said once (`daemon::start`), not a warning.
        if w.contains("its variable has no value") {
            tracing::debug!("landlock: {w}");
            continue;
        }
        tracing::warn!("landlock: {w}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use agentsh_proto::ExecBackend;

    fn said(kind: ExecBackend) -> Said {
        without_landlock(crate::supervisor::backend::of(kind).facts())
    }

    #[test]
    fn without_landlock_the_tracer_is_said_to_keep_files_and_connects() {
        let s = said(ExecBackend::Ptrace);
        assert!(!s.warns, "{s:?}");
        assert!(
            s.text.contains(
                "the ptrace backend judges every exec (command rules), every path call (file \
                 rules, the protection of agentsh's own files) and every connect and every send \
                 naming a destination under a policy with `egress`"
            ),
            "{s:?}"
        );
        assert!(
            s.text.contains(
                "; network_rules' TCP bind ports (and their connect ports under a policy \
                 without `egress`) are NOT enforced"
            ),
            "{s:?}"
        );
        assert!(!s.text.contains("file rules and"), "{s:?}");
    }

    fn reading(reach: Reach, kind: ExecBackend) -> String {
        without_cap_sys_ptrace(reach, Some(1), crate::supervisor::backend::of(kind).facts())
    }

    #[test]
    fn without_cap_sys_ptrace_under_yama_the_tracer_is_said_to_take_shells_it_did_not_start() {
        let line = reading(Reach::Descendants, ExecBackend::Ptrace);
        assert!(!line.contains("only trees started below"), "{line}");
        assert!(
            line.contains(
                "Yama ptrace_scope 1 lets the server reach only the processes it started, but the \
                 ptrace backend seizes a shell it did not start once the shell names the server \
                 its ptracer (PR_SET_PTRACER)"
            ),
            "{line}"
        );
    }

    #[test]
    fn without_cap_sys_ptrace_under_yama_notify_is_said_to_take_only_trees_started_below() {
        let line = reading(Reach::Descendants, ExecBackend::Notify);
        assert!(
            line.ends_with(
                "Yama ptrace_scope 1 lets the server reach only the processes it started, so the \
                 notify backend supervises only trees started below the server (agentsh \
                 entrypoint)"
            ),
            "{line}"
        );
    }

    #[test]
    fn without_cap_sys_ptrace_where_every_tree_is_reached_no_limit_is_said() {
        for kind in ExecBackend::ALL {
            let line = reading(Reach::Any, kind);
            assert!(!line.contains("started below"), "{line}");
            assert!(
                line.ends_with("every tree can be reached, started here or not"),
                "{line}"
            );
        }
    }

    #[test]
    fn without_landlock_notify_still_warns_that_files_and_network_are_open() {
        let s = said(ExecBackend::Notify);
        assert!(s.warns, "{s:?}");
        assert_eq!(
            s.text,
            "no Landlock on this kernel: the notify backend judges every exec (command rules); \
             file rules, the protection of agentsh's own files and network rules are NOT \
             enforced (see docs/security-model.md)"
        );
    }
}
