//! [`FilterSpec`] → BPF: the rules collected, one step per part of the spec,
//! then handed to libseccomp (`context`).
//!
//! Here are the rules of the filter's own and of the base table: the exec
//! trap, the policy's `syscalls.block`, the marker `prctl`, no second
//! listener, no ptracer named, `chroot` heard of. The rules of each other
//! concern have a room: `exec_memory`, `file_calls`, `net`, `guards`.
//!
//! Order matters to libseccomp: an unconditional rule for a syscall replaces
//! the conditional rules added for it before (whatever their action), so the
//! unconditional ones are decided first and a syscall that has one gets no
//! conditional rule at all (it would be dead code, or lost). Conditional rules
//! of one syscall with different actions are all kept.
//!
//! Failure modes: every libseccomp error is a [`FilterError::Build`] naming
//! the rule; names are checked before any rule is added.

use super::context::{add_rules, build_error, context, export, extra_arches};
use super::error::FilterError;
use super::exec_memory::{exec_map_rules, exec_memory_rules};
use super::file_calls::{truncate_rules, truncating_open_rules, write_call_rules};
use super::guards::{
    process_guard_rules, signal_guard_rules, unscoped_signal_rules, SIGNAL_CALLS_NOTIFIED,
};
use super::net::net_rules;
use super::pin_guard;
use super::rules::{trap, Conditional, Unconditional, LOW32};
use super::spec::{FilterSpec, SignalGuard, TRACE_DATA_EXEC, TRACE_DATA_ROOT, TRACE_DATA_SIGNAL};
use super::table::{Answer, Cmp, When, BASE_RULES, RESERVED};
use agentsh_proto::marker::{MARKER_ERRNO, MARKER_PRCTL_ARG, MARKER_PRCTL_OPTION};
use libseccomp::{ScmpAction, ScmpArch, ScmpSyscall};

/// The BPF program of `spec`, one step per part of it: the names checked,
/// the unconditional rules, the conditional ones (agentsh's own, the base
/// table's, the signal guard's on registers, the guard's rules where
/// Landlock cannot scope signals), then libseccomp's context, the rules
/// added, the program exported.
///
/// # Errors
/// See [`FilterError`].
pub fn program(spec: &FilterSpec) -> Result<Vec<libc::sock_filter>, FilterError> {
    check_names(spec)?;
    let mut always = unconditional_rules(spec);
    let mut conditional = Conditional::default();
    own_rules(&mut conditional);
    base_conditional_rules(&mut conditional);
    signal_guard_rules(spec, &mut conditional);
    process_guard_rules(spec, &mut conditional);
    unscoped_signal_rules(spec, &mut conditional);
    if spec.refuse_exec_memory {
        exec_memory_rules(&mut conditional);
    }
    if spec.refuse_truncate && !spec.trace_files {
        truncating_open_rules(&mut conditional);
    }
    if spec.judge_exec_maps {
        exec_map_rules(spec, &mut conditional);
    }
    if spec.trace_files {
        super::file_calls::traced_file_rules(spec, &mut conditional);
    }
    if spec.explain_writes && !spec.trace_files {
        write_call_rules(spec, &mut always, &mut conditional);
    }
    if spec.backend.trap() == agentsh_proto::wire::Trap::UserNotif {
        nested_vfork_rules(spec, &mut always, &mut conditional);
    }
    net_rules(spec, &mut always, &mut conditional);
    if pin_guard::pins(spec) {
        pin_guard::pin_guard_rules(spec, &mut conditional);
    }
    let arches = extra_arches(spec);
    let i386_apart = arches.contains(&ScmpArch::X86) && old_mmap_refused(spec);
    let mut ctx = context(
        arches
            .iter()
            .filter(|a| !i386_apart || **a != ScmpArch::X86),
        spec,
    )?;
    add_rules(&mut ctx, &always, &conditional)?;
    if i386_apart {
        // i386's `mmap` is `old_mmap`: its arguments are in a struct, so
        // the register rules above would read garbage there (a 64-bit
        // program reaches it with `int 0x80`). libseccomp names a call for
        // every ABI at once, so i386 gets a context of its own, the same
        // rules plus that refusal, merged in.
        let mut i386 = always.clone();
        i386.set(
            "mmap",
            ScmpAction::Errno(libc::EACCES),
            "exec_memory: i386 old_mmap (arguments out of the filter's reach)".into(),
        );
        let mut apart = context([ScmpArch::X86].iter(), spec)?;
        apart
            .remove_arch(ScmpArch::native())
            .map_err(|err| build_error("dropping the native arch from the i386 part", err))?;
        add_rules(&mut apart, &i386, &conditional)?;
        ctx.merge(apart)
            .map_err(|err| build_error("merging the i386 part", err))?;
    }
    export(&ctx)
}

/// Where the filter judges executable memory or mappings, i386's
/// `old_mmap` is refused (see [`program`]).
fn old_mmap_refused(spec: &FilterSpec) -> bool {
    spec.refuse_exec_memory || spec.judge_exec_maps
}

/// The policy's blocklist names only syscalls libseccomp knows and none the
/// filter needs for itself ([`RESERVED`]); checked before any rule is added.
fn check_names(spec: &FilterSpec) -> Result<(), FilterError> {
    for name in &spec.blocked {
        if let Some((_, why)) = RESERVED.iter().find(|(r, _)| r == name) {
            return Err(FilterError::Reserved {
                name: name.clone(),
                why,
            });
        }
        ScmpSyscall::from_name(name).map_err(|_| FilterError::Unknown(name.clone()))?;
    }
    Ok(())
}

/// Yama's `prctl(PR_SET_PTRACER, pid)` ("Yama").
const PR_SET_PTRACER: u64 = 0x5961_6d61;

/// The rules that hold whatever the arguments, in the order that decides
/// which wins for a syscall named twice: the exec trap, the policy's
/// `syscalls.block`, the base table's unconditional rules, the path calls
/// the tracer judges where no Landlock keeps the file rules, (without
/// Landlock's signal scope) the signal calls the supervisor judges, and
/// `chroot`, which the supervisor hears of.
fn unconditional_rules(spec: &FilterSpec) -> Unconditional {
    let mut always = Unconditional::default();
    for name in ["execve", "execveat"] {
        always.set(
            name,
            trap(spec.backend, TRACE_DATA_EXEC),
            "exec supervision".into(),
        );
    }
    for name in &spec.blocked {
        always.set(
            name,
            ScmpAction::Errno(libc::EPERM),
            "policy syscalls.block".into(),
        );
    }
    for rule in BASE_RULES {
        if rule.when == When::Always {
            for name in rule.syscalls {
                always.set(
                    name,
                    ScmpAction::Errno(rule.answer.errno()),
                    format!("base rule for {name}"),
                );
            }
        }
    }
    if spec.trace_files {
        // The tracer walks a tree's paths from the server's root, checked
        // once per tree: no task of it may change its root.
        always.set(
            "chroot",
            ScmpAction::Errno(libc::EPERM),
            "file rules: a tree's root stays the server's".into(),
        );
        // Before the truncate refusal below (no Landlock truncate right):
        // the tracer judges truncate by the file rules instead.
        super::file_calls::traced_file_traps(spec, &mut always);
    }
    if spec.refuse_exec_memory {
        always.set(
            "memfd_create",
            ScmpAction::Errno(libc::EACCES),
            "exec_memory: no memfd".into(),
        );
    }
    if spec.refuse_truncate {
        truncate_rules(spec, &mut always);
    }
    if spec.signal_guard == SignalGuard::UserNotif {
        for name in SIGNAL_CALLS_NOTIFIED {
            always.set(
                name,
                trap(spec.backend, TRACE_DATA_SIGNAL),
                format!("signal guard for {name}"),
            );
        }
    }
    // Last, so a refusal above (the policy's block, the tracer's file
    // rules) stands: a refused chroot changes no root.
    always.set(
        "chroot",
        trap(spec.backend, TRACE_DATA_ROOT),
        "a root changed: the supervisor stops using the tree's kept root".into(),
    );
    always
}

/// agentsh's own rules: the marker `prctl` answers its distinctive errno
/// (a shim inside a filter knows it is supervised), no second user-notify
/// listener can be installed (no second supervisor), and no process of the
/// tree names a ptracer (`PR_SET_PTRACER`: unixwrap named the server before
/// the filter; nothing in the tree may name another, or undo it).
fn own_rules(rules: &mut Conditional) {
    rules.add(
        "prctl",
        ScmpAction::Errno(libc::EPERM),
        vec![Cmp {
            arg: 0,
            mask: LOW32,
            value: PR_SET_PTRACER,
        }],
        "no ptracer named".into(),
    );
    rules.add(
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
    rules.add(
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
}

/// The base table's conditional rules: "any of these bits" is one rule per
/// bit (a rule holds when all its comparisons do), "all of these" one rule
/// with every comparison.
fn base_conditional_rules(rules: &mut Conditional) {
    for rule in BASE_RULES {
        let errno = ScmpAction::Errno(rule.answer.errno());
        match rule.when {
            When::Always => {}
            When::AnyBit { arg, bits } => {
                for name in rule.syscalls {
                    for bit in (0..64).map(|b| 1u64 << b).filter(|b| bits & b != 0) {
                        rules.add(
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
                    rules.add(name, errno, cmps.to_vec(), format!("base rule for {name}"));
                }
            }
        }
    }
    debug_assert!(BASE_RULES
        .iter()
        .all(|r| r.answer == Answer::Eperm || r.when == When::Always));
}

/// Under the notify backend, every vfork-class clone (`vfork`; `clone`
/// with `CLONE_VM | CLONE_VFORK`) goes to the supervisor, which refuses one
/// made by a vfork child (`supervisor::nested_vfork`: its child could keep
/// the memory outside the lineage the exec race guard walks). The `clone`
/// rule is disjoint from the base table's refusals (no `CLONE_PARENT`,
/// `CLONE_FILES` or `CLONE_NEW*` in what it matches), so theirs stand.
fn nested_vfork_rules(spec: &FilterSpec, always: &mut Unconditional, rules: &mut Conditional) {
    use super::table::{CLONE_NEW_FLAGS, CLONE_VFORK_CLASS, CLONE_VFORK_CLASS_MASK};
    let action = super::rules::trap(spec.backend, super::spec::TRACE_DATA_EXEC);
    always.set(
        "vfork",
        action,
        "vfork: a vfork child may not vfork (supervisor)".into(),
    );
    rules.add(
        "clone",
        action,
        vec![Cmp {
            arg: 0,
            mask: CLONE_VFORK_CLASS_MASK | CLONE_NEW_FLAGS,
            value: CLONE_VFORK_CLASS,
        }],
        "clone with CLONE_VM | CLONE_VFORK: a vfork child may not vfork (supervisor)".into(),
    );
}
