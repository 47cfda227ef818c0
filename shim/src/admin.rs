//! `admin-shell`: an unsupervised login for the machine's admin, which no
//! supervised tree can obtain.
//!
//! On a devbox root's login shell is the shim, so the admin's own shell, and
//! `apt-get`, and `agentsh` itself, would be supervised under the agent's
//! policy. The shim installed as `/usr/lib/agentsh/admin-shell` (the admin's
//! login shell in /etc/passwd, or `docker exec -it BOX
//! /usr/lib/agentsh/admin-shell`) instead:
//!
//! 1. refuses (126) inside a supervised tree: the agentsh filter cannot be
//!    taken off, so a tree that runs it stays supervised;
//! 2. marks the session: a filter that allows everything and answers the
//!    admin marker (`agentsh_proto::marker`), inherited by everything the
//!    session starts, so the shim runs every later shell of the session as
//!    the real shell;
//! 3. records an `admin_session` audit event through the server (root only;
//!    if the server cannot be reached the admin still gets the shell, and the
//!    journal says why the event is missing);
//! 4. execs the real bash (a login shell when called as `-admin-shell`).
//!
//! What it does not protect: whatever an outside process runs is outside the
//! trees anyway (an SDK daemon that execs argv directly; sshd for a user
//! whose credentials the agent has). Keep it out of /etc/shells, so shell
//! pickers (Daytona's) never choose it.
//!
//! Failure modes: the marker cannot be loaded: refused (126) with the reason,
//! since the session's later shells would be supervised (a half-admin
//! session surprises more than a refusal).

use crate::decide::ShellKind;
use crate::log;
use agentsh_proto::hint::ADMIN_SHELL_IN_TREE;
use agentsh_proto::{http, marker, shimconf};
use std::ffi::{CStr, CString};

/// Whether argv[0] asks for the admin shell (`admin-shell`, `-admin-shell`,
/// or a path ending in it).
pub fn wanted(argv0: &[u8]) -> bool {
    agentsh_proto::install::called_as(argv0) == b"admin-shell"
}

fn refuse(hint: &str) -> i32 {
    eprintln!("{hint}");
    log::log(log::Priority::Warning, hint);
    agentsh_proto::exit::REFUSED
}

/// The admin shell; returns only when it cannot run (the exit status).
pub fn run(argv: &[&CStr]) -> i32 {
    if marker::agentsh_filter_present() {
        return refuse(&format!(
            "agentsh-admin-shell: refusing: this process is inside a supervised tree, and an admin \
             shell is a login from outside (console, docker exec, sshd); see {ADMIN_SHELL_IN_TREE}"
        ));
    }
    if !marker::admin_session_present() {
        if let Err(e) = marker::load_admin_marker() {
            return refuse(&format!(
                "agentsh-admin-shell: cannot mark this session as the admin's ({e}), so its \
                 shells would be supervised; see {ADMIN_SHELL_IN_TREE}"
            ));
        }
    }
    record();
    let real = if std::path::Path::new(ShellKind::Bash.real_path()).exists() {
        ShellKind::Bash
    } else {
        ShellKind::Sh
    };
    let argv0 = argv.first().map_or(&b"admin-shell"[..], |a| a.to_bytes());
    let login = argv0.starts_with(b"-");
    let name = CString::new(format!("{}{}", if login { "-" } else { "" }, real.name()))
        .unwrap_or_else(|_| c"sh".to_owned());
    let path = CString::new(real.real_path()).unwrap_or_else(|_| c"/bin/sh".to_owned());
    let mut ptrs: Vec<*const libc::c_char> = vec![name.as_ptr()];
    ptrs.extend(argv.iter().skip(1).map(|a| a.as_ptr()));
    ptrs.push(std::ptr::null());
    // SAFETY: every pointer is a NUL-terminated string that outlives the
    // call; the array is NULL-terminated.
    unsafe { libc::execv(path.as_ptr(), ptrs.as_ptr()) };
    refuse(&format!(
        "agentsh-admin-shell: cannot run {}: {}",
        real.real_path(),
        std::io::Error::last_os_error()
    ))
}

/// The `admin_session` audit event, through the server's Unix socket (the
/// operator's route: root outside every tree). Logged when it cannot be.
fn record() {
    let conf = match shimconf::load(shimconf::SHIM_CONF_PATH) {
        shimconf::Loaded::Trusted(c) => c,
        _ => shimconf::ShimConf::default(),
    };
    let shimconf::Server::Unix(socket) = &conf.server else {
        log::log(
            log::Priority::Warning,
            "admin shell started: no admin_session audit event (the server is configured over http://)",
        );
        return;
    };
    let tty = std::fs::read_link("/proc/self/fd/0")
        .map(|p| p.to_string_lossy().into_owned())
        .unwrap_or_default();
    let body = serde_json::json!({
        "pid": std::process::id(),
        "ppid": std::os::unix::process::parent_id(),
        "tty": tty,
    })
    .to_string();
    let req = http::Request {
        method: "POST",
        target: "/api/v1/admin-sessions",
        body: body.as_bytes(),
        bearer: None,
    };
    let check = |p: &agentsh_proto::seqpacket::PeerCred| {
        if p.uid == 0 {
            Ok(())
        } else {
            Err(format!("served by uid {}", p.uid))
        }
    };
    match http::call(
        socket,
        std::time::Duration::from_secs(2),
        check,
        &req,
        64 * 1024,
    ) {
        Ok(r) if (200..300).contains(&r.status) => {}
        Ok(r) => log::log(
            log::Priority::Warning,
            &format!(
                "admin shell started without an admin_session audit event: the server answered \
                 HTTP {}: {}",
                r.status,
                String::from_utf8_lossy(&r.body)
            ),
        ),
        Err(e) => log::log(
            log::Priority::Warning,
            &format!(
                "admin shell started without an admin_session audit event: the server at unix:{} \
                 cannot be reached: {e}",
                socket.display()
            ),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn argv0_names_the_admin_shell() {
        assert!(wanted(b"admin-shell"));
        assert!(wanted(b"-admin-shell"));
        assert!(wanted(b"/usr/lib/agentsh/admin-shell"));
        assert!(!wanted(b"sh"));
        assert!(!wanted(b"admin-shell2"));
    }
}
