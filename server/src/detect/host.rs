//! The whole report, probed on this host ([`detect`]): the kernel and
//! gVisor, the server's capabilities, each probe, the backend a wrap-init
//! gets and the protections trees have, in words.
//!
//! Every answer comes from trying the thing or from the kernel's own files
//! (`/proc`), never from version numbers.
//!
//! Failure modes: a file that cannot be read is an empty or absent answer;
//! a probe that cannot run is reported not available with the reason.

use super::choose::choose_backend;
use super::report::{reach_remedy, Probe, Reach, Report};
use super::syscalls::{probe_fanotify, probe_notify, probe_pidfd_getfd, probe_sync_wakeup};
use super::trace::probe_trace;
use super::tree_access::probe_tree_access;
use crate::config::BackendChoice;
use crate::supervisor::backend;

/// A file's text (`None`: it cannot be read).
fn read(path: &str) -> Option<String> {
    std::fs::read_to_string(path).ok()
}

/// (CAP_SYS_ADMIN, CAP_SYS_PTRACE) in this process's effective set.
fn caps() -> (bool, bool) {
    let eff = crate::tracee::ProcStatus::read("self")
        .ok()
        .and_then(|s| s.mask("CapEff"))
        .unwrap_or(0);
    (eff & (1 << 21) != 0, eff & (1 << 19) != 0)
}

/// Probes everything; `max_abi` is the config's `landlock.max_abi` cap.
/// Probes this host; `choice` is the configured `execve.backend`.
pub fn detect(max_abi: Option<i64>, choice: BackendChoice) -> Report {
    let version = read("/proc/version").unwrap_or_default();
    let gvisor = crate::tracee::is_gvisor();
    let (cap_sys_admin, cap_sys_ptrace) = caps();
    let no_new_privs = crate::tracee::ProcStatus::read("self")
        .ok()
        .is_some_and(|s| s.field("NoNewPrivs") == Some("1"));
    let notify = probe_notify(libc::SECCOMP_FILTER_FLAG_NEW_LISTENER);
    let killable = if notify.available {
        probe_notify(
            libc::SECCOMP_FILTER_FLAG_NEW_LISTENER | libc::SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV,
        )
    } else {
        Probe::no("no user-notify")
    };
    let sync = if notify.available {
        probe_sync_wakeup()
    } else {
        Probe::no("no user-notify")
    };
    let trace = probe_trace();
    let kernel_abi = agentsh_proto::wire::kernel_landlock_abi();
    let abi = agentsh_proto::wire::effective_landlock_abi(kernel_abi, max_abi);
    let exec_backend = choose_backend(choice, |k| match k.trap() {
        agentsh_proto::wire::Trap::UserNotif => &notify,
        agentsh_proto::wire::Trap::Tracer => &trace,
    });
    let backend = match &exec_backend {
        Ok(k) => backend::of(*k).facts().describe.to_string(),
        Err(e) => format!("none: {e}"),
    };
    let facts = exec_backend.as_ref().ok().map(|k| backend::of(*k).facts());
    let mut protections = Vec::new();
    protections.push(landlock_line(abi, facts));
    protections.push(if cap_sys_admin {
        "daemon sockets: hidden from root trees (mount namespace) where the tree has CAP_SYS_ADMIN".into()
    } else {
        "daemon sockets: this process lacks CAP_SYS_ADMIN; root trees here likely too: NOT hidden (non-root trees: the sockets' modes)".into()
    });
    let tree_access = probe_tree_access();
    let yama = read("/proc/sys/kernel/yama/ptrace_scope").and_then(|s| s.trim().parse().ok());
    protections.push(trees_line(tree_access.reach(), cap_sys_ptrace, yama, facts));
    Report {
        gvisor,
        kernel: version.trim().to_string(),
        seccomp_user_notif: notify,
        wait_killable_recv: killable,
        sync_wake_up: sync,
        seccomp_trace_ptrace: trace,
        landlock_abi: kernel_abi,
        fanotify_permission: probe_fanotify(),
        yama_ptrace_scope: yama,
        cap_sys_admin,
        cap_sys_ptrace,
        no_new_privs,
        tree_access,
        pidfd_getfd: probe_pidfd_getfd(),
        backend,
        exec_backend: exec_backend.ok(),
        protections,
        limits: limits(),
    }
}

/// The protections' Landlock line at ABI `abi` (the effective one), under
/// the backend of `facts` (`None`: no backend works here): without
/// Landlock, a backend that judges the path calls itself keeps the file
/// rules and self-protection, and one that judges connects in place the
/// TCP connect ports where the policy has `egress`.
fn landlock_line(abi: i64, facts: Option<&backend::Facts>) -> String {
    match (abi, facts) {
        (0, Some(f)) if f.judges_files_without_landlock => format!(
            "Landlock: none (the {} backend judges the file rules and self-protection itself{}; \
             TCP bind ports do not exist)",
            f.kind.name(),
            if f.judges_in_place {
                ", and TCP connect ports with a policy's egress"
            } else {
                ""
            }
        ),
        (0, _) => "Landlock: none (file and network rules and self-protection do not exist)".into(),
        (a, _) if a < 4 => format!("Landlock ABI {a}: files yes; TCP ports no; signal/abstract-socket scopes no (seccomp signal guard instead)"),
        (a, _) if a < 6 => format!("Landlock ABI {a}: files and TCP ports; scopes no (seccomp signal guard instead)"),
        (a, _) => format!("Landlock ABI {a}: files, TCP ports, signal and abstract-socket scopes"),
    }
}

/// The protections' line on which trees can be read (`reach`, from the
/// probes), under the backend of `facts`: where only descendants can be,
/// a backend that seizes each tree's root still takes a shell the server
/// did not start (it names the server its ptracer first).
fn trees_line(
    reach: Reach,
    cap_sys_ptrace: bool,
    yama: Option<u32>,
    facts: Option<&backend::Facts>,
) -> String {
    match reach {
        Reach::Any if cap_sys_ptrace => {
            "trees: every tree can be read and watched (CAP_SYS_PTRACE)".into()
        }
        Reach::Any => "trees: every tree can be read and watched without CAP_SYS_PTRACE \
                       (another uid's tree with its own credentials)"
            .into(),
        Reach::Descendants if facts.is_some_and(|f| f.seizes_root) => format!(
            "trees: the server lacks CAP_SYS_PTRACE and {} lets it read only the processes it \
             started, but the {} backend seizes a shell it did not start once the shell names \
             the server its ptracer (PR_SET_PTRACER); a shell whose seize is refused all the \
             same exits 126 with the reason",
            yama.map_or_else(|| "the kernel".into(), |s| format!("Yama ptrace_scope {s}")),
            facts.map_or("", |f| f.kind.name()),
        ),
        r => format!("trees: {}", reach_remedy(r, yama).unwrap_or_default()),
    }
}

/// Whether trees can get cgroups with their limits here (`cgroup::assess`).
fn limits() -> Probe {
    match crate::cgroup::assess() {
        Ok(at) => Probe {
            available: true,
            detail: Some(at),
        },
        Err(why) => Probe::no(why.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::super::human::human;
    use super::*;
    use agentsh_proto::ExecBackend;

    #[test]
    fn this_machine_offers_user_notify_and_tracing() {
        let r = detect(None, BackendChoice::Auto);
        if std::env::var("CI").as_deref() == Ok("true") {
            assert!(r.seccomp_user_notif.available, "{r:?}");
            assert!(r.seccomp_trace_ptrace.available, "{r:?}");
            assert!(!r.gvisor);
            assert!(r.landlock_abi >= 6);
        }
        let text = human(&r);
        assert!(text.contains("seccomp user-notify:"), "{text}");
        let json = serde_json::to_value(&r).unwrap();
        assert!(json["seccomp_user_notif"]["available"].is_boolean());
        if r.seccomp_user_notif.available {
            assert_eq!(r.exec_backend, Some(ExecBackend::Notify));
            assert_eq!(json["exec_backend"], "notify");
            let forced = detect(None, BackendChoice::Ptrace);
            assert_eq!(forced.exec_backend, Some(ExecBackend::Ptrace), "{forced:?}");
            assert!(forced.backend.starts_with("ptrace"), "{}", forced.backend);
        }
    }

    #[test]
    fn without_landlock_the_tracer_is_said_to_keep_the_file_rules() {
        let trace = backend::of(ExecBackend::Ptrace).facts();
        let notify = backend::of(ExecBackend::Notify).facts();
        let line = landlock_line(0, Some(trace));
        assert!(!line.contains("self-protection do not exist"), "{line}");
        assert!(
            line.contains("the ptrace backend judges the file rules and self-protection itself"),
            "{line}"
        );
        for f in [Some(notify), None] {
            assert_eq!(
                landlock_line(0, f),
                "Landlock: none (file and network rules and self-protection do not exist)"
            );
        }
    }

    #[test]
    fn where_only_descendants_can_be_read_the_tracer_still_takes_other_shells() {
        let trace = backend::of(ExecBackend::Ptrace).facts();
        let notify = backend::of(ExecBackend::Notify).facts();
        let line = trees_line(Reach::Descendants, false, Some(1), Some(trace));
        assert!(!line.contains("agentsh entrypoint"), "{line}");
        assert!(
            line.contains("the ptrace backend seizes a shell it did not start"),
            "{line}"
        );
        let line = trees_line(Reach::Descendants, false, Some(1), Some(notify));
        assert!(
            line.contains("run the SDK's daemon under `agentsh entrypoint"),
            "{line}"
        );
    }

    #[test]
    fn a_cap_lowers_what_trees_get() {
        let r = detect(Some(2), BackendChoice::Auto);
        assert!(r.protections[0].contains("ABI 2"), "{:?}", r.protections);
    }
}
