//! Approvals without a kernel: requests, re-issued notifications, outcomes.

use super::pending::lock;
use super::*;
use crate::config::ExecveSection;
use crate::supervisor::{Held, Hold, HoldRequest, Settled, Waiting};
use crate::trees::Trees;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

fn approvals(timeout_ms: u64) -> Arc<Approvals> {
    let limits = ExecveSection {
        approval_timeout: Duration::from_millis(timeout_ms),
        ..ExecveSection::default()
    };
    Arc::new(Approvals::new(&limits, Arc::new(Trees::new())))
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

/// A held call that waits until answered (`waiting`), or whose
/// notification never reads as waiting, like a killed tracee's.
struct Fake {
    id: u64,
    waiting: bool,
}

impl Waiting for Fake {
    fn notif_id(&self) -> u64 {
        self.id
    }
    fn live(&self, ids: &[u64]) -> Option<u64> {
        ids.last().copied().filter(|_| self.waiting)
    }
}

/// A held exec-like call that records how it was settled.
struct Probe {
    request: HoldRequest,
    waiting: Fake,
    settled: Arc<Mutex<Vec<Settled>>>,
    retry: Option<(crate::supervisor::retry::Lookup, u64)>,
}

impl Held for Probe {
    fn request(&self) -> HoldRequest {
        self.request.clone()
    }
    fn waiting(&self) -> &dyn Waiting {
        &self.waiting
    }
    fn rejoinable(&self) -> bool {
        true
    }
    fn retry_key(&self) -> Option<(crate::supervisor::retry::Lookup, u64)> {
        self.retry.clone()
    }
    fn settle(self: Box<Self>, s: Settled) {
        lock(&self.settled).push(s);
    }
}

fn request(argv: &[&str]) -> HoldRequest {
    HoldRequest {
        kind: crate::supervisor::HoldKind::Exec,
        session_id: "s".into(),
        pid: 4242,
        starttime: 7,
        depth: 1,
        filename: "/usr/bin/pip".into(),
        argv: argv.iter().map(ToString::to_string).collect(),
        file: None,
        rule: "approve-pip".into(),
        message: None,
        destination: None,
    }
}

fn held(notif_id: u64, argv: &[&str], settled: &Arc<Mutex<Vec<Settled>>>) -> Box<dyn Held> {
    Box::new(Probe {
        request: request(argv),
        waiting: Fake {
            id: notif_id,
            waiting: false,
        },
        settled: settled.clone(),
        retry: None,
    })
}

fn wait_settled(settled: &Arc<Mutex<Vec<Settled>>>, n: usize) {
    let t = Instant::now();
    while lock(settled).len() < n {
        assert!(t.elapsed() < Duration::from_secs(3), "not settled");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A refused request's retry (the same key, the next PATH entry) is
/// refused at once as a retry of it, without a new request.
#[test]
fn a_retry_of_a_refused_request_is_refused_like_it() {
    let a = approvals(10_000);
    let settled = Arc::new(Mutex::new(Vec::new()));
    let key = crate::supervisor::retry::Lookup {
        pid: 4242,
        starttime: 7,
        dev: 1,
        ino: 2,
        argv: vec!["pip".into()],
    };
    let probe = |id, attempt| {
        Box::new(Probe {
            request: request(&["pip"]),
            waiting: Fake { id, waiting: true },
            settled: settled.clone(),
            retry: Some((key.clone(), attempt)),
        })
    };
    a.clone().hold(probe(1, 11));
    let id = a.pending(0)[0].id.clone();
    a.decide(&id, false, "op".into(), Some("no".into()))
        .expect("decided");
    wait_settled(&settled, 1);
    a.clone().hold(probe(2, 12));
    wait_settled(&settled, 2);
    assert!(a.pending(0).is_empty(), "no second request");
    let s = lock(&settled);
    assert_eq!(s[0].outcome, Outcome::Denied);
    assert_eq!(s[0].retry_of, None);
    assert_eq!(
        s[1].retry_of,
        Some(11),
        "the retry repeats the first attempt"
    );
    assert_eq!(s[1].id, id);
    assert!(!s[1].allow);
}

#[test]
fn reissued_notification_joins_its_request_and_a_dead_one_is_cancelled() {
    let a = approvals(10_000);
    let settled = Arc::new(Mutex::new(Vec::new()));
    let pip = ["pip", "install", "x"];
    a.clone().hold(held(1, &pip, &settled));
    a.clone().hold(held(2, &pip, &settled));
    assert_eq!(a.pending(0).len(), 1, "one prompt for a re-issued exec");
    a.clone()
        .hold(held(3, &["pip", "install", "x", "y"], &settled));
    assert_eq!(a.pending(0).len(), 2, "a different argv is a new request");
    wait_settled(&settled, 2);
    assert!(a.pending(0).is_empty());
    let settled = lock(&settled);
    assert_eq!(settled.len(), 2, "{settled:#?}");
    for s in settled.iter() {
        assert_eq!(s.outcome, Outcome::Cancelled);
        assert!(!s.allow);
        assert_eq!(s.live, None);
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
