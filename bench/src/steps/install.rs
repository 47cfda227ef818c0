//! Step 2, the install path: the first shell of a tree, which makes the
//! wrap-init call and installs supervision (unixwrap, filter, Landlock,
//! relay), against the real shell and the bare hop, unsupervised.

use super::Bench;
use crate::report::Report;
use crate::timer::{timed, Spec};
use crate::workload::{entry, s};

/// Step 2: the shim's first `sh -c true` of a tree against the real shell.
/// Fails unless every shim run made exactly one wrap-init.
pub fn install_path(rep: &mut Report, b: &Bench<'_>) -> Result<(), String> {
    let (hop, shim_mnt, plain_mnt) = (b.hop, b.shim_mnt, b.plain_mnt);
    let spec = Spec {
        rounds: b.rounds.install,
        warmup: b.rounds.install / 10 + 5,
        entries: vec![
            entry(
                "shim sh -c true (install)",
                s(&["/bin/sh", "-c", "true"]),
                Some(shim_mnt),
            ),
            entry(
                "real sh -c true",
                s(&["/bin/sh", "-c", "true"]),
                Some(plain_mnt),
            ),
            entry(
                "hop → real sh -c true",
                s(&[hop, "/bin/sh", "-c", "true"]),
                Some(plain_mnt),
            ),
        ],
    };
    let (install, got) = timed(b.ws, &spec, "install", None, b.audit)?;
    let new_inits = got.wrap_inits;
    let runs = spec.runs();
    if new_inits != runs {
        return Err(format!(
            "install: expected {runs} wrap-inits, saw {new_inits}: the shim did not install supervision each time"
        ));
    }
    rep.pair(
        "2. Install path: the first shell of a tree (wrap-init, unixwrap's steps in the shim: filter, handoff, Landlock)",
        "install",
        &spec,
        &install,
        &[
            (
                "shim sh -c true (install)",
                "real sh -c true",
                "≤ real + 1.5 ms",
            ),
            ("hop → real sh -c true", "real sh -c true", ""),
        ],
    );
    rep.line(&format!(
        "\n({new_inits} wrap-inits audited, one per shim run.)"
    ));
    Ok(())
}
