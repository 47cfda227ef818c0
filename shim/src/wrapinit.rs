//! `POST /api/v1/sessions/{session}/wrap-init`, and the checks on who answered.
//!
//! The server address, session and accepted wrapper come from shim.conf
//! only. Before anything runs, the shim checks what answers:
//! * on the Unix socket (the default): the socket is a root-owned socket in
//!   a root-owned directory nobody else can write, and the peer
//!   (`SO_PEERCRED`) is uid 0. A supervised tree cannot create the
//!   SEQPACKET socket type, so it cannot stand in for the server even while
//!   the server restarts;
//! * whatever the transport: the `wrapper_binary` it names is the one
//!   shim.conf allows (`wrapper=`, or the packaged locations), a root-owned
//!   regular file in root-owned directories nobody else can write. So an
//!   impostor can at most make the shim refuse, never run its code before
//!   the filter.
//!
//! Over `http://` (an operator's choice, off by default) the same small
//! client (`agentsh_proto::http`) speaks HTTP/1.1 over TCP: no proxy, no
//! redirect, an IP literal used as is (a name goes through the system
//! resolver). Timeouts: connect 1 s over TCP, each step of the exchange 30 s
//! ([`TOTAL_TIMEOUT`]): every shell in the container waits on a server
//! that is slow, none on one that is gone.

use crate::decide::InstallFailure;
use agentsh_proto::http::{self, Request};
use agentsh_proto::shimconf::{Server, ShimConf};
use agentsh_proto::{WrapInitRequest, WrapInitResponse};
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::Path;
use std::time::Duration;

const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);
/// How long the server has for each step of the exchange (the connection's
/// turn in the listen queue, the request, the answer). Long enough for a busy
/// or CPU-throttled container (a flood of another user's wrap-inits beside
/// CPU-heavy jobs on 2 cores took a root shell's answer past 5 s, and the
/// shell was refused): a slow answer only delays the shell; a server that is
/// gone is seen at once (no socket, refused connection). The server keeps a
/// wrap-init's notify socket as long (the server's `handoff::ACCEPT_DEADLINE`).
const TOTAL_TIMEOUT: Duration = Duration::from_secs(30);
const MAX_ANSWER: usize = 1 << 20;

/// Calls wrap-init; `Ok` only for a response the shim may act on.
///
/// # Errors
/// Every way the server can fail, decline or be untrustworthy, as an
/// [`InstallFailure`].
pub fn call(conf: &ShimConf, req: &WrapInitRequest) -> Result<WrapInitResponse, InstallFailure> {
    let target = format!("/api/v1/sessions/{}/wrap-init", conf.session);
    let body = serde_json::to_vec(req)
        .map_err(|e| InstallFailure::BadResponse(format!("cannot encode the request: {e}")))?;
    let (status, answer) = match &conf.server {
        Server::Unix(socket) => call_unix(socket, &target, &body, conf)?,
        Server::Http(base) => call_http(base, &target, req)?,
    };
    if !(200..300).contains(&status) {
        let (reason, hint) = refusal_of(&answer);
        return Err(InstallFailure::Status {
            status,
            reason,
            hint,
        });
    }
    let resp: WrapInitResponse =
        serde_json::from_slice(&answer).map_err(|e| InstallFailure::BadResponse(e.to_string()))?;
    validate(resp, conf)
}

/// What a refusing server said: its `error` (control characters dropped, at
/// most 512 bytes: it goes on one stderr line) and its `hint`, kept only when
/// it is one of the troubleshooting sections this shim knows.
fn refusal_of(body: &[u8]) -> (Option<String>, Option<&'static str>) {
    let Ok(v) = serde_json::from_slice::<serde_json::Value>(body) else {
        return (None, None);
    };
    let reason = v["error"].as_str().map(|e| {
        let mut clean: String = e.chars().filter(|c| !c.is_control()).collect();
        if clean.len() > 512 {
            let mut cut = 512;
            while !clean.is_char_boundary(cut) {
                cut -= 1;
            }
            clean.truncate(cut);
            clean.push('…');
        }
        clean
    });
    let hint = v["hint"]
        .as_str()
        .and_then(|h| agentsh_proto::hint::ALL.iter().copied().find(|k| *k == h));
    (reason, hint)
}

fn call_unix(
    socket: &Path,
    target: &str,
    body: &[u8],
    conf: &ShimConf,
) -> Result<(u16, Vec<u8>), InstallFailure> {
    if std::fs::symlink_metadata(socket).is_err_and(|e| e.kind() == std::io::ErrorKind::NotFound) {
        // Nothing to trust or distrust: the server is not there.
        return Err(InstallFailure::Unreachable(format!(
            "no agentsh server socket at {} (the server is not running, or shim.conf names \
             another socket)",
            socket.display()
        )));
    }
    vet_socket(socket, conf).map_err(InstallFailure::Untrusted)?;
    let req = Request {
        method: "POST",
        target,
        body,
        bearer: None,
    };
    let check = |peer: &agentsh_proto::seqpacket::PeerCred| {
        if conf.trusts(peer.uid) {
            Ok(())
        } else {
            Err(format!(
                "{} is served by uid {} (pid {}), not root",
                socket.display(),
                peer.uid,
                peer.pid
            ))
        }
    };
    match http::call(socket, TOTAL_TIMEOUT, check, &req, MAX_ANSWER) {
        Ok(r) => Ok((r.status, r.body)),
        Err(http::Error::Peer(e)) => Err(InstallFailure::Untrusted(e)),
        Err(e) => Err(InstallFailure::Unreachable(format!(
            "unix:{}: {e}",
            socket.display()
        ))),
    }
}

/// The API socket must be root's: a root-owned socket in a root-owned
/// directory that nobody else can write (so nobody else can have put it there).
/// (`agentsh wrap`'s own server: its user's, see [`ShimConf::trusts`].)
fn vet_socket(socket: &Path, conf: &ShimConf) -> Result<(), String> {
    let dir = socket.parent().unwrap_or(Path::new("/"));
    vet_dirs(dir, conf)?;
    let m = std::fs::symlink_metadata(socket).map_err(|e| format!("{}: {e}", socket.display()))?;
    if !m.file_type().is_socket() {
        return Err(format!("{} is not a socket", socket.display()));
    }
    if !conf.trusts(m.uid()) {
        return Err(format!(
            "{} is owned by uid {}, not root",
            socket.display(),
            m.uid()
        ));
    }
    Ok(())
}

/// `dir` and each of its ancestors: a real directory (not a symlink),
/// root-owned, not writable by group or others.
fn vet_dirs(dir: &Path, conf: &ShimConf) -> Result<(), String> {
    let mut p = Some(dir);
    while let Some(d) = p {
        let m = std::fs::symlink_metadata(d).map_err(|e| format!("{}: {e}", d.display()))?;
        if !m.is_dir() {
            return Err(format!("{} is not a directory", d.display()));
        }
        if !conf.trusts(m.uid()) || m.mode() & 0o022 != 0 {
            return Err(format!(
                "{} is owned by uid {} with mode {:o}: only a root-owned directory nobody \
                 else can write may hold agentsh's files",
                d.display(),
                m.uid(),
                m.mode() & 0o7777
            ));
        }
        p = d.parent();
    }
    Ok(())
}

/// The wrapper the shim is about to run before any filter exists: a
/// root-owned regular file nobody else can write, in directories likewise.
fn vet_wrapper(path: &str, conf: &ShimConf) -> Result<(), String> {
    let p = Path::new(path);
    let m = std::fs::symlink_metadata(p).map_err(|e| format!("{path}: {e}"))?;
    if !m.is_file() {
        return Err(format!("{path} is not a regular file"));
    }
    if !conf.trusts(m.uid()) || m.mode() & 0o022 != 0 {
        return Err(format!(
            "{path} is owned by uid {} with mode {:o}, not a root-owned file nobody else can write",
            m.uid(),
            m.mode() & 0o7777
        ));
    }
    vet_dirs(p.parent().unwrap_or(Path::new("/")), conf)
}

fn call_http(
    base: &str,
    target: &str,
    req: &WrapInitRequest,
) -> Result<(u16, Vec<u8>), InstallFailure> {
    let addr = http::tcp_addr(base).map_err(InstallFailure::Unreachable)?;
    let body = serde_json::to_vec(req)
        .map_err(|e| InstallFailure::BadResponse(format!("cannot encode the request: {e}")))?;
    let request = Request {
        method: "POST",
        target,
        body: &body,
        bearer: None,
    };
    // TCP has no peer credentials: what answers is vetted by the wrapper it
    // names (`validate`), as on the Unix socket.
    http::call_tcp(addr, CONNECT_TIMEOUT, TOTAL_TIMEOUT, &request, MAX_ANSWER).map_err(
        |e| match e {
            http::Error::Malformed(m) => InstallFailure::BadResponse(m),
            e => InstallFailure::Unreachable(format!("{base}{target}: {e}")),
        },
    )
}

/// An empty `wrapper_binary` or `notify_socket` means "no kernel install";
/// a wrapper shim.conf does not allow, or one not safely root-owned, is
/// refused; so is a notify socket path that cannot be a unix socket.
fn validate(r: WrapInitResponse, conf: &ShimConf) -> Result<WrapInitResponse, InstallFailure> {
    if r.wrapper_binary.is_empty() || r.notify_socket.is_empty() {
        return Err(InstallFailure::NoKernelInstall);
    }
    if !conf.wrapper_allowed(&r.wrapper_binary) {
        return Err(InstallFailure::Untrusted(format!(
            "the server named wrapper_binary {:?}, which {} does not allow ({})",
            r.wrapper_binary,
            agentsh_proto::shimconf::SHIM_CONF_PATH,
            match &conf.wrapper {
                Some(w) => format!("wrapper={w}"),
                None => format!(
                    "no wrapper= line: only {}",
                    agentsh_proto::shimconf::DEFAULT_WRAPPERS.join(", ")
                ),
            }
        )));
    }
    vet_wrapper(&r.wrapper_binary, conf).map_err(InstallFailure::Untrusted)?;
    // A path, or `@name`: an abstract socket (what the server issues).
    if r.notify_socket.len() >= 108
        || r.notify_socket.contains('\0')
        || !(r.notify_socket.starts_with('/')
            || r.notify_socket.len() > 1 && r.notify_socket.starts_with('@'))
    {
        return Err(InstallFailure::BadResponse(format!(
            "notify_socket {:?} is not a usable unix socket path",
            r.notify_socket
        )));
    }
    Ok(r)
}

#[cfg(test)]
mod tests {
    use super::*;
    use agentsh_proto::SeccompConfig;

    fn resp(w: &str, s: &str) -> WrapInitResponse {
        WrapInitResponse {
            wrapper_binary: w.into(),
            notify_socket: s.into(),
            seccomp_config: SeccompConfig::default(),
            wrapper_env: Default::default(),
        }
    }

    fn conf_with(wrapper: &str) -> ShimConf {
        ShimConf {
            wrapper: Some(wrapper.into()),
            ..ShimConf::default()
        }
    }

    #[test]
    fn empty_fields_mean_no_kernel_install() {
        let c = ShimConf::default();
        assert_eq!(
            validate(resp("", "/run/x.sock"), &c),
            Err(InstallFailure::NoKernelInstall)
        );
        assert_eq!(
            validate(resp("/usr/bin/agentsh-unixwrap", ""), &c),
            Err(InstallFailure::NoKernelInstall)
        );
    }

    #[test]
    fn only_the_allowed_root_owned_wrapper_is_accepted() {
        // Not in the allowed set: refused whatever the file is.
        let e = validate(resp("/tmp/evil", "/run/x.sock"), &ShimConf::default()).unwrap_err();
        assert!(
            matches!(e, InstallFailure::Untrusted(ref m) if m.contains("does not allow")),
            "{e:?}"
        );
        // Allowed by name but not a root-owned file nobody else can write.
        let dir = std::env::temp_dir().join(format!("agentsh-shim-w-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let w = dir.join("agentsh-unixwrap");
        std::fs::write(&w, b"x").unwrap();
        let ws = w.to_str().unwrap();
        // /tmp is world-writable (sticky): never an acceptable home.
        assert!(matches!(
            validate(resp(ws, "/run/x.sock"), &conf_with(ws)),
            Err(InstallFailure::Untrusted(_))
        ));
        let _ = std::fs::remove_dir_all(&dir);
        // A root-owned system binary in root-owned directories passes.
        let sh = std::fs::canonicalize("/bin/sh").unwrap();
        let sh = sh.to_str().unwrap();
        // SAFETY: geteuid has no preconditions.
        let root = unsafe { libc::geteuid() } == 0;
        if root || std::fs::metadata(sh).unwrap().uid() == 0 {
            assert!(validate(resp(sh, "/run/x.sock"), &conf_with(sh)).is_ok());
        }
    }

    #[test]
    fn overlong_or_relative_notify_socket_is_refused() {
        let sh = std::fs::canonicalize("/bin/sh").unwrap();
        let sh = sh.to_str().unwrap();
        let long = format!("/{}", "x".repeat(120));
        assert!(validate(resp(sh, &long), &conf_with(sh)).is_err());
        assert!(validate(resp(sh, "x.sock"), &conf_with(sh)).is_err());
        assert!(validate(resp(sh, "@"), &conf_with(sh)).is_err());
        let long = format!("@{}", "x".repeat(120));
        assert!(validate(resp(sh, &long), &conf_with(sh)).is_err());
        // SAFETY: geteuid has no preconditions.
        let root = unsafe { libc::geteuid() } == 0;
        if root || std::fs::metadata(sh).unwrap().uid() == 0 {
            assert!(validate(resp(sh, "@agentsh-notify-1-2-ab"), &conf_with(sh)).is_ok());
        }
    }

    #[test]
    fn a_socket_outside_a_root_only_directory_is_not_trusted() {
        let e = vet_socket(
            Path::new("/tmp/agentsh-no-such/api.sock"),
            &ShimConf::default(),
        )
        .unwrap_err();
        assert!(e.contains("/tmp"), "{e}");
        assert!(vet_socket(
            Path::new("/run/agentsh-no-such-dir/api.sock"),
            &ShimConf::default()
        )
        .is_err());
    }

    /// A directory of another uid is trusted only where wrap said that uid
    /// is its own (never from shim.conf).
    #[test]
    fn another_uids_directory_is_trusted_only_for_that_uids_wrap() {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            return; // needs chown
        }
        let dir =
            std::path::PathBuf::from(format!("/run/agentsh-shim-unit-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::os::unix::fs::chown(&dir, Some(65534), Some(65534)).unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
        let by_default = vet_dirs(&dir, &ShimConf::default());
        let for_wrap = vet_dirs(
            &dir,
            &ShimConf {
                also_trusted_uid: Some(65534),
                ..ShimConf::default()
            },
        );
        let other = vet_dirs(
            &dir,
            &ShimConf {
                also_trusted_uid: Some(1000),
                ..ShimConf::default()
            },
        );
        std::fs::remove_dir(&dir).unwrap();
        assert!(by_default.unwrap_err().contains("uid 65534"));
        assert!(for_wrap.is_ok(), "{for_wrap:?}");
        assert!(other.is_err());
    }

    /// wrap-init for `/bin/sh`, as root.
    fn sh_as_root() -> WrapInitRequest {
        WrapInitRequest {
            agent_command: "/bin/sh".into(),
            agent_args: vec![],
            caller_uid: 0,
            env_names: vec![],
            env_url_passwords: Vec::new(),
            ruleset_ahead: false,
        }
    }

    #[test]
    fn unreachable_server_is_reported_quickly() {
        let t = std::time::Instant::now();
        let req = sh_as_root();
        let conf = ShimConf {
            server: Server::Http("http://127.0.0.1:1".into()),
            ..ShimConf::default()
        };
        match call(&conf, &req) {
            Err(InstallFailure::Unreachable(_)) => {}
            other => panic!("{other:?}"),
        }
        let conf = ShimConf {
            server: Server::Unix("/run/agentsh-no-such-dir/api.sock".into()),
            ..ShimConf::default()
        };
        // No socket there: the server is not running (not "not trusting").
        match call(&conf, &req) {
            Err(InstallFailure::Unreachable(e)) => {
                assert!(e.contains("no agentsh server socket at"), "{e}");
            }
            other => panic!("{other:?}"),
        }
        assert!(t.elapsed() < Duration::from_secs(2));
    }

    /// A server that answers late (busy, throttled: here 6 s, past the
    /// old 5 s limit) is waited for, not taken for unreachable.
    #[test]
    fn a_slow_server_is_waited_for() {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            return; // the socket must be root's, in a root-only directory
        }
        let dir = std::path::PathBuf::from(format!(
            "/run/agentsh-shim-unit-slow-{}",
            std::process::id()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
        let socket = dir.join("api.sock");
        let listener = agentsh_proto::seqpacket::bind_listen(&socket, 4).unwrap();
        let server = std::thread::spawn(move || {
            // The listener is non-blocking: wait for the shim's connection.
            let mut ready = libc::pollfd {
                fd: std::os::fd::AsRawFd::as_raw_fd(&listener),
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: one valid pollfd.
            while unsafe { libc::poll(&mut ready, 1, -1) } != 1 {}
            // SAFETY: accept on our own listening socket.
            let fd = unsafe {
                libc::accept4(
                    std::os::fd::AsRawFd::as_raw_fd(&listener),
                    std::ptr::null_mut(),
                    std::ptr::null_mut(),
                    libc::SOCK_CLOEXEC,
                )
            };
            assert!(fd >= 0, "accept: {}", std::io::Error::last_os_error());
            // SAFETY: a fresh fd nobody else owns.
            let conn = unsafe { <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd) };
            use std::os::fd::AsFd;
            std::thread::sleep(Duration::from_secs(6));
            let body = r#"{"error":"late but here"}"#;
            let answer = format!(
                "HTTP/1.1 404 Not Found\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
                body.len()
            );
            agentsh_proto::seqpacket::send_record(conn.as_fd(), answer.as_bytes()).unwrap();
            // Whatever is unread when it closes would reset the connection.
            let mut buf = vec![0u8; agentsh_proto::http::MAX_RECORD];
            while matches!(agentsh_proto::seqpacket::recv_record(conn.as_fd(), &mut buf), Ok(n) if n > 0)
            {
            }
        });
        let req = sh_as_root();
        let conf = ShimConf {
            server: Server::Unix(socket.clone()),
            ..ShimConf::default()
        };
        let got = call(&conf, &req);
        server.join().unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        match got {
            Err(InstallFailure::Status {
                status: 404,
                reason: Some(r),
                ..
            }) => assert_eq!(r, "late but here"),
            other => panic!("{other:?}"),
        }
    }
}
