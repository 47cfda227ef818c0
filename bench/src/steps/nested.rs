//! Step 1, the nested path: `sh -c true` inside an already supervised tree,
//! timed by a timer that itself runs in that tree. The shim there only
//! hops to the real shell (no server call); `hop` is that hop alone.

use super::Bench;
use crate::report::Report;
use crate::timer::{timed, Spec};
use crate::workload::{entry, s, REAL_SH};
use agentsh_tests::ns::Namespace;

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

/// Step 1b: `python3 -c pass` inside a supervised tree, where `agentsh shim
/// install --programs python3` stood the shim in for python (issue 60),
/// against the real python: the nested program shim's cost, one exec of
/// the static shim. Its own namespace, so no other step's python pays it.
/// Skipped (said) where python3 is not installed.
pub fn nested_python(rep: &mut Report, b: &Bench<'_>) -> Result<(), String> {
    let Ok(own) = std::fs::canonicalize("/usr/bin/python3") else {
        rep.line("\n(python3 is not installed: step 1b is left out)");
        return Ok(());
    };
    let name = own
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .ok_or("python3 has no file name")?;
    let real = format!("{}/{name}", agentsh_proto::install::PROGRAMS_DIR);
    let ns = Namespace::new();
    ns.install_shim_for(false, &["python3"]);
    ns.configure(b.server_url, "on");
    let spec = Spec {
        rounds: b.rounds.nested / 5 + 5,
        warmup: b.rounds.nested / 50 + 3,
        entries: vec![
            entry(
                "shim python3 -c pass",
                s(&["/usr/bin/python3", "-c", "pass"]),
                None,
            ),
            entry("real python3 -c pass", s(&[&real, "-c", "pass"]), None),
        ],
    };
    let (nested, got) = timed(b.ws, &spec, "nested-python", Some(&ns), b.audit)?;
    let runs = spec.runs();
    if got.execs < 2 * runs || got.wrap_inits != 1 {
        return Err(format!(
            "nested python: expected ≥ {} audited execs and 1 wrap-init, saw {} and {}: the timer did not run supervised, or a nested python called wrap-init",
            2 * runs, got.execs, got.wrap_inits
        ));
    }
    rep.pair(
        "1b. Nested path: `python3 -c pass` through the program shim (issue 60)",
        "nested_python",
        &spec,
        &nested,
        &[(
            "shim python3 -c pass",
            "real python3 -c pass",
            "≤ +1 ms (issue 60)",
        )],
    );
    Ok(())
}
