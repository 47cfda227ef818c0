use super::time::rfc3339;
use super::*;
use std::path::Path;

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
