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
use crate::policy::egress::{self, Protocol};
use crate::policy::Decision;
use crate::supervisor::fdhold::{with_fds_still, FdHoldError, Scope};
use crate::vocab::Passage;
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
/// number between this check and the kernel's lookup of the fd
/// (`fdhold`); once the caller's other threads hold, the fd must still be
/// the socket checked (before, they were free to swap it). A thread that
/// cannot be frozen (or held) within the deadline: refused.
pub(super) fn let_through(
    k: &Call,
    ts: &mut EgressTree,
    fd: i32,
    still_same: impl Fn() -> io::Result<bool>,
) {
    let (tree, tid, call, stop) = (k.tree, k.c.tid, k.call, k.stop);
    let go = || match still_same() {
        Ok(true) => stop.proceed(),
        Ok(false) => Err(io::Error::other(format!(
            "fd {fd} changed to another file while the call was checked"
        ))),
        Err(e) => Err(io::Error::other(format!(
            "fd {fd} could not be read again: {e}"
        ))),
    };
    match with_fds_still(stop, ts.tasks, tid, Scope::Fds, go) {
        Ok(Ok(())) => {}
        Ok(Err(e)) => refuse(
            k,
            format!("the Unix-socket call could not be let through: {e}"),
        ),
        Err(FdHoldError::Gone) => {
            let _ = stop.answer(-i64::from(libc::ESRCH));
        }
        Err(why) => {
            let why = format!(
                "{} on a Unix socket (fd {fd}) from a threaded process: {why}, and one could \
                 swap an inet socket in at that fd",
                call.name()
            );
            tracing::info!(session = %tree.session_id, pid = tid, "{why}");
            refuse(k, why);
        }
    }
}
