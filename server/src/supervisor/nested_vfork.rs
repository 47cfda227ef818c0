//! A vfork child may not vfork (issue 61): the filter (notify backend)
//! sends every vfork-class clone here (`vfork`, `clone` with `CLONE_VM |
//! CLONE_VFORK`), and one whose caller shares its memory with its parent
//! (it is itself a vfork child) is refused.
//!
//! Why: a process shares another's memory only as its thread or its vfork
//! child (the filter refuses any other `CLONE_VM`). A vfork child's own
//! vfork child B, once its parent A is killed, is reparented out of the
//! lineage while still sharing the memory of A's vfork parent U, which
//! runs again: no interface tells who else holds an address space, so U's
//! exec would be taken for a lone caller's and B could rewrite its path and
//! argv between the check and the kernel's read (the orphaned sharer of
//! `execve.watch: shared`). Refusing the nested vfork makes B impossible.
//! POSIX leaves a vfork child's calls other than `_exit` and the exec
//! functions undefined; `posix_spawn`, `system` and python's `subprocess`
//! vfork from ordinary processes, which this lets through after one look.
//!
//! Failure modes: a caller whose parent cannot be read, or whose sharing
//! cannot be told, is refused (`nested_vfork`), never let through on a
//! guess.

use super::context::SupervisorContext;
use super::seam::{Caught, Stop};
use super::tasks::Tasks;
use super::tree::Tree;
use crate::audit::{Action, EventBody, ExecEvent, ExecSubject};
use crate::policy::Decision;
use crate::vocab::Refusal;

const AUDIT_ARCH_X86_64: u32 = 0xC000_003E;
const AUDIT_ARCH_I386: u32 = 0x4000_0003;
const AUDIT_ARCH_AARCH64: u32 = 0xC000_00B7;
const X32_BIT: i32 = 0x4000_0000;

/// Whether `nr` of ABI `arch` is `vfork` or `clone` (the filter sends a
/// `clone` here only with `CLONE_VM | CLONE_VFORK`). Pure.
pub fn classify(arch: u32, nr: i32) -> bool {
    match arch {
        AUDIT_ARCH_X86_64 => matches!(nr & !X32_BIT, 56 | 58),
        AUDIT_ARCH_I386 => matches!(nr, 120 | 190),
        AUDIT_ARCH_AARCH64 => nr == 220,
        _ => false,
    }
}

/// Lets the clone run unless its caller is itself a vfork child.
pub fn handle(
    ctx: &SupervisorContext,
    tree: &Tree,
    tasks: &mut Tasks,
    c: &Caught,
    stop: &dyn Stop,
) {
    let why = match tasks.files.stat_now(c.tid) {
        // No parent in this namespace, or init's (the entrypoint, or the
        // host's init under wrap): no tree process is their vfork child.
        Ok(st) if st.ppid <= 1 => None,
        Ok(st) => match super::sharing::shares_with_parent(c.tid, st.ppid, &mut tasks.files) {
            Ok(false) => None,
            Ok(true) => Some(format!(
                "process {} shares its parent {}'s memory (a vfork child): a vfork of its own \
                 would make a process that keeps that memory if it dies, outside every check \
                 of an exec's strings",
                c.tgid.unwrap_or(c.tid),
                st.ppid
            )),
            Err(e) => Some(format!(
                "whether the caller shares its parent's memory cannot be told: {e}"
            )),
        },
        Err(e) => Some(format!("the caller's parent cannot be read: {e}")),
    };
    let Some(why) = why else {
        let _ = stop.proceed();
        return;
    };
    let rule = Refusal::NestedVfork.rule();
    if ctx.limits.explain == crate::config::Explain::Stderr {
        crate::explain::tell(c.tid, &crate::explain::line("vfork", rule, Some(&why)));
    }
    ctx.audit.record(
        &tree.session_id,
        EventBody::Execve(ExecEvent::new(
            ExecSubject {
                pid: c.tid,
                ..ExecSubject::default()
            },
            Decision::Deny,
            rule,
            Action::Deny,
            Some(why),
        )),
    );
    let _ = stop.refuse(libc::EPERM);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vfork_and_clone_are_known_on_each_abi_and_nothing_else() {
        assert!(classify(AUDIT_ARCH_X86_64, 56));
        assert!(classify(AUDIT_ARCH_X86_64, 58));
        assert!(classify(AUDIT_ARCH_X86_64, X32_BIT | 58));
        assert!(classify(AUDIT_ARCH_I386, 190));
        assert!(classify(AUDIT_ARCH_I386, 120));
        assert!(classify(AUDIT_ARCH_AARCH64, 220));
        assert!(!classify(AUDIT_ARCH_X86_64, 57)); // fork
        assert!(!classify(AUDIT_ARCH_X86_64, 59)); // execve
        assert!(!classify(AUDIT_ARCH_I386, 56));
    }
}
