//! One trapped network call, step by step: find the caller's socket,
//! settle what is not judged here, copy the call, judge its destinations,
//! choose what the call is made on, and answer: held for an operator, made
//! on a thread of its own (a blocking socket), or made now.
//!
//! Failure modes: see the family's doc (`mod.rs`): what cannot be judged
//! is refused (`egress_unenforceable`) unless the operator chose otherwise;
//! more than [`BLOCKING_MAX`] blocking calls of one tree at once get EAGAIN.

use super::call::{Call, EgressTree};
use super::copy::{copy_call, Copied, Copy};
use super::held::{hold, Then};
use super::in_place::judge_in_place;
use super::judge::{judge_all, Judged};
use super::perform::Target;
use super::socket::{find_socket, new_socket, Found, Socket};
use super::state::EgressState;
use super::stub::register_querier;
use super::unjudged::{let_through, let_unjudged, refuse, Unjudged};
use crate::config::EgressCompat;
use crate::policy::egress::{Egress, Protocol};
use crate::supervisor::context::SupervisorContext;
use crate::supervisor::seam::{Caught, Holder, Stop};
use crate::supervisor::tasks::Tasks;
use crate::supervisor::tree::Tree;
use agentsh_proto::netabi::{NetCall, Width};
use std::sync::atomic::Ordering;

/// The most blocking calls of one tree made at once (each on a thread).
const BLOCKING_MAX: usize = 256;

/// The caller's inet socket, once found: what it is, and its family and
/// transport.
struct Inet {
    found: Socket,
    domain: i32,
    protocol: Protocol,
}

/// Handles one trapped network call of `c.tid` (see the family's doc).
#[allow(clippy::too_many_arguments)]
pub fn handle(
    ctx: &SupervisorContext,
    tree: &Tree,
    tasks: &mut Tasks,
    state: &mut EgressState,
    call: NetCall,
    width: Width,
    c: &Caught,
    stop: &dyn Stop,
) {
    let k = &Call {
        ctx,
        tree,
        c,
        call,
        width,
        stop,
        tell: crate::explain::tell,
    };
    let st = &mut EgressTree {
        tasks,
        egress: state,
    };
    let rules = tree.rules();
    st.egress.judged_by(&rules.policy);
    let Some(policy) = rules.policy.egress() else {
        return refuse(
            k,
            format!(
                "{} reached the supervisor but the policy has no egress section",
                call.name()
            ),
        );
    };
    let Some(inet) = inet_socket(k, st, policy) else {
        return;
    };
    let mut messages = match copy_call(c, call, width) {
        Ok(m) => m,
        Err(Copy::Answer(v)) => {
            let _ = stop.answer(v);
            return;
        }
        Err(Copy::Refuse(why)) => return refuse(k, why),
    };
    let judged = judge_all(k, st, policy, inet.protocol, inet.domain, &mut messages);
    if judged.allowed == 0 {
        let _ = stop.refuse(judged.refusal.unwrap_or(libc::EACCES));
        return;
    }
    messages.truncate(judged.allowed);
    make(k, st, inet, messages, judged);
}

/// The caller's inet socket; `None` when the call was settled here: not a
/// socket (answered as the kernel would), a Unix socket (let through), or
/// a socket this host cannot judge (let through unjudged or refused).
fn inet_socket(k: &Call, st: &mut EgressTree, policy: &Egress) -> Option<Inet> {
    let (ctx, stop) = (k.ctx, k.stop);
    let unjudged_ok = ctx.egress_compat == EgressCompat::AllowUnjudged;
    let fd = k.c.args[0] as i32;
    match find_socket(k.c.tid, fd, k.call, stop) {
        Found::Answer(v) => {
            let _ = stop.answer(v);
        }
        Found::Gone => {}
        // Not a destination this judges (see the family's doc): let it
        // through only where the fd cannot be swapped meanwhile.
        Found::Unix(same) => let_through(k, st, fd, same),
        // A raw or other socket, where the policy allows every destination
        // (the filter refuses them otherwise): nothing to judge.
        Found::Other(_) if policy.allows_everything() => {
            let _ = stop.proceed();
        }
        Found::Other(why) => refuse(k, why),
        Found::Unreachable(why) => unreachable(k, st, policy, why),
        // As above: nothing to enforce, so no socket of ours either.
        Found::Inet(Socket::Remote { .. }, ..) if policy.allows_everything() => {
            let why = "pidfd_getfd is refused here, so the caller's socket cannot be taken";
            let_unjudged(k, st, why, Unjudged::AllAllowed);
        }
        // A send naming a destination needs the socket itself; the
        // operator chose to run what cannot be judged here.
        Found::Inet(Socket::Remote { .. }, ..) if k.call != NetCall::Connect && unjudged_ok => {
            let why = "pidfd_getfd is refused here, and a send naming a destination needs the \
                       caller's socket";
            let_unjudged(k, st, why, Unjudged::Compat);
        }
        Found::Inet(found, domain, protocol) => {
            return Some(Inet {
                found,
                domain,
                protocol,
            })
        }
    }
    None
}

/// A socket the supervisor cannot reach (`why`): where the backend holds
/// the caller still (ptrace), the call is judged where it stops and let
/// through as made (`in_place`); elsewhere it runs unjudged where nothing
/// is to be enforced or the operator chose so, and is refused otherwise.
fn unreachable(k: &Call, st: &mut EgressTree, policy: &Egress, why: String) {
    // A destination judged where it stops is copied where only the tracer
    // writes, where it can be (`in_place`).
    let pinned = match k.stop.pinning() {
        crate::supervisor::seam::Pinning::Again => return,
        crate::supervisor::seam::Pinning::Ready => true,
        crate::supervisor::seam::Pinning::Unavailable => false,
    };
    match k.stop.hold_still() {
        Ok(()) => return judge_in_place(k, st, policy, pinned),
        Err(e) if e.raw_os_error() == Some(libc::ENOSYS) => {}
        Err(e) => {
            return refuse(
                k,
                format!("the caller's other threads cannot be stopped for the call: {e}"),
            )
        }
    }
    if policy.allows_everything() {
        // Nothing to enforce: every destination is allowed. The call runs
        // as the caller made it, audited from its memory.
        let_unjudged(k, st, &why, Unjudged::AllAllowed);
    } else if k.ctx.egress_compat == EgressCompat::AllowUnjudged {
        // The operator chose to run what cannot be judged here.
        let_unjudged(k, st, &why, Unjudged::Compat);
    } else {
        refuse(k, why);
    }
}

/// Makes the judged call (or holds it for an operator) with the copies.
fn make(k: &Call, st: &mut EgressTree, inet: Inet, messages: Vec<Copied>, mut judged: Judged) {
    let blocking = !inet.found.nonblocking(&messages);
    let protocol = inet.protocol;
    let Some(target) = target(k, inet) else {
        return;
    };
    if let Some(p) = judged.to_proxy.take() {
        // Booked before anything can reach the proxy.
        if let Err(why) = p.book(target.sock()) {
            return refuse(k, why.to_string());
        }
    }
    if judged.to_stub {
        // The stub knows the tree by the socket's address: registered
        // before anything can reach it.
        if let Err(why) = register_querier(k, st, target.sock(), protocol) {
            return refuse(k, why.to_string());
        }
    }
    // One way to answer later: the replacement's, where it took one.
    let deferred = match &target {
        Target::Replace { held, .. } => Some(held.clone()),
        Target::Taken(_) => None,
    };
    let later = move || deferred.unwrap_or_else(|| k.stop.defer());
    let call = k.call;
    let perform = move || target.perform(call, protocol, &messages);
    if let Some(approve) = judged.approve {
        hold(k, st, approve, later(), Then::Perform(Box::new(perform)));
    } else if blocking {
        on_a_thread(k, st, later, perform);
    } else {
        let _ = k.stop.answer(perform());
    }
}

/// What the call is made on: the socket taken from the caller, or (where
/// `pidfd_getfd` is refused) a connect on a socket of the supervisor's
/// own, put in place of the caller's once made. `None`: refused.
fn target(k: &Call, inet: Inet) -> Option<Target> {
    match inet.found {
        Socket::Taken(sock) => Some(Target::Taken(sock)),
        Socket::Remote { cloexec, nonblock } => {
            if k.call != NetCall::Connect {
                refuse(
                    k,
                    format!(
                        "{} naming a destination on a socket the supervisor cannot take \
                         (pidfd_getfd is refused here): only connect can be made for the tree \
                         without it (connect the socket first, then send)",
                        k.call.name()
                    ),
                );
                return None;
            }
            match new_socket(inet.domain, inet.protocol, nonblock) {
                Ok(ours) => Some(Target::Replace {
                    ours,
                    at: k.c.args[0] as i32,
                    cloexec,
                    held: k.stop.defer(),
                }),
                Err(e) => {
                    refuse(k, format!("cannot make a socket for the tree: {e}"));
                    None
                }
            }
        }
    }
}

/// A blocking call, made on a thread of its own and answered from there,
/// so the tree's other syscalls are not held up behind a slow connect: at
/// most [`BLOCKING_MAX`] per tree at once (a thousand connects to an
/// address that never answers would otherwise be a thousand threads for
/// two minutes).
fn on_a_thread(
    k: &Call,
    st: &mut EgressTree,
    later: impl FnOnce() -> Holder,
    perform: impl FnOnce() -> i64 + Send + 'static,
) {
    let in_flight = st.egress.blocking.clone();
    if in_flight.fetch_add(1, Ordering::SeqCst) >= BLOCKING_MAX {
        in_flight.fetch_sub(1, Ordering::SeqCst);
        tracing::warn!(
            session = %k.tree.session_id, pid = k.c.tid,
            "{BLOCKING_MAX} blocking network calls of this tree already in flight: EAGAIN"
        );
        let _ = k.stop.answer(-i64::from(libc::EAGAIN));
        return;
    }
    let held = later();
    let done = in_flight.clone();
    let spawned = std::thread::Builder::new()
        .name("agentsh-egress".into())
        .spawn(move || {
            let v = perform();
            done.fetch_sub(1, Ordering::SeqCst);
            held.answer_value(v);
        });
    if let Err(e) = spawned {
        // The call was not made: say so, never leave it waiting.
        in_flight.fetch_sub(1, Ordering::SeqCst);
        tracing::error!("cannot start a thread for a blocking network call: {e}");
        let _ = k.stop.answer(-i64::from(libc::EAGAIN));
    }
}
