//! A long-running, SDK-style command daemon for the end-to-end tests.
//!
//! It plays the in-container daemon of an agent-sandbox SDK (E2B's envd,
//! Daytona's daemon, ...): a process that is *not* a descendant of the agentsh
//! server and spawns shells on request. Requests are JSON lines on stdin:
//!
//! `{"id":1,"argv":["/bin/sh","-c","echo hi"],"stdin":"..","setpgid":true,"pty":false,"env":{"K":"V"}}`
//!
//! With `"pty":true` the command gets a new session on a pty whose master
//! is typed `stdin`, with waits for the terminal's state in it (never for a
//! time): `\x01NAME\x02` waits until a job running NAME (its leader or
//! another process of its group) holds the
//! terminal's foreground and is asleep in it (before a ^C or ^Z meant for
//! it, as a person would type it at a running command); a bare `\x01`
//! waits until the shell holds it again (the job ended or stopped).
//!
//! `argv[0]` without a `/` is looked up on PATH, as Go's `exec.Command` and
//! Rust's `Command` do. Answers are JSON lines on stdout:
//! `{"id":1,"event":"spawned","pid":1234}` as soon as the child exists, then
//! `{"id":1,"event":"exited","code":0,"signal":null,"stdout":"..","stderr":".."}`.
//!
//! `--seccomp-allow-all` first installs a trivial allow-all seccomp filter on
//! the daemon (as Docker's default profile would), so every child starts with
//! `Seccomp_filters: 1` that is not agentsh's.

use serde_json::{json, Value};
use std::io::{BufRead, Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};

fn main() {
    // A daemon the container runtime starts has the default dispositions; a
    // test suite started under nohup or as a background job hands down
    // SIGHUP, or SIGINT and SIGQUIT, ignored, and a ^C typed on a PTY
    // session would then reach a `sleep` that ignores it.
    for sig in [libc::SIGINT, libc::SIGQUIT, libc::SIGHUP] {
        // SAFETY: setting a standard signal to its default disposition.
        unsafe { libc::signal(sig, libc::SIG_DFL) };
    }
    if std::env::args().any(|a| a == "--seccomp-allow-all") {
        if let Err(e) = install_allow_all_filter() {
            eprintln!("sdk-supervisor: allow-all filter: {e}");
            std::process::exit(1);
        }
    }
    let out = Arc::new(Mutex::new(std::io::stdout()));
    emit(&out, json!({"event": "ready", "pid": std::process::id()}));
    let stdin = std::io::stdin();
    let mut workers = Vec::new();
    for line in stdin.lock().lines() {
        let Ok(line) = line else { break };
        if line.trim().is_empty() {
            continue;
        }
        let req: Value = match serde_json::from_str(&line) {
            Ok(v) => v,
            Err(e) => {
                emit(&out, json!({"event": "error", "error": e.to_string()}));
                continue;
            }
        };
        let out = out.clone();
        workers.push(std::thread::spawn(move || serve(req, &out)));
    }
    for w in workers {
        let _ = w.join();
    }
}

fn emit(out: &Mutex<std::io::Stdout>, v: Value) {
    let mut o = out
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let _ = writeln!(o, "{v}");
    let _ = o.flush();
}

fn serve(req: Value, out: &Mutex<std::io::Stdout>) {
    let id = req["id"].clone();
    let argv: Vec<String> = req["argv"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|s| s.as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default();
    if argv.is_empty() {
        emit(
            out,
            json!({"id": id, "event": "error", "error": "empty argv"}),
        );
        return;
    }
    let input = req["stdin"].as_str().map(String::from);
    let mut cmd = Command::new(&argv[0]);
    cmd.args(&argv[1..]);
    if let Some(env) = req["env"].as_object() {
        for (k, v) in env {
            cmd.env(k, v.as_str().unwrap_or_default());
        }
    }
    if req["setpgid"].as_bool() == Some(true) {
        cmd.process_group(0);
    }
    let result = if req["pty"].as_bool() == Some(true) {
        run_pty(cmd, input, &id, out)
    } else {
        run_pipes(cmd, input, &id, out)
    };
    match result {
        Ok(v) => emit(out, v),
        Err(e) => emit(
            out,
            json!({"id": id, "event": "error", "error": e.to_string()}),
        ),
    }
}

fn exited(id: &Value, status: std::process::ExitStatus, stdout: &[u8], stderr: &[u8]) -> Value {
    json!({
        "id": id,
        "event": "exited",
        "code": status.code(),
        "signal": status.signal(),
        "stdout": String::from_utf8_lossy(stdout),
        "stderr": String::from_utf8_lossy(stderr),
    })
}

fn run_pipes(
    mut cmd: Command,
    input: Option<String>,
    id: &Value,
    out: &Mutex<std::io::Stdout>,
) -> std::io::Result<Value> {
    cmd.stdin(if input.is_some() {
        Stdio::piped()
    } else {
        Stdio::null()
    })
    .stdout(Stdio::piped())
    .stderr(Stdio::piped());
    let mut child = cmd.spawn()?;
    emit(
        out,
        json!({"id": id, "event": "spawned", "pid": child.id()}),
    );
    if let (Some(text), Some(mut w)) = (input, child.stdin.take()) {
        std::thread::spawn(move || {
            let _ = w.write_all(text.as_bytes());
        });
    }
    let o = child.wait_with_output()?;
    Ok(exited(id, o.status, &o.stdout, &o.stderr))
}

/// The child gets a new session with the pty as its controlling terminal,
/// as E2B's PTY sessions do.
fn run_pty(
    mut cmd: Command,
    input: Option<String>,
    id: &Value,
    out: &Mutex<std::io::Stdout>,
) -> std::io::Result<Value> {
    let (mut master, slave) = open_pty()?;
    cmd.stdin(Stdio::from(slave.try_clone()?))
        .stdout(Stdio::from(slave.try_clone()?))
        .stderr(Stdio::from(slave));
    // SAFETY: setsid and ioctl(TIOCSCTTY) only, in the child before exec.
    unsafe {
        cmd.pre_exec(|| {
            if libc::setsid() < 0 {
                return Err(std::io::Error::last_os_error());
            }
            if libc::ioctl(0, libc::TIOCSCTTY, 0) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let mut child = cmd.spawn()?;
    drop(cmd); // closes our copies of the slave
    emit(
        out,
        json!({"id": id, "event": "spawned", "pid": child.id()}),
    );
    if let Some(text) = input {
        let mut w = master.try_clone()?;
        let shell = child.id() as libc::pid_t;
        std::thread::spawn(move || {
            for (i, part) in text.split('\x01').enumerate() {
                let part = if i == 0 {
                    part
                } else if let Some((name, rest)) = part.split_once('\x02') {
                    wait_foreground(&w, |pg| pg != shell && runs_in(pg, name));
                    rest
                } else {
                    wait_foreground(&w, |pg| pg == shell);
                    part
                };
                let _ = w.write_all(part.as_bytes());
            }
        });
    }
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        match master.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            // EIO: the last slave fd closed.
            Err(_) => break,
        }
    }
    let status = child.wait()?;
    Ok(exited(id, status, &buf, b""))
}

/// Waits until the terminal's foreground process group satisfies `ok`
/// (checked every 5 ms; after 300 s the typing goes on, and the test's own
/// checks say what went wrong).
fn wait_foreground(master: &std::fs::File, ok: impl Fn(libc::pid_t) -> bool) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(300);
    loop {
        // SAFETY: tcgetpgrp on an fd we own (a pty master answers for its
        // slave).
        let pg = unsafe { libc::tcgetpgrp(master.as_raw_fd()) };
        if (pg > 0 && ok(pg)) || std::time::Instant::now() > deadline {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
}

/// Whether a process of group `pg` runs `name` asleep in a system call
/// (the group's leader, or another member: `agentsh wrap`'s command joins
/// the group wrap leads).
fn runs_in(pg: libc::pid_t, name: &str) -> bool {
    let asleep = |p: libc::pid_t| comm(p) == name && state(p) == Some('S');
    if asleep(pg) {
        return true;
    }
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return false;
    };
    dir.flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<libc::pid_t>().ok())
        .any(|p| pgrp(p) == Some(pg) && asleep(p))
}

/// The process group of `pid`.
fn pgrp(pid: libc::pid_t) -> Option<libc::pid_t> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(") ")?
        .1
        .split_whitespace()
        .nth(2)?
        .parse()
        .ok()
}

/// The state letter of process `pid` (`S`: asleep in a system call, as a
/// running `sleep` is; not `t`, stopped by its tracer mid-exec).
fn state(pid: libc::pid_t) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(") ")?.1.chars().next()
}

/// The command name of process `pid` (`/proc/<pid>/comm`).
fn comm(pid: libc::pid_t) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .map(|s| s.trim_end().to_string())
        .unwrap_or_default()
}

fn open_pty() -> std::io::Result<(std::fs::File, OwnedFd)> {
    let (mut m, mut s) = (-1, -1);
    // SAFETY: openpty writes two fds; the name/termios/winsize pointers may be null.
    let rc = unsafe {
        libc::openpty(
            &mut m,
            &mut s,
            std::ptr::null_mut(),
            std::ptr::null(),
            std::ptr::null(),
        )
    };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: both fds were just created and are owned by nobody else.
    unsafe {
        libc::fcntl(m, libc::F_SETFD, libc::FD_CLOEXEC);
        libc::fcntl(s, libc::F_SETFD, libc::FD_CLOEXEC);
        Ok((std::fs::File::from_raw_fd(m), OwnedFd::from_raw_fd(s)))
    }
}

/// One BPF instruction: `return SECCOMP_RET_ALLOW`.
fn install_allow_all_filter() -> std::io::Result<()> {
    let mut insns = [libc::sock_filter {
        code: (libc::BPF_RET | libc::BPF_K) as u16,
        jt: 0,
        jf: 0,
        k: libc::SECCOMP_RET_ALLOW,
    }];
    let prog = libc::sock_fprog {
        len: insns.len() as u16,
        filter: insns.as_mut_ptr(),
    };
    // SAFETY: a valid one-instruction program; as root no no_new_privs is needed.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_seccomp,
            libc::SECCOMP_SET_MODE_FILTER,
            libc::SECCOMP_FILTER_FLAG_TSYNC,
            &prog as *const libc::sock_fprog,
        )
    };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}
