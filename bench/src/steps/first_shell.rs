//! Step 7, the first shell after `ready`: a server is started afresh and, as
//! soon as it answers `/healthz` (what `agentsh ready` waits for), one timer
//! times its first shell and [`LATER`] more (the steady state); then a second
//! timer, a new process, times one shell: the first shell of a new daemon on
//! a warm server (what any new SDK daemon pays, whatever the server's age).
//! A third timer, after the server has been left alone as long as it was
//! between answering `/healthz` and its first shell, times one more: a
//! shell after the same quiet spell on a warm server. A shell that follows
//! a pause costs more than one that follows another (caches, parked
//! threads, idle CPUs), whatever the server's age; the first shell after
//! `ready` always follows one, so this is what it is compared with to see
//! what start-up itself still leaves to it. One start gives one sample of
//! each, so the step starts a server per round. `/usr/bin/agentsh` is in the namespace as a package puts it, so
//! the identity index hashes what it hashes in a real image; the time each
//! server took to build it comes from its log.
//!
//! Fails unless each shell made its wrap-init on that round's server (a
//! shell that did not reach the server would time nothing of it).

use super::Bench;
use crate::audit::audit_counts;
use crate::report::{fmt_us, Report};
use crate::setup::{copy_exec, start_server};
use crate::timer::{run_timer, Samples, Spec};
use crate::workload::{entry, s};
use agentsh_tests::server::bin;
use serde_json::json;

/// Shells timed after the first, from the same timer.
const LATER: usize = 9;

const FIRST: &str = "first shell after ready";
const NEW_DAEMON: &str = "first shell of a new daemon, warm server";
const STEADY: &str = "later shells (steady state)";
const QUIET: &str = "a shell after the same quiet spell, warm server";

/// Step 7: the first shell after `ready` against the steady state.
pub fn first_shell(rep: &mut Report, b: &Bench<'_>) -> Result<(), String> {
    let cli = b.shim_ns.path("/usr/bin/agentsh");
    if !cli.exists() {
        copy_exec(&bin("agentsh"), &cli)?;
    }
    let rounds = if b.quick { 5 } else { 20 };
    let shell = |n: usize| Spec {
        rounds: n,
        warmup: 0,
        entries: vec![entry(
            "shell",
            s(&["/bin/sh", "-c", "true"]),
            Some(b.shim_mnt),
        )],
    };
    let mut samples: Samples = [FIRST, NEW_DAEMON, STEADY, QUIET]
        .iter()
        .map(|l| (l.to_string(), Vec::new()))
        .collect();
    let mut index_ms = Vec::new();
    for round in 0..rounds {
        let srv = start_server(b.shim_ns, b.ws, "info");
        let ready_at = std::time::Instant::now();
        b.shim_ns.configure(&srv.url, "on");
        let audit = srv.dir.path().join("audit.jsonl");
        let (_, inits0) = audit_counts(&audit);
        // How long the server is left alone before its first shell: from its
        // answer to `/healthz` (start_server's return) to this timer's start.
        let quiet = ready_at.elapsed();
        let a = run_timer(b.ws, &shell(1 + LATER), "first-shell", None)?;
        let c = run_timer(b.ws, &shell(1), "new-daemon", None)?;
        std::thread::sleep(quiet);
        let d = run_timer(b.ws, &shell(1), "after-quiet", None)?;
        let (_, inits1) = audit_counts(&audit);
        if inits1 - inits0 != LATER + 3 {
            return Err(format!(
                "first shell, round {round}: expected {} wrap-inits, saw {}: the shells did not \
                 reach the fresh server",
                LATER + 3,
                inits1 - inits0
            ));
        }
        let a = &a["shell"];
        let put = |m: &mut Samples, label: &str, v: &[u64]| {
            m.entry(label.to_string()).or_default().extend_from_slice(v);
        };
        put(&mut samples, FIRST, &a[..1]);
        put(&mut samples, STEADY, &a[1..]);
        put(&mut samples, NEW_DAEMON, &c["shell"]);
        put(&mut samples, QUIET, &d["shell"]);
        if let Some(ms) = index_build_ms(&srv.log()) {
            index_ms.push(ms);
        }
    }
    let spec = Spec {
        rounds,
        warmup: 0,
        entries: [FIRST, NEW_DAEMON, STEADY, QUIET]
            .iter()
            .map(|l| entry(l, Vec::new(), None))
            .collect(),
    };
    rep.pair(
        &format!(
            "7. The first shell after `ready` ({rounds} fresh servers; {LATER} later shells each)"
        ),
        "first_shell",
        &spec,
        &samples,
        &[
            (FIRST, STEADY, "≤ 1.10×"),
            (NEW_DAEMON, STEADY, ""),
            (FIRST, NEW_DAEMON, ""),
            (QUIET, STEADY, ""),
            (FIRST, QUIET, "≤ 1.10×"),
        ],
    );
    index_ms.sort_unstable();
    let median = index_ms.get(index_ms.len() / 2).copied();
    rep.line(&format!(
        "\n(identity index, from the servers' logs: built in {} (median of {}), before each \
         server answered.)",
        median.map_or("?".to_string(), |ms| fmt_us(ms as f64 * 1000.0)),
        index_ms.len()
    ));
    if let Some(v) = rep.json.get_mut("first_shell") {
        v["index_build_ms_median"] = json!(median);
    }
    Ok(())
}

/// `ms=` of the server log's `identity index built` line.
fn index_build_ms(log: &str) -> Option<u64> {
    let line = log.lines().find(|l| l.contains("identity index built"))?;
    line.split(" ms=")
        .nth(1)?
        .split(|c: char| !c.is_ascii_digit())
        .next()?
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_index_build_time_is_read_from_the_log_line() {
        let log = "x\n2026 INFO identity index built: copies programs=44 files=19 mib=\"4.3\" \
                   threads=2 ms=10 watched_dirs=4 deferred=0\n";
        assert_eq!(index_build_ms(log), Some(10));
        assert_eq!(index_build_ms("agentsh server ready"), None);
    }
}
