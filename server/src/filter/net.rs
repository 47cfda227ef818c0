//! The filter's network rules, from the policy's network part: socket
//! families refused, and where egress is judged, the inet sockets the
//! supervisor cannot judge refused and the calls that name a destination
//! sent to it (`supervisor::egress`).
//!
//! Why: the supervisor judges a destination only for stream and datagram
//! sockets of TCP or UDP; any other inet socket (raw, packet, ICMP, SCTP,
//! UDP-Lite) could reach a host unjudged, so it is refused at `socket`.
//!
//! Failure modes: none here (rules are only collected); what libseccomp
//! refuses of them is a `FilterError::Build` when they are added
//! (`context::add_rules`). The policy's block and the base rules win over
//! the traps.

use super::rules::{eq32, trap, Conditional, Unconditional};
use super::spec::{FilterSpec, TRACE_DATA_NET};
use super::table::Cmp;
use libseccomp::{ScmpAction, ScmpCompareOp};

/// One past the largest address family (`AF_MAX` on Linux 6.x).
const AF_MAX: u64 = 46;
const AF_INET: i64 = 2;
const AF_INET6: i64 = 10;
/// `SOCK_TYPE_MASK`: the type without `SOCK_NONBLOCK | SOCK_CLOEXEC`.
const SOCK_TYPE_MASK: u64 = 0xf;

/// The policy's network part (see [`super::spec::NetFilter`]):
/// * `socket_families`: `socket`/`socketpair` of another family fail with
///   EAFNOSUPPORT (each family below `AF_MAX` not listed, and every value
///   from `AF_MAX` up);
/// * `egress`: `connect`, `sendmsg`, `sendmmsg` and `sendto` with a
///   destination (argument 4 not NULL) go to the supervisor, which judges
///   the destination and performs the call (`supervisor::egress`); an inet
///   or inet6 socket is a stream or datagram socket of protocol 0, TCP or
///   UDP (raw, packet, ICMP "ping", SCTP, UDP-Lite: EPERM). A `sendto`
///   without destination (`send`, and `write` on any socket) is not trapped:
///   it goes where a judged `connect` pointed the socket.
///
/// The policy's `syscalls.block` and the base rules win over the traps (a
/// syscall they name keeps their answer).
pub(super) fn net_rules(spec: &FilterSpec, always: &mut Unconditional, rules: &mut Conditional) {
    let eafnosupport = ScmpAction::Errno(libc::EAFNOSUPPORT);
    let eperm = ScmpAction::Errno(libc::EPERM);
    if let Some(allowed) = &spec.net.families {
        for name in ["socket", "socketpair"] {
            for f in (0..AF_MAX).filter(|f| !allowed.contains(&(*f as u32))) {
                rules.add(
                    name,
                    eafnosupport,
                    vec![eq32(0, f as i64)],
                    format!("socket_families: {name}({f})"),
                );
            }
            rules.add_op(
                name,
                eafnosupport,
                Vec::new(),
                (0, ScmpCompareOp::GreaterEqual, AF_MAX),
                format!("socket_families: {name}(>= {AF_MAX})"),
            );
        }
    }
    if !spec.net.egress {
        return;
    }
    for family in [AF_INET, AF_INET6] {
        if spec.net.egress_allows_all {
            break;
        }
        for ty in [
            libc::SOCK_RAW,
            libc::SOCK_RDM,
            libc::SOCK_SEQPACKET,
            libc::SOCK_DCCP,
            10, // SOCK_PACKET (obsolete; AF_PACKET is refused by family)
        ] {
            rules.add(
                "socket",
                eperm,
                vec![
                    eq32(0, family),
                    Cmp {
                        arg: 1,
                        mask: SOCK_TYPE_MASK,
                        value: ty as u64,
                    },
                ],
                format!("egress: socket({family}, type {ty})"),
            );
        }
        // Protocols 0, 6 (TCP) and 17 (UDP) only.
        for proto in (1..6).chain(7..17) {
            rules.add(
                "socket",
                eperm,
                vec![eq32(0, family), eq32(2, proto)],
                format!("egress: socket({family}, protocol {proto})"),
            );
        }
        rules.add_op(
            "socket",
            eperm,
            vec![eq32(0, family)],
            (2, ScmpCompareOp::GreaterEqual, 18),
            format!("egress: socket({family}, protocol >= 18)"),
        );
    }
    let net = trap(spec.backend, TRACE_DATA_NET);
    for name in ["connect", "sendmsg", "sendmmsg"] {
        always.set(name, net, format!("egress: {name}"));
    }
    rules.add_op(
        "sendto",
        net,
        Vec::new(),
        (4, ScmpCompareOp::NotEqual, 0),
        "egress: sendto with a destination".into(),
    );
}
