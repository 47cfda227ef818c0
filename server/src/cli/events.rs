//! `agentsh events`: a session's audit trail from a running server, as JSON
//! lines or a table, once or following; `agentsh events query`: the audit
//! log files searched by session, decision, rule and age.

use crate::cli::client::{Client, ClientError};
use std::path::{Path, PathBuf};

/// What `agentsh events` could not do.
#[derive(Debug, thiserror::Error)]
pub(super) enum EventsError {
    #[error("--since {0:?}: a number and a unit (s, m, h, d), e.g. 15m")]
    SinceNumber(String),
    #[error("--since {0:?}: the unit is s, m, h or d")]
    SinceUnit(String),
    #[error("no audit log at {} (give the server's audit.jsonl with --file)", .0.display())]
    NoLog(PathBuf),
    #[error("{}: {source}", file.display())]
    ReadFile {
        file: PathBuf,
        source: std::io::Error,
    },
    #[error(transparent)]
    Client(#[from] ClientError),
    #[error("unexpected answer from {server}{target}: not a list")]
    NotAList { server: String, target: String },
}

type Result<T> = std::result::Result<T, EventsError>;

/// How `agentsh events` prints: one JSON object per line, or a table.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub(super) enum EventFormat {
    Json,
    Table,
}

/// Prints one event as a table row, but a retry of a refused exec (the same
/// attempt, at the next `PATH` entry a shell tried: it would read as the
/// command refused twice; the JSON keeps it, marked `retry`).
fn print_row(ev: &serde_json::Value) {
    if ev["type"] == "execve" && ev["retry"] == true {
        return;
    }
    println!("{}", table_row(ev));
}

/// One event as a table row.
fn table_row(ev: &serde_json::Value) -> String {
    let time = text(ev, "timestamp").get(11..23).unwrap_or("").to_string();
    let head = format!("{:<16} {time:<12}", number(ev, "id"));
    match ev.get("type").and_then(|v| v.as_str()) {
        Some("execve") => exec_row(&head, ev),
        Some("connect") => connect_row(&head, ev),
        Some("file") => file_row(&head, ev),
        Some("policy_reload") => format!(
            "{head} policy_reload {} (sha256 {}) by {} pid {}",
            text(ev, "policy"),
            text(ev, "hash").get(..12).unwrap_or(""),
            text(ev, "by"),
            number(ev, "by_pid")
        ),
        Some("limit") => format!(
            "{head} limit {} {} (tree {}): {}",
            text(ev, "limit"),
            text(ev, "value"),
            number(ev, "root_pid"),
            text(ev, "detail")
        ),
        Some(other) => format!("{head} {other}"),
        None => ev.to_string(),
    }
}

fn text(ev: &serde_json::Value, k: &str) -> String {
    ev.get(k).and_then(|v| v.as_str()).unwrap_or("").to_string()
}

fn number(ev: &serde_json::Value, k: &str) -> String {
    ev.get(k)
        .map(std::string::ToString::to_string)
        .unwrap_or_default()
}

fn exec_row(head: &str, ev: &serde_json::Value) -> String {
    let argv: Vec<String> = ev["argv"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|x| x.as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default();
    let mut cmd = argv.join(" ");
    if cmd.len() > 60 {
        cmd.truncate(57);
        cmd.push_str("...");
    }
    format!(
        "{head} {:<7} {:<5} {:<7} {:<6} {:<26} {}  [{}]",
        number(ev, "pid"),
        number(ev, "depth"),
        text(ev, "decision"),
        text(ev, "effective_action"),
        text(ev, "rule"),
        cmd,
        text(ev, "filename")
    )
}

fn connect_row(head: &str, ev: &serde_json::Value) -> String {
    let dest = match (
        text(ev, "ip").as_str(),
        ev.get("port").and_then(serde_json::Value::as_u64),
    ) {
        ("", _) => "(no destination)".to_string(),
        (ip, Some(port)) if ip.contains(':') => format!("[{ip}]:{port}"),
        (ip, Some(port)) => format!("{ip}:{port}"),
        (ip, None) => ip.to_string(),
    };
    format!(
        "{head} {:<7} {:<5} {:<7} {:<6} {:<26} {} {dest} {}",
        number(ev, "pid"),
        "-",
        text(ev, "decision"),
        text(ev, "decision"),
        text(ev, "rule"),
        text(ev, "syscall"),
        text(ev, "protocol")
    )
}

/// A path call the tracer's file rules refused: the call, its paths, and
/// the right missing where.
fn file_row(head: &str, ev: &serde_json::Value) -> String {
    let mut what = format!("{} {}", text(ev, "syscall"), text(ev, "path"));
    if let Some(p2) = ev.get("path2").and_then(|v| v.as_str()) {
        what.push_str(&format!(" -> {p2}"));
    }
    let right = match (text(ev, "right").as_str(), text(ev, "resolved").as_str()) {
        ("", "") => String::new(),
        (r, at) => format!("  [{r} {at}]"),
    };
    format!(
        "{head} {:<7} {:<5} {:<7} {:<6} {:<26} {what}{right}",
        number(ev, "pid"),
        "-",
        text(ev, "decision"),
        text(ev, "decision"),
        text(ev, "rule"),
    )
}

/// What `events query` keeps.
pub(super) struct Filter {
    pub session: Option<String>,
    pub decision: Option<String>,
    pub rule: Option<String>,
    pub since: Option<String>,
}

/// `90s`, `15m`, `2h`, `7d` as seconds.
fn duration_secs(text: &str) -> Result<u64> {
    let (n, unit) = text.split_at(text.len().saturating_sub(1));
    let n: u64 = n
        .parse()
        .map_err(|_| EventsError::SinceNumber(text.to_string()))?;
    let unit = match unit {
        "s" => 1,
        "m" => 60,
        "h" => 3600,
        "d" => 86_400,
        _ => return Err(EventsError::SinceUnit(text.to_string())),
    };
    Ok(n.saturating_mul(unit))
}

/// `agentsh events verify`: the hash chain of the log and its rotated
/// copies; the exit status (0 intact, 1 broken, 2 unreadable).
pub(super) fn verify(file: &Path) -> std::process::ExitCode {
    let mut texts = Vec::new();
    for f in log_files(file) {
        match std::fs::read_to_string(&f) {
            Ok(t) => texts.push((f.display().to_string(), t)),
            Err(e) => {
                eprintln!("agentsh: cannot read {}: {e}", f.display());
                return std::process::ExitCode::from(2);
            }
        }
    }
    let v = crate::audit::verify_chain(&texts);
    match v.broken {
        None => {
            println!(
                "{}: {} lines in {} file(s), the chain is intact{}",
                file.display(),
                v.lines,
                texts.len(),
                if v.starts_mid_chain {
                    " (it starts mid-way: the file before the oldest one here is gone)"
                } else {
                    ""
                }
            );
            std::process::ExitCode::SUCCESS
        }
        Some(b) => {
            println!(
                "{}:{}{}: {} ({} lines before it verified)",
                b.file,
                b.line,
                b.id.map_or_else(String::new, |id| format!(" (event {id})")),
                b.why,
                v.lines
            );
            std::process::ExitCode::FAILURE
        }
    }
}

/// The log and its rotated copies, oldest first (FILE.N ... FILE.1, FILE).
fn log_files(file: &Path) -> Vec<PathBuf> {
    let mut rotated: Vec<(u32, PathBuf)> = Vec::new();
    if let (Some(dir), Some(name)) = (file.parent(), file.file_name()) {
        let prefix = format!("{}.", name.to_string_lossy());
        for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            let entry = e.file_name().to_string_lossy().into_owned();
            if let Some(n) = entry
                .strip_prefix(&prefix)
                .and_then(|n| n.parse::<u32>().ok())
            {
                rotated.push((n, e.path()));
            }
        }
    }
    rotated.sort_by_key(|r| std::cmp::Reverse(r.0));
    rotated
        .into_iter()
        .map(|(_, p)| p)
        .chain(std::iter::once(file.to_path_buf()))
        .collect()
}

/// `agentsh events query`: prints the events of the log files that pass
/// `f`, oldest first.
///
/// # Errors
/// A bad `--since`, or no log file to read.
pub(super) fn query(file: &Path, f: &Filter, json: bool) -> Result<()> {
    let after = match &f.since {
        Some(s) => {
            let secs = duration_secs(s)?;
            Some(crate::audit::rfc3339_at(
                std::time::SystemTime::now() - std::time::Duration::from_secs(secs),
            ))
        }
        None => None,
    };
    let files = log_files(file);
    if !files.iter().any(|p| p.exists()) {
        return Err(EventsError::NoLog(file.to_path_buf()));
    }
    if !json {
        println!(
            "{:<16} {:<12} {:<7} {:<5} {:<7} {:<6} {:<26} COMMAND  [PROGRAM]",
            "ID", "TIME", "PID", "DEPTH", "POLICY", "ACTION", "RULE"
        );
    }
    let is = |ev: &serde_json::Value, key: &str, want: &Option<String>| {
        want.as_ref()
            .is_none_or(|w| ev.get(key).and_then(|v| v.as_str()) == Some(w.as_str()))
    };
    for path in files {
        let Ok(text) = std::fs::read_to_string(&path) else {
            continue;
        };
        for line in text.lines() {
            let Ok(ev) = serde_json::from_str::<serde_json::Value>(line) else {
                continue;
            };
            let recent = after.as_ref().is_none_or(|a| {
                ev.get("timestamp")
                    .and_then(|t| t.as_str())
                    .is_some_and(|t| t >= a.as_str())
            });
            if recent
                && is(&ev, "session_id", &f.session)
                && is(&ev, "decision", &f.decision)
                && is(&ev, "rule", &f.rule)
            {
                if json {
                    println!("{ev}");
                } else {
                    print_row(&ev);
                }
            }
        }
    }
    Ok(())
}

/// The table's header line (`--format table`).
fn header(format: EventFormat) {
    if matches!(format, EventFormat::Table) {
        println!(
            "{:<16} {:<12} {:<7} {:<5} {:<7} {:<6} {:<26} COMMAND  [PROGRAM]",
            "ID", "TIME", "PID", "DEPTH", "POLICY", "ACTION", "RULE"
        );
    }
}

/// `agentsh events`: `session`'s events from `server`; with the default
/// server, a standalone `agentsh wrap` of this user: its own server while
/// it runs, its audit file once it has ended.
pub(super) fn print(server: &str, session: &str, follow: bool, format: EventFormat) -> Result<()> {
    let default = server == agentsh_proto::shimconf::DEFAULT_SERVER;
    match (
        default,
        super::wrap::socket_of(session),
        super::wrap::audit_of(session),
    ) {
        (true, Ok(sock), _) => {
            print_events(&format!("unix:{}", sock.display()), session, follow, format)
        }
        (true, Err(_), Some(file))
            if !Path::new(agentsh_proto::shimconf::DEFAULT_SOCKET).exists() =>
        {
            print_file(&file, session, format)
        }
        _ => print_events(server.trim_end_matches('/'), session, follow, format),
    }
}

/// `session`'s events from an audit file (an ended `agentsh wrap`).
fn print_file(file: &Path, session: &str, format: EventFormat) -> Result<()> {
    let text = std::fs::read_to_string(file).map_err(|source| EventsError::ReadFile {
        file: file.to_path_buf(),
        source,
    })?;
    header(format);
    for line in text.lines() {
        let Ok(ev) = serde_json::from_str::<serde_json::Value>(line) else {
            continue;
        };
        if ev["session_id"] != session {
            continue;
        }
        match format {
            EventFormat::Json => println!("{ev}"),
            EventFormat::Table => print_row(&ev),
        }
    }
    Ok(())
}

fn print_events(server: &str, session: &str, follow: bool, format: EventFormat) -> Result<()> {
    let client = Client::new(server, None)?.with_timeout(std::time::Duration::from_secs(45));
    let mut after = 0u64;
    header(format);
    loop {
        let wait = if follow { 30 } else { 0 };
        let target = format!("/api/v1/sessions/{session}/events?after={after}&wait={wait}");
        let v = client.get_json(&target)?;
        let events = v.as_array().ok_or_else(|| EventsError::NotAList {
            server: server.to_string(),
            target: target.clone(),
        })?;
        for ev in events {
            match format {
                EventFormat::Json => println!("{ev}"),
                EventFormat::Table => print_row(ev),
            }
            if let Some(id) = ev.get("id").and_then(serde_json::Value::as_u64) {
                after = after.max(id);
            }
        }
        if !follow {
            return Ok(());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_refusal_reads_as_a_row() {
        let ev = serde_json::json!({
            "id": 7, "timestamp": "2026-11-28T06:19:23.015181Z", "type": "file",
            "pid": 38, "syscall": "renameat2", "path": "/tmp/s",
            "path2": "/etc/agentsh/shim.conf", "resolved": "/etc/agentsh",
            "right": "create", "decision": "deny", "rule": "file_rules",
        });
        let row = table_row(&ev);
        assert!(row.starts_with("7  "), "{row}");
        assert!(row.contains("06:19:23.015"), "{row}");
        assert!(row.contains("file_rules"), "{row}");
        assert!(
            row.ends_with("renameat2 /tmp/s -> /etc/agentsh/shim.conf  [create /etc/agentsh]"),
            "{row}"
        );
    }

    #[test]
    fn a_policy_reload_reads_as_a_row() {
        let ev = serde_json::json!({
            "id": 9, "timestamp": "2026-11-28T21:19:23.015181Z", "type": "policy_reload",
            "by": "sighup", "by_uid": 0, "by_pid": 77, "policy": "agent-strict",
            "hash": "0123456789abcdef0123", "previous_hash": "ff",
        });
        assert!(table_row(&ev)
            .ends_with("policy_reload agent-strict (sha256 0123456789ab) by sighup pid 77"));
    }
}
