//! What the supervisor shares with the backends and with approvals, and
//! the one seam approvals are reached through: a caught syscall
//! ([`Caught`], [`ExecRequest`]), how it is answered ([`ExecStop`],
//! [`Holder`]), what a verified exec must turn out to be
//! ([`Verification`]), and [`Hold`], which `approval::Approvals` implements
//! so the supervisor never imports approvals (the layers run one way).
//!
//! Failure modes: none; these are types.

use super::retry::Lookup;
use super::verify::Expected;
use crate::audit::ExecSubject;
use agentsh_proto::execabi::{ExecArgs, ExecSyscall};
use std::io;
use std::os::fd::OwnedFd;
use std::sync::mpsc::Sender;
use std::sync::Arc;

/// A syscall a tree's filter handed to the supervisor, as both backends
/// see it: the calling thread, the syscall's ABI and number, and its six
/// register arguments.
#[derive(Debug, Clone, Copy)]
pub struct Caught {
    /// The calling thread (a tid; the process is read from `/proc`).
    pub tid: u32,
    /// `AUDIT_ARCH_*` of the call.
    pub arch: u32,
    pub nr: i32,
    pub args: [u64; 6],
}

/// A caught exec, as its backend answers it.
pub trait ExecStop {
    /// The exec still waits, and its thread id still names the same thread.
    fn still_waiting(&self) -> bool;
    /// Let the exec proceed (user-notify: CONTINUE).
    fn proceed(&self) -> io::Result<()>;
    /// Fail the exec with `errno`.
    fn refuse(&self, errno: i32) -> io::Result<()>;
    /// Answer the syscall without running it: `val >= 0` is its return
    /// value, `val < 0` is `-errno` (a call performed on the tree's behalf).
    fn answer(&self, val: i64) -> io::Result<()>;
    /// The backend checks every exec it lets through at `PTRACE_EVENT_EXEC`
    /// (ptrace), so nothing needs freezing or watching here.
    fn verifies_every_exec(&self) -> bool {
        false
    }
    /// What the exec about to proceed must turn out to run (called before
    /// [`ExecStop::proceed`] when [`ExecStop::verifies_every_exec`]).
    fn expect(&self, _what: Verification) {}
}

/// What a verifying backend checks at `PTRACE_EVENT_EXEC`, and what it
/// audits if the new image is something else.
#[derive(Debug, Clone)]
pub struct Verification {
    pub expected: Expected,
    pub subject: ExecSubject,
    /// The rule that allowed it (named in the `exec_mismatch` event).
    pub rule: String,
}

/// What an approval waiter needs to answer a held exec later.
#[derive(Clone)]
pub enum Holder {
    /// The notification `id` on the tree's notify fd.
    Notify { fd: Arc<OwnedFd>, id: u64 },
    /// Thread `tid` (started at `starttime`) waits in its seccomp stop; the
    /// tracer thread answers it (`trace::answer`).
    Trace { tid: u32, starttime: u64 },
}

/// One caught exec.
pub struct ExecRequest {
    /// The calling thread.
    pub tid: u32,
    pub call: &'static ExecSyscall,
    pub args: ExecArgs,
}

/// An exec held for an operator: what the approval waiter needs to ask,
/// answer and audit it.
/// Everything the supervisor knows about a held exec.
#[derive(Debug, Clone)]
pub struct HeldExec {
    pub session_id: String,
    pub notif_id: u64,
    /// The calling thread (watched through the exec once approved).
    pub tid: u32,
    pub starttime: u64,
    /// What the operator approves: the file (device, inode) and argv that
    /// must run; `None` if the file's identity could not be read (then the
    /// exec is refused when approved).
    pub expected: Option<Expected>,
    pub subject: ExecSubject,
    pub rule: String,
    pub message: Option<String>,
    /// The attempt this exec is (see `supervisor::retry`).
    pub attempt: u64,
    /// Its key for the retries of the same lookup (`None`: not reused).
    pub lookup: Option<Lookup>,
}

/// Where execs a rule says `approve` for wait for an operator
/// (`approval::Approvals`). `allowed` receives `(pid, starttime, depth)` of
/// each exec let through, for the tree's depth book.
pub trait Hold: Send + Sync {
    fn hold(self: Arc<Self>, holder: Holder, exec: HeldExec, allowed: Sender<(u32, u64, u32)>);
    /// Holds a connect or send whose destination a rule says `approve`
    /// for; `call.perform` is made only once it is approved.
    fn hold_connect(self: Arc<Self>, holder: Holder, call: HeldConnect);
}

/// A connect (or send) held for an operator (an `egress` rule or default
/// `approve`).
pub struct HeldConnect {
    pub session_id: String,
    /// The calling thread.
    pub tid: u32,
    /// connect | sendto | sendmsg
    pub syscall: &'static str,
    /// The name the tree resolved to `ip`, when known.
    pub host: Option<String>,
    pub ip: std::net::IpAddr,
    pub port: u16,
    /// tcp | udp
    pub protocol: &'static str,
    pub rule: String,
    /// Makes the call for the tree (on the socket taken from it, with the
    /// supervisor's copy); its answer value.
    pub perform: Box<dyn FnOnce() -> i64 + Send>,
}
