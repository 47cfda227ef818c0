//! The exec supervisor: rules on every `execve`/`execveat` of a supervised tree.
//!
//! The folder is the architecture. A *backend* catches an exec and answers
//! it: `notify` (one seccomp user-notify fd per tree, a thread each) or
//! `trace` (`SECCOMP_RET_TRACE` stops of every task of every tree, on one
//! tracer thread: gVisor, restrictive seccomp profiles).
//! Everything after the catch is one backend-neutral path, `exec`: gather the
//! facts (`gather`) in the calling thread's view (`crate::tracee`), make sure
//! nothing else can change them (`sharing`: stop every task that shares the
//! caller's memory; `vma`: refuse strings in memory another process could
//! write), ask the pure policy (`policy::judge`), hold for an operator
//! (`approval`), audit, answer, and watch the exec complete (`ptrace`). `depth` keeps the
//! tree's depth book; `signals` is the signal guard's user-notify half;
//! `identity` recognises copies of the programs the policy names, from an
//! index [`prepare`] builds at server start (no exec waits for it).
//!
//! Fail-closed: any fact that cannot be read, decided or frozen is answered
//! EACCES (never CONTINUE) and audited with the reason. A program path that
//! does not exist is answered ENOENT/ENOTDIR without a decision: shells probe
//! every PATH entry, and those probes are not execs. If the server dies, the
//! kernel fails every later trapped syscall of the tree with ENOSYS, and
//! detaches every task the supervisor had stopped.

mod backend;
mod depth;
mod dispatch;
mod egress;
mod exec;
pub mod explain;
mod gather;
mod identity;
mod netproc;
mod phases;
mod procfiles;
mod ptrace;
mod redirect;
pub mod retry;
mod seam;
mod sharing;
mod signals;
mod state;
mod verify;
mod vma;

pub use backend::{notify, trace};
pub use depth::DepthBook;
pub use exec::RULE_FILELESS_EXEC;
pub use seam::{HeldConnect, HeldExec, Hold, Holder, Verification};
pub use verify::Expected;

use crate::audit::AuditLog;
use crate::config::ExecveSection;
use crate::policy::Policy;
use std::os::fd::OwnedFd;
use std::sync::Arc;

/// What every tree's supervisor shares.
pub struct SupervisorContext {
    pub limits: ExecveSection,
    pub audit: Arc<AuditLog>,
    /// Execs held for an operator (`decision: approve`).
    pub approvals: Arc<dyn Hold>,
    /// `audit.on_failure`.
    pub audit_on_failure: crate::config::AuditOnFailure,
    /// The DNS stub (`egress.dns: stub`), once a session's policy needs it.
    pub dns: std::sync::OnceLock<Arc<crate::dns::Stub>>,
    /// `egress.compat`: what a call egress cannot judge on this host gets.
    pub egress_compat: crate::config::EgressCompat,
}

/// One supervised tree.
pub struct Tree {
    pub session_id: String,
    /// The wrapper's pid: its first exec (of the shell) is depth 0.
    pub root_pid: u32,
    /// Where its programs may not come from (`exec_sources`), checked by
    /// the supervisor as well as by Landlock.
    pub exec_places: crate::policy::landlock::ExecPlaces,
    /// Its session's policy (fixed for the tree's life).
    pub rules: Arc<TreeRules>,
    /// Set when its session's trees are killed: any call of the tree that
    /// reaches the supervisor then kills its caller.
    pub doomed: Arc<std::sync::atomic::AtomicBool>,
}

/// What a tree is judged by, fixed at its wrap-init (see [`Tree`]).
#[derive(Clone)]
pub struct TreeTerms {
    pub exec_places: crate::policy::landlock::ExecPlaces,
    pub rules: Arc<TreeRules>,
    pub doomed: Arc<std::sync::atomic::AtomicBool>,
}

impl Tree {
    pub fn new(session_id: String, root_pid: u32, terms: TreeTerms) -> Tree {
        Tree {
            session_id,
            root_pid,
            exec_places: terms.exec_places,
            rules: terms.rules,
            doomed: terms.doomed,
        }
    }
}

/// SHA-256 of what `file` reads, as hex (what `sha256:` entries name).
pub use identity::sha256_hex;

/// The audit rules of refusals the supervisor makes whatever the policy
/// says (a program it cannot read, memory it cannot freeze, a program from
/// a place the tree can write...): a replay of such an event through a
/// policy says nothing (`agentsh policy test`).
pub fn mechanism_rules() -> Vec<&'static str> {
    crate::audit::Refusal::ALL
        .iter()
        .filter(|r| r.of_exec())
        .map(|r| r.rule())
        .filter(|r| *r != crate::policy::RULE_FILELESS_EXEC)
        .chain([crate::policy::landlock::RULE_EXEC_SOURCES])
        .collect()
}

/// The policy a tree is judged by, and the identity index of the programs
/// it names: one per session (sessions with the same policy share them).
pub struct TreeRules {
    pub policy: Arc<Policy>,
    pub index: &'static identity::IdentityIndex,
}

impl TreeRules {
    /// The DNS stub, if the tree's policy sends its DNS there (`dns: stub`).
    pub fn stub<'a>(&self, ctx: &'a SupervisorContext) -> Option<&'a Arc<crate::dns::Stub>> {
        ctx.dns.get().filter(|_| self.policy.wants_dns_stub())
    }
}

/// Serves `tree`'s notify fd (shared with approval waiters, which answer
/// held execs on it) until every process in it has exited.
pub fn serve(ctx: Arc<SupervisorContext>, tree: Tree, fd: Arc<OwnedFd>) {
    notify::serve(ctx, tree, fd);
}

/// The identity indexes built so far, each with the command entries it
/// indexes: sessions whose policies name the same programs share one. Each
/// is kept for the server's life (its watcher thread holds it), so there
/// are at most [`MAX_INDEXES`].
static INDEXES: std::sync::Mutex<Vec<(Vec<String>, &'static identity::IdentityIndex)>> =
    std::sync::Mutex::new(Vec::new());

/// The most distinct identity indexes (distinct sets of named programs
/// among the sessions' policies) a server builds.
pub const MAX_INDEXES: usize = 32;

/// Start-up work the first exec must not pay for, under way on its own
/// thread: the identity indexes of the policies sessions start with
/// (hashing every program they name) and the report of what ptrace allows.
/// The server waits for it ([`Preparing::wait`]) before it answers
/// `/healthz`.
pub struct Preparing(Result<std::thread::JoinHandle<Result<(), String>>, Vec<Arc<Policy>>>);

/// Starts [`Preparing`] for `policies`.
pub fn prepare(policies: Vec<Arc<Policy>>) -> Preparing {
    let copy = policies.clone();
    Preparing(
        std::thread::Builder::new()
            .name("agentsh-index".into())
            .spawn(move || prepare_now(&copy))
            .map_err(|e| {
                tracing::debug!("start-up work on the main thread (no thread: {e})");
                policies
            }),
    )
}

impl Preparing {
    /// Waits until the identity indexes are built and watched.
    ///
    /// # Errors
    /// The thread building them panicked (its message is in the log
    /// above), or there are more than [`MAX_INDEXES`].
    pub fn wait(self) -> Result<(), String> {
        match self.0 {
            Ok(h) => h.join().map_err(|_| {
                "building the identity index failed (see the panic above); the server does not \
                 start without it"
                    .to_string()
            })?,
            Err(policies) => prepare_now(&policies),
        }
    }
}

fn prepare_now(policies: &[Arc<Policy>]) -> Result<(), String> {
    report_ptrace();
    for p in policies {
        index_for(p)?;
    }
    Ok(())
}

/// The identity index of the programs `policy` names: the one already
/// built for the same entries, or one built now (blocking: hashing every
/// program named; at start, or when an operator creates a session).
///
/// # Errors
/// [`MAX_INDEXES`] distinct indexes exist already.
pub fn index_for(policy: &Policy) -> Result<&'static identity::IdentityIndex, String> {
    let mut commands = policy.command_entries();
    commands.sort();
    commands.dedup();
    let mut built = INDEXES
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some((_, index)) = built.iter().find(|(c, _)| *c == commands) {
        return Ok(index);
    }
    if built.len() >= MAX_INDEXES {
        return Err(format!(
            "policy {:?}: the server already has {MAX_INDEXES} policies naming different \
             programs; restart it with fewer distinct policies",
            policy.name()
        ));
    }
    let t = std::time::Instant::now();
    let (index, stats) = identity::IdentityIndex::start(&commands, true);
    tracing::info!(
        policy = policy.name(),
        programs = stats.programs,
        files = stats.files,
        mib = format!("{:.1}", stats.bytes as f64 / f64::from(1u32 << 20)),
        threads = stats.threads,
        ms = t.elapsed().as_millis() as u64,
        watched_dirs = stats.watched,
        deferred = stats.deferred,
        "identity index built: copies of these programs are judged as them"
    );
    // Kept for the server's life: the watcher thread holds it.
    let index: &'static identity::IdentityIndex = Box::leak(Box::new(index));
    if index.has_background_work() {
        if let Err(e) = index.watch_in_background() {
            tracing::warn!(
                "{e}: a program the policy names that is installed after the index was built is \
                 indexed only when the server restarts"
            );
        }
    }
    built.push((commands, index));
    Ok(index)
}

/// Says at start whether the server can stop tasks and watch execs.
fn report_ptrace() {
    let cap_eff = crate::tracee::ProcStatus::read("self")
        .ok()
        .and_then(|s| s.mask("CapEff"))
        .unwrap_or(0);
    const CAP_SYS_PTRACE: u32 = 19;
    if cap_eff & (1 << CAP_SYS_PTRACE) == 0 {
        tracing::info!(
            "no CAP_SYS_PTRACE: trees are read and watched with their owners' credentials; a \
             process that changed its credentials and has not exec'd since cannot be read (its \
             execs are refused), and where Yama allows ptrace only of descendants, only trees \
             started below the server (agentsh entrypoint) can be supervised"
        );
    }
}

/// How a held exec ended once an operator approved it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Resumed {
    /// It ran as approved (or failed, or its caller died: nothing else ran).
    AsApproved,
    /// It could not be watched: refused with EACCES instead.
    Refused(String),
    /// What ran was not what the operator approved: killed before its first
    /// instruction. The text says what it was.
    Killed(String),
}

/// Lets an approved exec proceed and makes sure it runs exactly the file and
/// argv the operator saw: the calling thread is seized before CONTINUE and
/// checked at `PTRACE_EVENT_EXEC` (see `verify`). Called on the approval
/// waiter's thread, which is then the tracer (its tracees are detached by the
/// kernel when the thread ends).
pub fn resume_approved(
    fd: std::os::fd::BorrowedFd<'_>,
    id: u64,
    tid: u32,
    pid: u32,
    expected: Option<&Expected>,
) -> Resumed {
    use agentsh_proto::notif;
    if let Err(e) = verify::arm(tid) {
        let _ = notif::respond_errno(fd, id, libc::EACCES);
        return Resumed::Refused(format!(
            "cannot watch the approved exec to verify what runs (ptrace: {e})"
        ));
    }
    // SAFETY ARGUMENT for CONTINUE: the operator approved a file identity and
    // an argv; another thread may have changed the path or argv since, so
    // what the kernel starts is checked at PTRACE_EVENT_EXEC, before its first
    // instruction, and killed if it is not exactly that (`verify::watch`).
    if notif::respond_continue(fd, id).is_err() {
        return Resumed::AsApproved; // the caller is gone: nothing runs
    }
    verify::started(tid);
    let mut lingering = ptrace::Lingering::default();
    match verify::watch(tid, pid, expected, None, &mut lingering) {
        verify::Outcome::Killed(what) => Resumed::Killed(what),
        verify::Outcome::TimedOut => Resumed::Refused(format!(
            "killed: the exec did not finish within {:?}, so what it runs could not be \
             checked",
            verify::EXEC_DEADLINE
        )),
        verify::Outcome::Ran | verify::Outcome::Failed | verify::Outcome::Gone => {
            Resumed::AsApproved
        }
    }
}

impl Holder {
    /// Answers the held syscall later, from any thread, without running it:
    /// `val >= 0` is its return value, `val < 0` is `-errno`. A syscall that
    /// no longer waits (its thread died) is left alone.
    pub fn answer_value(self, val: i64) {
        match self {
            Holder::Notify { fd, id } => {
                use std::os::fd::AsFd;
                if let Err(e) = agentsh_proto::notif::respond_value(fd.as_fd(), id, val) {
                    tracing::debug!(id, "held syscall not answered (gone?): {e}");
                }
            }
            Holder::Trace { tid, starttime } => {
                trace::answer_value(tid, starttime, val);
            }
        }
    }

    /// Puts `sock` into the held caller's process at fd `at` (replacing
    /// what is there), before the answer. Only user-notify can.
    pub fn install_fd(&self, sock: &OwnedFd, at: i32, cloexec: bool) -> std::io::Result<()> {
        use std::os::fd::AsFd;
        match self {
            Holder::Notify { fd, id } => {
                agentsh_proto::notif::install_fd(fd.as_fd(), *id, sock.as_fd(), at, cloexec)
            }
            Holder::Trace { .. } => Err(std::io::Error::from_raw_os_error(libc::ENOSYS)),
        }
    }

    /// Puts `file` into the held caller's process at its lowest free fd
    /// number; returns it. Only user-notify can.
    pub fn add_fd(&self, file: &OwnedFd, cloexec: bool) -> std::io::Result<i32> {
        use std::os::fd::AsFd;
        match self {
            Holder::Notify { fd, id } => {
                agentsh_proto::notif::add_fd(fd.as_fd(), *id, file.as_fd(), cloexec)
            }
            Holder::Trace { .. } => Err(std::io::Error::from_raw_os_error(libc::ENOSYS)),
        }
    }

    /// The notification id it answers (0 under ptrace, which has none).
    pub fn notif_id(&self) -> u64 {
        match self {
            Holder::Notify { id, .. } => *id,
            Holder::Trace { .. } => 0,
        }
    }

    /// Which of `ids` (notification ids of one held exec, oldest first) is
    /// still waiting: for user-notify the last valid one; for ptrace the
    /// thread itself, while it is alive (it cannot leave its stop unanswered).
    pub fn live(&self, ids: &[u64]) -> Option<u64> {
        match self {
            Holder::Notify { fd, .. } => {
                use std::os::fd::AsFd;
                ids.iter()
                    .rev()
                    .copied()
                    .find(|&n| agentsh_proto::notif::id_valid(fd.as_fd(), n))
            }
            Holder::Trace { tid, starttime } => {
                trace::still_held(*tid, *starttime).then(|| ids.last().copied().unwrap_or(0))
            }
        }
    }

    /// Fails the held exec with EACCES.
    pub fn refuse(&self, id: u64) {
        match self {
            Holder::Notify { fd, .. } => {
                use std::os::fd::AsFd;
                if let Err(e) = agentsh_proto::notif::respond_errno(fd.as_fd(), id, libc::EACCES) {
                    tracing::info!("answer not delivered (the process is gone): {e}");
                }
            }
            Holder::Trace { tid, starttime } => trace::answer(*tid, *starttime, None),
        }
    }

    /// Lets the approved exec of thread `tid` (process `pid`) proceed,
    /// making sure what runs is `what` (`None`: its identity is unknown, so
    /// it is refused instead).
    pub fn resume(&self, id: u64, tid: u32, pid: u32, what: Option<Verification>) -> Resumed {
        let Some(v) = what else {
            self.refuse(id);
            return Resumed::Refused("the approved file's identity could not be read".into());
        };
        match self {
            Holder::Notify { fd, .. } => {
                use std::os::fd::AsFd;
                resume_approved(fd.as_fd(), id, tid, pid, Some(&v.expected))
            }
            // The tracer checks the new image at PTRACE_EVENT_EXEC and audits
            // a mismatch itself.
            Holder::Trace { tid, starttime } => {
                trace::answer(*tid, *starttime, Some(v));
                Resumed::AsApproved
            }
        }
    }
}
