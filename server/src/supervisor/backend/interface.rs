//! What a backend is to the rest of the server ([`Backend`]: what it is,
//! what the host must offer for it, what it can do, how it takes a tree
//! over from a handoff), and what a taken-over tree is ([`Supervising`]).
//! Each backend's folder implements it; `registry` lists them.
//!
//! Failure modes: a backend that cannot take a tree over says why
//! ([`TakeOverError`]: the handoff is refused, and unixwrap refuses to run).

use crate::supervisor::context::SupervisorContext;
use crate::supervisor::tree::Tree;
use crate::trees::Trees;
use agentsh_proto::ExecBackend;
use std::os::fd::OwnedFd;
use std::sync::Arc;

/// What a backend is and can do: facts, the same for every tree.
#[derive(Debug, Clone, Copy)]
pub struct Facts {
    /// Its name on the wire, in the config and in events.
    pub kind: ExecBackend,
    /// What it is, as `agentsh detect` says it.
    pub describe: &'static str,
    /// What the host must offer for it, as an error names it ("seccomp
    /// user notification").
    pub needs: &'static str,
    /// What an explicit choice of it meets where the host lacks it.
    pub unavailable: &'static str,
    /// It can put the supervisor's sockets and files into a caller
    /// (`SECCOMP_IOCTL_NOTIF_ADDFD`): a connect made on a socket of the
    /// supervisor's own, `decision: redirect`.
    pub can_install_fds: bool,
    /// It holds a caller's other threads still through a call
    /// (`Stop::hold_still`), so a network call's destination is judged in
    /// the caller's memory and the call let through as made: egress needs
    /// neither `pidfd_getfd` nor fds put into the tree.
    pub judges_in_place: bool,
    /// Where the kernel has no Landlock, every path call of the tree
    /// (`open*`, `rename*`, `unlink*`, ...) stops at it and is judged by the
    /// ruleset Landlock would have had, so the file rules and the
    /// protection of agentsh's own files hold without Landlock (the filter
    /// sends them to a tracer: `filter::Filters::traces_files`).
    pub judges_files_without_landlock: bool,
    /// Taking a tree over needs the wrapper's pid from the transport (the
    /// handoff carries nothing else that names it).
    pub needs_caller_pid: bool,
    /// Taking a tree over blocks (it waits for another thread), so it is
    /// done off the API's runtime.
    pub takes_over_blocking: bool,
    /// It seizes the tree's root and reads every task of the tree as its
    /// tracer: the root names the server its ptracer first
    /// (`PR_SET_PTRACER`), so it can take a shell it did not start where
    /// Yama lets a server without `CAP_SYS_PTRACE` read only descendants.
    pub seizes_root: bool,
}

/// A way of catching a tree's supervised syscalls and answering them.
pub trait Backend: Sync {
    /// What it is and can do.
    fn facts(&self) -> &'static Facts;
    /// Checks what the handoff carried (`fds`) and takes `tree` over, before
    /// the wrapper is told it may go on: nothing of the tree runs
    /// unsupervised after the answer.
    ///
    /// # Errors
    /// What the handoff carried is not what this backend takes, or the
    /// tree cannot be taken over (the reason is the handoff's refusal).
    fn take_over(
        &self,
        ctx: &Arc<SupervisorContext>,
        trees: &Arc<Trees>,
        tree: Tree,
        fds: Vec<OwnedFd>,
    ) -> Result<Box<dyn Supervising>, TakeOverError>;
}

/// Why a backend did not take a tree over.
#[derive(Debug, thiserror::Error)]
pub enum TakeOverError {
    #[error("handoff carried no fd")]
    NoFd,
    #[error("handoff carried more than one fd")]
    TooManyFds,
    #[error("a trace handoff carried an fd")]
    UnexpectedFd,
    #[error("the fd is not a seccomp notify fd ({0:?})")]
    NotANotifyFd(String),
    #[error(transparent)]
    Trace(#[from] super::trace::TraceError),
}

/// A tree taken over, whose wrapper has been told so.
pub trait Supervising: Send {
    /// What the handoff's audit event says was taken.
    fn note(&self) -> &'static str;
    /// Supervises the tree from now on (on a thread of its own).
    fn start(self: Box<Self>);
}

impl dyn Backend {
    /// Its name on the wire, in the config and in events.
    pub fn kind(&self) -> ExecBackend {
        self.facts().kind
    }

    /// Why it cannot run here, when chosen explicitly (`why` is the host
    /// probe's detail).
    pub fn unavailable(&self, why: &str) -> String {
        format!("{} ({why})", self.facts().unavailable)
    }
}
