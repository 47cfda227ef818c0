//! `agentsh events`: a session's audit trail from a running server, as JSON
//! lines or a table, once or following.

use crate::cli::client::Client;

/// One event as a table row.
fn table_row(ev: &serde_json::Value) -> String {
    let s = |k: &str| ev.get(k).and_then(|v| v.as_str()).unwrap_or("").to_string();
    let n = |k: &str| {
        ev.get(k)
            .map(std::string::ToString::to_string)
            .unwrap_or_default()
    };
    let time = s("timestamp").get(11..23).unwrap_or("").to_string();
    match ev.get("type").and_then(|v| v.as_str()) {
        Some("execve") => {
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
                "{:<5} {:<12} {:<7} {:<5} {:<7} {:<6} {:<26} {}  [{}]",
                n("id"),
                time,
                n("pid"),
                n("depth"),
                s("decision"),
                s("effective_action"),
                s("rule"),
                cmd,
                s("filename")
            )
        }
        Some(other) => format!("{:<5} {:<12} {other}", n("id"), time),
        None => ev.to_string(),
    }
}

pub(super) fn print_events(
    server: &str,
    session: &str,
    follow: bool,
    format: super::EventFormat,
) -> Result<(), String> {
    let client = Client::new(server, None)?.with_timeout(std::time::Duration::from_secs(45));
    let mut after = 0u64;
    if matches!(format, super::EventFormat::Table) {
        println!(
            "{:<5} {:<12} {:<7} {:<5} {:<7} {:<6} {:<26} COMMAND  [PROGRAM]",
            "ID", "TIME", "PID", "DEPTH", "POLICY", "ACTION", "RULE"
        );
    }
    loop {
        let wait = if follow { 30 } else { 0 };
        let target = format!("/api/v1/sessions/{session}/events?after={after}&wait={wait}");
        let v = client.get_json(&target)?;
        let events = v
            .as_array()
            .ok_or_else(|| format!("unexpected answer from {server}{target}: not a list"))?;
        for ev in events {
            match format {
                super::EventFormat::Json => println!("{ev}"),
                super::EventFormat::Table => println!("{}", table_row(ev)),
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
