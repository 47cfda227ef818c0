//! Where programs may come from (issue 21, class 2): no hash recognises a
//! modified copy, so `exec_sources: {writable: deny}` (on in the shipped
//! `agent-strict`) keeps every file in a place the tree can write from
//! running. The attacks: a copy of curl with one byte appended, run
//! directly, through python's `os.execv`, as a `#!` interpreter, through
//! the dynamic loader, and from `/tmp`; as root and as nobody, at the
//! kernel's Landlock ABI and at `max_abi: 2`, under the notify and the
//! ptrace backends. Under `agent-default` (which leaves the workspace
//! runnable, for builds and tests) the same copy runs: the key is what
//! stops it.

// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

use agentsh_tests::sandbox::{Sandbox, AGENT_DEFAULT, AGENT_STRICT, NOBODY};
use agentsh_tests::server::require_root;

/// Makes `/srv/ws/fetch`: curl with one byte appended (no index knows it).
const MAKE_COPY: &str = "cd /srv/ws && cp /usr/bin/curl fetch && printf '\\0' >> fetch && \
                         chmod +x fetch && echo COPY-OK";

/// curl's `--version` output starts so; none of it may appear.
const RAN: &str = "Protocols:";

fn attacks(ld: &str) -> Vec<(&'static str, String)> {
    vec![
        ("run directly", "/srv/ws/fetch --version".into()),
        (
            "relative to the cwd",
            "cd /srv/ws && ./fetch --version".into(),
        ),
        (
            "python os.execv",
            "python3 -c 'import os; os.execv(\"/srv/ws/fetch\", [\"fetch\", \"--version\"])'"
                .into(),
        ),
        (
            "as a #! interpreter",
            "printf '#!/srv/ws/fetch --version\\n' > /srv/ws/s && chmod +x /srv/ws/s && \
             /bin/sh -c /srv/ws/s"
                .into(),
        ),
        (
            "a script of the tree's",
            "printf '#!/bin/sh\\n/usr/bin/curl --version\\n' > /srv/ws/t && chmod +x /srv/ws/t \
             && /srv/ws/t"
                .into(),
        ),
        (
            "through the dynamic loader",
            format!("{ld} /srv/ws/fetch --version"),
        ),
        (
            "from /tmp",
            "(cp /srv/ws/fetch /tmp/fetch-$$ && /tmp/fetch-$$ --version); r=$?; \
             rm -f /tmp/fetch-$$; (exit $r)"
                .into(),
        ),
    ]
}

fn loader() -> &'static str {
    ["/lib64/ld-linux-x86-64.so.2", "/lib/ld-linux-aarch64.so.1"]
        .into_iter()
        .find(|p| std::path::Path::new(p).exists())
        .expect("the dynamic loader")
}

/// agent-strict as a deployment whose workspace is this suite's (`/srv/ws`)
/// would write it: the workspace root among the places programs are named
/// from (the shipped list has `/workspace/**`, `/work/**`, ...), so the
/// command rules allow it by name and only `exec_sources` stands between
/// the tree and its own files.
fn strict() -> String {
    let named = "      - \"/workspace/**\"\n";
    assert!(
        AGENT_STRICT.contains(named),
        "agent-strict names /workspace/**"
    );
    AGENT_STRICT.replacen(named, &format!("      - \"/srv/**\"\n{named}"), 1)
}

fn none_runs(uid: Option<u32>, config: &str) {
    let mut s = Sandbox::with_config(&strict(), uid, config);
    let made = s.sh(MAKE_COPY);
    assert!(made.stdout.contains("COPY-OK"), "{made:?}");
    let mut ran = Vec::new();
    for (name, attack) in attacks(loader()) {
        let f = s.sh(&format!("{attack}; echo RC=$?"));
        if f.stdout.contains(RAN) || f.stdout.contains("RC=0") {
            ran.push(format!("{name}: {f:?}"));
        }
    }
    assert!(
        ran.is_empty(),
        "({uid:?}, {config:?}) a modified copy ran:\n{}",
        ran.join("\n")
    );
    // The supervisor refused it too, by the rule's name (where there is no
    // Landlock, gVisor, that is the check that holds).
    let by_rule = s.events().iter().any(|e| {
        e["type"] == "execve"
            && e["rule"] == "exec_sources"
            && e["effective_action"] == "deny"
            && e["filename"]
                .as_str()
                .is_some_and(|f| f.ends_with("/srv/ws/fetch"))
    });
    assert!(
        by_rule,
        "({uid:?}, {config:?}) no exec_sources refusal audited"
    );
    // What is installed still runs; a script of the tree's runs through its
    // interpreter, which reads it.
    let ok = s.sh(
        "/usr/bin/true && printf 'echo via-sh\\n' > /srv/ws/r.sh && sh /srv/ws/r.sh && echo OK",
    );
    assert!(
        ok.stdout.contains("via-sh") && ok.stdout.contains("OK"),
        "({uid:?}, {config:?}) {ok:?}"
    );
    // The tree was told: the ruleset handles execute.
    let r = s.ruleset();
    assert!(
        r["handled_fs"]
            .as_array()
            .is_some_and(|a| a.iter().any(|x| x == "execute")),
        "{r}"
    );
}

#[test]
fn agent_strict_runs_no_file_the_tree_wrote_as_root() {
    if !require_root("agent_strict_runs_no_file_the_tree_wrote_as_root") {
        return;
    }
    for config in [
        "",
        "landlock:\n  max_abi: 2\n",
        "execve:\n  backend: ptrace\n",
    ] {
        none_runs(None, config);
    }
}

#[test]
fn agent_strict_runs_no_file_the_tree_wrote_as_nobody() {
    if !require_root("agent_strict_runs_no_file_the_tree_wrote_as_nobody") {
        return;
    }
    for config in [
        "",
        "landlock:\n  max_abi: 2\n",
        "execve:\n  backend: ptrace\nlandlock:\n  max_abi: 2\n",
    ] {
        none_runs(Some(NOBODY), config);
    }
}

/// The control: agent-default leaves the workspace runnable (builds and
/// tests run there), so the modified copy runs; the attack is real and
/// `exec_sources` is what stops it.
#[test]
fn under_agent_default_the_modified_copy_runs() {
    if !require_root("under_agent_default_the_modified_copy_runs") {
        return;
    }
    let mut s = Sandbox::new(AGENT_DEFAULT, None);
    let made = s.sh(MAKE_COPY);
    assert!(made.stdout.contains("COPY-OK"), "{made:?}");
    let f = s.sh("/srv/ws/fetch --version");
    assert!(f.stdout.contains(RAN), "{f:?}");
}

/// Landlock's execute right covers `execve` only: a file the tree wrote
/// could still be mapped executable (`mmap(PROT_EXEC)`, what a loader or a
/// userland exec does). The supervisor judges every file mapped executable
/// under `exec_sources: {writable: deny}` (the maps family), for root and
/// ordinary trees alike; where unixwrap has a private mount namespace (a
/// root tree with CAP_SYS_ADMIN) the places are also mounted `noexec`.
#[test]
fn a_file_the_tree_wrote_is_never_mapped_executable() {
    if !require_root("a_file_the_tree_wrote_is_never_mapped_executable") {
        return;
    }
    let map = "python3 -c 'import mmap; f = open(\"/srv/ws/fetch\", \"rb\"); \
               mmap.mmap(f.fileno(), 4096, prot=mmap.PROT_READ | mmap.PROT_EXEC); print(\"mapped\")'";
    for uid in [None, Some(NOBODY)] {
        let mut s = Sandbox::new(&strict(), uid);
        let made = s.sh(MAKE_COPY);
        assert!(made.stdout.contains("COPY-OK"), "{made:?}");
        let f = s.sh(map);
        assert!(!f.stdout.contains("mapped"), "{uid:?}: {f:?}");
        assert!(f.stderr.contains("PermissionError"), "{f:?}");
        // Reading and writing there is unchanged.
        let rw = s.sh("echo hi > /srv/ws/note && cat /srv/ws/note");
        assert!(rw.stdout.contains("hi"), "{rw:?}");
    }
}
