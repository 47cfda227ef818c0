//! `agentsh-bench`: what agentsh costs, measured side by side in one run.
//!
//! Run through `bench/run.sh` (it builds the release binaries, compiles the
//! static `hop`, fetches the configure workload and calls `agentsh-bench run`).
//! Everything happens in private mount namespaces (this machine's `/bin/sh`
//! is never touched): one with the shim installed as `/bin/sh` and a server
//! on the embedded defaults (policy `agent-default`), one without (the real
//! shell). Each pair is timed interleaved (A B A B ...) by one timer process,
//! whole processes from fork to wait, warm-up rounds discarded.
//!
//! Pairs: the nested path (timed by a timer that itself runs inside a
//! supervised tree), the install path, a 1000-exec shell loop, a real
//! `./configure`, 64 trees at once, the ptrace backend beside notify, and
//! the first shell after `ready` against later ones (fresh servers); plus
//! the supervisor's own time per exec from its trace log. Every pair checks
//! that what it timed really ran supervised (audit events, wrap-init counts)
//! and fails the run otherwise: a benchmark of a bypass would be worse than
//! none.
//!
//! `agentsh-bench time --spec FILE` is the timer (an internal mode).
//!
//! The layout follows the run: `cli` (the arguments), `setup` (the
//! workspace, namespaces, servers), `timer` (what is timed and the timer
//! process), `workload` (the commands timed), `steps` (one module per step
//! of the report, in its order), `report` (tables and results files),
//! `audit` and `host` (what the audit trail and `/proc` say); `compare` is
//! the `compare` mode.

mod audit;
mod cli;
mod compare;
mod host;
mod report;
mod setup;
mod steps;
mod timer;
mod workload;

use cli::USAGE;
use setup::Workspace;
use std::process::ExitCode;

/// `agentsh-bench compare`: a workspace under /srv (as `run` has), the
/// comparison, the table printed and written to `--out`.
fn run_compare(o: &compare::CompareOpts) -> Result<(), String> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Err("needs root (mount namespaces, seccomp listeners)".into());
    }
    let workspace = Workspace::create()?;
    let md = compare::run(o, workspace.path())?;
    println!("{md}");
    if let Some(out) = &o.out {
        std::fs::write(out, &md).map_err(|e| format!("{}: {e}", out.display()))?;
    }
    drop(workspace);
    Ok(())
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let res = match args.first().map(String::as_str) {
        Some("time") if args.len() == 3 && args[1] == "--spec" => timer::timer_main(&args[2]),
        Some("run") => cli::parse_run(&args[1..]).and_then(|o| steps::run(&o)),
        Some("compare") => compare::parse(&args[1..]).and_then(|o| run_compare(&o)),
        Some("-h" | "--help") => {
            println!("{USAGE}");
            Ok(())
        }
        _ => Err(USAGE.to_string()),
    };
    match res {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("agentsh-bench: {e}");
            ExitCode::FAILURE
        }
    }
}
