//! The policy a standalone `agentsh wrap` runs: the one named (a file, a
//! file in the policies directory, or a shipped one), with `--allow-host`'s
//! egress rule (after the policy's leading deny rules, so a name that
//! resolves into cloud metadata stays refused) and `--keep-env`'s names
//! added to `env.keep` (passed to the agent whatever the policy's `env.deny`
//! says: the agent's own model API key), and `read_only_files` (the places
//! an agent would plant code that runs later: [`READ_ONLY_DEFAULT`] where
//! the policy says nothing of them), minus `--writable`'s.
//!
//! Failure modes: a host or name that is not one, a policy that cannot be
//! read or parsed, `--allow-host` on a policy without `egress`: an error
//! naming the option and the policy (wrap exits 2).

use std::path::PathBuf;

/// `--allow-host` or `--keep-env` cannot be added to the policy.
#[derive(Debug, thiserror::Error)]
pub enum DeriveError {
    #[error("--allow-host {host:?}: {source}")]
    Host {
        host: String,
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    #[error(
        "--keep-env {0:?}: not a variable name (letters, digits and '_'; '*' for any run of them)"
    )]
    Name(String),
    #[error("policy {name}: {source}")]
    Read {
        name: String,
        source: std::io::Error,
    },
    #[error("policy {0:?}: no such policy")]
    NoSuchPolicy(String),
    #[error("policy {name}: {source}")]
    Yaml {
        name: String,
        source: serde_yaml_ng::Error,
    },
    #[error(
        "--allow-host: policy {0} has no egress section, so it judges no destination (every \
         one is allowed as far as its network_rules' ports go)"
    )]
    NoEgress(String),
    #[error("policy {0}: egress.rules is not a list")]
    RulesNotList(String),
    #[error("policy {0}: env is not a mapping, or env.keep not a list")]
    EnvNotMapping(String),
    #[error("{0}")]
    Write(#[source] serde_yaml_ng::Error),
}

/// What wrap keeps read-only when the policy says nothing of it
/// (`read_only_files`): the places an agent would plant code that runs
/// later, outside any tree (the next terminal, login, commit, boot), and
/// the user's own bin directories, which come before the system's on PATH.
pub const READ_ONLY_DEFAULT: &[&str] = &[
    "~/.bashrc",
    "~/.bash_profile",
    "~/.bash_login",
    "~/.bash_logout",
    "~/.profile",
    "~/.zshrc",
    "~/.zprofile",
    "~/.zshenv",
    "~/.zlogin",
    "~/.config/fish",
    "~/.config/autostart",
    "~/.config/systemd",
    "~/.local/share/systemd",
    "~/.config/environment.d",
    "~/.gitconfig",
    "~/.config/git",
    "~/.ssh",
    "~/.local/bin",
    "~/bin",
    "${WORKSPACE}/.git/hooks",
    "${WORKSPACE}/.git/config",
    // Sourced or run by the shells, editors and tools people start later
    // (issue 61): Debian's and Ubuntu's .bashrc source ~/.bash_aliases;
    // a `.pth` or usercustomize in the user site runs at every python.
    "~/.bash_aliases",
    "~/.pam_environment",
    "~/.xprofile",
    "~/.xsessionrc",
    "~/.vimrc",
    "~/.config/nvim",
    "~/.tmux.conf",
    "~/.config/tmux",
    "~/.cargo/config.toml",
    "~/.cargo/config",
    "~/.ipython/profile_default/startup",
    "~/.config/pip",
    "~/.pip",
    "~/.local/lib/python3.8/site-packages",
    "~/.local/lib/python3.9/site-packages",
    "~/.local/lib/python3.10/site-packages",
    "~/.local/lib/python3.11/site-packages",
    "~/.local/lib/python3.12/site-packages",
    "~/.local/lib/python3.13/site-packages",
    "~/.local/lib/python3.14/site-packages",
];

/// Credential stores of the agents wrap runs (`credential_files.hide` in
/// the shipped policies, for SDK sandboxes, where the agent runs outside
/// the tree): under wrap the agent is in the tree and reads its own, so
/// wrap gives them back.
pub const AGENTS_OWN_STORES: &[&str] = &["~/.claude/.credentials.json", "~/.codex/auth.json"];

/// The command rule wrap puts first: programs that schedule jobs the
/// system runs later, outside any tree (`--writable crontab` gives them
/// back).
pub const SCHEDULED_JOBS_RULE: &str = "wrap-scheduled-jobs";
/// What `SCHEDULED_JOBS_RULE` names.
pub const SCHEDULERS: &[&str] = &["crontab", "at", "batch"];
/// The `--writable` entry that gives the schedulers back.
pub const SCHEDULERS_BACK: &str = "crontab";

/// `--writable` entries in the form `READ_ONLY_DEFAULT` lists them: a path
/// under `home` becomes `~/...`, one under `workspace` `${WORKSPACE}/...`.
pub fn writable_entries(given: &[String], home: Option<&str>, workspace: &str) -> Vec<String> {
    let under = |p: &str, base: &str, to: &str| {
        let base = base.trim_end_matches('/');
        p.strip_prefix(base)
            .filter(|r| r.starts_with('/'))
            .map(|r| format!("{to}{r}"))
    };
    given
        .iter()
        .map(|g| {
            home.and_then(|h| under(g, h, "~"))
                .or_else(|| under(g, workspace, "${WORKSPACE}"))
                .unwrap_or_else(|| g.clone())
        })
        .collect()
}

/// The directories of `path` (a `PATH` value) in `home` that come before
/// the first one outside it (the system's): a program planted there runs
/// instead of the system's. As `~/...` entries.
pub fn path_dirs_in_home(path: &str, home: &str) -> Vec<String> {
    let home = home.trim_end_matches('/');
    let mut out = Vec::new();
    for d in path.split(':').filter(|d| !d.is_empty()) {
        let Some(rel) = d.strip_prefix(home).filter(|r| r.starts_with('/')) else {
            break;
        };
        let entry = format!("~{}", rel.trim_end_matches('/'));
        if !out.contains(&entry) {
            out.push(entry);
        }
    }
    out
}

/// The name of the egress rule `--allow-host` adds.
pub const ALLOW_HOST_RULE: &str = "wrap-allow-host";

/// The policy `name_or_path` with `hosts` allowed on 443 and `keep` kept
/// (see the module doc), as YAML.
///
/// # Errors
/// See [`DeriveError`].
/// And `read_only_files` as wrap keeps them: where the policy has no such
/// section, [`READ_ONLY_DEFAULT`] minus `writable` (entries as listed
/// there); where it has one, minus `writable` too.
pub fn derived_with(
    name_or_path: &str,
    hosts: &[String],
    keep: &[String],
    writable: &[String],
    deny_env: &[String],
    path_dirs: &[String],
) -> Result<String, DeriveError> {
    use serde_yaml_ng::{Mapping, Value};
    check_options(hosts, keep)?;
    let name = || name_or_path.to_string();
    let text = read(name_or_path)?;
    let mut doc: Value = serde_yaml_ng::from_str(&text).map_err(|source| DeriveError::Yaml {
        name: name(),
        source,
    })?;
    let key = |k: &str| Value::String(k.into());
    if !hosts.is_empty() {
        let Some(egress) = doc.get_mut("egress").and_then(Value::as_mapping_mut) else {
            return Err(DeriveError::NoEgress(name()));
        };
        let rules = egress
            .entry(key("rules"))
            .or_insert_with(|| Value::Sequence(Vec::new()));
        let Some(rules) = rules.as_sequence_mut() else {
            return Err(DeriveError::RulesNotList(name()));
        };
        let at = rules
            .iter()
            .take_while(|r| r.get("decision").and_then(Value::as_str) == Some("deny"))
            .count();
        let mut rule = Mapping::new();
        rule.insert(key("name"), key(ALLOW_HOST_RULE));
        rule.insert(
            key("hosts"),
            Value::Sequence(hosts.iter().map(|h| key(h)).collect()),
        );
        rule.insert(
            key("ports"),
            Value::Sequence(vec![Value::Number(443.into())]),
        );
        rule.insert(key("decision"), key("allow"));
        rules.insert(at, Value::Mapping(rule));
    }
    // `--keep-env`'s names kept; `--secret NAME=env:VAR`'s VARs removed
    // (the server holds them, the agent never).
    env_list(&mut doc, "keep", keep).ok_or_else(|| DeriveError::EnvNotMapping(name()))?;
    env_list(&mut doc, "deny", deny_env).ok_or_else(|| DeriveError::EnvNotMapping(name()))?;
    if !writable.iter().any(|w| w == SCHEDULERS_BACK) {
        deny_schedulers(&mut doc).ok_or_else(|| DeriveError::EnvNotMapping(name()))?;
    }
    keep_read_only(&mut doc, writable, path_dirs)
        .ok_or_else(|| DeriveError::EnvNotMapping(name()))?;
    if let Some(hide) = doc
        .get_mut("credential_files")
        .and_then(|c| c.get_mut("hide"))
        .and_then(Value::as_sequence_mut)
    {
        hide.retain(|p| !p.as_str().is_some_and(|p| AGENTS_OWN_STORES.contains(&p)));
    }
    serde_yaml_ng::to_string(&doc).map_err(DeriveError::Write)
}

/// `--allow-host`'s hosts and `--keep-env`'s names, checked.
fn check_options(hosts: &[String], keep: &[String]) -> Result<(), DeriveError> {
    for h in hosts {
        crate::policy::egress::parse_host(h).map_err(|e| DeriveError::Host {
            host: h.clone(),
            source: e.into(),
        })?;
    }
    for k in keep {
        if k.is_empty()
            || !k
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'*')
        {
            return Err(DeriveError::Name(k.clone()));
        }
    }
    Ok(())
}

/// `names` added to the policy's `env.<list>` (made where missing);
/// `None`: `env` or the list is not what a policy's is.
fn env_list(doc: &mut serde_yaml_ng::Value, list: &str, names: &[String]) -> Option<()> {
    use serde_yaml_ng::{Mapping, Value};
    if names.is_empty() {
        return Some(());
    }
    let key = |k: &str| Value::String(k.into());
    let env = doc
        .as_mapping_mut()?
        .entry(key("env"))
        .or_insert_with(|| Value::Mapping(Mapping::new()))
        .as_mapping_mut()?;
    let l = env
        .entry(key(list))
        .or_insert_with(|| Value::Sequence(Vec::new()))
        .as_sequence_mut()?;
    l.extend(names.iter().map(|k| key(k)));
    Some(())
}

/// [`SCHEDULED_JOBS_RULE`] as the policy's first command rule; `None`: the
/// policy is not a mapping, or its `command_rules` not a list.
fn deny_schedulers(doc: &mut serde_yaml_ng::Value) -> Option<()> {
    use serde_yaml_ng::{Mapping, Value};
    let key = |k: &str| Value::String(k.into());
    let rules = doc
        .as_mapping_mut()?
        .entry(key("command_rules"))
        .or_insert_with(|| Value::Sequence(Vec::new()))
        .as_sequence_mut()?;
    let mut rule = Mapping::new();
    rule.insert(key("name"), key(SCHEDULED_JOBS_RULE));
    rule.insert(
        key("commands"),
        Value::Sequence(SCHEDULERS.iter().map(|c| key(c)).collect()),
    );
    rule.insert(key("decision"), key("deny"));
    rule.insert(
        key("message"),
        key("a scheduled job runs later, outside agentsh wrap (give it back with --writable crontab)"),
    );
    rules.insert(0, Value::Mapping(rule));
    Some(())
}

/// `read_only_files` as wrap keeps them (see [`derived_with`]); `None`: the
/// policy is not a mapping.
fn keep_read_only(
    doc: &mut serde_yaml_ng::Value,
    writable: &[String],
    path_dirs: &[String],
) -> Option<()> {
    use serde_yaml_ng::{Mapping, Value};
    let key = |k: &str| Value::String(k.into());
    let ro = doc
        .as_mapping_mut()?
        .entry(key("read_only_files"))
        .or_insert_with(|| {
            let mut m = Mapping::new();
            let mut paths: Vec<Value> = READ_ONLY_DEFAULT.iter().map(|p| key(p)).collect();
            for d in path_dirs {
                if !READ_ONLY_DEFAULT.contains(&d.as_str()) {
                    paths.push(key(d));
                }
            }
            m.insert(key("paths"), Value::Sequence(paths));
            Value::Mapping(m)
        });
    if let Some(paths) = ro
        .as_mapping_mut()
        .and_then(|m| m.get_mut("paths"))
        .and_then(Value::as_sequence_mut)
    {
        paths.retain(|p| !p.as_str().is_some_and(|p| writable.iter().any(|w| w == p)));
    }
    Some(())
}

/// The policy's text, found as the server would find it.
fn read(name_or_path: &str) -> Result<String, DeriveError> {
    let name = || name_or_path.to_string();
    if name_or_path.contains('/') || name_or_path.ends_with(".yaml") {
        return std::fs::read_to_string(name_or_path).map_err(|source| DeriveError::Read {
            name: name(),
            source,
        });
    }
    let dir = crate::config::Config::load(None).map_or_else(
        |_| PathBuf::from("/etc/agentsh/policies"),
        |c| c.policies_dir,
    );
    match std::fs::read_to_string(dir.join(format!("{name_or_path}.yaml"))) {
        Ok(t) => Ok(t),
        Err(_) => crate::policy::shipped(name_or_path)
            .map(str::to_string)
            .ok_or_else(|| DeriveError::NoSuchPolicy(name())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with_hosts(p: &str, hosts: &[String]) -> Result<String, DeriveError> {
        derived_with(p, hosts, &[], &[], &[], &[])
    }

    #[test]
    fn path_dirs_ahead_of_the_systems_are_kept_read_only() {
        let dirs = path_dirs_in_home(
            "/home/d/.cargo/bin:/home/d/go/bin/:/home/d/.local/bin:/usr/bin:/home/d/late/bin",
            "/home/d",
        );
        assert_eq!(dirs, ["~/.cargo/bin", "~/go/bin", "~/.local/bin"]);
        let text =
            derived_with("agent-default", &[], &[], &["~/go/bin".into()], &[], &dirs).unwrap();
        let p = crate::policy::Policy::from_yaml(&text, "t").unwrap();
        let paths = &p.read_only_files().paths;
        assert!(paths.iter().any(|x| x == "~/.cargo/bin"), "{paths:?}");
        assert!(
            !paths.iter().any(|x| x == "~/go/bin"),
            "--writable gives it back"
        );
        assert_eq!(paths.iter().filter(|x| *x == "~/.local/bin").count(), 1);
    }

    #[test]
    fn schedulers_are_denied_first_unless_given_back() {
        let text = derived_with("agent-default", &[], &[], &[], &[], &[]).unwrap();
        // The agent wrap runs reads its own credentials: given back.
        for own in AGENTS_OWN_STORES {
            assert!(!text.contains(own), "{own} hidden under wrap");
        }
        assert!(text.contains("~/.s3cfg"), "{text}");
        crate::policy::Policy::from_yaml(&text, "t").unwrap();
        let doc: serde_yaml_ng::Value = serde_yaml_ng::from_str(&text).unwrap();
        let first = &doc["command_rules"][0];
        assert_eq!(
            first["name"].as_str(),
            Some(SCHEDULED_JOBS_RULE),
            "{first:?}"
        );
        assert_eq!(first["decision"].as_str(), Some("deny"));
        let back = derived_with("agent-default", &[], &[], &["crontab".into()], &[], &[]).unwrap();
        assert!(!back.contains(SCHEDULED_JOBS_RULE));
    }

    #[test]
    fn wrap_keeps_the_persistence_places_read_only_but_writable_gives_one_back() {
        let text =
            derived_with("agent-default", &[], &[], &["~/.bashrc".into()], &[], &[]).unwrap();
        let p = crate::policy::Policy::from_yaml(&text, "t").unwrap();
        let paths = &p.read_only_files().paths;
        assert!(paths.iter().any(|x| x == "~/.profile"), "{paths:?}");
        assert!(paths.iter().any(|x| x == "${WORKSPACE}/.git/hooks"));
        assert!(!paths.iter().any(|x| x == "~/.bashrc"));
        assert_eq!(
            writable_entries(
                &[
                    "/home/d/.bashrc".into(),
                    "/w/p/.git/config".into(),
                    "/etc/x".into()
                ],
                Some("/home/d"),
                "/w/p"
            ),
            vec!["~/.bashrc", "${WORKSPACE}/.git/config", "/etc/x"]
        );
    }

    #[test]
    fn allow_host_puts_a_rule_after_the_deny_rules() {
        let text = with_hosts("agent-default", &["api.anthropic.com".into()]).unwrap();
        let p = crate::policy::Policy::from_yaml(&text, "t").unwrap();
        let e = p.egress().unwrap();
        assert_eq!(e.rules[0].name, "no-cloud-metadata");
        assert_eq!(e.rules[1].name, ALLOW_HOST_RULE);
        assert!(e.could_allow_name("api.anthropic.com"));
        assert!(!e.could_allow_name("s3cr3t.attacker.example"));
        let names = ["api.anthropic.com".to_string()];
        let v = crate::policy::egress::judge_destination(
            e,
            &crate::policy::egress::Destination {
                ip: "203.0.113.9".parse().unwrap(),
                port: 443,
                protocol: crate::policy::egress::Protocol::Tcp,
                names: &names,
            },
        );
        assert_eq!(
            (v.decision, v.rule.as_str()),
            (crate::policy::Decision::Allow, ALLOW_HOST_RULE)
        );
        // Metadata stays refused whatever the name resolves to.
        let v = crate::policy::egress::judge_destination(
            e,
            &crate::policy::egress::Destination {
                ip: "169.254.169.254".parse().unwrap(),
                port: 443,
                protocol: crate::policy::egress::Protocol::Tcp,
                names: &names,
            },
        );
        assert_eq!(v.decision, crate::policy::Decision::Deny);
        assert!(with_hosts("agent-default", &["https://x/y".into()]).is_err());
    }

    #[test]
    fn keep_env_adds_to_the_policys_keep_list() {
        let text = derived_with(
            "agent-default",
            &[],
            &["OPENAI_API_KEY".into()],
            &[],
            &[],
            &[],
        )
        .unwrap();
        let p = crate::policy::Policy::from_yaml(&text, "t").unwrap();
        let env = p.env().unwrap();
        assert!(env.keeps(b"OPENAI_API_KEY"));
        assert!(!env.keeps(b"ANTHROPIC_API_KEY"));
        assert!(matches!(
            derived_with("agent-default", &[], &["A-B".into()], &[], &[], &[]),
            Err(DeriveError::Name(_))
        ));
    }
}
