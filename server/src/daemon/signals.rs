//! The server's own guard against signals from supervised trees.
//!
//! Every thread of the server blocks every signal (the mask is set before
//! the first thread starts and inherited by all). One thread takes
//! SIGTERM, SIGINT, SIGHUP and SIGQUIT with `sigwaitinfo`, which says who
//! sent each: a sender inside a supervised tree is refused (logged); from
//! anyone else SIGHUP reopens the audit log (rotation) and reloads the
//! policies (`api::reload`), and the others stop the server. So `kill(<any server thread id>, SIGTERM)` and
//! friends from a tree do nothing, on every kernel. What no process can
//! block, SIGKILL and SIGSTOP, is kept from trees by the kernel: Landlock's
//! signal scope (ABI ≥ 6) and the seccomp filter's signal rules.
//!
//! Failure modes: a sender that cannot be identified counts as inside a tree
//! (refused); the operator then stops the server with SIGKILL or through its
//! service manager (which signals from outside every tree).

use crate::trees::Trees;
use nix::sys::signal::{SigSet, Signal};
use std::path::PathBuf;
use std::sync::Arc;

/// Blocks every signal in the calling thread (and every thread it starts).
///
/// # Errors
/// pthread_sigmask's errno.
pub fn block_all() -> nix::Result<()> {
    SigSet::all().thread_block()
}

/// What SIGHUP does besides reopening the audit log (given the sender's
/// pid): the policy reload.
pub type OnHup = Box<dyn Fn(u32) + Send>;

/// The uid of process `pid` (0 when it cannot be read: the kernel's own).
pub fn uid_of(pid: u32) -> u32 {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(format!("/proc/{pid}")).map_or(0, |m| m.uid())
}

/// Starts the thread that takes the stop signals. `socket` is removed on a
/// stop (the marker stays: see `agentsh_proto::active`).
pub fn spawn_waiter(
    trees: Arc<Trees>,
    socket: PathBuf,
    audit: Arc<crate::audit::AuditLog>,
    on_hup: OnHup,
) {
    let spawned = std::thread::Builder::new()
        .name("agentsh-signals".into())
        .spawn(move || wait_loop(&trees, &socket, &audit, &on_hup));
    if let Err(e) = spawned {
        tracing::error!("cannot start the signal thread: {e}; stop signals stay blocked");
    }
}

fn wait_loop(
    trees: &Trees,
    socket: &std::path::Path,
    audit: &crate::audit::AuditLog,
    on_hup: &OnHup,
) {
    let mut set = SigSet::empty();
    for s in [
        Signal::SIGTERM,
        Signal::SIGINT,
        Signal::SIGHUP,
        Signal::SIGQUIT,
    ] {
        set.add(s);
    }
    loop {
        // SAFETY: siginfo_t is plain data; zeroed is a valid out-parameter.
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        // SAFETY: sigwaitinfo reads the set and writes `info`.
        let sig = unsafe { libc::sigwaitinfo(set.as_ref(), &mut info) };
        if sig < 0 {
            continue;
        }
        // SAFETY: si_pid is valid for signals sent by a process (kill,
        // tgkill, sigqueue); for kernel-generated ones it reads 0.
        let sender = unsafe { info.si_pid() };
        if sender > 0 {
            if let Some(why) = trees.in_tree_or_filtered(sender as u32) {
                tracing::warn!(
                    signal = sig,
                    sender,
                    "signal from a supervised tree ignored: {why}"
                );
                continue;
            }
        }
        if sig == libc::SIGHUP {
            // Log rotation: the audit file is opened afresh.
            match audit.reopen() {
                Ok(()) => tracing::info!(sender, "SIGHUP: audit log reopened"),
                Err(e) => tracing::error!(
                    sender,
                    "SIGHUP: cannot reopen the audit log ({e}); events still go to the old file"
                ),
            }
            on_hup(sender.max(0) as u32);
            if let Some(pid) = super::command::running() {
                // SAFETY: kill takes integers.
                unsafe { libc::kill(pid as libc::pid_t, sig) };
            }
            continue;
        }
        if let Some(pid) = super::command::running() {
            // The server stops when its command has: pass the signal on.
            tracing::info!(
                signal = sig,
                sender,
                pid,
                "passing the signal to the command"
            );
            // SAFETY: kill takes integers.
            unsafe { libc::kill(pid as libc::pid_t, sig) };
            continue;
        }
        tracing::info!(signal = sig, sender, "stopping");
        super::rundir::remove_sockets(socket);
        audit.flush_export();
        std::process::exit(0);
    }
}
