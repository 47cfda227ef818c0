//! How each agent-sandbox SDK spawns commands, and a client for the
//! `sdk-supervisor` daemon that spawns them.
//!
//! The daemon runs inside a [`Namespace`] (where `/bin/sh` is the shim) and is
//! a sibling of the agentsh server, never its descendant: exactly the shape of
//! a container where an SDK daemon spawns shells. docs/sdk-cookbook.md says,
//! per SDK, how it spawns commands; the spawn lines are reproduced here.

use crate::ns::Namespace;
use crate::server::bin;
use serde_json::{json, Value};
use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Stdio};
use std::sync::mpsc::{self, Receiver};
use std::time::{Duration, Instant};

/// One spawn request, as the SDK daemon would make it.
#[derive(Debug, Clone, Default)]
pub struct Spawn {
    pub argv: Vec<String>,
    pub stdin: Option<String>,
    pub setpgid: bool,
    pub pty: bool,
    pub env: Vec<(String, String)>,
}

impl Spawn {
    pub fn argv(argv: &[&str]) -> Spawn {
        Spawn {
            argv: argv.iter().map(std::string::ToString::to_string).collect(),
            ..Spawn::default()
        }
    }

    pub fn env(mut self, k: &str, v: &str) -> Spawn {
        self.env.push((k.into(), v.into()));
        self
    }
}

/// E2B envd: `/bin/sh -c 'echo 100 > /proc/$$/oom_score_adj && exec "${@}"' -- /bin/bash -l -c CMD`.
pub fn e2b(cmd: &str) -> Spawn {
    Spawn::argv(&[
        "/bin/sh",
        "-c",
        r#"echo 100 > /proc/$$/oom_score_adj && exec "${@}""#,
        "--",
        "/bin/bash",
        "-l",
        "-c",
        cmd,
    ])
}

/// E2B PTY session: `/bin/bash -i -l` on a pty, the commands typed on it.
pub fn e2b_pty(typed: &str) -> Spawn {
    Spawn {
        pty: true,
        stdin: Some(typed.to_string()),
        ..Spawn::argv(&["/bin/bash", "-i", "-l"])
    }
}

/// Daytona: a shell found on PATH, the script on stdin, its own process group.
pub fn daytona_stdin(script: &str) -> Spawn {
    Spawn {
        setpgid: true,
        stdin: Some(script.to_string()),
        ..Spawn::argv(&["sh"])
    }
}

/// Older Daytona SDKs: `sh -c "echo <base64> | base64 -d | sh"`, own process group.
pub fn daytona_base64(cmd: &str) -> Spawn {
    let b64 = base64_encode(cmd.as_bytes());
    Spawn {
        setpgid: true,
        ..Spawn::argv(&["sh", "-c", &format!("echo {b64} | base64 -d | sh")])
    }
}

/// Tensorlake (and Modal when the caller names a shell): `sh -lc CMD`.
pub fn tensorlake(cmd: &str) -> Spawn {
    Spawn::argv(&["sh", "-lc", cmd])
}

/// Runloop: the devbox shell runs the command string: `bash -c CMD`.
pub fn runloop(cmd: &str) -> Spawn {
    Spawn::argv(&["bash", "-c", cmd])
}

fn base64_encode(data: &[u8]) -> String {
    const T: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut s = String::new();
    for chunk in data.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                s.push(T[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                s.push('=');
            }
        }
    }
    s
}

/// How a spawned command ended.
#[derive(Debug, Clone)]
pub struct Finished {
    pub pid: u32,
    pub code: Option<i32>,
    pub signal: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

/// A command the daemon has spawned.
#[derive(Debug, Clone, Copy)]
pub struct Running {
    pub id: u64,
    pub pid: u32,
}

/// A running `sdk-supervisor` inside a namespace.
pub struct Supervisor {
    child: Child,
    stdin: ChildStdin,
    events: Receiver<Value>,
    pending: HashMap<u64, Vec<Value>>,
    next_id: u64,
    pub pid: u32,
}

impl Supervisor {
    /// Starts the daemon inside `ns`; `allow_all_filter` preinstalls an
    /// unrelated seccomp filter, as a container runtime would.
    pub fn start(ns: &Namespace, allow_all_filter: bool) -> Supervisor {
        Supervisor::start_as(ns, allow_all_filter, None)
    }

    /// Like [`Supervisor::start`]; with `uid`, the daemon (and so every
    /// command it spawns) runs as that uid and its group, without
    /// supplementary groups, as SDKs run agents as an ordinary user.
    pub fn start_as(ns: &Namespace, allow_all_filter: bool, uid: Option<u32>) -> Supervisor {
        let mut cmd = match uid {
            None => ns.command(bin("sdk-supervisor")),
            Some(uid) => {
                let mut c = ns.command("/usr/bin/setpriv");
                c.arg(format!("--reuid={uid}"))
                    .arg(format!("--regid={uid}"))
                    .args(["--clear-groups", "--"])
                    .arg(bin("sdk-supervisor"));
                c
            }
        };
        if allow_all_filter {
            cmd.arg("--seccomp-allow-all");
        }
        Supervisor::start_command(cmd)
    }

    /// Starts the daemon with `cmd` (the `sdk-supervisor` binary, with its
    /// arguments), e.g. directly inside a gVisor sandbox.
    pub fn start_command(mut cmd: std::process::Command) -> Supervisor {
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn sdk-supervisor");
        let stdin = child.stdin.take().expect("stdin");
        let stdout = child.stdout.take().expect("stdout");
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if let Ok(v) = serde_json::from_str::<Value>(&line) {
                    if tx.send(v).is_err() {
                        break;
                    }
                }
            }
        });
        let ready = rx
            .recv_timeout(Duration::from_secs(60))
            .expect("sdk-supervisor ready");
        assert_eq!(ready["event"], "ready", "{ready}");
        Supervisor {
            pid: ready["pid"].as_u64().unwrap_or(0) as u32,
            child,
            stdin,
            events: rx,
            pending: HashMap::new(),
            next_id: 1,
        }
    }

    /// Sends a spawn request; returns once the daemon reports the child's pid.
    pub fn spawn(&mut self, s: &Spawn) -> Running {
        let id = self.next_id;
        self.next_id += 1;
        let env: serde_json::Map<String, Value> = s
            .env
            .iter()
            .map(|(k, v)| (k.clone(), Value::from(v.clone())))
            .collect();
        let req = json!({
            "id": id, "argv": s.argv, "stdin": s.stdin, "setpgid": s.setpgid,
            "pty": s.pty, "env": env,
        });
        writeln!(self.stdin, "{req}").expect("write to sdk-supervisor");
        self.stdin.flush().expect("flush");
        let ev = self.next_event(id, Duration::from_secs(60));
        assert_eq!(ev["event"], "spawned", "{ev}");
        Running {
            id,
            pid: ev["pid"].as_u64().expect("pid") as u32,
        }
    }

    /// Waits for a spawned command to end.
    pub fn wait(&mut self, r: Running, timeout: Duration) -> Finished {
        let ev = self.next_event(r.id, timeout);
        assert_eq!(ev["event"], "exited", "{ev}");
        Finished {
            pid: r.pid,
            code: ev["code"].as_i64().map(|c| c as i32),
            signal: ev["signal"].as_i64().map(|c| c as i32),
            stdout: ev["stdout"].as_str().unwrap_or_default().to_string(),
            stderr: ev["stderr"].as_str().unwrap_or_default().to_string(),
        }
    }

    /// Spawn and wait (a generous bound: it only limits a failure).
    pub fn run(&mut self, s: &Spawn) -> Finished {
        let r = self.spawn(s);
        self.wait(r, Duration::from_secs(120))
    }

    fn next_event(&mut self, id: u64, timeout: Duration) -> Value {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(q) = self.pending.get_mut(&id) {
                if !q.is_empty() {
                    return q.remove(0);
                }
            }
            let left = deadline.saturating_duration_since(Instant::now());
            let ev = self
                .events
                .recv_timeout(left)
                .unwrap_or_else(|e| panic!("no event for request {id} within {timeout:?}: {e}"));
            let eid = ev["id"].as_u64().unwrap_or(0);
            if ev["event"] == "error" {
                panic!("sdk-supervisor error: {ev}");
            }
            self.pending.entry(eid).or_default().push(ev);
        }
    }
}

impl Drop for Supervisor {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_matches_the_reference() {
        assert_eq!(base64_encode(b""), "");
        assert_eq!(base64_encode(b"f"), "Zg==");
        assert_eq!(base64_encode(b"fo"), "Zm8=");
        assert_eq!(base64_encode(b"foo"), "Zm9v");
        assert_eq!(base64_encode(b"echo $$"), "ZWNobyAkJA==");
    }
}
