//! Step 11, gVisor workloads (what a Modal user feels): whole jobs under
//! the ptrace backend beside the same jobs unsupervised, in the same gVisor
//! sandbox root. `runsc --network=none do` runs over this machine's root
//! (every write to the sandbox's overlay), so both sides have the same
//! programs: the supervised side is `agentsh wrap --policy agent-observe`
//! (every program runs, so no approval waits; agentsh's own files,
//! the credential files and every destination judged, as under
//! agent-default) running the job's script, the floor the same script with
//! no agentsh. The jobs: `tar -x` of 3,000 small files, a local `git clone
//! --no-hardlinks` of this repository, 20 python start-ups importing a
//! dozen stdlib modules, 200 `sh -c true`, 200 loopback connects (oploop).
//! A third side runs the same policy with `tracer_reads: unjudged` (the
//! faster mode a policy may choose: opens for reading only do not stop).
//! A fourth side is the floor: `bench/stopfloor.c` stops the same calls
//! (every path call, every open but `O_PATH` ones, exec, connect, and the
//! fork/clone/exec events) and resumes each at once, judging nothing: what
//! the stops alone cost in this runsc, which no tracer work can go below.
//! Each job is timed inside the sandbox (its own clock: the sandbox's and
//! the server's start-up are not in it). Sides alternate, the order
//! swapping each round. Every side runs under the installed runsc, then
//! under each `--runsc` (bench/run.sh fetches a current build: the
//! installed 2022 build's ptrace platform makes every sandbox syscall 10
//! to 25 times slower than today's default, systrap, the unsupervised
//! side's too, which flatters the ratios). The supervised sides also
//! report the tracer's time a seccomp stop, from its stop clock's log
//! lines (`trace/stopclock.rs`; the log's state directory is made in the
//! sandbox's overlay). Skipped, with a line, where runsc or git is
//! missing; a job whose program is missing (python3) is left out, said.
//! Fails unless each supervised run really was traced and every job ran.

use crate::report::{stats, Report};
use crate::timer::{Samples, Spec};
use crate::workload::{entry, s};
use agentsh_tests::server::bin;
use std::path::Path;
use std::process::Command;

/// The jobs: (label stem, shell text; `{X}` filled in by [`script`]).
const JOBS: [(&str, &str); 5] = [
    (
        "tar -x of 3,000 files",
        "mkdir \"$d/x\" && tar -xf {TAR} -C \"$d/x\"",
    ),
    (
        "git clone of this repository",
        "git clone -q --no-hardlinks {REPO} \"$d/c\"",
    ),
    (
        "20 python start-ups",
        "i=0; while [ $i -lt 20 ]; do {PY} -c 'import json, re, os, sys, subprocess, pathlib, \
         collections, itertools, functools, typing, datetime, hashlib' || exit 1; i=$((i+1)); done",
    ),
    (
        "200 sh -c true",
        "i=0; while [ $i -lt 200 ]; do sh -c true || exit 1; i=$((i+1)); done",
    ),
    (
        "200 loopback connects",
        "{OPLOOP} connect 200 5173,3000,4000,5000,8000,8888,9000",
    ),
];

/// Step 11 (see the module doc).
pub fn gvisor_work(
    rep: &mut Report,
    ws: &Path,
    quick: bool,
    others: &[std::path::PathBuf],
) -> Result<(), String> {
    rep.line("\n### 11. gVisor (Modal): whole jobs under the ptrace backend, beside the same jobs unsupervised\n");
    let Some(runsc) = ["/usr/bin/runsc", "/usr/sbin/runsc", "/usr/local/bin/runsc"]
        .into_iter()
        .find(|p| Path::new(p).exists())
    else {
        rep.line("Skipped: runsc (gVisor) is not installed (tests/setup.sh installs it)");
        return Ok(());
    };
    let Some(git) = which("git") else {
        rep.line("Skipped: git is not installed");
        return Ok(());
    };
    let _ = git;
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .ok_or("the repository's root")?
        .to_path_buf();
    let dir = ws.join("gvisor-work");
    std::fs::create_dir_all(dir.join("files")).map_err(|e| format!("{}: {e}", dir.display()))?;
    for i in 0..3000 {
        std::fs::write(dir.join(format!("files/f{i}.txt")), format!("file {i}\n"))
            .map_err(|e| format!("a file to pack: {e}"))?;
    }
    let tar = dir.join("files.tar");
    run(Command::new("tar")
        .arg("-cf")
        .arg(&tar)
        .arg("-C")
        .arg(dir.join("files"))
        .arg("."))?;
    // The floor: the same calls stopped, nothing judged (bench/stopfloor.c).
    let floor = dir.join("stopfloor");
    run(Command::new("cc")
        .args(["-O2", "-static", "-o"])
        .arg(&floor)
        .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/stopfloor.c")))?;
    let oploop = dir.join("oploop");
    run(Command::new("cc")
        .args(["-O2", "-static", "-o"])
        .arg(&oploop)
        .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/oploop.c")))?;
    let python = ["/usr/bin/python3", "/usr/local/bin/python3"]
        .into_iter()
        .find(|p| Path::new(p).exists());
    if python.is_none() {
        rep.line("(python3 is not installed: its job is left out)");
    }
    let jobs: Vec<(&str, String)> = JOBS
        .iter()
        .filter(|(stem, _)| python.is_some() || !stem.contains("python"))
        .map(|(stem, text)| {
            let text = text
                .replace("{TAR}", &tar.display().to_string())
                .replace("{REPO}", &repo.display().to_string())
                .replace("{PY}", python.unwrap_or("python3"))
                .replace("{OPLOOP}", &oploop.display().to_string());
            (*stem, text)
        })
        .collect();
    let script = dir.join("jobs.sh");
    std::fs::write(&script, script_text(&jobs))
        .map_err(|e| format!("{}: {e}", script.display()))?;
    let agentsh = bin("agentsh");
    let observe = repo.join("etc/agentsh/policies/agent-observe.yaml");
    let observe =
        std::fs::read_to_string(&observe).map_err(|e| format!("{}: {e}", observe.display()))?;
    let unjudged = dir.join("observe-reads-unjudged.yaml");
    std::fs::write(
        &unjudged,
        format!(
            "{}\ntracer_reads: unjudged\n",
            observe.replace("name: agent-observe", "name: observe-reads-unjudged")
        ),
    )
    .map_err(|e| format!("{}: {e}", unjudged.display()))?;
    let unjudged = unjudged.display().to_string();
    let mut runscs = vec![runsc.to_string()];
    runscs.extend(others.iter().map(|p| p.display().to_string()));
    for runsc in &runscs {
        let version = Command::new(runsc)
            .arg("--version")
            .output()
            .map(|o| {
                String::from_utf8_lossy(&o.stdout)
                    .lines()
                    .next()
                    .unwrap_or("")
                    .to_string()
            })
            .map_err(|e| format!("{runsc}: {e}"))?;
        rep.line(&format!(
            "\n#### Under {version} ({}, its default platform)\n",
            if runsc.starts_with("/usr/") {
                "installed"
            } else {
                "fetched by bench/run.sh"
            }
        ));
        under(
            rep,
            &Under {
                runsc,
                dir: &dir,
                script: &script,
                agentsh: &agentsh,
                unjudged: &unjudged,
                floor: &floor,
                jobs: &jobs,
                quick,
            },
        )?;
    }
    Ok(())
}

/// What one runsc's pass needs.
struct Under<'a> {
    runsc: &'a str,
    dir: &'a Path,
    script: &'a Path,
    agentsh: &'a Path,
    unjudged: &'a str,
    /// bench/stopfloor, built.
    floor: &'a Path,
    jobs: &'a [(&'a str, String)],
    quick: bool,
}

/// What runs a side's job script.
#[derive(Clone, Copy, PartialEq)]
enum Side<'a> {
    /// `agentsh wrap` with this policy.
    Wrap(&'a str),
    /// The stop floor: the calls agentsh's filter stops under the tracer,
    /// stopped and resumed at once (no judging).
    Floor,
    /// No tracer.
    Bare,
}

/// The jobs, each side alternating, under one runsc; the ratios, and the
/// tracer's time a stop (its own clock, from its log).
fn under(rep: &mut Report, u: &Under) -> Result<(), String> {
    let Under {
        runsc,
        dir,
        script,
        agentsh,
        unjudged,
        floor,
        jobs,
        quick,
    } = *u;
    let sides: [(&str, Side); 4] = [
        ("ptrace", Side::Wrap("agent-observe")),
        (UNJUDGED, Side::Wrap(unjudged)),
        (FLOOR, Side::Floor),
        ("unsupervised", Side::Bare),
    ];
    let rounds = if quick { 2 } else { 5 };
    let mut samples = Samples::new();
    let mut stops: std::collections::BTreeMap<&str, Vec<StopLine>> = Default::default();
    let mut kinds: std::collections::BTreeMap<&str, Kinds> = Default::default();
    let mut entries = Vec::new();
    for (stem, _) in jobs {
        for (side, _) in &sides {
            entries.push(entry(&label(stem, side), s(&[]), None));
        }
    }
    for round in 0..rounds {
        let mut order = sides;
        if round % 2 == 1 {
            order.reverse();
        }
        for (side, how) in order {
            let supervised = how != Side::Bare;
            let mut c = Command::new("timeout");
            c.args(["900", runsc, "--network=none", "do", "-force-overlay=true"]);
            match how {
                Side::Wrap(policy) => {
                    // wrap's server logs in a state directory of the
                    // sandbox's own; its stop clock's lines are printed
                    // after the job.
                    c.args(["/bin/sh", "-c", STOPS_AFTER, "sh"])
                        .arg(agentsh)
                        .arg(policy);
                }
                Side::Floor => {
                    c.arg(floor);
                }
                Side::Bare => {}
            }
            c.arg("/bin/sh").arg(script).current_dir(dir);
            let o = c.output().map_err(|e| format!("runsc: {e}"))?;
            let out = String::from_utf8_lossy(&o.stdout).into_owned();
            let traced = out
                .lines()
                .any(|l| l.starts_with("traced ") && l != "traced 0");
            if supervised != traced || !o.status.success() {
                return Err(format!(
                    "the {side} side (traced: {traced}): {out}\n{}",
                    String::from_utf8_lossy(&o.stderr)
                ));
            }
            if matches!(how, Side::Wrap(_)) {
                stops.entry(side).or_default().extend(stop_lines(&out));
                add_kinds(kinds.entry(side).or_default(), &out);
            }
            for (stem, _) in jobs {
                let ns = out
                    .lines()
                    .find_map(|l| l.strip_prefix(&format!("{stem}: ")))
                    .and_then(|n| n.trim().parse::<u64>().ok())
                    .ok_or_else(|| format!("{stem} ({side}) did not finish: {out}"))?;
                samples
                    .entry(label(stem, side))
                    .or_default()
                    .push(ns.max(1));
            }
        }
    }
    let spec = Spec {
        rounds,
        warmup: 0,
        entries,
    };
    let ratios: Vec<(String, String)> = jobs
        .iter()
        .flat_map(|(stem, _)| {
            [
                (label(stem, "ptrace"), label(stem, "unsupervised")),
                (label(stem, UNJUDGED), label(stem, "unsupervised")),
                (label(stem, FLOOR), label(stem, "unsupervised")),
                (label(stem, "ptrace"), label(stem, FLOOR)),
            ]
        })
        .collect();
    let refs: Vec<(&str, &str, &str)> = ratios
        .iter()
        .map(|(a, b)| (a.as_str(), b.as_str(), ""))
        .collect();
    rep.line("Figures are one job (its own clock, inside the sandbox), in the same runsc root.");
    rep.pair(
        "11. gVisor: whole jobs",
        "gvisor_jobs",
        &spec,
        &samples,
        &refs,
    );
    let ratio = |stem: &str, side: &str| {
        let a = stats(&samples[&label(stem, side)]).median_us;
        let b = stats(&samples[&label(stem, "unsupervised")]).median_us;
        format!("{stem} {:.2}×", a / b.max(1.0))
    };
    for (side, what) in [
        ("ptrace", "Supervised"),
        (UNJUDGED, "With tracer_reads: unjudged"),
        (
            FLOOR,
            "The stop floor (the same calls stopped, nothing judged)",
        ),
    ] {
        let line: Vec<String> = jobs.iter().map(|(stem, _)| ratio(stem, side)).collect();
        rep.line(&format!("\n{what} over unsupervised: {}.", line.join(", ")));
    }
    for (side, lines) in &stops {
        rep.line(&format!("\n{}", stop_summary(side, lines)));
        if let Some(k) = kinds.get(side) {
            rep.line(&format!("\n{}", kinds_summary(side, k)));
        }
    }
    Ok(())
}

/// The supervised side's outer script: wrap the job script ($3) with the
/// policy ($2) under agentsh ($1), a fresh state directory (in the
/// sandbox's overlay, gone with it; not under /tmp, which wrap refuses) and the log
/// filter that turns on only the tracer's stop clock, then print the clock's
/// lines of its log; the job's status kept.
const STOPS_AFTER: &str =
    "s=/var/lib/agentsh-bench/$$ && mkdir -p \"$s\" && a=$1 p=$2 && shift 2 && \
XDG_STATE_HOME=$s AGENTSH_LOG=info,agentsh::supervisor::backend::trace::stopclock=debug \
\"$a\" wrap --policy \"$p\" -- \"$@\"; rc=$?; \
grep -h -e 'time a seccomp stop' -e 'time a stop took by kind' \"$s\"/agentsh/*.log | sed 's/^/stopclock /'; exit $rc";

/// One stop clock line: (stops, median µs, p90 µs, mean µs).
type StopLine = (u64, u64, u64, u64);

/// The stop clock's lines in a side's output (one a tree).
fn stop_lines(out: &str) -> Vec<StopLine> {
    out.lines()
        .filter(|l| l.starts_with("stopclock "))
        .filter_map(|l| {
            let field = |k: &str| {
                l.split_whitespace()
                    .find_map(|w| w.strip_prefix(&format!("{k}=")))
                    .and_then(|v| v.parse::<u64>().ok())
            };
            Some((
                field("stops")?,
                field("median_us")?,
                field("p90_us")?,
                field("mean_us")?,
            ))
        })
        .collect()
}

/// The tracer's time a stop over a side's runs: the tree with the most
/// stops of each run (the job script's), its median and p90 (the median
/// over runs), and the mean weighted by stops over every tree.
fn stop_summary(side: &str, lines: &[StopLine]) -> String {
    if lines.is_empty() {
        return format!("Tracer time a seccomp stop ({side}): no stop clock line in its log");
    }
    let total: u64 = lines.iter().map(|l| l.0).sum();
    let mean = lines.iter().map(|l| l.0 * l.3).sum::<u64>() / total.max(1);
    let mut medians: Vec<u64> = lines.iter().filter(|l| l.0 >= 1000).map(|l| l.1).collect();
    let mut p90s: Vec<u64> = lines.iter().filter(|l| l.0 >= 1000).map(|l| l.2).collect();
    medians.sort_unstable();
    p90s.sort_unstable();
    let mid = |v: &[u64]| {
        v.get(v.len() / 2)
            .map_or("-".to_string(), |x| format!("{x} µs"))
    };
    format!(
        "Tracer time a seccomp stop ({side}; waitpid's return to resumed, its own counter): \
         {total} stops, mean **{mean} µs**; in the job scripts' trees (≥ 1,000 stops) median {}, p90 {}.",
        mid(&medians),
        mid(&p90s)
    )
}

/// The stop clock's breakdown summed over a side's runs: kind → (stops,
/// µs in all).
type Kinds = std::collections::BTreeMap<String, (u64, u64)>;

/// Adds the breakdown lines of one run's output (`by_kind=exec=N/MEAN ...`,
/// one a tree) to `k`.
fn add_kinds(k: &mut Kinds, out: &str) {
    for l in out.lines().filter(|l| l.starts_with("stopclock ")) {
        let Some(rest) = l.split("by_kind=").nth(1) else {
            continue;
        };
        for part in rest.split_whitespace() {
            let Some((name, figures)) = part.split_once('=') else {
                continue;
            };
            let Some((n, mean)) = figures.split_once('/') else {
                continue;
            };
            if let (Ok(n), Ok(mean)) = (n.parse::<u64>(), mean.parse::<u64>()) {
                let e = k.entry(name.to_string()).or_default();
                e.0 += n;
                e.1 += n * mean;
            }
        }
    }
}

/// The breakdown as a report line.
fn kinds_summary(side: &str, k: &Kinds) -> String {
    let parts: Vec<String> = k
        .iter()
        .map(|(name, (n, us))| format!("{name} {n} stops, mean {} µs", us / (*n).max(1)))
        .collect();
    format!(
        "Tracer time a stop by kind ({side}; every tree of every run; exec and fork events \
         are ptrace events, not seccomp stops): {}.",
        parts.join("; ")
    )
}

/// The side whose policy sets `tracer_reads: unjudged`.
const UNJUDGED: &str = "ptrace, reads unjudged";

/// The side under bench/stopfloor: what the stops alone cost in this runsc.
const FLOOR: &str = "stop floor";

fn label(stem: &str, side: &str) -> String {
    format!("{stem}, {side}")
}

/// The script one side runs: whether it is traced, then each job timed by
/// the sandbox's clock ("STEM: NS"), each in a fresh directory; a job that
/// fails ends the script with its status.
fn script_text(jobs: &[(&str, String)]) -> String {
    let mut s = String::from(
        "set -u\nprintf 'traced %s\\n' \"$(awk '/TracerPid/ {print $2}' /proc/$$/status)\"\n",
    );
    for (stem, text) in jobs {
        s.push_str(&format!(
            "d=$(mktemp -d) || exit 1\ns0=$(date +%s%N)\n( {text} ) >/dev/null 2>&1 || {{ echo 'failed: {stem}'; exit 1; }}\ns1=$(date +%s%N)\necho \"{stem}: $((s1 - s0))\"\nrm -rf \"$d\"\n"
        ));
    }
    s
}

fn which(name: &str) -> Option<String> {
    let o = Command::new("sh")
        .args(["-c", &format!("command -v {name}")])
        .output()
        .ok()?;
    let p = String::from_utf8_lossy(&o.stdout).trim().to_string();
    (o.status.success() && !p.is_empty()).then_some(p)
}

fn run(c: &mut Command) -> Result<(), String> {
    let o = c.output().map_err(|e| format!("{c:?}: {e}"))?;
    if o.status.success() {
        Ok(())
    } else {
        Err(format!("{c:?}: {}", String::from_utf8_lossy(&o.stderr)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_stop_clocks_lines_are_read_and_summed_by_stops() {
        let out = "traced 12\ntar: 5\nstopclock 2026-12-03T12:00:00Z DEBUG agentsh::supervisor::backend::trace::stopclock: tracer: time a seccomp stop took, waitpid's return to resumed stops=100 median_us=50 p90_us=90 mean_us=60\n\
                   stopclock x stops=3000 median_us=140 p90_us=400 mean_us=200\nstopclock broken stops=x\n";
        let lines = stop_lines(out);
        assert_eq!(lines, vec![(100, 50, 90, 60), (3000, 140, 400, 200)]);
        let s = stop_summary("ptrace", &lines);
        assert!(s.contains("3100 stops"), "{s}");
        assert!(s.contains("mean **195 µs**"), "weighted by stops: {s}");
        assert!(
            s.contains("median 140 µs, p90 400 µs"),
            "only the job tree's: {s}"
        );
        assert!(stop_summary("ptrace", &[]).contains("no stop clock line"));
    }

    #[test]
    fn the_breakdown_lines_are_summed_by_kind() {
        let out = concat!(
            "stopclock x DEBUG ...: tracer: time a stop took by kind (stops/mean µs) ",
            "by_kind=exec=2/100 file=10/50\n",
            "stopclock y by_kind=exec=1/400 fork_event=3/20\n",
            "stopclock z by_kind=bad\n"
        );
        let mut k = Kinds::new();
        add_kinds(&mut k, out);
        assert_eq!(k["exec"], (3, 600));
        assert_eq!(k["file"], (10, 500));
        let s = kinds_summary("ptrace", &k);
        assert!(s.contains("exec 3 stops, mean 200 µs"), "{s}");
        assert!(s.contains("fork_event 3 stops, mean 20 µs"), "{s}");
    }
}
