//! `agentsh-bench run`: the steps of the report, one module each, in the
//! order the report numbers them. Every step times its pair through the
//! timer, checks in the audit trail that its supervised side really ran
//! supervised (and fails the run otherwise), and adds its table to the
//! report. Steps 1 to 5 share two mount namespaces, one with the shim as
//! `/bin/sh` and a server on the notify backend, one without; step 6 adds
//! a third on the ptrace backend; step 7 starts fresh servers in the first
//! (the first shell after `ready`); the supervisor's own time comes next,
//! from another, tracing server; then egress, and gVisor's per-call costs
//! in a real runsc container.

mod configure;
mod egress;
mod exec_loop;
mod first_shell;
mod floor;
mod gvisor;
mod gvisor_work;
mod http;
mod install;
mod nested;
mod ptrace;
mod scale;
mod supervisor;
mod writes;

use crate::cli::Opts;
use crate::host::machine;
use crate::report::Report;
use crate::setup::{copy_exec, mount_ns_path, start_server, Workspace};
use agentsh_tests::ns::Namespace;
use agentsh_tests::server::bin;
use configure::configure;
use egress::egress;
use exec_loop::exec_loop;
use first_shell::first_shell;
use gvisor::gvisor;
use gvisor_work::gvisor_work;
use http::http;
use install::install_path;
use nested::{nested_path, nested_python};
use ptrace::ptrace_backend;
use scale::scale;
use serde_json::json;
use std::path::Path;
use std::process::Command;
use std::time::Instant;
use supervisor::supervisor_time;
use writes::writes;

/// How many timed rounds each pair gets (warm-up not counted).
#[derive(Debug, Clone, Copy)]
pub struct Rounds {
    pub nested: usize,
    pub install: usize,
    pub exec_loop: usize,
    pub configure: usize,
}

impl Rounds {
    fn for_run(quick: bool) -> Rounds {
        let (nested, install, exec_loop, configure) = if quick {
            (60, 40, 4, 1)
        } else {
            (400, 200, 15, 5)
        };
        Rounds {
            nested,
            install,
            exec_loop,
            configure,
        }
    }
}

/// What the steps share.
pub struct Bench<'a> {
    /// The agent's workspace; `bin/` holds the timer and `hop`.
    pub ws: &'a Path,
    /// `bin/hop`: a static program that only execs its arguments.
    pub hop: &'a str,
    /// The shim installed as `/bin/sh`, supervised by the notify server.
    pub shim_ns: &'a Namespace,
    /// No shim: `/bin/sh` is the real shell.
    pub plain_ns: &'a Namespace,
    /// The mount namespaces of the two, as the timer enters them.
    pub shim_mnt: &'a str,
    pub plain_mnt: &'a str,
    /// The notify server's audit trail.
    pub audit: &'a Path,
    /// The notify server's pid and address.
    pub server_pid: u32,
    pub server_url: &'a str,
    pub rounds: Rounds,
    pub quick: bool,
    /// The autoconf package to `./configure` (steps 4 and 6c; none: skipped).
    pub tarball: Option<&'a Path>,
}

/// Sets up, runs every step in the report's order, and writes the results.
///
/// # Errors
/// Not root, a setup that fails, or any step's error (a failed run, or a
/// supervised side that did not run supervised).
pub fn run(o: &Opts) -> Result<(), String> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Err("needs root (mount namespaces, seccomp listeners): sudo ./bench/run.sh".into());
    }
    let rounds = Rounds::for_run(o.quick);
    let started = Instant::now();
    let workspace = prepare_workspace(&o.hop)?;
    let ws = workspace.path();
    let hop = ws.join("bin/hop").display().to_string();

    let shim_ns = Namespace::new();
    let plain_ns = Namespace::new();
    let shim_mnt = mount_ns_path(&shim_ns);
    let plain_mnt = mount_ns_path(&plain_ns);
    // `AGENTSH_BENCH_SERVER_LOG` sets this server's log filter (e.g.
    // `info,agentsh::api=debug` for wrap-init's own times); with
    // `AGENTSH_BENCH_KEEP_LOGS` its log is kept there as `main.log`.
    let filter = std::env::var("AGENTSH_BENCH_SERVER_LOG").unwrap_or_else(|_| "info".into());
    let srv = start_server(&shim_ns, ws, &filter);
    shim_ns.install_shim(false);
    shim_ns.configure(&srv.url, "on");
    let audit = srv.dir.path().join("audit.jsonl");
    let server_url = srv.url.clone();
    let b = Bench {
        ws,
        hop: &hop,
        shim_ns: &shim_ns,
        plain_ns: &plain_ns,
        shim_mnt: &shim_mnt,
        plain_mnt: &plain_mnt,
        audit: &audit,
        server_pid: srv.pid(),
        server_url: &server_url,
        rounds,
        quick: o.quick,
        tarball: o.tarball.as_deref(),
    };

    let mut rep = Report::default();
    describe_setup(&mut rep, o.quick);
    if o.runs("nested") {
        nested_path(&mut rep, &b)?;
        nested_python(&mut rep, &b)?;
    }
    if o.runs("install") {
        install_path(&mut rep, &b)?;
    }
    if o.runs("exec_loop") {
        exec_loop(&mut rep, &b)?;
    }
    if o.runs("writes") {
        writes(&mut rep, &b)?;
    }
    if o.runs("configure") {
        configure(&mut rep, &b)?;
    }
    if o.runs("scale") {
        scale(&mut rep, &b, &srv)?;
    }
    if o.runs("ptrace") {
        ptrace_backend(&mut rep, &b)?;
    }
    if let Ok(dir) = std::env::var("AGENTSH_BENCH_KEEP_LOGS") {
        let _ = std::fs::write(Path::new(&dir).join("main.log"), srv.log());
    }
    // Fresh servers of its own (the shim namespace is pointed at each).
    drop(srv);
    if o.runs("first_shell") {
        first_shell(&mut rep, &b)?;
    }
    // The supervisor's own time per exec, from its trace log (another
    // server, so the trace lines cost the pairs above nothing).
    if o.runs("supervisor") {
        supervisor_time(&mut rep, &b)?;
    }
    // A server of its own, whose policy judges destinations.
    if o.runs("egress") {
        egress(&mut rep, &b)?;
    }
    // A server of its own, whose policy has an egress rule with http:.
    if o.runs("http") {
        http(&mut rep, &b)?;
    }
    // A container of its own, in gVisor (podman with runsc).
    if o.runs("gvisor") {
        gvisor(&mut rep, ws, o.quick)?;
    }
    // Whole jobs in a gVisor sandbox over this machine's root, under
    // `agentsh wrap` and without.
    if o.runs("gvisor_work") {
        gvisor_work(&mut rep, ws, o.quick, &o.runscs)?;
    }
    rep.line(&format!(
        "\n(whole run: {:.0} s)",
        started.elapsed().as_secs_f64()
    ));

    rep.write(&o.out)?;
    drop(workspace);
    Ok(())
}

/// A fresh workspace with this binary (the timer) and `hop` in its `bin/`.
fn prepare_workspace(hop: &Path) -> Result<Workspace, String> {
    let workspace = Workspace::create()?;
    let ws = workspace.path();
    copy_exec(
        &std::env::current_exe().map_err(|e| e.to_string())?,
        &ws.join("bin/agentsh-bench"),
    )?;
    copy_exec(hop, &ws.join("bin/hop"))?;
    // `AGENTSH_BENCH_WS_DIRS=N`: a workspace of about N directories (a
    // project's tree, three levels of twelve), which wrap-init's search for
    // nested repositories walks.
    if let Some(n) = std::env::var("AGENTSH_BENCH_WS_DIRS")
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
    {
        let mut made = 0;
        'fill: for a in 0..12 {
            for b in 0..12 {
                for c in 0..12 {
                    if made >= n {
                        break 'fill;
                    }
                    let d = ws.join(format!("src/m{a}/p{b}/f{c}"));
                    std::fs::create_dir_all(&d).map_err(|e| format!("{}: {e}", d.display()))?;
                    made += 1;
                }
            }
        }
    }
    Ok(workspace)
}

/// The report's first lines: the machine, and how the shim was linked.
fn describe_setup(rep: &mut Report, quick: bool) {
    let m = machine();
    rep.line(&format!(
        "Machine: {} ({} cores, {} GiB), Linux {}; {} run.",
        m["cpu"].as_str().unwrap_or("?"),
        m["cores"],
        m["mem_gib"],
        m["kernel"].as_str().unwrap_or("?"),
        if quick { "a quick" } else { "a full" }
    ));
    rep.json.insert("machine".into(), m);
    let shim_link = match Command::new("readelf")
        .arg("-l")
        .arg(bin("agentsh-shell-shim"))
        .output()
    {
        Ok(o) if String::from_utf8_lossy(&o.stdout).contains("INTERP") => "dynamic",
        Ok(o) if o.status.success() => "static-pie",
        _ => "unknown",
    };
    rep.line(&format!(
        "The shim is {shim_link} (packaging/build-release.sh builds it static-pie)."
    ));
    rep.json.insert("shim_link".into(), json!(shim_link));
}
