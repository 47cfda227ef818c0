//! The workloads the steps time, and the helpers that build them: the
//! real shell, the loop of 1000 execs, `./configure` of an unpacked
//! tarball, and `bench/spawner.c` (callers whose memory is shared).

use crate::timer::Entry;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The real shell as the shim execs it (a link to `/bin/sh.real`, so `comm` is `sh`).
pub const REAL_SH: &str = agentsh_proto::install::REAL_SH;
pub const LOOP_1000: &str = "i=0; while [ $i -lt 1000 ]; do /bin/true; i=$((i+1)); done";

/// `v` as owned strings (an argv).
pub fn s(v: &[&str]) -> Vec<String> {
    v.iter().map(std::string::ToString::to_string).collect()
}

/// An entry running `argv` in the mount namespace `ns`, no prep.
pub fn entry(label: &str, argv: Vec<String>, ns: Option<&str>) -> Entry {
    Entry {
        label: label.into(),
        argv,
        ns: ns.map(str::to_string),
        prep: None,
        prep_ns: None,
        bare_notify: false,
        wrapper_log: None,
    }
}

/// `./configure` of `tarball` unpacked in `cf`: the prep that unpacks it
/// afresh (untimed) and the script to time.
pub fn configure_workload(cf: &Path, tarball: &Path) -> (Vec<String>, String) {
    let prep = s(&[
        "/bin/sh",
        "-c",
        &format!(
            "rm -rf {d} && mkdir -p {d} && tar -xzf {t} -C {d} --strip-components=1",
            d = cf.display(),
            t = tarball.display()
        ),
    ]);
    let configure = format!("cd {} && ./configure >/dev/null", cf.display());
    (prep, configure)
}

/// Compiles `bench/spawner.c` to `ws/bin/spawner`.
///
/// # Errors
/// `cc` cannot run or fails (its stderr).
pub fn compile_spawner(ws: &Path) -> Result<PathBuf, String> {
    let spawner = ws.join("bin/spawner");
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("spawner.c");
    let out = Command::new("cc")
        .args(["-O2", "-pthread", "-o"])
        .arg(&spawner)
        .arg(&src)
        .output()
        .map_err(|e| format!("cc spawner.c: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "cc spawner.c: {}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(spawner)
}
