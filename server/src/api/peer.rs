//! Who is asking: the peer of one API connection.
//!
//! Every connection is identified before its request is read:
//! * Unix peers by `SO_PEERCRED` (taken by the kernel at `connect`). A
//!   process of a supervised tree cannot create the SEQPACKET socket the API
//!   listens on (the tree's seccomp filter), so no tree process is ever a
//!   Unix peer; the lineage check in `serve` is a second line that logs and
//!   refuses if one somehow were. uid 0 outside every tree is an operator.
//! * TCP peers by address; every route but `/healthz` needs the operator
//!   token, and operator decisions additionally map the socket to its
//!   processes (`approval::Approvals::identify`).
//!
//! What each peer may hold at once is counted under its [`Peer::key`]
//! (see `limits`).
//!
//! Failure modes: none here; a peer that cannot be identified never becomes
//! a `Peer` (the connection is refused first), and a `comm` that cannot be
//! read is described as empty.

use crate::limits::LimitKey;
use agentsh_proto::seqpacket::PeerCred;
use std::net::SocketAddr;

/// The asker of one connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Peer {
    /// A local process on the Unix socket, outside every tree.
    Local(PeerCred),
    /// A TCP client.
    Tcp(SocketAddr),
}

impl Peer {
    /// The key limits are counted under.
    pub fn key(&self) -> LimitKey {
        match self {
            Peer::Local(c) => LimitKey::Uid(c.uid),
            Peer::Tcp(a) => LimitKey::Ip(a.ip()),
        }
    }

    /// For logs and the `approver` of audit events.
    pub fn describe(&self) -> String {
        match self {
            Peer::Local(c) => {
                let comm = std::fs::read_to_string(format!("/proc/{}/comm", c.pid))
                    .map(|s| s.trim().to_string())
                    .unwrap_or_default();
                format!("uid {} pid {} ({comm})", c.uid, c.pid)
            }
            Peer::Tcp(a) => format!("tcp {a}"),
        }
    }
}
