//! Step 6, the ptrace backend (what gVisor and Modal get) side by side
//! with notify and with no supervision: the install path (6), the loop of
//! 1000 execs (6b, with each server's CPU time per audited exec) and, with
//! the tarball, `./configure` (6c). The ptrace
//! side has its own namespace and server; the notify and plain sides are
//! steps 1 to 5's namespaces. Fails unless every ptrace run made its
//! wrap-init and every exec of the loop was audited by the ptrace server.

use super::Bench;
use crate::audit::audit_counts;
use crate::host::cpu_seconds;
use crate::report::{fmt_us, stats, Report};
use crate::setup::{mount_ns_path, start_server_with};
use crate::timer::{timed, Entry, Spec};
use crate::workload::{configure_workload, entry, s, LOOP_1000};
use agentsh_tests::ns::Namespace;
use std::path::Path;

/// Where step 6's entries run (mount namespaces, as the timer enters
/// them), and what the ptrace server audits.
struct Sides<'a> {
    /// The shim installed, its server on the ptrace backend.
    ptrace: &'a str,
    /// The shim installed, its server on the notify backend.
    notify: &'a str,
    /// No shim.
    plain: &'a str,
    ws: &'a Path,
    /// The ptrace server's audit trail.
    audit: &'a Path,
    /// The notify server's.
    notify_audit: &'a Path,
    /// The two servers' pids (their CPU time per exec).
    ptrace_pid: u32,
    notify_pid: u32,
}

/// `sh -c script` in the mount namespace `mnt`.
fn sh(mnt: &str, label: &str, script: &str) -> Entry {
    entry(label, s(&["/bin/sh", "-c", script]), Some(mnt))
}

/// Step 6: the same shells under the ptrace backend, side by side with
/// notify and with no supervision (6, 6b, 6c).
pub fn ptrace_backend(rep: &mut Report, b: &Bench<'_>) -> Result<(), String> {
    let ns = Namespace::new();
    let mnt = mount_ns_path(&ns);
    let srv = start_server_with(&ns, b.ws, "info", "execve:\n  backend: ptrace\n");
    ns.install_shim(false);
    ns.configure(&srv.url, "on");
    let audit = srv.dir.path().join("audit.jsonl");
    let sides = Sides {
        ptrace: &mnt,
        notify: b.shim_mnt,
        plain: b.plain_mnt,
        ws: b.ws,
        audit: &audit,
        notify_audit: b.audit,
        ptrace_pid: srv.pid(),
        notify_pid: b.server_pid,
    };
    ptrace_install(rep, &sides, b.rounds.install)?;
    ptrace_loop(rep, &sides, b.rounds.exec_loop)?;
    if let Some(tarball) = b.tarball {
        ptrace_configure(rep, &sides, tarball, b.rounds.configure)?;
    }
    Ok(())
}

/// Step 6 proper: the install path (`sh -c true`) under ptrace, notify and
/// none. Fails unless every ptrace run made a wrap-init.
fn ptrace_install(rep: &mut Report, m: &Sides<'_>, rounds: usize) -> Result<(), String> {
    let spec = Spec {
        rounds,
        warmup: rounds / 10 + 5,
        entries: vec![
            sh(m.ptrace, "install, ptrace", "true"),
            sh(m.notify, "install, notify", "true"),
            sh(m.plain, "real sh -c true", "true"),
        ],
    };
    let (install, got) = timed(m.ws, &spec, "ptrace-install", None, m.audit)?;
    if got.wrap_inits != spec.runs() {
        return Err(format!(
            "ptrace install: expected {} wrap-inits on the ptrace server, saw {}",
            spec.runs(),
            got.wrap_inits
        ));
    }
    rep.pair(
        "6. The ptrace backend (gVisor, Modal) beside notify: the install path",
        "ptrace_install",
        &spec,
        &install,
        &[
            ("install, ptrace", "install, notify", ""),
            ("install, ptrace", "real sh -c true", ""),
        ],
    );
    Ok(())
}

/// Step 6b: the loop of 1000 `/bin/true` under ptrace, notify and none,
/// and the cost per exec. Fails unless the ptrace server audited every exec.
fn ptrace_loop(rep: &mut Report, m: &Sides<'_>, rounds: usize) -> Result<(), String> {
    let spec = Spec {
        rounds,
        warmup: 1,
        entries: vec![
            sh(m.ptrace, "loop, ptrace", LOOP_1000),
            sh(m.notify, "loop, notify", LOOP_1000),
            sh(m.plain, "loop unsupervised", LOOP_1000),
        ],
    };
    let cpu0 = (cpu_seconds(m.ptrace_pid), cpu_seconds(m.notify_pid));
    let (notify_execs0, _) = audit_counts(m.notify_audit);
    let (looped, got) = timed(m.ws, &spec, "ptrace-loop", None, m.audit)?;
    let cpu1 = (cpu_seconds(m.ptrace_pid), cpu_seconds(m.notify_pid));
    let (notify_execs1, _) = audit_counts(m.notify_audit);
    if got.execs < 1000 * spec.runs() {
        return Err(format!(
            "ptrace loop: expected ≥ {} audited execs, saw {}",
            1000 * spec.runs(),
            got.execs
        ));
    }
    rep.pair(
        "6b. The ptrace backend: a loop of 1000 `/bin/true`",
        "ptrace_loop",
        &spec,
        &looped,
        &[
            ("loop, ptrace", "loop, notify", ""),
            ("loop, ptrace", "loop unsupervised", ""),
        ],
    );
    let per_exec = |l: &str| stats(&looped[l]).median_us / 1000.0;
    rep.line(&format!(
        "\nPer exec of the loop: {} under ptrace, {} under notify, {} unsupervised.",
        fmt_us(per_exec("loop, ptrace")),
        fmt_us(per_exec("loop, notify")),
        fmt_us(per_exec("loop unsupervised")),
    ));
    // Each server serves its own side only: its CPU over the spec is its
    // side's (the loops and their shells' installs).
    let cpu_per_exec = |dt: f64, execs: usize| dt * 1e6 / execs.max(1) as f64;
    let ptrace_cpu = cpu_per_exec(cpu1.0 - cpu0.0, got.execs);
    let notify_execs = notify_execs1 - notify_execs0;
    let notify_cpu = cpu_per_exec(cpu1.1 - cpu0.1, notify_execs);
    rep.line(&format!(
        "\nServer CPU per audited exec: {} under ptrace ({} execs), {} under notify ({} execs).",
        fmt_us(ptrace_cpu),
        got.execs,
        fmt_us(notify_cpu),
        notify_execs
    ));
    rep.json.insert(
        "ptrace_server_cpu".into(),
        serde_json::json!({
            "ptrace_us_per_exec": ptrace_cpu,
            "ptrace_execs": got.execs,
            "notify_us_per_exec": notify_cpu,
            "notify_execs": notify_execs,
        }),
    );
    Ok(())
}

/// Step 6c: `./configure` of `tarball` under ptrace, notify and the real
/// shell, each unpacked afresh in the plain namespace (untimed).
fn ptrace_configure(
    rep: &mut Report,
    m: &Sides<'_>,
    tarball: &Path,
    rounds: usize,
) -> Result<(), String> {
    let cf = m.ws.join("cf-ptrace");
    let (prep, configure) = configure_workload(&cf, tarball);
    let entries: Vec<Entry> = [
        (m.ptrace, "configure, ptrace"),
        (m.notify, "configure, notify"),
        (m.plain, "configure, real shell"),
    ]
    .into_iter()
    .map(|(ns, label)| {
        let mut e = sh(ns, label, &configure);
        e.prep = Some(prep.clone());
        e.prep_ns = Some(m.plain.to_string());
        e
    })
    .collect();
    let spec = Spec {
        rounds,
        warmup: 1,
        entries,
    };
    let (conf, _) = timed(m.ws, &spec, "ptrace-configure", None, m.audit)?;
    rep.pair(
        "6c. The ptrace backend: `./configure`",
        "ptrace_configure",
        &spec,
        &conf,
        &[
            ("configure, ptrace", "configure, notify", ""),
            ("configure, ptrace", "configure, real shell", ""),
        ],
    );
    Ok(())
}
