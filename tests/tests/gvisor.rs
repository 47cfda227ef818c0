//! What Modal users get: agentsh inside a real gVisor sandbox (Debian's
//! `runsc`), where seccomp user-notify and Landlock do not exist and the
//! ptrace backend is all there is.
//!
//! `runsc --network=none do` runs the scenario over this machine's root
//! filesystem with every write going to the sandbox's overlay: the
//! scenario installs the shim, runs the server on its embedded defaults and
//! drives an SDK-style daemon (`agentsh-sandbox-scenario`, whose module doc
//! lists the checks). This test proves the host kept its `/bin/sh`.

// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

use agentsh_tests::attackers::compile;
use agentsh_tests::server::{bin, require_root, TempDir};
use std::process::Command;

fn runsc() -> Option<String> {
    ["/usr/bin/runsc", "/usr/sbin/runsc", "/usr/local/bin/runsc"]
        .iter()
        .find(|p| std::path::Path::new(p).exists())
        .map(std::string::ToString::to_string)
}

/// runsc's path where the test can run (root, runsc installed); `None`
/// after saying why it skips (never under `CI=true` for a missing runsc).
fn root_and_runsc(test: &str) -> Option<String> {
    if !require_root(test) {
        return None;
    }
    let Some(runsc) = runsc() else {
        let why =
            "runsc (gVisor) is not installed; tests/setup.sh installs it (apt-get install runsc)";
        assert!(std::env::var("CI").as_deref() != Ok("true"), "{why}");
        eprintln!("skipped: {why}");
        return None;
    };
    Some(runsc)
}

#[test]
fn the_sdk_scenarios_hold_inside_gvisor() {
    let Some(runsc) = root_and_runsc("the_sdk_scenarios_hold_inside_gvisor") else {
        return;
    };
    let before = agentsh_tests::ns::host_sh_fingerprint();
    let host_paths = ["/bin/sh.real", "/usr/bin/agentsh", "/etc/agentsh/shim.conf"];
    let existed: Vec<bool> = host_paths
        .iter()
        .map(|p| std::path::Path::new(p).exists())
        .collect();
    // The DNS prober (static: the sandbox sees this machine's root).
    let tmp = TempDir::new("gvisor-netrace");
    let netrace = compile("netrace", tmp.path(), true);
    let out = Command::new("timeout")
        .args(["600", &runsc, "--network=none", "do", "-force-overlay=true"])
        .arg(bin("agentsh-sandbox-scenario"))
        .arg("--modal")
        .arg("--netrace")
        .arg(&netrace)
        .output()
        .expect("run runsc");
    let text = String::from_utf8_lossy(&out.stdout);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        text.contains("detect: gvisor=true"),
        "runsc did not run the scenario in gVisor (status {:?}):\n{text}\n{err}",
        out.status
    );
    assert!(
        text.contains("exec_backend=\"ptrace\"") && text.contains("user_notif=false"),
        "{text}"
    );
    assert!(
        out.status.success() && text.contains(" checks, 0 failed"),
        "{text}\nstderr: {err}"
    );
    for check in [
        // docs/sdk-cookbook.md's Modal recipe, as written.
        "ok: agentsh shim install --bash",
        "ok: a root SDK shell cannot change shim.conf",
        // No cgroups in the sandbox: a session with limits is refused.
        "ok: agentsh session create --pids 64 makes a session",
        "ok: limits that cannot be applied here refuse the session's shells, saying why",
        "ok: a nested su fails with 126",
        "ok: the denied su is audited with its rule",
        "ok: $$ is the pid the SDK spawned",
        "ok: a death by signal passes through",
        "ok: the approved id runs",
        "ok: an unanswered approval times out and is denied",
        // agent-default's egress, judged where each call stops (the
        // tracer holds the caller's threads), DNS through the stub; the
        // operator's allow_unjudged changes nothing there.
        "ok: gVisor: a connect to a local dev server is judged where it stops and made",
        "ok: gVisor: a DNS query goes to agentsh's stub, which refuses a name no rule allows",
        "ok: gVisor: a DNS query sent by connect is judged as the stub's",
        "ok: gVisor: a DNS query sent by send is judged as the stub's",
        "ok: gVisor: a DNS query sent by unbound is judged as the stub's",
        "ok: gVisor with egress.compat allow_unjudged: the connect is judged all the same",
        "ok: gVisor with allow_unjudged: the wrap-init lists no egress as not enforced",
        // An egress rule with http: the proxy's address written over the
        // caller's sockaddr where it stops, the socket booked after.
        "ok: an egress rule with http: lets a GET through with the header it injects",
        "ok: an egress rule with http: refuses a DELETE with a 403 that says why, never sent",
    ] {
        assert!(text.contains(check), "missing {check:?}:\n{text}");
    }
    assert_eq!(agentsh_tests::ns::host_sh_fingerprint(), before);
    let now: Vec<bool> = host_paths
        .iter()
        .map(|p| std::path::Path::new(p).exists())
        .collect();
    assert_eq!(
        existed, now,
        "the sandbox wrote to the host: {host_paths:?}"
    );
}

/// Under the tracer the kernel reads copies of what was judged, in a region
/// no task of the tree can write: in real gVisor, under `agentsh wrap`
/// (agent-observe: every program runs, file rules kept), as root, a path
/// rewritten by a thread or by another process through a shared memfd
/// never opens `/etc/passwd` for writing, while the benign path it
/// alternates with opens (no longer refused as shared memory: the sharing
/// does not matter any more); and every way at the region itself
/// (`mprotect`, `pkey_mprotect`, `munmap`, `mremap`, `madvise`, `mmap`
/// over it, `/proc/self/mem`) is refused. A path in the program's own text
/// opens (it was refused before: the memory check could not tell the
/// program's file would not be written).
#[test]
fn the_kernel_reads_copies_of_the_judged_paths_that_no_task_of_the_tree_writes() {
    let Some(runsc) = root_and_runsc(
        "the_kernel_reads_copies_of_the_judged_paths_that_no_task_of_the_tree_writes",
    ) else {
        return;
    };
    let tmp = TempDir::new("gvisor-pinned");
    let race = compile("filerace", tmp.path(), true);
    let script = format!(
        "d=$(mktemp -d) && for m in shared thread literal region; do {} $m /etc/passwd $d 3 || exit $?; done",
        race.display()
    );
    let out = Command::new("timeout")
        .args(["600", &runsc, "--network=none", "do", "-force-overlay=true"])
        .arg(bin("agentsh"))
        .args([
            "wrap",
            "--policy",
            "agent-observe",
            "--",
            "/bin/sh",
            "-c",
            &script,
        ])
        .current_dir(tmp.path())
        .output()
        .expect("run runsc");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{text}\nstderr: {err}");
    assert!(
        !text.contains("WON"),
        "/etc/passwd opened for writing:\n{text}"
    );
    // Each race's summary: the benign path opened (the calls were let
    // through, reading the copy), never the target.
    let summaries: Vec<&str> = text.lines().filter(|l| l.starts_with("opened ")).collect();
    assert_eq!(summaries.len(), 4, "{text}\nstderr: {err}");
    // The literal's opens all succeed: a path in the program's own text
    // (its file's private pages, in a place a root tree may write) was
    // refused as memory another process could write before the paths were
    // copied (git clone failed opening /dev/null).
    assert!(summaries[2].contains("refused 0"), "{}", summaries[2]);
    for s in &summaries[..3] {
        let opened: u64 = s
            .split_whitespace()
            .nth(1)
            .and_then(|n| n.parse().ok())
            .unwrap_or(0);
        assert!(
            opened > 0,
            "the benign path never opened: {s}\n{text}\nstderr: {err}"
        );
        assert!(s.ends_with("won 0"), "{s}");
    }
    assert!(text.contains("REGION mapped"), "{text}\nstderr: {err}");
    assert!(!text.contains("changed"), "the region was changed:\n{text}");
    for how in [
        "madvise",
        "mremap",
        "mmap-fixed",
        "munmap",
        "munmap-all",
        "proc-mem",
        "mprotect",
        "pkey_mprotect",
    ] {
        assert!(
            text.contains(&format!("REGION {how} refused")),
            "{how}:\n{text}"
        );
    }
    // Each refusal of a memory call explained, naming its rule.
    assert!(err.contains("(rule pinned_region)"), "{err}");
}

/// `tracer_reads: unjudged`, the faster mode a policy may choose under
/// gVisor: an open for reading only no longer stops, so a file the
/// policy's read rule denies is read (the cost, said in the policy's
/// documentation and the server's log), while a write the rules deny is
/// still refused. Beside it the same policy without the key refuses the
/// read: the mode is the policy's choice, never the default.
#[test]
fn with_tracer_reads_unjudged_reads_run_unseen_and_writes_are_still_judged() {
    let Some(runsc) =
        root_and_runsc("with_tracer_reads_unjudged_reads_run_unseen_and_writes_are_still_judged")
    else {
        return;
    };
    let tmp = TempDir::new("gvisor-reads");
    std::fs::create_dir_all(tmp.path().join("secret")).unwrap();
    std::fs::write(tmp.path().join("secret/key"), "the-secret-text\n").unwrap();
    let rules = "file_rules:\n  - name: secret-unreadable\n    paths: [\"${WORKSPACE}/secret/**\"]\n    operations: [read]\n    decision: deny\n  - name: etc-read-only\n    paths: [/etc/**]\n    operations: [write, create, delete]\n    decision: deny\n";
    let script =
        "cat secret/key; echo \"read $?\"; (echo x > /etc/agentsh-reads-test); echo \"write $?\"";
    let run = |mode: &str| {
        let policy = tmp.path().join(format!("reads-{mode}.yaml"));
        let key = if mode == "unjudged" {
            "tracer_reads: unjudged\n"
        } else {
            ""
        };
        std::fs::write(
            &policy,
            format!("name: reads-{mode}\ndefault: allow\n{key}{rules}"),
        )
        .unwrap();
        let out = Command::new("timeout")
            .args(["300", &runsc, "--network=none", "do", "-force-overlay=true"])
            .arg(bin("agentsh"))
            .args(["wrap", "--policy"])
            .arg(&policy)
            .args(["--", "/bin/sh", "-c", script])
            .current_dir(tmp.path())
            .output()
            .expect("run runsc");
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(out.status.success(), "{mode}: {text}\nstderr: {err}");
        (text, err)
    };
    let (judged, err) = run("judged");
    assert!(
        !judged.contains("the-secret-text"),
        "judged: the read ran:\n{judged}\n{err}"
    );
    assert!(judged.contains("read 1"), "{judged}\n{err}");
    assert!(
        err.contains("secret/key (read right) denied"),
        "the refusal is explained: {err}"
    );
    assert!(
        judged.contains("write 1") || judged.contains("write 2"),
        "{judged}\n{err}"
    );
    let (unjudged, err) = run("unjudged");
    assert!(
        unjudged.contains("the-secret-text"),
        "unjudged: the read was refused:\n{unjudged}\n{err}"
    );
    assert!(unjudged.contains("read 0"), "{unjudged}\n{err}");
    assert!(
        !unjudged.contains("write 0"),
        "unjudged: /etc was written:\n{unjudged}\n{err}"
    );
    assert!(
        err.contains("/etc/agentsh-reads-test") && err.contains("denied"),
        "the write's refusal is explained: {err}"
    );
}
