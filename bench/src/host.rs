//! What `/proc` says about this machine and about a process (the server):
//! the report's first line, and the scale step's CPU and memory figures.
//! A file or field that cannot be read counts as empty or zero.

use serde_json::{json, Value};

/// utime + stime of `pid` in seconds.
pub fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks: f64 = f.get(11).and_then(|x| x.parse().ok()).unwrap_or(0.0)
        + f.get(12).and_then(|x| x.parse().ok()).unwrap_or(0.0);
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    ticks / hz
}

/// The field `key` (e.g. `VmHWM:`) of `/proc/<pid>/status`, in KiB.
pub fn status_kib(pid: u32, key: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix(key))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

/// The CPU model, core count, memory and kernel release.
pub fn machine() -> Value {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("model name"))
        .map(|v| v.trim_start_matches([' ', '\t', ':']).to_string())
        .unwrap_or_default();
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .unwrap_or_default()
        .trim()
        .to_string();
    let cores = std::thread::available_parallelism().map_or(0, std::num::NonZero::get);
    let mem_gib = status_meminfo("MemTotal:") as f64 / 1024.0 / 1024.0;
    json!({"cpu": cpu, "kernel": kernel, "cores": cores, "mem_gib": (mem_gib * 10.0).round() / 10.0})
}

/// The field `key` of `/proc/meminfo`, in KiB.
fn status_meminfo(key: &str) -> u64 {
    std::fs::read_to_string("/proc/meminfo")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix(key))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}
