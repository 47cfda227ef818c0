//! A policy's `env:` (issue 26's environment rules, policy level): the
//! shell an SDK spawns, and everything it starts, begin without the
//! variables `deny` names (or, with `allow`, with only those it names),
//! with `inject`'s set; the wrap-init event names what was removed and
//! injected, never a value. As root and as nobody, on the real kernel, the
//! SDK-style daemon not a child of the server.

// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

use agentsh_tests::sandbox::{Sandbox, AGENT_DEFAULT, AGENT_OBSERVE, AGENT_STRICT, NOBODY};
use agentsh_tests::sdk::Spawn;
use agentsh_tests::server::{bin, require_root};

const DENY: &str = "default: allow\nenv:\n  deny: [\"*_TOKEN\", \"AWS_*\"]\n  inject: {PIP_INDEX_URL: \"https://pypi.internal/simple\"}\n";
const ALLOW: &str =
    "default: allow\nenv:\n  allow: [PATH, HOME, KEEP_*]\n  inject: {LANG: C.UTF-8}\n";

fn secrets(s: Spawn) -> Spawn {
    s.env("SECRET_TOKEN", "sk-live-123")
        .env("AWS_SECRET_ACCESS_KEY", "aws-secret-456")
        .env("KEEP_ME", "kept")
        .env("PIP_INDEX_URL", "https://evil.example/simple")
}

fn scenario(uid: Option<u32>) {
    let script = "echo \"[$SECRET_TOKEN][$AWS_SECRET_ACCESS_KEY][$KEEP_ME][$PIP_INDEX_URL]\"; \
                  sh -c 'echo \"nested[$SECRET_TOKEN]\"'";
    let mut s = Sandbox::new(DENY, uid);
    let f = s.spawn(&secrets(Spawn::argv(&["sh", "-c", script])));
    assert_eq!(
        f.stdout, "[][][kept][https://pypi.internal/simple]\nnested[]\n",
        "{f:?}"
    );
    let init = s
        .events()
        .into_iter()
        .rev()
        .find(|e| e["type"] == "wrap_init")
        .expect("a wrap_init event");
    let removed: Vec<&str> = init["env_removed"]
        .as_array()
        .map(|a| a.iter().filter_map(|v| v.as_str()).collect())
        .unwrap_or_default();
    assert!(
        removed.contains(&"SECRET_TOKEN") && removed.contains(&"AWS_SECRET_ACCESS_KEY"),
        "{init}"
    );
    assert_eq!(
        init["env_injected"],
        serde_json::json!(["PIP_INDEX_URL"]),
        "{init}"
    );
    let text = init.to_string();
    assert!(
        !text.contains("sk-live-123") && !text.contains("aws-secret-456"),
        "a value in the event: {text}"
    );
    // An allow-list: only what it names (and what is injected).
    let mut s = Sandbox::new(ALLOW, uid);
    let f = s.spawn(&secrets(Spawn::argv(&[
        "sh",
        "-c",
        "env | cut -d= -f1 | sort | tr '\\n' ' '",
    ])));
    let names: Vec<&str> = f.stdout.split_whitespace().collect();
    assert!(
        names.contains(&"KEEP_ME") && names.contains(&"LANG") && names.contains(&"PATH"),
        "{f:?}"
    );
    for gone in ["SECRET_TOKEN", "AWS_SECRET_ACCESS_KEY", "PIP_INDEX_URL"] {
        assert!(
            !names.contains(&gone),
            "{gone} passed the allow-list: {f:?}"
        );
    }
}

#[test]
fn env_rules_shape_the_shells_environment_as_root() {
    if !require_root("env_rules_shape_the_shells_environment_as_root") {
        return;
    }
    scenario(None);
}

#[test]
fn env_rules_shape_the_shells_environment_as_nobody() {
    if !require_root("env_rules_shape_the_shells_environment_as_nobody") {
        return;
    }
    scenario(Some(NOBODY));
}

/// Injecting a loader variable is refused at load, naming the line.
#[test]
fn injecting_a_loader_variable_is_a_policy_error() {
    let dir = agentsh_tests::server::TempDir::new("env-policy");
    let f = dir.path().join("p.yaml");
    std::fs::write(
        &f,
        "default: allow\nenv:\n  inject:\n    LD_PRELOAD: /tmp/x.so\n",
    )
    .unwrap();
    let o = std::process::Command::new(bin("agentsh"))
        .args(["policy", "check"])
        .arg(&f)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains(":3:") && err.contains("LD_PRELOAD") && err.contains("dynamic loader"),
        "{err}"
    );
}

/// The shipped policies keep secrets out of the tree with nothing
/// configured (issue 41): an SDK's `sh -c` given the usual credential
/// variables starts without them, and so does a nested shell; what is not a
/// secret (and the region names `keep` passes) arrives; the wrap_init event
/// names what was removed, never a value.
#[test]
fn the_shipped_policies_keep_secrets_out_of_the_tree() {
    if !require_root("the_shipped_policies_keep_secrets_out_of_the_tree") {
        return;
    }
    // Issue 61: the last 14 are those the earlier globs missed, by name
    // (a lower-case one among them) and by value (a URL with a password).
    const SECRETS: [(&str, &str); 20] = [
        ("SECRET_TOKEN", "sk-live-123"),
        ("AWS_SECRET_ACCESS_KEY", "aws-secret-456"),
        ("GITHUB_TOKEN", "ghp_789"),
        ("OPENAI_API_KEY", "sk-openai"),
        ("DB_PASSWORD", "hunter2"),
        ("SSH_AUTH_SOCK", "/tmp/ssh-x/agent.1"),
        ("NPM_CONFIG__AUTH", "bnBtOnNlY3JldA"),
        ("NPM_CONFIG__AUTHTOKEN", "npm_authtok1"),
        ("NGROK_AUTHTOKEN", "ngrok-tok-2"),
        ("MYSQL_PWD", "mysqlpw-3"),
        ("DOCKER_AUTH_CONFIG", "docker-auth-4"),
        ("OPENAI_APIKEY", "sk-apikey-5"),
        (
            "SLACK_WEBHOOK_URL",
            "https://hooks.slack.com/services/T0/B0/webhook6",
        ),
        ("TF_VAR_db_password", "tfpw-7"),
        ("REDIS_URL", "redis://:redispw8@cache:6379/0"),
        ("MONGODB_URI", "mongodb://app:mongopw9@db1,db2/app"),
        ("DB_URL", "postgres://u:dbpw10@db/x"),
        ("PIP_INDEX_URL", "https://u:piptok11@pypi.internal/simple"),
        ("HTTPS_PROXY", "http://pu:proxypw12@proxy:3128"),
        ("CACHE_SERVERS", "a:1 redis://:cachepw13@c2:6379"),
    ];
    let script = "env | sort; echo nested; sh -c 'env | sort'";
    for (policy, uid) in [
        (AGENT_DEFAULT, None),
        (AGENT_DEFAULT, Some(NOBODY)),
        (AGENT_STRICT, Some(NOBODY)),
        (AGENT_OBSERVE, None),
    ] {
        let mut s = Sandbox::new(policy, uid);
        let mut spawn = Spawn::argv(&["sh", "-c", script])
            .env("AWS_REGION", "eu-west-1")
            .env("PLAIN_SETTING", "kept");
        for (k, v) in SECRETS {
            spawn = spawn.env(k, v);
        }
        let f = s.spawn(&spawn);
        assert_eq!(f.code, Some(0), "{f:?}");
        let name = policy
            .lines()
            .find(|l| l.starts_with("name:"))
            .unwrap_or("");
        for (k, v) in SECRETS {
            assert!(
                !f.stdout.contains(k) && !f.stdout.contains(v),
                "{name} {uid:?}: {k} reached the tree: {}",
                f.stdout
            );
        }
        assert_eq!(
            f.stdout.matches("AWS_REGION=eu-west-1").count(),
            2,
            "{name} {uid:?}: {}",
            f.stdout
        );
        assert_eq!(
            f.stdout.matches("PLAIN_SETTING=kept").count(),
            2,
            "{}",
            f.stdout
        );
        let init = s
            .events()
            .into_iter()
            .rev()
            .find(|e| e["type"] == "wrap_init")
            .expect("a wrap_init event");
        let text = init.to_string();
        for (k, v) in SECRETS {
            assert!(text.contains(k), "{name}: {k} not named as removed: {init}");
            assert!(!text.contains(v), "{name}: a value in the event: {init}");
        }
    }
}
