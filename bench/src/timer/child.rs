//! The timer process (`agentsh-bench time --spec FILE`): runs each entry of
//! the spec, interleaved, whole processes from fork to wait, and prints the
//! samples as JSON. Any entry that fails (or its prep), or a bare responder
//! that answered nothing, fails the whole timing: a sample of a command that
//! did not run as described would be worse than none.

use super::bare_notify::bare_notify;
use super::{Samples, Spec};
use std::os::fd::AsRawFd;
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::time::Instant;

/// `argv` appending the shim's and unixwrap's log to `log`
/// (`AGENTSH_WRAPPER_LOG_FD`: the file's fd, kept open across the exec in
/// the child only).
fn with_wrapper_log(mut cmd: Command, log: &std::fs::File) -> Command {
    let fd = log.as_raw_fd();
    cmd.env("AGENTSH_WRAPPER_LOG_FD", fd.to_string());
    // SAFETY: runs in the forked child before exec; fcntl only.
    unsafe {
        cmd.pre_exec(move || {
            if libc::fcntl(fd, libc::F_SETFD, 0) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    cmd
}

/// `argv`, stdout discarded and stderr kept, entering the mount namespace
/// `ns` (if any) before it execs.
fn spawn_in(ns: Option<&std::fs::File>, argv: &[String]) -> Command {
    let mut cmd = Command::new(&argv[0]);
    cmd.args(&argv[1..])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    if let Some(f) = ns {
        let fd = f.as_raw_fd();
        // SAFETY: runs in the forked child before exec; setns only.
        unsafe {
            cmd.pre_exec(move || {
                if libc::setns(fd, libc::CLONE_NEWNS) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
    }
    cmd
}

/// Runs `argv` (a prep) to the end; a failure, with its stderr, is an error
/// naming `what`.
fn run_checked(ns: Option<&std::fs::File>, argv: &[String], what: &str) -> Result<(), String> {
    let out = spawn_in(ns, argv)
        .output()
        .map_err(|e| format!("{what}: cannot run {argv:?}: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "{what}: {argv:?} failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(())
}

/// Times every entry `rounds` times, interleaved, the starting entry rotating
/// each round so no entry always runs first (or right after another).
fn time(spec: &Spec) -> Result<Samples, String> {
    let open = |ns: &Option<String>| -> Result<Option<std::fs::File>, String> {
        match ns {
            Some(p) => Ok(Some(
                std::fs::File::open(p).map_err(|err| format!("open {p}: {err}"))?,
            )),
            None => Ok(None),
        }
    };
    let mut files = Vec::new();
    let mut prep_files = Vec::new();
    let mut logs = Vec::new();
    for e in &spec.entries {
        files.push(open(&e.ns)?);
        prep_files.push(open(&e.prep_ns)?);
        logs.push(match &e.wrapper_log {
            Some(p) => Some(
                std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(p)
                    .map_err(|err| format!("open {p}: {err}"))?,
            ),
            None => None,
        });
    }
    let mut samples: Samples = spec
        .entries
        .iter()
        .map(|e| (e.label.clone(), Vec::with_capacity(spec.rounds)))
        .collect();
    let n = spec.entries.len();
    for round in 0..spec.warmup + spec.rounds {
        for k in 0..n {
            let i = (round + k) % n;
            let e = &spec.entries[i];
            let ns = files[i].as_ref();
            if let Some(prep) = &e.prep {
                run_checked(prep_files[i].as_ref(), prep, &format!("{} (prep)", e.label))?;
            }
            let mut cmd = spawn_in(ns, &e.argv);
            if let Some(log) = &logs[i] {
                cmd = with_wrapper_log(cmd, log);
            }
            let responder = if e.bare_notify {
                Some(bare_notify(&mut cmd).map_err(|err| format!("{}: {err}", e.label))?)
            } else {
                None
            };
            let t0 = Instant::now();
            let out = cmd
                .output()
                .map_err(|err| format!("{}: cannot run {:?}: {err}", e.label, e.argv))?;
            let dt = t0.elapsed();
            if let Some(r) = responder {
                let answered = r
                    .join()
                    .map_err(|_| format!("{}: the responder panicked", e.label))?;
                if answered == 0 {
                    return Err(format!("{}: the bare responder answered nothing", e.label));
                }
            }
            if !out.status.success() {
                return Err(format!(
                    "{}: {:?} failed ({}): {}",
                    e.label,
                    e.argv,
                    out.status,
                    String::from_utf8_lossy(&out.stderr).trim()
                ));
            }
            if round >= spec.warmup {
                samples
                    .get_mut(&e.label)
                    .expect("label")
                    .push(dt.as_nanos() as u64);
            }
        }
    }
    Ok(samples)
}

/// The `time` mode: reads the spec at `spec_path`, times it, prints the samples.
pub fn timer_main(spec_path: &str) -> Result<(), String> {
    let text = std::fs::read_to_string(spec_path).map_err(|e| format!("{spec_path}: {e}"))?;
    let spec: Spec = serde_json::from_str(&text).map_err(|e| format!("{spec_path}: {e}"))?;
    let samples = time(&spec)?;
    println!(
        "{}",
        serde_json::to_string(&samples).map_err(|e| e.to_string())?
    );
    Ok(())
}
