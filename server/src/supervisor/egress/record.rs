//! The egress family's audit: one `connect` event per destination judged
//! per tree, and one per call refused because it cannot be judged here
//! (naming the destination the caller's memory held).
//!
//! Failure modes: none of its own (the audit log reports its own).

use super::call::Call;
use super::copy::copy_call;
use super::sockaddr::{parse_destination, Parsed};
use super::state::DestKey;
use crate::audit::{ConnectEvent, EventBody};
use crate::policy::egress;
use crate::policy::Decision;
use crate::vocab::Refusal;
use std::net::IpAddr;

/// What an event says of a destination: its address and port as the
/// caller named them, and the transport where known.
#[derive(Debug, Clone, Copy)]
pub(super) struct Named {
    pub(super) ip: IpAddr,
    pub(super) port: u16,
    pub(super) protocol: Option<&'static str>,
}

impl From<DestKey> for Named {
    fn from(k: DestKey) -> Named {
        Named {
            ip: k.ip,
            port: k.port,
            protocol: Some(k.protocol.as_str()),
        }
    }
}

/// Audits a destination's decision (logged too when it is a refusal):
/// one `connect` event of the call.
pub(super) fn record(
    k: &Call,
    dest: Option<Named>,
    host: Option<String>,
    rule: &str,
    decision: Decision,
    message: Option<String>,
) {
    if decision != Decision::Allow {
        tracing::info!(
            session = %k.tree.session_id, pid = k.c.tid, syscall = k.call.name(), rule,
            dest = ?dest, "egress refused"
        );
    }
    k.ctx.audit.record(
        &k.tree.session_id,
        EventBody::Connect(ConnectEvent {
            pid: k.c.tid,
            syscall: k.call.name().to_string(),
            host,
            ip: dest.map(|d| d.ip.to_string()),
            port: dest.map(|d| d.port),
            protocol: dest.and_then(|d| d.protocol).map(str::to_string),
            rule: rule.to_string(),
            decision,
            message,
            effective_action: None,
            approval: None,
        }),
    );
}

/// Audits a call refused because it cannot be judged here, naming the
/// destination the caller's memory held (a record of what it named, read
/// after the decision, which did not need it; none where it cannot be
/// read). The socket's transport is not known here: no `protocol`.
pub(super) fn record_unenforceable(k: &Call, reason: String) {
    let named = copy_call(k.c, k.call, k.width).ok().and_then(|m| {
        m.iter()
            .find_map(|m| match parse_destination(&m.addr, k.call) {
                Parsed::Inet(ip, port) => Some(Named {
                    ip: egress::canonical(ip),
                    port,
                    protocol: None,
                }),
                _ => None,
            })
    });
    tracing::info!(
        session = %k.tree.session_id, pid = k.c.tid, syscall = k.call.name(),
        dest = ?named, "egress refused: {reason}"
    );
    record(
        k,
        named,
        None,
        Refusal::EgressUnenforceable.rule(),
        Decision::Deny,
        Some(reason),
    );
}
