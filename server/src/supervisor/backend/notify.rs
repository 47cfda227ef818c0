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

use super::interface::{Backend, Facts, Supervising, TakeOverError};
use crate::supervisor::context::SupervisorContext;
use crate::supervisor::seam::{Caught, Deferred, Holder, Stop, Verification, Waiting};
use crate::supervisor::state::TreeState;
use crate::supervisor::tree::Tree;
use crate::trees::Trees;
use agentsh_proto::notif::{self, Notification};
use agentsh_proto::ExecBackend;
use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::sync::Arc;

/// Seccomp user notification: one notify fd per tree, handed over by the
/// wrapper, served by a thread of its own.
pub struct Notify;

/// What seccomp user notification is and can do.
static NOTIFY: Facts = Facts {
    kind: ExecBackend::Notify,
    describe: "notify (seccomp user-notify)",
    needs: "seccomp user notification",
    unavailable: "this kernel has no seccomp user notification",
    can_install_fds: true,
    judges_in_place: false,
    judges_files_without_landlock: false,
    needs_caller_pid: false,
    takes_over_blocking: false,
    seizes_root: false,
};

impl Backend for Notify {
    fn facts(&self) -> &'static Facts {
        &NOTIFY
    }

    /// The handoff must carry exactly one fd, and it must be a seccomp
    /// notify fd (checked through `/proc/self/fd`).
    fn take_over(
        &self,
        ctx: &Arc<SupervisorContext>,
        trees: &Arc<Trees>,
        tree: Tree,
        fds: Vec<OwnedFd>,
    ) -> Result<Box<dyn Supervising>, TakeOverError> {
        let mut fds = fds.into_iter();
        let fd = match (fds.next(), fds.next()) {
            (Some(fd), None) => fd,
            (None, _) => return Err(TakeOverError::NoFd),
            (Some(_), Some(_)) => return Err(TakeOverError::TooManyFds),
        };
        let link = std::fs::read_link(format!("/proc/self/fd/{}", fd.as_raw_fd()))
            .map(|p| p.to_string_lossy().into_owned())
            .unwrap_or_default();
        if link != "anon_inode:seccomp notify" {
            return Err(TakeOverError::NotANotifyFd(link));
        }
        Ok(Box::new(Served {
            ctx: ctx.clone(),
            trees: trees.clone(),
            tree,
            fd,
        }))
    }
}

/// A tree whose notify fd was taken, served once its wrapper is told.
struct Served {
    ctx: Arc<SupervisorContext>,
    trees: Arc<Trees>,
    tree: Tree,
    fd: OwnedFd,
}

impl Supervising for Served {
    fn note(&self) -> &'static str {
        "notify fd taken"
    }

    fn start(self: Box<Self>) {
        let Served {
            ctx,
            trees,
            tree,
            fd,
        } = *self;
        let pid = tree.root_pid;
        let spawned = std::thread::Builder::new()
            .name("agentsh-tree".into())
            .spawn(move || {
                trees.started(tree.root_pid, &tree.session_id, tree.started_with.clone());
                let root = tree.root_pid;
                serve(ctx, tree, Arc::new(fd));
                trees.finished(root);
            });
        if let Err(e) = spawned {
            // The fd is dropped with the closure: the tree's execs fail (closed).
            tracing::error!(pid, "cannot start the tree's supervisor thread: {e}");
        }
    }
}

/// A trapped syscall as user-notify holds it: the notification's id on the
/// tree's fd.
pub struct NotifyStop<'a> {
    pub fd: &'a Arc<OwnedFd>,
    pub id: u64,
}

impl Stop for NotifyStop<'_> {
    fn still_waiting(&self) -> bool {
        notif::id_valid(self.fd.as_fd(), self.id)
    }

    fn proceed(&self) -> io::Result<()> {
        notif::respond_continue(self.fd.as_fd(), self.id)
    }

    fn refuse(&self, errno: i32) -> io::Result<()> {
        notif::respond_errno(self.fd.as_fd(), self.id, errno)
    }

    fn answer(&self, val: i64) -> io::Result<()> {
        notif::respond_value(self.fd.as_fd(), self.id, val)
    }

    fn defer(&self) -> Holder {
        held(self.fd.clone(), self.id)
    }
}

/// Notification `id` on a tree's notify fd, answered later from any thread
/// (the notify ioctls are thread-safe; the fd is shared through the `Arc`).
pub fn held(fd: Arc<OwnedFd>, id: u64) -> Holder {
    Arc::new(NotifyHeld { fd, id })
}

struct NotifyHeld {
    fd: Arc<OwnedFd>,
    id: u64,
}

impl Waiting for NotifyHeld {
    fn notif_id(&self) -> u64 {
        self.id
    }

    fn live(&self, ids: &[u64]) -> Option<u64> {
        ids.iter()
            .rev()
            .copied()
            .find(|&n| notif::id_valid(self.fd.as_fd(), n))
    }
}

impl Deferred for NotifyHeld {
    fn answer_value(&self, val: i64) {
        if let Err(e) = notif::respond_value(self.fd.as_fd(), self.id, val) {
            tracing::debug!(id = self.id, "held syscall not answered (gone?): {e}");
        }
    }

    fn refuse(&self, id: u64) {
        if let Err(e) = notif::respond_errno(self.fd.as_fd(), id, libc::EACCES) {
            tracing::info!("answer not delivered (the process is gone): {e}");
        }
    }

    fn proceed(&self, id: u64, _expect: Option<Verification>) -> io::Result<()> {
        notif::respond_continue(self.fd.as_fd(), id)
    }

    fn verifies_every_exec(&self) -> bool {
        false
    }

    fn install_fd(&self, sock: &OwnedFd, at: i32, cloexec: bool) -> io::Result<()> {
        notif::install_fd(self.fd.as_fd(), self.id, sock.as_fd(), at, cloexec)
    }

    fn add_fd(&self, file: &OwnedFd, cloexec: bool) -> io::Result<i32> {
        notif::add_fd(self.fd.as_fd(), self.id, file.as_fd(), cloexec)
    }
}

/// How long the loop sleeps between sweeps while tasks wait to be detached.
const SWEEP_MS: i32 = 20;

/// Serves `tree` through its notify fd until every process in it has exited.
fn serve(ctx: Arc<SupervisorContext>, tree: Tree, fd: Arc<OwnedFd>) {
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
        let timeout = if st.tasks.lingering.is_empty() {
            -1
        } else {
            SWEEP_MS
        };
        // SAFETY: one valid pollfd.
        let rc = unsafe { libc::poll(&mut pfd, 1, timeout) };
        if !st.tasks.lingering.is_empty() {
            st.tasks.lingering.sweep();
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
    let stop = NotifyStop { fd, id: n.id };
    let caught = Caught {
        tid: n.pid,
        tgid: None,
        arch: n.arch,
        nr: n.nr,
        args: n.args,
    };
    crate::supervisor::dispatch::dispatch(ctx, tree, st, &caught, &stop);
}
