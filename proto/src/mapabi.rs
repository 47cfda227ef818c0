//! The mapping system calls the filter hands to the supervisor when a policy
//! judges executable file mappings (`exec_memory: deny`, `exec_sources:
//! {writable: deny}`): one table for the filter and the supervisor's maps
//! family, as `execabi` is for execs. Every row takes its arguments in
//! registers: `mmap`'s `addr, len, prot, flags, fd, offset`, `mprotect`'s
//! (and `pkey_mprotect`'s) `addr, len, prot`; i386's `mmap` (90,
//! `old_mmap`) takes them in a struct no register rule can read, so the
//! filter refuses it whole where executable mappings are judged, and it is
//! not here.
//!
//! Failure modes: none at run time; a trapped (arch, nr) not in the table is
//! refused by the supervisor as `unexpected_syscall`.

use crate::execabi::{
    AUDIT_ARCH_AARCH64, AUDIT_ARCH_ARM, AUDIT_ARCH_I386, AUDIT_ARCH_X86_64, X32_SYSCALL_BIT,
};

/// Which mapping call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MapKind {
    /// `mmap`/`mmap2`: a new mapping of the file at `fd`.
    Mmap,
    /// `mprotect`/`pkey_mprotect`: what is mapped at `addr..addr+len`
    /// made executable.
    Mprotect,
}

/// One mapping syscall of one ABI.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MapSyscall {
    /// What it does.
    pub kind: MapKind,
    /// The `AUDIT_ARCH_*` value seccomp reports.
    pub arch: u32,
    /// The syscall number as seccomp reports it (x32: with the x32 bit).
    pub nr: i32,
    /// The call's name (the filter's).
    pub name: &'static str,
}

/// The register of the protection bits (both calls).
pub const PROT_ARG: usize = 2;
/// The register of `mmap`'s flags.
pub const FLAGS_ARG: usize = 3;
/// The register of `mmap`'s file descriptor.
pub const FD_ARG: usize = 4;
/// The registers of the address and length (both calls).
pub const ADDR_ARG: usize = 0;
/// See [`ADDR_ARG`].
pub const LEN_ARG: usize = 1;

/// Every register-argument mapping call, on every ABI the filter covers.
pub const MAP_SYSCALLS: &[MapSyscall] = &[
    MapSyscall {
        arch: AUDIT_ARCH_X86_64,
        nr: 9,
        name: "mmap",
        kind: MapKind::Mmap,
    },
    MapSyscall {
        arch: AUDIT_ARCH_X86_64,
        nr: X32_SYSCALL_BIT | 9,
        name: "mmap",
        kind: MapKind::Mmap,
    },
    MapSyscall {
        arch: AUDIT_ARCH_I386,
        nr: 192,
        name: "mmap2",
        kind: MapKind::Mmap,
    },
    MapSyscall {
        arch: AUDIT_ARCH_AARCH64,
        nr: 222,
        name: "mmap",
        kind: MapKind::Mmap,
    },
    MapSyscall {
        arch: AUDIT_ARCH_ARM,
        nr: 192,
        name: "mmap2",
        kind: MapKind::Mmap,
    },
    MapSyscall {
        arch: AUDIT_ARCH_X86_64,
        nr: 10,
        name: "mprotect",
        kind: MapKind::Mprotect,
    },
    MapSyscall {
        arch: AUDIT_ARCH_X86_64,
        nr: X32_SYSCALL_BIT | 10,
        name: "mprotect",
        kind: MapKind::Mprotect,
    },
    MapSyscall {
        arch: AUDIT_ARCH_I386,
        nr: 125,
        name: "mprotect",
        kind: MapKind::Mprotect,
    },
    MapSyscall {
        arch: AUDIT_ARCH_AARCH64,
        nr: 226,
        name: "mprotect",
        kind: MapKind::Mprotect,
    },
    MapSyscall {
        arch: AUDIT_ARCH_ARM,
        nr: 125,
        name: "mprotect",
        kind: MapKind::Mprotect,
    },
    MapSyscall {
        arch: AUDIT_ARCH_X86_64,
        nr: 329,
        name: "pkey_mprotect",
        kind: MapKind::Mprotect,
    },
    MapSyscall {
        arch: AUDIT_ARCH_X86_64,
        nr: X32_SYSCALL_BIT | 329,
        name: "pkey_mprotect",
        kind: MapKind::Mprotect,
    },
    MapSyscall {
        arch: AUDIT_ARCH_I386,
        nr: 380,
        name: "pkey_mprotect",
        kind: MapKind::Mprotect,
    },
    MapSyscall {
        arch: AUDIT_ARCH_AARCH64,
        nr: 288,
        name: "pkey_mprotect",
        kind: MapKind::Mprotect,
    },
    MapSyscall {
        arch: AUDIT_ARCH_ARM,
        nr: 394,
        name: "pkey_mprotect",
        kind: MapKind::Mprotect,
    },
];

/// The mapping call a stop reports, if it is one.
pub fn classify(arch: u32, nr: i32) -> Option<&'static MapSyscall> {
    MAP_SYSCALLS.iter().find(|s| s.arch == arch && s.nr == nr)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn i386s_old_mmap_is_not_a_register_call() {
        assert!(classify(AUDIT_ARCH_I386, 90).is_none());
        assert_eq!(
            classify(AUDIT_ARCH_I386, 192).map(|s| s.name),
            Some("mmap2")
        );
        assert_eq!(classify(AUDIT_ARCH_X86_64, 9).map(|s| s.name), Some("mmap"));
        assert_eq!(
            classify(AUDIT_ARCH_X86_64, 10).map(|s| s.kind),
            Some(MapKind::Mprotect)
        );
    }
}
