//! The guards of the server's process (and the SDK daemon's) on register
//! arguments: signals ([`signal_guard_rules`], and below Landlock ABI 6
//! [`unscoped_signal_rules`]) and the other calls that reach into a process
//! ([`process_guard_rules`]: limits, priority, scheduling).

use super::rules::{eq32, trap, Conditional, Rule};
use super::spec::{FilterSpec, SignalGuard, TRACE_DATA_SIGNAL};
use super::table::Cmp;
use libseccomp::{ScmpAction, ScmpCompareOp};

/// Calls whose target a register cannot name at Landlock ABI < 6 (a thread
/// id stands for its whole process; a pidfd is an fd): judged by the supervisor.
pub const SIGNAL_CALLS_NOTIFIED: &[&str] =
    &["kill", "tkill", "rt_sigqueueinfo", "pidfd_send_signal"];
/// Calls whose first argument names a thread-group id (or, for `tkill`, a
/// thread: the main thread's id is the pid): refused on register arguments.
pub(super) const SIGNAL_CALLS_BY_PID: &[&str] = &[
    "kill",
    "tkill",
    "tgkill",
    "rt_sigqueueinfo",
    "rt_tgsigqueueinfo",
    "pidfd_open",
];
pub(super) const F_SETOWN: u64 = 8;
pub(super) const F_SETOWN_EX: u64 = 15;
pub(super) const FIOSETOWN: u64 = 0x8901;
pub(super) const SIOCSPGRP: u64 = 0x8902;
/// `PIDFD_THREAD` (= O_EXCL): the pid may be any thread's id.
pub(super) const PIDFD_THREAD: u64 = 0x80;

/// The calls besides signals that reach into another process and can stop
/// the server without one (issue 40): resource limits (`RLIMIT_CPU` 0 ends
/// it, `RLIMIT_FSIZE` silences its audit, `RLIMIT_NOFILE` stops its
/// accepts), its priority, CPU set and scheduling. `prlimit64` setting the
/// limits of any process but the caller's own (pid 0) is refused, as are
/// `setpriority(PRIO_USER)` and `ioprio_set(IOPRIO_WHO_USER)` (every
/// process of a uid: the server's too, for a root tree or under `wrap`);
/// priority and scheduling calls naming a protected pid are refused. EPERM.
pub(super) fn process_guard_rules(spec: &FilterSpec, rules: &mut Conditional) {
    const PRIO_PROCESS: i64 = 0;
    const PRIO_USER: i64 = 2;
    const IOPRIO_WHO_PROCESS: i64 = 1;
    const IOPRIO_WHO_USER: i64 = 3;
    let eperm = ScmpAction::Errno(libc::EPERM);
    rules.0.push((
        "prlimit64".to_string(),
        Rule {
            action: eperm,
            conds: Vec::new(),
            ops: vec![
                (0, ScmpCompareOp::NotEqual, 0),
                (2, ScmpCompareOp::NotEqual, 0),
            ],
            what: "process guard: prlimit64 setting another process's limits".into(),
        },
    ));
    rules.add(
        "setpriority",
        eperm,
        vec![eq32(0, PRIO_USER)],
        "process guard: setpriority(PRIO_USER)".into(),
    );
    rules.add(
        "ioprio_set",
        eperm,
        vec![eq32(0, IOPRIO_WHO_USER)],
        "process guard: ioprio_set(IOPRIO_WHO_USER)".into(),
    );
    for pid in &spec.protected_pids {
        let pid = i64::from(*pid);
        rules.add(
            "setpriority",
            eperm,
            vec![eq32(0, PRIO_PROCESS), eq32(1, pid)],
            format!("process guard: setpriority({pid})"),
        );
        rules.add(
            "ioprio_set",
            eperm,
            vec![eq32(0, IOPRIO_WHO_PROCESS), eq32(1, pid)],
            format!("process guard: ioprio_set({pid})"),
        );
        for name in [
            "sched_setaffinity",
            "sched_setscheduler",
            "sched_setparam",
            "sched_setattr",
        ] {
            rules.add(
                name,
                eperm,
                vec![eq32(0, pid)],
                format!("process guard: {name}({pid})"),
            );
        }
    }
}

/// The signal guard on register arguments: signals, pidfds and SIGIO
/// ownership aimed at a protected process or group, `kill(-1)`, and
/// `kill(0)` from a protected group.
pub(super) fn signal_guard_rules(spec: &FilterSpec, rules: &mut Conditional) {
    let eperm = ScmpAction::Errno(libc::EPERM);
    for pid in &spec.protected_pids {
        let pid = i64::from(*pid);
        for name in SIGNAL_CALLS_BY_PID {
            rules.add(
                name,
                eperm,
                vec![eq32(0, pid)],
                format!("signal guard: {name}({pid})"),
            );
        }
        for name in ["fcntl", "fcntl64"] {
            rules.add(
                name,
                eperm,
                vec![eq32(1, F_SETOWN as i64), eq32(2, pid)],
                format!("signal guard: {name}(F_SETOWN, {pid})"),
            );
        }
    }
    for pgid in &spec.protected_pgids {
        let neg = -i64::from(*pgid);
        rules.add(
            "kill",
            eperm,
            vec![eq32(0, neg)],
            format!("signal guard: kill({neg})"),
        );
        for name in ["fcntl", "fcntl64"] {
            rules.add(
                name,
                eperm,
                vec![eq32(1, F_SETOWN as i64), eq32(2, neg)],
                format!("signal guard: {name}(F_SETOWN, {neg})"),
            );
        }
    }
    rules.add(
        "kill",
        eperm,
        vec![eq32(0, -1)],
        "signal guard: kill(-1)".into(),
    );
    if spec.refuse_kill_own_group {
        rules.add(
            "kill",
            eperm,
            vec![eq32(0, 0)],
            "signal guard: kill(0) from a protected group".into(),
        );
    }
}

/// Without Landlock's signal scope, the signal guard's calls a register
/// cannot judge: `pidfd_open(PIDFD_THREAD)` goes to the supervisor, the
/// owner calls whose target lies behind a pointer are refused.
pub(super) fn unscoped_signal_rules(spec: &FilterSpec, rules: &mut Conditional) {
    let eperm = ScmpAction::Errno(libc::EPERM);
    if spec.signal_guard == SignalGuard::UserNotif {
        rules.add(
            "pidfd_open",
            trap(spec.backend, TRACE_DATA_SIGNAL),
            vec![Cmp {
                arg: 1,
                mask: PIDFD_THREAD,
                value: PIDFD_THREAD,
            }],
            "signal guard: pidfd_open(PIDFD_THREAD)".into(),
        );
        for name in ["fcntl", "fcntl64"] {
            rules.add(
                name,
                eperm,
                vec![eq32(1, F_SETOWN_EX as i64)],
                format!("signal guard: {name}(F_SETOWN_EX)"),
            );
        }
        for req in [FIOSETOWN, SIOCSPGRP] {
            rules.add(
                "ioctl",
                eperm,
                vec![eq32(1, req as i64)],
                format!("signal guard: ioctl({req:#x})"),
            );
        }
    }
}
