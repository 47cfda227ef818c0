//! A request held for an operator (an `http` rule or default `approve`):
//! asked like an exec (`agentsh approvals`), kind `http`, the request's
//! method and URL as its `filename`; the proxy's request waits on a channel
//! the approval's end answers. It is no syscall: approvals see only its id
//! and whether its client still waits (the seam's `Waiting`), and its end
//! is sent whole on the channel (`Held::settle`).
//!
//! Failure modes: a client gone before the answer cancels the request
//! (the waiter sees the channel closed); a refusal or timeout is a 403.

use crate::supervisor::{Held, HeldDestination, HoldKind, HoldRequest, Settled, Waiting};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use tokio::sync::oneshot;

/// Ids of held requests: far from any notification id.
static NEXT: AtomicU64 = AtomicU64::new(1 << 62);

/// The waiting request's end of the approval: it still waits while the
/// request's task holds the receiver (a client gone drops it).
pub(super) struct Parked {
    id: u64,
    tx: Mutex<Option<oneshot::Sender<Settled>>>,
}

impl Waiting for Parked {
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
}

/// A held request.
pub(super) struct HeldRequest {
    pub request: HoldRequest,
    /// `execve.explain: stderr`: the connecting thread is told it waits.
    pub explain: bool,
    pub parked: Parked,
}

impl Held for HeldRequest {
    fn request(&self) -> HoldRequest {
        self.request.clone()
    }
    fn waiting(&self) -> &dyn Waiting {
        &self.parked
    }
    fn on_hold(&self, id: &str, timeout: std::time::Duration) {
        if self.explain {
            let line = crate::explain::waiting_request(id, &self.request.filename, timeout);
            crate::explain::tell(self.request.pid, &line);
        }
    }
    fn settle(self: Box<Self>, s: Settled) {
        let tx = self
            .parked
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
    let parked = Parked {
        id: NEXT.fetch_add(1, Ordering::Relaxed),
        tx: Mutex::new(Some(tx)),
    };
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
    (
        HeldRequest {
            request,
            explain: false,
            parked,
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::approval::Approvals;
    use crate::config::ExecveSection;
    use crate::supervisor::Hold;
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    fn request() -> (HeldRequest, oneshot::Receiver<Settled>) {
        held(
            "s",
            4242,
            "POST https://api.example.com/v1/x".into(),
            "post",
            "egress rule api: http rule post asks an operator".into(),
            HeldDestination {
                host: Some("api.example.com".into()),
                ip: std::net::Ipv4Addr::new(192, 0, 2, 2).into(),
                port: 443,
                protocol: "tcp",
            },
        )
    }

    fn approvals() -> Arc<Approvals> {
        let limits = ExecveSection {
            approval_timeout: Duration::from_secs(10),
            ..ExecveSection::default()
        };
        Arc::new(Approvals::new(
            &limits,
            Arc::new(crate::trees::Trees::new()),
        ))
    }

    #[test]
    fn a_held_request_waits_while_its_client_does() {
        let (held, rx) = request();
        let id = held.waiting().notif_id();
        assert!(id >= 1 << 62, "far from any notification id: {id}");
        assert_eq!(held.waiting().live(&[id]), Some(id));
        assert_eq!(held.waiting().live(&[]), None, "no id, nothing to answer");
        drop(rx);
        assert_eq!(held.waiting().live(&[id]), None, "its client is gone");
    }

    #[test]
    fn held_requests_have_ids_of_their_own() {
        let (a, _ra) = request();
        let (b, _rb) = request();
        assert_ne!(a.waiting().notif_id(), b.waiting().notif_id());
    }

    #[test]
    fn an_approved_request_gets_its_end_through_approvals() {
        let a = approvals();
        let (held, rx) = request();
        let id = held.waiting().notif_id();
        a.clone().hold(Box::new(held));
        let pending = a.pending(0);
        assert_eq!(pending.len(), 1);
        assert_eq!(pending[0].kind, "http");
        assert_eq!(pending[0].filename, "POST https://api.example.com/v1/x");
        a.decide(&pending[0].id, true, "op".into(), None)
            .expect("decided");
        let s = rx.blocking_recv().expect("the end arrives");
        assert!(s.allow);
        assert_eq!(s.outcome, crate::audit::ApprovalOutcome::Approved);
        assert_eq!(s.approver, "op");
        assert_eq!(s.live, Some(id), "answered while its client waits");
    }

    #[test]
    fn a_request_whose_client_left_is_cancelled_before_its_timeout() {
        let a = approvals();
        let (held, rx) = request();
        a.clone().hold(Box::new(held));
        assert_eq!(a.pending(0).len(), 1);
        drop(rx);
        let t = Instant::now();
        while !a.pending(0).is_empty() {
            assert!(
                t.elapsed() < Duration::from_secs(3),
                "a request nobody waits for stays pending"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}
