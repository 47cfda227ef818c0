//! `chroot(2)` on every ABI the filter covers: the one call left to a task
//! of a tree that changes its root (`pivot_root`, `setns`, `mount` and new
//! mount namespaces are refused by the base filter). The filter hands it to
//! the supervisor, which from then on resolves each exec in the caller's
//! own root instead of the root it keeps for the tree.
//!
//! Failure modes: none at run time; a trapped (arch, nr) that is not here
//! nor in another table is refused by the supervisor as
//! `unexpected_syscall`.

use crate::execabi::{
    AUDIT_ARCH_AARCH64, AUDIT_ARCH_ARM, AUDIT_ARCH_I386, AUDIT_ARCH_X86_64, X32_SYSCALL_BIT,
};

/// `chroot`'s number on each ABI, as seccomp reports it: `(ABI, AUDIT_ARCH_*, nr)`.
pub const CHROOT: &[(&str, u32, i32)] = &[
    ("x86_64", AUDIT_ARCH_X86_64, 161),
    ("x32", AUDIT_ARCH_X86_64, X32_SYSCALL_BIT | 161),
    ("i386", AUDIT_ARCH_I386, 61),
    ("aarch64", AUDIT_ARCH_AARCH64, 51),
    ("arm", AUDIT_ARCH_ARM, 61),
];

/// Whether a stop reports `chroot`.
pub fn is_chroot(arch: u32, nr: i32) -> bool {
    CHROOT.iter().any(|&(_, a, n)| a == arch && n == nr)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chroot_by_abi() {
        assert!(is_chroot(AUDIT_ARCH_X86_64, 161));
        assert!(is_chroot(AUDIT_ARCH_I386, 61));
        // i386's 161 is sched_rr_get_interval, x86_64's 61 wait4.
        assert!(!is_chroot(AUDIT_ARCH_I386, 161));
        assert!(!is_chroot(AUDIT_ARCH_X86_64, 61));
    }
}
