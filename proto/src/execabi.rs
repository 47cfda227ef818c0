//! The exec system calls of every ABI a supervised tree may use: one table,
//! read by the server's filter compiler (which architectures the seccomp
//! program covers) and by the supervisor (which notification is an exec and
//! how wide its pointers are).
//!
//! Why one table: the filter and the supervisor must agree. A filter that
//! traps an ABI the supervisor does not know turns every exec of that ABI
//! into an `unexpected_syscall` deny (this happened with 32-bit ARM on
//! aarch64); a supervisor that knows an ABI the filter lets through would
//! judge nothing. Numbers are the kernel's own (`arch/*/entry/syscalls`).
//!
//! Failure modes: none at run time; a notification whose (arch, nr) is not in
//! the table is not an exec, and the supervisor denies what it cannot classify.

/// `AUDIT_ARCH_X86_64`.
pub const AUDIT_ARCH_X86_64: u32 = 0xC000_003E;
/// `AUDIT_ARCH_I386`.
pub const AUDIT_ARCH_I386: u32 = 0x4000_0003;
/// `AUDIT_ARCH_AARCH64`.
pub const AUDIT_ARCH_AARCH64: u32 = 0xC000_00B7;
/// `AUDIT_ARCH_ARM` (32-bit ARM, little-endian: aarch64's compat ABI).
pub const AUDIT_ARCH_ARM: u32 = 0x4000_0028;
/// The bit x32 syscall numbers carry on x86_64.
pub const X32_SYSCALL_BIT: i32 = 0x4000_0000;

/// Which exec call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ExecKind {
    /// `execve(path, argv, envp)`.
    Execve,
    /// `execveat(dirfd, path, argv, envp, flags)`.
    Execveat,
}

/// One exec syscall of one ABI.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExecSyscall {
    /// The `AUDIT_ARCH_*` value seccomp reports.
    pub arch: u32,
    /// The syscall number as seccomp reports it (x32: with [`X32_SYSCALL_BIT`]).
    pub nr: i32,
    /// `execve` or `execveat`.
    pub kind: ExecKind,
    /// Bytes per pointer in the argv array (4 for i386, x32 and ARM).
    pub ptr_size: usize,
    /// The ABI's name, for messages.
    pub abi: &'static str,
}

const fn sc(arch: u32, nr: i32, kind: ExecKind, ptr_size: usize, abi: &'static str) -> ExecSyscall {
    ExecSyscall {
        arch,
        nr,
        kind,
        ptr_size,
        abi,
    }
}

/// Every exec syscall agentsh knows, on every ABI.
pub const EXEC_SYSCALLS: &[ExecSyscall] = &[
    sc(AUDIT_ARCH_X86_64, 59, ExecKind::Execve, 8, "x86_64"),
    sc(AUDIT_ARCH_X86_64, 322, ExecKind::Execveat, 8, "x86_64"),
    sc(
        AUDIT_ARCH_X86_64,
        X32_SYSCALL_BIT | 520,
        ExecKind::Execve,
        4,
        "x32",
    ),
    sc(
        AUDIT_ARCH_X86_64,
        X32_SYSCALL_BIT | 545,
        ExecKind::Execveat,
        4,
        "x32",
    ),
    sc(AUDIT_ARCH_I386, 11, ExecKind::Execve, 4, "i386"),
    sc(AUDIT_ARCH_I386, 358, ExecKind::Execveat, 4, "i386"),
    sc(AUDIT_ARCH_AARCH64, 221, ExecKind::Execve, 8, "aarch64"),
    sc(AUDIT_ARCH_AARCH64, 281, ExecKind::Execveat, 8, "aarch64"),
    sc(AUDIT_ARCH_ARM, 11, ExecKind::Execve, 4, "arm"),
    sc(AUDIT_ARCH_ARM, 387, ExecKind::Execveat, 4, "arm"),
];

/// The ABIs (by [`ExecSyscall::abi`] name) a filter built for this machine
/// covers: the native one first, then the compat ABIs the kernel may run
/// (x86_64: i386 and x32; aarch64: 32-bit ARM). The filter compiler adds
/// exactly these; any other architecture is killed by the filter.
pub fn filter_abis() -> &'static [&'static str] {
    #[cfg(target_arch = "x86_64")]
    {
        &["x86_64", "i386", "x32"]
    }
    #[cfg(target_arch = "aarch64")]
    {
        &["aarch64", "arm"]
    }
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    {
        &[]
    }
}

/// The exec syscall a notification reports, if it is one.
pub fn classify(arch: u32, nr: i32) -> Option<&'static ExecSyscall> {
    EXEC_SYSCALLS.iter().find(|s| s.arch == arch && s.nr == nr)
}

/// How an `execve`/`execveat` names its arguments, from the registers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExecArgs {
    /// `AT_FDCWD` for `execve`.
    pub dirfd: i32,
    /// The address of the path in the caller's memory.
    pub path: u64,
    /// The address of the argv pointer array.
    pub argv: u64,
    /// `execveat`'s flags (`AT_EMPTY_PATH`, `AT_SYMLINK_NOFOLLOW`); 0 for `execve`.
    pub flags: i32,
    /// Bytes per pointer in the argv array.
    pub ptr_size: usize,
}

impl ExecSyscall {
    /// The arguments, from the six syscall registers.
    pub fn args(&self, regs: &[u64; 6]) -> ExecArgs {
        match self.kind {
            ExecKind::Execve => ExecArgs {
                dirfd: libc::AT_FDCWD,
                path: regs[0],
                argv: regs[1],
                flags: 0,
                ptr_size: self.ptr_size,
            },
            ExecKind::Execveat => ExecArgs {
                dirfd: regs[0] as i32,
                path: regs[1],
                argv: regs[2],
                flags: regs[4] as i32,
                ptr_size: self.ptr_size,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_filter_abi_has_both_exec_calls() {
        for abi in filter_abis() {
            for kind in [ExecKind::Execve, ExecKind::Execveat] {
                assert!(
                    EXEC_SYSCALLS
                        .iter()
                        .any(|s| s.abi == *abi && s.kind == kind),
                    "ABI {abi} has no {kind:?}"
                );
            }
        }
    }

    #[test]
    fn aarch64_compat_arm_exec_is_recognised() {
        let e = classify(AUDIT_ARCH_ARM, 11).expect("ARM execve");
        assert_eq!((e.kind, e.ptr_size), (ExecKind::Execve, 4));
        let e = classify(AUDIT_ARCH_ARM, 387).expect("ARM execveat");
        assert_eq!((e.kind, e.ptr_size), (ExecKind::Execveat, 4));
        let e = classify(AUDIT_ARCH_AARCH64, 221).expect("aarch64 execve");
        assert_eq!(e.ptr_size, 8);
    }

    #[test]
    fn x86_abis_are_told_apart() {
        assert_eq!(classify(AUDIT_ARCH_X86_64, 59).map(|e| e.ptr_size), Some(8));
        assert_eq!(classify(AUDIT_ARCH_I386, 11).map(|e| e.ptr_size), Some(4));
        assert_eq!(
            classify(AUDIT_ARCH_X86_64, X32_SYSCALL_BIT | 520).map(|e| e.abi),
            Some("x32")
        );
        assert_eq!(classify(AUDIT_ARCH_X86_64, 0), None);
        // i386's execve number on x86_64 is not an exec.
        assert_eq!(classify(AUDIT_ARCH_X86_64, 11), None);
    }

    #[test]
    fn execveat_arguments_come_from_their_registers() {
        let e = classify(AUDIT_ARCH_X86_64, 322).unwrap();
        let a = e.args(&[3, 0x10, 0x20, 0x30, libc::AT_EMPTY_PATH as u64, 0]);
        assert_eq!(
            (a.dirfd, a.path, a.argv, a.flags),
            (3, 0x10, 0x20, libc::AT_EMPTY_PATH)
        );
        let e = classify(AUDIT_ARCH_X86_64, 59).unwrap();
        let a = e.args(&[0x10, 0x20, 0x30, 0, 0, 0]);
        assert_eq!((a.dirfd, a.path, a.argv), (libc::AT_FDCWD, 0x10, 0x20));
    }
}
