//! The supervisor's own time per exec (gather facts, policy, audit write,
//! answer), from a second server's trace log (`exec answered us=N`), so the
//! trace lines cost the timed pairs nothing: for the loop of 1000 execs
//! (the common case), then for callers whose memory is shared
//! (`bench/spawner.c`); for the common case also where the time goes,
//! step by step, and the floor under its first step (`floor.rs`). Fails
//! when the log holds fewer such lines than the execs made: the trace, or
//! the supervision, was not there.

use super::Bench;
use crate::report::Report;
use crate::setup::start_server;
use crate::timer::{run_timer, Spec};
use crate::workload::{compile_spawner, entry, s, LOOP_1000};
use agentsh_tests::ns::Namespace;
use agentsh_tests::server::TestServer;
use serde_json::json;
use std::path::Path;
use std::process::Stdio;

/// The supervisor's time per exec of the loop (the common case), then
/// [`spawner_times`] against it; on a tracing server of its own in the
/// shim namespace, stopped when done.
pub fn supervisor_time(rep: &mut Report, b: &Bench<'_>) -> Result<(), String> {
    let srv = start_server(b.shim_ns, b.ws, "info,agentsh::supervisor=trace");
    b.shim_ns.configure(&srv.url, "on");
    let spec = Spec {
        rounds: if b.quick { 2 } else { 5 },
        warmup: 0,
        entries: vec![entry(
            "loop supervised (traced)",
            s(&["/bin/sh", "-c", LOOP_1000]),
            Some(b.shim_mnt),
        )],
    };
    run_timer(b.ws, &spec, "traced", None)?;
    let us = answered_us(&srv.log(), 0);
    if us.len() < 1000 {
        return Err(format!(
            "supervisor timing: only {} `exec answered` trace lines",
            us.len()
        ));
    }
    let q = |p: f64| us[((us.len() - 1) as f64 * p).round() as usize];
    rep.line("\n### Supervisor time per exec (gather facts, policy, audit write, answer)\n");
    rep.line(&format!(
        "* {} execs: p50 **{} µs**, p90 {} µs, p99 {} µs; target p50 ≤ 40 µs (issue 44)",
        us.len(),
        q(0.5),
        q(0.9),
        q(0.99)
    ));
    rep.json.insert(
        "supervisor".into(),
        json!({"n": us.len(), "p50_us": q(0.5), "p90_us": q(0.9), "p99_us": q(0.99)}),
    );
    super::floor::report(
        rep,
        &super::floor::phase_medians(&srv.log(), 0),
        if b.quick { 300 } else { 1000 },
    )?;
    spawner_times(
        rep,
        b.shim_ns,
        &srv,
        b.ws,
        q(0.5),
        if b.quick { 300 } else { 1000 },
    )?;
    drop(srv);
    Ok(())
}

/// The supervisor's time per exec (`exec answered us=N`) in `log` after its
/// first `skip` lines, sorted.
fn answered_us(log: &str, skip: usize) -> Vec<u64> {
    let mut us: Vec<u64> = log
        .lines()
        .skip(skip)
        .filter(|l| l.contains("exec answered"))
        .filter_map(|l| {
            let v = l.split("us=").nth(1)?;
            v.split(|c: char| !c.is_ascii_digit()).next()?.parse().ok()
        })
        .collect();
    us.sort_unstable();
    us
}

/// The supervisor's own time per exec for callers whose memory is shared:
/// an exec from a multi-threaded process, and vfork'd children of a
/// process with a second thread (how Go, Java, Node and Python spawn). On
/// the default `execve.race_guard: verify` the supervisor watches such an
/// exec and checks its new image (`freeze` would stop the other tasks
/// first, `server/src/supervisor/sharing.rs`); `common_p50` is the figure
/// above.
fn spawner_times(
    rep: &mut Report,
    ns: &Namespace,
    srv: &TestServer,
    ws: &Path,
    common_p50: u64,
    n: usize,
) -> Result<(), String> {
    let spawner = compile_spawner(ws)?;
    rep.line(
        "\n### Supervisor time per exec when the caller's memory is shared (race guard on its default, verify: the exec watched and checked)\n",
    );
    for mode in ["threaded", "vfork"] {
        let before = srv.log().lines().count();
        let run = ns
            .command("/bin/sh")
            .arg("-c")
            .arg(format!("exec {} {mode} {n} /bin/true", spawner.display()))
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("spawner {mode}: {e}"))?;
        if !run.status.success() {
            return Err(format!(
                "spawner {mode} failed: {}",
                String::from_utf8_lossy(&run.stderr).trim()
            ));
        }
        let us = answered_us(&srv.log(), before);
        if us.len() < n {
            return Err(format!(
                "spawner {mode}: only {} `exec answered` trace lines for {n} spawns",
                us.len()
            ));
        }
        let q = |p: f64| us[((us.len() - 1) as f64 * p).round() as usize];
        rep.line(&format!(
            "* {mode} caller, {} execs: p50 **{} µs** ({:+} µs against the common case), p90 {} µs, p99 {} µs; target: within 25 µs of the common case",
            us.len(),
            q(0.5),
            q(0.5) as i64 - common_p50 as i64,
            q(0.9),
            q(0.99)
        ));
        rep.json.insert(
            format!("supervisor_{mode}"),
            json!({"n": us.len(), "p50_us": q(0.5), "p90_us": q(0.9), "p99_us": q(0.99)}),
        );
    }
    Ok(())
}
