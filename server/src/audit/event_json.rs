//! The audit JSON is a contract (the file and its hash chain): an event of
//! each kind that can carry an approval, with and without one, written
//! byte for byte as before the approval fields became one record.

use super::*;
use crate::policy::Decision;

fn envelope(body: EventBody) -> String {
    serde_json::to_string(&Event {
        id: 7,
        timestamp: "2026-11-22T00:00:00.000000Z".into(),
        session_id: "s".into(),
        body,
    })
    .expect("an event serialises")
}

fn exec(approved: bool) -> EventBody {
    let e = ExecEvent::new(
        ExecSubject {
            pid: 10,
            parent_pid: 9,
            depth: 1,
            filename: "/usr/bin/pip".into(),
            argv: vec!["pip".into(), "install".into()],
            ..ExecSubject::default()
        },
        Decision::Approve,
        "approve-pip",
        Action::Allow,
        Some("asks".into()),
    )
    .in_attempt(3, false);
    EventBody::Execve(if approved {
        e.with_approval(
            "ap-1-abcd",
            ApprovalOutcome::Approved,
            "root".into(),
            Some("fine".into()),
        )
    } else {
        e
    })
}

fn connect(approved: bool) -> EventBody {
    EventBody::Connect(ConnectEvent {
        pid: 11,
        syscall: "connect".into(),
        host: Some("example.com".into()),
        ip: Some("192.0.2.1".into()),
        port: Some(443),
        protocol: Some("tcp".into()),
        rule: "ask".into(),
        decision: Decision::Approve,
        message: None,
        effective_action: approved.then_some(Action::Deny),
        approval: approved.then(|| ApprovalRecord {
            approval_id: "ap-2-abcd".into(),
            approval_outcome: ApprovalOutcome::Timeout,
            approver: "timeout".into(),
            reason: Some("no answer".into()),
        }),
    })
}

fn http(approved: bool) -> EventBody {
    EventBody::Http(HttpEvent {
        pid: 12,
        method: "POST".into(),
        scheme: "https".into(),
        host: "api.example.com".into(),
        path: "/v1/x".into(),
        ip: "192.0.2.2".into(),
        port: 443,
        egress_rule: "api".into(),
        rule: "post".into(),
        decision: Decision::Approve,
        status: Some(200),
        injected: vec!["authorization".into()],
        message: Some("held".into()),
        effective_action: approved.then_some(Action::Allow),
        approval: approved.then(|| ApprovalRecord {
            approval_id: "ap-3-abcd".into(),
            approval_outcome: ApprovalOutcome::Approved,
            approver: "op".into(),
            reason: None,
        }),
    })
}

/// Each event as it was written before the approval fields became one
/// record, and read back as the same event (replay and the chain's check
/// read the file).
fn written_as(body: EventBody, json: &str) {
    assert_eq!(envelope(body.clone()), json);
    let back: Event = serde_json::from_str(json).expect("the line reads back");
    assert_eq!(back.body, body);
}

#[test]
fn an_exec_without_an_approval_is_written_as_before() {
    written_as(
        exec(false),
        r#"{"id":7,"timestamp":"2026-11-22T00:00:00.000000Z","session_id":"s","type":"execve","pid":10,"parent_pid":9,"depth":1,"filename":"/usr/bin/pip","argv":["pip","install"],"truncated":false,"decision":"approve","rule":"approve-pip","effective_action":"allow","message":"asks","attempt":3}"#,
    );
}

#[test]
fn an_approved_exec_is_written_as_before() {
    written_as(
        exec(true),
        r#"{"id":7,"timestamp":"2026-11-22T00:00:00.000000Z","session_id":"s","type":"execve","pid":10,"parent_pid":9,"depth":1,"filename":"/usr/bin/pip","argv":["pip","install"],"truncated":false,"decision":"approve","rule":"approve-pip","effective_action":"allow","message":"asks","approval_id":"ap-1-abcd","approval_outcome":"approved","approver":"root","reason":"fine","attempt":3}"#,
    );
}

#[test]
fn a_connect_without_an_approval_is_written_as_before() {
    written_as(
        connect(false),
        r#"{"id":7,"timestamp":"2026-11-22T00:00:00.000000Z","session_id":"s","type":"connect","pid":11,"syscall":"connect","host":"example.com","ip":"192.0.2.1","port":443,"protocol":"tcp","rule":"ask","decision":"approve"}"#,
    );
}

#[test]
fn a_timed_out_connect_is_written_as_before() {
    written_as(
        connect(true),
        r#"{"id":7,"timestamp":"2026-11-22T00:00:00.000000Z","session_id":"s","type":"connect","pid":11,"syscall":"connect","host":"example.com","ip":"192.0.2.1","port":443,"protocol":"tcp","rule":"ask","decision":"approve","effective_action":"deny","approval_id":"ap-2-abcd","approval_outcome":"timeout","approver":"timeout","reason":"no answer"}"#,
    );
}

#[test]
fn an_http_request_without_an_approval_is_written_as_before() {
    written_as(
        http(false),
        r#"{"id":7,"timestamp":"2026-11-22T00:00:00.000000Z","session_id":"s","type":"http","pid":12,"method":"POST","scheme":"https","host":"api.example.com","path":"/v1/x","ip":"192.0.2.2","port":443,"egress_rule":"api","rule":"post","decision":"approve","status":200,"injected":["authorization"],"message":"held"}"#,
    );
}

#[test]
fn an_approved_http_request_without_a_reason_is_written_as_before() {
    written_as(
        http(true),
        r#"{"id":7,"timestamp":"2026-11-22T00:00:00.000000Z","session_id":"s","type":"http","pid":12,"method":"POST","scheme":"https","host":"api.example.com","path":"/v1/x","ip":"192.0.2.2","port":443,"egress_rule":"api","rule":"post","decision":"approve","status":200,"injected":["authorization"],"message":"held","effective_action":"allow","approval_id":"ap-3-abcd","approval_outcome":"approved","approver":"op"}"#,
    );
}
