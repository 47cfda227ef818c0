//! Where the supervisor's time per exec goes, and the floor under its first
//! step, for the supervisor step's report (issue 44's "measure honestly").
//!
//! [`phase_medians`] reads the `phases=` field of the trace lines the
//! supervisor step already collects (`server/src/supervisor/phases.rs`:
//! microseconds per step of one exec). [`proc_stat_floor`] measures, beside
//! it, what the first of those steps cannot go below: a process nobody has
//! read before, its `/proc/<pid>/stat` opened and read (the caller's thread
//! count, parent and start time come from there), the way the supervisor
//! reads it; and the same file read again once open (what a read costs
//! without the first look-up of the new pid's `/proc` entries).
//!
//! Failure modes: a child that cannot be forked, or a `/proc` file that
//! cannot be read, is the step's error (the figure would be missing).

use crate::report::Report;
use serde_json::json;
use std::os::unix::fs::FileExt;
use std::time::Instant;

/// Each phase's median over the `exec answered` lines of `log` after its
/// first `skip` lines, in the order the phases first appear.
pub fn phase_medians(log: &str, skip: usize) -> Vec<(String, u64)> {
    let mut names: Vec<String> = Vec::new();
    let mut values: Vec<Vec<u64>> = Vec::new();
    for line in log
        .lines()
        .skip(skip)
        .filter(|l| l.contains("exec answered"))
    {
        let Some(rest) = line.split(" phases=").nth(1) else {
            continue;
        };
        for kv in rest.trim_matches('"').split_whitespace() {
            let Some((k, v)) = kv.split_once('=') else {
                continue;
            };
            let Ok(v) = v.parse::<u64>() else { continue };
            let i = match names.iter().position(|n| n == k) {
                Some(i) => i,
                None => {
                    names.push(k.to_string());
                    values.push(Vec::new());
                    names.len() - 1
                }
            };
            values[i].push(v);
        }
    }
    names
        .into_iter()
        .zip(values)
        .map(|(n, mut v)| {
            v.sort_unstable();
            let m = v[(v.len() - 1) / 2];
            (n, m)
        })
        .collect()
}

/// Reports the phase medians (`phases`, from [`phase_medians`]) and the
/// floor under the first phase, measured now over `n` new processes.
///
/// # Errors
/// A child cannot be forked or its `stat` read.
pub fn report(rep: &mut Report, phases: &[(String, u64)], n: usize) -> Result<(), String> {
    if !phases.is_empty() {
        let text: Vec<String> = phases.iter().map(|(k, v)| format!("{k} {v}")).collect();
        rep.line(&format!(
            "* where it goes, each step's median (µs, `server/src/supervisor/phases.rs`): {}",
            text.join(", ")
        ));
        let map: serde_json::Map<String, serde_json::Value> =
            phases.iter().map(|(k, v)| (k.clone(), json!(v))).collect();
        rep.json.insert("supervisor_phases".into(), map.into());
    }
    let (first, again) = proc_stat_floor(n)?;
    rep.line(&format!(
        "* the floor under `stat`, measured beside it ({n} new processes): a process's `/proc/<pid>/stat` opened, read and closed the first time anyone looks: p50 **{first} µs**; the same file read again once open: p50 {again} µs"
    ));
    rep.json.insert(
        "proc_stat_floor".into(),
        json!({"n": n, "first_p50_us": first, "again_p50_us": again}),
    );
    Ok(())
}

/// Medians (µs) of the first open-read-close of a new process's `stat`,
/// and of a second read of the open file, over `n` children that wait.
fn proc_stat_floor(n: usize) -> Result<(u64, u64), String> {
    let mut first = Vec::with_capacity(n);
    let mut again = Vec::with_capacity(n);
    for _ in 0..n {
        let child = Waiting::fork()?;
        let path = format!("/proc/{}/stat", child.pid);
        let t0 = Instant::now();
        let f = std::fs::File::open(&path).map_err(|e| format!("{path}: {e}"))?;
        let mut buf = [0u8; 1536];
        f.read_at(&mut buf, 0).map_err(|e| format!("{path}: {e}"))?;
        let t1 = Instant::now();
        f.read_at(&mut buf, 0).map_err(|e| format!("{path}: {e}"))?;
        let t2 = Instant::now();
        drop(f);
        let t3 = Instant::now();
        first.push(((t1 - t0) + (t3 - t2)).as_micros() as u64);
        again.push((t2 - t1).as_micros() as u64);
    }
    first.sort_unstable();
    again.sort_unstable();
    Ok((first[(n - 1) / 2], again[(n - 1) / 2]))
}

/// A forked child that waits in `pause` until it is dropped (killed and
/// reaped).
struct Waiting {
    pid: i32,
}

impl Waiting {
    fn fork() -> Result<Waiting, String> {
        // SAFETY: the child calls only async-signal-safe functions (pause,
        // _exit) before it is killed.
        match unsafe { libc::fork() } {
            -1 => Err(format!("fork: {}", std::io::Error::last_os_error())),
            0 => loop {
                // SAFETY: async-signal-safe; the parent kills this child.
                unsafe { libc::pause() };
            },
            pid => Ok(Waiting { pid }),
        }
    }
}

impl Drop for Waiting {
    fn drop(&mut self) {
        // SAFETY: kill and waitpid on our own child; no memory is shared.
        unsafe {
            libc::kill(self.pid, libc::SIGKILL);
            libc::waitpid(self.pid, std::ptr::null_mut(), 0);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn phases_are_the_medians_of_each_step_in_order() {
        let log = "x\n\
            T exec answered pid=1 us=9 phases=stat=3 path=5 audit=1\n\
            T exec answered pid=2 us=9 phases=stat=1 path=7 audit=2\n\
            T something else phases=stat=100\n\
            T exec answered pid=3 us=9 phases=stat=2 path=6 audit=9\n";
        assert_eq!(
            phase_medians(log, 0),
            vec![("stat".into(), 2), ("path".into(), 6), ("audit".into(), 2)]
        );
        assert_eq!(
            phase_medians(log, 3),
            vec![("stat".into(), 2), ("path".into(), 6), ("audit".into(), 9)]
        );
    }

    #[test]
    fn the_floor_reads_each_new_process_own_stat() {
        // Fails when a child cannot be forked or its stat line is not its own.
        proc_stat_floor(5).unwrap();
    }
}
