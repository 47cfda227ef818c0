//! Refusals explained to the caller (issue 27, `execve.explain: stderr`):
//! a refused exec's caller finds one line on its own stderr naming the
//! program, the rule and its message, once per command (a shell's PATH
//! retries add none), escaped; a stderr that would block gets nothing and
//! the refusal is answered at once. The exec event says `explained`.

// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

use agentsh_tests::sandbox::{Sandbox, NOBODY};
use agentsh_tests::server::require_root;

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
t = time.monotonic()
try:
    subprocess.run(["curl", "--full-pipe"], stderr=w)
    print("ran")
except PermissionError:
    print("refused", round(time.monotonic() - t, 3))
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
    assert!(secs < 10.0, "the refusal waited on the full pipe: {secs} s");
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
