//! Judging a call's destinations, in order, on the copies: DNS goes to
//! agentsh's stub (`dns: stub`), a TCP port `network_rules` closes is
//! refused (Landlock does not see a connect the supervisor makes), and
//! every other destination is judged by the pure policy
//! (`policy::egress::judge_destination`) with the names the tree resolved
//! to it. Each destination is judged once per tree and audited once; later
//! calls reuse the decision while the tree's names for it stay the same.
//!
//! Failure modes: none of its own: what is not allowed is refused (EACCES)
//! and audited with the rule that said so.

use super::call::{Call, EgressTree};
use super::copy::Copied;
use super::proxied::{to_proxy, ToProxy};
use super::record::record;
use super::sockaddr::{parse_destination, sockaddr_of, Parsed};
use super::state::DestKey;
use crate::explain;
use crate::policy::egress::{self, Destination, Egress, Protocol};
use crate::policy::Decision;
use crate::supervisor::tree::Tree;
use crate::vocab::{Passage, Refusal};
use std::net::SocketAddr;

/// A destination an operator must approve first: its key, the rule, and the
/// name the tree resolved to it.
pub(super) type ToApprove = (DestKey, String, Option<String>);

/// What judging a call's destinations came to.
pub(super) struct Judged {
    /// How many messages (from the first) may be sent.
    pub(super) allowed: usize,
    pub(super) refusal: Option<i32>,
    /// A destination is the DNS stub (the socket must be registered).
    pub(super) to_stub: bool,
    /// The one destination an operator must approve first.
    pub(super) approve: Option<ToApprove>,
    /// A connect made to agentsh's HTTP proxy instead (its rule has
    /// `http:`): booked once the socket is known.
    pub(super) to_proxy: Option<ToProxy>,
}

/// What one message's destination came to.
enum One {
    /// Sent as it is (or the kernel refuses it: performing the call gives
    /// the caller that answer).
    Pass,
    /// DNS, sent to the stub.
    ToStub,
    /// Sent to agentsh's HTTP proxy.
    ToProxy(ToProxy),
    /// Waits for an operator.
    Approve(ToApprove),
    /// Waits for an operator, then is sent to agentsh's HTTP proxy.
    ApproveToProxy(ToApprove, ToProxy),
    Refuse,
}

/// Judges every destination of `messages` (rewriting DNS ones to the
/// stub), in order, stopping at the first refused one: one denied
/// destination in a `sendmmsg` ends the batch there, as a failed send
/// would.
pub(super) fn judge_all(
    k: &Call,
    st: &mut EgressTree,
    policy: &Egress,
    protocol: Protocol,
    domain: i32,
    messages: &mut [Copied],
) -> Judged {
    let single = messages.len() == 1;
    let mut j = Judged {
        allowed: 0,
        refusal: None,
        to_stub: false,
        approve: None,
        to_proxy: None,
    };
    for m in messages.iter_mut() {
        match judge_one(k, st, policy, protocol, domain, m, single) {
            One::Pass => {}
            One::ToStub => j.to_stub = true,
            One::ToProxy(p) => j.to_proxy = Some(p),
            One::Approve(a) => j.approve = Some(a),
            One::ApproveToProxy(a, p) => {
                j.approve = Some(a);
                j.to_proxy = Some(p);
            }
            One::Refuse => {
                j.refusal = Some(libc::EACCES);
                break;
            }
        }
        j.allowed += 1;
    }
    j
}

/// One message's destination. Long: DNS, the HTTP proxy and each
/// decision's answer, in the order a destination meets them.
fn judge_one(
    k: &Call,
    st: &mut EgressTree,
    policy: &Egress,
    protocol: Protocol,
    domain: i32,
    m: &mut Copied,
    single: bool,
) -> One {
    if m.addr.is_empty() {
        return One::Pass;
    }
    let (ip, port) = match parse_destination(&m.addr, k.call) {
        // AF_UNSPEC where the kernel reads no destination in it: a
        // connect's (the association dissolved), a send's too short to
        // hold a sockaddr_in (refused by the kernel). A send's that is long
        // enough is parsed as the IPv4 destination UDP sends to.
        Parsed::Unspec => return One::Pass,
        // The kernel refuses it on this socket (EAFNOSUPPORT or EINVAL).
        Parsed::Other => return One::Pass,
        Parsed::Inet(ip, port) => (ip, port),
    };
    let key = DestKey {
        ip: egress::canonical(ip),
        port,
        protocol,
    };
    if port == 53 {
        if let Some(stub) = k.tree.rules().stub(k.ctx) {
            return to_stub(k, st, key, stub.addr, domain, m);
        }
        if policy.dns == egress::DnsMode::Stub {
            return stub_down(k, st, key);
        }
    }
    let decided = decide(k, st, policy, key);
    // Only a TCP destination whose rule has `http:` goes to the proxy (the
    // check costs every other call nothing but the rule's lookup).
    let proxied = key.protocol == Protocol::Tcp
        && matches!(decided.0, Decision::Allow | Decision::Approve)
        && policy
            .rules
            .iter()
            .any(|r| r.name == decided.1 && r.http.is_some());
    if proxied {
        let host = decided.2.clone().or_else(|| {
            let names = st.egress.names(k.tree).names_of(key.ip);
            host_of(policy, &decided.1, &names)
        });
        match to_proxy(k, policy, key, &decided.1, host, domain, m) {
            Ok(None) => {}
            Ok(Some(p)) if decided.0 == Decision::Allow => return One::ToProxy(p),
            // Approved first, then made to the proxy: the booking is made
            // with the call.
            Ok(Some(p)) if single => {
                return One::ApproveToProxy((key, decided.1, decided.2), p);
            }
            Ok(Some(_)) => {}
            Err(why) => {
                let why = why.to_string();
                tell_refusal(k, st, key, decided.2.as_deref(), &decided.1, Some(&why));
                let rule = Refusal::EgressUnenforceable.rule();
                record(
                    k,
                    Some(key.into()),
                    decided.2,
                    rule,
                    Decision::Deny,
                    Some(why),
                );
                return One::Refuse;
            }
        }
    }
    match decided {
        (Decision::Approve, rule, host) if single => One::Approve((key, rule, host)),
        (Decision::Approve, rule, host) => {
            let why = "a destination that needs approval, in a sendmmsg batch: refused \
                       (approvals are asked one call at a time)";
            tell_refusal(k, st, key, host.as_deref(), &rule, Some(why));
            record(
                k,
                Some(key.into()),
                host,
                &rule,
                Decision::Deny,
                Some(why.into()),
            );
            One::Refuse
        }
        (Decision::Allow, ..) => One::Pass,
        (_, rule, host) => {
            let why = if rule == Refusal::NetworkRules.rule() {
                Some("the port is not among network_rules' connect ports")
            } else if rule == crate::policy::RULE_DEFAULT {
                Some("no egress rule allows this destination")
            } else {
                None
            };
            tell_refusal(k, st, key, host.as_deref(), &rule, why);
            One::Refuse
        }
    }
}

/// Tells the caller why a destination is refused (`execve.explain:
/// stderr`): one line on its stderr, the first time this thread is refused
/// it.
pub(super) fn tell_refusal(
    k: &Call,
    st: &mut EgressTree,
    key: DestKey,
    host: Option<&str>,
    rule: &str,
    why: Option<&str>,
) {
    if k.ctx.limits.explain != crate::config::Explain::Stderr || !st.egress.told.first(k.c.tid, key)
    {
        return;
    }
    let dest = explain::Destination {
        syscall: k.call.name(),
        host,
        ip: key.ip,
        port: key.port,
        protocol: key.protocol.as_str(),
    };
    (k.tell)(k.c.tid, &explain::refused_destination(&dest, rule, why));
}

/// DNS under `dns: stub`: the stub answers every query of the tree,
/// whatever resolver it names (the message's destination is rewritten).
fn to_stub(
    k: &Call,
    st: &mut EgressTree,
    key: DestKey,
    stub: SocketAddr,
    domain: i32,
    m: &mut Copied,
) -> One {
    let named = SocketAddr::new(key.ip, key.port);
    if named != stub {
        match sockaddr_of(stub, domain) {
            Some(a) => m.addr = a,
            None => {
                // The stub's address family is not the socket's (a stub on
                // IPv6, an AF_INET socket): the query cannot be sent to it,
                // and never goes around it. Refused and audited like any
                // call egress cannot enforce.
                let why = format!(
                    "agentsh's DNS stub at {stub} cannot be reached from this socket's \
                     address family: DNS is refused"
                );
                let rule = Refusal::EgressUnenforceable.rule();
                tell_refusal(k, st, key, None, rule, Some(&why));
                record(k, Some(key.into()), None, rule, Decision::Deny, Some(why));
                return One::Refuse;
            }
        }
    }
    if !st.egress.seen.contains_key(&key) {
        let message =
            (named != stub).then(|| format!("sent to agentsh's DNS stub at {stub} instead"));
        let rule = Passage::DnsStub.rule();
        record(k, Some(key.into()), None, rule, Decision::Allow, message);
        st.egress.remember(key, Decision::Allow, rule, Vec::new());
    }
    One::ToStub
}

/// DNS under `dns: stub` while the stub is not running (the server's start
/// log says why): refused, never sent around it.
fn stub_down(k: &Call, st: &mut EgressTree, key: DestKey) -> One {
    tell_refusal(
        k,
        st,
        key,
        None,
        Refusal::DnsStubDown.rule(),
        Some("agentsh's DNS stub is not running: DNS is refused"),
    );
    if !st.egress.seen.contains_key(&key) {
        let rule = Refusal::DnsStubDown.rule();
        record(
            k,
            Some(key.into()),
            None,
            rule,
            Decision::Deny,
            Some("agentsh's DNS stub is not running (see the server's log): DNS is refused".into()),
        );
        st.egress.remember(key, Decision::Deny, rule, Vec::new());
    }
    One::Refuse
}

/// A judged destination's decision, its rule and the name the tree
/// resolved to it: from the tree's cache, or judged now (and audited: one
/// event per destination per tree; an approval is audited when it ends).
fn decide(
    k: &Call,
    st: &mut EgressTree,
    policy: &Egress,
    key: DestKey,
) -> (Decision, String, Option<String>) {
    let names = st.egress.names(k.tree).names_of(key.ip);
    if let Some((d, rule, then)) = st.egress.seen.get(&key) {
        if *then == names {
            return (*d, rule.clone(), None);
        }
    }
    // Landlock's TCP floor (`network_rules` connect ports) does not see a
    // connect the supervisor makes for the tree, so it is kept here too.
    if key.protocol == Protocol::Tcp && !tcp_floor_open(k.tree, key.port) {
        let message = format!(
            "port {} is not among network_rules' connect ports (the floor every connect \
             keeps, egress or not)",
            key.port
        );
        let rule = Refusal::NetworkRules.rule();
        record(
            k,
            Some(key.into()),
            None,
            rule,
            Decision::Deny,
            Some(message),
        );
        st.egress.remember(key, Decision::Deny, rule, names);
        return (Decision::Deny, rule.to_string(), None);
    }
    let v = egress::judge_destination(
        policy,
        &Destination {
            ip: key.ip,
            port: key.port,
            protocol: key.protocol,
            names: &names,
        },
    );
    let host = host_of(policy, &v.rule, &names);
    if v.decision == Decision::Approve {
        // Approved once for this tree: allowed from then on (the approval
        // was the event). Otherwise the caller holds it; the approval
        // records it when it ends.
        let approved = st
            .egress
            .approved
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .contains(&key);
        if approved {
            st.egress.remember(key, Decision::Allow, &v.rule, names);
            return (Decision::Allow, v.rule, host);
        }
        return (Decision::Approve, v.rule, host);
    }
    record(k, Some(key.into()), host.clone(), &v.rule, v.decision, None);
    st.egress.remember(key, v.decision, &v.rule, names);
    (v.decision, v.rule, host)
}

/// The name that matched the deciding `hosts` rule, else the first the tree
/// resolved.
fn host_of(policy: &Egress, rule: &str, names: &[String]) -> Option<String> {
    policy
        .rules
        .iter()
        .find(|r| r.name == rule)
        .and_then(|r| names.iter().find(|n| r.hosts.iter().any(|h| h.matches(n))))
        .or(names.first())
        .cloned()
}

/// Whether `network_rules` leave TCP port `port` open for connects (a
/// policy whose connect ports cannot be computed was refused at load, so
/// an error here is a closed port).
fn tcp_floor_open(tree: &Tree, port: u16) -> bool {
    use crate::policy::semantics;
    use crate::policy::NetworkDirection;
    match semantics::tcp_ports(
        tree.rules().policy.network_rules(),
        NetworkDirection::Connect,
    ) {
        Ok(None) => true,
        Ok(Some(ports)) => ports.contains(&port),
        Err(_) => false,
    }
}
