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

use super::error::FilterError;
use super::guards::{
    process_guard_rules, signal_guard_rules, unscoped_signal_rules, SIGNAL_CALLS_NOTIFIED,
};
use super::rules::{eq32, trap, Conditional, Unconditional, LOW32};
use super::spec::{
    FilterSpec, SignalGuard, TRACE_DATA_EXEC, TRACE_DATA_FILE, TRACE_DATA_MAP, TRACE_DATA_NET,
    TRACE_DATA_ROOT, TRACE_DATA_SIGNAL,
};
use super::table::{Answer, Cmp, When, BASE_RULES, RESERVED};
use agentsh_proto::marker::{MARKER_ERRNO, MARKER_PRCTL_ARG, MARKER_PRCTL_OPTION};
use libseccomp::{
    ScmpAction, ScmpArch, ScmpArgCompare, ScmpCompareOp, ScmpFilterContext, ScmpSyscall,
};
use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::os::fd::{FromRawFd, OwnedFd};

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
    if spec.explain_writes && !spec.trace_files {
        write_call_rules(spec, &mut always, &mut conditional);
    }
    net_rules(spec, &mut always, &mut conditional);
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

/// A file mapped executable (`mmap`/`mmap2` with `PROT_EXEC`, neither
/// `PROT_WRITE` nor `MAP_ANONYMOUS`: the `exec_memory` rules refuse those)
/// goes to the supervisor, which judges the file behind the fd (its `maps`
/// family), and so does `mprotect`/`pkey_mprotect` to executable where
/// `exec_memory` does not refuse it. The rules are disjoint from the
/// `exec_memory` ones.
fn exec_map_rules(spec: &FilterSpec, rules: &mut Conditional) {
    const PROT_EXEC: u64 = libc::PROT_EXEC as u64;
    const PROT_WRITE: u64 = libc::PROT_WRITE as u64;
    const MAP_ANONYMOUS: u64 = libc::MAP_ANONYMOUS as u64;
    for name in ["mmap", "mmap2"] {
        rules.add(
            name,
            trap(spec.backend, TRACE_DATA_MAP),
            vec![
                Cmp {
                    arg: agentsh_proto::mapabi::PROT_ARG as u32,
                    mask: PROT_EXEC | PROT_WRITE,
                    value: PROT_EXEC,
                },
                Cmp {
                    arg: agentsh_proto::mapabi::FLAGS_ARG as u32,
                    mask: MAP_ANONYMOUS,
                    value: 0,
                },
            ],
            format!("exec maps: {name} of a file, executable, judged by the supervisor"),
        );
    }
    // What is mapped already, made executable: under `exec_memory: deny`
    // the rules above refuse every such call; otherwise the supervisor
    // judges what lies in the range (a library the tree wrote, mapped
    // readable first, is still a library the tree wrote).
    if !spec.refuse_exec_memory {
        for name in ["mprotect", "pkey_mprotect"] {
            rules.add(
                name,
                trap(spec.backend, TRACE_DATA_MAP),
                vec![Cmp {
                    arg: agentsh_proto::mapabi::PROT_ARG as u32,
                    mask: PROT_EXEC,
                    value: PROT_EXEC,
                }],
                format!("exec maps: {name} to executable, judged by the supervisor"),
            );
        }
    }
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
        // the tracer judges truncate by the file rules instead. A name this
        // libseccomp does not know is not trapped (`fchmodat2` before
        // 2.5.5: a mode change only; the kernel's glibc falls back to
        // `fchmodat`).
        for name in agentsh_proto::fileabi::names() {
            if ScmpSyscall::from_name(name).is_ok() {
                always.set(
                    name,
                    trap(spec.backend, TRACE_DATA_FILE),
                    format!("file rules for {name} (no Landlock)"),
                );
            }
        }
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

/// Below Landlock ABI 3 (no truncate right): `truncate(2)` refused, and
/// `openat2` answered ENOSYS (see [`truncating_open_rules`] for `open`).
fn truncate_rules(spec: &FilterSpec, always: &mut Unconditional) {
    for name in ["truncate", "truncate64"] {
        always.set(
            name,
            ScmpAction::Errno(libc::EPERM),
            "no Landlock truncate right below ABI 3".into(),
        );
    }
    // `struct open_how` is out of the filter's reach (its flags are in
    // memory): ENOSYS, so a caller falls back to `openat`, whose flags
    // the conditional rules judge. Where the tracer keeps the file rules
    // it judges openat2 itself.
    if !spec.trace_files {
        always.set(
            "openat2",
            ScmpAction::Errno(libc::ENOSYS),
            "no Landlock truncate right below ABI 3: openat2's flags unread".into(),
        );
    }
}

/// Below Landlock ABI 3 truncation is no Landlock right, and the kernel
/// truncates on an `open` with `O_TRUNC` whose access mode is read-only (or
/// 3, which opens for neither) wherever write permission allows (a root
/// tree: `shim.conf`), while Landlock judges the open by its access mode
/// alone: read. Such opens are refused (EACCES, as Landlock refuses a
/// truncation from ABI 3). An open for writing with `O_TRUNC` needs
/// Landlock's write right, which covers it.
fn truncating_open_rules(rules: &mut Conditional) {
    const ACC_TRUNC: u64 = (libc::O_ACCMODE | libc::O_TRUNC) as u64;
    const TRUNC: u64 = libc::O_TRUNC as u64;
    const NEITHER: u64 = libc::O_ACCMODE as u64;
    for (name, arg) in [("open", 1), ("openat", 2)] {
        for value in [TRUNC, TRUNC | NEITHER] {
            rules.add(
                name,
                ScmpAction::Errno(libc::EACCES),
                vec![Cmp {
                    arg,
                    mask: ACC_TRUNC,
                    value,
                }],
                format!(
                    "{name}: O_TRUNC without write access (no Landlock truncate right below ABI 3)"
                ),
            );
        }
    }
}

/// `FilterSpec::explain_writes`: the calls that change files, to the
/// supervisor (Landlock still decides). `open`/`openat` only when their
/// flags write, create or truncate, in rules disjoint from
/// [`truncating_open_rules`] (whose refusal must stand where both would
/// match: an open with `O_TRUNC` and no write access below ABI 3).
/// `openat2` answers ENOSYS already; `truncate` is ruled on its own.
fn write_call_rules(spec: &FilterSpec, always: &mut Unconditional, rules: &mut Conditional) {
    const ACC: u64 = libc::O_ACCMODE as u64;
    const WR: u64 = libc::O_WRONLY as u64;
    const RDWR: u64 = libc::O_RDWR as u64;
    const CREAT: u64 = libc::O_CREAT as u64;
    const TRUNC: u64 = libc::O_TRUNC as u64;
    let action = trap(spec.backend, TRACE_DATA_FILE);
    // (mask, value) pairs over the flags.
    let mut flag_rules: Vec<(u64, u64)> = vec![(ACC, WR), (ACC, RDWR)];
    // Read-only (or neither) with O_CREAT and without O_TRUNC.
    flag_rules.extend([
        (ACC | CREAT | TRUNC, CREAT),
        (ACC | CREAT | TRUNC, CREAT | ACC),
    ]);
    if !spec.refuse_truncate {
        // Read-only (or neither) with O_TRUNC: Landlock's truncate right.
        flag_rules.extend([(ACC | TRUNC, TRUNC), (ACC | TRUNC, TRUNC | ACC)]);
    }
    for (name, arg) in [("open", 1), ("openat", 2)] {
        for &(mask, value) in &flag_rules {
            rules.add(
                name,
                action,
                vec![Cmp { arg, mask, value }],
                format!(
                    "{name} that writes, creates or truncates: explained where Landlock refuses"
                ),
            );
        }
    }
    for call in agentsh_proto::fileabi::changes() {
        if ScmpSyscall::from_name(call).is_ok() {
            always.set(
                call,
                action,
                format!("{call}: explained where Landlock refuses"),
            );
        }
    }
}

/// The policy's `exec_memory: deny`, on register arguments (EACCES, as a
/// refused `execmem` is): memory a program writes itself never becomes code.
/// `mmap`/`mmap2` of executable anonymous memory, or of a mapping both
/// writable and executable; `mprotect`/`pkey_mprotect` to executable (a
/// file's code is mapped executable by `mmap`, never changed to it); `shmat`
/// with `SHM_EXEC`; `memfd_create` (a memfd is the file a program writes and
/// maps executable); `personality` adding `READ_IMPLIES_EXEC` (readable
/// then means executable). A file the tree wrote, mapped executable from a
/// read-only fd, is not caught here (see docs/security-model.md).
fn exec_memory_rules(rules: &mut Conditional) {
    const PROT_EXEC: u64 = libc::PROT_EXEC as u64;
    const PROT_WRITE: u64 = libc::PROT_WRITE as u64;
    const MAP_ANONYMOUS: u64 = libc::MAP_ANONYMOUS as u64;
    const SHM_EXEC: u64 = 0o100000;
    let eacces = ScmpAction::Errno(libc::EACCES);
    for name in ["mmap", "mmap2"] {
        rules.add(
            name,
            eacces,
            vec![
                Cmp {
                    arg: 2,
                    mask: PROT_EXEC,
                    value: PROT_EXEC,
                },
                Cmp {
                    arg: 3,
                    mask: MAP_ANONYMOUS,
                    value: MAP_ANONYMOUS,
                },
            ],
            format!("exec_memory: {name} of executable anonymous memory"),
        );
        rules.add(
            name,
            eacces,
            vec![Cmp {
                arg: 2,
                mask: PROT_EXEC | PROT_WRITE,
                value: PROT_EXEC | PROT_WRITE,
            }],
            format!("exec_memory: {name} writable and executable"),
        );
    }
    for name in ["mprotect", "pkey_mprotect"] {
        rules.add(
            name,
            eacces,
            vec![Cmp {
                arg: 2,
                mask: PROT_EXEC,
                value: PROT_EXEC,
            }],
            format!("exec_memory: {name} to executable"),
        );
    }
    rules.add(
        "shmat",
        eacces,
        vec![Cmp {
            arg: 2,
            mask: SHM_EXEC,
            value: SHM_EXEC,
        }],
        "exec_memory: shmat with SHM_EXEC".into(),
    );
    // READ_IMPLIES_EXEC makes every readable mapping executable, though no
    // register the rules above read says PROT_EXEC. The kernel reads the
    // low 32 bits, and 0xffffffff only asks: refused is the bit with any
    // other of those clear, one rule per other bit (libseccomp takes one
    // comparison per argument and rule).
    const READ_IMPLIES_EXEC: u64 = 0x0040_0000;
    for other in (0..32)
        .map(|b| 1u64 << b)
        .filter(|b| *b != READ_IMPLIES_EXEC)
    {
        rules.add(
            "personality",
            eacces,
            vec![Cmp {
                arg: 0,
                mask: READ_IMPLIES_EXEC | other,
                value: READ_IMPLIES_EXEC,
            }],
            format!("exec_memory: personality(READ_IMPLIES_EXEC), bit {other:#x} clear"),
        );
    }
}

/// One past the largest address family (`AF_MAX` on Linux 6.x).
const AF_MAX: u64 = 46;
const AF_INET: i64 = 2;
const AF_INET6: i64 = 10;
/// `SOCK_TYPE_MASK`: the type without `SOCK_NONBLOCK | SOCK_CLOEXEC`.
const SOCK_TYPE_MASK: u64 = 0xf;

/// The policy's network part (see [`super::spec::NetFilter`]):
/// * `socket_families`: `socket`/`socketpair` of another family fail with
///   EAFNOSUPPORT (each family below `AF_MAX` not listed, and every value
///   from `AF_MAX` up);
/// * `egress`: `connect`, `sendmsg`, `sendmmsg` and `sendto` with a
///   destination (argument 4 not NULL) go to the supervisor, which judges
///   the destination and performs the call (`supervisor::egress`); an inet
///   or inet6 socket is a stream or datagram socket of protocol 0, TCP or
///   UDP (raw, packet, ICMP "ping", SCTP, UDP-Lite: EPERM). A `sendto`
///   without destination (`send`, and `write` on any socket) is not trapped:
///   it goes where a judged `connect` pointed the socket.
///
/// The policy's `syscalls.block` and the base rules win over the traps (a
/// syscall they name keeps their answer).
fn net_rules(spec: &FilterSpec, always: &mut Unconditional, rules: &mut Conditional) {
    let eafnosupport = ScmpAction::Errno(libc::EAFNOSUPPORT);
    let eperm = ScmpAction::Errno(libc::EPERM);
    if let Some(allowed) = &spec.net.families {
        for name in ["socket", "socketpair"] {
            for f in (0..AF_MAX).filter(|f| !allowed.contains(&(*f as u32))) {
                rules.add(
                    name,
                    eafnosupport,
                    vec![eq32(0, f as i64)],
                    format!("socket_families: {name}({f})"),
                );
            }
            rules.add_op(
                name,
                eafnosupport,
                Vec::new(),
                (0, ScmpCompareOp::GreaterEqual, AF_MAX),
                format!("socket_families: {name}(>= {AF_MAX})"),
            );
        }
    }
    if !spec.net.egress {
        return;
    }
    for family in [AF_INET, AF_INET6] {
        if spec.net.egress_allows_all {
            break;
        }
        for ty in [
            libc::SOCK_RAW,
            libc::SOCK_RDM,
            libc::SOCK_SEQPACKET,
            libc::SOCK_DCCP,
            10, // SOCK_PACKET (obsolete; AF_PACKET is refused by family)
        ] {
            rules.add(
                "socket",
                eperm,
                vec![
                    eq32(0, family),
                    Cmp {
                        arg: 1,
                        mask: SOCK_TYPE_MASK,
                        value: ty as u64,
                    },
                ],
                format!("egress: socket({family}, type {ty})"),
            );
        }
        // Protocols 0, 6 (TCP) and 17 (UDP) only.
        for proto in (1..6).chain(7..17) {
            rules.add(
                "socket",
                eperm,
                vec![eq32(0, family), eq32(2, proto)],
                format!("egress: socket({family}, protocol {proto})"),
            );
        }
        rules.add_op(
            "socket",
            eperm,
            vec![eq32(0, family)],
            (2, ScmpCompareOp::GreaterEqual, 18),
            format!("egress: socket({family}, protocol >= 18)"),
        );
    }
    let net = trap(spec.backend, TRACE_DATA_NET);
    for name in ["connect", "sendmsg", "sendmmsg"] {
        always.set(name, net, format!("egress: {name}"));
    }
    rules.add_op(
        "sendto",
        net,
        Vec::new(),
        (4, ScmpCompareOp::NotEqual, 0),
        "egress: sendto with a destination".into(),
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

/// A libseccomp failure, naming what was being done.
fn build_error(what: &str, err: libseccomp::error::SeccompError) -> FilterError {
    FilterError::Build(format!("{what}: {err}"))
}

/// libseccomp's context: default ALLOW, the compat architectures, another
/// architecture killed, the binary-tree layout.
fn context<'a>(
    arches: impl Iterator<Item = &'a ScmpArch>,
    spec: &FilterSpec,
) -> Result<ScmpFilterContext, FilterError> {
    let e = build_error;
    let mut ctx =
        ScmpFilterContext::new(ScmpAction::Allow).map_err(|err| e("seccomp_init", err))?;
    for arch in arches {
        ctx.add_arch(*arch)
            .map_err(|err| e(&format!("adding arch {arch:?}"), err))?;
    }
    // Without the x32 ABI (a kernel that runs none) its numbers are the
    // only ones of an ABI the program leaves out: ENOSYS, as that kernel
    // answers them.
    if !spec.x32 && cfg!(target_arch = "x86_64") {
        ctx.set_act_badarch(ScmpAction::Errno(libc::ENOSYS))
            .map_err(|err| e("setting the bad-arch action", err))?;
    // gVisor's seccomp reports no SECCOMP_RET_KILL_PROCESS to libseccomp's
    // probe: there a syscall of another architecture kills the thread.
    } else if ctx.set_act_badarch(ScmpAction::KillProcess).is_err() {
        ctx.set_act_badarch(ScmpAction::KillThread)
            .map_err(|err| e("setting the bad-arch action", err))?;
    }
    // A binary tree over syscall numbers: every syscall of the tree runs this
    // program, and with ~60 rules per arch a linear chain would cost each
    // one dozens of comparisons.
    ctx.set_ctl_optimize(2)
        .map_err(|err| e("asking for the binary-tree layout", err))?;
    Ok(ctx)
}

/// The rules, unconditional first (see the module doc); a syscall with an
/// unconditional rule gets none of its conditional ones.
fn add_rules(
    ctx: &mut ScmpFilterContext,
    always: &Unconditional,
    conditional: &Conditional,
) -> Result<(), FilterError> {
    let e = build_error;
    let syscall =
        |name: &str| ScmpSyscall::from_name(name).map_err(|err| e(&format!("syscall {name}"), err));
    for (name, (action, what)) in &always.0 {
        ctx.add_rule(*action, syscall(name)?)
            .map_err(|err| e(what, err))?;
    }
    for (name, rule) in &conditional.0 {
        if always.0.contains_key(name) {
            continue;
        }
        let conds: Vec<ScmpArgCompare> = rule
            .conds
            .iter()
            .map(|c| ScmpArgCompare::new(c.arg, ScmpCompareOp::MaskedEqual(c.mask), c.value))
            .chain(
                rule.ops
                    .iter()
                    .map(|(arg, op, v)| ScmpArgCompare::new(*arg, *op, *v)),
            )
            .collect();
        ctx.add_rule_conditional(rule.action, syscall(name)?, &conds)
            .map_err(|err| e(&rule.what, err))?;
    }
    Ok(())
}

/// The compat ABIs of [`agentsh_proto::execabi::filter_abis`] (the native one
/// is the context's own): the supervisor classifies execs from the same table.
/// x32 only where `spec` says the kernel runs it.
fn extra_arches(spec: &FilterSpec) -> Vec<ScmpArch> {
    agentsh_proto::execabi::filter_abis()
        .iter()
        .skip(1)
        .filter(|abi| spec.x32 || **abi != "x32")
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
