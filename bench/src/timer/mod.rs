//! The timer: what it is asked to time (a [`Spec`] of [`Entry`]s) and how a
//! run starts it. The timer is this binary again (`agentsh-bench time --spec
//! FILE`, the [`child`] side), run either as a child of the bench
//! (unsupervised) or inside a supervised tree, so the process that measures
//! a pair is never in a different position from what it measures. Its
//! samples come back as JSON on stdout; a timer that fails, or prints
//! something unreadable, fails the run.

mod bare_notify;
mod child;

pub use child::timer_main;

use crate::audit::audit_counts;
use agentsh_tests::ns::Namespace;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Stdio};

/// One command the timer runs: `argv` in the mount namespace `ns` (a
/// `/proc/<pid>/ns/mnt` path; `None`: the timer's own), after `prep` (untimed).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Entry {
    pub label: String,
    pub argv: Vec<String>,
    pub ns: Option<String>,
    pub prep: Option<Vec<String>>,
    /// The namespace `prep` runs in (`None`: the timer's own).
    pub prep_ns: Option<String>,
    /// Run under a bare seccomp user-notify filter on execve/execveat whose
    /// listener (a thread of the timer) answers CONTINUE at once: the cost of
    /// the kernel mechanism alone, with no policy, no /proc reads, no audit.
    #[serde(default)]
    pub bare_notify: bool,
    /// A file the shim and unixwrap append their log to
    /// (`AGENTSH_WRAPPER_LOG_FD`, an fd of it inherited): their `stages:`
    /// lines, for the install step's stage table. A few writes per shell:
    /// an entry with it is not one of a timed pair.
    #[serde(default)]
    pub wrapper_log: Option<String>,
}

#[derive(Debug, Serialize, Deserialize)]
pub struct Spec {
    pub rounds: usize,
    pub warmup: usize,
    pub entries: Vec<Entry>,
}

impl Spec {
    /// How many times each entry runs (warm-up included).
    pub fn runs(&self) -> usize {
        self.rounds + self.warmup
    }
}

/// Samples in nanoseconds per label, in the order the spec listed them.
pub type Samples = BTreeMap<String, Vec<u64>>;

/// Runs the timer as a child of this process (unsupervised), or, with
/// `supervised`, as `/bin/sh -c 'exec timer ...'` in the shim namespace, so
/// the timer and everything it starts run in a supervised tree.
pub fn run_timer(
    ws: &Path,
    spec: &Spec,
    name: &str,
    supervised: Option<&Namespace>,
) -> Result<Samples, String> {
    let spec_path = ws.join(format!("{name}.json"));
    std::fs::write(
        &spec_path,
        serde_json::to_vec(spec).map_err(|e| e.to_string())?,
    )
    .map_err(|e| format!("{}: {e}", spec_path.display()))?;
    let timer = ws.join("bin/agentsh-bench");
    let out = match supervised {
        None => Command::new(&timer)
            .arg("time")
            .arg("--spec")
            .arg(&spec_path)
            .stdin(Stdio::null())
            .output(),
        Some(ns) => ns
            .command("/bin/sh")
            .arg("-c")
            .arg(format!(
                "exec {} time --spec {}",
                timer.display(),
                spec_path.display()
            ))
            .stdin(Stdio::null())
            .output(),
    }
    .map_err(|e| format!("timer {name}: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "timer {name} failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    serde_json::from_slice(&out.stdout).map_err(|e| {
        format!(
            "timer {name}: unreadable output ({e}): {}",
            String::from_utf8_lossy(&out.stdout)
        )
    })
}

/// What the audit trail gained while a spec ran.
pub struct Audited {
    pub execs: usize,
    pub wrap_inits: usize,
}

/// [`run_timer`], and what the audit trail at `audit` gained meanwhile.
pub fn timed(
    ws: &Path,
    spec: &Spec,
    name: &str,
    supervised: Option<&Namespace>,
    audit: &Path,
) -> Result<(Samples, Audited), String> {
    let (execs0, inits0) = audit_counts(audit);
    let samples = run_timer(ws, spec, name, supervised)?;
    let (execs1, inits1) = audit_counts(audit);
    Ok((
        samples,
        Audited {
            execs: execs1 - execs0,
            wrap_inits: inits1 - inits0,
        },
    ))
}
