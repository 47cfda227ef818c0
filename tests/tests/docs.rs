//! The docs checked against the code: every config and policy key, every
//! YAML and shim.conf example, every exit-126 hint's troubleshooting section,
//! and every command in a fenced `sh`/`bash`/`console` block of README.md and
//! docs/*.md (run against a test server or a temporary root, or listed with
//! the test that exercises it elsewhere).

// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

use agentsh_tests::ns::Namespace;
use agentsh_tests::server::{
    bin, require_root, server_base, with_private_marker_dir, TempDir, TestServer,
};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// Commands that cannot run harmlessly here, and where they are exercised.
const EXERCISED_ELSEWHERE: &[(&str, &str)] = &[
    (
        "agentsh policy generate --from default --base agent-default -o /etc/agentsh/policies/my-agent.yaml",
        "tests/tests/policy_generate.rs a_recorded_workload_becomes_an_allow_list_that_denies_only_what_is_new",
    ),
    (
        "agentsh policy test /etc/agentsh/policies/my-agent.yaml --events /var/log/agentsh/audit.jsonl",
        "tests/tests/policy_generate.rs a_recorded_workload_becomes_an_allow_list_that_denies_only_what_is_new",
    ),
    (
        "agentsh policy reload",
        "tests/tests/policy_reload.rs a_running_tree_is_judged_by_the_reloaded_policy_under_notify",
    ),
    ("./tests/run.sh", ".ci/run"),
    ("./tests/demo.sh", "tests/demo.sh"),
    ("./bench/run.sh", ".ci/run"),
    // docs/architecture.md: what tests/run.sh does, one test at a time.
    (
        "cargo build --workspace --all-targets && bash packaging/build-static.sh",
        "tests/run.sh",
    ),
    (
        "CI=true cargo test -p agentsh-tests --test exec_supervision -- --nocapture",
        "tests/run.sh",
    ),
    ("packaging/build-release.sh", "bench/run.sh"),
    (
        "packaging/deb/build.sh",
        "tests/tests/install_deb.rs deb_installs_supervises_sdk_shells_survives_a_dash_reinstall_and_uninstalls_exactly",
    ),
    (
        "apt-get install ./target/deb/agentsh_*.deb",
        "tests/tests/install_deb.rs deb_installs_supervises_sdk_shells_survives_a_dash_reinstall_and_uninstalls_exactly",
    ),
    (
        "systemctl enable --now agentsh",
        "tests/tests/install_deb.rs systemd_unit_as_installed_from_the_deb_passes_systemd_analyze_verify",
    ),
    (
        "apt-get remove agentsh",
        "tests/tests/install_deb.rs deb_installs_supervises_sdk_shells_survives_a_dash_reinstall_and_uninstalls_exactly",
    ),
    // docs/wrap.md's install without root, run as written by a user.
    (
        "tar -xzf agentsh-*.tar.gz",
        "tests/tests/wrap.rs agentsh_in_the_home_is_protected_without_splitting_the_home",
    ),
    (
        "./agentsh-*/install.sh --user",
        "tests/tests/wrap.rs agentsh_in_the_home_is_protected_without_splitting_the_home",
    ),
    // docs/sdk-cookbook.md's egress-at-layer-7 recipe, run as written.
    (
        "agentsh ca path",
        "tests/tests/cookbook.rs l7_recipe_trusts_agentshs_ca_and_holds_the_token",
    ),
    (
        "install -m 0644 /etc/agentsh/ca.pem /usr/local/share/ca-certificates/agentsh.crt",
        "tests/tests/cookbook.rs l7_recipe_trusts_agentshs_ca_and_holds_the_token",
    ),
    (
        "update-ca-certificates",
        "tests/tests/cookbook.rs l7_recipe_trusts_agentshs_ca_and_holds_the_token",
    ),
    (
        "install -d -m 0700 /etc/agentsh/secrets",
        "tests/tests/cookbook.rs l7_recipe_trusts_agentshs_ca_and_holds_the_token",
    ),
    (
        "umask 077 && printf '%s\\n' \"$GH_TOKEN\" > /etc/agentsh/secrets/gh",
        "tests/tests/cookbook.rs l7_recipe_trusts_agentshs_ca_and_holds_the_token",
    ),
];

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace root")
        .to_path_buf()
}

fn read(rel: &str) -> String {
    std::fs::read_to_string(repo().join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

/// README.md and docs/*.md, as (relative path, text).
fn doc_files() -> Vec<(String, String)> {
    let mut v = vec![("README.md".to_string(), read("README.md"))];
    let mut names: Vec<String> = std::fs::read_dir(repo().join("docs"))
        .expect("docs/")
        .filter_map(std::result::Result::ok)
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".md"))
        .collect();
    names.sort();
    for n in names {
        let rel = format!("docs/{n}");
        v.push((rel.clone(), read(&rel)));
    }
    v
}

struct Block {
    file: String,
    line: usize,
    lang: String,
    text: String,
}

fn blocks(file: &str, text: &str) -> Vec<Block> {
    let mut out = Vec::new();
    let mut cur: Option<Block> = None;
    for (i, l) in text.lines().enumerate() {
        if let Some(rest) = l.trim_start().strip_prefix("```") {
            match cur.take() {
                Some(b) => out.push(b),
                None => {
                    cur = Some(Block {
                        file: file.to_string(),
                        line: i + 1,
                        lang: rest.trim().to_string(),
                        text: String::new(),
                    });
                }
            }
        } else if let Some(b) = cur.as_mut() {
            b.text.push_str(l);
            b.text.push('\n');
        }
    }
    out
}

fn all_blocks() -> Vec<Block> {
    doc_files().iter().flat_map(|(f, t)| blocks(f, t)).collect()
}

/// GitHub's heading anchors: lowercase, punctuation other than `-` and `_`
/// dropped, spaces to `-`, duplicates numbered.
fn anchors(md: &str) -> BTreeSet<String> {
    let mut seen = BTreeSet::new();
    let mut in_code = false;
    for l in md.lines() {
        if l.trim_start().starts_with("```") {
            in_code = !in_code;
            continue;
        }
        if in_code || !l.starts_with('#') {
            continue;
        }
        let title = l.trim_start_matches('#').trim();
        let base: String = title
            .to_lowercase()
            .chars()
            .filter(|c| c.is_alphanumeric() || *c == ' ' || *c == '-' || *c == '_')
            .map(|c| if c == ' ' { '-' } else { c })
            .collect();
        let mut a = base.clone();
        let mut n = 1;
        while seen.contains(&a) {
            a = format!("{base}-{n}");
            n += 1;
        }
        seen.insert(a);
    }
    seen
}

const POINTER: &str = "docs/troubleshooting.md#";

/// Every `docs/troubleshooting.md#anchor` in `text`.
fn pointers(text: &str) -> Vec<String> {
    text.match_indices(POINTER)
        .map(|(i, _)| {
            text[i + POINTER.len()..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '-' || *c == '_')
                .collect::<String>()
        })
        .filter(|a| !a.is_empty())
        .collect()
}

/// A source file without its `#[cfg(test)]` module.
fn non_test_source(rel: &str) -> String {
    let s = read(rel);
    match s.find("#[cfg(test)]") {
        Some(i) => s[..i].to_string(),
        None => s,
    }
}

fn rust_sources(dir: &str) -> Vec<String> {
    let mut v = Vec::new();
    let mut stack = vec![repo().join(dir)];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).expect("read source dir").flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "rs") {
                let rel = p.strip_prefix(repo()).expect("in repo");
                v.push(rel.to_string_lossy().into_owned());
            }
        }
    }
    v.sort();
    v
}

/// The string literal starting at the first `"` at or after `from`.
fn literal_at(s: &str, from: usize) -> &str {
    let start = from + s[from..].find('"').expect("a literal") + 1;
    let mut end = start;
    let b = s.as_bytes();
    while end < b.len() && !(b[end] == b'"' && b[end - 1] != b'\\') {
        end += 1;
    }
    &s[start..end]
}

/// The `hint` constants' names and the anchors they hold (proto's single list).
fn hint_consts() -> Vec<(String, String)> {
    let s = read("proto/src/hint.rs");
    let mut v = Vec::new();
    for (i, _) in s.match_indices("pub const ") {
        let name: String = s[i + 10..]
            .chars()
            .take_while(|c| c.is_ascii_uppercase() || *c == '_')
            .collect();
        if name == "ALL" {
            continue;
        }
        let lit = literal_at(&s, i);
        v.push((name, lit.to_string()));
    }
    v
}

#[test]
fn every_hint_in_the_sources_names_a_troubleshooting_section_that_exists() {
    let trouble = anchors(&read("docs/troubleshooting.md"));
    // proto's list is the one place an anchor is written, and each one exists.
    let consts = hint_consts();
    assert!(consts.len() >= 7, "hint constants: {consts:?}");
    for (name, lit) in &consts {
        let a = pointers(lit);
        assert_eq!(a.len(), 1, "{name} = {lit:?}");
        assert!(
            trouble.contains(&a[0]),
            "hint::{name}: docs/troubleshooting.md has no section #{}; sections: {trouble:?}",
            a[0]
        );
    }
    for (_, lit) in &consts {
        assert!(
            agentsh_proto::hint::ALL.contains(&lit.as_str()),
            "hint::ALL misses {lit}"
        );
    }
    assert_eq!(agentsh_proto::hint::ALL.len(), consts.len());
    for dir in ["shim/src", "unixwrap/src", "server/src"] {
        for f in rust_sources(dir) {
            assert!(
                pointers(&non_test_source(&f)).is_empty(),
                "{f} writes a troubleshooting anchor itself; name it in proto/src/hint.rs"
            );
        }
    }
    // The shim: every line it prints starts "agentsh-shell-shim: ".
    let mut hints = Vec::new();
    for f in ["shim/src/lib.rs", "shim/src/decide.rs"] {
        let s = non_test_source(f);
        for (i, _) in s.match_indices("\"agentsh-shell-shim: ") {
            hints.push((f, literal_at(&s, i).to_string()));
        }
    }
    // unixwrap: every stderr line is one arm of `WrapError::hint`.
    let s = non_test_source("unixwrap/src/error.rs");
    let body = &s[s.find("pub fn hint(").expect("WrapError::hint")..];
    let body = &body[..body.find("\n    }\n").expect("end of hint")];
    for (i, _) in body.match_indices("format!(") {
        hints.push(("unixwrap/src/error.rs", literal_at(body, i).to_string()));
    }
    assert!(hints.len() >= 12, "hint literals found: {hints:#?}");
    for (f, h) in &hints {
        assert!(
            consts
                .iter()
                .any(|(name, _)| h.contains(&format!("{{{name}}}"))),
            "{f}: this hint names no troubleshooting section: {h:?}"
        );
    }
    // The examples in troubleshooting.md name existing sections too.
    for a in pointers(&read("docs/troubleshooting.md")) {
        assert!(
            trouble.contains(&a),
            "troubleshooting.md example names #{a}"
        );
    }
}

/// The one stderr line names a section that exists.
fn assert_line_names_a_section(what: &str, o: &Output, code: i32) {
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(code), "{what}: {err}");
    assert_eq!(err.lines().count(), 1, "{what}: {err}");
    let p = pointers(&err);
    assert_eq!(p.len(), 1, "{what}: no section named: {err}");
    let trouble = anchors(&read("docs/troubleshooting.md"));
    assert!(trouble.contains(&p[0]), "{what}: no section #{}", p[0]);
}

#[test]
fn printed_hints_name_a_section_that_exists() {
    let o = Command::new(bin("agentsh-unixwrap")).output().unwrap();
    assert_line_names_a_section("unixwrap without arguments", &o, 126);
    let o = Command::new(bin("agentsh-unixwrap"))
        .args(["--", "/bin/true"])
        .env_remove("AGENTSH_SECCOMP_CONFIG")
        .output()
        .unwrap();
    assert_line_names_a_section("unixwrap without its environment", &o, 126);
    if !Path::new("/usr/lib/agentsh/shells/sh").exists() {
        let o = Command::new(bin("agentsh-shell-shim"))
            .args(["-c", "true"])
            .output()
            .unwrap();
        assert_line_names_a_section("shim without a real shell", &o, 127);
    }
}

#[test]
fn refusals_in_a_namespace_name_a_section_that_exists() {
    if !require_root("refusals_in_a_namespace_name_a_section_that_exists") {
        return;
    }
    let ns = Namespace::new();
    ns.install_shim(false);
    ns.write_shim_conf("shim_install=yes\n", 0o644);
    let o = ns.run(&["/bin/sh", "-c", "echo must-not-run"], &[]);
    assert_line_names_a_section("invalid shim.conf", &o, 126);
    ns.configure("http://127.0.0.1:1", "on");
    let o = ns.run(&["/bin/sh", "-c", "echo must-not-run"], &[]);
    assert_line_names_a_section("shim_install=on, no server", &o, 126);
    ns.write_shim_conf("shim_install=on\nserver=http://127.0.0.1:1\n", 0o666);
    let o = ns.run(&["/bin/sh", "-c", "echo must-not-run"], &[]);
    let err = String::from_utf8_lossy(&o.stderr);
    let note = err.lines().next().unwrap_or("");
    assert!(note.contains("ignoring it"), "{err}");
    assert_eq!(pointers(note), ["shimconf-is-ignored"], "{err}");
}

/// Dotted keys of a YAML mapping written one key per line (the shipped config).
fn yaml_keys(text: &str) -> BTreeSet<String> {
    let mut path: Vec<(usize, String)> = Vec::new();
    let mut keys = BTreeSet::new();
    for l in text.lines() {
        let t = l.trim_start();
        if t.is_empty() || t.starts_with('#') {
            continue;
        }
        let indent = l.len() - t.len();
        let Some((k, v)) = t.split_once(':') else {
            continue;
        };
        while path.last().is_some_and(|(i, _)| *i >= indent) {
            path.pop();
        }
        let mut full: Vec<&str> = path.iter().map(|(_, k)| k.as_str()).collect();
        full.push(k);
        if v.trim().is_empty() {
            path.push((indent, k.to_string()));
        } else {
            keys.insert(full.join("."));
        }
    }
    keys
}

/// First-column keys of the Markdown table rows between two headings.
fn table_keys(md: &str, from_heading: &str, to_heading: &str) -> BTreeSet<String> {
    let start = md.find(from_heading).expect("section start");
    let end = md[start..].find(to_heading).map_or(md.len(), |i| start + i);
    md[start..end]
        .lines()
        .filter_map(|l| l.strip_prefix("| `"))
        .filter_map(|l| l.split_once('`').map(|(k, _)| k.to_string()))
        .collect()
}

#[test]
fn config_reference_matches_the_code() {
    let doc = read("docs/configuration.md");
    let documented = table_keys(&doc, "## Server: config.yaml", "### ");
    let from_help: BTreeSet<String> = agentsh::config::CONFIG_HELP
        .lines()
        .skip(1)
        .filter(|l| l.starts_with("  ") && !l.starts_with("   "))
        .filter_map(|l| l.split_whitespace().next().map(String::from))
        .collect();
    let from_embedded = yaml_keys(agentsh::config::EMBEDDED_CONFIG);
    assert_eq!(
        from_help, from_embedded,
        "CONFIG_HELP and the shipped config.yaml disagree"
    );
    assert_eq!(
        documented, from_help,
        "docs/configuration.md's table and the code disagree"
    );
    // Each documented key, with the default the doc gives, is accepted by the
    // server's own loader; a misspelt one is not.
    let help = agentsh::config::CONFIG_HELP;
    for key in &documented {
        let line = help
            .lines()
            .find(|l| l.split_whitespace().next() == Some(key))
            .expect("key in help");
        let default = line.split_whitespace().nth(1).expect("a default");
        let row = doc
            .lines()
            .find(|l| l.starts_with(&format!("| `{key}` |")))
            .expect("row");
        let doc_default = row.split('|').nth(2).expect("default column").trim();
        assert_eq!(
            doc_default.trim_matches(['`', '"']),
            default.trim_matches('"'),
            "default of {key}"
        );
        let parts: Vec<&str> = key.split('.').collect();
        let mut yaml = String::new();
        for (i, p) in parts.iter().enumerate() {
            yaml += &"  ".repeat(i);
            yaml += p;
            yaml += ":";
            yaml += if i + 1 == parts.len() { " " } else { "\n" };
        }
        yaml += default;
        agentsh::config::Config::from_yaml(&yaml, key)
            .unwrap_or_else(|e| panic!("{key}: {e}\n{yaml}"));
        let bad = yaml.replacen(parts[parts.len() - 1], "misspelt_key", 1);
        assert!(agentsh::config::Config::from_yaml(&bad, key).is_err());
    }
    // Every config example in the docs loads.
    let mut n = 0;
    for b in all_blocks() {
        if b.lang == "yaml" && b.text.starts_with("# config.yaml") {
            let c = agentsh::config::Config::from_yaml(&b.text, &b.file)
                .unwrap_or_else(|e| panic!("{}:{}: {e}", b.file, b.line));
            // No session's workspace lies beneath another's: the other
            // session's trees could write it (issue 45).
            let mut ws: Vec<String> = c
                .sessions
                .values()
                .filter_map(|s| s.workspace.clone())
                .collect();
            ws.push(c.workspace.clone());
            ws.retain(|w| !w.is_empty());
            for a in &ws {
                for b2 in &ws {
                    assert!(
                        a == b2 || !b2.starts_with(&format!("{}/", a.trim_end_matches('/'))),
                        "{}:{}: workspace {b2} lies beneath {a}",
                        b.file,
                        b.line
                    );
                }
            }
            n += 1;
        }
    }
    assert!(n >= 5, "config examples found: {n}");
}

#[test]
fn shim_conf_reference_matches_the_code() {
    let doc = read("docs/configuration.md");
    let documented = table_keys(&doc, "## shim.conf", "**Invalid file.**");
    // The parser names the keys it accepts in its error.
    let e = agentsh_proto::shimconf::parse("no_such_key=1").unwrap_err();
    let accepted: BTreeSet<String> = e
        .message
        .rsplit("accepted keys: ")
        .next()
        .expect("accepted keys")
        .split(", ")
        .map(String::from)
        .collect();
    assert_eq!(documented, accepted);
    for key in &documented {
        let row = doc
            .lines()
            .find(|l| l.starts_with(&format!("| `{key}` |")))
            .expect("row");
        let default = row.split('|').nth(3).expect("default").trim();
        if default == "—" {
            // No value: without the line the built-in behaviour applies.
            continue;
        }
        let conf = agentsh_proto::shimconf::parse(&format!("{key}={}", default.trim_matches('`')))
            .unwrap_or_else(|e| panic!("{key}: {e}"));
        assert_eq!(conf, agentsh_proto::shimconf::ShimConf::default(), "{key}");
    }
    let mode_row = doc.lines().find(|l| l.starts_with("| `shim_install` |"));
    for v in ["auto", "on", "off"] {
        assert!(mode_row.expect("row").contains(&format!("`{v}`")));
        agentsh_proto::shimconf::parse(&format!("shim_install={v}")).unwrap();
    }
    let mut n = 0;
    for b in all_blocks() {
        if b.lang == "ini" && b.text.starts_with("# /etc/agentsh/shim.conf") {
            agentsh_proto::shimconf::parse(&b.text)
                .unwrap_or_else(|e| panic!("{}:{}: {e}", b.file, b.line));
            n += 1;
        }
    }
    assert!(n >= 1);
    // The shipped file is the documented default.
    assert_eq!(
        agentsh_proto::shimconf::parse(&read("etc/agentsh/shim.conf")).unwrap(),
        agentsh_proto::shimconf::ShimConf::default()
    );
}

/// Field names of `pub struct NAME { pub field: ... }` and the snake_case
/// variants of `pub enum NAME { Variant, ... }` in schema.rs.
fn schema_names(src: &str, item: &str) -> Vec<String> {
    let start = src
        .find(&format!(" {item} {{"))
        .unwrap_or_else(|| panic!("{item} in schema.rs"));
    let body = &src[start..start + src[start..].find("\n}").expect("end")];
    let mut v = Vec::new();
    for l in body.lines().skip(1) {
        let t = l.trim();
        if t.starts_with("//") || t.starts_with("#[") || t.is_empty() {
            continue;
        }
        if let Some(f) = t.strip_prefix("pub ") {
            if let Some((name, _)) = f.split_once(':') {
                v.push(name.to_string());
            }
        } else if let Some(var) = t.strip_suffix(',') {
            if var.chars().all(|c| c.is_ascii_alphanumeric()) {
                let mut s = String::new();
                for (i, c) in var.chars().enumerate() {
                    if c.is_ascii_uppercase() && i > 0 {
                        s.push('_');
                    }
                    s.push(c.to_ascii_lowercase());
                }
                v.push(s);
            }
        }
    }
    assert!(!v.is_empty(), "nothing found in {item}");
    v
}

#[test]
fn policy_reference_names_every_schema_key_and_its_examples_pass_policy_check() {
    let doc = read("docs/policy.md");
    // The policy file's types: schema.rs, and the rooms it shares with.
    let src = ["schema.rs", "decision.rs", "egress.rs", "http.rs"]
        .map(|f| read(&format!("server/src/policy/{f}")))
        .join("\n");
    for item in [
        "EgressDoc",
        "EgressRuleDoc",
        "HttpDoc",
        "HttpRuleDoc",
        "InjectDoc",
        "DnsMode",
        "Protocol",
        "PolicyDoc",
        "CommandRuleDoc",
        "SyscallsDoc",
        "DepthRangeDoc",
        "FileRule",
        "NetworkRule",
        "Decision",
        "DepthKind",
        "FileOperation",
        "NetworkDirection",
    ] {
        for name in schema_names(&src, item) {
            assert!(
                doc.contains(&format!("`{name}`")) || doc.contains(&format!("{name}:")),
                "docs/policy.md does not name `{name}` ({item})"
            );
        }
    }
    // Every policy example in any doc passes `agentsh policy check`; a
    // fragment (no `default:`) is checked under `default: allow`.
    let tmp = TempDir::new("docs-policy");
    let mut n = 0;
    for b in all_blocks() {
        if b.lang != "yaml" || b.text.starts_with("# config.yaml") {
            continue;
        }
        let text = if b.text.lines().any(|l| l.starts_with("default:")) {
            b.text.clone()
        } else {
            format!("default: allow\n{}", b.text)
        };
        let f = tmp.path().join(format!("p{n}.yaml"));
        std::fs::write(&f, text).unwrap();
        let o = Command::new(bin("agentsh"))
            .args(["policy", "check"])
            .arg(&f)
            .output()
            .unwrap();
        assert!(
            o.status.success(),
            "{}:{}: {}",
            b.file,
            b.line,
            String::from_utf8_lossy(&o.stderr)
        );
        n += 1;
    }
    assert!(n >= 4, "policy examples found: {n}");
}

/// Shell commands of the fenced sh/bash/console blocks, as (file, line, command).
fn doc_commands() -> Vec<(String, usize, String)> {
    let mut v = Vec::new();
    for b in all_blocks() {
        let console = b.lang == "console";
        if !(b.lang == "sh" || b.lang == "bash" || console) {
            continue;
        }
        let mut pending = String::new();
        for (i, raw) in b.text.lines().enumerate() {
            let mut l = raw.trim().to_string();
            if console {
                match l.strip_prefix("$ ").or_else(|| l.strip_prefix("# ")) {
                    Some(c) => l = c.to_string(),
                    None if pending.is_empty() => continue,
                    None => {}
                }
            }
            if let Some(i) = l.find(" #") {
                l.truncate(i);
            }
            if l.starts_with('#') {
                continue;
            }
            let cont = l.ends_with('\\');
            pending += l.trim_end_matches('\\').trim();
            if cont {
                pending.push(' ');
                continue;
            }
            let c = std::mem::take(&mut pending).trim().to_string();
            if !c.is_empty() {
                v.push((b.file.clone(), b.line + i + 1, c));
            }
        }
    }
    v
}

/// A synopsis line (`agentsh shim install [--bash] | uninstall | status`)
/// as the concrete commands it stands for; placeholders get sample values.
fn expand(cmd: &str) -> Vec<String> {
    let alts: Vec<&str> = cmd.split(" | ").collect();
    let prefix: Vec<&str> = alts[0].split_whitespace().take(2).collect();
    let mut lines = vec![alts[0].to_string()];
    for a in &alts[1..] {
        lines.push(format!("{} {a}", prefix.join(" ")));
    }
    let mut out = Vec::new();
    for l in lines {
        let mut variants = vec![String::new()];
        let mut rest = l.as_str();
        while let Some(open) = rest.find('[') {
            let close = rest[open..].find(']').expect("closing ]") + open;
            let (before, opt) = (&rest[..open], &rest[open + 1..close]);
            variants = variants
                .into_iter()
                .flat_map(|v| [format!("{v}{before}"), format!("{v}{before}{opt}")])
                .collect();
            rest = &rest[close + 1..];
        }
        for v in variants {
            let words: Vec<String> = format!("{v}{rest}")
                .split_whitespace()
                .map(|w| match w {
                    "ID" => "0".to_string(),
                    "R" => "documented".to_string(),
                    w => w.to_string(),
                })
                .collect();
            out.push(words.join(" "));
        }
    }
    out
}

/// Sets `--flag value`, replacing an existing value; before `--` if present.
fn set_flag(args: &mut Vec<String>, flag: &str, value: &str) {
    if let Some(i) = args.iter().position(|a| a == flag) {
        args[i + 1] = value.to_string();
        return;
    }
    let at = args.iter().position(|a| a == "--").unwrap_or(args.len());
    args.insert(at, value.to_string());
    args.insert(at, flag.to_string());
}

fn free_port() -> u16 {
    agentsh_tests::server::free_port()
}

/// A fresh server config of its own (port, state, audit) under `dir`.
fn own_config(dir: &Path) -> (PathBuf, String) {
    // A fresh number, so two servers of one test never share a socket.
    let n = free_port();
    let c = dir.join(format!("config-{n}.yaml"));
    let socket = dir.join(format!("run-{n}")).join("api.sock");
    std::fs::write(
        &c,
        format!(
            "server:\n  socket: {}\nstate_dir: {}\naudit:\n  jsonl: {}\nwrapper_binary: {}\n",
            socket.display(),
            dir.join(format!("state-{n}")).display(),
            dir.join(format!("audit-{n}.jsonl")).display(),
            bin("agentsh-unixwrap").display()
        ),
    )
    .unwrap();
    (c, format!("unix:{}", socket.display()))
}

/// A root with a real `sh` and `bash` for `agentsh shim ... --root`.
fn fake_root(dir: &Path, n: usize) -> PathBuf {
    let r = dir.join(format!("root{n}"));
    std::fs::create_dir_all(r.join("bin")).unwrap();
    std::fs::copy("/bin/dash", r.join("bin/sh")).unwrap();
    std::fs::copy("/bin/bash", r.join("bin/bash")).unwrap();
    r
}

fn run(args: &[String]) -> Output {
    with_private_marker_dir(bin("agentsh"))
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run agentsh")
}

/// Runs a long-running command for a moment: it must still be running
/// (parsed and serving) or have exited 0.
fn run_briefly(args: &[String]) -> Result<(), String> {
    let mut c = with_private_marker_dir(bin("agentsh"))
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(1);
    while Instant::now() < deadline {
        if let Some(st) = c.try_wait().unwrap() {
            let o = c.wait_with_output().unwrap();
            return if st.success() {
                Ok(())
            } else {
                Err(String::from_utf8_lossy(&o.stderr).into_owned())
            };
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = c.kill();
    let _ = c.wait();
    Ok(())
}

/// Runs one documented `agentsh` command where it is harmless.
fn run_agentsh(words: &[String], srv: &TestServer, tmp: &Path, n: usize) -> Result<(), String> {
    let mut args: Vec<String> = words[1..]
        .iter()
        .map(|a| {
            a.replace(
                "/etc/agentsh/",
                &format!("{}/etc/agentsh/", repo().display()),
            )
        })
        .collect();
    let sub: Vec<&str> = args.iter().take(2).map(String::as_str).collect();
    let check = |o: Output| {
        if o.status.success() {
            Ok(())
        } else {
            Err(format!(
                "exit {:?}: {}",
                o.status.code(),
                String::from_utf8_lossy(&o.stderr)
            ))
        }
    };
    let follows = args.iter().any(|a| a == "--follow");
    match sub.as_slice() {
        [_, "--help"] | ["--help" | "--version", ..] | ["server", "--print-config"] => {
            check(run(&args))
        }
        ["policy", "check"] | ["completions", _] | ["detect", ..] => check(run(&args)),
        ["man", ..] => {
            set_flag(
                &mut args,
                "--dir",
                &tmp.join(format!("man{n}")).to_string_lossy(),
            );
            check(run(&args))
        }
        ["server", ..] => {
            let (cfg, url) = own_config(tmp);
            set_flag(&mut args, "--config", &cfg.to_string_lossy());
            let mut child = with_private_marker_dir(bin("agentsh"))
                .args(&args)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap();
            let r = check(run(&[
                "ready".into(),
                "--server-only".into(),
                "--server".into(),
                url,
                "--timeout".into(),
                "20".into(),
            ]));
            let _ = child.kill();
            let _ = child.wait();
            r
        }
        ["entrypoint", ..] => {
            let (cfg, _) = own_config(tmp);
            set_flag(&mut args, "--config", &cfg.to_string_lossy());
            let dash = args.iter().position(|a| a == "--").ok_or("no -- CMD")?;
            args.truncate(dash + 1);
            args.push("/bin/true".into());
            check(run(&args))
        }
        ["ready", ..] if args.iter().any(|a| a == "--config") => {
            // A config file naming the test server's address. This machine's
            // /bin/sh is not the shim: only the server's readiness is checked.
            let c = tmp.join("ready-config.yaml");
            std::fs::write(&c, format!("server:\n  socket: {}\n", srv.socket.display())).unwrap();
            set_flag(&mut args, "--config", &c.to_string_lossy());
            args.push("--server-only".into());
            check(run(&args))
        }
        ["ready", ..] => {
            set_flag(&mut args, "--server", &srv.url);
            args.push("--server-only".into());
            check(run(&args))
        }
        ["events", ..] if !follows => {
            set_flag(&mut args, "--server", &srv.url);
            check(run(&args))
        }
        ["events", ..] => {
            set_flag(&mut args, "--server", &srv.url);
            run_briefly(&args)
        }
        ["approvals", "list"] => {
            set_flag(&mut args, "--server", &srv.url);
            check(run(&args))
        }
        ["approvals", "watch"] => {
            set_flag(&mut args, "--server", &srv.url);
            run_briefly(&args)
        }
        ["approvals", "approve" | "deny"] => {
            set_flag(&mut args, "--server", &srv.url);
            let token = srv.dir.path().join("state/approval.token");
            set_flag(&mut args, "--token-file", &token.to_string_lossy());
            // No request with that id is pending: the server says 404.
            let o = run(&args);
            let err = String::from_utf8_lossy(&o.stderr);
            if o.status.code() == Some(1) && err.contains("HTTP 404") {
                Ok(())
            } else {
                Err(format!("exit {:?}: {err}", o.status.code()))
            }
        }
        ["session", action] => {
            let action = action.to_string();
            // Words as a shell would pass them; the test server; a
            // workspace that exists here.
            for a in &mut args {
                *a = a.trim_matches(['"', '\'']).to_string();
            }
            set_flag(&mut args, "--server", &srv.url);
            if args.iter().any(|a| a == "--workspace") {
                let ws = tmp.join(format!("session-ws-{n}"));
                std::fs::create_dir_all(&ws).unwrap();
                set_flag(&mut args, "--workspace", &ws.to_string_lossy());
            }
            let id = args.get(2).cloned().unwrap_or_default();
            if matches!(action.as_str(), "show" | "end") {
                // The session a page ends is one it made before.
                let _ = run(&[
                    "session".into(),
                    "create".into(),
                    id,
                    "--server".into(),
                    srv.url.clone(),
                ]);
            }
            let o = run(&args);
            let err = String::from_utf8_lossy(&o.stderr);
            if action == "create" && o.status.code() == Some(1) && err.contains("exists") {
                Ok(())
            } else {
                check(o)
            }
        }
        ["wrap", ..] => {
            // The agent a page names is not installed here: the same wrap,
            // around /bin/true, with a home of its own.
            let dash = args.iter().position(|a| a == "--").ok_or("no -- CMD")?;
            args.truncate(dash);
            args.extend(["--quiet".into(), "--".into(), "/bin/true".into()]);
            let home = tmp.join(format!("wrap-home-{n}"));
            std::fs::create_dir_all(&home).unwrap();
            // A short runtime directory: a socket's path has 107 bytes.
            let runtime = tmp.join(format!("x{n}"));
            std::fs::create_dir_all(&runtime).unwrap();
            let o = with_private_marker_dir(bin("agentsh"))
                .args(&args)
                .env("HOME", &home)
                .env("XDG_RUNTIME_DIR", &runtime)
                .env_remove("XDG_STATE_HOME")
                .stdin(Stdio::null())
                .output()
                .expect("run agentsh wrap");
            check(o)
        }
        ["shim", action] => {
            let root = fake_root(tmp, n);
            if *action != "install" {
                let o = run(&[
                    "shim".into(),
                    "install".into(),
                    "--root".into(),
                    root.to_string_lossy().into_owned(),
                ]);
                check(o)?;
            }
            set_flag(&mut args, "--root", &root.to_string_lossy());
            check(run(&args))
        }
        _ => Err("no runner in tests/tests/docs.rs for this command: add one".into()),
    }
}

#[test]
fn every_command_in_readme_and_docs_is_run_or_listed() {
    if !require_root("every_command_in_readme_and_docs_is_run_or_listed") {
        return;
    }
    let srv = TestServer::start("default: allow\n", "");
    // Servers started here keep their files where the server accepts them.
    let tmp = TempDir::new_in(&server_base(), "docs-commands");
    let mut used = BTreeSet::new();
    let mut failures = Vec::new();
    let mut n = 0;
    for (file, line, cmd) in doc_commands() {
        if let Some((c, where_)) = EXERCISED_ELSEWHERE.iter().find(|(c, _)| *c == cmd) {
            used.insert(*c);
            let w = where_.split_whitespace().next().unwrap_or_default();
            // The file named exists, and so does the test function, if one is named.
            let named = std::fs::read_to_string(repo().join(w)).unwrap_or_default();
            let func = where_.split_whitespace().nth(1);
            if named.is_empty() || func.is_some_and(|f| !named.contains(&format!("fn {f}("))) {
                failures.push(format!("{file}:{line}: `{c}`: {where_} does not exist"));
            }
            continue;
        }
        if !cmd.starts_with("agentsh ") {
            failures.push(format!(
                "{file}:{line}: `{cmd}` is neither run here nor listed in EXERCISED_ELSEWHERE"
            ));
            continue;
        }
        for concrete in expand(&cmd) {
            n += 1;
            let words: Vec<String> = concrete.split_whitespace().map(String::from).collect();
            if let Err(e) = run_agentsh(&words, &srv, tmp.path(), n) {
                failures.push(format!("{file}:{line}: `{concrete}`: {e}"));
            }
        }
    }
    for (c, _) in EXERCISED_ELSEWHERE {
        assert!(
            used.contains(c),
            "EXERCISED_ELSEWHERE lists `{c}`, no doc uses it"
        );
    }
    assert!(n >= 10, "agentsh commands run: {n}");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn the_base_blocklist_in_the_docs_is_the_one_in_the_code() {
    let doc = read("docs/security-model.md");
    let start = doc
        .find("### The base blocklist")
        .expect("docs/security-model.md: a \"### The base blocklist\" section");
    let section = &doc[start..];
    let section = &section[..section[4..].find("\n### ").map_or(section.len(), |e| e + 4)];
    let mut documented = Vec::new();
    for row in section.lines().filter(|l| l.starts_with("| `")) {
        let cells: Vec<&str> = row.split('|').map(str::trim).collect();
        let names: Vec<String> = cells[1]
            .split(',')
            .map(|n| n.trim().trim_matches('`').to_string())
            .collect();
        documented.push((names, cells[2].to_string(), cells[3].to_string()));
    }
    let code: Vec<(Vec<String>, String, String)> = agentsh::filter::BASE_RULES
        .iter()
        .map(|r| {
            (
                r.syscalls
                    .iter()
                    .map(std::string::ToString::to_string)
                    .collect(),
                r.when_text.to_string(),
                r.answer.name().to_string(),
            )
        })
        .collect();
    assert_eq!(
        documented, code,
        "docs/security-model.md's base blocklist table and server/src/filter/table.rs disagree \
         (rows in order: syscalls, condition, answer)"
    );
}

/// Every repository path `docs/architecture.md` names (in backquotes) exists,
/// and the path of a shell names the module of every step.
#[test]
fn the_architecture_map_names_paths_that_exist() {
    let doc = read("docs/architecture.md");
    let roots = [
        "server/",
        "shim/",
        "unixwrap/",
        "proto/",
        "tests/",
        "bench/",
        "packaging/",
        "etc/",
        "docs/",
    ];
    let mut named = Vec::new();
    for (i, chunk) in doc.split('`').enumerate() {
        // Odd chunks are inside backquotes.
        if i % 2 == 1 && roots.iter().any(|r| chunk.starts_with(r)) && !chunk.contains(' ') {
            named.push(chunk.to_string());
        }
    }
    assert!(named.len() >= 40, "paths named: {named:?}");
    let missing: Vec<&String> = named
        .iter()
        .filter(|p| !repo().join(p.as_str()).exists())
        .collect();
    assert!(
        missing.is_empty(),
        "docs/architecture.md names paths that do not exist: {missing:?}"
    );
    // A name cited with its file (`path.rs` (`name`...) is defined there:
    // a function, a type, a trait, a static or a constant of that name.
    let mut cited = 0;
    let mut wrong = Vec::new();
    for (i, _) in doc.match_indices(".rs` (`") {
        let start = doc[..i].rfind('`').expect("an opening backquote") + 1;
        let file = &doc[start..i + 3];
        let rest = &doc[i + 7..];
        let name: String = rest
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        let Ok(text) = std::fs::read_to_string(format!("{}/../{file}", env!("CARGO_MANIFEST_DIR")))
        else {
            continue; // a missing path is the check above's to report
        };
        cited += 1;
        let defined = [
            "fn ", "struct ", "enum ", "trait ", "type ", "static ", "const ",
        ]
        .iter()
        .any(|k| text.contains(&format!("{k}{name}")));
        if !defined {
            wrong.push(format!("{file} ({name})"));
        }
    }
    assert!(
        cited >= 5,
        "the function names cited were not found ({cited})"
    );
    assert!(
        wrong.is_empty(),
        "docs/architecture.md cites names its files do not define: {wrong:?}"
    );
    let path = &doc[doc
        .find("## The path of a shell")
        .expect("the path of a shell")..];
    let path = &path[..path.find("\n## ").expect("a next section")];
    for step in [
        "shim/src/lib.rs",
        "shim/src/wrapinit.rs",
        "server/src/api/wrap_init.rs",
        "unixwrap/src/lib.rs",
        "shim/src/relay.rs",
        "server/src/handoff.rs",
        "server/src/supervisor/dispatch.rs",
        "server/src/supervisor/exec/handle.rs",
        "server/src/policy/judge.rs",
        "server/src/audit/log.rs",
    ] {
        assert!(
            path.contains(&format!("`{step}`")),
            "the path of a shell skips {step}"
        );
    }
}

/// Every rule the mechanism writes itself (`vocab::Refusal`,
/// `vocab::Passage`) is in the table of the doc section it names, as the
/// audit event names it.
#[test]
fn every_mechanism_rule_is_documented() {
    use agentsh::vocab::{DocRow, Passage, Refusal};
    let rows = Refusal::ALL
        .iter()
        .map(|r| (r.rule(), r.doc()))
        .chain(Passage::ALL.iter().map(|p| (p.rule(), p.doc())));
    let mut missing = Vec::new();
    for (rule, DocRow { file, section }) in rows {
        let doc = read(file);
        let at = doc
            .find(section)
            .unwrap_or_else(|| panic!("{file} has no section {section:?}"));
        let rest = &doc[at + section.len()..];
        // The section ends at the next heading of its level or above.
        let level = section.chars().take_while(|c| *c == '#').count();
        let end = rest
            .match_indices("\n#")
            .find(|(i, _)| rest[i + 1..].chars().take_while(|c| *c == '#').count() <= level)
            .map_or(rest.len(), |(i, _)| i);
        if !rest[..end].contains(&format!("`rule: {rule}`")) {
            missing.push(format!("{rule} (in {file}, {section})"));
        }
    }
    assert!(
        missing.is_empty(),
        "these rules are not documented where their doc row says: {missing:?}"
    );
}

/// Issue 62: the refusals no process of agentsh sees (the kernel answers
/// them) are said in troubleshooting, with the places as the shipped
/// config has them: a read of the state directory's CA key, a secret's
/// file, the audit; a signal to the server or the entrypoint.
#[test]
fn the_refusals_with_no_agentsh_line_are_said_with_the_shipped_places() {
    let page = read("docs/troubleshooting.md");
    let at = page
        .find("### Refusals that print no agentsh line")
        .expect("the section");
    let section = &page[at..];
    let section = &section[..section[4..].find("\n##").map_or(section.len(), |i| i + 4)];
    let section = section.split_whitespace().collect::<Vec<_>>().join(" ");
    let config = read("etc/agentsh/config.yaml");
    let value = |key: &str| {
        config
            .lines()
            .find_map(|l| l.trim().strip_prefix(&format!("{key}:")))
            .map_or_else(
                || panic!("no {key} in the shipped config"),
                |v| v.trim().to_string(),
            )
    };
    let state = value("state_dir");
    for needle in [
        format!("{state}/ca.key"),
        format!("`{state}`"),
        value("jsonl"),
        "secrets:".to_string(),
        "Operation not permitted".to_string(),
        "Landlock".to_string(),
    ] {
        assert!(
            section.contains(&needle),
            "the section does not say {needle:?}:\n{section}"
        );
    }
}

/// Issue 62: the podman commands the cookbook prints for trying a recipe
/// carry the flags the real-runtime tests pass (tests/src/podman.rs), so
/// the page cannot drift from what the tests run.
#[test]
fn the_cookbooks_podman_commands_carry_the_tests_flags() {
    let page = read("docs/sdk-cookbook.md");
    let marker = "<!-- recipe: podman-try -->";
    let at = page.find(marker).expect("the podman recipe");
    let block = &page[at..];
    let block = &block[..block[marker.len()..].find("```\n\n").expect("its end") + marker.len()];
    let helpers = read("tests/src/podman.rs");
    for flag in [
        "nofile=16384:16384",
        "nproc=8192:8192",
        "\"network=host\"",
        "\"--runtime-flag\"",
        "\"--pull=never\"",
        "\"/usr/bin/runsc\"",
        "\"--numeric-owner\"",
        "\"import\"",
    ] {
        assert!(
            helpers.contains(flag),
            "tests/src/podman.rs no longer passes {flag}"
        );
        assert!(
            block.contains(flag.trim_matches('"')),
            "the cookbook's podman recipe lacks {flag}:\n{block}"
        );
    }
    assert!(block.contains("--runtime runc"), "{block}");
}
