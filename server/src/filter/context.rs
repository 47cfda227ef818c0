//! The collected rules handed to libseccomp, and the program exported.
//!
//! libseccomp's context is default ALLOW with the compat architectures the
//! supervisor classifies execs for (another architecture is killed, or
//! answered ENOSYS for the x32 numbers of a kernel that runs none), in the
//! binary-tree layout. Order matters to libseccomp: an unconditional rule
//! for a syscall replaces the conditional rules added for it before, so the
//! unconditional ones are added first and a syscall that has one gets no
//! conditional rule at all.
//!
//! Failure modes: every libseccomp error, and a failure to export the
//! program through a memfd, is a [`FilterError::Build`] naming the step or
//! the rule.

use super::error::FilterError;
use super::rules::{Conditional, Unconditional};
use super::spec::FilterSpec;
use libseccomp::{
    ScmpAction, ScmpArch, ScmpArgCompare, ScmpCompareOp, ScmpFilterContext, ScmpSyscall,
};
use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::os::fd::{FromRawFd, OwnedFd};

/// A libseccomp failure, naming what was being done.
pub(super) fn build_error(what: &str, err: libseccomp::error::SeccompError) -> FilterError {
    FilterError::Build(format!("{what}: {err}"))
}

/// libseccomp's context: default ALLOW, the compat architectures, another
/// architecture killed, the binary-tree layout.
pub(super) fn context<'a>(
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
pub(super) fn add_rules(
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
pub(super) fn extra_arches(spec: &FilterSpec) -> Vec<ScmpArch> {
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
pub(super) fn export(ctx: &ScmpFilterContext) -> Result<Vec<libc::sock_filter>, FilterError> {
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
