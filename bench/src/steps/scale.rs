//! Step 5, scale: 64 supervised trees at once, 200 execs of `/bin/true`
//! each, against the same load without agentsh; the server's CPU time and
//! peak memory; and a check that every exec was audited exactly once
//! (per tree, no duplicate event ids), which fails the run otherwise.

use super::Bench;
use crate::audit::audit_lines;
use crate::host::{cpu_seconds, status_kib};
use crate::report::Report;
use agentsh_tests::ns::Namespace;
use agentsh_tests::server::TestServer;
use serde_json::json;
use std::collections::BTreeMap;
use std::process::Stdio;
use std::time::{Duration, Instant};

const SCALE_TREES: usize = 64;
const SCALE_EXECS: usize = 200;

/// Starts `SCALE_TREES` shells running `script` at once in `ns`; their pids
/// once all have exited, and the wall time.
fn run_trees(ns: &Namespace, script: &str) -> Result<(Vec<u32>, Duration), String> {
    let t0 = Instant::now();
    let mut children = Vec::new();
    for _ in 0..SCALE_TREES {
        let c = ns
            .command("/bin/sh")
            .args(["-c", script])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("scale: spawn: {e}"))?;
        children.push(c);
    }
    let mut pids = Vec::new();
    for c in children {
        let pid = c.id();
        let out = c
            .wait_with_output()
            .map_err(|e| format!("scale: wait: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "scale: tree {pid} failed ({}): {}",
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        pids.push(pid);
    }
    Ok((pids, t0.elapsed()))
}

/// Step 5: `SCALE_TREES` trees of `SCALE_EXECS` execs at once, supervised
/// by `srv` and not. Fails unless each exec was audited exactly once.
pub fn scale(rep: &mut Report, b: &Bench<'_>, srv: &TestServer) -> Result<(), String> {
    let (ns, plain, audit) = (b.shim_ns, b.plain_ns, b.audit);
    let script = format!("i=0; while [ $i -lt {SCALE_EXECS} ]; do /bin/true; i=$((i+1)); done");
    // The same load without agentsh first, for the ratio.
    let (_, plain_wall) = run_trees(plain, &script)?;
    let before = audit_lines(audit).len();
    let cpu0 = cpu_seconds(srv.pid());
    let (pids, wall) = run_trees(ns, &script)?;
    let cpu = cpu_seconds(srv.pid()) - cpu0;
    // An allowed exec's event follows its answer by microseconds; reading
    // through `audit_lines` waits for any still promised.
    let events = audit_lines(audit);
    let new = &events[before.min(events.len())..];
    let mut per_tree: BTreeMap<u32, usize> = pids.iter().map(|p| (*p, 0)).collect();
    let mut ids = std::collections::HashSet::new();
    let mut dup = 0;
    for e in new.iter().filter(|e| e["type"] == "execve") {
        if !ids.insert(e["id"].to_string()) {
            dup += 1;
        }
        let parent = e["parent_pid"].as_u64().unwrap_or(0) as u32;
        let is_true = e["filename"].as_str().is_some_and(|f| f.ends_with("/true"));
        if is_true {
            if let Some(n) = per_tree.get_mut(&parent) {
                *n += 1;
            }
        }
    }
    let wrong: Vec<_> = per_tree
        .iter()
        .filter(|(_, n)| **n != SCALE_EXECS)
        .collect();
    let execs = SCALE_TREES * SCALE_EXECS;
    rep.line(&format!(
        "\n### 5. Scale: {SCALE_TREES} supervised trees at once, {SCALE_EXECS} execs of `/bin/true` each\n"
    ));
    rep.line(&format!(
        "* {execs} execs in {:.2} s: **{:.0} execs/s**; server CPU {:.2} s ({:.0} µs per exec); server peak RSS {} MiB",
        wall.as_secs_f64(),
        execs as f64 / wall.as_secs_f64(),
        cpu,
        cpu * 1e6 / execs as f64,
        status_kib(srv.pid(), "VmHWM:") / 1024
    ));
    rep.line(&format!(
        "* the same {execs} execs without agentsh: {:.2} s, {:.0} execs/s: supervised / unsupervised wall time **{:.2}×**",
        plain_wall.as_secs_f64(),
        execs as f64 / plain_wall.as_secs_f64(),
        wall.as_secs_f64() / plain_wall.as_secs_f64()
    ));
    rep.line(&format!(
        "* audited exactly once: {} of {SCALE_TREES} trees have exactly {SCALE_EXECS} `/bin/true` events; duplicate event ids: {dup}",
        SCALE_TREES - wrong.len()
    ));
    rep.json.insert(
        "scale".into(),
        json!({
            "trees": SCALE_TREES, "execs_per_tree": SCALE_EXECS,
            "wall_s": wall.as_secs_f64(), "execs_per_s": execs as f64 / wall.as_secs_f64(),
            "unsupervised_wall_s": plain_wall.as_secs_f64(),
            "server_cpu_s": cpu, "server_vmhwm_kib": status_kib(srv.pid(), "VmHWM:"),
            "trees_audited_exactly": SCALE_TREES - wrong.len(), "duplicate_ids": dup,
        }),
    );
    if !wrong.is_empty() || dup != 0 {
        return Err(format!(
            "scale: audit is not exactly once per exec: {wrong:?} (tree pid, events), {dup} duplicate ids"
        ));
    }
    Ok(())
}
