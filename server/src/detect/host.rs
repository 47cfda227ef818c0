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
    // runsc presents this fixed, fake kernel identity.
    let gvisor = version.contains("#1 SMP Sun Jan 10 15:06:54 PST 2016")
        || std::path::Path::new("/proc/self/gvisor").exists();
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
    let mut protections = Vec::new();
    protections.push(match abi {
        0 => "Landlock: none (file and network rules and self-protection do not exist)".into(),
        a if a < 4 => format!("Landlock ABI {a}: files yes; TCP ports no; signal/abstract-socket scopes no (seccomp signal guard instead)"),
        a if a < 6 => format!("Landlock ABI {a}: files and TCP ports; scopes no (seccomp signal guard instead)"),
        a => format!("Landlock ABI {a}: files, TCP ports, signal and abstract-socket scopes"),
    });
    protections.push(if cap_sys_admin {
        "daemon sockets: hidden from root trees (mount namespace) where the tree has CAP_SYS_ADMIN".into()
    } else {
        "daemon sockets: this process lacks CAP_SYS_ADMIN; root trees here likely too: NOT hidden (non-root trees: the sockets' modes)".into()
    });
    let tree_access = probe_tree_access();
    let yama = read("/proc/sys/kernel/yama/ptrace_scope").and_then(|s| s.trim().parse().ok());
    protections.push(match tree_access.reach() {
        Reach::Any if cap_sys_ptrace => {
            "trees: every tree can be read and watched (CAP_SYS_PTRACE)".into()
        }
        Reach::Any => "trees: every tree can be read and watched without CAP_SYS_PTRACE \
                       (another uid's tree with its own credentials)"
            .into(),
        r => format!("trees: {}", reach_remedy(r, yama).unwrap_or_default()),
    });
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
    fn a_cap_lowers_what_trees_get() {
        let r = detect(Some(2), BackendChoice::Auto);
        assert!(r.protections[0].contains("ABI 2"), "{:?}", r.protections);
    }
}
