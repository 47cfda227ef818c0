//! Reading the server's audit trail (`audit.jsonl`, one JSON event a line):
//! how every step checks that what it timed really ran supervised. A line
//! that does not parse is skipped; a missing file reads as no events.

use serde_json::Value;
use std::path::Path;

/// Every event in the audit trail at `path` so far. The server beside it
/// (a test server keeps its API socket at `run/api.sock` in the same
/// directory) is asked for events first: its events route waits for
/// events promised before an answer (an allowed exec's is written just
/// after it), so what a timed run did is in the file.
pub fn audit_lines(path: &Path) -> Vec<Value> {
    if let Some(dir) = path.parent() {
        agentsh_tests::server::settle_events(&dir.join("run").join("api.sock"));
    }
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

/// `(execve, wrap_init)` events in the audit trail so far.
pub fn audit_counts(path: &Path) -> (usize, usize) {
    let events = audit_lines(path);
    let count = |ty: &str| events.iter().filter(|e| e["type"] == ty).count();
    (count("execve"), count("wrap_init"))
}
