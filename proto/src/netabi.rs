//! The network system calls egress supervision traps, per ABI: one table
//! for the filter's users (the supervisor's two backends), as `execabi` is
//! for execs and `sigabi` for the signal guard.
//!
//! With an `egress` policy, `connect`, `sendto` with a destination,
//! `sendmsg` and `sendmmsg` come to the supervisor, which judges the
//! destination and performs the call on the tree's behalf. A call this table
//! does not know is refused as `unexpected_syscall`, so every ABI the filter
//! covers ([`crate::execabi::filter_abis`]) must be here: a test checks it.
//! (i386's `socketcall` multiplexer is refused by the base filter.)

use crate::execabi::{
    AUDIT_ARCH_AARCH64, AUDIT_ARCH_ARM, AUDIT_ARCH_I386, AUDIT_ARCH_X86_64, X32_SYSCALL_BIT,
};

/// A network call egress supervision judges.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NetCall {
    /// `connect(fd, addr, addrlen)`.
    Connect,
    /// `sendto(fd, buf, len, flags, addr, addrlen)`.
    Sendto,
    /// `sendmsg(fd, msg, flags)`.
    Sendmsg,
    /// `sendmmsg(fd, msgvec, vlen, flags)`.
    Sendmmsg,
}

impl NetCall {
    /// The call's name, as the audit writes it and libseccomp knows it.
    pub fn name(self) -> &'static str {
        match self {
            NetCall::Connect => "connect",
            NetCall::Sendto => "sendto",
            NetCall::Sendmsg => "sendmsg",
            NetCall::Sendmmsg => "sendmmsg",
        }
    }

    /// Every call, for tables and tests.
    pub const ALL: [NetCall; 4] = [
        NetCall::Connect,
        NetCall::Sendto,
        NetCall::Sendmsg,
        NetCall::Sendmmsg,
    ];
}

/// How wide the caller's pointers and `size_t` are: the 32-bit ABIs (i386,
/// x32, arm) lay out `msghdr`, `iovec` and `mmsghdr` with 4-byte fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Width {
    /// 8-byte pointers (x86_64, aarch64).
    W64,
    /// 4-byte pointers (i386, x32, arm).
    W32,
}

/// One row: (ABI name, `AUDIT_ARCH_*`, number as seccomp reports it, call,
/// pointer width).
type Row = (&'static str, u32, i32, NetCall, Width);

const X32: i32 = X32_SYSCALL_BIT;

/// Every (ABI, number) of a call egress supervision judges. x32 has its own
/// (compat) `sendmsg` and `sendmmsg`.
pub const NET_SYSCALLS: &[Row] = &[
    (
        "x86_64",
        AUDIT_ARCH_X86_64,
        42,
        NetCall::Connect,
        Width::W64,
    ),
    ("x86_64", AUDIT_ARCH_X86_64, 44, NetCall::Sendto, Width::W64),
    (
        "x86_64",
        AUDIT_ARCH_X86_64,
        46,
        NetCall::Sendmsg,
        Width::W64,
    ),
    (
        "x86_64",
        AUDIT_ARCH_X86_64,
        307,
        NetCall::Sendmmsg,
        Width::W64,
    ),
    (
        "x32",
        AUDIT_ARCH_X86_64,
        X32 | 42,
        NetCall::Connect,
        Width::W32,
    ),
    (
        "x32",
        AUDIT_ARCH_X86_64,
        X32 | 44,
        NetCall::Sendto,
        Width::W32,
    ),
    (
        "x32",
        AUDIT_ARCH_X86_64,
        X32 | 518,
        NetCall::Sendmsg,
        Width::W32,
    ),
    (
        "x32",
        AUDIT_ARCH_X86_64,
        X32 | 538,
        NetCall::Sendmmsg,
        Width::W32,
    ),
    ("i386", AUDIT_ARCH_I386, 362, NetCall::Connect, Width::W32),
    ("i386", AUDIT_ARCH_I386, 369, NetCall::Sendto, Width::W32),
    ("i386", AUDIT_ARCH_I386, 370, NetCall::Sendmsg, Width::W32),
    ("i386", AUDIT_ARCH_I386, 345, NetCall::Sendmmsg, Width::W32),
    (
        "aarch64",
        AUDIT_ARCH_AARCH64,
        203,
        NetCall::Connect,
        Width::W64,
    ),
    (
        "aarch64",
        AUDIT_ARCH_AARCH64,
        206,
        NetCall::Sendto,
        Width::W64,
    ),
    (
        "aarch64",
        AUDIT_ARCH_AARCH64,
        211,
        NetCall::Sendmsg,
        Width::W64,
    ),
    (
        "aarch64",
        AUDIT_ARCH_AARCH64,
        269,
        NetCall::Sendmmsg,
        Width::W64,
    ),
    ("arm", AUDIT_ARCH_ARM, 283, NetCall::Connect, Width::W32),
    ("arm", AUDIT_ARCH_ARM, 290, NetCall::Sendto, Width::W32),
    ("arm", AUDIT_ARCH_ARM, 296, NetCall::Sendmsg, Width::W32),
    ("arm", AUDIT_ARCH_ARM, 374, NetCall::Sendmmsg, Width::W32),
];

/// Which network call a notification (or seccomp stop) is, and the
/// caller's pointer width, if it is one.
pub fn classify(arch: u32, nr: i32) -> Option<(NetCall, Width)> {
    NET_SYSCALLS
        .iter()
        .find(|(_, a, n, _, _)| *a == arch && *n == nr)
        .map(|(_, _, _, c, w)| (*c, *w))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_abi_the_filter_covers_has_every_net_call() {
        for abi in crate::execabi::filter_abis() {
            for call in NetCall::ALL {
                let row = NET_SYSCALLS
                    .iter()
                    .find(|(a, _, _, c, _)| a == abi && *c == call);
                let (_, arch, nr, _, w) =
                    row.unwrap_or_else(|| panic!("{abi}: no {}", call.name()));
                assert_eq!(
                    classify(*arch, *nr),
                    Some((call, *w)),
                    "{abi} {}",
                    call.name()
                );
            }
        }
    }

    #[test]
    fn other_calls_are_not_net_calls() {
        assert_eq!(classify(AUDIT_ARCH_X86_64, 59), None);
        assert_eq!(classify(AUDIT_ARCH_X86_64, 45), None); // recvfrom
        assert_eq!(classify(AUDIT_ARCH_I386, 42), None);
    }
}
