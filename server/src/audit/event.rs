//! What an audit event holds: one type per kind of event ([`EventBody`]),
//! the parts they share (who execs what, how an approval ended), and the
//! envelope every sink writes ([`Event`]).
//!
//! Failure modes: none; these are types (serialised by serde).

use serde::Serialize;

/// What happened to the exec syscall.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Action {
    Allow,
    Deny,
}

/// How an approval request ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ApprovalOutcome {
    Approved,
    Denied,
    Timeout,
    Cancelled,
}

impl ApprovalOutcome {
    pub fn as_str(self) -> &'static str {
        match self {
            ApprovalOutcome::Approved => "approved",
            ApprovalOutcome::Denied => "denied",
            ApprovalOutcome::Timeout => "timeout",
            ApprovalOutcome::Cancelled => "cancelled",
        }
    }
}

/// How an approval request ended, as the one event of the call it held
/// records it (an exec, a connect or send, an HTTP request): flattened into
/// the event, its fields absent when nothing was held.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct ApprovalRecord {
    pub approval_id: String,
    pub approval_outcome: ApprovalOutcome,
    /// Who decided (the operator's identity as the server saw it),
    /// `timeout`, `server` or `none`.
    pub approver: String,
    /// The operator's stated reason, or why the request ended, if any.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub reason: Option<String>,
}

/// Whether anything else could write the caller's memory while its path and
/// argv were read: `exclusive` (nothing shares it), `frozen` (every task
/// sharing it was stopped by the supervisor).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Memory {
    Exclusive,
    Frozen,
    /// Other tasks may run on (the ptrace backend, or `execve.race_guard:
    /// verify` with tasks sharing the memory): the new image is checked
    /// against what was judged at `PTRACE_EVENT_EXEC`, before its first
    /// instruction.
    Verified,
}

/// The identity of a file as the kernel knows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct FileIdentity {
    pub dev: u64,
    pub ino: u64,
    /// SHA-256 of the content, when it was computed.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub sha256: Option<String>,
}

/// Who execs what: the part of an exec event the supervisor gathered.
#[derive(Debug, Clone, Default, Serialize, serde::Deserialize, PartialEq)]
pub struct ExecSubject {
    pub pid: u32,
    pub parent_pid: u32,
    pub depth: u32,
    pub filename: String,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub resolved: Option<String>,
    pub argv: Vec<String>,
    pub truncated: bool,
    /// The file has no name on disk (a memfd, a deleted file).
    #[serde(skip_serializing_if = "std::ops::Not::not", default)]
    pub anonymous: bool,
    /// The executed file (device, inode, digest when computed).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub file: Option<FileIdentity>,
    /// The `#!` interpreters the kernel starts, outermost script's first.
    #[serde(skip_serializing_if = "Vec::is_empty", default)]
    pub interpreters: Vec<crate::policy::Interpreter>,
    /// Programs of the policy the file is a byte-identical copy of.
    #[serde(skip_serializing_if = "Vec::is_empty", default)]
    pub copy_of: Vec<String>,
    /// When the program is a dynamic loader: what it will map, outermost first.
    #[serde(skip_serializing_if = "Vec::is_empty", default)]
    pub loader_payloads: Vec<crate::policy::Interpreter>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub memory: Option<Memory>,
}

/// One exec, as decided by the supervisor. Built by [`ExecEvent::new`] only.
#[derive(Debug, Clone, Serialize, serde::Deserialize, PartialEq)]
pub struct ExecEvent {
    #[serde(flatten)]
    pub subject: ExecSubject,
    /// What the policy said.
    pub decision: crate::policy::Decision,
    pub rule: String,
    /// What happened to the syscall.
    pub effective_action: Action,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub message: Option<String>,
    /// How the approval it waited for ended (none asked: absent).
    #[serde(flatten, default, skip_serializing_if = "Option::is_none")]
    pub approval: Option<ApprovalRecord>,
    /// Which attempt this exec belongs to (a server-wide number). A refused
    /// exec retried by the same process for the same file and argv (a PATH
    /// search trying `/usr/bin/x`, then `/bin/x`) is the same attempt.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub attempt: Option<u64>,
    /// This exec repeats a refused attempt and was answered like it, without
    /// a new decision or approval request.
    #[serde(skip_serializing_if = "std::ops::Not::not", default)]
    pub retry: bool,
    /// For a refusal: whether its caller was told why on its stderr
    /// (`execve.explain`).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub explained: Option<bool>,
}

impl ExecEvent {
    /// The event of a decided exec.
    pub fn new(
        subject: ExecSubject,
        decision: crate::policy::Decision,
        rule: impl Into<String>,
        effective_action: Action,
        message: Option<String>,
    ) -> ExecEvent {
        ExecEvent {
            subject,
            decision,
            rule: rule.into(),
            effective_action,
            message,
            approval: None,
            attempt: None,
            retry: false,
            explained: None,
        }
    }

    /// The same, as (a retry of) attempt `attempt`.
    pub fn in_attempt(mut self, attempt: u64, retry: bool) -> ExecEvent {
        self.attempt = Some(attempt);
        self.retry = retry;
        self
    }

    /// The same, as the outcome of approval request `id`.
    pub fn with_approval(
        mut self,
        id: &str,
        outcome: ApprovalOutcome,
        approver: String,
        reason: Option<String>,
    ) -> ExecEvent {
        self.approval = Some(ApprovalRecord {
            approval_id: id.to_string(),
            approval_outcome: outcome,
            approver,
            reason,
        });
        self
    }
}

/// One wrap-init: a shim asked to supervise a new tree.
#[derive(Debug, Clone, Serialize, serde::Deserialize, PartialEq)]
pub struct WrapInitEvent {
    pub caller_uid: u32,
    pub agent_command: String,
    pub agent_args: Vec<String>,
    pub notify_socket: String,
    pub policy: String,
    /// The Landlock ruleset asked of unixwrap (what the kernel then enforced
    /// is in unixwrap's log: it may be less under `best_effort`).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub landlock: Option<crate::policy::landlock::LandlockSummary>,
    /// The daemon sockets hidden from the tree, and how.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub daemon_sockets: Option<DaemonSocketsSummary>,
    /// The credential stores kept from the tree (the policy's
    /// `credential_files`; paths only, never contents) and how.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub credential_files: Option<CredentialFilesSummary>,
    /// The process that asked (the shim, which becomes the tree's root).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub shim_pid: Option<u32>,
    /// Its parent: the SDK daemon that spawned the shell.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub daemon_pid: Option<u32>,
    /// The seccomp program the tree got: its size, how signals are guarded
    /// and which processes are protected.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub seccomp: Option<crate::filter::FilterSummary>,
    /// How the tree's execs reach the supervisor: `notify` or `ptrace`.
    #[serde(default)]
    pub backend: agentsh_proto::ExecBackend,
    /// What the policy asks that this host does not enforce for the tree
    /// (e.g. without Landlock: file rules, network rules, the protection of
    /// agentsh's own files).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub not_enforced: Vec<String>,
    /// The names the policy's `env:` removes from the shell's environment
    /// (of those the shim reported), and the names it sets: never values.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub env_removed: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub env_injected: Vec<String>,
    /// The session's limits as applied to the tree, and its cgroup
    /// (`pids=64 memory=67108864 in /sys/fs/cgroup/agentsh-tree-…`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limits: Option<String>,
}

/// What the wrap-init event records of the daemon-socket masks.
#[derive(Debug, Clone, Serialize, serde::Deserialize, PartialEq)]
pub struct DaemonSocketsSummary {
    pub hidden: Vec<String>,
    /// `mount namespace`, or why not.
    pub mechanism: String,
}

/// `credential_files` of a wrap-init event.
#[derive(Debug, Clone, Serialize, serde::Deserialize, PartialEq)]
pub struct CredentialFilesSummary {
    /// The stores covered (or, under the Landlock fallback, denied).
    pub hidden: Vec<String>,
    /// The files kept read-only (`read_only_files`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub read_only: Vec<String>,
    /// `mount namespace`, `user namespace`, `landlock: ...`, or
    /// `NOT HIDDEN (...)` and why.
    pub mechanism: String,
}

/// A shell the shim ran unsupervised under `shim_install=auto` before
/// agentsh had started in this container, as the root shim recorded it.
#[derive(Debug, Clone, Serialize, serde::Deserialize, PartialEq)]
pub struct UnsupervisedEvent {
    /// When it ran, as the shim recorded it.
    pub ran_at: String,
    pub pid: u32,
    pub ppid: u32,
    pub uid: u32,
    pub argv: Vec<String>,
    pub reason: String,
    /// It ran in an earlier life of the container than the server's (an
    /// image build step after `agentsh shim install`, or before a restart):
    /// a record the image or the disk carried, not a shell of this life.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub earlier_life: bool,
}

/// An admin's unsupervised login (`admin-shell`), as its process asked the
/// server to record it.
#[derive(Debug, Clone, Serialize, serde::Deserialize, PartialEq)]
pub struct AdminSessionEvent {
    /// Who asked (the connection's peer), and its parent.
    pub pid: u32,
    pub ppid: u32,
    pub uid: u32,
    /// The parent's name (`sshd`, `login`, `runc`...).
    pub parent_comm: String,
    /// The admin shell's stdin, when it is a terminal.
    pub tty: String,
}

/// One tree whose notify fd the server took over (or refused).
#[derive(Debug, Clone, Serialize, serde::Deserialize, PartialEq)]
pub struct HandoffEvent {
    pub pid: u32,
    pub accepted: bool,
    pub reason: String,
}

/// A signal call the supervisor refused (Landlock ABI < 6: see
/// `supervisor::signals`).
#[derive(Debug, Clone, Serialize, serde::Deserialize, PartialEq)]
pub struct SignalEvent {
    /// The calling thread's id.
    pub pid: u32,
    /// kill | tkill | rt_sigqueueinfo | pidfd_send_signal | pidfd_open
    pub syscall: String,
    /// The call's first argument: a pid, -pgid, 0, -1 or a pidfd.
    pub target: i64,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub signal: Option<i64>,
    pub decision: String,
    pub reason: String,
}

/// A path call the file rules refused, under the ptrace backend where the
/// kernel has no Landlock (`supervisor::files`): the tracer keeps them.
#[derive(Debug, Clone, Serialize, serde::Deserialize, PartialEq)]
pub struct FileEvent {
    /// The calling thread's id.
    pub pid: u32,
    /// openat | unlink | rename | ... (the call's name).
    pub syscall: String,
    /// The path as the tree named it.
    pub path: String,
    /// The second path (rename, link, symlink), as named.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub path2: Option<String>,
    /// Where the rules were applied: the canonical path the right was
    /// missing at (a file, or the directory of a new or removed name).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub resolved: Option<String>,
    /// read | write | create | delete | list (absent: a device node, a
    /// move that would gain a right, or a mechanism refusal).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub right: Option<String>,
    pub decision: crate::policy::Decision,
    /// `file_rules`, or the mechanism's refusal (`unreadable`, ...).
    pub rule: String,
    pub reason: String,
}

/// One destination a tree named, as egress supervision judged it (the
/// first time: later calls to the same destination reuse the decision).
#[derive(Debug, Clone, Serialize, serde::Deserialize, PartialEq)]
pub struct ConnectEvent {
    /// The calling thread's id.
    pub pid: u32,
    /// connect | sendto | sendmsg | sendmmsg
    pub syscall: String,
    /// The name the tree resolved to `ip`, when known.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub host: Option<String>,
    /// The destination (absent when the call could not be judged at all).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub ip: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub port: Option<u16>,
    /// tcp | udp
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub protocol: Option<String>,
    /// The egress rule that decided, `default`, or the mechanism's own
    /// refusal (`egress_unenforceable`).
    pub rule: String,
    pub decision: crate::policy::Decision,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub message: Option<String>,
    /// For `decision: approve`: what happened to the call.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub effective_action: Option<Action>,
    /// How the approval it waited for ended (none asked: absent).
    #[serde(flatten, default, skip_serializing_if = "Option::is_none")]
    pub approval: Option<ApprovalRecord>,
}

/// One DNS query of a tree, as the stub decided it (`egress.dns: stub`).
#[derive(Debug, Clone, Serialize, serde::Deserialize, PartialEq)]
pub struct DnsEvent {
    /// The thread whose call to the stub registered the socket.
    pub pid: u32,
    /// The name asked for (absent: the query could not be read).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub name: Option<String>,
    /// A, AAAA, TXT, ... or TYPEn.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub qtype: Option<String>,
    /// The egress rule that lets the name be asked, `default`, or
    /// `dns_malformed`.
    pub rule: String,
    pub decision: crate::policy::Decision,
    /// The addresses of the answer, now bound to the name for this tree.
    #[serde(skip_serializing_if = "Vec::is_empty", default)]
    pub answers: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub message: Option<String>,
}

/// One HTTP request to a destination whose egress rule has `http:`, as
/// agentsh's proxy judged it. Never a header value or a body; the path
/// without its query.
#[derive(Debug, Clone, Serialize, serde::Deserialize, PartialEq)]
pub struct HttpEvent {
    /// The thread whose connect the request came through.
    pub pid: u32,
    pub method: String,
    /// http | https
    pub scheme: String,
    pub host: String,
    pub path: String,
    /// Where the connection goes (the destination the tree named).
    pub ip: String,
    pub port: u16,
    /// The egress rule whose `http:` judged it.
    pub egress_rule: String,
    /// The http rule that decided, `default`, or the proxy's own refusal
    /// (`http_path_form`, `http_host`, `http_secret`, `http_upstream`).
    pub rule: String,
    pub decision: crate::policy::Decision,
    /// The upstream's status (absent: the request never reached it).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub status: Option<u16>,
    /// The headers agentsh set on it (names only).
    #[serde(skip_serializing_if = "Vec::is_empty", default)]
    pub injected: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub message: Option<String>,
    /// For `decision: approve`: what happened to the request.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub effective_action: Option<Action>,
    /// How the approval it waited for ended (none asked: absent).
    #[serde(flatten, default, skip_serializing_if = "Option::is_none")]
    pub approval: Option<ApprovalRecord>,
}

#[derive(Debug, Clone, Serialize, serde::Deserialize, PartialEq)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum EventBody {
    Execve(ExecEvent),
    Connect(ConnectEvent),
    Dns(DnsEvent),
    Http(HttpEvent),
    WrapInit(Box<WrapInitEvent>),
    Handoff(HandoffEvent),
    UnsupervisedRun(UnsupervisedEvent),
    Signal(SignalEvent),
    File(FileEvent),
    AdminSession(AdminSessionEvent),
    Session(SessionEvent),
    PolicyReload(Box<PolicyReloadEvent>),
    Limit(LimitEvent),
}

/// A tree met one of its session's limits (`limits:`): forks refused at
/// `pids`, processes killed at `memory`, periods held back at `cpu`, the
/// tree killed at `wall`.
#[derive(Debug, Clone, Serialize, serde::Deserialize, PartialEq)]
pub struct LimitEvent {
    /// `pids`, `memory`, `cpu` or `wall`.
    pub limit: String,
    /// The tree's first process (the shell's).
    pub root_pid: u32,
    /// The limit as applied (a count, bytes, seconds).
    pub value: String,
    /// How many times the kernel counted it (forks refused, processes
    /// killed, periods throttled; 1 for `wall`).
    pub count: u64,
    pub detail: String,
}

/// A policy reload (`agentsh policy reload`, or SIGHUP) put a session's
/// policy, as read again, in place: one event per session reloaded.
#[derive(Debug, Clone, Serialize, serde::Deserialize, PartialEq)]
pub struct PolicyReloadEvent {
    /// `api` or `sighup`.
    pub by: String,
    /// Who asked (the operator's or the signal sender's process and uid).
    pub by_uid: u32,
    pub by_pid: u32,
    /// The policy now: its name, where it was read from, its text's SHA-256.
    pub policy: String,
    pub policy_source: String,
    pub hash: String,
    /// The policy before.
    pub previous_policy: String,
    pub previous_hash: String,
    /// Each running tree, and what of its start the kernel keeps (`filter`,
    /// `landlock`, `env`: the new policy differs there, and the tree keeps
    /// what it started with).
    #[serde(skip_serializing_if = "Vec::is_empty", default)]
    pub trees: Vec<TreeKept>,
}

/// One running tree at a policy reload.
#[derive(Debug, Clone, Serialize, serde::Deserialize, PartialEq)]
pub struct TreeKept {
    pub root_pid: u32,
    /// The parts of its start that differ from the policy now and stay.
    #[serde(skip_serializing_if = "Vec::is_empty", default)]
    pub kept_from_start: Vec<String>,
}

/// An operator made, ended or deleted a session.
#[derive(Debug, Clone, Serialize, serde::Deserialize, PartialEq)]
pub struct SessionEvent {
    /// `created`, `ended` or `deleted`.
    pub action: String,
    /// Who asked (the operator's process and uid; 0/0 from the config).
    pub by_uid: u32,
    pub by_pid: u32,
    /// The policy's name, and the workspace (`created`).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub policy: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub workspace: Option<String>,
    /// The root pids of its live trees when it was ended or deleted.
    #[serde(skip_serializing_if = "Vec::is_empty", default)]
    pub live_trees: Vec<u32>,
    /// Processes killed (`deleted` with `force`).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub killed: Option<usize>,
}

#[derive(Debug, Clone, Serialize, serde::Deserialize, PartialEq)]
pub struct Event {
    pub id: u64,
    pub timestamp: String,
    pub session_id: String,
    #[serde(flatten)]
    pub body: EventBody,
}
