//! The shipped policies' `credential_files` (issue 41): the credential
//! stores in every home are out of a tree's reach with nothing configured,
//! as root (a private mount namespace) and as an ordinary user (a user
//! namespace of the tree's own), in the shim path; the home itself stays as
//! usable as before (a file created in it is read back by the same
//! command); the ways around a mount a tree could try (another process's
//! `/proc/<pid>/root`, unmounting, writing through) fail; the wrap-init
//! event lists what was covered and how, never contents. The Landlock
//! fallback where no namespace can be had is in `docker_default.rs`, and
//! `agentsh wrap` in `wrap.rs`.

// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

use agentsh_tests::ns::Namespace;
use agentsh_tests::sandbox::{Sandbox, AGENT_DEFAULT, AGENT_OBSERVE, AGENT_STRICT, NOBODY};
use agentsh_tests::server::require_root;
use serde_json::Value;

/// The secrets planted, by path, and a plain file beside them.
/// The last ten are the stores issue 61 found read (the agents' own, as
/// in an SDK sandbox, where the agent runs outside the tree).
const PLANTED: [(&str, &str); 16] = [
    ("/home/dev/.ssh/id_ed25519", "PRIVATE-KEY-dev-7f3a"),
    (
        "/home/dev/.netrc",
        "machine x login dev password netrc-9c1e",
    ),
    (
        "/home/dev/.config/gcloud/application_default_credentials.json",
        "gcloud-adc-44b2",
    ),
    (
        "/root/.aws/credentials",
        "aws_secret_access_key=aws-root-5d8e",
    ),
    (
        "/root/.git-credentials",
        "https://root:ghp-root-0a6f@github.com",
    ),
    (
        "/root/.docker/config.json",
        "{\"auths\":{\"x\":{\"auth\":\"docker-b71c\"}}}",
    ),
    ("/home/dev/.cache/huggingface/token", "hf_tokenvalue-61a"),
    (
        "/home/dev/.claude/.credentials.json",
        "{\"accessToken\":\"sk-ant-oat-61b\"}",
    ),
    (
        "/home/dev/.codex/auth.json",
        "{\"OPENAI_API_KEY\":\"sk-codex-61c\"}",
    ),
    (
        "/root/.config/containers/auth.json",
        "{\"auths\":{\"r\":{\"auth\":\"podman-auth-61d\"}}}",
    ),
    ("/root/.s3cfg", "secret_key = s3cfg-secret-61e"),
    (
        "/home/dev/.config/rclone/rclone.conf",
        "pass = rclone-pass-61f",
    ),
    (
        "/home/dev/.m2/settings.xml",
        "<password>maven-pass-61g</password>",
    ),
    (
        "/home/dev/.pulumi/credentials.json",
        "{\"accessTokens\":{\"x\":\"pul-token-61h\"}}",
    ),
    ("/root/.boto", "aws_secret_access_key = boto-secret-61i"),
    ("/home/dev/.databrickscfg", "token = dapi-databricks-61j"),
];

/// Plants [`PLANTED`] and `/home/dev/notes.txt` (all owned by `uid`, so
/// an ordinary tree's own file modes would let it read them).
fn plant(ns: &Namespace, uid: Option<u32>) {
    for (p, text) in PLANTED
        .iter()
        .chain(&[("/home/dev/notes.txt", "plain-notes")])
    {
        let host = ns.path(p);
        std::fs::create_dir_all(host.parent().unwrap()).unwrap();
        std::fs::write(&host, text).unwrap();
    }
    if let Some(uid) = uid {
        let o = ns.run(
            &["/usr/bin/chown", "-R", &format!("{uid}:{uid}"), "/home/dev"],
            &[],
        );
        assert!(o.status.success(), "{o:?}");
    }
}

fn sandbox(policy: &str, uid: Option<u32>) -> Sandbox {
    Sandbox::with_overlays(policy, uid, "", &["/root", "/home"], |ns| plant(ns, uid))
}

fn wrap_init(s: &Sandbox) -> Value {
    s.events()
        .into_iter()
        .rev()
        .find(|e| e["type"] == "wrap_init")
        .expect("a wrap_init event")
}

/// Every store read every way a program would, directly and from a nested
/// shell; the output must hold no secret.
fn readers() -> String {
    let files: Vec<&str> = PLANTED.iter().map(|(p, _)| *p).collect();
    format!(
        "for f in {0}; do cat \"$f\" 2>&1; done; sh -c 'cat {0} 2>&1'; \
         python3 -c 'import sys\nfor f in sys.argv[1:]:\n  try: print(open(f).read())\n  except Exception as e: print(type(e).__name__)' {0}; \
         ls -A /home/dev/.ssh /root/.aws; cat /home/dev/notes.txt; echo",
        files.join(" ")
    )
}

fn no_secret_in(what: &str, out: &str) {
    for (p, text) in PLANTED {
        let secret = text
            .rsplit(['=', ' ', ':', '"'])
            .find(|w| w.len() > 8)
            .unwrap_or(text);
        assert!(
            !out.contains(secret),
            "{what}: {p} was read ({secret}): {out}"
        );
    }
}

fn scenario(policy: &str, uid: Option<u32>, mechanism: &str) {
    let mut s = sandbox(policy, uid);
    let f = s.sh(&readers());
    let init = wrap_init(&s);
    let c = &init["credential_files"];
    assert_eq!(c["mechanism"], mechanism, "{init}");
    no_secret_in(&format!("{uid:?}"), &format!("{}{}", f.stdout, f.stderr));
    assert!(
        f.stdout.contains("plain-notes"),
        "a plain file beside them: {f:?}"
    );
    let hidden: Vec<&str> = c["hidden"]
        .as_array()
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    for p in [
        "/home/dev/.ssh",
        "/home/dev/.netrc",
        "/root/.aws",
        "/root/.git-credentials",
    ] {
        assert!(hidden.contains(&p), "{p} not listed as hidden: {init}");
    }
    let text = init.to_string();
    no_secret_in("the wrap_init event", &text);
    // The planted files are untouched outside the tree.
    for (p, text) in PLANTED {
        assert_eq!(std::fs::read_to_string(s.host_path(p)).unwrap(), text);
    }
}

#[test]
fn credential_stores_are_hidden_from_a_root_tree() {
    if !require_root("credential_stores_are_hidden_from_a_root_tree") {
        return;
    }
    scenario(AGENT_DEFAULT, None, "mount namespace");
    scenario(AGENT_OBSERVE, None, "mount namespace");
}

#[test]
fn credential_stores_are_hidden_from_an_ordinary_users_tree() {
    if !require_root("credential_stores_are_hidden_from_an_ordinary_users_tree") {
        return;
    }
    scenario(AGENT_DEFAULT, Some(NOBODY), "user namespace");
    scenario(AGENT_STRICT, Some(NOBODY), "user namespace");
}

/// The covers cost the home nothing: a root tree whose home is writable
/// creates a file and a directory in it and reads them back in the same
/// command (a Landlock carve of the home would refuse that read).
#[test]
fn a_root_tree_still_reads_what_it_creates_in_its_home() {
    if !require_root("a_root_tree_still_reads_what_it_creates_in_its_home") {
        return;
    }
    let mut s = sandbox(AGENT_DEFAULT, None);
    let f = s.sh(
        "echo fresh-1 > /root/new.txt && mkdir -p /root/newdir && echo fresh-2 > \
                  /root/newdir/f && cat /root/new.txt /root/newdir/f",
    );
    assert_eq!(f.stdout, "fresh-1\nfresh-2\n", "{f:?}");
}

/// The ways around a cover: a process outside the tree's namespace seen
/// through `/proc/<pid>/root` (the SDK daemon's, the server's, init's),
/// unmounting it, a new mount or user namespace, writing through it.
#[test]
fn the_covers_cannot_be_gone_around() {
    if !require_root("the_covers_cannot_be_gone_around") {
        return;
    }
    for uid in [None, Some(NOBODY)] {
        let mut s = sandbox(AGENT_DEFAULT, uid);
        let server = s.srv.pid();
        let script = format!(
            "for p in 1 $PPID {server}; do cat /proc/$p/root/root/.aws/credentials \
             /proc/$p/root/home/dev/.ssh/id_ed25519 2>/dev/null; done; \
             umount /root/.aws 2>/dev/null; umount -l /home/dev/.ssh 2>/dev/null; \
             python3 -c 'import ctypes,os; l=ctypes.CDLL(None,use_errno=True); \
             print(\"umount2\", l.umount2(b\"/home/dev/.ssh\", 2), ctypes.get_errno()); \
             print(\"unshare\", l.unshare(0x10020000), ctypes.get_errno())'; \
             cat /root/.aws/credentials /home/dev/.ssh/id_ed25519 2>/dev/null; \
             echo planted >> /home/dev/.ssh/authorized_keys; echo rc=$?"
        );
        let f = s.sh(&script);
        no_secret_in(&format!("{uid:?} going around"), &f.stdout);
        assert!(f.stdout.contains("umount2 -1"), "{uid:?}: {f:?}");
        assert!(f.stdout.contains("unshare -1"), "{uid:?}: {f:?}");
        assert!(
            !f.stdout.contains("rc=0"),
            "{uid:?}: wrote through a cover: {f:?}"
        );
        assert!(
            !s.host_path("/home/dev/.ssh/authorized_keys").exists(),
            "{uid:?}: authorized_keys planted"
        );
    }
}

/// A store that appears after the server has answered a tree is covered
/// from the next tree on (what the server read of the homes is reused only
/// while none of their directories changed).
#[test]
fn a_store_created_later_is_covered_from_the_next_command() {
    if !require_root("a_store_created_later_is_covered_from_the_next_command") {
        return;
    }
    for uid in [None, Some(NOBODY)] {
        let mut s = sandbox(AGENT_DEFAULT, uid);
        let f = s.sh("cat /home/dev/notes.txt");
        assert!(f.stdout.contains("plain-notes"), "{f:?}");
        let kube = s.host_path("/home/dev/.kube");
        std::fs::create_dir_all(&kube).unwrap();
        std::fs::write(kube.join("config"), "token: kube-late-91d0").unwrap();
        if let Some(u) = uid {
            let o = s.ns.run(
                &[
                    "/usr/bin/chown",
                    "-R",
                    &format!("{u}:{u}"),
                    "/home/dev/.kube",
                ],
                &[],
            );
            assert!(o.status.success(), "{o:?}");
        }
        let f = s.sh("cat /home/dev/.kube/config; echo end");
        assert!(
            f.stdout.contains("end") && !f.stdout.contains("kube-late-91d0"),
            "{uid:?}: {f:?}"
        );
    }
}

/// `read_only_files`' `${WORKSPACE}/.git/X` covers every repository nested
/// in the workspace when a tree starts; the server keeps its search of the
/// workspace between trees while inotify reports no change. The tree's
/// attack on that: make a nested repository once the search is kept, then
/// plant a hook in it from the next command. Refused: the new `.git` made
/// the search be made again.
#[test]
fn a_repository_nested_later_has_its_hooks_kept_from_the_next_command() {
    if !require_root("a_repository_nested_later_has_its_hooks_kept_from_the_next_command") {
        return;
    }
    let policy =
        format!("{AGENT_DEFAULT}\nread_only_files:\n  paths: [\"${{WORKSPACE}}/.git/hooks\"]\n");
    for uid in [None, Some(NOBODY)] {
        let mut s = Sandbox::new(&policy, uid);
        let f = s.sh("mkdir -p /srv/ws/a/b && echo made");
        assert!(f.stdout.contains("made"), "{uid:?}: {f:?}");
        // Walked again (a and b are new), then kept for this one.
        let f = s.sh("echo kept");
        assert!(f.stdout.contains("kept"), "{uid:?}: {f:?}");
        let f = s.sh("mkdir -p /srv/ws/a/b/.git/hooks && echo repo");
        assert!(f.stdout.contains("repo"), "{uid:?}: {f:?}");
        let f = s.sh("echo planted > /srv/ws/a/b/.git/hooks/pre-commit; echo rc=$?");
        assert!(
            f.stdout.contains("rc=") && !f.stdout.contains("rc=0"),
            "{uid:?}: the hook was planted: {f:?}"
        );
        assert!(!s.host_path("/srv/ws/a/b/.git/hooks/pre-commit").exists());
        let init = wrap_init(&s);
        assert!(
            init["credential_files"]["read_only"]
                .to_string()
                .contains("/srv/ws/a/b/.git/hooks"),
            "{uid:?}: {init}"
        );
    }
}
