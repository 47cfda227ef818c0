//! Refusals explained to the caller (issue 27, `execve.explain: stderr`):
//! a refused exec's caller finds one line on its own stderr naming the
//! program, the rule and its message, once per command (a shell's PATH
//! retries add none), escaped; a stderr that would block gets nothing and
//! the refusal is answered at once. The exec event says `explained`.

// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

use agentsh_tests::sandbox::{Sandbox, NOBODY};
use agentsh_tests::sdk::Spawn;
use agentsh_tests::server::require_root;
use std::time::{Duration, Instant};

const POLICY: &str = "default: allow\ncommand_rules:\n  - name: no-curl\n    commands: [curl]\n    decision: deny\n    message: no curl here, ask for the file instead\n";

const FULL_PIPE: &str = r#"
import os, subprocess, time
r, w = os.pipe()
os.set_blocking(w, False)
try:
    while True:
        os.write(w, b"x" * 65536)
except BlockingIOError:
    pass
os.set_blocking(w, True)
def refused(stderr, arg):
    t = time.monotonic()
    try:
        subprocess.run(["curl", arg], stderr=stderr)
        return None
    except PermissionError:
        return time.monotonic() - t
# The same refusal with a stderr that takes everything, and with one that
# would block: the best of three of each, side by side.
control = min(refused(subprocess.DEVNULL, "--control") for _ in range(3))
full = min(refused(w, "--full-pipe") for _ in range(3))
print("refused", round(full - control, 3))
"#;

fn scenario(uid: Option<u32>) {
    let mut s = Sandbox::new(POLICY, uid);
    let f = s.sh("curl --version; echo rc=$?");
    assert_eq!(f.stdout.trim(), "rc=126", "{f:?}");
    let want = "agentsh: curl denied (rule no-curl): no curl here, ask for the file instead";
    assert_eq!(
        f.stderr.lines().filter(|l| *l == want).count(),
        1,
        "one explanation per command: {:?}",
        f.stderr
    );
    let curls: Vec<serde_json::Value> = s
        .events()
        .into_iter()
        .filter(|e| e["type"] == "execve" && e["argv"][0] == "curl")
        .collect();
    assert!(curls.iter().any(|e| e["explained"] == true), "{curls:?}");
    assert!(
        curls
            .iter()
            .all(|e| e["explained"] == true || e["retry"] == true),
        "a retry explained again, or a first attempt not: {curls:?}"
    );
    // A name with escape sequences arrives escaped.
    let f = s.spawn(&agentsh_tests::sdk::Spawn::argv(&[
        "bash",
        "-c",
        "exec -a \"$(printf 'c\\033[31mx')\" curl --version",
    ]));
    assert!(
        f.stderr
            .contains("agentsh: c\\x1b[31mx denied (rule no-curl)"),
        "{:?}",
        f.stderr
    );
    // A stderr that would block (a full pipe nobody reads): nothing
    // written, the refusal answered at once.
    std::fs::write(s.host_path("/srv/ws/full_pipe.py"), FULL_PIPE).unwrap();
    let f = s.sh("python3 /srv/ws/full_pipe.py");
    let out = f.stdout.trim();
    let secs: f64 = out
        .strip_prefix("refused ")
        .unwrap_or_else(|| panic!("{f:?}"))
        .parse()
        .unwrap();
    // Never waited on (a blocking write would never return: nobody reads
    // the pipe): a full pipe costs under 100 ms more than /dev/null.
    assert!(
        secs < 0.1,
        "the refusal waited on the full pipe: {secs} s more"
    );
    let e = s
        .events()
        .into_iter()
        .find(|e| e["type"] == "execve" && e["argv"][1] == "--full-pipe")
        .unwrap();
    assert_eq!(e["explained"], false, "{e}");
}

#[test]
fn refusals_are_explained_on_the_callers_stderr_as_root() {
    if !require_root("refusals_are_explained_on_the_callers_stderr_as_root") {
        return;
    }
    scenario(None);
}

#[test]
fn refusals_are_explained_on_the_callers_stderr_as_nobody() {
    if !require_root("refusals_are_explained_on_the_callers_stderr_as_nobody") {
        return;
    }
    scenario(Some(NOBODY));
}

const ASK: &str = "default: allow\ncommand_rules:\n  - name: ask-wc\n    commands: [wc]\n    decision: approve\n    message: wc needs a human\n";

/// While an exec waits for an operator its caller reads that it waits (the
/// approval's id, the command, how long); refused by the timeout or by an
/// operator, it reads why, once.
fn approvals(uid: Option<u32>) {
    let mut s = Sandbox::with_config(ASK, uid, "execve:\n  approval_timeout: 1s\n");
    // Nobody answers: the timeout refuses it.
    let f = s.sh("wc -l </dev/null; echo rc=$?");
    assert_eq!(f.stdout.trim(), "rc=126", "{f:?}");
    let lines: Vec<&str> = f.stderr.lines().collect();
    let waiting: Vec<&&str> = lines
        .iter()
        .filter(|l| l.starts_with("agentsh: waiting for approval ap-"))
        .collect();
    assert_eq!(waiting.len(), 1, "{lines:?}");
    assert!(
        waiting[0].ends_with(" of \"wc -l\" (up to 1 s)"),
        "{lines:?}"
    );
    let id = waiting[0]
        .trim_start_matches("agentsh: waiting for approval ")
        .split(' ')
        .next()
        .unwrap();
    let refused = format!("agentsh: wc denied (rule ask-wc): approval {id} timed out after 1 s");
    assert_eq!(
        lines.iter().filter(|l| **l == refused).count(),
        1,
        "{lines:?}"
    );
    let ev = s
        .events()
        .into_iter()
        .find(|e| e["type"] == "execve" && e["approval_id"] == id)
        .unwrap();
    assert_eq!(ev["explained"], true, "{ev}");
    // An operator refuses it, with a reason.
    let r = s.sup.spawn(&Spawn::argv(&[
        "/bin/sh",
        "-c",
        "wc -c </dev/null; echo rc=$?",
    ]));
    let deadline = Instant::now() + Duration::from_secs(60);
    let id = loop {
        let pending = s.srv.get_json("/api/v1/approvals");
        if let Some(id) = pending
            .as_array()
            .and_then(|a| a.first())
            .map(|p| p["id"].clone())
        {
            break id.as_str().unwrap().to_string();
        }
        assert!(Instant::now() < deadline, "no pending approval");
        std::thread::sleep(Duration::from_millis(10));
    };
    let (status, v) = s.srv.call(
        "POST",
        &format!("/api/v1/approvals/{id}"),
        Some(&serde_json::json!({"decision": "deny", "reason": "not now"})),
    );
    assert_eq!(status, 200, "{v}");
    let f = s.sup.wait(r, Duration::from_secs(60));
    assert_eq!(f.stdout.trim(), "rc=126", "{f:?}");
    assert!(
        f.stderr.contains(&format!(
            "agentsh: wc denied (rule ask-wc): approval {id} denied by "
        )),
        "{f:?}"
    );
    assert!(f.stderr.contains(": not now"), "{f:?}");
}

#[test]
fn approval_waits_and_refusals_are_explained_as_root() {
    if !require_root("approval_waits_and_refusals_are_explained_as_root") {
        return;
    }
    approvals(None);
}

#[test]
fn approval_waits_and_refusals_are_explained_as_nobody() {
    if !require_root("approval_waits_and_refusals_are_explained_as_nobody") {
        return;
    }
    approvals(Some(NOBODY));
}

#[test]
fn refusals_and_approval_waits_are_explained_under_the_ptrace_backend() {
    if !require_root("refusals_and_approval_waits_are_explained_under_the_ptrace_backend") {
        return;
    }
    let policy = format!("{POLICY}  - name: ask-wc\n    commands: [wc]\n    decision: approve\n");
    let mut s = Sandbox::with_config(
        &policy,
        None,
        "execve:\n  backend: ptrace\n  approval_timeout: 1s\n",
    );
    let f = s.sh("curl --version; wc -l </dev/null; echo done");
    assert_eq!(f.stdout.trim(), "done", "{f:?}");
    let lines: Vec<&str> = f.stderr.lines().collect();
    let want = "agentsh: curl denied (rule no-curl): no curl here, ask for the file instead";
    assert_eq!(lines.iter().filter(|l| **l == want).count(), 1, "{lines:?}");
    assert_eq!(
        lines
            .iter()
            .filter(|l| l.starts_with("agentsh: waiting for approval "))
            .count(),
        1,
        "{lines:?}"
    );
    assert_eq!(
        lines
            .iter()
            .filter(
                |l| l.starts_with("agentsh: wc denied (rule ask-wc): approval ")
                    && l.ends_with(" timed out after 1 s")
            )
            .count(),
        1,
        "{lines:?}"
    );
    let init = s
        .events()
        .into_iter()
        .find(|e| e["type"] == "wrap_init")
        .unwrap();
    assert_eq!(init["backend"], "ptrace", "{init}");
}

#[test]
fn fileless_and_truncated_refusals_are_explained() {
    if !require_root("fileless_and_truncated_refusals_are_explained") {
        return;
    }
    let mut s = Sandbox::new(POLICY, None);
    // An argv beyond execve.max_argc (131072): refused, not judged on a part.
    let f = s.sh("/bin/true $(seq 1 140000); echo rc=$?");
    assert_eq!(f.stdout.trim(), "rc=126", "{f:?}");
    let lines: Vec<&str> = f
        .stderr
        .lines()
        .filter(|l| l.starts_with("agentsh: true denied (rule execve_truncated)"))
        .collect();
    assert_eq!(lines.len(), 1, "{:?}", f.stderr);
    // A program run from memory (memfd): nothing on disk to judge.
    let f = s.sh("python3 -c 'import os; fd = os.memfd_create(\"payload\"); \
         os.write(fd, open(\"/usr/bin/true\", \"rb\").read()); os.execve(fd, [\"payload\"], {})'; \
         echo rc=$?");
    assert!(f.stdout.trim().ends_with("rc=1"), "{f:?}");
    let lines: Vec<&str> = f
        .stderr
        .lines()
        .filter(|l| l.starts_with("agentsh: ") && l.contains(" denied (rule "))
        .collect();
    assert_eq!(lines.len(), 1, "{:?}", f.stderr);
    assert!(lines[0].contains("fileless"), "{lines:?}");
    let events = s.events();
    let refused: Vec<&serde_json::Value> = events
        .iter()
        .filter(|e| {
            e["type"] == "execve"
                && (e["rule"] == "execve_truncated"
                    || e["rule"].as_str().is_some_and(|r| r.contains("fileless")))
        })
        .collect();
    assert!(refused.len() >= 2, "{events:?}");
    assert!(
        refused.iter().all(|e| e["explained"] == true),
        "{refused:?}"
    );
}

/// Issue 62: the batches ordinary tools make run under agent-default:
/// `find -exec {} +` over a whole tree and `xargs` over 5,000 names fill
/// argvs of 128 KiB (thousands of entries), which the old `max_argc` of
/// 1000 refused as `execve_truncated`.
#[test]
fn find_exec_plus_and_xargs_batches_run_under_agent_default() {
    if !require_root("find_exec_plus_and_xargs_batches_run_under_agent_default") {
        return;
    }
    let policy = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../etc/agentsh/policies/agent-default.yaml"
    ))
    .unwrap();
    let mut s = Sandbox::new(&policy, None);
    let f = s.sh(
        "find /usr/share -type f -exec cat {} + >/dev/null; echo find=$?; \
         seq 1 5000 | sed 's/^/name-/' | xargs sh -c 'echo batch=$#' sh | sort -t= -k2 -n | tail -1; \
         seq 1 5000 | xargs echo | wc -w",
    );
    let out = f.stdout.clone();
    assert!(out.contains("find=0"), "{f:?}");
    assert!(
        out.lines()
            .find_map(|l| l.strip_prefix("batch="))
            .and_then(|n| n.trim().parse::<usize>().ok())
            .is_some_and(|n| n > 1000),
        "one xargs batch above the old limit of 1000: {f:?}"
    );
    assert_eq!(out.lines().last().map(str::trim), Some("5000"), "{f:?}");
    assert!(!f.stderr.contains("execve_truncated"), "{f:?}");
    let truncated = s
        .events()
        .into_iter()
        .filter(|e| e["rule"] == "execve_truncated")
        .count();
    assert_eq!(truncated, 0);
}

/// An allow-list's refusal (issue 45) says what is missing and how to add
/// it: not only `tar denied (rule default)`.
#[test]
fn an_allow_list_refusal_names_the_missing_program_and_what_to_add() {
    if !require_root("an_allow_list_refusal_names_the_missing_program_and_what_to_add") {
        return;
    }
    let policy = "name: only-ls\ndefault: deny\ncommand_rules:\n  - name: shells-and-ls\n    \
                  commands: [sh, dash, bash, ls]\n    decision: allow\n";
    let mut s = Sandbox::new(policy, None);
    let f = s.sh("ls / >/dev/null; tar --version; echo rc=$?");
    assert!(f.stdout.contains("rc=126"), "{f:?}");
    assert!(
        f.stderr.contains(
            "agentsh: tar denied (rule default): no rule of policy only-ls allows /usr/bin/tar at \
             depth 1 (default: deny); to allow it, add /usr/bin/tar to an allow rule's commands"
        ),
        "{f:?}"
    );
}

/// A write Landlock refuses (issue 41) is explained under the notify
/// backend: one line on the caller's stderr naming the path and the right,
/// the same errno as Landlock's, a `file` event naming the path; what the
/// policy allows (the workspace, /tmp, a rename within it) runs untouched,
/// and so does a read-only open of a file it may not write.
fn refused_writes(uid: Option<u32>, config: &str) {
    let mut s = Sandbox::with_config(agentsh_tests::sandbox::AGENT_DEFAULT, uid, config);
    let script = "echo x > /etc/agentsh-probe; echo rc=$?; \
                  mkdir /usr/agentsh-probe-dir; echo rc=$?; \
                  python3 -c 'import os\ntry: os.rename(\"/tmp/agentsh-a-'$$'\", \"/etc/agentsh-renamed\")\nexcept OSError as e: print(\"errno\", e.errno)' ; \
                  cd /srv/ws && echo ok > made.txt && mv made.txt moved.txt && cat moved.txt \
                  && echo t > /tmp/agentsh-w-$$ && rm /tmp/agentsh-w-$$ && cat /etc/hostname >/dev/null && echo fine";
    let mark = s.mark();
    // Names of this shell's own in the shared /tmp: the tests run side by
    // side, as root and as nobody.
    let f = s.sh(&format!(
        "touch /tmp/agentsh-a-$$; {script}; rm -f /tmp/agentsh-a-$$"
    ));
    let who = format!("{uid:?}");
    assert!(f.stdout.contains("ok\nfine"), "{who}: allowed work: {f:?}");
    assert_eq!(f.stdout.matches("rc=").count(), 2, "{who}: {f:?}");
    assert!(
        !f.stdout.contains("rc=0"),
        "{who}: a refused write ran: {f:?}"
    );
    assert!(
        f.stdout.contains("errno 13"),
        "{who}: the rename's errno: {f:?}"
    );
    for path in [
        "/etc/agentsh-probe",
        "/usr/agentsh-probe-dir",
        "/etc/agentsh-renamed",
    ] {
        let lines: Vec<&str> = f
            .stderr
            .lines()
            .filter(|l| l.starts_with("agentsh: ") && l.contains(path))
            .collect();
        assert_eq!(lines.len(), 1, "{who}: {path} not explained once: {f:?}");
        assert!(lines[0].contains("denied"), "{who}: {lines:?}");
    }
    assert!(!s.host_path("/etc/agentsh-probe").exists());
    let events = s.events();
    let files: Vec<&serde_json::Value> = events
        .iter()
        .filter(|e| e["type"] == "file" && e["id"].as_u64().is_some_and(|i| i > mark))
        .collect();
    for path in ["/etc/agentsh-probe", "/usr/agentsh-probe-dir"] {
        assert!(
            files
                .iter()
                .any(|e| e["path"] == path && e["decision"] == "deny"),
            "{who}: no file event for {path}: {files:?}"
        );
    }
    assert!(
        !files.iter().any(|e| e["path"]
            .as_str()
            .is_some_and(|p| p.contains("made.txt") || p.contains("/tmp/agentsh-w-"))),
        "{who}: an allowed write was refused: {files:?}"
    );
}

#[test]
fn refused_writes_are_explained_as_root() {
    if !require_root("refused_writes_are_explained_as_root") {
        return;
    }
    refused_writes(None, "");
}

/// At E2B's Landlock ABI 2 (no truncate right: an open with `O_TRUNC` and
/// no write access is refused by the filter, and the explained opens are
/// ruled apart from it).
#[test]
fn refused_writes_are_explained_at_landlock_abi_2() {
    if !require_root("refused_writes_are_explained_at_landlock_abi_2") {
        return;
    }
    refused_writes(None, "landlock:\n  max_abi: 2\n");
    refused_writes(Some(NOBODY), "landlock:\n  max_abi: 2\n");
}

#[test]
fn refused_writes_are_explained_as_nobody() {
    if !require_root("refused_writes_are_explained_as_nobody") {
        return;
    }
    refused_writes(Some(NOBODY), "");
}

/// i386 calls that change files (`int 0x80` from a 64-bit program) reach
/// the supervisor too, which does not read them: they go on to the kernel,
/// where Landlock decides (a creat in the workspace runs, one in /etc is
/// refused), never refused for being of another ABI.
const I386_CREAT_C: &str = r#"
#include <stdio.h>
#include <string.h>
#include <stdint.h>
#include <sys/mman.h>
static long creat32(const char *path) {
    char *p = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_32BIT, -1, 0);
    strcpy(p, path);
    long ret;
    __asm__ volatile ("int $0x80" : "=a"(ret) : "a"(8), "b"((uint32_t)(uintptr_t)p), "c"(0644) : "memory");
    return ret;
}
int main(void) {
    printf("ws %ld\n", creat32("/srv/ws/i386.txt"));
    printf("etc %ld\n", creat32("/etc/agentsh-i386.txt"));
    return 0;
}
"#;

#[test]
fn i386_writes_go_on_to_landlock() {
    if !require_root("i386_writes_go_on_to_landlock") || !cfg!(target_arch = "x86_64") {
        return;
    }
    let mut s = Sandbox::new(agentsh_tests::sandbox::AGENT_DEFAULT, None);
    let f = s.sh(&format!(
        "cd /srv/ws && cat > c32.c <<'EOF'\n{I386_CREAT_C}\nEOF\ncc -o c32 c32.c && ./c32"
    ));
    assert_eq!(f.code, Some(0), "{f:?}");
    let fd: i64 = f
        .stdout
        .lines()
        .find_map(|l| l.strip_prefix("ws "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(-1);
    assert!(fd >= 0, "a creat in the workspace was refused: {f:?}");
    assert!(
        f.stdout.contains(&format!("etc -{}", libc::EACCES)),
        "{f:?}"
    );
    assert!(s.host_path("/srv/ws/i386.txt").exists());
    assert!(!s.host_path("/etc/agentsh-i386.txt").exists());
}
