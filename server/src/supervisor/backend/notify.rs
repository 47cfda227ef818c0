//! The user-notify backend: receive a notification, classify it, hand it on,
//! answer through the notify fd.
//!
//! One thread per tree serves that tree's notify fd; notifications are taken
//! one at a time (an exec held for an operator waits on a thread of its own,
//! see `approval`, so the tree does not). Each goes to `dispatch`, with a
//! [`NotifyStop`] to answer through.
//! The same thread is the ptrace tracer of every task `exec` stops, so it
//! also sweeps the tasks left to detach (`ptrace::Lingering`).
//!
//! Failure modes: a poll or receive error other than "tracee gone" or EINTR
//! abandons the tree (its execs then fail with ENOSYS: closed).

use crate::supervisor::dispatch::Caught;
use crate::supervisor::exec::{self, ExecStop, TreeState};
use crate::supervisor::{SupervisorContext, Tree};
use agentsh_proto::notif::{self, Notification};
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::sync::Arc;

/// A trapped exec as user-notify holds it: the notification's id on the fd.
pub struct NotifyStop<'a> {
    pub fd: BorrowedFd<'a>,
    pub id: u64,
}

impl ExecStop for NotifyStop<'_> {
    fn still_waiting(&self) -> bool {
        notif::id_valid(self.fd, self.id)
    }

    fn proceed(&self) -> io::Result<()> {
        notif::respond_continue(self.fd, self.id)
    }

    fn refuse(&self, errno: i32) -> io::Result<()> {
        notif::respond_errno(self.fd, self.id, errno)
    }

    fn answer(&self, val: i64) -> io::Result<()> {
        notif::respond_value(self.fd, self.id, val)
    }
}

/// How long the loop sleeps between sweeps while tasks wait to be detached.
const SWEEP_MS: i32 = 20;

/// Serves `tree` through its notify fd until every process in it has exited.
pub fn serve(ctx: Arc<SupervisorContext>, tree: Tree, fd: Arc<OwnedFd>) {
    let mut st = TreeState::new(tree.root_pid);
    crate::supervisor::ptrace::precise_sleeps();
    tracing::info!(session = %tree.session_id, root_pid = tree.root_pid, "supervising tree");
    if let Err(e) = notif::set_sync_wakeup(fd.as_fd()) {
        // Only a cost: every exec waits for an ordinary wake-up instead.
        tracing::debug!("synchronous wake-up not available on this kernel: {e}");
    }
    loop {
        let mut pfd = libc::pollfd {
            fd: fd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        let timeout = if st.lingering.is_empty() {
            -1
        } else {
            SWEEP_MS
        };
        // SAFETY: one valid pollfd.
        let rc = unsafe { libc::poll(&mut pfd, 1, timeout) };
        if !st.lingering.is_empty() {
            st.lingering.sweep();
        }
        if rc == 0 {
            continue;
        }
        if rc < 0 {
            let e = std::io::Error::last_os_error();
            if e.raw_os_error() == Some(libc::EINTR) {
                continue;
            }
            tracing::error!("poll on notify fd failed: {e}; tree abandoned (its execs now fail)");
            break;
        }
        if pfd.revents & libc::POLLIN == 0 {
            // POLLHUP: no process uses the filter any more.
            break;
        }
        let n = match notif::recv(fd.as_fd()) {
            Ok(n) => n,
            Err(e) => match e.raw_os_error() {
                // The tracee died before we read the notification, or a signal.
                Some(libc::ENOENT | libc::EINTR) => continue,
                _ => {
                    tracing::error!("NOTIF_RECV failed: {e}; tree abandoned");
                    break;
                }
            },
        };
        st.take_approved();
        dispatch(&ctx, &tree, &fd, &mut st, n);
    }
    // Returning ends this thread: the kernel detaches whatever it still traces.
    tracing::info!(session = %tree.session_id, root_pid = tree.root_pid, "tree finished");
}

fn dispatch(
    ctx: &SupervisorContext,
    tree: &Tree,
    fd: &Arc<OwnedFd>,
    st: &mut TreeState,
    n: Notification,
) {
    let stop = NotifyStop {
        fd: fd.as_fd(),
        id: n.id,
    };
    let caught = Caught {
        tid: n.pid,
        arch: n.arch,
        nr: n.nr,
        args: n.args,
    };
    let holder = || exec::Holder::Notify {
        fd: fd.clone(),
        id: n.id,
    };
    crate::supervisor::dispatch::dispatch(ctx, tree, st, &caught, &stop, holder);
}
