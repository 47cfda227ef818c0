//! The seam: what the supervisor's core, its backends, its families and
//! approvals share, naming no family and no backend.
//!
//! * A caught syscall ([`Caught`]) and how it is answered: now, on the
//!   tree's thread ([`Stop`]), or later from any thread ([`Deferred`],
//!   shared as a [`Holder`]). Each backend implements both.
//! * What approvals need of any held call, a syscall or not: its id and
//!   whether it still waits ([`Waiting`], which [`Deferred`] extends).
//! * What a verifying backend checks at `PTRACE_EVENT_EXEC`
//!   ([`Verification`], [`Expected`]).
//! * A call held for an operator ([`Held`]: each family that can hold one
//!   implements it; [`HoldRequest`] is what the operator sees, [`Settled`]
//!   how it ended) and where it waits ([`Hold`], which
//!   `approval::Approvals` implements, so the supervisor never imports
//!   approvals: the layers run one way).
//!
//! Failure modes: none; these are types and traits.

use super::retry::Lookup;
use crate::audit::{ApprovalOutcome, ApprovalRecord, ExecSubject, FileIdentity};
use std::io;
use std::os::fd::OwnedFd;
use std::sync::Arc;
use std::time::Duration;

/// A syscall a tree's filter handed to the supervisor, as both backends
/// see it: the calling thread, the syscall's ABI and number, and its six
/// register arguments.
#[derive(Debug, Clone, Copy)]
pub struct Caught {
    /// The calling thread (a tid; the process is read from `/proc`).
    pub tid: u32,
    /// Its process (thread-group id), where the backend knows it without
    /// `/proc` (the tracer follows every clone).
    pub tgid: Option<u32>,
    /// `AUDIT_ARCH_*` of the call.
    pub arch: u32,
    pub nr: i32,
    pub args: [u64; 6],
}

/// A caught syscall, as its backend answers it on the tree's thread.
pub trait Stop {
    /// The call still waits, and its thread id still names the same thread.
    fn still_waiting(&self) -> bool;
    /// Let the call proceed (user-notify: CONTINUE).
    fn proceed(&self) -> io::Result<()>;
    /// Fail the call with `errno`.
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
    /// [`Stop::proceed`] when [`Stop::verifies_every_exec`]).
    fn expect(&self, _what: Verification) {}
    /// How to answer this call later, from another thread (an operator's
    /// decision, a blocking call made for the tree). Taking it means the
    /// call is left waiting here.
    fn defer(&self) -> Holder;
    /// Stops every other task that shares the caller's memory, from now
    /// until the call has returned (after [`Stop::proceed`]) or been
    /// answered: the strings read next are the strings the kernel uses. A
    /// backend that cannot (user-notify: the families that need it run
    /// under ptrace only) says so.
    ///
    /// # Errors
    /// The tasks cannot all be stopped (the caller refuses the call).
    fn hold_still(&self) -> io::Result<()> {
        Err(io::Error::from_raw_os_error(libc::ENOSYS))
    }
    /// The NUL-terminated string at `addr` in the caller's memory (at most
    /// `max` bytes; whether its NUL came within them), read the backend's
    /// cheapest way; `None`: the family reads it itself.
    fn read_cstring(&self, _addr: u64, _max: usize) -> Option<io::Result<(Vec<u8>, bool)>> {
        None
    }
    /// Whether what this call's judgement reads can be pinned (copied where
    /// only the supervisor writes, [`Stop::pin`]) so no other task can
    /// change it before the kernel reads it. [`Pinning::Again`]: the
    /// backend made room for the copies first; the call comes back to be
    /// judged (the family returns without answering it).
    fn pinning(&self) -> Pinning {
        Pinning::Unavailable
    }
    /// Copies each `(argument, bytes)` where only the supervisor writes and
    /// points the argument at its copy: the kernel reads the bytes judged.
    /// Only after [`Stop::pinning`] said [`Pinning::Ready`].
    ///
    /// # Errors
    /// The backend cannot, or the caller is gone (the caller refuses the
    /// call).
    fn pin(&self, _copies: &[(usize, &[u8])]) -> io::Result<()> {
        Err(io::Error::from_raw_os_error(libc::ENOSYS))
    }
    /// Lets the call proceed, as [`Stop::proceed`], and runs `after` once
    /// it has returned, before the caller (or any task [`Stop::hold_still`]
    /// holds) runs again: a family that changed the caller's memory for
    /// the call puts it back there. Only after [`Stop::hold_still`].
    ///
    /// # Errors
    /// The backend cannot (user-notify: ENOSYS), or nothing is held; the
    /// call has not proceeded (the caller answers it).
    fn proceed_then(&self, _after: AfterCall) -> io::Result<()> {
        Err(io::Error::from_raw_os_error(libc::ENOSYS))
    }
}

/// Whether a call's judged bytes can be pinned ([`Stop::pinning`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pinning {
    /// [`Stop::pin`] will copy them.
    Ready,
    /// Not here (user-notify judges its own copies; a process whose region
    /// could not be mapped; a 32-bit call): the memory is held still
    /// instead.
    Unavailable,
    /// The caller was resumed to map the region; the call comes back.
    Again,
}

/// What runs once a call let through with [`Stop::proceed_then`] has
/// returned: given its return value (`-errno` on failure), the value the
/// caller is to see instead (`None`: its own).
pub type AfterCall = Box<dyn FnOnce(i64) -> Option<i64>>;

/// A held call as approvals see it, whatever holds it (a syscall's
/// backend, the HTTP proxy): the id it waits under, and whether it still
/// waits. Nothing here answers it: the family that held it does
/// (`Held::settle`).
pub trait Waiting: Send + Sync {
    /// The id it waits under: the notification id a syscall answers (0
    /// under ptrace, which has none), a held request's own.
    fn notif_id(&self) -> u64;
    /// Which of `ids` (ids of one held call, oldest first) still waits:
    /// for user-notify the last valid notification; for ptrace the thread
    /// itself, while it is alive (it cannot leave its stop unanswered); for
    /// a held HTTP request the last, while its client waits. `None`: the
    /// caller is gone (the approval ends `cancelled`).
    fn live(&self, ids: &[u64]) -> Option<u64>;
}

/// A caught syscall left waiting, answered later from any thread.
pub trait Deferred: Waiting {
    /// Answers the call without running it: `val >= 0` is its return
    /// value, `val < 0` is `-errno`. A call that no longer waits (its
    /// thread died) is left alone.
    fn answer_value(&self, val: i64);
    /// Fails the held call (notification `id`) with EACCES.
    fn refuse(&self, id: u64);
    /// Lets the held call (notification `id`) proceed. A verifying backend
    /// checks that the exec runs `expect`; the others ignore it (the caller
    /// watches the exec itself).
    ///
    /// # Errors
    /// The answer could not be delivered (the caller is gone).
    fn proceed(&self, id: u64, expect: Option<Verification>) -> io::Result<()>;
    /// See [`Stop::verifies_every_exec`].
    fn verifies_every_exec(&self) -> bool;
    /// Puts `sock` into the held caller's process at fd `at` (replacing
    /// what is there), before the answer.
    ///
    /// # Errors
    /// The backend cannot (ENOSYS: ptrace), or the kernel refused.
    fn install_fd(&self, sock: &OwnedFd, at: i32, cloexec: bool) -> io::Result<()>;
    /// Puts `file` into the held caller's process at its lowest free fd
    /// number; returns it.
    ///
    /// # Errors
    /// As [`Deferred::install_fd`].
    fn add_fd(&self, file: &OwnedFd, cloexec: bool) -> io::Result<i32>;
    /// Lets the held call run again from its start: it comes back through
    /// the filter and is judged anew, in the caller's memory as it is
    /// then (a call judged where it stops, once an operator approved it).
    ///
    /// # Errors
    /// The backend cannot (user-notify: ENOSYS; the caller answers the
    /// call instead).
    fn restart(&self) -> io::Result<()> {
        Err(io::Error::from_raw_os_error(libc::ENOSYS))
    }
}

/// A call left waiting, shared between the threads that may answer it.
pub type Holder = Arc<dyn Deferred>;

/// A held syscall is waited on as its handle says (spelled out: a
/// `&dyn Deferred` becomes a `&dyn Waiting` by itself only from Rust 1.86).
impl Waiting for Holder {
    fn notif_id(&self) -> u64 {
        (**self).notif_id()
    }
    fn live(&self, ids: &[u64]) -> Option<u64> {
        (**self).live(ids)
    }
}

/// What an exec must turn out to run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Expected {
    /// (device, inode) of the executable the kernel maps: the program, or a
    /// script's last interpreter.
    pub file: (u64, u64),
    /// The argv of the new image.
    pub argv: Vec<String>,
    /// `false` when the argv read was cut by the limits: only that prefix
    /// is compared.
    pub argv_complete: bool,
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

/// What kind of call is held (the API's `kind`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HoldKind {
    Exec,
    Connect,
    /// A request to a destination whose egress rule has `http:`.
    Http,
}

impl HoldKind {
    pub fn as_str(self) -> &'static str {
        match self {
            HoldKind::Exec => "exec",
            HoldKind::Connect => "connect",
            HoldKind::Http => "http",
        }
    }
}

/// A destination held for an operator.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeldDestination {
    /// The name the tree resolved to `ip`, when known.
    pub host: Option<String>,
    pub ip: std::net::IpAddr,
    pub port: u16,
    /// tcp | udp
    pub protocol: &'static str,
}

/// What an operator is asked about a held call.
#[derive(Debug, Clone)]
pub struct HoldRequest {
    pub kind: HoldKind,
    pub session_id: String,
    /// The calling process (an exec) or thread (a connect).
    pub pid: u32,
    /// Its start time (0: not known), so a re-issued notification of the
    /// same process joins its request.
    pub starttime: u64,
    pub depth: u32,
    /// The program, or the syscall's name for a connect.
    pub filename: String,
    pub argv: Vec<String>,
    /// The file the operator approves (device, inode): what runs must be it.
    pub file: Option<FileIdentity>,
    pub rule: String,
    pub message: Option<String>,
    pub destination: Option<HeldDestination>,
}

/// How a hold ended, as the family that held the call settles it.
#[derive(Debug, Clone)]
pub struct Settled {
    /// The approval's id.
    pub id: String,
    pub outcome: ApprovalOutcome,
    /// Who decided: an operator's name, `timeout`, `server` or `none`.
    pub approver: String,
    pub reason: Option<String>,
    /// The answer lets the call run (the caller is there for it).
    pub allow: bool,
    /// The notification to answer (`None`: the caller stopped waiting).
    pub live: Option<u64>,
    /// It repeats a refusal moments ago (a retry of the same lookup): that
    /// refusal's attempt.
    pub retry_of: Option<u64>,
    /// How long an operator had.
    pub timeout: Duration,
}

impl Settled {
    /// How it ended, as the call's event records it.
    pub fn record(&self) -> ApprovalRecord {
        ApprovalRecord {
            approval_id: self.id.clone(),
            approval_outcome: self.outcome,
            approver: self.approver.clone(),
            reason: self.reason.clone(),
        }
    }
}

/// A call held for an operator: what approvals ask, and how the family that
/// held it audits and answers its end.
pub trait Held: Send {
    /// What the operator is asked.
    fn request(&self) -> HoldRequest;
    /// Which call it is and whether it still waits (how it is answered is
    /// the family's own, in [`Held::settle`]).
    fn waiting(&self) -> &dyn Waiting;
    /// Its key for the retries of the same lookup, and the attempt it is: a
    /// refusal of it is remembered and repeated for them (`retry`). `None`:
    /// not reused.
    fn retry_key(&self) -> Option<(Lookup, u64)> {
        None
    }
    /// A notification the kernel re-issued for the same call (a signal
    /// restarted it) joins this request instead of asking again; its
    /// answer then goes to the live id ([`Settled::live`]).
    fn rejoinable(&self) -> bool {
        false
    }
    /// Told once the request exists, before anyone decides (an exec tells
    /// its caller it waits).
    fn on_hold(&self, _id: &str, _timeout: Duration) {}
    /// Audits the end of the hold and answers the call (nothing to answer
    /// when `s.live` is `None`).
    fn settle(self: Box<Self>, s: Settled);
}

/// Where calls a rule says `approve` for wait for an operator
/// (`approval::Approvals`).
pub trait Hold: Send + Sync {
    /// Holds `held` until an operator decides, the timeout expires or its
    /// caller stops waiting; never blocks.
    fn hold(self: Arc<Self>, held: Box<dyn Held>);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A syscall's handle whose notification `valid` still waits.
    struct Notified {
        id: u64,
        valid: u64,
    }

    impl Waiting for Notified {
        fn notif_id(&self) -> u64 {
            self.id
        }
        fn live(&self, ids: &[u64]) -> Option<u64> {
            ids.iter().rev().copied().find(|&n| n == self.valid)
        }
    }

    impl Deferred for Notified {
        fn answer_value(&self, _val: i64) {}
        fn refuse(&self, _id: u64) {}
        fn proceed(&self, _id: u64, _expect: Option<Verification>) -> io::Result<()> {
            Ok(())
        }
        fn verifies_every_exec(&self) -> bool {
            false
        }
        fn install_fd(&self, _sock: &OwnedFd, _at: i32, _cloexec: bool) -> io::Result<()> {
            Ok(())
        }
        fn add_fd(&self, _file: &OwnedFd, _cloexec: bool) -> io::Result<i32> {
            Ok(0)
        }
    }

    #[test]
    fn a_held_syscall_is_waited_on_as_its_backend_says() {
        let holder: Holder = Arc::new(Notified { id: 5, valid: 7 });
        let waiting: &dyn Waiting = &holder;
        assert_eq!(waiting.notif_id(), 5);
        assert_eq!(waiting.live(&[5, 7, 9]), Some(7), "the valid one");
        assert_eq!(waiting.live(&[5, 9]), None, "none still waits");
    }
}
