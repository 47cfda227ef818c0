//! Step 3, a shell loop of 1000 `/bin/true`: supervised (its tree's install
//! included), unsupervised, and under a bare user-notify filter (the kernel
//! mechanism alone), and what each exec costs.

use super::Bench;
use crate::report::{fmt_us, stats, Report};
use crate::timer::{timed, Entry, Spec};
use crate::workload::{entry, s, LOOP_1000};

/// Step 3: the loop of 1000 execs supervised, unsupervised and under the
/// bare filter, and the cost per exec. Fails unless every exec of every
/// supervised run was audited.
pub fn exec_loop(rep: &mut Report, b: &Bench<'_>) -> Result<(), String> {
    let (shim_mnt, plain_mnt) = (b.shim_mnt, b.plain_mnt);
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
    rep.pair(
        "3. A shell loop of 1000 `/bin/true` (the supervised one includes its tree's install)",
        "loop",
        &spec,
        &looped,
        &[
            ("loop supervised", "loop unsupervised", "≤ 1.10×"),
            ("loop, bare user-notify", "loop unsupervised", ""),
            ("loop supervised", "loop, bare user-notify", ""),
        ],
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
