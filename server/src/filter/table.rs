//! The base rules: what every agentsh tree is refused, whatever the policy.
//!
//! This table is the one place the base blocklist is written down:
//! `build` turns it into BPF, `docs/security-model.md` lists it
//! (`tests/tests/docs.rs` checks the two agree, row for row), and a policy's
//! `syscalls.block` can only add to it. Every condition is on register
//! arguments, which the kernel copies before the filter runs: there is nothing
//! a sibling thread could change after the check.
//!
//! Names are the x86_64 / aarch64 names; libseccomp maps each to the number of
//! every architecture in the filter (on x86_64 also i386 and x32) and skips an
//! architecture that has no such call (`socketcall`, `fcntl64` and the `*64`
//! time calls exist only on i386).

/// One comparison on a register argument: `(arg & mask) == value`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cmp {
    pub arg: u32,
    pub mask: u64,
    pub value: u64,
}

/// When a rule applies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum When {
    /// Whatever the arguments.
    Always,
    /// Any of `bits` is set in argument `arg` (one comparison per bit).
    AnyBit { arg: u32, bits: u64 },
    /// Every comparison holds.
    All(&'static [Cmp]),
}

/// What the caller gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answer {
    /// `EPERM`: refused.
    Eperm,
    /// `ENOSYS`: "this kernel has no such call", so libraries fall back to an
    /// older call the filter can judge (glibc: `clone3` → `clone`).
    Enosys,
}

impl Answer {
    pub fn errno(self) -> i32 {
        match self {
            Answer::Eperm => libc::EPERM,
            Answer::Enosys => libc::ENOSYS,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Answer::Eperm => "EPERM",
            Answer::Enosys => "ENOSYS",
        }
    }
}

/// One row of the base blocklist.
#[derive(Debug, Clone, Copy)]
pub struct BaseRule {
    pub syscalls: &'static [&'static str],
    pub when: When,
    /// The condition as the docs table states it.
    pub when_text: &'static str,
    pub answer: Answer,
    /// The threat it closes.
    pub why: &'static str,
}

/// `CLONE_NEW*` flags valid on `unshare` (CLONE_NEWTIME is 0x80).
pub const UNSHARE_NEW_FLAGS: u64 = (libc::CLONE_NEWNS
    | libc::CLONE_NEWCGROUP
    | libc::CLONE_NEWUTS
    | libc::CLONE_NEWIPC
    | libc::CLONE_NEWUSER
    | libc::CLONE_NEWPID
    | libc::CLONE_NEWNET) as u64
    | CLONE_NEWTIME;
/// On `clone`, 0x80 is part of the exit-signal byte (CSIGNAL), not CLONE_NEWTIME.
pub const CLONE_NEW_FLAGS: u64 = UNSHARE_NEW_FLAGS & !CLONE_NEWTIME;
const CLONE_NEWTIME: u64 = 0x80;

const CLONE_VM: u64 = libc::CLONE_VM as u64;
const CLONE_THREAD: u64 = libc::CLONE_THREAD as u64;
const CLONE_VFORK: u64 = libc::CLONE_VFORK as u64;
const CLONE_PARENT: u64 = libc::CLONE_PARENT as u64;
const CLONE_FILES: u64 = libc::CLONE_FILES as u64;
/// A vfork-class clone's flags ([`CLONE_VFORK_CLASS_MASK`] applied): the
/// memory shared, a vfork wait, not a thread, no `CLONE_PARENT` or
/// `CLONE_FILES` (those the base rules refuse).
pub const CLONE_VFORK_CLASS: u64 = CLONE_VM | CLONE_VFORK;
pub const CLONE_VFORK_CLASS_MASK: u64 =
    CLONE_VM | CLONE_VFORK | CLONE_THREAD | CLONE_PARENT | CLONE_FILES;
const CLONE_FS: u64 = libc::CLONE_FS as u64;

/// `IPPROTO_MPTCP`: Multipath TCP, which Landlock's TCP rules do not cover.
pub const IPPROTO_MPTCP: u64 = 262;

/// `MSG_FASTOPEN`: connect and send in one call, past Landlock's connect hook.
pub const MSG_FASTOPEN: u64 = 0x2000_0000;
/// `TCP_FASTOPEN_CONNECT` (setsockopt level IPPROTO_TCP).
pub const TCP_FASTOPEN_CONNECT: u64 = 30;
/// `USERFAULTFD_IOC_NEW` on `/dev/userfaultfd`: the device's way to a userfaultfd.
pub const USERFAULTFD_IOC_NEW: u64 = 0xAA00;

const LOW32: u64 = 0xffff_ffff;

/// The base blocklist (see the module doc). Order does not matter.
pub const BASE_RULES: &[BaseRule] = &[
    BaseRule {
        syscalls: &["ptrace", "process_vm_writev", "pidfd_getfd"],
        when: When::Always,
        when_text: "always",
        answer: Answer::Eperm,
        why: "reading or changing another process (the server's memory, its notify fds)",
    },
    BaseRule {
        syscalls: &["kexec_load", "kexec_file_load", "init_module", "finit_module", "delete_module", "bpf"],
        when: When::Always,
        when_text: "always",
        answer: Answer::Eperm,
        why: "loading code into the kernel",
    },
    BaseRule {
        syscalls: &["mount", "umount2", "pivot_root", "mount_setattr", "fsopen", "fsconfig", "fsmount", "fspick", "move_mount", "open_tree"],
        when: When::Always,
        when_text: "always",
        answer: Answer::Eperm,
        why: "changing what paths mean (a mount over /bin/sh or /etc/agentsh defeats every path rule)",
    },
    BaseRule {
        syscalls: &["io_uring_setup", "io_uring_enter", "io_uring_register"],
        when: When::Always,
        when_text: "always",
        answer: Answer::Eperm,
        why: "io_uring runs operations (exec-free, but connect, sendmsg, openat) the filter never sees",
    },
    BaseRule {
        syscalls: &["unshare"],
        when: When::AnyBit { arg: 0, bits: UNSHARE_NEW_FLAGS },
        when_text: "flags has any CLONE_NEW* (NS, CGROUP, UTS, IPC, USER, PID, NET, TIME)",
        answer: Answer::Eperm,
        why: "new namespaces: full capabilities in a user namespace expose nf_tables and the rest of the kernel's namespaced surface; a pid or mount namespace hides the tree from the server",
    },
    BaseRule {
        syscalls: &["clone"],
        when: When::AnyBit { arg: 0, bits: CLONE_NEW_FLAGS },
        when_text: "flags has any CLONE_NEW* (NS, CGROUP, UTS, IPC, USER, PID, NET; 0x80 is the exit signal here)",
        answer: Answer::Eperm,
        why: "as unshare",
    },
    BaseRule {
        syscalls: &["clone"],
        when: When::All(&[Cmp { arg: 0, mask: CLONE_VM | CLONE_THREAD | CLONE_VFORK, value: CLONE_VM }]),
        when_text: "flags has CLONE_VM but neither CLONE_THREAD nor CLONE_VFORK",
        answer: Answer::Eperm,
        why: "a process sharing another's memory without being its thread or vfork child could rewrite an exec's path and argv after the supervisor read them; threads and vfork children are found and stopped (the exec race guard)",
    },
    BaseRule {
        syscalls: &["clone"],
        when: When::All(&[Cmp { arg: 0, mask: CLONE_VM | CLONE_PARENT | CLONE_THREAD, value: CLONE_VM | CLONE_PARENT }]),
        when_text: "flags has CLONE_VM and CLONE_PARENT but not CLONE_THREAD",
        answer: Answer::Eperm,
        why: "a vfork child made a sibling of its parent would share memory with a process the race guard does not walk to",
    },
    BaseRule {
        syscalls: &["clone"],
        when: When::All(&[Cmp { arg: 0, mask: CLONE_VM | CLONE_FILES, value: CLONE_FILES }]),
        when_text: "flags has CLONE_FILES but not CLONE_VM",
        answer: Answer::Eperm,
        why: "a process sharing the caller's fd table without sharing its memory could swap the file behind execveat's fd or dirfd after the supervisor judged it; sharing the table only with memory puts the sharer in the race guard's set",
    },
    BaseRule {
        syscalls: &["clone"],
        when: When::All(&[Cmp { arg: 0, mask: CLONE_FILES | CLONE_THREAD, value: CLONE_FILES }]),
        when_text: "flags has CLONE_FILES but not CLONE_THREAD",
        answer: Answer::Eperm,
        why: "the fd table is then shared by the threads of one process only, which egress stops together before it lets a Unix-socket call through (no sibling can swap an inet socket in at its fd); a vfork child sharing its parent's table would escape that stop",
    },
    BaseRule {
        syscalls: &["clone"],
        when: When::All(&[Cmp { arg: 0, mask: CLONE_VM | CLONE_FS, value: CLONE_FS }]),
        when_text: "flags has CLONE_FS but not CLONE_VM",
        answer: Answer::Eperm,
        why: "as CLONE_FILES, for the cwd and root a relative exec path is resolved in",
    },
    BaseRule {
        syscalls: &["clone3"],
        when: When::Always,
        when_text: "always",
        answer: Answer::Enosys,
        why: "its flags are behind a pointer the filter cannot read; glibc and others then fall back to clone",
    },
    BaseRule {
        syscalls: &["setns"],
        when: When::Always,
        when_text: "always",
        answer: Answer::Eperm,
        why: "entering another namespace (another container's, the host's through /proc/1/ns)",
    },
    BaseRule {
        syscalls: &["userfaultfd"],
        when: When::Always,
        when_text: "always",
        answer: Answer::Eperm,
        why: "stalls the kernel at a chosen page fault: the usual tool to win kernel races",
    },
    BaseRule {
        syscalls: &["ioctl"],
        when: When::All(&[Cmp { arg: 1, mask: LOW32, value: USERFAULTFD_IOC_NEW }]),
        when_text: "request is USERFAULTFD_IOC_NEW (/dev/userfaultfd)",
        answer: Answer::Eperm,
        why: "the device's way to a userfaultfd",
    },
    BaseRule {
        syscalls: &["perf_event_open"],
        when: When::Always,
        when_text: "always",
        answer: Answer::Eperm,
        why: "a large kernel attack surface and side channels on other processes",
    },
    BaseRule {
        syscalls: &["open_by_handle_at"],
        when: When::Always,
        when_text: "always",
        answer: Answer::Eperm,
        why: "opens files by handle, around every path check (the \"Shocker\" container escape)",
    },
    BaseRule {
        syscalls: &["keyctl", "add_key", "request_key"],
        when: When::Always,
        when_text: "always",
        answer: Answer::Eperm,
        why: "kernel keyrings are not namespaced: keys of the host and other containers",
    },
    BaseRule {
        syscalls: &["reboot", "swapon", "swapoff", "iopl", "ioperm", "acct"],
        when: When::Always,
        when_text: "always",
        answer: Answer::Eperm,
        why: "machine administration (root only): reboot, swap, raw port I/O, accounting to a file",
    },
    BaseRule {
        syscalls: &["settimeofday", "clock_settime", "clock_adjtime", "adjtimex", "stime", "clock_settime64", "clock_adjtime64"],
        when: When::Always,
        when_text: "always",
        answer: Answer::Eperm,
        why: "the clock (root only): certificate and token expiry, audit timestamps",
    },
    BaseRule {
        syscalls: &["sendto", "sendmmsg"],
        when: When::AnyBit { arg: 3, bits: MSG_FASTOPEN },
        when_text: "flags (argument 4) has MSG_FASTOPEN",
        answer: Answer::Eperm,
        why: "TCP Fast Open connects without Landlock's connect hook: any port, the API's included",
    },
    BaseRule {
        syscalls: &["sendmsg"],
        when: When::AnyBit { arg: 2, bits: MSG_FASTOPEN },
        when_text: "flags (argument 3) has MSG_FASTOPEN",
        answer: Answer::Eperm,
        why: "as sendto",
    },
    BaseRule {
        syscalls: &["setsockopt"],
        when: When::All(&[
            Cmp { arg: 1, mask: LOW32, value: libc::IPPROTO_TCP as u64 },
            Cmp { arg: 2, mask: LOW32, value: TCP_FASTOPEN_CONNECT },
        ]),
        when_text: "level IPPROTO_TCP, option TCP_FASTOPEN_CONNECT",
        answer: Answer::Eperm,
        why: "Fast Open by socket option",
    },
    BaseRule {
        syscalls: &["socket"],
        when: When::All(&[
            Cmp { arg: 0, mask: LOW32, value: libc::AF_UNIX as u64 },
            Cmp { arg: 1, mask: 0xf, value: libc::SOCK_SEQPACKET as u64 },
        ]),
        when_text: "AF_UNIX, SOCK_SEQPACKET (with any SOCK_CLOEXEC / SOCK_NONBLOCK)",
        answer: Answer::Eperm,
        why: "agentsh's API and notify sockets are SOCK_SEQPACKET: a tree cannot even connect to them (socketpair stays allowed)",
    },
    BaseRule {
        syscalls: &["socket"],
        when: When::All(&[Cmp { arg: 2, mask: LOW32, value: IPPROTO_MPTCP }]),
        when_text: "protocol IPPROTO_MPTCP",
        answer: Answer::Eperm,
        why: "Multipath TCP is not covered by Landlock's TCP connect and bind rules: any port",
    },
    BaseRule {
        syscalls: &["socketcall"],
        when: When::Always,
        when_text: "always (i386 only)",
        answer: Answer::Eperm,
        why: "the i386 socket multiplexer passes its arguments by pointer, so the Fast Open and socket rules could not see them; i386 programs use the direct calls (Linux >= 4.3)",
    },
];

/// Names a policy may not block: the filter itself needs them, or the base
/// answers them with something an EPERM would break.
pub const RESERVED: &[(&str, &str)] = &[
    ("execve", "every exec is trapped for the supervisor"),
    ("execveat", "every exec is trapped for the supervisor"),
    ("prctl", "the marker that tells a shim it is already supervised"),
    (
        "clone3",
        "the base answers ENOSYS so libraries fall back to clone; EPERM would break thread creation",
    ),
];
