//! A request held for an operator (an `http` rule or default `approve`):
//! asked like an exec (`agentsh approvals`), kind `http`, the request's
//! method and URL as its `filename`; the proxy's request waits on a channel
//! the approval's end answers.
//!
//! Failure modes: a client gone before the answer cancels the request
//! (the waiter sees the channel closed); a refusal or timeout is a 403.

use crate::supervisor::{
    Deferred, Held, HeldDestination, HoldKind, HoldRequest, Holder, Settled, Verification,
};
use std::io;
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use tokio::sync::oneshot;

/// Ids of held requests: far from any notification id.
static NEXT: AtomicU64 = AtomicU64::new(1 << 62);

/// The waiting request's end of the approval.
pub(super) struct Waiting {
    id: u64,
    tx: Mutex<Option<oneshot::Sender<Settled>>>,
}

impl Deferred for Waiting {
    fn notif_id(&self) -> u64 {
        self.id
    }
    fn live(&self, ids: &[u64]) -> Option<u64> {
        let tx = self
            .tx
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        tx.as_ref()
            .filter(|t| !t.is_closed())
            .and(ids.last().copied())
    }
    // The request is answered in `settle`, with the whole end.
    fn answer_value(&self, _val: i64) {}
    fn refuse(&self, _id: u64) {}
    fn proceed(&self, _id: u64, _expect: Option<Verification>) -> io::Result<()> {
        Ok(())
    }
    fn verifies_every_exec(&self) -> bool {
        false
    }
    fn install_fd(&self, _sock: &OwnedFd, _at: i32, _cloexec: bool) -> io::Result<()> {
        Err(io::Error::from_raw_os_error(libc::ENOSYS))
    }
    fn add_fd(&self, _file: &OwnedFd, _cloexec: bool) -> io::Result<i32> {
        Err(io::Error::from_raw_os_error(libc::ENOSYS))
    }
}

/// A held request.
pub(super) struct HeldRequest {
    pub request: HoldRequest,
    /// `execve.explain: stderr`: the connecting thread is told it waits.
    pub explain: bool,
    pub holder: Holder,
    pub waiting: Arc<Waiting>,
}

impl Held for HeldRequest {
    fn request(&self) -> HoldRequest {
        self.request.clone()
    }
    fn holder(&self) -> &Holder {
        &self.holder
    }
    fn on_hold(&self, id: &str, timeout: std::time::Duration) {
        if self.explain {
            let line = crate::explain::waiting_request(id, &self.request.filename, timeout);
            crate::explain::tell(self.request.pid, &line);
        }
    }
    fn settle(self: Box<Self>, s: Settled) {
        let tx = self
            .waiting
            .tx
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take();
        if let Some(tx) = tx {
            let _ = tx.send(s);
        }
    }
}

/// What the operator is asked, and the channel its end arrives on.
pub(super) fn held(
    session_id: &str,
    pid: u32,
    what: String,
    rule: &str,
    message: String,
    destination: HeldDestination,
) -> (HeldRequest, oneshot::Receiver<Settled>) {
    let (tx, rx) = oneshot::channel();
    let waiting = Arc::new(Waiting {
        id: NEXT.fetch_add(1, Ordering::Relaxed),
        tx: Mutex::new(Some(tx)),
    });
    let request = HoldRequest {
        kind: HoldKind::Http,
        session_id: session_id.to_string(),
        pid,
        starttime: 0,
        depth: 0,
        filename: what,
        argv: Vec::new(),
        file: None,
        rule: rule.to_string(),
        message: Some(message),
        destination: Some(destination),
    };
    let holder: Holder = waiting.clone();
    (
        HeldRequest {
            request,
            explain: false,
            holder,
            waiting,
        },
        rx,
    )
}

/// How a held request ended.
pub(super) struct Ended {
    pub allow: bool,
    pub id: String,
    pub outcome: crate::audit::ApprovalOutcome,
    pub approver: String,
    pub reason: Option<String>,
    pub timeout: std::time::Duration,
}

impl Ended {
    /// How it ended, as the request's event records it.
    pub fn record(&self) -> crate::audit::ApprovalRecord {
        crate::audit::ApprovalRecord {
            approval_id: self.id.clone(),
            approval_outcome: self.outcome,
            approver: self.approver.clone(),
            reason: self.reason.clone(),
        }
    }

    /// Why it was refused, for the 403.
    pub fn why(&self) -> String {
        match self.outcome {
            crate::audit::ApprovalOutcome::Timeout => format!(
                "approval {} timed out after {:.0} s",
                self.id,
                self.timeout.as_secs_f64()
            ),
            o => format!(
                "approval {} {} by {}{}",
                self.id,
                o.as_str(),
                self.approver,
                self.reason
                    .as_deref()
                    .map_or_else(String::new, |r| format!(": {r}"))
            ),
        }
    }
}

/// Holds the request for an operator and waits for the end.
pub(super) async fn ask(
    proxy: &super::state::Proxy,
    b: &super::book::Booking,
    shown: &str,
    rule: &str,
) -> Ended {
    let (mut held, rx) = held(
        &b.session_id,
        b.pid,
        shown.to_string(),
        rule,
        format!("egress rule {}: http rule {rule} asks an operator", b.rule),
        HeldDestination {
            host: b.host.clone(),
            ip: b.dest.ip(),
            port: b.dest.port(),
            protocol: "tcp",
        },
    );
    held.explain = proxy.explain;
    proxy.approvals.clone().hold(Box::new(held));
    match rx.await {
        Ok(s) => Ended {
            allow: s.allow,
            id: s.id,
            outcome: s.outcome,
            approver: s.approver,
            reason: s.reason,
            timeout: s.timeout,
        },
        Err(_) => Ended {
            allow: false,
            id: String::new(),
            outcome: crate::audit::ApprovalOutcome::Cancelled,
            approver: "server".into(),
            reason: Some("the approval ended without an answer".into()),
            timeout: std::time::Duration::ZERO,
        },
    }
}
