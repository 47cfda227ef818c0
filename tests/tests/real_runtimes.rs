//! The cookbook's recipes in real container runtimes: podman with gVisor's
//! `runsc` (Modal's runtime: no seccomp user-notify, no Landlock, Yama's
//! `ptrace_scope` 1 emulated), with runc and podman's default capabilities
//! and seccomp profile, and privileged. The image is made from the
//! cookbook's image recipe as written, the container started with its start
//! recipe as written, and every command sent as the SDK sends it: `podman
//! exec CTR sh -c ...`, a sibling of the server, never its descendant. None
//! of these containers has `CAP_SYS_PTRACE` but the privileged one.

// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

use agentsh_tests::podman::{missing, text, Container, Image, Runtime};
use agentsh_tests::recipes::{dockerfile_runs, one_line};
use agentsh_tests::server::require_root;

/// Whether these tests can run here; under `CI=true` they must.
fn runtimes_here(name: &str) -> bool {
    if !require_root(name) {
        return false;
    }
    if let Some(why) = missing() {
        assert!(std::env::var("CI").as_deref() != Ok("true"), "{why}");
        eprintln!("skipped: {why}");
        return false;
    }
    true
}

/// The user an ordinary SDK command runs as, besides root.
const USER: u32 = 1000;

/// The Modal recipe (image and start command as written) under `runtime`.
fn modal(runtime: Runtime) -> (Image, Container) {
    let image = Image::build("modal", &dockerfile_runs("modal-image"));
    let start = one_line("modal-start");
    let argv: Vec<&str> = start.split_whitespace().collect();
    let ctr = Container::start(&image, runtime, &argv);
    // `agentsh ready`, run the way SDKs run commands, waits for the server
    // and then checks that a shell started so is supervised.
    let ready = ctr.exec(None, &["agentsh", "ready", "--timeout", "120"]);
    assert!(
        ready.status.success(),
        "agentsh ready: {}\nserver log:\n{}",
        text(&ready),
        ctr.logs()
    );
    (image, ctr)
}

/// What every recipe must give each SDK command, as root and as `user`:
/// the shell supervised (traced or filtered by agentsh), and a nested
/// program the policy denies refused with its reason on stderr (126).
fn sdk_commands_are_supervised(ctr: &Container) {
    for user in [None, Some(USER)] {
        let o = ctr.sh(
            user,
            "grep -E '^(TracerPid|Seccomp):' /proc/$$/status; id -u",
        );
        let out = String::from_utf8_lossy(&o.stdout).into_owned();
        assert!(o.status.success(), "{user:?}: {}", text(&o));
        assert!(
            out.contains(&user.unwrap_or(0).to_string()),
            "{user:?} ran as another user: {out}"
        );
        let traced = out
            .lines()
            .find_map(|l| l.strip_prefix("TracerPid:"))
            .is_some_and(|v| v.trim() != "0");
        let filtered = out
            .lines()
            .any(|l| l.starts_with("Seccomp:") && !l.contains('0'));
        assert!(traced || filtered, "{user:?}: not supervised: {out}");

        let o = ctr.sh(user, "sh -c 'su -c id root'");
        let err = String::from_utf8_lossy(&o.stderr).into_owned();
        assert_eq!(o.status.code(), Some(126), "{user:?}: {}", text(&o));
        assert!(
            err.contains("agentsh: su denied (rule deny-privilege-escalation)"),
            "{user:?}: the refusal is not explained: {err}"
        );
    }
}

#[test]
fn modal_recipe_in_gvisor_supervises_sibling_shells_without_cap_sys_ptrace() {
    if !runtimes_here("modal_recipe_in_gvisor_supervises_sibling_shells_without_cap_sys_ptrace") {
        return;
    }
    let (_image, ctr) = modal(Runtime::Runsc);
    let log = ctr.logs();
    assert!(
        log.contains("backend=ptrace") && log.contains("gvisor=true"),
        "not gVisor's ptrace backend:\n{log}"
    );
    let caps = ctr.exec(None, &["grep", "CapEff", "/proc/self/status"]);
    let eff = String::from_utf8_lossy(&caps.stdout);
    let mask = u64::from_str_radix(eff.split_whitespace().last().unwrap_or("0"), 16).unwrap();
    assert_eq!(
        mask & (1 << 19),
        0,
        "the container has CAP_SYS_PTRACE: {eff}"
    );
    sdk_commands_are_supervised(&ctr);
}

#[test]
fn modal_recipe_in_runc_with_podmans_default_profile_supervises_sibling_shells() {
    if !runtimes_here("modal_recipe_in_runc_with_podmans_default_profile_supervises_sibling_shells")
    {
        return;
    }
    let (_image, ctr) = modal(Runtime::Runc);
    sdk_commands_are_supervised(&ctr);
}

#[test]
fn modal_recipe_privileged_supervises_sibling_shells() {
    if !runtimes_here("modal_recipe_privileged_supervises_sibling_shells") {
        return;
    }
    let (_image, ctr) = modal(Runtime::Privileged);
    sdk_commands_are_supervised(&ctr);
}
