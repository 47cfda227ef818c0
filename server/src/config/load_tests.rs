//! Tests of `config::load`: config texts parsed and checked.

use super::*;
use crate::config::{EgressCompat, OnTruncated, TimeoutAction};

#[test]
fn embedded_defaults_parse() {
    let c = Config::load(None).unwrap();
    assert_eq!(c.server.http.addr, "");
    assert_eq!(c.server.socket, Path::new("/run/agentsh/api.sock"));
    assert_eq!(c.execve.max_argc, 131_072);
    assert_eq!(c.execve.max_argv_bytes, 2_097_152);
    assert_eq!(c.execve.on_truncated, OnTruncated::Deny);
    assert_eq!(c.policy, "agent-default");
}

#[test]
fn partial_config_keeps_other_defaults() {
    let c = Config::from_yaml("execve:\n  max_argc: 5\n", "t").unwrap();
    assert_eq!(c.execve.max_argc, 5);
    assert_eq!(c.execve.max_argv_bytes, 2_097_152);
}

#[test]
fn unknown_key_is_an_error() {
    let e = Config::from_yaml("execve:\n  max_arg: 5\n", "t").unwrap_err();
    assert!(e.to_string().contains("max_arg"), "{e}");
}

#[test]
fn approval_timeout_forms() {
    use std::time::Duration;
    let c = Config::load(None).unwrap();
    assert_eq!(c.execve.approval_timeout, Duration::from_secs(10));
    assert_eq!(c.execve.approval_timeout_action, TimeoutAction::Deny);
    for (text, want) in [
        ("\"10s\"", Duration::from_secs(10)),
        ("\"500ms\"", Duration::from_millis(500)),
        ("\"2m\"", Duration::from_secs(120)),
        ("3", Duration::from_secs(3)),
        ("1.5", Duration::from_millis(1500)),
    ] {
        let c = Config::from_yaml(&format!("execve: {{approval_timeout: {text}}}"), "t")
            .unwrap_or_else(|e| panic!("{text}: {e}"));
        assert_eq!(c.execve.approval_timeout, want, "{text}");
    }
    for bad in ["\"soon\"", "0", "-1", "\"10h\""] {
        assert!(
            Config::from_yaml(&format!("execve: {{approval_timeout: {bad}}}"), "t").is_err(),
            "{bad}"
        );
    }
    let c = Config::from_yaml("execve: {approval_timeout_action: allow}", "t").unwrap();
    assert_eq!(c.execve.approval_timeout_action, TimeoutAction::Allow);
}

#[test]
fn workspace_and_landlock_compat() {
    let c = Config::load(None).unwrap();
    assert_eq!(c.workspace, "");
    assert_eq!(c.landlock.compat, agentsh_proto::LandlockCompat::BestEffort);
    let c = Config::from_yaml("workspace: /w\nlandlock: {compat: required}\n", "t").unwrap();
    assert_eq!(c.workspace, "/w");
    assert_eq!(c.landlock.compat, agentsh_proto::LandlockCompat::Required);
    assert!(Config::from_yaml("workspace: w", "t").is_err());
    assert!(Config::from_yaml("landlock: {compat: maybe}", "t").is_err());
    assert_eq!(c.landlock.max_abi, 0);
    let c = Config::from_yaml("landlock: {max_abi: 2}\n", "t").unwrap();
    assert_eq!(c.landlock.cap(), Some(2));
    assert!(c.landlock.effective_abi() <= 2);
    assert!(Config::from_yaml("landlock: {max_abi: -1}", "t").is_err());
    assert!(Config::from_yaml("landlock: {max_abi: 99}", "t").is_err());
}

#[test]
fn bad_values_are_errors() {
    assert!(Config::from_yaml("server: {http: {addr: nope}}", "t").is_err());
    assert!(Config::from_yaml("server: {socket: api.sock}", "t").is_err());
    assert!(Config::from_yaml("server: {socket: /api.sock}", "t").is_err());
    assert!(Config::from_yaml("server: {http: {wrap_init: true}}", "t").is_err());
    assert!(Config::from_yaml(
        "server: {http: {addr: '127.0.0.1:1', wrap_init: true}}",
        "t"
    )
    .is_ok());
    assert!(Config::from_yaml("execve: {on_truncated: maybe}", "t").is_err());
    assert!(Config::from_yaml("execve: {max_argc: 0}", "t").is_err());
}

#[test]
fn egress_keys_are_checked() {
    let c = Config::from_yaml(
        "egress:\n  resolvers: [\"10.0.0.2:53\"]\n  compat: required\n",
        "t",
    )
    .unwrap();
    assert_eq!(c.egress.compat, EgressCompat::Required);
    assert_eq!(
        c.egress.upstream("").unwrap(),
        vec!["10.0.0.2:53".parse().unwrap()]
    );
    for bad in [
        "egress:\n  stub: 127.0.0.153\n",
        "egress:\n  resolvers: [\"10.0.0.2\"]\n",
        "egress:\n  resolvers: [\"127.0.0.153:53\"]\n",
        "egress:\n  compat: maybe\n",
    ] {
        let e = Config::from_yaml(bad, "t").err();
        assert!(e.is_some(), "{bad} was taken");
    }
}

#[test]
fn sessions_are_checked_with_their_place() {
    let ok = "sessions:\n  task-42:\n    policy: agent-strict\n    workspace: /w/42\n    env:\n      deny: [\"*_TOKEN\"]\n      inject: {PIP_INDEX_URL: \"https://pypi.internal/simple\"}\n";
    let c = Config::from_yaml(ok, "t").unwrap();
    let s = &c.sessions["task-42"];
    assert_eq!(s.policy.as_deref(), Some("agent-strict"));
    assert_eq!(s.env.as_ref().unwrap().deny, vec!["*_TOKEN".to_string()]);
    // An invalid glob: line and column of the value.
    let bad = "sessions:\n  task-42:\n    env:\n      deny: [\"*_TOKEN\", \"A-B\"]\n";
    let e = Config::from_yaml(bad, "t").unwrap_err().to_string();
    assert!(
        e.contains("4:25: sessions.task-42.env.deny: \"A-B\""),
        "{e}"
    );
    let bad = "sessions:\n  t:\n    env:\n      inject: {LD_PRELOAD: /x.so}\n";
    let e = Config::from_yaml(bad, "t").unwrap_err().to_string();
    assert!(
        e.contains("4:16: sessions.t.env.inject: \"LD_PRELOAD\""),
        "{e}"
    );
    for (bad, named) in [
        (
            "sessions:\n  default: {policy: agent-strict}\n",
            "sessions.default",
        ),
        ("sessions:\n  \"a b\": {}\n", "\"a b\""),
        (
            "sessions:\n  agentsh.rehearsal: {}\n",
            "reserved for the server's own rehearsal shell",
        ),
        ("sessions:\n  t: {polcy: x}\n", "polcy"),
    ] {
        let e = Config::from_yaml(bad, "t").unwrap_err().to_string();
        assert!(e.contains(named), "{bad}: {e}");
    }
}
