//! The VM harness itself (`agentsh_tests::vm`): Debian's 6.1 kernel boots,
//! has cgroup v2 with the pids, memory and cpu controllers, runs a script as
//! root with the environment asked for, passes its output and exit code out,
//! and lets it write anywhere without anything reaching this machine.
//!
//! Needs root (the cached image lives in `/var/cache`) and qemu; the first
//! run downloads the kernel's package (a Debian mirror).

// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

use agentsh_tests::server::require_root;
use agentsh_tests::vm;
use std::path::Path;
use std::time::{Duration, Instant};

/// Long: one boot (5 s) checks everything in turn rather than one boot per
/// property.
#[test]
fn the_vm_runs_a_real_6_1_kernel_with_cgroup_v2() {
    if !require_root("the_vm_runs_a_real_6_1_kernel_with_cgroup_v2") {
        return;
    }
    if let Err(why) = vm::qemu() {
        assert!(std::env::var("CI").as_deref() != Ok("true"), "{why}");
        eprintln!("skipped: {why}");
        return;
    }
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let probe = format!("vm-overlay-probe-{}", std::process::id());
    let etc_file = Path::new("/etc").join(&probe);
    let repo_dir = repo.join("target").join(&probe);
    let repo_file = repo_dir.join("file");
    assert!(!etc_file.exists() && !repo_dir.exists(), "stale {probe}");
    let script = format!(
        r#"set -e
echo "release=$(uname -r)"
echo "controllers=$(cat /sys/fs/cgroup/cgroup.controllers)"
echo "uid=$(id -u) cwd=$(pwd) home=$HOME ci=$CI"
echo "probe=$AGENTSH_VM_PROBE"
echo written >{etc}
mkdir -p {dir}
echo written >{file}
echo "etc=$(cat {etc}) repo=$(cat {file})"
echo "to stderr" >&2
exit 7
"#,
        etc = etc_file.display(),
        dir = repo_dir.display(),
        file = repo_file.display(),
    );
    let started = Instant::now();
    let run = vm::run(
        &script,
        &[("AGENTSH_VM_PROBE", "a b'c $HOME")],
        Duration::from_secs(180),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    eprintln!(
        "VM run: {:.1} s in qemu, {:.1} s in all",
        run.elapsed.as_secs_f64(),
        started.elapsed().as_secs_f64()
    );
    let what = format!(
        "code {}\nstdout:\n{}\nstderr:\n{}\nconsole:\n{}",
        run.code, run.stdout, run.stderr, run.console
    );
    let field = |key: &str| -> String {
        run.stdout
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{key}=")))
            .unwrap_or_else(|| panic!("no {key}= line\n{what}"))
            .to_string()
    };
    let release = field("release");
    assert!(release.starts_with("6.1."), "kernel {release}\n{what}");
    assert_eq!(release, vm::kernel_release().unwrap(), "{what}");
    let controllers = field("controllers");
    for c in ["pids", "memory", "cpu"] {
        assert!(
            controllers.split_whitespace().any(|x| x == c),
            "no {c} controller in {controllers:?}\n{what}"
        );
    }
    assert!(
        run.stdout.contains("uid=0 cwd=/ home=/root ci=true\n"),
        "{what}"
    );
    assert_eq!(field("probe"), "a b'c $HOME", "{what}");
    assert!(run.stdout.contains("etc=written repo=written\n"), "{what}");
    assert_eq!(run.stderr, "to stderr\n", "{what}");
    assert_eq!(run.code, 7, "{what}");
    // The writes went to the VM's overlay, not to this machine.
    assert!(
        !etc_file.exists(),
        "{} reached the host",
        etc_file.display()
    );
    assert!(
        !repo_dir.exists(),
        "{} reached the host",
        repo_dir.display()
    );
}
