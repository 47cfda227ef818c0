//! What a tree's seccomp program depends on ([`FilterSpec`]: the protected
//! processes, the signal guard, the policy's blocklist, network part and
//! `exec_memory`, the backend its traps go to), and the trap data the ptrace
//! backend reads. Two equal specs give the same program.
//!
//! Failure modes: none; these are plain values (the policy's names are
//! checked when the program is built), but for [`kernel_runs_x32`], which
//! asks the kernel once, from a child process.

use agentsh_proto::ExecBackend;
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;

/// `SECCOMP_RET_DATA` of the ptrace backend's exec trap (read by the tracer
/// with `PTRACE_GETEVENTMSG`).
pub const TRACE_DATA_EXEC: u16 = 1;
/// `SECCOMP_RET_DATA` of the ptrace backend's signal-guard trap.
pub const TRACE_DATA_SIGNAL: u16 = 2;
/// `SECCOMP_RET_DATA` of the ptrace backend's egress trap.
pub const TRACE_DATA_NET: u16 = 3;
/// `SECCOMP_RET_DATA` of the ptrace backend's path-call trap (no Landlock).
pub const TRACE_DATA_FILE: u16 = 4;
/// `SECCOMP_RET_DATA` of the ptrace backend's executable-mapping trap.
pub const TRACE_DATA_MAP: u16 = 5;
/// `SECCOMP_RET_DATA` of the ptrace backend's `chroot` trap.
pub const TRACE_DATA_ROOT: u16 = 6;
/// `SECCOMP_RET_DATA` of the ptrace backend's pinned-region guard
/// (`pin_guard`).
pub const TRACE_DATA_PIN: u16 = 7;

/// The policy's network part of the filter: which `socket()` families a
/// tree may create, and whether destinations go to the supervisor.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct NetFilter {
    /// `socket_families:` (`None`: any family). Others: EAFNOSUPPORT.
    pub families: Option<BTreeSet<u32>>,
    /// `egress:` is set: `connect`, `sendto` with a destination, `sendmsg`
    /// and `sendmmsg` go to the supervisor, and inet sockets are TCP or UDP
    /// only (no raw, packet, ICMP, SCTP...: EPERM).
    pub egress: bool,
    /// `egress:` allows every destination: the calls are still handed over
    /// (audited, DNS sent to the stub), but inet sockets of every type and
    /// protocol may be made (there is nothing to keep them from).
    pub egress_allows_all: bool,
}

/// How signals aimed at protected processes are refused beyond what register
/// arguments decide.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SignalGuard {
    /// Landlock ABI >= 6 scopes signals to the tree (the ruleset asks for it):
    /// the register rules are a second wall.
    LandlockScope,
    /// No signal scoping: `kill`, `tkill`, `rt_sigqueueinfo`,
    /// `pidfd_send_signal` and `pidfd_open(PIDFD_THREAD)` are judged by the
    /// supervisor; `F_SETOWN_EX`, `FIOSETOWN` and `SIOCSPGRP` (owner behind a
    /// pointer) are refused.
    UserNotif,
}

impl SignalGuard {
    /// The guard for the Landlock ABI agentsh uses (the kernel's, capped by
    /// `landlock.max_abi`).
    pub fn for_landlock_abi(effective_abi: i64) -> SignalGuard {
        if effective_abi >= 6 {
            SignalGuard::LandlockScope
        } else {
            SignalGuard::UserNotif
        }
    }
}

/// A process and its process group.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ProcessId {
    pub pid: u32,
    pub pgid: u32,
}

impl ProcessId {
    /// This process (the server).
    pub fn current() -> ProcessId {
        // SAFETY: getpid and getpgrp cannot fail.
        let (pid, pgid) = unsafe { (libc::getpid(), libc::getpgrp()) };
        ProcessId {
            pid: pid as u32,
            pgid: pgid as u32,
        }
    }
}

/// Everything the program depends on. Two equal specs give the same program.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct FilterSpec {
    /// The policy's `syscalls.block`: EPERM whatever the arguments.
    pub blocked: BTreeSet<String>,
    /// Processes no signal from the tree may reach (as thread-group ids).
    pub protected_pids: BTreeSet<u32>,
    /// Process groups no signal from the tree may reach.
    pub protected_pgids: BTreeSet<u32>,
    /// The tree starts in a protected process group, so `kill(0, ..)` is refused.
    pub refuse_kill_own_group: bool,
    pub signal_guard: SignalGuard,
    /// Below Landlock ABI 3 truncation is no right Landlock controls, so
    /// `truncate(path)`, and an `open`/`openat` with `O_TRUNC` but no
    /// write access (the kernel truncates it; Landlock reads the access
    /// mode), would empty a file the tree may not write (a root tree:
    /// `/etc/agentsh/shim.conf`): refused; `openat2` (flags out of reach)
    /// answers ENOSYS. (`ftruncate` and an open for writing need write
    /// access, which Landlock refuses.)
    pub refuse_truncate: bool,
    /// The policy's `exec_memory: deny`: no executable anonymous memory, no
    /// writable-and-executable mapping, no `mprotect` to executable, no
    /// memfd (see `build::exec_memory_rules`).
    pub refuse_exec_memory: bool,
    /// A file mapped executable (`mmap` with `PROT_EXEC`, neither writable
    /// nor anonymous: those are the rules above) goes to the supervisor,
    /// which judges the file (the policy's `exec_memory: deny` or
    /// `exec_sources: {writable: deny}`; see the supervisor's `maps`
    /// family); i386's `old_mmap`, whose arguments no rule can read, is
    /// refused.
    pub judge_exec_maps: bool,
    /// Where the traps go: USER_NOTIF or `SECCOMP_RET_TRACE`.
    pub backend: ExecBackend,
    /// The policy's `socket_families` and `egress` (see [`NetFilter`]).
    pub net: NetFilter,
    /// The path calls go to the tracer, which judges them by the tree's
    /// file rules: the ptrace backend where the kernel has no Landlock
    /// (gVisor), the only place those rules are then kept.
    pub trace_files: bool,
    /// With `trace_files`, the policy's `tracer_reads: unjudged`: an
    /// `open`/`openat` whose flags ask for no write access, no creation and
    /// no truncation does not stop (see `file_calls::traced_file_rules`).
    pub skip_read_opens: bool,
    /// Where Landlock keeps the file rules under the notify backend, the
    /// calls that change files (an `open`/`openat` for writing, creating or
    /// truncating; `creat`, `unlink*`, `rmdir`, `rename*`, `link*`,
    /// `symlink*`, `mkdir*`, `mknod*`) go to the supervisor too, which
    /// explains and audits the ones Landlock would refuse (see the files
    /// family); Landlock still decides.
    pub explain_writes: bool,
    /// x86_64: the x32 ABI gets the rules too. `false` where the kernel runs
    /// no x32 program ([`kernel_runs_x32`]: `CONFIG_X86_X32_ABI` off, as in
    /// most distributions' kernels, or `syscall.x32=n`): the filter then
    /// answers x32 numbers ENOSYS, as that kernel does, and the program is
    /// about a fifth shorter (its load, at every first shell, is the
    /// kernel's translation and JIT of every instruction).
    pub x32: bool,
}

/// Whether this kernel runs x32 system calls: an x32 `getpid` made by a
/// child process answers anything but ENOSYS (a child, so that a filter
/// around this process that kills the call kills only the child; such a
/// filter usually surrounds the trees too, and where it does not, their x32
/// calls are answered ENOSYS: refused, never let through unjudged). Asked
/// once. `true` off x86_64 (no x32 there) and when no child can be made.
pub fn kernel_runs_x32() -> bool {
    static RUNS: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *RUNS.get_or_init(probe_x32)
}

#[cfg(target_arch = "x86_64")]
fn probe_x32() -> bool {
    const X32_GETPID: libc::c_long = 0x4000_0000 | libc::SYS_getpid;
    const SAID_ENOSYS: i32 = 38;
    // SAFETY: the child makes one raw syscall and _exits (async-signal-safe
    // after a fork of a threaded process); the parent reaps it.
    unsafe {
        let pid = libc::fork();
        if pid == 0 {
            let rc = libc::syscall(X32_GETPID);
            let enosys = rc == -1 && *libc::__errno_location() == libc::ENOSYS;
            libc::_exit(if enosys { SAID_ENOSYS } else { 0 });
        }
        if pid < 0 {
            return true;
        }
        let mut status = 0;
        while libc::waitpid(pid, &mut status, 0) < 0 {
            if *libc::__errno_location() != libc::EINTR {
                return true;
            }
        }
        let answered_enosys = libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == SAID_ENOSYS;
        let killed = libc::WIFSIGNALED(status);
        let runs = !(answered_enosys || killed);
        tracing::debug!(runs, status, "x32 system calls on this kernel");
        runs
    }
}

#[cfg(not(target_arch = "x86_64"))]
fn probe_x32() -> bool {
    true
}

impl NetFilter {
    /// The network part of `policy`'s filter.
    pub fn of(policy: &crate::policy::Policy) -> NetFilter {
        NetFilter {
            families: policy.socket_families().cloned(),
            egress: policy.egress().is_some(),
            egress_allows_all: policy
                .egress()
                .is_some_and(crate::policy::egress::Egress::allows_everything),
        }
    }
}

impl FilterSpec {
    /// The spec of one tree: the server (`server`, usually
    /// [`ProcessId::current`]) and the SDK daemon that spawned the tree (the
    /// top-level shim's parent, when known) are protected, with their process
    /// groups; `tree_pgid` is the process group the tree starts in (the
    /// shim's), `effective_abi` the Landlock ABI agentsh uses (the kernel's,
    /// capped by `landlock.max_abi`). The policy's blocklist is added by
    /// [`Filters::compile`].
    pub fn for_tree(
        server: ProcessId,
        daemon: Option<ProcessId>,
        tree_pgid: Option<u32>,
        effective_abi: i64,
    ) -> FilterSpec {
        // PID 1 too: a container's entrypoint, whose death ends it.
        let mut protected_pids = BTreeSet::from([server.pid, 1]);
        let mut protected_pgids = BTreeSet::from([server.pgid]);
        if let Some(d) = daemon {
            protected_pids.insert(d.pid);
            protected_pgids.insert(d.pgid);
        }
        // pid 0 or 1 as a "group" would mean "my group" or "everything":
        // those are ruled on their own (kill(0) below, kill(-1) always).
        protected_pgids.retain(|g| *g > 1);
        protected_pids.retain(|p| *p > 0);
        FilterSpec {
            blocked: BTreeSet::new(),
            refuse_kill_own_group: tree_pgid.is_some_and(|g| protected_pgids.contains(&g)),
            protected_pids,
            protected_pgids,
            signal_guard: SignalGuard::for_landlock_abi(effective_abi),
            refuse_truncate: effective_abi < 3,
            refuse_exec_memory: false,
            judge_exec_maps: false,
            backend: ExecBackend::Notify,
            net: NetFilter::default(),
            trace_files: false,
            skip_read_opens: false,
            explain_writes: false,
            x32: true,
        }
    }
}
