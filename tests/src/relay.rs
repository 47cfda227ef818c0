//! Runs commands under agentsh without the shell shim installed: the
//! `agentsh-test-run` helper does what the shim does (wrap-init over the
//! Unix socket as itself, the relay helper, unixwrap in place), through the
//! shim library's own code.
//!
//! The test process is the parent of both the server and the wrapped
//! command, so the supervised tree is a *sibling* of the server, as in a
//! container where the SDK daemon spawns shells.

use crate::server::bin;
use agentsh_proto::handoff::Ack;
use agentsh_proto::WrapInitResponse;
use std::os::fd::{OwnedFd, RawFd};
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Output, Stdio};

/// Calls wrap-init for `session` as `uid` (`None`: as root), from a helper
/// process running as that uid; returns the answer.
pub fn wrap_init_as(
    server: &str,
    session: &str,
    uid: Option<(u32, u32)>,
    cmd: &[&str],
) -> Result<WrapInitResponse, String> {
    let mut c = helper(server, session);
    c.arg("--wrap-init-only").arg("--").args(cmd);
    as_user(&mut c, uid);
    let out = c.output().map_err(|e| format!("agentsh-test-run: {e}"))?;
    if !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stderr).into_owned());
    }
    serde_json::from_slice(&out.stdout).map_err(|e| format!("wrap-init JSON: {e}"))
}

/// A SOCK_SEQPACKET pair; both ends close-on-exec.
pub fn seqpacket_pair() -> (OwnedFd, OwnedFd) {
    agentsh_proto::seqpacket::pair().expect("socketpair")
}

/// A command started under supervision.
pub struct Wrapped {
    pub child: Child,
}

impl Wrapped {
    /// Waits for the command. The first value is `Err` with the refusal when
    /// supervision could not be installed (the helper or unixwrap refused),
    /// as the shim's relay outcome used to be reported.
    pub fn wait(self) -> (Result<Ack, String>, Output) {
        let out = self
            .child
            .wait_with_output()
            .expect("wait for wrapped command");
        (install_outcome(&out), out)
    }
}

/// Whether supervision was installed, read from the helper's and unixwrap's
/// own refusal lines (a command that itself exits 126 is not a refusal).
pub fn install_outcome(out: &Output) -> Result<Ack, String> {
    let err = String::from_utf8_lossy(&out.stderr);
    let refused = out.status.code() == Some(126)
        && err.lines().any(|l| {
            l.starts_with("agentsh-test-run: ")
                || l.starts_with("agentsh: refusing")
                || l.starts_with("agentsh-unixwrap: ")
        });
    if refused {
        Err(err.into_owned())
    } else {
        Ok(Ack::Accepted)
    }
}

/// Options for [`spawn_wrapped`].
#[derive(Default, Clone)]
pub struct WrapOptions {
    /// Run the command (and its wrap-init) as this uid/gid.
    pub uid: Option<(u32, u32)>,
    pub env: Vec<(String, String)>,
    pub cwd: Option<std::path::PathBuf>,
    /// Let the command use the caller's stdin/stdout/stderr instead of pipes.
    pub inherit_stdio: bool,
}

fn helper(server: &str, session: &str) -> Command {
    create_session(server, session);
    let mut c = Command::new(bin("agentsh-test-run"));
    c.args(["--server", server, "--session", session, "--wrapper"])
        .arg(bin("agentsh-unixwrap"));
    c
}

fn as_user(c: &mut Command, uid: Option<(u32, u32)>) {
    if let Some((u, g)) = uid {
        // SAFETY: only async-signal-safe calls between fork and exec.
        unsafe {
            c.pre_exec(move || {
                if libc::setgroups(0, std::ptr::null()) < 0
                    || libc::setgid(g) < 0
                    || libc::setuid(u) < 0
                {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
    }
}

/// Starts `cmd` under supervision for `session` of the server at `server`
/// (`unix:/path`, i.e. `TestServer::url`).
pub fn spawn_wrapped(server: &str, session: &str, cmd: &[&str], opts: &WrapOptions) -> Wrapped {
    let mut c = helper(server, session);
    c.arg("--").args(cmd);
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
    as_user(&mut c, opts.uid);
    let child = c.spawn().expect("spawn agentsh-test-run");
    Wrapped { child }
}

/// Connects the notify socket and sends a handoff for `wrapper_pid` carrying
/// `fd`; returns the server's answer. For tests of the handoff's checks.
pub fn hand_to_server(notify_socket: &str, wrapper_pid: u32, fd: &OwnedFd) -> Result<Ack, String> {
    use std::os::fd::{AsFd, AsRawFd};
    let s = agentsh_proto::seqpacket::connect(
        std::path::Path::new(notify_socket),
        std::time::Duration::from_secs(60),
    )
    .map_err(|e| format!("connect {notify_socket}: {e}"))?;
    let payload = agentsh_proto::handoff::encode_handoff(wrapper_pid);
    send_with_fd(s.as_raw_fd(), &payload, fd.as_raw_fd()).map_err(|e| format!("send: {e}"))?;
    let mut st = [0u8; 1];
    let n = agentsh_proto::seqpacket::recv_record(s.as_fd(), &mut st)
        .map_err(|e| format!("status byte: {e}"))?;
    if n != 1 {
        return Err(format!("status: {n} bytes"));
    }
    Ok(Ack::from_byte(st[0]))
}

fn send_with_fd(sock: RawFd, data: &[u8], fd: RawFd) -> std::io::Result<()> {
    let mut iov = libc::iovec {
        iov_base: data.as_ptr() as *mut libc::c_void,
        iov_len: data.len(),
    };
    let mut cbuf = [0u64; 4];
    // SAFETY: msghdr is plain data; the fields used are set below, and the
    // control buffer has room for one fd.
    unsafe {
        let mut msg: libc::msghdr = std::mem::zeroed();
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = cbuf.as_mut_ptr().cast();
        msg.msg_controllen = libc::CMSG_SPACE(std::mem::size_of::<RawFd>() as u32) as _;
        let c = libc::CMSG_FIRSTHDR(&msg);
        (*c).cmsg_level = libc::SOL_SOCKET;
        (*c).cmsg_type = libc::SCM_RIGHTS;
        (*c).cmsg_len = libc::CMSG_LEN(std::mem::size_of::<RawFd>() as u32) as _;
        std::ptr::write_unaligned(libc::CMSG_DATA(c) as *mut RawFd, fd);
        if libc::sendmsg(sock, &msg, libc::MSG_NOSIGNAL) < 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

/// Runs `cmd` supervised to completion.
pub fn run_wrapped(server: &str, session: &str, cmd: &[&str], opts: &WrapOptions) -> Output {
    let (relay, out) = spawn_wrapped(server, session, cmd, opts).wait();
    assert_eq!(
        relay,
        Ok(Ack::Accepted),
        "supervision not installed; command stderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// Creates `session` on the server at `server` (`unix:PATH`) as the
/// operator would (`POST /api/v1/sessions`), before a wrap-init names it:
/// a server serves only the sessions it has (`default`, and those created).
/// An invalid id is left for the wrap-init to refuse.
pub fn create_session(server: &str, session: &str) {
    let Some(path) = server.strip_prefix("unix:") else {
        return;
    };
    if session == "default" {
        return;
    }
    let body = serde_json::json!({ "id": session })
        .to_string()
        .into_bytes();
    let req = agentsh_proto::http::Request {
        method: "POST",
        target: "/api/v1/sessions",
        body: &body,
        bearer: None,
    };
    let _ = agentsh_proto::http::call(
        std::path::Path::new(path),
        std::time::Duration::from_secs(30),
        |_| Ok(()),
        &req,
        1 << 20,
    );
}
