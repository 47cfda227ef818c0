//! Deny-only rules, end to end: with `default: allow` and nothing but a
//! `deny` for an operation, that operation stays allowed everywhere except
//! beneath the denied paths (compiled as "granted on `/` minus those paths"),
//! in nested shells of an SDK-style tree, on the real kernel. What Landlock
//! cannot express (a deny-only TCP port list) is refused by `agentsh policy
//! check` and by the server, with what to write instead. Needs root.

// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

use agentsh_tests::sandbox::{Sandbox, WORKSPACE};
use agentsh_tests::sdk;
use agentsh_tests::server::{bin, require_root, server_base, with_private_marker_dir, TempDir};
use std::os::unix::fs::PermissionsExt;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Landlock ABI of this kernel (0 if unavailable).
fn landlock_abi() -> i64 {
    // SAFETY: landlock_create_ruleset(NULL, 0, VERSION) only returns the ABI.
    unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<u8>(),
            0usize,
            1u32,
        )
    }
}

const DENY_ONE_FILE: &str = r#"
name: deny-one-file
default: allow
file_rules:
  - name: no-secret
    paths: [/srv/ws/secret.txt]
    operations: [read]
    decision: deny
"#;

#[test]
fn denying_one_file_keeps_everything_else_readable_in_nested_shells() {
    if !require_root("denying_one_file_keeps_everything_else_readable_in_nested_shells") {
        return;
    }
    assert!(landlock_abi() >= 6, "this test expects Landlock ABI >= 6");
    let mut sb = Sandbox::new(DENY_ONE_FILE, None);
    // World-readable: only Landlock can stop root reading it.
    std::fs::write(sb.host_path("/srv/ws/secret.txt"), "s3cret\n").expect("write secret");
    std::fs::write(sb.host_path("/srv/ws/notes.txt"), "public notes\n").expect("write notes");
    let inner = format!(
        "cat {WORKSPACE}/secret.txt; echo secret-rc=$?\n\
         python3 -c 'import errno\ntry: open(\"{WORKSPACE}/secret.txt\")\nexcept OSError as e: print(\"secret-errno\", errno.errorcode[e.errno])'\n\
         ls {WORKSPACE} | tr '\\n' ' '; echo\n\
         cat {WORKSPACE}/notes.txt\n\
         head -n 1 /etc/passwd | cut -d: -f1\n\
         echo id=$(id -u)\n\
         git --version >/dev/null && echo git-ok\n\
         echo scratch > /tmp/deny-one-$$ && cat /tmp/deny-one-$$ && rm /tmp/deny-one-$$\n"
    );
    std::fs::write(sb.host_path("/srv/ws/inner.sh"), inner).expect("write the script");
    // Two shells deep, in a pipeline, as an SDK's command would nest.
    let f = sb.spawn(&sdk::tensorlake(
        "sh -c \"sh -c 'sh /srv/ws/inner.sh'\" | cat",
    ));
    assert_eq!(f.code, Some(0), "{f:?}\n{}", sb.srv.log());
    assert!(
        !f.stdout.contains("s3cret"),
        "the denied read leaked: {f:?}"
    );
    assert!(f.stdout.contains("secret-rc=1\n"), "{f:?}");
    assert!(f.stderr.contains("secret.txt: Permission denied"), "{f:?}");
    assert!(f.stdout.contains("secret-errno EACCES\n"), "{f:?}");
    // Everything else: listing, other files, /etc, programs, scratch.
    assert!(
        f.stdout.contains("inner.sh notes.txt secret.txt"),
        "ls: {f:?}"
    );
    assert!(f.stdout.contains("public notes\n"), "{f:?}");
    assert!(f.stdout.contains("root\n"), "/etc/passwd: {f:?}");
    assert!(f.stdout.contains("id=0\n"), "{f:?}");
    assert!(f.stdout.contains("git-ok\n"), "{f:?}");
    assert!(f.stdout.contains("scratch\n"), "/tmp: {f:?}");
    // The kernel alone refused: no exec was denied.
    assert!(
        sb.execs_since(0)
            .iter()
            .all(|e| e["effective_action"] == "allow"),
        "{:?}",
        sb.execs_since(0)
    );
    let r = sb.ruleset();
    assert!(
        r["handled_fs"]
            .as_array()
            .is_some_and(|a| a.iter().any(|x| x == "read")),
        "{r}"
    );
}

const DENY_EACH_OPERATION: &str = r#"
name: deny-each-operation
default: allow
file_rules:
  - name: frozen
    paths: [/srv/ws/conf/frozen.txt]
    operations: [write]
    decision: deny
  - name: no-new-files-in-drop
    paths: ["/srv/ws/drop/**"]
    operations: [create]
    decision: deny
  - name: keep-records
    paths: ["/srv/ws/records/**"]
    operations: [delete]
    decision: deny
  - name: no-tool
    paths: [/srv/ws/bin/tool]
    operations: [execute]
    decision: deny
"#;

#[test]
fn deny_only_write_create_delete_and_execute_keep_the_rest_open() {
    if !require_root("deny_only_write_create_delete_and_execute_keep_the_rest_open") {
        return;
    }
    assert!(landlock_abi() >= 6, "this test expects Landlock ABI >= 6");
    let mut sb = Sandbox::new(DENY_EACH_OPERATION, None);
    for d in ["conf", "drop", "records", "bin", "work"] {
        std::fs::create_dir_all(sb.host_path(&format!("/srv/ws/{d}"))).expect("mkdir");
    }
    for (p, text) in [
        ("/srv/ws/conf/frozen.txt", "v1\n"),
        ("/srv/ws/conf/other.txt", "o1\n"),
        ("/srv/ws/records/r1", "r1\n"),
        ("/srv/ws/work/w1", "w1\n"),
    ] {
        std::fs::write(sb.host_path(p), text).expect("write a file");
    }
    for tool in ["tool", "other-tool"] {
        let p = sb.host_path(&format!("/srv/ws/bin/{tool}"));
        std::fs::write(&p, format!("#!/bin/sh\necho {tool}-ran\n")).expect("write a tool");
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    }
    let script = "cd /srv/ws\n\
        if echo v2 > conf/frozen.txt; then echo frozen-written; else echo frozen-refused; fi\n\
        echo o2 > conf/other.txt && echo other-write-ok\n\
        if touch drop/new; then echo drop-created; else echo drop-refused; fi\n\
        touch work/new && echo work-create-ok\n\
        if rm records/r1; then echo records-deleted; else echo records-refused; fi\n\
        rm work/w1 && echo work-delete-ok\n\
        ./bin/tool; echo tool-rc=$?\n\
        ./bin/other-tool\n\
        cat conf/frozen.txt records/r1\n";
    std::fs::write(sb.host_path("/srv/ws/script.sh"), script).expect("write the script");
    let f = sb.spawn(&sdk::tensorlake("sh -c \"sh /srv/ws/script.sh\""));
    let so = &f.stdout;
    assert!(so.contains("frozen-refused\n"), "{f:?}");
    assert!(so.contains("other-write-ok\n"), "{f:?}");
    assert!(so.contains("drop-refused\n"), "{f:?}");
    assert!(so.contains("work-create-ok\n"), "{f:?}");
    assert!(so.contains("records-refused\n"), "{f:?}");
    assert!(so.contains("work-delete-ok\n"), "{f:?}");
    assert!(so.contains("tool-rc=126\n"), "{f:?}");
    assert!(so.contains("other-tool-ran\n"), "{f:?}");
    assert!(!so.contains("\ntool-ran"), "{f:?}");
    assert!(so.contains("v1\nr1\n"), "{f:?}");
    assert!(f.stderr.contains("Permission denied"), "{f:?}");
}

/// `agentsh server --config` on a config of its own under [`server_base`]:
/// its exit status and stderr once it exits; panics if it keeps running.
fn server_exit(dir: &TempDir, policy_yaml: &str) -> (Option<i32>, String) {
    let policy = dir.path().join("policy.yaml");
    std::fs::write(&policy, policy_yaml).unwrap();
    let config = dir.path().join("config.yaml");
    std::fs::write(
        &config,
        format!(
            "server:\n  http:\n    addr: \"127.0.0.1:{}\"\npolicy: {}\nstate_dir: {}\naudit:\n  jsonl: {}\n",
            agentsh_tests::server::free_port(),
            policy.display(),
            dir.path().join("state").display(),
            dir.path().join("audit.jsonl").display(),
        ),
    )
    .unwrap();
    let mut child = with_private_marker_dir(bin("agentsh"))
        .args(["server", "--config"])
        .arg(&config)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // A deadline for a process that should exit at once, not a timing claim.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(st) = child.try_wait().unwrap() {
            let out = child.wait_with_output().unwrap();
            return (st.code(), String::from_utf8_lossy(&out.stderr).into_owned());
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let out = child.wait_with_output().unwrap();
            panic!(
                "the server started with a policy it cannot enforce: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_deny_only_port_rule_is_refused_with_what_to_write_instead() {
    if !require_root("a_deny_only_port_rule_is_refused_with_what_to_write_instead") {
        return;
    }
    let dir = TempDir::new_in(&server_base(), "denyport");
    for (what, policy) in [
        (
            "deny-only",
            "default: allow\nnetwork_rules:\n  - {name: no-discard, ports: [9], direction: connect, decision: deny}\n",
        ),
        (
            "deny then any",
            "default: allow\nnetwork_rules:\n  - {name: no-discard, ports: [9], direction: connect, decision: deny}\n  - {name: rest, ports: any, direction: connect, decision: allow}\n",
        ),
    ] {
        let f = dir.path().join("p.yaml");
        std::fs::write(&f, policy).unwrap();
        let out = Command::new(bin("agentsh"))
            .args(["policy", "check"])
            .arg(&f)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{what}: {err}");
        assert!(err.contains("no-discard"), "{what}: {err}");
        assert!(err.contains("decision: allow"), "{what}: {err}");
        assert!(err.contains("every port not listed is closed"), "{what}: {err}");
        let (code, err) = server_exit(&dir, policy);
        assert_eq!(code, Some(1), "{what}: {err}");
        assert!(err.contains("no-discard"), "{what}: {err}");
        assert!(err.contains("decision: allow"), "{what}: {err}");
    }
    // `ports: any` + deny closes the direction: expressible, accepted.
    let f = dir.path().join("closed.yaml");
    std::fs::write(
        &f,
        "default: allow\nnetwork_rules:\n  - {name: no-listen, ports: any, direction: bind, decision: deny}\n",
    )
    .unwrap();
    let out = Command::new(bin("agentsh"))
        .args(["policy", "check"])
        .arg(&f)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("TCP bind: closed"),
        "{out:?}"
    );
}

#[test]
fn policy_check_explains_a_deny_it_cannot_carve_out_on_this_machine() {
    // A directory too big to grant entry by entry, and a deny of one file in it.
    let dir = TempDir::new_in(&server_base(), "bigdir");
    let big = dir.path().join("big");
    std::fs::create_dir_all(&big).unwrap();
    for i in 0..300 {
        std::fs::write(big.join(format!("f{i}")), "x").unwrap();
    }
    let f = dir.path().join("p.yaml");
    std::fs::write(
        &f,
        format!(
            "default: allow\nfile_rules:\n  - {{name: no-f7, paths: [{}], operations: [read], decision: deny}}\n",
            big.join("f7").display()
        ),
    )
    .unwrap();
    let out = Command::new(bin("agentsh"))
        .args(["policy", "check"])
        .arg(&f)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("file_rules \"no-f7\""), "{err}");
    assert!(err.contains("it has 300 entries"), "{err}");
    assert!(
        err.contains(&format!(
            "Deny the whole directory (\"{}/**\")",
            big.display()
        )),
        "{err}"
    );
    // The whole directory is expressible.
    std::fs::write(
        &f,
        format!(
            "default: allow\nfile_rules:\n  - {{name: no-big, paths: [\"{}/**\"], operations: [read], decision: deny}}\n",
            big.display()
        ),
    )
    .unwrap();
    let out = Command::new(bin("agentsh"))
        .args(["policy", "check"])
        .arg(&f)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let so = String::from_utf8_lossy(&out.stdout);
    assert!(
        so.contains("read: allowed everywhere except beneath"),
        "{so}"
    );
}
