//! `agentsh approvals list|approve|deny|watch`: the operator's side.
//!
//! Over the Unix socket (the default) the server knows the caller from the
//! kernel and accepts operators (uid 0, or the server's own user: a
//! standalone `agentsh wrap`'s, found with `--session ID`); over TCP every
//! call carries the root-only token read from `--token-file`. The server
//! refuses them from inside a supervised tree.

use crate::cli::client::{error_text, Client, ClientError};
use crate::cli::wrap::WrapFilesError;
use clap::{Args, Subcommand};
use std::io::{BufRead, IsTerminal, Write};
use std::path::PathBuf;
use std::time::Duration;

/// What an `agentsh approvals` command could not do.
#[derive(Debug, thiserror::Error)]
pub enum ApprovalsError {
    #[error(transparent)]
    Client(#[from] ClientError),
    /// `--session ID`: no such standalone wrap of this user.
    #[error(transparent)]
    WrapSession(#[from] WrapFilesError),
    #[error("unexpected answer from {0}: not a list")]
    NotAList(String),
    /// The server refused the decision (unknown id, decided already, ...).
    #[error("{id}: HTTP {status}: {text}")]
    Refused {
        id: String,
        status: u16,
        text: String,
    },
}

type Result<T> = std::result::Result<T, ApprovalsError>;

/// Which server an operator command talks to.
#[derive(Debug, Clone, Args)]
pub struct ServerArgs {
    /// The server: unix:/PATH (its API socket) or http://HOST:PORT (its TCP listener).
    #[arg(long, default_value = agentsh_proto::shimconf::DEFAULT_SERVER)]
    pub server: String,
    /// The operator token for an http:// server (`<state_dir>/approval.token`, root-only).
    #[arg(
        long,
        value_name = "PATH",
        default_value = "/var/lib/agentsh/approval.token"
    )]
    pub token_file: PathBuf,
}

impl ServerArgs {
    pub fn client(&self, timeout: Duration) -> std::result::Result<Client, ClientError> {
        Ok(Client::new(&self.server, Some(&self.token_file))?.with_timeout(timeout))
    }
}

#[derive(Debug, Clone, Args)]
pub struct Connection {
    #[command(flatten)]
    at: ServerArgs,
    /// A standalone `agentsh wrap`'s session: its own server, found at
    /// $XDG_RUNTIME_DIR/agentsh/ID.sock (without XDG_RUNTIME_DIR:
    /// ~/.local/state/agentsh/ID/run/ID.sock). Run as the user who ran wrap.
    #[arg(long, value_name = "ID", conflicts_with = "server")]
    session: Option<String>,
}

#[derive(Debug, Subcommand)]
pub enum ApprovalsCommand {
    /// Print the execs and connects waiting for a decision.
    List {
        #[command(flatten)]
        conn: Connection,
        /// One JSON object per line instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Let a waiting exec run (or a waiting connect through).
    Approve {
        /// The approval id (from `list` or `watch`).
        id: String,
        /// Recorded in the audit event.
        #[arg(long)]
        reason: Option<String>,
        #[command(flatten)]
        conn: Connection,
    },
    /// Fail a waiting exec or connect with EACCES.
    Deny {
        id: String,
        #[arg(long)]
        reason: Option<String>,
        #[command(flatten)]
        conn: Connection,
    },
    /// Print requests as they arrive; in a terminal, ask for each: one key,
    /// y approves, n denies, any other skips (no Enter needed).
    Watch {
        #[command(flatten)]
        conn: Connection,
    },
}

fn client(conn: &Connection, timeout: Duration) -> Result<Client> {
    let server = match &conn.session {
        Some(id) => format!("unix:{}", crate::cli::wrap::socket_of(id)?.display()),
        None => conn.at.server.clone(),
    };
    Ok(Client::new(&server, Some(&conn.at.token_file))?.with_timeout(timeout))
}

fn fetch(client: &Client, after: u64, wait: u64) -> Result<Vec<serde_json::Value>> {
    let v = client.get_json(&format!("/api/v1/approvals?after={after}&wait={wait}"))?;
    v.as_array()
        .cloned()
        .ok_or_else(|| ApprovalsError::NotAList(client.server()))
}

fn operator_name() -> Option<String> {
    ["SUDO_USER", "USER", "LOGNAME"]
        .iter()
        .find_map(|k| std::env::var(k).ok().filter(|v| !v.is_empty()))
}

fn decide(client: &Client, id: &str, approve: bool, reason: Option<&str>) -> Result<String> {
    let body = serde_json::json!({
        "decision": if approve { "approve" } else { "deny" },
        "reason": reason,
        "approver": operator_name(),
    });
    let (status, answer) = client.call(
        "POST",
        &format!("/api/v1/approvals/{id}"),
        Some(&body),
        true,
    )?;
    if status != 200 {
        return Err(ApprovalsError::Refused {
            id: id.to_string(),
            status,
            text: error_text(&answer),
        });
    }
    Ok(format!(
        "{id}: {} (approver {})",
        if approve { "approved" } else { "denied" },
        answer["approver"].as_str().unwrap_or("?")
    ))
}

fn command_of(r: &serde_json::Value) -> String {
    if r["kind"] == "http" {
        return r["filename"].as_str().unwrap_or("?").to_string();
    }
    if r["kind"] == "connect" {
        let d = &r["destination"];
        let ip = d["ip"].as_str().unwrap_or("?");
        let addr = if ip.contains(':') {
            format!("[{ip}]:{}", d["port"])
        } else {
            format!("{ip}:{}", d["port"])
        };
        return format!(
            "{} {}{addr}/{}",
            r["filename"].as_str().unwrap_or("connect"),
            d["host"]
                .as_str()
                .map(|h| format!("{h} "))
                .unwrap_or_default(),
            d["protocol"].as_str().unwrap_or("?")
        );
    }
    let argv: Vec<&str> = r["argv"]
        .as_array()
        .map(|a| a.iter().filter_map(|x| x.as_str()).collect())
        .unwrap_or_default();
    argv.join(" ")
}

/// `[PROGRAM dev:inode]`: the file the operator approves; what runs after the
/// approval must be that file with that argv, or it is killed.
fn program_of(r: &serde_json::Value) -> String {
    if r["kind"] == "connect" {
        return "destination".into();
    }
    if r["kind"] == "http" {
        return "request".into();
    }
    let name = r["filename"].as_str().unwrap_or("");
    match (r["file"]["dev"].as_u64(), r["file"]["ino"].as_u64()) {
        (Some(dev), Some(ino)) => format!("{name} {dev}:{ino}"),
        _ => name.to_string(),
    }
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
        program_of(r),
    )
}

const HEADER: &str = "ID               SESSION      PID     DEPTH RULE                     EXPIRES AT                  COMMAND  [PROGRAM DEV:INODE]";

/// Runs one `agentsh approvals` command.
///
/// # Errors
/// The server cannot be reached, the token cannot be read, or the server
/// refused the decision; the message says which.
pub fn run(cmd: ApprovalsCommand) -> Result<()> {
    let short = Duration::from_secs(10);
    match cmd {
        ApprovalsCommand::List { conn, json } => {
            let list = fetch(&client(&conn, short)?, 0, 0)?;
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
            let c = client(&conn, short)?;
            println!("{}", decide(&c, &id, true, reason.as_deref())?);
            Ok(())
        }
        ApprovalsCommand::Deny { id, reason, conn } => {
            let c = client(&conn, short)?;
            println!("{}", decide(&c, &id, false, reason.as_deref())?);
            Ok(())
        }
        ApprovalsCommand::Watch { conn } => watch(&conn),
    }
}

/// One key from the terminal on stdin, without waiting for Enter and
/// without echo (the terminal's mode put back after); `None` at the end
/// of input. Where stdin's mode cannot be read, the first byte of a line.
fn one_key() -> Option<u8> {
    // SAFETY: a zeroed termios is a valid buffer for tcgetattr to fill.
    let mut old: libc::termios = unsafe { std::mem::zeroed() };
    // SAFETY: fd 0 and our own buffer.
    if unsafe { libc::tcgetattr(0, &mut old) } != 0 {
        let mut line = String::new();
        let n = std::io::stdin().lock().read_line(&mut line).unwrap_or(0);
        return (n > 0).then(|| line.bytes().next().unwrap_or(b'\n'));
    }
    let mut raw = old;
    raw.c_lflag &= !(libc::ICANON | libc::ECHO);
    raw.c_cc[libc::VMIN] = 1;
    raw.c_cc[libc::VTIME] = 0;
    // SAFETY: fd 0 and a termios made from its own.
    unsafe { libc::tcsetattr(0, libc::TCSANOW, &raw) };
    let mut b = [0u8; 1];
    // SAFETY: reads at most one byte into our buffer.
    let n = unsafe { libc::read(0, b.as_mut_ptr().cast(), 1) };
    // SAFETY: as above; the mode the terminal had.
    unsafe { libc::tcsetattr(0, libc::TCSANOW, &old) };
    (n == 1).then_some(b[0])
}

fn watch(conn: &Connection) -> Result<()> {
    let interactive = std::io::stdin().is_terminal();
    let client = client(conn, Duration::from_secs(45))?;
    let mut after = 0u64;
    println!("{HEADER}");
    loop {
        let list = fetch(&client, after, 30)?;
        for r in &list {
            after = after.max(r["seq"].as_u64().unwrap_or(0));
            println!("{}", row(r));
            let _ = std::io::stdout().flush();
            let (true, Some(id)) = (interactive, r["id"].as_str()) else {
                continue;
            };
            print!(
                "approve {id} ({})? [y]es [n]o, another key skips: ",
                command_of(r)
            );
            let _ = std::io::stdout().flush();
            let Some(key) = one_key() else {
                return Ok(());
            };
            let answer = match key {
                b'y' | b'Y' => Some(true),
                b'n' | b'N' => Some(false),
                _ => None,
            };
            println!(
                "{}",
                match answer {
                    Some(true) => "yes",
                    Some(false) => "no",
                    None => "skipped",
                }
            );
            if let Some(approve) = answer {
                match decide(&client, id, approve, None) {
                    Ok(msg) => println!("{msg}"),
                    Err(e) => eprintln!("agentsh: {e}"),
                }
            }
        }
    }
}
