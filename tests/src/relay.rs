//! Plays the shim's role without the shim: wrap-init, socketpair, spawn
//! `agentsh-unixwrap` with its end as fd 3, relay the notify fd to the
//! server's notify socket, ACK.
//!
//! The test process is the parent of both the server and the wrapped
//! command, so the supervised tree is a *sibling* of the server, as in a
//! container where the SDK daemon spawns shells.

use agentsh_proto::handoff::{encode_handoff, Ack};
use agentsh_proto::{WrapInitRequest, WrapInitResponse};
use sendfd::{RecvWithFd, SendWithFd};
use std::io::{Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::net::{UnixDatagram, UnixStream};
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

/// Calls wrap-init for `session` as `caller_uid`.
pub fn wrap_init(
    server_url: &str,
    session: &str,
    caller_uid: u32,
    cmd: &[&str],
) -> WrapInitResponse {
    let req = WrapInitRequest {
        agent_command: cmd[0].to_string(),
        agent_args: cmd[1..].iter().map(|s| s.to_string()).collect(),
        caller_uid,
    };
    ureq::post(format!("{server_url}/api/v1/sessions/{session}/wrap-init"))
        .send_json(&req)
        .expect("wrap-init call")
        .body_mut()
        .read_json()
        .expect("wrap-init JSON")
}

/// A SOCK_SEQPACKET pair; both ends close-on-exec.
pub fn seqpacket_pair() -> (OwnedFd, OwnedFd) {
    let mut fds = [0 as RawFd; 2];
    // SAFETY: socketpair writes two fds into the array.
    let rc = unsafe {
        libc::socketpair(
            libc::AF_UNIX,
            libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC,
            0,
            fds.as_mut_ptr(),
        )
    };
    assert_eq!(rc, 0, "socketpair: {}", std::io::Error::last_os_error());
    // SAFETY: both fds were just created and are owned by nobody else.
    unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) }
}

/// A command started under supervision, with the relay still to finish.
pub struct Wrapped {
    pub child: Child,
    relay: std::thread::JoinHandle<Result<Ack, String>>,
}

impl Wrapped {
    /// Waits for the relay, then for the command; returns the relay's outcome too.
    pub fn wait(self) -> (Result<Ack, String>, Output) {
        let relay = self.relay.join().expect("relay thread");
        let out = self
            .child
            .wait_with_output()
            .expect("wait for wrapped command");
        (relay, out)
    }
}

/// Options for [`spawn_wrapped`].
#[derive(Default, Clone)]
pub struct WrapOptions {
    /// Run the command as this uid/gid (the wrap-init caller_uid is set to match).
    pub uid: Option<(u32, u32)>,
    pub env: Vec<(String, String)>,
    pub cwd: Option<std::path::PathBuf>,
    /// Let the command use the caller's stdin/stdout/stderr instead of pipes.
    pub inherit_stdio: bool,
}

/// Starts `cmd` under `agentsh-unixwrap` for `session`, relaying its notify fd.
pub fn spawn_wrapped(server_url: &str, session: &str, cmd: &[&str], opts: &WrapOptions) -> Wrapped {
    let caller_uid = opts.uid.map(|u| u.0).unwrap_or(0);
    let resp = wrap_init(server_url, session, caller_uid, cmd);
    assert!(!resp.wrapper_binary.is_empty() && !resp.notify_socket.is_empty());
    let (ours, theirs) = seqpacket_pair();
    let theirs_raw = theirs.as_raw_fd();
    let mut c = Command::new(&resp.wrapper_binary);
    c.arg("--").args(cmd);
    c.envs(&resp.wrapper_env);
    c.env(agentsh_proto::env::NOTIFY_SOCK_FD, "3");
    for (k, v) in &opts.env {
        c.env(k, v);
    }
    if let Some(d) = &opts.cwd {
        c.current_dir(d);
    }
    if !opts.inherit_stdio {
        c.stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
    }
    let uid = opts.uid;
    // SAFETY: only async-signal-safe calls between fork and exec.
    unsafe {
        c.pre_exec(move || {
            if libc::dup2(theirs_raw, 3) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            if let Some((u, g)) = uid {
                if libc::setgroups(0, std::ptr::null()) < 0
                    || libc::setgid(g) < 0
                    || libc::setuid(u) < 0
                {
                    return Err(std::io::Error::last_os_error());
                }
            }
            Ok(())
        });
    }
    let child = c.spawn().expect("spawn agentsh-unixwrap");
    drop(theirs);
    let pid = child.id();
    let socket = resp.notify_socket.clone();
    let relay = std::thread::spawn(move || relay_once(ours, &socket, pid));
    Wrapped { child, relay }
}

/// Receives the notify fd from unixwrap, hands it to the server, ACKs unixwrap.
pub fn relay_once(ours: OwnedFd, notify_socket: &str, wrapper_pid: u32) -> Result<Ack, String> {
    let dgram = UnixDatagram::from(ours);
    dgram
        .set_read_timeout(Some(Duration::from_secs(10)))
        .map_err(|e| e.to_string())?;
    let mut b = [0u8; 1];
    let mut fds = [-1 as RawFd; 1];
    let (_, nfds) = dgram
        .recv_with_fd(&mut b, &mut fds)
        .map_err(|e| format!("no notify fd from unixwrap: {e}"))?;
    if nfds != 1 {
        return Err("unixwrap sent no fd".into());
    }
    // SAFETY: the kernel installed this fd for us.
    let notify = unsafe { OwnedFd::from_raw_fd(fds[0]) };
    let ack = hand_to_server(notify_socket, wrapper_pid, &notify);
    drop(notify);
    let byte = ack.as_ref().map(|a| a.to_byte()).unwrap_or(0);
    dgram
        .send(&[byte])
        .map_err(|e| format!("ACK to unixwrap: {e}"))?;
    ack
}

/// Connects the notify socket and sends the handoff; returns the server's answer.
pub fn hand_to_server(
    notify_socket: &str,
    wrapper_pid: u32,
    notify: &OwnedFd,
) -> Result<Ack, String> {
    let mut s =
        UnixStream::connect(notify_socket).map_err(|e| format!("connect {notify_socket}: {e}"))?;
    s.set_read_timeout(Some(Duration::from_secs(10)))
        .map_err(|e| e.to_string())?;
    s.send_with_fd(&encode_handoff(wrapper_pid), &[notify.as_raw_fd()])
        .map_err(|e| format!("send handoff: {e}"))?;
    let mut st = [0u8; 1];
    s.read_exact(&mut st)
        .map_err(|e| format!("status byte: {e}"))?;
    let _ = s.flush();
    Ok(Ack::from_byte(st[0]))
}

/// Runs `cmd` supervised to completion.
pub fn run_wrapped(server_url: &str, session: &str, cmd: &[&str], opts: &WrapOptions) -> Output {
    let (relay, out) = spawn_wrapped(server_url, session, cmd, opts).wait();
    assert_eq!(
        relay,
        Ok(Ack::Accepted),
        "relay failed; command stderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}
