//! Approvals without a kernel: requests, re-issued notifications, outcomes.

use super::*;
use crate::audit::ExecSubject;

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
        attempt: 1,
        lookup: None,
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
    let fd: Arc<std::os::fd::OwnedFd> = Arc::new(std::fs::File::open("/dev/null").unwrap().into());
    let holder = |id| Holder::Notify { fd: fd.clone(), id };
    let (tx, _rx) = std::sync::mpsc::channel();
    a.hold_exec(holder(1), held(1), tx.clone());
    a.hold_exec(holder(2), held(2), tx.clone());
    let pending = a.pending(0);
    assert_eq!(pending.len(), 1, "one prompt for a re-issued exec");
    let mut other = held(3);
    other.subject.argv.push("y".into());
    a.hold_exec(holder(3), other, tx);
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
