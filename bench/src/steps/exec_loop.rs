//! Step 3, a shell loop of 1000 `/bin/true`: supervised (its tree's install
//! included), unsupervised, under a bare user-notify filter (the kernel
//! mechanism alone), and under `agentsh wrap` (standalone: its own server
//! started and stopped in every run), and what each exec costs.

use super::Bench;
use crate::report::{fmt_us, stats, Report};
use crate::timer::{timed, Entry, Spec};
use crate::workload::{entry, s, LOOP_1000};

/// The session of the loop under `agentsh wrap`.
const WRAP_SESSION: &str = "bench-loop";

/// Step 3: the loop of 1000 execs supervised, unsupervised and under the
/// bare filter, and the cost per exec. Fails unless every exec of every
/// supervised run was audited.
pub fn exec_loop(rep: &mut Report, b: &Bench<'_>) -> Result<(), String> {
    let (shim_mnt, plain_mnt) = (b.shim_mnt, b.plain_mnt);
    let agentsh = agentsh_tests::server::bin("agentsh");
    let wrap_home = b.ws.join("wrap-home");
    std::fs::create_dir_all(&wrap_home).map_err(|e| format!("wrap's home: {e}"))?;
    let wrap_audit = wrap_home.join(format!(".local/state/agentsh/{WRAP_SESSION}.jsonl"));
    let _ = std::fs::remove_file(&wrap_audit);
    let spec = Spec {
        rounds: b.rounds.exec_loop,
        warmup: 1,
        entries: vec![
            entry(
                "loop supervised",
                s(&["/bin/sh", "-c", LOOP_1000]),
                Some(shim_mnt),
            ),
            entry(
                "loop unsupervised",
                s(&["/bin/sh", "-c", LOOP_1000]),
                Some(plain_mnt),
            ),
            Entry {
                bare_notify: true,
                ..entry(
                    "loop, bare user-notify",
                    s(&["/bin/sh", "-c", LOOP_1000]),
                    Some(plain_mnt),
                )
            },
            // No shim there: wrap's own server supervises the loop; its
            // files under a home in the workspace.
            entry(
                "loop under agentsh wrap",
                vec![
                    "/usr/bin/env".into(),
                    format!("HOME={}", wrap_home.display()),
                    agentsh.display().to_string(),
                    "wrap".into(),
                    "--quiet".into(),
                    "--session".into(),
                    WRAP_SESSION.into(),
                    "--".into(),
                    "/bin/sh".into(),
                    "-c".into(),
                    LOOP_1000.into(),
                ],
                Some(plain_mnt),
            ),
        ],
    };
    let (looped, got) = timed(b.ws, &spec, "loop", None, b.audit)?;
    let runs = spec.runs();
    let new_execs = got.execs;
    if new_execs < 1000 * runs {
        return Err(format!(
            "loop: expected ≥ {} audited execs, saw {new_execs}",
            1000 * runs
        ));
    }
    // wrap's runs were supervised too: its own audit has every exec.
    let wrapped = std::fs::read_to_string(&wrap_audit)
        .unwrap_or_default()
        .lines()
        .filter(|l| l.contains("\"type\":\"execve\""))
        .count();
    if wrapped < 1000 * runs {
        return Err(format!(
            "loop under agentsh wrap: expected ≥ {} audited execs in {}, saw {wrapped}",
            1000 * runs,
            wrap_audit.display()
        ));
    }
    rep.pair(
        "3. A shell loop of 1000 `/bin/true` (the supervised one includes its tree's install)",
        "loop",
        &spec,
        &looped,
        &[
            ("loop supervised", "loop unsupervised", ""),
            ("loop, bare user-notify", "loop unsupervised", ""),
            (
                "loop supervised",
                "loop, bare user-notify",
                "≤ 1.10× (issue 44)",
            ),
            ("loop under agentsh wrap", "loop unsupervised", ""),
            ("loop under agentsh wrap", "loop supervised", ""),
        ],
    );
    rep.line(
        "\n(`agentsh wrap`: the loop as `agentsh wrap -- sh -c LOOP` with no shim and no server running: each run starts wrap's own server as the invoking user, supervises the loop with it, and stops it; the shim path's server was already running.)",
    );
    rep.line(
        "\n(`bare user-notify`: the same loop under a seccomp filter whose listener, a thread of the timer, answers every exec with CONTINUE at once: the kernel mechanism alone, the floor any user-notify supervisor pays.)",
    );
    let per_exec = |l: &str| stats(&looped[l]).median_us / 1000.0;
    rep.line(&format!(
        "\nPer exec of the loop: {} supervised, {} under the bare user-notify filter, {} unsupervised: agentsh adds {}, of which the kernel mechanism is {}.",
        fmt_us(per_exec("loop supervised")),
        fmt_us(per_exec("loop, bare user-notify")),
        fmt_us(per_exec("loop unsupervised")),
        fmt_us(per_exec("loop supervised") - per_exec("loop unsupervised")),
        fmt_us(per_exec("loop, bare user-notify") - per_exec("loop unsupervised"))
    ));
    Ok(())
}
