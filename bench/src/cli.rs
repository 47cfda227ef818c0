//! The command line: the usage text and `run`'s options (`compare` parses
//! its own, in `compare.rs`). A wrong or missing argument is answered with
//! what was wrong and the usage.

use std::path::PathBuf;

pub const USAGE: &str =
    "usage: agentsh-bench run --hop PATH [--configure-tarball PATH] [--out DIR] [--quick]
       (normally through: sudo ./bench/run.sh [--quick])
       agentsh-bench compare --server LABEL=PATH [--server LABEL=PATH ...] [--rounds R] [--n N] [--only W,..] [--out FILE]
                                        (the supervisor's time per exec of several server builds,
                                         side by side: see bench/src/compare.rs)
       agentsh-bench time --spec FILE   (internal: the timer)";

/// What `run` was asked for.
pub struct Opts {
    pub quick: bool,
    pub hop: PathBuf,
    pub tarball: Option<PathBuf>,
    pub out: PathBuf,
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
            other => return Err(format!("unknown argument {other:?}\n{USAGE}")),
        }
    }
    if o.hop.as_os_str().is_empty() {
        return Err(format!("--hop is required\n{USAGE}"));
    }
    Ok(o)
}
