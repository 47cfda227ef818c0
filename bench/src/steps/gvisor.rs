//! Step 10, gVisor (what Modal runs): the cost of a call under the ptrace
//! backend, per call, side by side with the same call unsupervised in the
//! same container. The Modal recipe as written, in podman with `runsc`
//! (the tests' image, `agentsh_tests::podman`); `oploop` (bench/oploop.c,
//! static) times N calls of one kind in a loop and prints the mean: read
//! opens, creating opens (the tracer judges every path call there: no
//! Landlock), fork + exec, and a loopback TCP connect (judged where it
//! stops by agent-default's egress) with its accept. The supervised side is `podman exec CTR sh
//! -c 'oploop ...'` (a shell the SDK would start: traced), the floor is
//! `podman exec CTR oploop ...` (no shell: nothing supervises it). Sides
//! alternate round by round. Skipped, with a line, where podman or runsc
//! is missing. Fails unless the supervised side really was traced.

use crate::report::{fmt_us, stats, Report};
use crate::timer::{Samples, Spec};
use crate::workload::{entry, s};
use agentsh_tests::podman::{missing, text, Container, Image, Runtime};
use agentsh_tests::recipes::{dockerfile_runs, one_line};
use agentsh_tests::rootfs::BOOKWORM_PROGRAMS;
use std::path::Path;
use std::process::Command;

/// The calls timed: (label stem, oploop's mode, N, its argument).
/// The connect goes to a loopback port agent-default's `local-dev-servers`
/// allows and its `network_rules` keep open (the first one free: runsc
/// shares this machine's network), so each is judged and made.
const CALLS: [(&str, &str, usize, &str); 4] = [
    ("read open", "open", 2000, "/etc/passwd"),
    ("create open", "create", 2000, "/tmp"),
    ("fork + exec", "exec", 200, "/bin/true"),
    (
        "loopback connect",
        "connect",
        1000,
        "5173,3000,4000,5000,8000,8888,9000",
    ),
];

/// Step 10 (see the module doc).
pub fn gvisor(rep: &mut Report, ws: &Path, quick: bool) -> Result<(), String> {
    rep.line("\n### 10. gVisor (Modal): the ptrace backend per call, beside the same call unsupervised\n");
    if let Some(why) = missing() {
        rep.line(&format!("Skipped: {why}"));
        return Ok(());
    }
    let oploop = ws.join("bin/oploop");
    let cc = Command::new("cc")
        .args(["-O2", "-static", "-o"])
        .arg(&oploop)
        .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/oploop.c"))
        .output()
        .map_err(|e| format!("cc oploop.c: {e}"))?;
    if !cc.status.success() {
        return Err(format!("cc oploop.c: {}", text(&cc)));
    }
    // The root with python3 and node, so the recipe's `--programs sdk`
    // stands the shim in for python (its pair below).
    let image = Image::build_on(
        &BOOKWORM_PROGRAMS,
        "bench-modal",
        &dockerfile_runs("modal-image"),
        &[(&oploop, "/usr/local/bin/oploop")],
    );
    let start = one_line("modal-start");
    let argv: Vec<&str> = start.split_whitespace().collect();
    let ctr = Container::start(&image, Runtime::Runsc, &argv);
    let ready = ctr.exec(None, &["agentsh", "ready", "--timeout", "120"]);
    if !ready.status.success() {
        return Err(format!("agentsh ready in runsc: {}", text(&ready)));
    }
    let traced = ctr.sh(None, "grep TracerPid /proc/$$/status");
    if String::from_utf8_lossy(&traced.stdout).contains("TracerPid:\t0") || !traced.status.success()
    {
        return Err(format!(
            "the supervised side is not traced: {}",
            text(&traced)
        ));
    }
    let rounds = if quick { 3 } else { 10 };
    let mut samples = Samples::new();
    let mut entries = Vec::new();
    for (stem, mode, n, arg) in CALLS {
        let (sup, floor) = (label(stem, n, "ptrace"), label(stem, n, "unsupervised"));
        entries.push(entry(&sup, s(&[]), None));
        entries.push(entry(&floor, s(&[]), None));
        let n = n.to_string();
        for _ in 0..rounds {
            let script = format!("exec oploop {mode} {n} {arg}");
            let a = loop_ns(&ctr.sh(None, &script), &sup, &n)?;
            let b = loop_ns(&ctr.exec(None, &["oploop", mode, &n, arg]), &floor, &n)?;
            samples.entry(sup.clone()).or_default().push(a);
            samples.entry(floor.clone()).or_default().push(b);
        }
    }
    let spec = Spec {
        rounds,
        warmup: 0,
        entries,
    };
    let ratios: Vec<(String, String)> = CALLS
        .iter()
        .map(|&(stem, _, n, _)| (label(stem, n, "ptrace"), label(stem, n, "unsupervised")))
        .collect();
    let refs: Vec<(&str, &str, &str)> = ratios
        .iter()
        .map(|(a, b)| (a.as_str(), b.as_str(), ""))
        .collect();
    rep.line("Figures are one loop of N calls (its own clock), in the same runsc container.");
    rep.pair(
        "10. gVisor: loops of one call",
        "gvisor_calls",
        &spec,
        &samples,
        &refs,
    );
    let cost = |stem: &str| {
        let &(_, _, n, _) = CALLS
            .iter()
            .find(|c| c.0 == stem)
            .expect("a call of the table");
        let sup = stats(&samples[&label(stem, n, "ptrace")]).median_us;
        let floor = stats(&samples[&label(stem, n, "unsupervised")]).median_us;
        fmt_us((sup - floor) / n as f64)
    };
    rep.line(&format!(
        "\nWhat supervision adds per call: {} per read open, {} per creating open, {} per fork + exec, {} per connect.",
        cost("read open"),
        cost("create open"),
        cost("fork + exec"),
        cost("loopback connect")
    ));
    nested_python(rep, &ctr, rounds)
}

/// Step 10b: python started inside a traced shell through the program
/// shim (`--programs sdk`: one more exec, of the static shim, which finds
/// the tree supervised and execs the real python) against the real python
/// started directly, and the real python with nothing supervising it.
fn nested_python(rep: &mut Report, ctr: &Container, rounds: usize) -> Result<(), String> {
    let dir = agentsh_proto::install::PROGRAMS_DIR;
    let own = ctr.exec(None, &["readlink", "-f", "/usr/bin/python3"]);
    let own = String::from_utf8_lossy(&own.stdout).trim().to_string();
    let Some(real) = own.rsplit('/').next().filter(|n| n.starts_with("python3")) else {
        rep.line("\n(no python3 in the image: step 10b is left out)");
        return Ok(());
    };
    let real = format!("{dir}/{real}");
    let n = "20";
    let sides = [
        (
            "python3 ×20, program shim, traced",
            "/usr/bin/python3",
            true,
        ),
        ("python3 ×20, real, traced", real.as_str(), true),
        ("python3 ×20, real, unsupervised", real.as_str(), false),
    ];
    let mut samples = Samples::new();
    for _ in 0..rounds {
        for (label, prog, traced) in sides {
            let o = if traced {
                ctr.sh(None, &format!("exec oploop exec {n} {prog}"))
            } else {
                ctr.exec(None, &["oploop", "exec", n, prog])
            };
            samples
                .entry(label.to_string())
                .or_default()
                .push(loop_ns(&o, label, n)?);
        }
    }
    let spec = Spec {
        rounds,
        warmup: 0,
        entries: sides
            .iter()
            .map(|(l, _, _)| entry(l, s(&[]), None))
            .collect(),
    };
    rep.pair(
        "10b. gVisor: python started in a traced shell, through the program shim (issue 60)",
        "gvisor_nested_python",
        &spec,
        &samples,
        &[
            (sides[0].0, sides[1].0, "≤ 1.2× (issue 60)"),
            (sides[1].0, sides[2].0, ""),
        ],
    );
    Ok(())
}

fn label(stem: &str, n: usize, side: &str) -> String {
    format!("{stem} ×{n}, {side}")
}

/// The loop's time in ns, as the report's samples are (oploop's mean per
/// call × N), or why not.
fn loop_ns(o: &std::process::Output, label: &str, n: &str) -> Result<u64, String> {
    let n: u64 = n.parse().unwrap_or(1);
    let out = String::from_utf8_lossy(&o.stdout);
    let ns: Option<u64> = out
        .split_whitespace()
        .skip_while(|w| *w != "ns_per_op")
        .nth(1)
        .and_then(|n| n.parse().ok());
    match ns {
        Some(ns) if o.status.success() => Ok((ns * n).max(1)),
        _ => Err(format!("{label}: {}", text(o))),
    }
}
