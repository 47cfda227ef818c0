//! Step 4, `./configure` of a real autoconf package (fork/exec heavy),
//! under the shim and with the real shell; each run unpacks the tarball
//! afresh, untimed. Skipped, and said so, without `--configure-tarball`.

use super::Bench;
use crate::report::Report;
use crate::timer::{timed, Spec};
use crate::workload::{configure_workload, entry, s};

/// Step 4: `./configure` under the shim against the real shell. Fails
/// unless each supervised run audited at least 100 execs on average.
pub fn configure(rep: &mut Report, b: &Bench<'_>) -> Result<(), String> {
    let Some(tarball) = b.tarball else {
        rep.line("\n### 4. configure: skipped (no --configure-tarball)");
        return Ok(());
    };
    let (shim_mnt, plain_mnt) = (b.shim_mnt, b.plain_mnt);
    let cf = b.ws.join("cf");
    let (prep, configure) = configure_workload(&cf, tarball);
    let mut under_shim = entry(
        "configure under the shim",
        s(&["/bin/sh", "-c", &configure]),
        Some(shim_mnt),
    );
    under_shim.prep = Some(prep.clone());
    let mut real = entry(
        "configure, real shell",
        s(&["/bin/sh", "-c", &configure]),
        Some(plain_mnt),
    );
    // Prep in the plain namespace: untimed and unsupervised for both.
    real.prep = Some(prep);
    under_shim.prep_ns = Some(plain_mnt.to_string());
    real.prep_ns = Some(plain_mnt.to_string());
    let spec = Spec {
        rounds: b.rounds.configure,
        warmup: 1,
        entries: vec![under_shim, real],
    };
    let (conf, got) = timed(b.ws, &spec, "configure", None, b.audit)?;
    let runs = spec.runs();
    let new_execs = got.execs;
    rep.pair(
        &format!(
            "4. `./configure` of {} (fork/exec heavy)",
            tarball
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default()
        ),
        "configure",
        &spec,
        &conf,
        &[(
            "configure under the shim",
            "configure, real shell",
            "≤ 1.15×",
        )],
    );
    rep.line(&format!(
        "\n({} execs audited per supervised configure.)",
        new_execs / runs.max(1)
    ));
    if new_execs < 100 * runs {
        return Err(format!(
            "configure: only {new_execs} audited execs in {runs} supervised runs"
        ));
    }
    Ok(())
}
