//! Calls egress does not judge: on a Unix socket (the kernel resolves its
//! path in the caller's view, with the caller's credentials, which the
//! supervisor must not lend: let through where the fd cannot be swapped
//! meanwhile), and calls this host cannot judge, let through under a policy
//! that allows every destination or `egress.compat: allow_unjudged` (the
//! operator's choice), or refused.
//!
//! Failure modes: a threaded caller's other threads that cannot be frozen
//! (or, under the ptrace backend, held): the Unix-socket call is refused
//! with the reason. What runs unjudged is audited from the caller's
//! memory.

use super::call::{Call, EgressTree};
use super::copy::copy_call;
use super::record::{record, record_unenforceable, Named};
use super::sockaddr::{parse_destination, Parsed};
use super::state::DestKey;
use crate::audit::Passage;
use crate::policy::egress::{self, Protocol};
use crate::policy::Decision;
use crate::supervisor::sharing::FreezeError;
use crate::supervisor::tasks::Tasks;
use std::io;

/// Why a call this host cannot judge runs anyway.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Unjudged {
    /// The policy allows every destination: nothing to enforce.
    AllAllowed,
    /// `egress.compat: allow_unjudged`: the operator's choice.
    Compat,
}

/// Lets a call run that this host cannot judge (`why`), under a policy
/// that allows every destination or where the operator chose
/// `egress.compat: allow_unjudged`: audited once per destination and tree,
/// from the caller's memory (which the caller could change: the record is
/// of what it named, not a decision that needed it).
pub(super) fn let_unjudged(k: &Call, st: &mut EgressTree, why: &str, because: Unjudged) {
    let (rule, message) = match because {
        Unjudged::AllAllowed => (
            crate::policy::RULE_DEFAULT,
            format!(
                "not judged here ({why}): the policy allows every destination, so the call \
                 ran as made"
            ),
        ),
        Unjudged::Compat => (
            Passage::AllowUnjudged.rule(),
            format!(
                "not judged here ({why}): egress.compat is allow_unjudged, so the call ran as \
                 made (not enforced)"
            ),
        ),
    };
    if let Ok(messages) = copy_call(k.c, k.call, k.width) {
        for m in &messages {
            let Parsed::Inet(ip, port) = parse_destination(&m.addr, k.call) else {
                continue;
            };
            // The socket's type cannot be read here: keyed as TCP.
            let key = DestKey {
                ip: egress::canonical(ip),
                port,
                protocol: Protocol::Tcp,
            };
            if st.egress.seen.contains_key(&key) {
                continue;
            }
            st.egress.remember(key, Decision::Allow, rule, Vec::new());
            let named = Named {
                ip: key.ip,
                port,
                protocol: None,
            };
            record(
                k,
                Some(named),
                None,
                rule,
                Decision::Allow,
                Some(message.clone()),
            );
        }
    }
    let _ = k.stop.proceed();
}

/// Refuses the call (EACCES), audited `egress_unenforceable` with `why`.
pub(super) fn refuse(k: &Call, why: String) {
    record_unenforceable(k, why);
    let _ = k.stop.refuse(libc::EACCES);
}

/// Lets a call on a socket this does not judge (a Unix socket) run
/// (CONTINUE), where no other thread can put an inet socket at the same fd
/// number between this check and the kernel's lookup of the fd: the fd
/// table is shared only by the threads of the caller's process (the filter
/// refuses `clone` with `CLONE_FILES` and without `CLONE_THREAD`). A lone
/// thread: at once. Several: the other threads are frozen (ptrace, so no
/// `SIGCONT` ends it), the call let through once they hold, and all let go
/// once the caller has stopped too, i.e. its call is over (or was
/// interrupted, and comes back through the filter). Under the ptrace
/// backend, whose tracees' stops are its own, the tracer holds them
/// (`Stop::hold_still`) until the call has returned. A thread that cannot
/// be frozen (or held) within the deadline: refused.
pub(super) fn let_through(
    k: &Call,
    ts: &mut EgressTree,
    fd: i32,
    still_same: impl Fn() -> io::Result<bool>,
) {
    let (tree, tid, call, stop) = (k.tree, k.c.tid, k.call, k.stop);
    let refuse = |why: String| refuse(k, why);
    let Ok(st) = crate::tracee::proc_stat(tid) else {
        let _ = stop.answer(-i64::from(libc::ESRCH));
        return;
    };
    if st.num_threads <= 1 {
        let _ = stop.proceed();
        return;
    }
    // The ptrace backend holds the caller's other threads (and every
    // process sharing its memory) through the call itself.
    match stop.hold_still() {
        Ok(()) => {
            let go = match still_same() {
                Ok(true) => stop.proceed(),
                Ok(false) => Err(io::Error::other(format!(
                    "fd {fd} changed to another file while the call was checked"
                ))),
                Err(e) => Err(e),
            };
            if let Err(e) = go {
                refuse(format!(
                    "the Unix-socket call could not be let through: {e}"
                ));
            }
            return;
        }
        Err(e) if e.raw_os_error() == Some(libc::ENOSYS) => {}
        Err(e) => {
            return refuse(format!(
                "{} on a Unix socket (fd {fd}) from a process of {} threads: its other threads \
                 cannot be stopped ({e}), and one could swap an inet socket in at that fd",
                call.name(),
                st.num_threads
            ))
        }
    }
    let tgid = match crate::tracee::tgid_of(tid, &st) {
        Ok(t) => t,
        Err(e) => return refuse(format!("the caller's process is unknown: {e}")),
    };
    // Once the others are stopped, the fd must still be the socket checked:
    // before the stop they were free to swap it.
    let go = || match still_same() {
        Ok(true) => stop.proceed(),
        Ok(false) => Err(io::Error::other(format!(
            "fd {fd} changed to another file while the call was checked"
        ))),
        Err(e) => Err(io::Error::other(format!(
            "fd {fd} could not be read again: {e}"
        ))),
    };
    match stopped_while(tgid, tid, ts.tasks, go) {
        Ok(()) => {}
        Err(why) => {
            tracing::info!(session = %tree.session_id, pid = tid, "{why}");
            refuse(why.to_string());
        }
    }
}

/// Why a Unix-socket call of a threaded process cannot be let through
/// safely (it is refused with this reason).
#[derive(Debug, thiserror::Error)]
pub(super) enum Unlet {
    #[error("the caller's threads are unreadable: {0}")]
    Threads(io::Error),
    #[error("the caller's stat is unreadable: {0}")]
    Stat(io::Error),
    #[error("cannot stop the caller's other threads for a Unix-socket call: {0}")]
    Freeze(FreezeError),
    #[error("cannot watch the caller through its Unix-socket call (PTRACE_SEIZE)")]
    Seize,
    #[error("the call could not be let through: {0}")]
    Go(io::Error),
}

/// How long a caller let through may take to come back from its call
/// while its process's other threads are held.
const CALLER_DEADLINE: std::time::Duration = std::time::Duration::from_secs(30);

/// Freezes every thread of process `tgid` but `tid` (`PTRACE_SEIZE` and
/// `PTRACE_INTERRUPT`, as the exec race guard does: unlike a `SIGSTOP`, no
/// `SIGCONT` from another process of the tree can end it), runs `go` once
/// they hold, then stops `tid` too on its way back from its call (so the
/// kernel has looked its fd up) and lets them all go.
fn stopped_while(
    tgid: u32,
    tid: u32,
    st: &mut Tasks,
    go: impl FnOnce() -> io::Result<()>,
) -> Result<(), Unlet> {
    use crate::supervisor::ptrace as pt;
    let members = crate::supervisor::sharing::Members {
        procs: vec![tgid],
        tasks: threads(tgid)?
            .into_iter()
            .filter(|&t| t != tid)
            .map(|t| (t, tgid))
            .collect(),
    };
    let caller = crate::tracee::StatFile::open(tid).map_err(Unlet::Stat)?;
    let frozen = crate::supervisor::sharing::freeze(
        tgid,
        tid,
        &caller,
        members,
        &mut st.lingering,
        &mut st.files,
    )
    .map_err(Unlet::Freeze)?;
    // Seized before the answer (seizing changes nothing the caller sees);
    // interrupted after it, so it stops once its call has run. Not seized:
    // there would be no knowing when the others may run again, so no.
    let seized = st.lingering.take(tid) || pt::seize(tid, 0).is_ok();
    if !seized {
        frozen.release(&mut st.lingering, std::time::Duration::from_millis(50));
        return Err(Unlet::Seize);
    }
    let went = go();
    let _ = pt::interrupt(tid);
    let mut detached = false;
    if went.is_ok() {
        // Until the caller is back from its call (the kernel looked its fd
        // up as the call began), the others stay held: a caller not yet run
        // on a busy machine must not find them running.
        match pt::wait_one(tid, std::time::Instant::now() + CALLER_DEADLINE) {
            Some(pt::Event::Gone) => detached = true,
            // A signal-delivery stop's signal is passed on at the detach.
            Some(ev) => detached = pt::detach(tid, ev.detach_signal()).is_ok(),
            None => tracing::warn!(
                tid,
                "a Unix-socket call let through has not returned within {CALLER_DEADLINE:?}: \
                 the process's other threads run again"
            ),
        }
    }
    if !detached {
        // It stops once back in user space (the interrupt is pending), and
        // is let go then.
        st.lingering.add(tid);
    }
    frozen.release(&mut st.lingering, std::time::Duration::from_millis(50));
    went.map_err(Unlet::Go)
}

/// The thread ids of process `tgid`.
fn threads(tgid: u32) -> Result<Vec<u32>, Unlet> {
    let dir = std::fs::read_dir(format!("/proc/{tgid}/task")).map_err(Unlet::Threads)?;
    Ok(dir
        .flatten()
        .filter_map(|t| t.file_name().to_str().and_then(|n| n.parse().ok()))
        .collect())
}
