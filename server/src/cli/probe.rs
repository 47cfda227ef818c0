//! Whether a shell started from here, the way SDKs start them, is
//! supervised: `agentsh ready` and `agentsh detect` start `/bin/sh -c` with
//! a command that asks the shell's own filter (the agentsh marker), so the
//! answer is what the kernel says of a real shell, not what the server
//! believes. Run from where the SDK's daemon runs (a `docker exec`, an
//! `envd` ready command, a systemd `ExecStartPost`), the probe shell is what
//! an SDK's shell would be: a sibling of the server, or its descendant.
//!
//! The probe shell execs `agentsh ready` (the one use of the CLI the shipped
//! policies allow inside a tree): supervised, it exits 0 at once on the
//! marker; unsupervised, it finds [`PROBE_ENV`] (which unixwrap would have
//! removed) and exits [`UNSUPERVISED`] instead of probing again.
//!
//! Failure modes: a shell that does not answer within the deadline is
//! killed and reported; a shell that cannot be started is reported with the
//! reason. Every outcome is an [`Outcome`]; nothing here panics.

use std::io::Read;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Set for the probe shell: an `agentsh ready` that finds it without the
/// marker is the probe, unsupervised (unixwrap strips `AGENTSH_*` from a
/// supervised command).
pub const PROBE_ENV: &str = "AGENTSH_READY_PROBE";

/// The inner `agentsh ready`'s status when its shell is not supervised.
pub const UNSUPERVISED: i32 = 3;

/// What the probe shell came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// It ran under agentsh's filter.
    Supervised,
    /// It ran, unsupervised.
    Unsupervised,
    /// The shim refused it (126): its last line on stderr says why.
    Refused(String),
    /// Anything else: what happened.
    Failed(String),
}

impl Outcome {
    /// The sentence `ready` and `detect` say for it.
    pub fn describe(&self) -> String {
        match self {
            Outcome::Supervised => "a shell started here is supervised".into(),
            Outcome::Unsupervised => "a shell started here runs UNSUPERVISED: /bin/sh is not \
                                      agentsh's shim, or shim.conf lets shells run without the \
                                      server (agentsh shim status)"
                .into(),
            Outcome::Refused(why) => format!("a shell started here is refused: {why}"),
            Outcome::Failed(why) => format!("a probe shell could not be run: {why}"),
        }
    }
}

/// Starts `/bin/sh -c 'exec AGENTSH ready'` as an SDK would and says what
/// came of it, within `deadline`.
pub fn shell(deadline: Duration) -> Outcome {
    let exe = match std::env::current_exe() {
        Ok(e) => e,
        Err(e) => return Outcome::Failed(format!("cannot find the agentsh binary: {e}")),
    };
    let child = Command::new("/bin/sh")
        .arg("-c")
        .arg("exec \"$0\" ready")
        .arg(&exe)
        .env(PROBE_ENV, "1")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn();
    let mut child = match child {
        Ok(c) => c,
        Err(e) => return Outcome::Failed(format!("cannot start /bin/sh: {e}")),
    };
    let end = Instant::now() + deadline;
    let status = loop {
        match child.try_wait() {
            Ok(Some(s)) => break s,
            Ok(None) if Instant::now() < end => std::thread::sleep(Duration::from_millis(10)),
            Ok(None) => {
                let _ = child.kill();
                let _ = child.wait();
                return Outcome::Failed(format!("the probe shell did not end within {deadline:?}"));
            }
            Err(e) => return Outcome::Failed(format!("cannot wait for the probe shell: {e}")),
        }
    };
    let mut err = String::new();
    if let Some(mut e) = child.stderr.take() {
        let _ = e.read_to_string(&mut err);
    }
    let last = err
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("");
    match status.code() {
        Some(0) => Outcome::Supervised,
        Some(UNSUPERVISED) => Outcome::Unsupervised,
        Some(126) => Outcome::Refused(last.trim().to_string()),
        Some(c) => Outcome::Failed(format!("the probe shell exited {c}: {}", last.trim())),
        None => Outcome::Failed(format!("the probe shell was killed ({status})")),
    }
}
