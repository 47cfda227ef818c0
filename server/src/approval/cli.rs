//! `agentsh approvals list|approve|deny|watch`: the operator's side.
//!
//! Decisions carry the root-only token read from `--token-file`, so these
//! commands must run as root (the server also refuses them from inside a
//! supervised tree, token or not).

use clap::{Args, Subcommand};
use std::io::{BufRead, IsTerminal, Write};
use std::path::{Path, PathBuf};

#[derive(Debug, Clone, Args)]
pub struct Connection {
    /// Server API base URL.
    #[arg(long, default_value = agentsh_proto::shimconf::DEFAULT_SERVER)]
    server: String,
    /// The server's approval token (`<state_dir>/approval.token`, root-only).
    #[arg(
        long,
        value_name = "PATH",
        default_value = "/var/lib/agentsh/approval.token"
    )]
    token_file: PathBuf,
}

#[derive(Debug, Subcommand)]
pub enum ApprovalsCommand {
    /// Print the execs waiting for a decision.
    List {
        #[command(flatten)]
        conn: Connection,
        /// One JSON object per line instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Let a waiting exec run.
    Approve {
        /// The approval id (from `list` or `watch`).
        id: String,
        /// Recorded in the audit event.
        #[arg(long)]
        reason: Option<String>,
        #[command(flatten)]
        conn: Connection,
    },
    /// Fail a waiting exec with EACCES.
    Deny {
        id: String,
        #[arg(long)]
        reason: Option<String>,
        #[command(flatten)]
        conn: Connection,
    },
    /// Print requests as they arrive; in a terminal, ask y/n for each.
    Watch {
        #[command(flatten)]
        conn: Connection,
    },
}

fn agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .into()
}

fn base(conn: &Connection) -> &str {
    conn.server.trim_end_matches('/')
}

fn fetch(
    agent: &ureq::Agent,
    conn: &Connection,
    after: u64,
    wait: u64,
) -> Result<Vec<serde_json::Value>, String> {
    let url = format!("{}/api/v1/approvals?after={after}&wait={wait}", base(conn));
    let mut resp = agent
        .get(&url)
        .call()
        .map_err(|e| format!("cannot reach the agentsh server at {}: {e}", conn.server))?;
    let status = resp.status().as_u16();
    let body: serde_json::Value = resp
        .body_mut()
        .read_json()
        .map_err(|e| format!("unexpected answer from {url}: {e}"))?;
    if status != 200 {
        return Err(format!("{url}: HTTP {status}: {}", error_text(&body)));
    }
    body.as_array()
        .cloned()
        .ok_or_else(|| format!("unexpected answer from {url}: not a list"))
}

fn error_text(body: &serde_json::Value) -> String {
    body.get("error")
        .and_then(|e| e.as_str())
        .map(str::to_string)
        .unwrap_or_else(|| body.to_string())
}

fn read_token(path: &Path) -> Result<String, String> {
    let t = std::fs::read_to_string(path).map_err(|e| {
        format!(
            "cannot read the approval token {}: {e} (run as root, or pass --token-file <state_dir>/approval.token)",
            path.display()
        )
    })?;
    Ok(t.trim().to_string())
}

fn operator_name() -> Option<String> {
    ["SUDO_USER", "USER", "LOGNAME"]
        .iter()
        .find_map(|k| std::env::var(k).ok().filter(|v| !v.is_empty()))
}

fn decide(
    agent: &ureq::Agent,
    conn: &Connection,
    token: &str,
    id: &str,
    approve: bool,
    reason: Option<&str>,
) -> Result<String, String> {
    let url = format!("{}/api/v1/approvals/{id}", base(conn));
    let body = serde_json::json!({
        "decision": if approve { "approve" } else { "deny" },
        "reason": reason,
        "approver": operator_name(),
    });
    let mut resp = agent
        .post(&url)
        .header("Authorization", &format!("Bearer {token}"))
        .send_json(&body)
        .map_err(|e| format!("cannot reach the agentsh server at {}: {e}", conn.server))?;
    let status = resp.status().as_u16();
    let answer: serde_json::Value = resp
        .body_mut()
        .read_json()
        .unwrap_or(serde_json::Value::Null);
    if status != 200 {
        return Err(format!("{id}: HTTP {status}: {}", error_text(&answer)));
    }
    Ok(format!(
        "{id}: {} (approver {})",
        if approve { "approved" } else { "denied" },
        answer["approver"].as_str().unwrap_or("?")
    ))
}

fn command_of(r: &serde_json::Value) -> String {
    let argv: Vec<&str> = r["argv"]
        .as_array()
        .map(|a| a.iter().filter_map(|x| x.as_str()).collect())
        .unwrap_or_default();
    argv.join(" ")
}

fn row(r: &serde_json::Value) -> String {
    let s = |k: &str| r[k].as_str().unwrap_or("").to_string();
    format!(
        "{:<16} {:<12} {:<7} {:<5} {:<24} {:<27} {}  [{}]",
        s("id"),
        s("session_id"),
        r["pid"],
        r["depth"],
        s("rule"),
        s("expires_at"),
        command_of(r),
        s("filename"),
    )
}

const HEADER: &str = "ID               SESSION      PID     DEPTH RULE                     EXPIRES AT                  COMMAND  [PROGRAM]";

/// Runs one `agentsh approvals` command.
///
/// # Errors
/// The server cannot be reached, the token cannot be read, or the server
/// refused the decision; the message says which.
pub fn run(cmd: ApprovalsCommand) -> Result<(), String> {
    let agent = agent();
    match cmd {
        ApprovalsCommand::List { conn, json } => {
            let list = fetch(&agent, &conn, 0, 0)?;
            if json {
                for r in &list {
                    println!("{r}");
                }
            } else {
                println!("{HEADER}");
                for r in &list {
                    println!("{}", row(r));
                }
            }
            Ok(())
        }
        ApprovalsCommand::Approve { id, reason, conn } => {
            let token = read_token(&conn.token_file)?;
            println!(
                "{}",
                decide(&agent, &conn, &token, &id, true, reason.as_deref())?
            );
            Ok(())
        }
        ApprovalsCommand::Deny { id, reason, conn } => {
            let token = read_token(&conn.token_file)?;
            println!(
                "{}",
                decide(&agent, &conn, &token, &id, false, reason.as_deref())?
            );
            Ok(())
        }
        ApprovalsCommand::Watch { conn } => watch(&agent, &conn),
    }
}

fn watch(agent: &ureq::Agent, conn: &Connection) -> Result<(), String> {
    let interactive = std::io::stdin().is_terminal();
    // Read the token up front, so a missing one is reported before any prompt.
    let token = if interactive {
        Some(read_token(&conn.token_file)?)
    } else {
        None
    };
    let mut after = 0u64;
    println!("{HEADER}");
    loop {
        let list = fetch(agent, conn, after, 30)?;
        for r in &list {
            after = after.max(r["seq"].as_u64().unwrap_or(0));
            println!("{}", row(r));
            let _ = std::io::stdout().flush();
            let (Some(token), Some(id)) = (&token, r["id"].as_str()) else {
                continue;
            };
            print!("approve {id} ({})? [y/n/s=skip] ", command_of(r));
            let _ = std::io::stdout().flush();
            let mut line = String::new();
            if std::io::stdin().lock().read_line(&mut line).unwrap_or(0) == 0 {
                return Ok(());
            }
            let answer = match line.trim() {
                "y" | "Y" | "yes" => Some(true),
                "n" | "N" | "no" => Some(false),
                _ => None,
            };
            if let Some(approve) = answer {
                match decide(agent, conn, token, id, approve, None) {
                    Ok(msg) => println!("{msg}"),
                    Err(e) => eprintln!("agentsh: {e}"),
                }
            }
        }
    }
}
