//! The audit trail: one JSON event per decided exec, and one per wrap-init.
//!
//! Sinks: an append-only JSON Lines file, journald (through tracing-journald,
//! when the journal socket exists) and an in-memory window per session served
//! by the API. Audit never writes into a command's stdout or stderr.
//!
//! Failure modes: if the JSONL file cannot be written the event still reaches
//! the other sinks and the failure is logged; the exec decision itself does not
//! change (the decision was made; refusing to record it would not undo it).

use serde::Serialize;
use std::collections::{HashMap, VecDeque};
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::SystemTime;

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
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub approval_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub approval_outcome: Option<ApprovalOutcome>,
    /// Who decided (the operator's identity as the server saw it), or `timeout`.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub approver: Option<String>,
    /// The operator's stated reason, if any.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub reason: Option<String>,
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
            approval_id: None,
            approval_outcome: None,
            approver: None,
            reason: None,
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
        self.approval_id = Some(id.to_string());
        self.approval_outcome = Some(outcome);
        self.approver = Some(approver);
        self.reason = reason;
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
}

/// What the wrap-init event records of the daemon-socket masks.
#[derive(Debug, Clone, Serialize, serde::Deserialize, PartialEq)]
pub struct DaemonSocketsSummary {
    pub hidden: Vec<String>,
    /// `mount namespace`, or why not.
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
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub approval_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub approval_outcome: Option<ApprovalOutcome>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub approver: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub reason: Option<String>,
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

#[derive(Debug, Clone, Serialize, serde::Deserialize, PartialEq)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum EventBody {
    Execve(ExecEvent),
    Connect(ConnectEvent),
    Dns(DnsEvent),
    WrapInit(Box<WrapInitEvent>),
    Handoff(HandoffEvent),
    UnsupervisedRun(UnsupervisedEvent),
    Signal(SignalEvent),
    AdminSession(AdminSessionEvent),
    Session(SessionEvent),
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

/// The tracing target of the sinks' own failures: not the events' target
/// (`agentsh::audit`), which the server's stderr leaves out.
const SINK: &str = "agentsh::audit_sink";

/// The audit sinks. Shared by every supervisor thread.
pub struct AuditLog {
    next_id: AtomicU64,
    /// The last exec attempt number handed out ([`AuditLog::next_attempt`]).
    attempts: AtomicU64,
    file: Option<Mutex<File>>,
    /// Where `file` was opened, for [`AuditLog::reopen`].
    path: Option<PathBuf>,
    write_failures: AtomicU64,
    /// The last write to the file succeeded (true without a file).
    healthy: std::sync::atomic::AtomicBool,
    memory: Mutex<HashMap<String, VecDeque<Event>>>,
    memory_cap: usize,
    /// The latest event id, for the API's async long-polls.
    latest: tokio::sync::watch::Sender<u64>,
    /// Where events are also exported (`audit.otlp.endpoint`), once set.
    export: std::sync::OnceLock<crate::otlp::Exporter>,
}

/// The first event id of a server writing `jsonl`: unique across restarts
/// (issue 24: every start began at 1, so a log held duplicates). The
/// microseconds since 1970 at start (an event per microsecond is far more
/// than a server writes, so a later start begins above every id of an
/// earlier one; below 2^53 until the year 2255, exact in JSON), or one more
/// than the last id in the file if that is higher (a clock set back).
fn first_id(jsonl: &Path) -> u64 {
    let now = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(1, |d| d.as_micros() as u64);
    now.max(last_id(jsonl).map_or(0, |id| id + 1)).max(1)
}

/// The id of the last whole line of `jsonl`, from its last 64 KiB.
fn last_id(jsonl: &Path) -> Option<u64> {
    use std::io::{Read, Seek, SeekFrom};
    let mut f = File::open(jsonl).ok()?;
    let len = f.metadata().ok()?.len();
    f.seek(SeekFrom::Start(len.saturating_sub(64 << 10))).ok()?;
    let mut tail = Vec::new();
    f.read_to_end(&mut tail).ok()?;
    let text = String::from_utf8_lossy(&tail);
    text.lines().rev().find_map(|l| {
        serde_json::from_str::<serde_json::Value>(l)
            .ok()?
            .get("id")?
            .as_u64()
    })
}

impl AuditLog {
    /// Opens (creating) the JSONL file in append mode.
    ///
    /// # Errors
    /// The file or its directory cannot be created or opened.
    pub fn open(jsonl: &Path, memory_cap: usize) -> std::io::Result<AuditLog> {
        use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
        // Created for the operator's group only: a tree (any uid) must not
        // read what other commands ran (an existing directory or file keeps
        // its mode: the package sets it).
        if let Some(dir) = jsonl.parent() {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o750)
                .create(dir)?;
        }
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .mode(0o640)
            .open(jsonl)?;
        let mut log = AuditLog::with_file(Some(file), memory_cap);
        log.next_id.store(first_id(jsonl), Ordering::Relaxed);
        log.path = Some(jsonl.to_path_buf());
        Ok(log)
    }

    /// Opens the log's path afresh (SIGHUP, after a rotation renamed the
    /// file): later events go to the new file, none is lost between (the
    /// swap is under the writers' lock).
    ///
    /// # Errors
    /// The file cannot be created or opened (the old one stays in use).
    pub fn reopen(&self) -> std::io::Result<()> {
        use std::os::unix::fs::OpenOptionsExt;
        let (Some(file), Some(path)) = (&self.file, &self.path) else {
            return Ok(());
        };
        let fresh = OpenOptions::new()
            .create(true)
            .append(true)
            .mode(0o640)
            .open(path)?;
        *file
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = fresh;
        Ok(())
    }

    /// Memory-only log (tests, `policy check`): ids from 1.
    pub fn in_memory(memory_cap: usize) -> AuditLog {
        AuditLog::with_file(None, memory_cap)
    }

    fn with_file(file: Option<File>, memory_cap: usize) -> AuditLog {
        AuditLog {
            next_id: AtomicU64::new(1),
            attempts: AtomicU64::new(0),
            file: file.map(Mutex::new),
            path: None,
            write_failures: AtomicU64::new(0),
            healthy: std::sync::atomic::AtomicBool::new(true),
            memory: Mutex::new(HashMap::new()),
            memory_cap: memory_cap.max(1),
            latest: tokio::sync::watch::Sender::new(0),
            export: std::sync::OnceLock::new(),
        }
    }

    /// A new exec attempt number (see [`ExecEvent::attempt`]).
    pub fn next_attempt(&self) -> u64 {
        self.attempts.fetch_add(1, Ordering::Relaxed) + 1
    }

    /// Records one event in every sink; returns it with its id.
    pub fn record(&self, session_id: &str, body: EventBody) -> Event {
        self.record_checked(session_id, body).0
    }

    /// An event of the server's rehearsal shell (`daemon::rehearsal`): made
    /// and serialized as any other, written nowhere, no id used up (id 0).
    fn rehearsed(&self, body: EventBody) -> Event {
        let event = Event {
            id: 0,
            timestamp: rfc3339_now(),
            session_id: agentsh_proto::shimconf::REHEARSAL_SESSION.to_string(),
            body,
        };
        let line = serde_json::to_string(&event).unwrap_or_default();
        tracing::debug!(target: SINK, event = %line, "rehearsal shell's event (not audited)");
        event
    }

    /// Whether the last write to the JSONL file succeeded.
    pub fn healthy(&self) -> bool {
        self.healthy.load(Ordering::Relaxed)
    }

    /// Events the JSONL file could not take since start (each also said on
    /// the server's stderr).
    pub fn write_failures(&self) -> u64 {
        self.write_failures.load(Ordering::Relaxed)
    }

    /// [`AuditLog::record`], saying whether the event reached the JSONL file
    /// (always true without one). A write that fails leaves no partial line:
    /// the file is cut back to where the line began.
    pub fn record_checked(&self, session_id: &str, body: EventBody) -> (Event, bool) {
        if session_id == agentsh_proto::shimconf::REHEARSAL_SESSION {
            return (self.rehearsed(body), true);
        }
        let event = Event {
            id: self.next_id.fetch_add(1, Ordering::Relaxed),
            timestamp: rfc3339_now(),
            session_id: session_id.to_string(),
            body,
        };
        let line = match serde_json::to_string(&event) {
            Ok(l) => l,
            Err(e) => {
                tracing::error!(target: SINK, "audit event {} cannot be serialized: {e}", event.id);
                return (event, false);
            }
        };
        let mut written = true;
        if let Some(file) = &self.file {
            let healthy = &self.healthy;
            let mut f = file
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            let mut buf = line.clone().into_bytes();
            buf.push(b'\n');
            let before = f.metadata().map(|m| m.len());
            if let Err(e) = f.write_all(&buf) {
                written = false;
                let n = self.write_failures.fetch_add(1, Ordering::Relaxed) + 1;
                // Never a partial line: cut back to where this one began.
                let cut = match before {
                    Ok(len) => f
                        .set_len(len)
                        .map_err(|c| format!("; cutting it back failed: {c}")),
                    Err(m) => Err(format!("; its length was unknown: {m}")),
                }
                .err()
                .unwrap_or_default();
                // Not under the events' target, which stderr leaves out.
                tracing::error!(
                    target: SINK,
                    failures = n,
                    "audit JSONL write failed: {e}: event {} is not in the file{cut}",
                    event.id
                );
            }
            healthy.store(written, Ordering::Relaxed);
        }
        tracing::info!(target: "agentsh::audit", event = %line, "audit");
        if let Some(x) = self.export.get() {
            x.export(&event.session_id, event.id, &line);
        }
        {
            let mut mem = self
                .memory
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            let q = mem.entry(event.session_id.clone()).or_default();
            if q.len() >= self.memory_cap {
                q.pop_front();
            }
            q.push_back(event.clone());
        }
        self.latest.send_replace(event.id);
        (event, written)
    }

    /// Exports every event from now on through `exporter` too (set once).
    pub fn export_to(&self, exporter: crate::otlp::Exporter) {
        if self.export.set(exporter).is_err() {
            tracing::error!(target: SINK, "the audit exporter was set twice: the first stays");
        }
    }

    /// The export's endpoint and its failed requests, if there is one.
    pub fn export_status(&self) -> Option<(String, u64)> {
        self.export
            .get()
            .map(|x| (x.endpoint().to_string(), x.failed_requests()))
    }

    /// Sends what the export has queued (at a stop).
    pub fn flush_export(&self) {
        if let Some(x) = self.export.get() {
            x.flush();
        }
    }

    /// Events of a session with an id above `after`, oldest first.
    pub fn events(&self, session_id: &str, after: u64) -> Vec<Event> {
        let mem = self
            .memory
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        mem.get(session_id)
            .map(|q| q.iter().filter(|e| e.id > after).cloned().collect())
            .unwrap_or_default()
    }

    /// Like [`AuditLog::events`], but waits up to `wait` for at least one
    /// (a parked future: a long-poll holds no thread).
    pub async fn wait_events(
        &self,
        session_id: &str,
        after: u64,
        wait: std::time::Duration,
    ) -> Vec<Event> {
        let deadline = tokio::time::Instant::now() + wait;
        let mut rx = self.latest.subscribe();
        loop {
            let found = self.events(session_id, after);
            if !found.is_empty() {
                return found;
            }
            match tokio::time::timeout_at(deadline, rx.changed()).await {
                Ok(Ok(())) => continue,
                _ => return self.events(session_id, after),
            }
        }
    }
}

/// The current UTC time as RFC 3339 with microseconds.
pub fn rfc3339_now() -> String {
    rfc3339_at(SystemTime::now())
}

/// `t` (UTC) as RFC 3339 with microseconds.
pub fn rfc3339_at(t: SystemTime) -> String {
    let d = t.duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default();
    rfc3339(d.as_secs() as i64, d.subsec_micros())
}

fn rfc3339(secs: i64, micros: u32) -> String {
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{micros:06}Z",
        rem / 3600,
        (rem % 3600) / 60,
        rem % 60
    )
}

/// Days since 1970-01-01 to (year, month, day); H. Hinnant's algorithm.
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (if m <= 2 { y + 1 } else { y }, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The server creates the log's directory 0750 and the log 0640: no
    /// tree, whatever its uid, reads what other commands ran (issue 24: in
    /// an image, with no package scripts, it was 0755/0644).
    /// Two servers, one after the other, on one log: no id twice, and the
    /// second's above the first's (a clock set back included: the file's
    /// last id is a floor).
    #[test]
    fn ids_are_unique_across_restarts() {
        let base = std::env::temp_dir().join(format!("agentsh-audit-ids-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        let jsonl = base.join("audit.jsonl");
        let ids = |n: usize| {
            let log = AuditLog::open(&jsonl, 8).unwrap();
            (0..n)
                .map(|_| log.record("s", exec("allow")).id)
                .collect::<Vec<u64>>()
        };
        let first = ids(3);
        let second = ids(3);
        assert!(second[0] > first[2], "{first:?} {second:?}");
        // A file whose last id is in the future (a clock set back since).
        let far = u64::MAX / 4;
        std::fs::write(&jsonl, format!("{{\"id\":{far}}}\n")).unwrap();
        assert_eq!(ids(1)[0], far + 1);
        std::fs::remove_dir_all(&base).unwrap();
    }

    #[test]
    fn the_log_and_its_directory_are_created_for_the_operator_only() {
        use std::os::unix::fs::PermissionsExt;
        let base = std::env::temp_dir().join(format!("agentsh-audit-mode-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        let jsonl = base.join("log").join("audit.jsonl");
        let log = AuditLog::open(&jsonl, 8).unwrap();
        drop(log);
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&jsonl), 0o640);
        assert_eq!(mode(&base.join("log")), 0o750);
        std::fs::remove_dir_all(&base).unwrap();
    }

    #[test]
    fn formats_known_instants() {
        assert_eq!(rfc3339(0, 0), "1970-01-01T00:00:00.000000Z");
        assert_eq!(rfc3339(951_782_400, 5), "2000-02-29T00:00:00.000005Z");
        assert_eq!(rfc3339(1_795_305_600, 0), "2026-11-22T00:00:00.000000Z");
    }

    fn exec(decision: &str) -> EventBody {
        let (d, a) = match decision {
            "allow" => (crate::policy::Decision::Allow, Action::Allow),
            _ => (crate::policy::Decision::Deny, Action::Deny),
        };
        EventBody::Execve(ExecEvent::new(
            ExecSubject {
                pid: 10,
                parent_pid: 9,
                depth: 1,
                filename: "/usr/bin/curl".into(),
                argv: vec!["curl".into()],
                ..ExecSubject::default()
            },
            d,
            "r",
            a,
            None,
        ))
    }

    #[test]
    fn events_are_numbered_per_server_and_filtered_per_session() {
        let log = AuditLog::in_memory(10);
        let a = log.record("s1", exec("allow"));
        let b = log.record("s2", exec("deny"));
        let c = log.record("s1", exec("deny"));
        assert!(a.id < b.id && b.id < c.id);
        let s1 = log.events("s1", 0);
        assert_eq!(s1.len(), 2);
        assert_eq!(log.events("s1", a.id).len(), 1);
        assert!(log.events("nope", 0).is_empty());
    }

    #[test]
    fn memory_window_is_bounded() {
        let log = AuditLog::in_memory(3);
        for _ in 0..5 {
            log.record("s", exec("allow"));
        }
        let ev = log.events("s", 0);
        assert_eq!(ev.len(), 3);
        assert_eq!(ev[0].id, 3);
    }

    #[test]
    fn jsonl_has_the_documented_fields() {
        let dir = std::env::temp_dir().join(format!("agentsh-audit-{}", std::process::id()));
        let path = dir.join("a.jsonl");
        let log = AuditLog::open(&path, 10).unwrap();
        log.record("s", exec("deny"));
        let text = std::fs::read_to_string(&path).unwrap();
        let v: serde_json::Value = serde_json::from_str(text.lines().next().unwrap()).unwrap();
        for k in [
            "id",
            "timestamp",
            "type",
            "session_id",
            "pid",
            "parent_pid",
            "depth",
            "filename",
            "argv",
            "truncated",
            "decision",
            "rule",
            "effective_action",
        ] {
            assert!(v.get(k).is_some(), "missing {k} in {v}");
        }
        assert_eq!(v["type"], "execve");
        assert_eq!(v["decision"], "deny");
        assert_eq!(v["effective_action"], "deny");
        std::fs::remove_dir_all(&dir).ok();
    }
}
