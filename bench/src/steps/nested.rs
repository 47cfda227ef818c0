//! Step 1, the nested path: `sh -c true` inside an already supervised tree,
//! timed by a timer that itself runs in that tree. The shim there only
//! hops to the real shell (no server call); `hop` is that hop alone.

use super::Bench;
use crate::report::Report;
use crate::timer::{timed, Spec};
use crate::workload::{entry, s, REAL_SH};

/// Step 1: the shim's `sh -c true` in a supervised tree against the bare
/// hop and the real shell. Fails unless every run was an audited exec and
/// the only wrap-init was the timer's own tree.
pub fn nested_path(rep: &mut Report, b: &Bench<'_>) -> Result<(), String> {
    let hop = b.hop;
    let spec = Spec {
        rounds: b.rounds.nested,
        warmup: b.rounds.nested / 10 + 5,
        entries: vec![
            entry("shim sh -c true", s(&["/bin/sh", "-c", "true"]), None),
            entry(
                "hop → real sh -c true",
                s(&[hop, REAL_SH, "-c", "true"]),
                None,
            ),
            entry("real sh -c true", s(&[REAL_SH, "-c", "true"]), None),
        ],
    };
    let (nested, got) = timed(b.ws, &spec, "nested", Some(b.shim_ns), b.audit)?;
    let runs = spec.runs();
    // Every run of each entry is at least one audited exec; the shim runs
    // add no wrap-init (one: the timer's own tree).
    let (new_execs, new_inits) = (got.execs, got.wrap_inits);
    if new_execs < 3 * runs || new_inits != 1 {
        return Err(format!(
            "nested: expected ≥ {} audited execs and 1 wrap-init, saw {new_execs} and {new_inits}: the timer did not run supervised",
            3 * runs
        ));
    }
    rep.pair(
        "1. Nested path: `sh -c true` inside an already supervised tree",
        "nested",
        &spec,
        &nested,
        &[
            ("shim sh -c true", "hop → real sh -c true", ""),
            ("shim sh -c true", "real sh -c true", "≤ 1.8× (issue 44)"),
            ("hop → real sh -c true", "real sh -c true", ""),
        ],
    );
    rep.line(&format!(
        "\n(audited in that run: {new_execs} execs, {new_inits} wrap-init — the timer's own tree; the nested shims called no server.)"
    ));
    Ok(())
}
