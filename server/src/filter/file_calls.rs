//! The filter's rules on calls that change files: where Landlock has no
//! truncate right (below ABI 3) the truncating calls and opens it cannot
//! judge are refused, and where the policy explains writes the calls that
//! change files go to the supervisor (Landlock still decides).
//!
//! Why: below ABI 3 Landlock judges an `open` with `O_TRUNC` by its access
//! mode alone, so a read-only open could truncate a file the tree may only
//! read; `openat2`'s flags are in memory, out of the filter's reach.
//!
//! Failure modes: none here (rules are only collected); what libseccomp
//! refuses of them is a `FilterError::Build` when they are added
//! (`context::add_rules`). The explaining rules are disjoint from the
//! refusing ones, so a refusal stands where both would match.

use super::rules::{trap, Conditional, Unconditional};
use super::spec::{FilterSpec, TRACE_DATA_FILE};
use super::table::Cmp;
use libseccomp::{ScmpAction, ScmpSyscall};

/// The path calls the tracer judges (no Landlock) that registers can tell
/// name nothing the rules keep, and so need no stop: an `open`/`openat`
/// with `O_PATH` (it opens nothing for reading or writing), a
/// `utimensat`/`futimesat` with a NULL path (it acts on its fd, which an
/// open judged). What each traps on: (name, (argument, what)).
pub(super) const ON_REGISTERS: [(&str, (u32, OnRegister)); 4] = [
    ("open", (1, OnRegister::NoPathFlag)),
    ("openat", (2, OnRegister::NoPathFlag)),
    ("utimensat", (1, OnRegister::NonNull)),
    ("futimesat", (1, OnRegister::NonNull)),
];

/// When a call of [`ON_REGISTERS`] stops at the tracer.
#[derive(Clone, Copy)]
pub(super) enum OnRegister {
    /// Its flags argument has no `O_PATH`.
    NoPathFlag,
    /// Its path argument is not NULL.
    NonNull,
}

/// Where the tracer keeps the file rules: every path call goes to it,
/// whatever its arguments, but those of [`ON_REGISTERS`]
/// ([`traced_file_rules`]). A name this libseccomp does not know is not
/// trapped (`fchmodat2` before 2.5.5: a mode change only; the kernel's
/// glibc falls back to `fchmodat`).
pub(super) fn traced_file_traps(spec: &FilterSpec, always: &mut Unconditional) {
    for name in agentsh_proto::fileabi::names() {
        if ON_REGISTERS.iter().any(|(n, _)| *n == name) {
            continue;
        }
        if ScmpSyscall::from_name(name).is_ok() {
            always.set(
                name,
                trap(spec.backend, TRACE_DATA_FILE),
                format!("file rules for {name} (no Landlock)"),
            );
        }
    }
}

/// Where the tracer keeps the file rules: the calls of [`ON_REGISTERS`]
/// trapped only when registers say they name something (the others are
/// trapped whatever their arguments, as unconditional rules).
pub(super) fn traced_file_rules(spec: &FilterSpec, rules: &mut Conditional) {
    const O_PATH: u64 = libc::O_PATH as u64;
    for (name, (arg, when)) in ON_REGISTERS {
        if ScmpSyscall::from_name(name).is_err() {
            continue;
        }
        let action = trap(spec.backend, TRACE_DATA_FILE);
        let what = format!("file rules for {name} (no Landlock)");
        match when {
            OnRegister::NoPathFlag if spec.skip_read_opens => {
                // Only an open that may change the file stops: one rule per
                // flag that asks for it (write access, either bit of the
                // access mode; creation; truncation), each with no O_PATH
                // (one masked comparison: libseccomp takes one per argument).
                for (bit, flag) in [
                    (libc::O_WRONLY, "O_WRONLY"),
                    (libc::O_RDWR, "O_RDWR"),
                    (libc::O_CREAT, "O_CREAT"),
                    (libc::O_TRUNC, "O_TRUNC"),
                ] {
                    let bit = bit as u64;
                    rules.add(
                        name,
                        action,
                        vec![Cmp {
                            arg,
                            mask: O_PATH | bit,
                            value: bit,
                        }],
                        format!("{what}, {flag} (tracer_reads: unjudged)"),
                    );
                }
            }
            OnRegister::NoPathFlag => rules.add(
                name,
                action,
                vec![Cmp {
                    arg,
                    mask: O_PATH,
                    value: 0,
                }],
                what,
            ),
            OnRegister::NonNull => rules.add_op(
                name,
                action,
                Vec::new(),
                (arg, libseccomp::ScmpCompareOp::NotEqual, 0),
                what,
            ),
        }
    }
}

/// Below Landlock ABI 3 (no truncate right): `truncate(2)` refused, and
/// `openat2` answered ENOSYS (see [`truncating_open_rules`] for `open`).
pub(super) fn truncate_rules(spec: &FilterSpec, always: &mut Unconditional) {
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
pub(super) fn truncating_open_rules(rules: &mut Conditional) {
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
pub(super) fn write_call_rules(
    spec: &FilterSpec,
    always: &mut Unconditional,
    rules: &mut Conditional,
) {
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
