//! [`FilterSpec`] → BPF with libseccomp.
//!
//! Order matters to libseccomp: an unconditional rule for a syscall replaces
//! the conditional rules added for it before (whatever their action), so the
//! unconditional ones are decided first and a syscall that has one gets no
//! conditional rule at all (it would be dead code, or lost). Conditional rules
//! of one syscall with different actions are all kept.
//!
//! Failure modes: every libseccomp error is a [`FilterError::Build`] naming
//! the rule; names are checked before any rule is added.

use super::table::{Answer, Cmp, When, BASE_RULES, RESERVED};
use super::{
    ExecBackend, FilterError, FilterSpec, SignalGuard, TRACE_DATA_EXEC, TRACE_DATA_SIGNAL,
};
use agentsh_proto::marker::{MARKER_ERRNO, MARKER_PRCTL_ARG, MARKER_PRCTL_OPTION};
use libseccomp::{
    ScmpAction, ScmpArch, ScmpArgCompare, ScmpCompareOp, ScmpFilterContext, ScmpSyscall,
};
use std::collections::BTreeMap;
use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::os::fd::{FromRawFd, OwnedFd};

/// Calls whose target a register cannot name at Landlock ABI < 6 (a thread
/// id stands for its whole process; a pidfd is an fd): judged by the supervisor.
pub const SIGNAL_CALLS_NOTIFIED: &[&str] =
    &["kill", "tkill", "rt_sigqueueinfo", "pidfd_send_signal"];
/// Calls whose first argument names a thread-group id (or, for `tkill`, a
/// thread: the main thread's id is the pid): refused on register arguments.
const SIGNAL_CALLS_BY_PID: &[&str] = &[
    "kill",
    "tkill",
    "tgkill",
    "rt_sigqueueinfo",
    "rt_tgsigqueueinfo",
    "pidfd_open",
];
const F_SETOWN: u64 = 8;
const F_SETOWN_EX: u64 = 15;
const FIOSETOWN: u64 = 0x8901;
const SIOCSPGRP: u64 = 0x8902;
/// `PIDFD_THREAD` (= O_EXCL): the pid may be any thread's id.
const PIDFD_THREAD: u64 = 0x80;
const LOW32: u64 = 0xffff_ffff;

/// One rule before it is handed to libseccomp.
struct Rule {
    action: ScmpAction,
    conds: Vec<Cmp>,
    what: String,
}

fn low32(v: i64) -> u64 {
    u64::from(v as u32)
}

fn eq32(arg: u32, v: i64) -> Cmp {
    Cmp {
        arg,
        mask: LOW32,
        value: low32(v),
    }
}

pub fn program(spec: &FilterSpec) -> Result<Vec<libc::sock_filter>, FilterError> {
    for name in &spec.blocked {
        if let Some((_, why)) = RESERVED.iter().find(|(r, _)| r == name) {
            return Err(FilterError::Reserved {
                name: name.clone(),
                why,
            });
        }
        ScmpSyscall::from_name(name).map_err(|_| FilterError::Unknown(name.clone()))?;
    }

    // Unconditional actions, by syscall.
    let mut always: BTreeMap<String, (ScmpAction, String)> = BTreeMap::new();
    let mut set_always = |name: &str, action: ScmpAction, what: String| {
        always.entry(name.to_string()).or_insert((action, what));
    };
    // Where the supervisor's traps go: the notify fd, or the tracer.
    let trap = |data: u16| match spec.backend {
        ExecBackend::Notify => ScmpAction::Notify,
        ExecBackend::Ptrace => ScmpAction::Trace(data),
    };
    for name in ["execve", "execveat"] {
        set_always(name, trap(TRACE_DATA_EXEC), "exec supervision".into());
    }
    for name in &spec.blocked {
        set_always(
            name,
            ScmpAction::Errno(libc::EPERM),
            "policy syscalls.block".into(),
        );
    }
    for rule in BASE_RULES {
        if rule.when == When::Always {
            for name in rule.syscalls {
                set_always(
                    name,
                    ScmpAction::Errno(rule.answer.errno()),
                    format!("base rule for {name}"),
                );
            }
        }
    }
    if spec.signal_guard == SignalGuard::UserNotif {
        for name in SIGNAL_CALLS_NOTIFIED {
            set_always(
                name,
                trap(TRACE_DATA_SIGNAL),
                format!("signal guard for {name}"),
            );
        }
    }

    // Conditional rules, by syscall.
    let mut conditional: Vec<(String, Rule)> = Vec::new();
    let mut add = |name: &str, action: ScmpAction, conds: Vec<Cmp>, what: String| {
        conditional.push((
            name.to_string(),
            Rule {
                action,
                conds,
                what,
            },
        ));
    };
    add(
        "prctl",
        ScmpAction::Errno(MARKER_ERRNO),
        vec![
            Cmp {
                arg: 0,
                mask: LOW32,
                value: MARKER_PRCTL_OPTION,
            },
            Cmp {
                arg: 1,
                mask: u64::MAX,
                value: MARKER_PRCTL_ARG,
            },
        ],
        "the agentsh marker".into(),
    );
    #[allow(clippy::unnecessary_cast)]
    let nl = libc::SECCOMP_FILTER_FLAG_NEW_LISTENER as u64;
    add(
        "seccomp",
        ScmpAction::Errno(libc::EPERM),
        vec![
            Cmp {
                arg: 0,
                mask: u64::MAX,
                value: u64::from(libc::SECCOMP_SET_MODE_FILTER),
            },
            Cmp {
                arg: 1,
                mask: nl,
                value: nl,
            },
        ],
        "no second listener".into(),
    );
    for rule in BASE_RULES {
        let errno = ScmpAction::Errno(rule.answer.errno());
        match rule.when {
            When::Always => {}
            When::AnyBit { arg, bits } => {
                for name in rule.syscalls {
                    for bit in (0..64).map(|b| 1u64 << b).filter(|b| bits & b != 0) {
                        add(
                            name,
                            errno,
                            vec![Cmp {
                                arg,
                                mask: bit,
                                value: bit,
                            }],
                            format!("base rule for {name} (bit {bit:#x})"),
                        );
                    }
                }
            }
            When::All(cmps) => {
                for name in rule.syscalls {
                    add(name, errno, cmps.to_vec(), format!("base rule for {name}"));
                }
            }
        }
    }
    debug_assert!(BASE_RULES
        .iter()
        .all(|r| r.answer == Answer::Eperm || r.when == When::Always));

    // The signal guard on register arguments.
    let eperm = ScmpAction::Errno(libc::EPERM);
    for pid in &spec.protected_pids {
        let pid = i64::from(*pid);
        for name in SIGNAL_CALLS_BY_PID {
            add(
                name,
                eperm,
                vec![eq32(0, pid)],
                format!("signal guard: {name}({pid})"),
            );
        }
        for name in ["fcntl", "fcntl64"] {
            add(
                name,
                eperm,
                vec![eq32(1, F_SETOWN as i64), eq32(2, pid)],
                format!("signal guard: {name}(F_SETOWN, {pid})"),
            );
        }
    }
    for pgid in &spec.protected_pgids {
        let neg = -i64::from(*pgid);
        add(
            "kill",
            eperm,
            vec![eq32(0, neg)],
            format!("signal guard: kill({neg})"),
        );
        for name in ["fcntl", "fcntl64"] {
            add(
                name,
                eperm,
                vec![eq32(1, F_SETOWN as i64), eq32(2, neg)],
                format!("signal guard: {name}(F_SETOWN, {neg})"),
            );
        }
    }
    add(
        "kill",
        eperm,
        vec![eq32(0, -1)],
        "signal guard: kill(-1)".into(),
    );
    if spec.refuse_kill_own_group {
        add(
            "kill",
            eperm,
            vec![eq32(0, 0)],
            "signal guard: kill(0) from a protected group".into(),
        );
    }
    if spec.signal_guard == SignalGuard::UserNotif {
        add(
            "pidfd_open",
            trap(TRACE_DATA_SIGNAL),
            vec![Cmp {
                arg: 1,
                mask: PIDFD_THREAD,
                value: PIDFD_THREAD,
            }],
            "signal guard: pidfd_open(PIDFD_THREAD)".into(),
        );
        for name in ["fcntl", "fcntl64"] {
            add(
                name,
                eperm,
                vec![eq32(1, F_SETOWN_EX as i64)],
                format!("signal guard: {name}(F_SETOWN_EX)"),
            );
        }
        for req in [FIOSETOWN, SIOCSPGRP] {
            add(
                "ioctl",
                eperm,
                vec![eq32(1, req as i64)],
                format!("signal guard: ioctl({req:#x})"),
            );
        }
    }

    let e = |what: &str, err: libseccomp::error::SeccompError| {
        FilterError::Build(format!("{what}: {err}"))
    };
    let mut ctx =
        ScmpFilterContext::new(ScmpAction::Allow).map_err(|err| e("seccomp_init", err))?;
    for arch in extra_arches() {
        ctx.add_arch(arch)
            .map_err(|err| e(&format!("adding arch {arch:?}"), err))?;
    }
    // gVisor's seccomp reports no SECCOMP_RET_KILL_PROCESS to libseccomp's
    // probe: there a syscall of another architecture kills the thread.
    if ctx.set_act_badarch(ScmpAction::KillProcess).is_err() {
        ctx.set_act_badarch(ScmpAction::KillThread)
            .map_err(|err| e("setting the bad-arch action", err))?;
    }
    // A binary tree over syscall numbers: every syscall of the tree runs this
    // program, and with ~60 rules per arch a linear chain would cost each
    // one dozens of comparisons.
    ctx.set_ctl_optimize(2)
        .map_err(|err| e("asking for the binary-tree layout", err))?;
    let syscall =
        |name: &str| ScmpSyscall::from_name(name).map_err(|err| e(&format!("syscall {name}"), err));
    for (name, (action, what)) in &always {
        ctx.add_rule(*action, syscall(name)?)
            .map_err(|err| e(what, err))?;
    }
    for (name, rule) in &conditional {
        if always.contains_key(name) {
            continue;
        }
        let conds: Vec<ScmpArgCompare> = rule
            .conds
            .iter()
            .map(|c| ScmpArgCompare::new(c.arg, ScmpCompareOp::MaskedEqual(c.mask), c.value))
            .collect();
        ctx.add_rule_conditional(rule.action, syscall(name)?, &conds)
            .map_err(|err| e(&rule.what, err))?;
    }
    export(&ctx)
}

/// The compat ABIs of [`agentsh_proto::execabi::filter_abis`] (the native one
/// is the context's own): the supervisor classifies execs from the same table.
fn extra_arches() -> Vec<ScmpArch> {
    agentsh_proto::execabi::filter_abis()
        .iter()
        .skip(1)
        .filter_map(|abi| match *abi {
            "i386" => Some(ScmpArch::X86),
            "x32" => Some(ScmpArch::X32),
            "arm" => Some(ScmpArch::Arm),
            _ => None,
        })
        .collect()
}

/// Exports the BPF through a memfd (libseccomp 2.5.4 has no export-to-memory).
fn export(ctx: &ScmpFilterContext) -> Result<Vec<libc::sock_filter>, FilterError> {
    let err = |what: &str, e: &dyn std::fmt::Display| FilterError::Build(format!("{what}: {e}"));
    // SAFETY: the name is a NUL-terminated literal; the result is checked.
    let fd = unsafe { libc::memfd_create(c"agentsh-bpf".as_ptr(), libc::MFD_CLOEXEC) };
    if fd < 0 {
        return Err(err(
            "memfd_create for the BPF export",
            &std::io::Error::last_os_error(),
        ));
    }
    // SAFETY: fd is a fresh descriptor we own.
    let mut file = File::from(unsafe { OwnedFd::from_raw_fd(fd) });
    ctx.export_bpf(&file)
        .map_err(|e| err("exporting the BPF", &e))?;
    let mut raw = Vec::new();
    file.seek(SeekFrom::Start(0))
        .and_then(|_| file.read_to_end(&mut raw))
        .map_err(|e| err("reading the exported BPF", &e))?;
    agentsh_proto::bpf::decode_raw(&raw).map_err(FilterError::Build)
}
