//! Egress: every destination a tree names is judged on a copy the
//! supervisor made once, and the call is then performed on the tree's
//! behalf, never continued where another thread could rewrite the address
//! after the decision.
//!
//! The filter hands over `connect`, `sendto` with a destination, `sendmsg`
//! and `sendmmsg` (policy `egress:`). For each: the caller's socket is taken
//! with `pidfd_getfd` (the same open socket, not a copy of its state); a
//! socket that is not inet or inet6 (a Unix socket: the kernel resolves its
//! path in the caller's view, with the caller's credentials, which the
//! supervisor must not lend) is let through (CONTINUE). For an inet socket
//! the address, and for sends the data and control messages, are read once
//! into the supervisor's memory; each destination is judged
//! (`policy::egress::judge_destination`); an allowed call is made by the supervisor on
//! the taken socket with that copy, and its result is the caller's answer.
//! A blocking socket's call is made on a thread of its own and answered from
//! there, so the tree's other syscalls are not held up behind a slow
//! connect. Each destination is judged once per tree (and audited once, as
//! a `connect` event); later calls to it reuse the decision.
//!
//! What this does not watch: data sent without a destination (`write`,
//! `send`) on a socket whose destination was judged, which is the point
//! (the TCP data path costs nothing); and a Unix socket swapped in for an
//! inet one between the decision and the kernel's lookup of the fd under a
//! CONTINUE, by a thread sharing the caller's fd table (the inet socket's
//! own `connect` is then not judged): see docs/security-model.md.
//!
//! Where `pidfd_getfd` is refused (Docker's default profile without
//! CAP_SYS_PTRACE), the socket is found from `/proc` (`tracee::netproc`): an inet
//! `connect` is judged and made on a socket of the supervisor's own, which
//! is then put in place of the caller's at the same fd number
//! (`SECCOMP_IOCTL_NOTIF_ADDFD`, user-notify only) before the answer; a Unix
//! socket is let through as above, its fd compared by inode; a send naming
//! a destination is refused (it needs the socket itself).
//!
//! Failure modes: a socket that can be reached neither way (the ptrace
//! backend without `pidfd_getfd`, a socket bound before a replaced
//! connect), memory that cannot be read, a message layout this does not
//! handle (control messages of a 32-bit caller): refused with EACCES and
//! audited with the reason (`egress_unenforceable`, naming the destination
//! the caller's memory held). Never a CONTINUE for an inet destination,
//! unless the operator chose `egress.compat: allow_unjudged`: then a call
//! that cannot be judged runs as made, audited `rule: allow_unjudged`. More than 256
//! blocking calls of one tree at once: EAGAIN (logged), so a tree cannot
//! spend the server's threads.
//!
//! Rooms, in the order a call meets them: `handle` (the steps), `socket`
//! (finding the caller's socket), `unjudged` (what is not judged here),
//! `copy` (the call's messages, copied once), `sockaddr` (addresses, pure),
//! `judge` (each destination), `stub` (a DNS socket told to the stub),
//! `proxied` (a destination whose rule has `http:`: the connect made to
//! agentsh's HTTP proxy), `perform` (the call made for the tree), `held` (a call held for an
//! operator), `record` (the audit), `state` (what the family keeps), `call`
//! (one call's context).

mod call;
mod copy;
mod handle;
mod held;
mod in_place;
mod judge;
#[cfg(test)]
mod judge_tests;
mod perform;
mod proxied;
mod record;
mod sockaddr;
mod socket;
mod state;
mod stub;
mod unjudged;

pub use handle::handle;
pub use state::EgressState;
