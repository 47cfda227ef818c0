//! The signal system calls the signal guard traps, per ABI: one table for
//! the filter's users (the supervisor's user-notify half and the ptrace
//! backend), as `execabi` is for execs.
//!
//! Where Landlock cannot scope signals (ABI < 6), `kill`, `tkill`,
//! `rt_sigqueueinfo`, `pidfd_send_signal` and `pidfd_open` come to the
//! supervisor, which judges their target. A call this table does not know is
//! refused by the supervisor as `unexpected_syscall`, so every ABI the filter
//! covers ([`crate::execabi::filter_abis`]) must be here: a test checks it.

use crate::execabi::{
    AUDIT_ARCH_AARCH64, AUDIT_ARCH_ARM, AUDIT_ARCH_I386, AUDIT_ARCH_X86_64, X32_SYSCALL_BIT,
};

/// A signal call the guard judges.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SignalCall {
    /// `kill(pid, sig)`.
    Kill,
    /// `tkill(tid, sig)`.
    Tkill,
    /// `rt_sigqueueinfo(pid, sig, info)`.
    RtSigqueueinfo,
    /// `pidfd_send_signal(pidfd, sig, info, flags)`.
    PidfdSendSignal,
    /// `pidfd_open(pid, flags)` (with `PIDFD_THREAD`: a thread's pidfd).
    PidfdOpen,
}

impl SignalCall {
    /// The call's name, as the audit writes it.
    pub fn name(self) -> &'static str {
        match self {
            SignalCall::Kill => "kill",
            SignalCall::Tkill => "tkill",
            SignalCall::RtSigqueueinfo => "rt_sigqueueinfo",
            SignalCall::PidfdSendSignal => "pidfd_send_signal",
            SignalCall::PidfdOpen => "pidfd_open",
        }
    }

    /// Every call, for tables and tests.
    pub const ALL: [SignalCall; 5] = [
        SignalCall::Kill,
        SignalCall::Tkill,
        SignalCall::RtSigqueueinfo,
        SignalCall::PidfdSendSignal,
        SignalCall::PidfdOpen,
    ];
}

/// One row: (ABI name, `AUDIT_ARCH_*`, number as seccomp reports it, call).
type Row = (&'static str, u32, i32, SignalCall);

const X32: i32 = X32_SYSCALL_BIT;

/// Every (ABI, number) of a signal call the guard judges. pidfd calls have
/// one number on every ABI (the unified table since Linux 5.1).
pub const SIGNAL_SYSCALLS: &[Row] = &[
    ("x86_64", AUDIT_ARCH_X86_64, 62, SignalCall::Kill),
    ("x86_64", AUDIT_ARCH_X86_64, 200, SignalCall::Tkill),
    ("x86_64", AUDIT_ARCH_X86_64, 129, SignalCall::RtSigqueueinfo),
    (
        "x86_64",
        AUDIT_ARCH_X86_64,
        424,
        SignalCall::PidfdSendSignal,
    ),
    ("x86_64", AUDIT_ARCH_X86_64, 434, SignalCall::PidfdOpen),
    ("x32", AUDIT_ARCH_X86_64, X32 | 62, SignalCall::Kill),
    ("x32", AUDIT_ARCH_X86_64, X32 | 200, SignalCall::Tkill),
    // x32's own (compat) rt_sigqueueinfo.
    (
        "x32",
        AUDIT_ARCH_X86_64,
        X32 | 524,
        SignalCall::RtSigqueueinfo,
    ),
    (
        "x32",
        AUDIT_ARCH_X86_64,
        X32 | 424,
        SignalCall::PidfdSendSignal,
    ),
    ("x32", AUDIT_ARCH_X86_64, X32 | 434, SignalCall::PidfdOpen),
    ("i386", AUDIT_ARCH_I386, 37, SignalCall::Kill),
    ("i386", AUDIT_ARCH_I386, 238, SignalCall::Tkill),
    ("i386", AUDIT_ARCH_I386, 178, SignalCall::RtSigqueueinfo),
    ("i386", AUDIT_ARCH_I386, 424, SignalCall::PidfdSendSignal),
    ("i386", AUDIT_ARCH_I386, 434, SignalCall::PidfdOpen),
    ("aarch64", AUDIT_ARCH_AARCH64, 129, SignalCall::Kill),
    ("aarch64", AUDIT_ARCH_AARCH64, 130, SignalCall::Tkill),
    (
        "aarch64",
        AUDIT_ARCH_AARCH64,
        138,
        SignalCall::RtSigqueueinfo,
    ),
    (
        "aarch64",
        AUDIT_ARCH_AARCH64,
        424,
        SignalCall::PidfdSendSignal,
    ),
    ("aarch64", AUDIT_ARCH_AARCH64, 434, SignalCall::PidfdOpen),
    ("arm", AUDIT_ARCH_ARM, 37, SignalCall::Kill),
    ("arm", AUDIT_ARCH_ARM, 238, SignalCall::Tkill),
    ("arm", AUDIT_ARCH_ARM, 178, SignalCall::RtSigqueueinfo),
    ("arm", AUDIT_ARCH_ARM, 424, SignalCall::PidfdSendSignal),
    ("arm", AUDIT_ARCH_ARM, 434, SignalCall::PidfdOpen),
];

/// Which signal call a notification (or seccomp stop) is, if any.
pub fn classify(arch: u32, nr: i32) -> Option<SignalCall> {
    SIGNAL_SYSCALLS
        .iter()
        .find(|(_, a, n, _)| *a == arch && *n == nr)
        .map(|(_, _, _, c)| *c)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_abi_the_filter_covers_has_every_signal_call() {
        for abi in crate::execabi::filter_abis() {
            for call in SignalCall::ALL {
                let row = SIGNAL_SYSCALLS
                    .iter()
                    .find(|(a, _, _, c)| a == abi && *c == call);
                let (_, arch, nr, _) = row.unwrap_or_else(|| panic!("{abi}: no {}", call.name()));
                assert_eq!(classify(*arch, *nr), Some(call), "{abi} {}", call.name());
            }
        }
    }

    #[test]
    fn arm_signal_calls_are_known() {
        assert_eq!(classify(AUDIT_ARCH_ARM, 37), Some(SignalCall::Kill));
        assert_eq!(classify(AUDIT_ARCH_ARM, 238), Some(SignalCall::Tkill));
        assert_eq!(
            classify(AUDIT_ARCH_ARM, 178),
            Some(SignalCall::RtSigqueueinfo)
        );
    }

    #[test]
    fn numbers_of_other_calls_are_not_signal_calls() {
        assert_eq!(classify(AUDIT_ARCH_X86_64, 59), None);
        assert_eq!(classify(AUDIT_ARCH_I386, 62), None);
        assert_eq!(classify(AUDIT_ARCH_X86_64, 37), None);
    }
}
