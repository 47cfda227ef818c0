//! Holding a call: it becomes a new pending request with a waiter of its
//! own, joins the open request it re-issues, or is refused at once as the
//! retry of a request refused moments ago (the next PATH entry).
//!
//! Failure modes: no random id (the token source failed) falls back to one
//! made of the notification and pid; a waiter that cannot start refuses the
//! call (`waiter`).

use super::pending::{lock, Approvals, Entry, State};
use super::request::{ApprovalDestination, ApprovalRequest};
use super::token;
use crate::audit;
use crate::supervisor::{Held, Hold, HoldRequest, Settled};
use std::sync::Arc;
use std::time::{Instant, SystemTime};

impl Hold for Approvals {
    fn hold(self: Arc<Self>, held: Box<dyn Held>) {
        self.hold_call(held);
    }
}

impl Approvals {
    /// Holds `held` until it is decided, times out or its caller goes away.
    /// Never blocks: the waiting happens on a new thread, which settles it
    /// (the family that held it audits and answers).
    ///
    /// A notification for the same process, program and argv as a request
    /// that is still open (a signal made the kernel re-issue it) joins that
    /// request instead of prompting twice, where the call allows it; one
    /// with the same retry key as a request refused moments ago (the next
    /// PATH entry) is refused the same way at once, as a retry of it.
    fn hold_call(self: &Arc<Self>, held: Box<dyn Held>) {
        let now = SystemTime::now();
        let request = held.request();
        let notif_id = held.waiting().notif_id();
        let id = {
            let mut st = lock(&self.state);
            let repeat = held
                .retry_key()
                .and_then(|(k, _)| st.refused.find(&k, Instant::now()));
            if let Some((attempt, f)) = repeat {
                drop(st);
                held.settle(Settled {
                    id: f.id,
                    outcome: f.verdict.outcome,
                    approver: f.verdict.approver,
                    reason: f.verdict.reason,
                    allow: false,
                    live: Some(notif_id),
                    retry_of: Some(attempt),
                    timeout: self.timeout,
                });
                return;
            }
            if held.rejoinable() && Self::join_open_request(&mut st, &request, notif_id) {
                drop(st);
                self.notify_changed();
                return;
            }
            self.new_request(&mut st, request, notif_id, now)
        };
        self.notify_changed();
        held.on_hold(&id, self.timeout);
        self.start_waiter(id, held);
    }

    /// A re-issued notification (same process, program and argv as a
    /// request still open) joins that request: whether it did.
    fn join_open_request(st: &mut State, r: &HoldRequest, notif_id: u64) -> bool {
        let Some(e) = st.pending.values_mut().find(|e| {
            e.request.pid == r.pid
                && e.starttime == r.starttime
                && e.request.kind == r.kind.as_str()
                && e.request.session_id == r.session_id
                && e.request.filename == r.filename
                && e.request.argv == r.argv
        }) else {
            return false;
        };
        tracing::info!(
            id = %e.request.id,
            pid = r.pid,
            "re-issued call joins its pending approval"
        );
        e.notif_ids.push(notif_id);
        true
    }

    /// Registers a new pending request for `r` (held since `now`) and
    /// returns its id.
    fn new_request(
        &self,
        st: &mut State,
        r: HoldRequest,
        notif_id: u64,
        now: SystemTime,
    ) -> String {
        st.seq += 1;
        let seq = st.seq;
        let id = format!(
            "ap-{seq}-{}",
            token::random_hex(4).unwrap_or_else(|_| format!("{:08x}", notif_id as u32 ^ r.pid))
        );
        match &r.destination {
            None => {
                tracing::info!(%id, pid = r.pid, filename = %r.filename, "{} waits for approval", r.kind.as_str());
            }
            Some(d) => {
                tracing::info!(%id, pid = r.pid, ip = %d.ip, port = d.port, "{} waits for approval", r.kind.as_str());
            }
        }
        let request = ApprovalRequest {
            id: id.clone(),
            kind: r.kind.as_str(),
            seq,
            session_id: r.session_id,
            pid: r.pid,
            depth: r.depth,
            filename: r.filename,
            argv: r.argv,
            file: r.file,
            rule: r.rule,
            message: r.message,
            waiting_since: audit::rfc3339_at(now),
            expires_at: audit::rfc3339_at(now + self.timeout),
            destination: r.destination.map(|d| ApprovalDestination {
                host: d.host,
                ip: d.ip.to_string(),
                port: d.port,
                protocol: d.protocol.to_string(),
            }),
        };
        st.pending.insert(
            id.clone(),
            Entry {
                request,
                notif_ids: vec![notif_id],
                starttime: r.starttime,
                verdict: None,
            },
        );
        id
    }
}
