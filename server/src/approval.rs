//! Approvals: an exec under a `decision: approve` rule waits for an operator.
//!
//! The supervisor's tree thread never waits for a human. It hands the held
//! notification to [`Approvals::hold`], which registers a pending request and
//! starts one waiter thread for it; the tree thread goes back to serving the
//! rest of the tree. The waiter answers the kernel through the exec's backend
//! (`supervisor::Holder`: the tree's notify fd, shared through `Arc<OwnedFd>`
//! since the notify ioctls are thread-safe; or the ptrace tracer thread) when an
//! operator decides, when the timeout expires (`execve.approval_timeout_action`,
//! deny by default) or when the tracee goes away (`cancelled`). Every outcome
//! is exactly one audit event.
//!
//! Who may decide: the operator (see the `api` module: uid 0 on the Unix
//! socket, the root-only token on TCP) *and* not a process of a supervised
//! tree. The second check covers a tree running as root, which could read
//! the token file unless Landlock hides it: a TCP peer's socket is mapped to
//! its owning processes through `/proc/net/tcp{,6}` and `/proc/<pid>/fd`, and
//! each owner (like a Unix peer) is refused if it is inside a tree
//! (`trees::Trees::in_tree_or_filtered`). See docs/approvals.md for what this
//! does not cover.
//!
//! Failure modes: a waiter that cannot answer (tracee gone) records
//! `cancelled`; a decision whose requester cannot be identified is refused.

use crate::audit::{self, Action, AuditLog, EventBody, ExecEvent, ExecSubject};
use crate::config::{ExecveSection, TimeoutAction};
use crate::supervisor::{Holder, Verification};
use crate::trees::Trees;
use serde::Serialize;
use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::mpsc::Sender;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime};

/// How often a waiter checks that its tracee is still waiting.
const LIVENESS_POLL: Duration = Duration::from_millis(150);
/// How long a request may have no live notification before it is cancelled:
/// long enough for a signal-restarted execve to be re-issued and re-attached.
const REISSUE_GRACE: Duration = Duration::from_millis(300);
/// Name of the token file under the state directory.
pub const TOKEN_FILE: &str = "approval.token";

/// How a request ended (the audit's enum).
pub use crate::audit::ApprovalOutcome as Outcome;

/// One exec held for an operator, as the API lists it.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct ApprovalRequest {
    pub id: String,
    /// Increases with every new request (for `?after=`).
    pub seq: u64,
    pub session_id: String,
    pub pid: u32,
    pub depth: u32,
    pub filename: String,
    pub argv: Vec<String>,
    /// The file the operator approves (device, inode): what runs must be it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub file: Option<crate::audit::FileIdentity>,
    pub rule: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    pub waiting_since: String,
    pub expires_at: String,
}

/// Everything the supervisor knows about a held exec.
#[derive(Debug, Clone)]
pub struct HeldExec {
    pub session_id: String,
    pub notif_id: u64,
    /// The calling thread (watched through the exec once approved).
    pub tid: u32,
    pub starttime: u64,
    /// What the operator approves: the file (device, inode) and argv that
    /// must run; `None` if the file's identity could not be read (then the
    /// exec is refused when approved).
    pub expected: Option<crate::supervisor::Expected>,
    pub subject: ExecSubject,
    pub rule: String,
    pub message: Option<String>,
}

/// An operator's answer.
#[derive(Debug, Clone)]
struct Verdict {
    outcome: Outcome,
    approver: String,
    reason: Option<String>,
}

struct Entry {
    request: ApprovalRequest,
    /// Notification ids of this exec; more than one when a signal made the
    /// kernel re-issue it. The last one is the live one.
    notif_ids: Vec<u64>,
    starttime: u64,
    verdict: Option<Verdict>,
}

#[derive(Default)]
struct State {
    pending: BTreeMap<String, Entry>,
    seq: u64,
}

/// Why a decision was not taken.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum DecideError {
    #[error("no pending approval {0:?} (unknown, or already finished)")]
    NotFound(String),
    #[error("approval {0:?} was already decided")]
    AlreadyDecided(String),
}

/// Every pending approval of the server, and who may decide them.
pub struct Approvals {
    timeout: Duration,
    timeout_action: TimeoutAction,
    audit: Arc<AuditLog>,
    state: Mutex<State>,
    changed: Condvar,
    /// Bumped on every change, for the API's async long-polls.
    version: tokio::sync::watch::Sender<u64>,
    trees: Arc<Trees>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn random_hex(bytes: usize) -> std::io::Result<String> {
    let mut b = vec![0u8; bytes];
    let mut got = 0;
    while got < bytes {
        // SAFETY: getrandom writes at most `bytes - got` bytes into the tail of b.
        let n = unsafe { libc::getrandom(b[got..].as_mut_ptr().cast(), bytes - got, 0) };
        if n < 0 {
            let e = std::io::Error::last_os_error();
            if e.raw_os_error() == Some(libc::EINTR) {
                continue;
            }
            return Err(e);
        }
        got += n as usize;
    }
    Ok(b.iter().map(|x| format!("{x:02x}")).collect())
}

/// Writes a fresh random token to `<state_dir>/approval.token` (mode 0600,
/// owned by the server's uid) and returns it. A token from an earlier run is
/// replaced, so a leaked old token is worthless after a restart.
///
/// # Errors
/// The state directory or the file cannot be created, or no randomness.
pub fn create_token_file(state_dir: &Path) -> std::io::Result<(String, PathBuf)> {
    use std::io::Write;
    use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o711)
        .create(state_dir)?;
    let token = random_hex(32)?;
    let path = state_dir.join(TOKEN_FILE);
    let tmp = state_dir.join(format!(".{TOKEN_FILE}.{}", std::process::id()));
    let _ = std::fs::remove_file(&tmp);
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(&tmp)?;
    f.write_all(token.as_bytes())?;
    f.write_all(b"\n")?;
    f.sync_all()?;
    std::fs::rename(&tmp, &path)?;
    Ok((token, path))
}

/// Who sent a decision, as far as the server can tell.
#[derive(Debug, Clone, PartialEq)]
pub enum Requester {
    /// A local process outside every supervised tree.
    Operator { uid: u32, pid: u32, comm: String },
    /// A peer on another host (only possible with a non-loopback listen address).
    Remote(SocketAddr),
    /// A process of a supervised tree: refused.
    InTree { pid: u32, why: String },
    /// A local peer whose process cannot be found: refused (fail closed).
    Unknown(String),
}

impl Requester {
    /// The `approver` recorded in the audit event.
    pub fn label(&self) -> String {
        match self {
            Requester::Operator { uid, pid, comm } => format!("uid {uid} pid {pid} ({comm})"),
            Requester::Remote(a) => format!("remote {a}"),
            Requester::InTree { pid, .. } => format!("in-tree pid {pid}"),
            Requester::Unknown(_) => "unknown".into(),
        }
    }
}

impl Approvals {
    pub fn new(limits: &ExecveSection, audit: Arc<AuditLog>, trees: Arc<Trees>) -> Approvals {
        Approvals {
            timeout: limits.approval_timeout,
            timeout_action: limits.approval_timeout_action,
            audit,
            state: Mutex::new(State::default()),
            changed: Condvar::new(),
            version: tokio::sync::watch::Sender::new(0),
            trees,
        }
    }

    /// Wakes every waiter: the blocking ones and the API's long-polls.
    fn notify_changed(&self) {
        self.changed.notify_all();
        self.version.send_modify(|v| *v += 1);
    }

    /// Pending (undecided) requests with `seq > after`, oldest first.
    pub fn pending(&self, after: u64) -> Vec<ApprovalRequest> {
        let st = lock(&self.state);
        Self::pending_of(&st, after)
    }

    fn pending_of(st: &State, after: u64) -> Vec<ApprovalRequest> {
        let mut v: Vec<ApprovalRequest> = st
            .pending
            .values()
            .filter(|e| e.verdict.is_none() && e.request.seq > after)
            .map(|e| e.request.clone())
            .collect();
        v.sort_by_key(|r| r.seq);
        v
    }

    /// Like [`Approvals::pending`], but waits up to `wait` for at least one
    /// (a parked future: a long-poll holds no thread).
    pub async fn wait_pending(&self, after: u64, wait: Duration) -> Vec<ApprovalRequest> {
        let deadline = tokio::time::Instant::now() + wait;
        let mut rx = self.version.subscribe();
        loop {
            let found = self.pending(after);
            if !found.is_empty() {
                return found;
            }
            match tokio::time::timeout_at(deadline, rx.changed()).await {
                Ok(Ok(())) => continue,
                _ => return self.pending(after),
            }
        }
    }

    /// Records an operator's decision; the waiter answers the kernel.
    ///
    /// # Errors
    /// The request is unknown, finished, or already decided.
    pub fn decide(
        &self,
        id: &str,
        approve: bool,
        approver: String,
        reason: Option<String>,
    ) -> Result<(), DecideError> {
        let mut st = lock(&self.state);
        let e = st
            .pending
            .get_mut(id)
            .ok_or_else(|| DecideError::NotFound(id.to_string()))?;
        if e.verdict.is_some() {
            return Err(DecideError::AlreadyDecided(id.to_string()));
        }
        e.verdict = Some(Verdict {
            outcome: if approve {
                Outcome::Approved
            } else {
                Outcome::Denied
            },
            approver,
            reason,
        });
        drop(st);
        self.notify_changed();
        Ok(())
    }

    /// Holds `exec` until it is decided, times out or its tracee goes away.
    /// Never blocks: the waiting happens on a new thread. `allowed` receives
    /// (pid, start time, depth) before an approved exec is let through, so the
    /// tree thread can keep its depth book.
    ///
    /// A notification for the same pid, program and argv as a request that is
    /// still open (a signal made the kernel re-issue it) joins that request
    /// instead of prompting twice.
    pub fn hold(
        self: &Arc<Self>,
        holder: Holder,
        exec: HeldExec,
        allowed: Sender<(u32, u64, u32)>,
    ) {
        let now = SystemTime::now();
        let id = {
            let mut st = lock(&self.state);
            if let Some(e) = st.pending.values_mut().find(|e| {
                e.request.pid == exec.subject.pid
                    && e.starttime == exec.starttime
                    && e.request.session_id == exec.session_id
                    && e.request.filename == exec.subject.filename
                    && e.request.argv == exec.subject.argv
            }) {
                tracing::info!(
                    id = %e.request.id,
                    pid = exec.subject.pid,
                    "re-issued exec joins its pending approval"
                );
                e.notif_ids.push(exec.notif_id);
                drop(st);
                self.notify_changed();
                return;
            }
            st.seq += 1;
            let seq = st.seq;
            let id = format!(
                "ap-{seq}-{}",
                random_hex(4).unwrap_or_else(|_| format!("{:08x}", exec.notif_id as u32))
            );
            let request = ApprovalRequest {
                id: id.clone(),
                seq,
                session_id: exec.session_id.clone(),
                pid: exec.subject.pid,
                depth: exec.subject.depth,
                filename: exec.subject.filename.clone(),
                argv: exec.subject.argv.clone(),
                file: exec.subject.file.clone(),
                rule: exec.rule.clone(),
                message: exec.message.clone(),
                waiting_since: audit::rfc3339_at(now),
                expires_at: audit::rfc3339_at(now + self.timeout),
            };
            st.pending.insert(
                id.clone(),
                Entry {
                    request,
                    notif_ids: vec![exec.notif_id],
                    starttime: exec.starttime,
                    verdict: None,
                },
            );
            id
        };
        self.notify_changed();
        tracing::info!(%id, pid = exec.subject.pid, filename = %exec.subject.filename, "exec waits for approval");
        let me = self.clone();
        let spawned = std::thread::Builder::new()
            .name("agentsh-approval".into())
            .spawn({
                let id = id.clone();
                let holder = holder.clone();
                let exec = exec.clone();
                move || me.wait_and_answer(&id, &holder, exec, allowed)
            });
        if let Err(e) = spawned {
            // Fail closed: no thread to wait, so no approval.
            tracing::error!(%id, "cannot start approval waiter: {e}; exec denied");
            lock(&self.state).pending.remove(&id);
            holder.refuse(exec.notif_id);
            self.record(
                &exec,
                &id,
                Outcome::Denied,
                "server".into(),
                Some(format!("cannot wait for approval: {e}")),
                false,
            );
        }
    }

    /// The waiter: one per request.
    fn wait_and_answer(
        &self,
        id: &str,
        holder: &Holder,
        exec: HeldExec,
        allowed: Sender<(u32, u64, u32)>,
    ) {
        let expires = Instant::now() + self.timeout;
        let mut lost_since: Option<Instant> = None;
        let mut st = lock(&self.state);
        // Ends with the verdict and the live notification id (None: the tracee is gone).
        let (verdict, live) = loop {
            let Some(e) = st.pending.get(id) else {
                // Cannot happen (only this thread removes its entry); fail closed.
                return;
            };
            // The last id still valid is the one to answer.
            let live = holder.live(&e.notif_ids);
            match live {
                Some(_) => lost_since = None,
                None => {
                    let since = *lost_since.get_or_insert_with(Instant::now);
                    if since.elapsed() >= REISSUE_GRACE {
                        break (
                            Verdict {
                                outcome: Outcome::Cancelled,
                                approver: "none".into(),
                                reason: Some(
                                    "the process stopped waiting (killed or exited)".into(),
                                ),
                            },
                            None,
                        );
                    }
                }
            }
            if live.is_some() {
                if let Some(v) = &e.verdict {
                    break (v.clone(), live);
                }
                if Instant::now() >= expires {
                    let outcome = Outcome::Timeout;
                    break (
                        Verdict {
                            outcome,
                            approver: "timeout".into(),
                            reason: Some(format!(
                                "no answer within {:?}; execve.approval_timeout_action={}",
                                self.timeout,
                                match self.timeout_action {
                                    TimeoutAction::Deny => "deny",
                                    TimeoutAction::Allow => "allow",
                                }
                            )),
                        },
                        live,
                    );
                }
            }
            let left = expires.saturating_duration_since(Instant::now());
            let nap = if left.is_zero() {
                LIVENESS_POLL
            } else {
                left.min(LIVENESS_POLL)
            };
            st = self
                .changed
                .wait_timeout(st, nap)
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .0;
        };
        st.pending.remove(id);
        drop(st);
        self.notify_changed();

        let allow = match verdict.outcome {
            Outcome::Approved => true,
            Outcome::Denied | Outcome::Cancelled => false,
            Outcome::Timeout => self.timeout_action == TimeoutAction::Allow,
        };
        // Re-check right before answering: the notification must still name
        // the tracee whose facts were judged. The event is written before the
        // answer, as for every exec (see supervisor::handle).
        let live = live.and_then(|n| holder.live(&[n]));
        let (outcome, reason) = if live.is_some() || verdict.outcome == Outcome::Cancelled {
            (verdict.outcome, verdict.reason)
        } else {
            (
                Outcome::Cancelled,
                Some("the process stopped waiting before the answer".into()),
            )
        };
        let effective_allow = allow && live.is_some();
        tracing::info!(%id, pid = exec.subject.pid, outcome = outcome.as_str(), "approval finished");
        self.record(
            &exec,
            id,
            outcome,
            verdict.approver,
            reason,
            effective_allow,
        );
        let Some(n) = live else { return };
        if !effective_allow {
            holder.refuse(n);
            return;
        }
        let _ = allowed.send((exec.subject.pid, exec.starttime, exec.subject.depth));
        // The operator approved this file and argv: the supervisor lets the
        // exec proceed and kills what runs if it is anything else.
        let what = exec.expected.clone().map(|expected| Verification {
            expected,
            subject: exec.subject.clone(),
            rule: exec.rule.clone(),
        });
        let resumed = holder.resume(n, exec.tid, exec.subject.pid, what);
        let refusal = match resumed {
            crate::supervisor::Resumed::AsApproved => return,
            crate::supervisor::Resumed::Refused(why) => ("unverifiable", why),
            crate::supervisor::Resumed::Killed(what) => (
                "exec_mismatch",
                format!("killed before its first instruction: {what} (approval {id})"),
            ),
        };
        tracing::warn!(%id, pid = exec.subject.pid, "approved exec refused: {}", refusal.1);
        let event = ExecEvent::new(
            exec.subject.clone(),
            crate::policy::Decision::Deny,
            refusal.0,
            Action::Deny,
            Some(refusal.1),
        );
        self.audit
            .record(&exec.session_id, EventBody::Execve(event));
    }

    fn record(
        &self,
        exec: &HeldExec,
        id: &str,
        outcome: Outcome,
        approver: String,
        reason: Option<String>,
        allowed: bool,
    ) {
        let event = ExecEvent::new(
            exec.subject.clone(),
            crate::policy::Decision::Approve,
            exec.rule.clone(),
            if allowed { Action::Allow } else { Action::Deny },
            exec.message.clone(),
        )
        .with_approval(id, outcome, approver, reason);
        self.audit
            .record(&exec.session_id, EventBody::Execve(event));
    }

    /// Identifies the process behind an HTTP request from `peer` to the
    /// server's `server_port`, and whether it belongs to a supervised tree.
    pub fn identify(&self, peer: SocketAddr, server_port: u16) -> Requester {
        let peer = normalize(peer);
        let Some((uid, inode)) = find_tcp_socket(peer, server_port) else {
            if peer.ip().is_loopback() {
                return Requester::Unknown(format!(
                    "no local socket {peer} -> port {server_port} found in /proc/net/tcp"
                ));
            }
            return Requester::Remote(peer);
        };
        let owners = socket_owners(inode);
        if owners.is_empty() {
            return Requester::Unknown(format!("no process holds socket inode {inode}"));
        }
        for &pid in &owners {
            if let Some(why) = self.in_tree(pid) {
                return Requester::InTree { pid, why };
            }
        }
        let pid = owners[0];
        let comm = std::fs::read_to_string(format!("/proc/{pid}/comm"))
            .map(|s| s.trim().to_string())
            .unwrap_or_default();
        Requester::Operator { uid, pid, comm }
    }

    /// Why `pid` counts as part of a supervised tree, if it does.
    fn in_tree(&self, pid: u32) -> Option<String> {
        self.trees.in_tree_or_filtered(pid)
    }
}

fn normalize(a: SocketAddr) -> SocketAddr {
    match a.ip() {
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => SocketAddr::new(IpAddr::V4(v4), a.port()),
            None => a,
        },
        IpAddr::V4(_) => a,
    }
}

/// Parses one `/proc/net/tcp{,6}` address (`0100007F:1F90`).
fn parse_proc_addr(s: &str) -> Option<SocketAddr> {
    let (ip, port) = s.split_once(':')?;
    let port = u16::from_str_radix(port, 16).ok()?;
    let ip = match ip.len() {
        8 => {
            let v = u32::from_str_radix(ip, 16).ok()?;
            IpAddr::from(v.to_ne_bytes())
        }
        32 => {
            let mut b = [0u8; 16];
            for i in 0..4 {
                let w = u32::from_str_radix(&ip[i * 8..i * 8 + 8], 16).ok()?;
                b[i * 4..i * 4 + 4].copy_from_slice(&w.to_ne_bytes());
            }
            IpAddr::from(b)
        }
        _ => return None,
    };
    Some(normalize(SocketAddr::new(ip, port)))
}

/// The socket whose local end is `peer` and remote port is `server_port`:
/// (owner uid, inode).
fn find_tcp_socket(peer: SocketAddr, server_port: u16) -> Option<(u32, u64)> {
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let Ok(text) = std::fs::read_to_string(table) else {
            continue;
        };
        if let Some(hit) = find_in_table(&text, peer, server_port) {
            return Some(hit);
        }
    }
    None
}

fn find_in_table(text: &str, peer: SocketAddr, server_port: u16) -> Option<(u32, u64)> {
    text.lines().skip(1).find_map(|line| {
        let f: Vec<&str> = line.split_ascii_whitespace().collect();
        let local = parse_proc_addr(f.get(1)?)?;
        let remote = parse_proc_addr(f.get(2)?)?;
        if local != peer || remote.port() != server_port {
            return None;
        }
        let uid = f.get(7)?.parse().ok()?;
        let inode = f.get(9)?.parse().ok()?;
        (inode != 0).then_some((uid, inode))
    })
}

/// Every process that holds socket `inode` open.
fn socket_owners(inode: u64) -> Vec<u32> {
    let want = format!("socket:[{inode}]");
    let mut owners = Vec::new();
    let Ok(procs) = std::fs::read_dir("/proc") else {
        return owners;
    };
    for p in procs.flatten() {
        let Some(pid) = p.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        let Ok(fds) = std::fs::read_dir(p.path().join("fd")) else {
            continue;
        };
        if fds
            .flatten()
            .any(|fd| std::fs::read_link(fd.path()).is_ok_and(|l| l.as_os_str() == want.as_str()))
        {
            owners.push(pid);
        }
    }
    owners
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_proc_net_addresses() {
        assert_eq!(
            parse_proc_addr("0100007F:1F90"),
            Some("127.0.0.1:8080".parse().unwrap())
        );
        assert_eq!(
            parse_proc_addr("00000000000000000000000001000000:0016"),
            Some("[::1]:22".parse().unwrap())
        );
        // ::ffff:127.0.0.1 becomes 127.0.0.1
        assert_eq!(
            parse_proc_addr("0000000000000000FFFF00000100007F:0050"),
            Some("127.0.0.1:80".parse().unwrap())
        );
        assert_eq!(parse_proc_addr("zz:1"), None);
    }

    #[test]
    fn finds_the_client_socket_of_a_connection() {
        let table = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n\
   0: 0100007F:46A0 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 111 1 0 100 0 0 10 0\n\
   1: 0100007F:46A0 0100007F:D431 01 00000000:00000000 00:00000000 00000000     0        0 222 1 0 20 4 30 10 -1\n\
   2: 0100007F:D431 0100007F:46A0 01 00000000:00000000 00:00000000 00000000  1000        0 333 1 0 20 4 30 10 -1\n";
        let peer: SocketAddr = "127.0.0.1:54321".parse().unwrap();
        assert_eq!(find_in_table(table, peer, 18080), Some((1000, 333)));
        assert_eq!(find_in_table(table, peer, 18081), None);
    }

    fn approvals(timeout_ms: u64) -> Arc<Approvals> {
        let limits = ExecveSection {
            approval_timeout: Duration::from_millis(timeout_ms),
            ..ExecveSection::default()
        };
        Arc::new(Approvals::new(
            &limits,
            Arc::new(AuditLog::in_memory(10)),
            Arc::new(Trees::new()),
        ))
    }

    #[test]
    fn unknown_request_cannot_be_decided() {
        let a = approvals(1000);
        assert_eq!(
            a.decide("ap-1-x", true, "op".into(), None),
            Err(DecideError::NotFound("ap-1-x".into()))
        );
    }

    #[test]
    fn long_poll_returns_empty_after_its_wait() {
        let a = approvals(1000);
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap();
        let t = Instant::now();
        assert!(rt
            .block_on(a.wait_pending(0, Duration::from_millis(100)))
            .is_empty());
        assert!(t.elapsed() >= Duration::from_millis(100));
    }

    fn held(notif_id: u64) -> HeldExec {
        HeldExec {
            session_id: "s".into(),
            notif_id,
            tid: 4242,
            starttime: 7,
            expected: None,
            subject: ExecSubject {
                pid: 4242,
                parent_pid: 1,
                depth: 1,
                filename: "/usr/bin/pip".into(),
                argv: vec!["pip".into(), "install".into(), "x".into()],
                ..ExecSubject::default()
            },
            rule: "approve-pip".into(),
            message: None,
        }
    }

    #[test]
    fn reissued_notification_joins_its_request_and_a_dead_one_is_cancelled() {
        let audit = Arc::new(AuditLog::in_memory(10));
        let a = Arc::new(Approvals::new(
            &ExecveSection::default(),
            audit.clone(),
            Arc::new(Trees::new()),
        ));
        // Not a notify fd: every id reads as invalid, like a killed tracee.
        let fd: Arc<std::os::fd::OwnedFd> =
            Arc::new(std::fs::File::open("/dev/null").unwrap().into());
        let holder = |id| Holder::Notify { fd: fd.clone(), id };
        let (tx, _rx) = std::sync::mpsc::channel();
        a.hold(holder(1), held(1), tx.clone());
        a.hold(holder(2), held(2), tx.clone());
        let pending = a.pending(0);
        assert_eq!(pending.len(), 1, "one prompt for a re-issued exec");
        let mut other = held(3);
        other.subject.argv.push("y".into());
        a.hold(holder(3), other, tx);
        assert_eq!(a.pending(0).len(), 2, "a different argv is a new request");
        let t = Instant::now();
        while !a.pending(0).is_empty() {
            assert!(t.elapsed() < Duration::from_secs(3));
            std::thread::sleep(Duration::from_millis(20));
        }
        std::thread::sleep(Duration::from_millis(50));
        let ev = audit.events("s", 0);
        assert_eq!(ev.len(), 2, "{ev:#?}");
        for e in &ev {
            let EventBody::Execve(x) = &e.body else {
                panic!("{e:?}")
            };
            assert_eq!(x.approval_outcome, Some(Outcome::Cancelled));
            assert_eq!(x.effective_action, Action::Deny);
        }
    }

    #[test]
    fn outcomes_have_their_audit_names() {
        let names: Vec<_> = [
            Outcome::Approved,
            Outcome::Denied,
            Outcome::Timeout,
            Outcome::Cancelled,
        ]
        .iter()
        .map(|o| o.as_str())
        .collect();
        assert_eq!(names, ["approved", "denied", "timeout", "cancelled"]);
    }
}
