//! `agentsh-bench compare`: the supervisor's own time per exec of several
//! server builds, side by side, interleaved.
//!
//! Each `--server LABEL=PATH` is an `agentsh` binary (another checkout's
//! release build, say the commit before a change). All of them run at once,
//! each with its trace log (`exec answered us=N`), in one private mount
//! namespace where this build's shim is `/bin/sh`; before each workload the
//! namespace's `shim.conf` is pointed at one server, so every server sees the
//! same shim, `agentsh-unixwrap`, policy (`agent-default`) and workloads.
//! A round runs, for every server in an order that rotates each round: the
//! common case (a dash loop of `/bin/true`: vfork children of a
//! single-threaded shell), `bench/spawner.c threaded` (an exec from a
//! multi-threaded process) and `spawner vfork` (vfork children of a process
//! with a second thread). Reported per server and workload: the p50, p90 and
//! p99 of the supervisor's own time, and the server's CPU time per exec
//! (`/proc/<pid>/stat`, clock ticks, summed over the rounds).
//!
//! The servers must speak this build's wrap-init (the wire format is
//! versioned; a server that does not is reported as failing its first
//! workload). Failure modes: any workload that fails, or a server that
//! traced fewer execs than the workload made, fails the run: a figure of a
//! run that was not supervised would be worse than none.

use crate::workload::compile_spawner;
use agentsh_tests::ns::Namespace;
use agentsh_tests::server::{server_base, TestServer};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The three callers, in the order a round runs them.
const WORKLOADS: &[&str] = &["common", "threaded", "vfork"];

/// What `compare` was asked for.
pub struct CompareOpts {
    pub servers: Vec<(String, PathBuf)>,
    pub rounds: usize,
    /// Execs per workload and round.
    pub n: usize,
    pub out: Option<PathBuf>,
    /// The workloads to run (default: all of [`WORKLOADS`]).
    pub only: Vec<&'static str>,
    /// label → configuration text added to that server's config
    /// (`--config LABEL=FILE`: the same binary under another setting).
    pub configs: BTreeMap<String, String>,
}

/// Parses `compare`'s arguments.
///
/// # Errors
/// A usage message.
pub fn parse(args: &[String]) -> Result<CompareOpts, String> {
    let mut o = CompareOpts {
        servers: Vec::new(),
        rounds: 10,
        n: 300,
        out: None,
        only: WORKLOADS.to_vec(),
        configs: BTreeMap::new(),
    };
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut val = || it.next().cloned().ok_or(format!("{a} needs a value"));
        match a.as_str() {
            "--server" => {
                let v = val()?;
                let (label, path) = v
                    .split_once('=')
                    .ok_or(format!("--server LABEL=PATH, not {v:?}"))?;
                o.servers.push((label.to_string(), PathBuf::from(path)));
            }
            "--config" => {
                let v = val()?;
                let (label, file) = v
                    .split_once('=')
                    .ok_or(format!("--config LABEL=FILE, not {v:?}"))?;
                let text = std::fs::read_to_string(file)
                    .map_err(|e| format!("--config {label}: cannot read {file}: {e}"))?;
                o.configs.insert(label.to_string(), text);
            }
            "--rounds" => o.rounds = val()?.parse().map_err(|e| format!("--rounds: {e}"))?,
            "--n" => o.n = val()?.parse().map_err(|e| format!("--n: {e}"))?,
            "--out" => o.out = Some(PathBuf::from(val()?)),
            "--only" => {
                let v = val()?;
                o.only = v
                    .split(',')
                    .map(|w| {
                        WORKLOADS
                            .iter()
                            .copied()
                            .find(|k| *k == w)
                            .ok_or(format!("--only: no workload {w:?} (one of {WORKLOADS:?})"))
                    })
                    .collect::<Result<_, _>>()?;
            }
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    if o.servers.is_empty() {
        return Err("compare needs at least one --server LABEL=PATH".into());
    }
    if let Some(l) = o
        .configs
        .keys()
        .find(|l| !o.servers.iter().any(|(s, _)| s == *l))
    {
        return Err(format!("--config {l}: no --server {l}=PATH"));
    }
    Ok(o)
}

/// One server under comparison.
struct Subject {
    label: String,
    srv: TestServer,
    /// Log lines already consumed.
    seen: usize,
    /// workload → supervisor µs per exec, and (CPU ticks, execs).
    us: BTreeMap<&'static str, Vec<u64>>,
    cpu: BTreeMap<&'static str, (u64, usize)>,
}

fn cpu_ticks(pid: u32) -> u64 {
    let Ok(text) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return 0;
    };
    let Some(close) = text.rfind(')') else {
        return 0;
    };
    let f: Vec<&str> = text[close + 2..].split_whitespace().collect();
    // utime and stime are fields 14 and 15 (f[11], f[12]).
    let n = |i: usize| f.get(i).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
    n(11) + n(12)
}

fn answered_us(log: &str, skip: usize) -> (Vec<u64>, usize) {
    let mut lines = 0;
    let mut us = Vec::new();
    for l in log.lines() {
        lines += 1;
        if lines <= skip || !l.contains("exec answered") {
            continue;
        }
        if let Some(v) = l
            .split("us=")
            .nth(1)
            .and_then(|v| v.split(|c: char| !c.is_ascii_digit()).next())
            .and_then(|v| v.parse().ok())
        {
            us.push(v);
        }
    }
    (us, lines)
}

fn workload_cmd(ns: &Namespace, spawner: &Path, workload: &str, n: usize) -> Command {
    let script = match workload {
        "common" => format!("i=0; while [ $i -lt {n} ]; do /bin/true; i=$((i+1)); done"),
        mode => format!("exec {} {mode} {n} /bin/true", spawner.display()),
    };
    let mut c = ns.command("/bin/sh");
    c.arg("-c")
        .arg(script)
        .stdin(Stdio::null())
        .stdout(Stdio::null());
    c
}

fn quantile(sorted: &[u64], q: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    sorted[((sorted.len() - 1) as f64 * q).round() as usize]
}

/// Runs the comparison; see the module doc.
///
/// # Errors
/// What failed: a server that would not start a tree, a workload that
/// failed, a server that traced fewer execs than were made.
pub fn run(o: &CompareOpts, ws: &Path) -> Result<String, String> {
    let spawner = compile_spawner(ws)?;
    let ns = Namespace::new();
    ns.install_shim(false);
    let mut subjects = start_subjects(o, &ns, ws);
    let s = subjects.len();
    for round in 0..o.rounds {
        for k in 0..s {
            let sub = &mut subjects[(round + k) % s];
            ns.configure(&sub.srv.url, "on");
            for &w in &o.only {
                sub.measure(&ns, &spawner, w, o.n)?;
            }
        }
        eprintln!("compare: round {} of {} done", round + 1, o.rounds);
    }
    if let Ok(dir) = std::env::var("AGENTSH_BENCH_KEEP_LOGS") {
        for sub in &subjects {
            let _ = std::fs::write(
                Path::new(&dir).join(format!("{}.log", sub.label)),
                sub.srv.log(),
            );
        }
    }
    Ok(report(o, &mut subjects))
}

/// Every `--server`, started in `ns` with its supervisor's log at trace.
fn start_subjects(o: &CompareOpts, ns: &Namespace, ws: &Path) -> Vec<Subject> {
    o.servers
        .iter()
        .map(|(label, path)| {
            let path = path.clone();
            let extra = o.configs.get(label).map_or("", String::as_str);
            let srv = TestServer::start_on_default_policy(
                &server_base(),
                &format!("workspace: {}\n{extra}", ws.display()),
                |_| {
                    let mut c = ns.command(path);
                    c.env("AGENTSH_LOG", "info,agentsh::supervisor=trace");
                    c
                },
            );
            Subject {
                label: label.clone(),
                srv,
                seen: 0,
                us: BTreeMap::new(),
                cpu: BTreeMap::new(),
            }
        })
        .collect()
}

impl Subject {
    /// Runs workload `w` (`n` execs) once, `ns`'s shim pointed at this
    /// server, and keeps the supervisor's times and the server's CPU ticks.
    fn measure(
        &mut self,
        ns: &Namespace,
        spawner: &Path,
        w: &'static str,
        n: usize,
    ) -> Result<(), String> {
        let (_, lines) = answered_us(&self.srv.log(), 0);
        self.seen = lines;
        let cpu0 = cpu_ticks(self.srv.pid());
        let run = workload_cmd(ns, spawner, w, n)
            .output()
            .map_err(|e| format!("{} {w}: {e}", self.label))?;
        let cpu1 = cpu_ticks(self.srv.pid());
        if !run.status.success() {
            return Err(format!(
                "{} {w}: {} {}",
                self.label,
                run.status,
                String::from_utf8_lossy(&run.stderr).trim()
            ));
        }
        let (us, _) = answered_us(&self.srv.log(), self.seen);
        if us.len() < n {
            return Err(format!(
                "{} {w}: {} `exec answered` lines for {} execs (is its log at trace?)",
                self.label,
                us.len(),
                n
            ));
        }
        let c = self.cpu.entry(w).or_default();
        c.0 += cpu1.saturating_sub(cpu0);
        c.1 += us.len();
        self.us.entry(w).or_default().extend(us);
        Ok(())
    }
}

fn report(o: &CompareOpts, subjects: &mut [Subject]) -> String {
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    let mut md = format!(
        "Supervisor time per exec, {} rounds × {} execs per workload, servers interleaved.\n\n\
         | server | caller | n | p50 µs | p90 µs | p99 µs | p50 − common | server CPU µs/exec |\n\
         |---|---|---:|---:|---:|---:|---:|---:|\n",
        o.rounds, o.n
    );
    for sub in subjects.iter_mut() {
        let mut common = 0;
        for &w in &o.only {
            let v = sub.us.entry(w).or_default();
            v.sort_unstable();
            let p50 = quantile(v, 0.5);
            if w == "common" {
                common = p50;
            }
            let (ticks, execs) = sub.cpu.get(w).copied().unwrap_or((0, 0));
            let cpu = ticks as f64 / hz * 1e6 / execs.max(1) as f64;
            md.push_str(&format!(
                "| {} | {w} | {} | {p50} | {} | {} | {} | {cpu:.0} |\n",
                sub.label,
                v.len(),
                quantile(v, 0.9),
                quantile(v, 0.99),
                if w == "common" {
                    "—".to_string()
                } else {
                    format!("{:+}", p50 as i64 - common as i64)
                },
            ));
        }
    }
    md
}
