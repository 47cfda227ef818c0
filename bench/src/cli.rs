//! The command line: the usage text and `run`'s options (`compare` parses
//! its own, in `compare.rs`). A wrong or missing argument is answered with
//! what was wrong and the usage.

use std::path::PathBuf;

pub const USAGE: &str =
    "usage: agentsh-bench run --hop PATH [--configure-tarball PATH] [--out DIR] [--quick] [--only STEP,..] [--runsc PATH]
       (normally through: sudo ./bench/run.sh [--quick] [--only STEP,..]; steps: nested, install,
        exec_loop, writes, configure, scale, ptrace, first_shell, supervisor, egress, http, gvisor,
        gvisor_work)
       agentsh-bench compare --server LABEL=PATH [--server LABEL=PATH ...] [--config LABEL=FILE] [--rounds R] [--n N] [--only W,..] [--out FILE]
                                        (the supervisor's time per exec of several server builds,
                                         side by side: see bench/src/compare.rs)
       agentsh-bench time --spec FILE   (internal: the timer)";

/// What `run` was asked for.
pub struct Opts {
    pub quick: bool,
    pub hop: PathBuf,
    pub tarball: Option<PathBuf>,
    pub out: PathBuf,
    /// The steps to run (empty: all of them).
    pub only: Vec<String>,
    /// Other gVisor builds step 11 runs under too (`--runsc PATH`), beside
    /// the installed one.
    pub runscs: Vec<PathBuf>,
}

/// The steps `--only` names, in the report's order.
pub const STEPS: [&str; 13] = [
    "nested",
    "install",
    "exec_loop",
    "writes",
    "configure",
    "scale",
    "ptrace",
    "first_shell",
    "supervisor",
    "egress",
    "http",
    "gvisor",
    "gvisor_work",
];

impl Opts {
    /// Whether step `name` runs.
    pub fn runs(&self, name: &str) -> bool {
        self.only.is_empty() || self.only.iter().any(|s| s == name)
    }
}

/// Parses `run`'s arguments.
///
/// # Errors
/// What was wrong, and the usage.
pub fn parse_run(args: &[String]) -> Result<Opts, String> {
    let mut o = Opts {
        quick: false,
        hop: PathBuf::new(),
        tarball: None,
        out: PathBuf::from("target/bench"),
        only: Vec::new(),
        runscs: Vec::new(),
    };
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut val = |name: &str| {
            it.next()
                .cloned()
                .ok_or_else(|| format!("{name} needs a value\n{USAGE}"))
        };
        match a.as_str() {
            "--quick" => o.quick = true,
            "--hop" => o.hop = PathBuf::from(val("--hop")?),
            "--configure-tarball" => o.tarball = Some(PathBuf::from(val("--configure-tarball")?)),
            "--out" => o.out = PathBuf::from(val("--out")?),
            "--runsc" => o.runscs.push(PathBuf::from(val("--runsc")?)),
            "--only" => {
                for step in val("--only")?.split(',') {
                    if !STEPS.contains(&step) {
                        return Err(format!(
                            "--only: no step {step:?} (steps: {})\n{USAGE}",
                            STEPS.join(", ")
                        ));
                    }
                    o.only.push(step.to_string());
                }
            }
            other => return Err(format!("unknown argument {other:?}\n{USAGE}")),
        }
    }
    if o.hop.as_os_str().is_empty() {
        return Err(format!("--hop is required\n{USAGE}"));
    }
    Ok(o)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(v: &[&str]) -> Vec<String> {
        v.iter().map(|a| (*a).to_string()).collect()
    }

    #[test]
    fn run_without_hop_is_refused_with_the_usage() {
        let err = parse_run(&args(&["--quick"])).err().unwrap_or_default();
        assert!(err.starts_with("--hop is required\n"));
        assert!(err.ends_with(USAGE));
    }

    #[test]
    fn run_options_default_to_a_full_run_into_target_bench() {
        let o = parse_run(&args(&["--hop", "h"])).expect("parses");
        assert!(!o.quick);
        assert_eq!(o.hop, PathBuf::from("h"));
        assert_eq!(o.tarball, None);
        assert_eq!(o.out, PathBuf::from("target/bench"));
    }

    #[test]
    fn only_names_steps_and_refuses_an_unknown_one() {
        let o =
            parse_run(&args(&["--hop", "h", "--only", "first_shell,supervisor"])).expect("parses");
        assert!(o.runs("first_shell") && o.runs("supervisor"));
        assert!(!o.runs("nested"));
        let all = parse_run(&args(&["--hop", "h"])).expect("parses");
        assert!(STEPS.iter().all(|s| all.runs(s)));
        let err = parse_run(&args(&["--hop", "h", "--only", "first-shell"]))
            .err()
            .unwrap_or_default();
        assert!(err.starts_with("--only: no step \"first-shell\""), "{err}");
    }
}
