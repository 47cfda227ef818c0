//! Step "writes": a shell loop writing 1000 files in the workspace (the
//! shell's own `>`, no exec), supervised and unsupervised: what each call
//! that changes a file costs now that such calls reach the supervisor to be
//! explained where Landlock refuses them (issue 41).

use super::Bench;
use crate::report::{fmt_us, stats, Report};
use crate::timer::{timed, Spec};
use crate::workload::{entry, s};

/// 1000 opens for writing (create, truncate), one per file, in `dir`;
/// any that fails fails the run (the timer refuses a failed entry).
fn writes_1000(dir: &str) -> String {
    format!(
        "mkdir -p {dir} && cd {dir} && i=0; while [ $i -lt 1000 ]; do echo x > f$i || exit 1; \
         i=$((i+1)); done"
    )
}

/// The loop supervised and unsupervised, side by side, and the cost of
/// each write.
pub fn writes(rep: &mut Report, b: &Bench<'_>) -> Result<(), String> {
    let script = writes_1000(&b.ws.join("writes").display().to_string());
    let spec = Spec {
        rounds: b.rounds.exec_loop,
        warmup: 1,
        entries: vec![
            entry(
                "writes supervised",
                s(&["/bin/sh", "-c", &script]),
                Some(b.shim_mnt),
            ),
            entry(
                "writes unsupervised",
                s(&["/bin/sh", "-c", &script]),
                Some(b.plain_mnt),
            ),
        ],
    };
    let (looped, _) = timed(b.ws, &spec, "writes", None, b.audit)?;
    rep.pair(
        "Writes. A shell loop writing 1000 files in the workspace (`echo x > fN`: an open that creates and truncates, no exec)",
        "writes",
        &spec,
        &looped,
        &[("writes supervised", "writes unsupervised", "")],
    );
    let per = |l: &str| stats(&looped[l]).median_us / 1000.0;
    rep.line(&format!(
        "\nPer write: {} supervised, {} unsupervised: agentsh adds {} (the open goes to the supervisor, which finds Landlock would allow it and lets it run).",
        fmt_us(per("writes supervised")),
        fmt_us(per("writes unsupervised")),
        fmt_us(per("writes supervised") - per("writes unsupervised")),
    ));
    Ok(())
}
