//! The report for people (`agentsh detect` without `--json`): one line per
//! capability, then what a wrap-init gets here and the protections it has.
//!
//! Failure modes: none; it formats a [`Report`].

use super::report::{Probe, Report};

/// The report for people.
pub fn human(r: &Report) -> String {
    let p = |x: &Probe| match (&x.available, &x.detail) {
        (true, _) => "yes".to_string(),
        (false, Some(d)) => format!("no ({d})"),
        (false, None) => "no".to_string(),
    };
    let mut s = String::new();
    s += &format!("kernel:                       {}\n", r.kernel);
    s += &format!(
        "gVisor:                       {}\n",
        if r.gvisor { "yes" } else { "no" }
    );
    s += &format!(
        "seccomp user-notify:          {}\n",
        p(&r.seccomp_user_notif)
    );
    s += &format!(
        "  WAIT_KILLABLE_RECV:         {}\n",
        p(&r.wait_killable_recv)
    );
    s += &format!("  SYNC_WAKE_UP:               {}\n", p(&r.sync_wake_up));
    s += &format!(
        "SECCOMP_RET_TRACE + ptrace:   {}\n",
        p(&r.seccomp_trace_ptrace)
    );
    s += &format!("Landlock ABI (kernel):        {}\n", r.landlock_abi);
    s += &format!(
        "fanotify permission events:   {}\n",
        p(&r.fanotify_permission)
    );
    s += &format!(
        "Yama ptrace_scope:            {}\n",
        r.yama_ptrace_scope
            .map_or_else(|| "no Yama".into(), |v| v.to_string())
    );
    s += &format!(
        "server capabilities:          CAP_SYS_ADMIN {}, CAP_SYS_PTRACE {}; no_new_privs {}\n",
        r.cap_sys_admin, r.cap_sys_ptrace, r.no_new_privs
    );
    s += &format!(
        "read a child / another tree: {} / {}\n",
        p(&r.tree_access.descendants),
        p(&r.tree_access.others)
    );
    s += &format!("take a tree's socket (egress): {}\n", p(&r.pidfd_getfd));
    s += &format!(
        "limits per session (cgroups): {}\n",
        match (&r.limits.available, &r.limits.detail) {
            (true, Some(at)) => format!("yes ({at})"),
            _ => p(&r.limits),
        }
    );
    s += &format!("a wrap-init here gets:        {}\n", r.backend);
    for prot in &r.protections {
        s += &format!("  - {prot}\n");
    }
    s
}
