//! The seccomp filter every supervised tree gets, compiled by the server.
//!
//! The server turns a [`FilterSpec`] into a classic BPF program with
//! libseccomp and ships it to unixwrap inside the wrap-init answer
//! (`SeccompConfig::filter`, see `agentsh_proto::bpf` for the wire format);
//! unixwrap loads it as is with `seccomp(2)`. So unixwrap links no libseccomp
//! and loads nothing its caller chose, and the work is done once per distinct
//! spec: [`Filters`] caches the result (specs differ between trees only in a
//! few pids).
//!
//! What the program does (default ALLOW):
//! * `execve`, `execveat` → USER_NOTIF (ptrace backend: `SECCOMP_RET_TRACE`
//!   with [`TRACE_DATA_EXEC`]): the server rules on every exec;
//! * the marker `prctl` → its distinctive errno (`agentsh_proto::marker`);
//! * `seccomp(SET_MODE_FILTER, NEW_LISTENER)` → EPERM: no second supervisor;
//! * the base rules of [`table::BASE_RULES`] and the policy's
//!   `syscalls.block` (EPERM whatever the arguments);
//! * the signal guard: signals, pidfds and SIGIO ownership aimed at the
//!   protected processes (the server, the SDK daemon) and their process
//!   groups fail with EPERM, on register arguments. Where Landlock cannot
//!   scope signals (effective ABI < 6) the calls whose target a register cannot
//!   name (`kill` of any thread id, `tkill`, `rt_sigqueueinfo`,
//!   `pidfd_send_signal`, `pidfd_open(PIDFD_THREAD)`) go to USER_NOTIF (ptrace
//!   backend: `SECCOMP_RET_TRACE` with [`TRACE_DATA_SIGNAL`]) and the
//!   supervisor judges them (`supervisor::signals`);
//! * on x86_64 the i386 and x32 ABIs carry the same rules; any other
//!   architecture is KILL_PROCESS.
//!
//! Failure modes: an unknown or reserved name in the policy's blocklist, or a
//! libseccomp failure, is a [`FilterError`]; the server checks the policy's
//! names when it starts (it refuses to start rather than run trees with a
//! filter it cannot build), and a wrap-init whose filter cannot be built is
//! answered 500 (the shim then refuses or falls through, never runs a tree
//! with a weaker filter).

mod build;
pub mod table;

use serde::{Deserialize, Serialize};
use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};

pub use agentsh_proto::ExecBackend;
pub use table::{Answer, BaseRule, Cmp, When, BASE_RULES, RESERVED};

/// `SECCOMP_RET_DATA` of the ptrace backend's exec trap (read by the tracer
/// with `PTRACE_GETEVENTMSG`).
pub const TRACE_DATA_EXEC: u16 = 1;
/// `SECCOMP_RET_DATA` of the ptrace backend's signal-guard trap.
pub const TRACE_DATA_SIGNAL: u16 = 2;
/// `SECCOMP_RET_DATA` of the ptrace backend's egress trap.
pub const TRACE_DATA_NET: u16 = 3;

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
    /// `truncate(path)` would empty a file the tree may not write (a root
    /// tree: `/etc/agentsh/shim.conf`): refused. (`open(O_TRUNC)` and
    /// `ftruncate` need a file opened for writing, which Landlock refuses.)
    pub refuse_truncate: bool,
    /// The policy's `exec_memory: deny`: no executable anonymous memory, no
    /// writable-and-executable mapping, no `mprotect` to executable, no
    /// memfd (see `build::exec_memory_rules`).
    pub refuse_exec_memory: bool,
    /// Where the traps go: USER_NOTIF or `SECCOMP_RET_TRACE`.
    pub backend: ExecBackend,
    /// The policy's `socket_families` and `egress` (see [`NetFilter`]).
    pub net: NetFilter,
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
        let mut protected_pids = BTreeSet::from([server.pid]);
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
            backend: ExecBackend::Notify,
            net: NetFilter::default(),
        }
    }
}

/// What the wrap-init audit event records of the filter a tree got.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FilterSummary {
    pub instructions: usize,
    /// Where the exec (and signal-guard) traps go.
    #[serde(default)]
    pub backend: ExecBackend,
    pub signal_guard: SignalGuard,
    pub protected_pids: Vec<u32>,
    pub protected_pgids: Vec<u32>,
    pub refuse_kill_own_group: bool,
    /// The policy's additions to the base blocklist.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub policy_blocked: Vec<String>,
    /// The policy's `exec_memory: deny` is in the program.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub refuse_exec_memory: bool,
    /// The `socket()` families allowed (absent: any).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub socket_families: Option<Vec<u32>>,
    /// Destinations go to the supervisor (the policy's `egress`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub egress: bool,
}

/// A compiled program, ready to ship.
#[derive(Debug)]
pub struct CompiledFilter {
    pub program: Vec<libc::sock_filter>,
    /// `agentsh_proto::bpf::encode_program(&program)`.
    pub encoded: String,
    pub summary: FilterSummary,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FilterError {
    #[error("syscalls.block: {name:?} cannot be blocked ({why})")]
    Reserved { name: String, why: &'static str },
    #[error("syscalls.block: {0:?} is not a syscall libseccomp knows on this architecture")]
    Unknown(String),
    #[error("building the seccomp filter: {0}")]
    Build(String),
}

/// Compiles `spec` (no cache).
///
/// # Errors
/// See [`FilterError`].
pub fn compile(spec: &FilterSpec) -> Result<CompiledFilter, FilterError> {
    Ok(compiled(spec, build::program(spec)?))
}

/// The [`CompiledFilter`] of `spec` whose program is `program`.
fn compiled(spec: &FilterSpec, program: Vec<libc::sock_filter>) -> CompiledFilter {
    let encoded = agentsh_proto::bpf::encode_program(&program);
    CompiledFilter {
        summary: FilterSummary {
            instructions: program.len(),
            backend: spec.backend,
            signal_guard: spec.signal_guard,
            protected_pids: spec.protected_pids.iter().copied().collect(),
            protected_pgids: spec.protected_pgids.iter().copied().collect(),
            refuse_kill_own_group: spec.refuse_kill_own_group,
            policy_blocked: spec.blocked.iter().cloned().collect(),
            refuse_exec_memory: spec.refuse_exec_memory,
            socket_families: spec
                .net
                .families
                .as_ref()
                .map(|f| f.iter().copied().collect()),
            egress: spec.net.egress,
        },
        program,
        encoded,
    }
}

/// How many compiled programs the cache keeps (it is emptied when full).
const CACHE_ENTRIES: usize = 64;

/// Placeholder ids above the kernel's largest pid (`PID_MAX_LIMIT`, 2^22):
/// no process has them.
const HIGH: [u32; 4] = [0x3ffe_1001, 0x3ffe_3003, 0x3ffe_2002, 0x3ffe_4004];

/// A program compiled once for a shape of spec (which protected ids there
/// are, and on which side of the server's own ids the daemon's fall:
/// libseccomp orders a syscall's comparisons by value), with the daemon's
/// pid and process group as placeholders, and where they sit. Compiling a
/// filter with libseccomp costs about a millisecond, on the first shell of
/// every new SDK daemon; patching constants costs nothing. A template is used
/// only if compiling the shape with two different placeholder pairs of the
/// same side gives the same program but for those constants, at the same
/// places, and the placeholders appear nowhere else: then within that side
/// the values decide nothing else in the program. Anything else falls back
/// to compiling in full.
#[derive(Debug)]
struct Template {
    program: Vec<libc::sock_filter>,
    pid_at: Vec<usize>,
    neg_pgid_at: Vec<usize>,
}

/// Which protected ids a tree's spec has besides the server's, and on which
/// side of the server's the daemon's fall: the template key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct Shape {
    /// The daemon's process group is protected too (it is not the server's).
    daemon_pgid: bool,
    refuse_kill_own_group: bool,
    pid_above: bool,
    pgid_above: bool,
}

impl Shape {
    /// The key: without the daemon's group among the protected ones, the
    /// side its group falls on decides nothing and is not part of it.
    fn new(
        daemon_pgid: bool,
        refuse_kill_own_group: bool,
        pid_above: bool,
        pgid_above: bool,
    ) -> Shape {
        Shape {
            daemon_pgid,
            refuse_kill_own_group,
            pid_above,
            pgid_above: daemon_pgid && pgid_above,
        }
    }
}

fn low32(v: i64) -> u32 {
    v as u32
}

impl Template {
    /// Builds the template of `shape`, or `None` when the program depends
    /// on the values (the cache then compiles each spec in full).
    fn build(f: &Filters, server: ProcessId, shape: Shape) -> Option<Template> {
        let spec = |pid: u32, pgid: u32| {
            let mut s = FilterSpec::for_tree(server, None, None, f.effective_landlock_abi);
            s.protected_pids.insert(pid);
            if shape.daemon_pgid {
                s.protected_pgids.insert(pgid);
            }
            s.refuse_kill_own_group = shape.refuse_kill_own_group;
            s.blocked = f.blocked.clone();
            s.refuse_exec_memory = f.refuse_exec_memory;
            s.backend = f.backend;
            s.net = f.net.clone();
            s
        };
        // Two placeholders on the daemon's side of `own`.
        let side = |above: bool, own: u32, high: [u32; 2]| -> Option<[u32; 2]> {
            if above {
                Some(high)
            } else {
                let a = own.checked_sub(1).filter(|v| *v >= 2)?;
                let b = own.checked_sub(2).filter(|v| *v >= 2)?;
                Some([a, b])
            }
        };
        let pids = side(shape.pid_above, server.pid, [HIGH[0], HIGH[1]])?;
        // Without the daemon's group in the spec its side decides nothing.
        let pgids = if shape.daemon_pgid {
            side(shape.pgid_above, server.pgid, [HIGH[2], HIGH[3]])?
        } else {
            [HIGH[2], HIGH[3]]
        };
        let a = build::program(&spec(pids[0], pgids[0])).ok()?;
        let b = build::program(&spec(pids[1], pgids[1])).ok()?;
        if a.len() != b.len() {
            return None;
        }
        let neg = |g: u32| low32(-i64::from(g));
        let placed = [pids[0], pids[1], neg(pgids[0]), neg(pgids[1])];
        let (mut pid_at, mut neg_pgid_at) = (Vec::new(), Vec::new());
        for (i, (x, y)) in a.iter().zip(&b).enumerate() {
            if (x.code, x.jt, x.jf) != (y.code, y.jt, y.jf) {
                return None;
            }
            if (x.k, y.k) == (pids[0], pids[1]) {
                pid_at.push(i);
            } else if shape.daemon_pgid && (x.k, y.k) == (neg(pgids[0]), neg(pgids[1])) {
                neg_pgid_at.push(i);
            } else if x.k != y.k || placed.contains(&x.k) {
                // A placeholder where it was not put, or a value that moved:
                // patching would not give the compiled program.
                return None;
            }
        }
        if pid_at.is_empty() || shape.daemon_pgid == neg_pgid_at.is_empty() {
            return None;
        }
        Some(Template {
            program: a,
            pid_at,
            neg_pgid_at,
        })
    }

    fn patch(&self, pid: u32, pgid: u32) -> Vec<libc::sock_filter> {
        let mut p = self.program.clone();
        for &i in &self.pid_at {
            p[i].k = pid;
        }
        for &i in &self.neg_pgid_at {
            p[i].k = low32(-i64::from(pgid));
        }
        p
    }
}

/// The server's filter compiler: the policy's blocklist, the effective
/// Landlock ABI, and a cache of compiled programs.
pub struct Filters {
    blocked: BTreeSet<String>,
    refuse_exec_memory: bool,
    net: NetFilter,
    effective_landlock_abi: i64,
    backend: ExecBackend,
    cache: Mutex<HashMap<FilterSpec, Arc<CompiledFilter>>>,
    /// Per shape: its template, or `None` when it cannot have one.
    templates: Mutex<HashMap<Shape, Option<Arc<Template>>>>,
}

impl Filters {
    /// Checks the policy's names by compiling once.
    ///
    /// # Errors
    /// The policy's blocklist cannot be compiled.
    pub fn new(
        policy_blocked: &[String],
        refuse_exec_memory: bool,
        net: NetFilter,
        effective_landlock_abi: i64,
        backend: ExecBackend,
    ) -> Result<Filters, FilterError> {
        let f = Filters {
            blocked: policy_blocked.iter().cloned().collect(),
            refuse_exec_memory,
            net,
            effective_landlock_abi,
            backend,
            cache: Mutex::new(HashMap::new()),
            templates: Mutex::new(HashMap::new()),
        };
        f.compile(FilterSpec::for_tree(
            ProcessId::current(),
            None,
            None,
            effective_landlock_abi,
        ))?;
        // The usual shapes are ready before the first shell, which then
        // costs what later ones cost: a daemon started after the server (its
        // command, or a later one) in a group of its own or the server's.
        // Whether the tree's own group is protected (the shell is in the
        // daemon's group, or the SDK gave it one of its own) is known only
        // at its wrap-init: both are ready.
        let server = ProcessId::current();
        for daemon_pgid in [false, true] {
            for refuse_kill_own_group in [true, false] {
                f.template(
                    server,
                    Shape::new(daemon_pgid, refuse_kill_own_group, true, true),
                );
            }
        }
        Ok(f)
    }

    /// The template of `shape` (built on first use).
    fn template(&self, server: ProcessId, shape: Shape) -> Option<Arc<Template>> {
        if let Some(t) = self.lock_templates().get(&shape) {
            return t.clone();
        }
        let t = Template::build(self, server, shape).map(Arc::new);
        if t.is_none() {
            tracing::debug!(
                ?shape,
                "no filter template for this shape: each spec compiled in full"
            );
        }
        self.lock_templates().insert(shape, t.clone());
        t
    }

    fn lock_templates(&self) -> std::sync::MutexGuard<'_, HashMap<Shape, Option<Arc<Template>>>> {
        self.templates
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The Landlock ABI agentsh uses (the kernel's, capped by `landlock.max_abi`).
    pub fn effective_landlock_abi(&self) -> i64 {
        self.effective_landlock_abi
    }

    /// Where this server's trees' traps go.
    pub fn backend(&self) -> ExecBackend {
        self.backend
    }

    /// The program for `spec` plus the policy's blocklist, from the cache when
    /// it was compiled before.
    ///
    /// # Errors
    /// See [`compile`].
    pub fn compile(&self, spec: FilterSpec) -> Result<Arc<CompiledFilter>, FilterError> {
        self.compile_from(spec, None)
    }

    /// [`Filters::compile`]; with `template` (its daemon's pid and group),
    /// from the template instead of libseccomp when one fits.
    fn compile_from(
        &self,
        mut spec: FilterSpec,
        template: Option<(&Template, ProcessId)>,
    ) -> Result<Arc<CompiledFilter>, FilterError> {
        spec.blocked = self.blocked.clone();
        spec.refuse_exec_memory = self.refuse_exec_memory;
        spec.backend = self.backend;
        spec.net = self.net.clone();
        if let Some(c) = self.lock().get(&spec) {
            return Ok(c.clone());
        }
        // Compiled outside the lock: two wrap-inits may both compile a new
        // spec, and the second result simply replaces the first.
        let c = Arc::new(match template {
            Some((t, daemon)) => compiled(&spec, t.patch(daemon.pid, daemon.pgid)),
            None => compile(&spec)?,
        });
        let mut cache = self.lock();
        if cache.len() >= CACHE_ENTRIES {
            cache.clear();
        }
        cache.insert(spec, c.clone());
        Ok(c)
    }

    /// [`FilterSpec::for_tree`] for this server, compiled.
    ///
    /// # Errors
    /// See [`compile`].
    pub fn for_tree(
        &self,
        daemon: Option<ProcessId>,
        tree_pgid: Option<u32>,
    ) -> Result<Arc<CompiledFilter>, FilterError> {
        let server = ProcessId::current();
        let spec = FilterSpec::for_tree(server, daemon, tree_pgid, self.effective_landlock_abi);
        // Templates cover a daemon of its own (not the server), in a group
        // of its own or the server's.
        let template = daemon
            .filter(|d| d.pid > 1 && d.pid != server.pid && server.pgid > 1 && d.pgid > 1)
            .and_then(|d| {
                let shape = Shape::new(
                    d.pgid != server.pgid,
                    spec.refuse_kill_own_group,
                    d.pid > server.pid,
                    d.pgid > server.pgid,
                );
                self.template(server, shape).map(|t| (t, d))
            });
        self.compile_from(spec, template.as_ref().map(|(t, d)| (t.as_ref(), *d)))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<FilterSpec, Arc<CompiledFilter>>> {
        self.cache
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests;
