//! Tests of `config`.

use super::*;

#[test]
fn embedded_defaults_parse() {
    let c = Config::load(None).unwrap();
    assert_eq!(c.server.http.addr, "");
    assert_eq!(c.server.socket, Path::new("/run/agentsh/api.sock"));
    assert_eq!(c.execve.max_argc, 1000);
    assert_eq!(c.execve.max_argv_bytes, 65536);
    assert_eq!(c.execve.on_truncated, OnTruncated::Deny);
    assert_eq!(c.policy, "agent-default");
}

#[test]
fn partial_config_keeps_other_defaults() {
    let c = Config::from_yaml("execve:\n  max_argc: 5\n", "t").unwrap();
    assert_eq!(c.execve.max_argc, 5);
    assert_eq!(c.execve.max_argv_bytes, 65536);
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
fn own_files_in_a_world_writable_directory_are_found() {
    let shared = |p: &Path| {
        ["/tmp", "/var/tmp", "/dev/shm", "/srv/open"].contains(&p.to_str().unwrap_or(""))
    };
    let cases: &[(&str, Option<&str>)] = &[
        ("/var/lib/agentsh", None),
        ("/var/log/agentsh/audit.jsonl", None),
        ("/tmp", Some("/tmp")),
        ("/tmp/agentsh", Some("/tmp")),
        ("/tmp/a/b/audit.jsonl", Some("/tmp")),
        ("/var/tmp/agentsh", Some("/var/tmp")),
        ("/dev/shm/x", Some("/dev/shm")),
        ("/srv/open/deeper/state", Some("/srv/open")),
        ("/srv/closed/state", None),
        ("/", None),
    ];
    for (path, want) in cases {
        assert_eq!(
            shared_ancestor(Path::new(path), &shared),
            want.map(PathBuf::from),
            "{path}"
        );
    }
}

#[test]
fn state_under_tmp_is_refused_with_what_to_use() {
    let c = Config::from_yaml("state_dir: /tmp/agentsh-state\n", "t").unwrap();
    let e = c.check_own_locations(None).unwrap_err().to_string();
    assert!(
        e.starts_with("state_dir /tmp/agentsh-state is inside /tmp, which anyone can write"),
        "{e}"
    );
    assert!(e.contains("/var/lib/agentsh"), "{e}");
    let c = Config::from_yaml("audit: {jsonl: /var/tmp/a/audit.jsonl}\n", "t").unwrap();
    let e = c.check_own_locations(None).unwrap_err().to_string();
    assert!(
        e.starts_with("audit.jsonl /var/tmp/a/audit.jsonl is inside /var/tmp"),
        "{e}"
    );
    let e = Config::load(None)
        .unwrap()
        .check_own_locations(Some(Path::new("/tmp/x/config.yaml")))
        .unwrap_err()
        .to_string();
    assert!(
        e.starts_with("the config file /tmp/x/config.yaml is inside /tmp"),
        "{e}"
    );
}

#[test]
fn nameservers_skip_the_stub_and_comments() {
    use std::net::SocketAddr;
    let stub: SocketAddr = "127.0.0.153:53".parse().unwrap();
    let got = nameservers(
        "# x\nnameserver 127.0.0.153\nnameserver 10.0.0.2\nsearch a\nnameserver fe80::1%eth0\n",
        stub,
    );
    assert_eq!(
        got,
        vec![
            "10.0.0.2:53".parse::<SocketAddr>().unwrap(),
            "[fe80::1]:53".parse().unwrap()
        ]
    );
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
