//! Network policy by destination: `socket_families` and `egress`.
//!
//! `socket_families` is an allow-list of `socket()` families the filter
//! enforces on a register (others fail with EAFNOSUPPORT); with `egress`
//! present and no list, it is `[unix, inet, inet6]`. `egress` rules decide
//! every destination a tree names (`connect`, and `sendto`/`sendmsg`/
//! `sendmmsg` with a destination): first match wins, a destination no rule
//! names gets `default`. A rule names destinations by `hosts` (the names the
//! tree resolved to that address), `cidrs`, both or neither (every
//! destination), and narrows them by `ports` and `protocol`. [`judge`] is a
//! pure function of the compiled [`Egress`] and a [`Destination`]; the
//! supervisor gathers the destination from a copy it made (see
//! `supervisor::egress`).
//!
//! Failure modes: values that cannot mean a destination (a host with a
//! scheme, path or port, `*` inside a label, an invalid CIDR, an unknown
//! family) are [`EgressValueError`]s; `compile` places them (and its own
//! refusals) in an [`EgressError`], which the policy's compiler turns into a
//! policy error at the value's line.

use super::decision::Decision;
use serde::Deserialize;
use std::collections::BTreeSet;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// `egress:` as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct EgressDoc {
    pub default: Decision,
    pub dns: Option<DnsMode>,
    pub rules: Option<Vec<EgressRuleDoc>>,
}

/// One `egress.rules` entry as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct EgressRuleDoc {
    pub name: String,
    pub hosts: Option<Vec<String>>,
    pub cidrs: Option<Vec<String>>,
    pub ports: Option<Vec<u16>>,
    pub protocol: Option<Protocol>,
    pub decision: Decision,
    pub http: Option<super::http::HttpDoc>,
}

/// What DNS queries of the tree are: `stub` (only names some rule could
/// allow are answered) or `host` (port 53 is a destination like any other).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum DnsMode {
    Stub,
    Host,
}

/// Which transport a rule is about (default `tcp`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Deserialize, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Protocol {
    Tcp,
    Udp,
    Any,
}

impl Protocol {
    pub fn as_str(self) -> &'static str {
        match self {
            Protocol::Tcp => "tcp",
            Protocol::Udp => "udp",
            Protocol::Any => "any",
        }
    }
}

/// A host pattern: a name, or `*.` and a name (any name below it, not the
/// name itself). Lowercase, without a trailing dot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HostPattern {
    Exact(String),
    Below(String),
}

impl HostPattern {
    /// Whether `name` (as the tree asked for it) matches.
    pub fn matches(&self, name: &str) -> bool {
        let name = name.trim_end_matches('.').to_ascii_lowercase();
        match self {
            HostPattern::Exact(h) => name == *h,
            HostPattern::Below(suffix) => {
                name.len() > suffix.len() + 1
                    && name.ends_with(suffix.as_str())
                    && name.as_bytes()[name.len() - suffix.len() - 1] == b'.'
            }
        }
    }
}

/// An address block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cidr {
    pub addr: IpAddr,
    pub prefix: u8,
}

impl Cidr {
    /// Whether `ip` is in the block (an IPv4-mapped IPv6 address is its IPv4
    /// address).
    pub fn contains(&self, ip: IpAddr) -> bool {
        match (self.addr, canonical(ip)) {
            (IpAddr::V4(net), IpAddr::V4(ip)) => {
                let mask = u32::MAX
                    .checked_shl(32 - u32::from(self.prefix))
                    .unwrap_or(0);
                u32::from(net) & mask == u32::from(ip) & mask
            }
            (IpAddr::V6(net), IpAddr::V6(ip)) => {
                let mask = u128::MAX
                    .checked_shl(128 - u32::from(self.prefix))
                    .unwrap_or(0);
                u128::from(net) & mask == u128::from(ip) & mask
            }
            _ => false,
        }
    }
}

/// `::ffff:a.b.c.d` as `a.b.c.d`; anything else as is.
pub fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6(v6),
        },
        v4 => v4,
    }
}

/// One compiled rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EgressRule {
    pub name: String,
    pub hosts: Vec<HostPattern>,
    pub cidrs: Vec<Cidr>,
    /// `None`: any port.
    pub ports: Option<Vec<u16>>,
    pub protocol: Protocol,
    pub decision: Decision,
    /// `http:`: each request to these destinations is judged by agentsh's
    /// proxy (`None`: the connection's bytes are not read).
    pub http: Option<std::sync::Arc<super::http::Http>>,
}

impl EgressRule {
    /// Whether the rule names `d` (its addresses, port and protocol).
    fn names(&self, d: &Destination<'_>) -> bool {
        let protocol = self.protocol == Protocol::Any || self.protocol == d.protocol;
        let port = self.ports.as_ref().is_none_or(|p| p.contains(&d.port));
        let everywhere = self.hosts.is_empty() && self.cidrs.is_empty();
        let by_cidr = self.cidrs.iter().any(|c| c.contains(d.ip));
        let by_host = self
            .hosts
            .iter()
            .any(|h| d.names.iter().any(|n| h.matches(n)));
        protocol && port && (everywhere || by_cidr || by_host)
    }

    /// Whether the rule could allow the name `name` (for DNS: a query for a
    /// name no rule could allow is refused).
    fn could_allow_name(&self, name: &str) -> bool {
        self.decision != Decision::Deny
            && ((self.hosts.is_empty() && self.cidrs.is_empty())
                || self.hosts.iter().any(|h| h.matches(name)))
    }
}

impl std::fmt::Display for HostPattern {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            HostPattern::Exact(h) => write!(f, "{h}"),
            HostPattern::Below(h) => write!(f, "*.{h}"),
        }
    }
}

impl std::fmt::Display for Cidr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.addr, self.prefix)
    }
}

impl EgressRule {
    /// One line: what the rule names.
    fn describe(&self) -> String {
        let mut what: Vec<String> = Vec::new();
        what.extend(self.hosts.iter().map(ToString::to_string));
        what.extend(self.cidrs.iter().map(ToString::to_string));
        let what = if what.is_empty() {
            "every address".to_string()
        } else {
            what.join(" ")
        };
        let ports = match &self.ports {
            None => "any port".to_string(),
            Some(p) => format!(
                "port {}",
                p.iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join(",")
            ),
        };
        format!(
            "{:<7} {} [{what}, {ports}]",
            self.decision.as_str(),
            self.name
        )
    }
}

impl Egress {
    /// What this version cannot do for the section: with `dns: host` a
    /// rule by `hosts` alone matches nothing (names are bound to addresses
    /// only by the stub). Warnings, in the server log and `policy check`.
    pub fn unbuilt(&self) -> Vec<String> {
        let mut out = Vec::new();
        for r in &self.rules {
            if !r.hosts.is_empty() && r.cidrs.is_empty() && self.dns == DnsMode::Host {
                out.push(format!(
                    "egress rule {:?} names hosts only, with dns: host: names are bound to \
                     addresses only by agentsh's DNS stub (dns: stub), so it matches nothing \
                     and its destinations get the rules below it or the default ({})",
                    r.name,
                    self.default.as_str()
                ));
            }
        }
        out
    }

    /// What `agentsh policy check` prints: the rules, then per protocol
    /// what a tree can reach.
    pub fn describe(&self) -> Vec<String> {
        let mut out = vec![format!(
            "egress: default {}; dns: {}; every connect and every send naming a destination \
             is judged, once per destination and tree",
            self.default.as_str(),
            match self.dns {
                DnsMode::Stub => {
                    "stub (every query of a tree, to any resolver, is answered by agentsh's \
                     stub: names no rule could allow are refused there; an answer binds its \
                     addresses to the name for that tree, which is how hosts rules match)"
                }
                DnsMode::Host => {
                    "host (port 53 is a destination like any other; hosts rules match nothing)"
                }
            }
        )];
        for (i, r) in self.rules.iter().enumerate() {
            out.push(format!("  {:>2}. {}", i + 1, r.describe()));
            for l in r.http.iter().flat_map(|h| h.describe()) {
                out.push(format!("        {l}"));
            }
        }
        for proto in [Protocol::Tcp, Protocol::Udp] {
            let open: Vec<String> = self
                .rules
                .iter()
                .filter(|r| r.protocol == proto || r.protocol == Protocol::Any)
                .filter(|r| {
                    r.decision != Decision::Deny
                        && (!r.cidrs.is_empty()
                            || (!r.hosts.is_empty() && self.dns == DnsMode::Stub))
                })
                .map(|r| r.name.clone())
                .collect();
            let reach = if open.is_empty() {
                "no address by rule".to_string()
            } else {
                format!("the addresses of {}", open.join(", "))
            };
            let floor = if proto == Protocol::Tcp {
                ", and only on the ports network_rules leave open for connect"
            } else {
                ""
            };
            out.push(format!(
                "  {}: {reach} (first match wins){floor}; every other destination: {}",
                proto.as_str().to_uppercase(),
                self.default.as_str()
            ));
        }
        out
    }
}

/// The compiled `egress:` section.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Egress {
    pub default: Decision,
    pub dns: DnsMode,
    pub rules: Vec<EgressRule>,
}

impl Egress {
    /// Whether every destination is allowed (`default: allow`, every rule
    /// `allow`): there is nothing to enforce, only to audit.
    pub fn allows_everything(&self) -> bool {
        self.default == Decision::Allow && self.rules.iter().all(|r| r.decision == Decision::Allow)
    }

    /// Whether a DNS query for `name` may leave the machine: some rule that
    /// is not a deny names it (or names every destination), or the default
    /// is allow. A default of `approve` does not: the query itself would
    /// carry the name out before anyone approved anything (a name to be
    /// approved is named by a rule with `decision: approve`).
    pub fn could_allow_name(&self, name: &str) -> bool {
        self.default == Decision::Allow || self.rules.iter().any(|r| r.could_allow_name(name))
    }
}

/// A destination as the supervisor gathered it from its own copy.
#[derive(Debug, Clone)]
pub struct Destination<'a> {
    pub ip: IpAddr,
    pub port: u16,
    /// `tcp` or `udp` (never `any`).
    pub protocol: Protocol,
    /// The names the tree resolved to `ip` (empty: none known).
    pub names: &'a [String],
}

/// What [`judge`] decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EgressVerdict {
    pub decision: Decision,
    /// The rule's name, or `default`.
    pub rule: String,
}

/// The first rule naming `d` decides; none: `default`. Pure.
pub fn judge_destination(e: &Egress, d: &Destination<'_>) -> EgressVerdict {
    let d = Destination {
        ip: canonical(d.ip),
        ..d.clone()
    };
    match e.rules.iter().find(|r| r.names(&d)) {
        Some(r) => EgressVerdict {
            decision: r.decision,
            rule: r.name.clone(),
        },
        None => EgressVerdict {
            decision: e.default,
            rule: crate::vocab::Builtin::Default.rule().into(),
        },
    }
}

/// A value that cannot be compiled: where it is and why.
#[derive(Debug)]
pub(crate) struct EgressError {
    /// (index, name) of the rule, when the value is in one.
    pub rule: Option<(usize, String)>,
    /// The key (`hosts`, `cidrs`, `default`, ...).
    pub field: &'static str,
    pub value: Option<String>,
    pub message: String,
}

fn decision(
    field: &'static str,
    d: Decision,
    rule: Option<(usize, &str)>,
) -> Result<Decision, EgressError> {
    match d {
        Decision::Allow | Decision::Deny | Decision::Approve => Ok(d),
        Decision::Redirect => Err(EgressError {
            rule: rule.map(|(i, n)| (i, n.to_string())),
            field,
            value: Some("redirect".into()),
            message: format!(
                "{field}: redirect is a command rule's decision; use allow, deny or approve"
            ),
        }),
        Decision::Audit => Err(EgressError {
            rule: rule.map(|(i, n)| (i, n.to_string())),
            field,
            value: Some("audit".into()),
            message: format!(
                "{field}: audit is not an egress decision (every destination is audited); use \
                 allow, deny or approve"
            ),
        }),
    }
}

/// Compiles `egress:`. Long: one check per field of each rule, each with
/// its own message.
pub(crate) fn compile(doc: EgressDoc) -> Result<Egress, EgressError> {
    let default = decision("default", doc.default, None)?;
    let mut rules = Vec::new();
    let mut names = BTreeSet::new();
    for (index, r) in doc.rules.unwrap_or_default().into_iter().enumerate() {
        let err = |field: &'static str, value: Option<&str>, message: String| EgressError {
            rule: Some((index, r.name.clone())),
            field,
            value: value.map(str::to_string),
            message,
        };
        if r.name.is_empty() {
            return Err(err("name", None, "a rule needs a name".into()));
        }
        if !names.insert(r.name.clone()) {
            return Err(err(
                "name",
                Some(&r.name),
                format!("the rule name {:?} is used twice", r.name),
            ));
        }
        let decision = decision("decision", r.decision, Some((index, &r.name)))?;
        let mut hosts = Vec::new();
        for h in r.hosts.unwrap_or_default() {
            hosts.push(parse_host(&h).map_err(|e| err("hosts", Some(&h), e.to_string()))?);
        }
        let mut cidrs = Vec::new();
        for c in r.cidrs.unwrap_or_default() {
            cidrs.push(parse_cidr(&c).map_err(|e| err("cidrs", Some(&c), e.to_string()))?);
        }
        if let Some(ports) = &r.ports {
            if ports.is_empty() {
                return Err(err(
                    "ports",
                    None,
                    "ports: is empty (omit it for any port)".into(),
                ));
            }
            if ports.contains(&0) {
                return Err(err("ports", Some("0"), "port 0 is no destination".into()));
            }
        }
        let protocol = r.protocol.unwrap_or(Protocol::Tcp);
        let http = match r.http {
            None => None,
            Some(_) if protocol != Protocol::Tcp => {
                return Err(err(
                    "http",
                    None,
                    "http: judges requests over TCP: the rule needs protocol: tcp".into(),
                ))
            }
            Some(_) if decision == Decision::Deny => {
                return Err(err(
                    "http",
                    None,
                    "http: on a deny rule judges nothing (no connection is made)".into(),
                ))
            }
            Some(doc) => Some(std::sync::Arc::new(super::http::compile(doc).map_err(
                |e| EgressError {
                    rule: Some((index, r.name.clone())),
                    field: "http",
                    value: e.value,
                    message: format!("{}: {}", e.field, e.message),
                },
            )?)),
        };
        rules.push(EgressRule {
            name: r.name,
            hosts,
            cidrs,
            ports: r.ports,
            protocol,
            decision,
            http,
        });
    }
    Ok(Egress {
        default,
        dns: doc.dns.unwrap_or(DnsMode::Stub),
        rules,
    })
}

/// What to write instead of a host that names no host.
const FIX_HOST: &str = "write a bare name like `pypi.org` or `*.githubusercontent.com`";
/// What to write instead of a block that names no block.
const FIX_CIDR: &str = "write an address block like 10.0.0.0/8, 169.254.169.254/32 or fd00::/8";

/// A `hosts`, `cidrs` or `socket_families` value that names no destination
/// (or family), and what to write instead.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EgressValueError {
    #[error("hosts: {0:?} is a URL, not a host name; {FIX_HOST}", FIX_HOST = FIX_HOST)]
    Url(String),
    #[error(
        "hosts: {0:?} has a port or is an IPv6 address; put ports in `ports:` and addresses in \
         `cidrs:`; {FIX_HOST}",
        FIX_HOST = FIX_HOST
    )]
    HostWithColon(String),
    #[error(
        "hosts: {0:?}: `*` may only be a whole first label (`*.example.com`); {FIX_HOST}",
        FIX_HOST = FIX_HOST
    )]
    StarInsideName(String),
    #[error("hosts: {host:?} is an address; put it in `cidrs:` as {name}/32")]
    HostIsAddress { host: String, name: String },
    #[error("hosts: {0:?} is not a host name; {FIX_HOST}", FIX_HOST = FIX_HOST)]
    NotHostName(String),
    #[error("cidrs: {0:?} is not an address block; {FIX_CIDR}", FIX_CIDR = FIX_CIDR)]
    NotAddressBlock(String),
    #[error(
        "cidrs: {cidr:?}: the prefix must be 0 to {max}; {FIX_CIDR}",
        FIX_CIDR = FIX_CIDR
    )]
    BadPrefix { cidr: String, max: u8 },
    /// Host bits set (10.0.0.1/8) are a typo more often than not.
    #[error("cidrs: {cidr:?} has bits set below the prefix; did you mean {network}?")]
    HostBitsSet { cidr: String, network: String },
    #[error(
        "socket_families: {0:?} is not a socket family agentsh knows; write one of {known}",
        known = FAMILIES.iter().map(|(n, _)| *n).collect::<Vec<_>>().join(", ")
    )]
    UnknownFamily(String),
}

/// A host pattern: a DNS name, or `*.` before one.
pub fn parse_host(h: &str) -> Result<HostPattern, EgressValueError> {
    if h.contains("://") || h.contains('/') {
        return Err(EgressValueError::Url(h.to_string()));
    }
    if h.contains(':') {
        return Err(EgressValueError::HostWithColon(h.to_string()));
    }
    let (below, name) = match h.strip_prefix("*.") {
        Some(rest) => (true, rest),
        None => (false, h),
    };
    let name = name.trim_end_matches('.').to_ascii_lowercase();
    if name.contains('*') {
        return Err(EgressValueError::StarInsideName(h.to_string()));
    }
    if name.parse::<Ipv4Addr>().is_ok() {
        return Err(EgressValueError::HostIsAddress {
            host: h.to_string(),
            name,
        });
    }
    let label_ok = |l: &str| {
        !l.is_empty()
            && l.len() <= 63
            && l.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
            && !l.starts_with('-')
            && !l.ends_with('-')
    };
    if name.is_empty() || name.len() > 253 || !name.split('.').all(label_ok) {
        return Err(EgressValueError::NotHostName(h.to_string()));
    }
    Ok(if below {
        HostPattern::Below(name)
    } else {
        HostPattern::Exact(name)
    })
}

/// `ADDR/PREFIX`, or a bare address (a /32 or /128).
pub fn parse_cidr(c: &str) -> Result<Cidr, EgressValueError> {
    let (addr, prefix) = match c.split_once('/') {
        Some((a, p)) => (a, Some(p)),
        None => (c, None),
    };
    let addr: IpAddr = addr
        .parse()
        .map_err(|_| EgressValueError::NotAddressBlock(c.to_string()))?;
    let max = if addr.is_ipv4() { 32 } else { 128 };
    let prefix = match prefix {
        None => max,
        Some(p) => p.parse::<u8>().ok().filter(|p| *p <= max).ok_or_else(|| {
            EgressValueError::BadPrefix {
                cidr: c.to_string(),
                max,
            }
        })?,
    };
    let cidr = Cidr { addr, prefix };
    // Host bits set (10.0.0.1/8) are a typo more often than not.
    let network_only = match addr {
        IpAddr::V4(a) => {
            let mask = u32::MAX.checked_shl(32 - u32::from(prefix)).unwrap_or(0);
            u32::from(a) & !mask == 0
        }
        IpAddr::V6(a) => {
            let mask = u128::MAX.checked_shl(128 - u32::from(prefix)).unwrap_or(0);
            u128::from(a) & !mask == 0
        }
    };
    if !network_only {
        return Err(EgressValueError::HostBitsSet {
            cidr: c.to_string(),
            network: network_of(cidr),
        });
    }
    Ok(cidr)
}

fn network_of(c: Cidr) -> String {
    match c.addr {
        IpAddr::V4(a) => {
            let mask = u32::MAX.checked_shl(32 - u32::from(c.prefix)).unwrap_or(0);
            format!("{}/{}", Ipv4Addr::from(u32::from(a) & mask), c.prefix)
        }
        IpAddr::V6(a) => {
            let mask = u128::MAX
                .checked_shl(128 - u32::from(c.prefix))
                .unwrap_or(0);
            format!("{}/{}", Ipv6Addr::from(u128::from(a) & mask), c.prefix)
        }
    }
}

/// The `socket()` families a policy can name, with their numbers.
pub const FAMILIES: &[(&str, u32)] = &[
    ("unix", 1),
    ("inet", 2),
    ("ax25", 3),
    ("ipx", 4),
    ("appletalk", 5),
    ("x25", 9),
    ("inet6", 10),
    ("key", 15),
    ("netlink", 16),
    ("packet", 17),
    ("rds", 21),
    ("llc", 26),
    ("can", 29),
    ("tipc", 30),
    ("bluetooth", 31),
    ("alg", 38),
    ("vsock", 40),
    ("qipcrtr", 42),
    ("smc", 43),
    ("xdp", 44),
    ("mctp", 45),
];

/// The default allow-list with `egress` present.
pub const DEFAULT_FAMILIES: [&str; 3] = ["unix", "inet", "inet6"];

/// A family's number by name.
pub fn family(name: &str) -> Result<u32, EgressValueError> {
    FAMILIES
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, v)| *v)
        .ok_or_else(|| EgressValueError::UnknownFamily(name.to_string()))
}

/// A family's name by number (for messages and `policy check`).
pub fn family_name(v: u32) -> Option<&'static str> {
    FAMILIES.iter().find(|(_, n)| *n == v).map(|(n, _)| *n)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules(yaml: &str) -> Egress {
        compile(serde_yaml_ng::from_str(yaml).unwrap()).unwrap()
    }

    fn dest(ip: &str, port: u16, protocol: Protocol, names: &[String]) -> EgressVerdict {
        let e = rules(
            "default: deny\nrules:\n  - {name: meta, cidrs: [169.254.169.254/32], protocol: any, decision: deny}\n  - {name: reg, hosts: [pypi.org, \"*.githubusercontent.com\"], ports: [443], decision: allow}\n  - {name: lan, cidrs: [10.0.0.0/8, \"fd00::/8\"], protocol: any, decision: approve}\n  - {name: dns, ports: [53], protocol: udp, decision: allow}\n",
        );
        judge_destination(
            &e,
            &Destination {
                ip: ip.parse().unwrap(),
                port,
                protocol,
                names,
            },
        )
    }

    /// A name whose DNS points it at a denied block is still refused when
    /// the deny by `cidrs` comes first (the order policy.md advises), and
    /// allowed when it comes after the allow by `hosts`.
    #[test]
    fn a_deny_by_cidr_before_an_allow_by_host_holds_against_the_names_dns() {
        let names = ["evil.example.org".to_string()];
        let d = Destination {
            ip: "169.254.169.254".parse().unwrap(),
            port: 443,
            protocol: Protocol::Tcp,
            names: &names,
        };
        let first = rules(
            "default: deny\nrules:\n  - {name: meta, cidrs: [169.254.169.254/32], protocol: any, decision: deny}\n  - {name: ex, hosts: [\"*.example.org\"], decision: allow}\n",
        );
        assert_eq!(judge_destination(&first, &d).rule, "meta");
        assert_eq!(judge_destination(&first, &d).decision, Decision::Deny);
        let after = rules(
            "default: deny\nrules:\n  - {name: ex, hosts: [\"*.example.org\"], decision: allow}\n  - {name: meta, cidrs: [169.254.169.254/32], protocol: any, decision: deny}\n",
        );
        assert_eq!(judge_destination(&after, &d).decision, Decision::Allow);
    }

    #[test]
    fn first_rule_naming_the_destination_wins() {
        let none: &[String] = &[];
        let pypi = ["pypi.org".to_string()];
        let raw = ["raw.githubusercontent.com".to_string()];
        let bare = ["githubusercontent.com".to_string()];
        type Case<'a> = (&'a str, u16, Protocol, &'a [String], Decision, &'a str);
        let cases: &[Case<'_>] = &[
            (
                "169.254.169.254",
                80,
                Protocol::Tcp,
                none,
                Decision::Deny,
                "meta",
            ),
            (
                "169.254.169.254",
                53,
                Protocol::Udp,
                none,
                Decision::Deny,
                "meta",
            ),
            (
                "151.101.0.223",
                443,
                Protocol::Tcp,
                &pypi,
                Decision::Allow,
                "reg",
            ),
            (
                "151.101.0.223",
                80,
                Protocol::Tcp,
                &pypi,
                Decision::Deny,
                "default",
            ),
            (
                "151.101.0.223",
                443,
                Protocol::Udp,
                &pypi,
                Decision::Deny,
                "default",
            ),
            (
                "151.101.0.223",
                443,
                Protocol::Tcp,
                none,
                Decision::Deny,
                "default",
            ),
            (
                "185.199.108.133",
                443,
                Protocol::Tcp,
                &raw,
                Decision::Allow,
                "reg",
            ),
            (
                "185.199.108.133",
                443,
                Protocol::Tcp,
                &bare,
                Decision::Deny,
                "default",
            ),
            (
                "10.1.2.3",
                22,
                Protocol::Tcp,
                none,
                Decision::Approve,
                "lan",
            ),
            (
                "::ffff:10.1.2.3",
                22,
                Protocol::Tcp,
                none,
                Decision::Approve,
                "lan",
            ),
            (
                "fd12::1",
                5000,
                Protocol::Udp,
                none,
                Decision::Approve,
                "lan",
            ),
            (
                "11.0.0.1",
                22,
                Protocol::Tcp,
                none,
                Decision::Deny,
                "default",
            ),
            ("8.8.8.8", 53, Protocol::Udp, none, Decision::Allow, "dns"),
            (
                "8.8.8.8",
                53,
                Protocol::Tcp,
                none,
                Decision::Deny,
                "default",
            ),
        ];
        for (ip, port, proto, names, want, rule) in cases {
            let v = dest(ip, *port, *proto, names);
            assert_eq!(
                (v.decision, v.rule.as_str()),
                (*want, *rule),
                "{ip}:{port} {proto:?} {names:?}"
            );
        }
    }

    #[test]
    fn names_a_rule_could_allow() {
        let e = rules("default: deny\nrules:\n  - {name: reg, hosts: [\"*.example.com\"], decision: allow}\n  - {name: no, hosts: [evil.test], decision: deny}\n");
        assert!(e.could_allow_name("a.example.com"));
        assert!(e.could_allow_name("A.Example.COM."));
        assert!(!e.could_allow_name("example.com"));
        assert!(!e.could_allow_name("evil.test"));
        assert!(!e.could_allow_name("secret.attacker.example"));
        let open = rules("default: allow\n");
        assert!(open.could_allow_name("anything.test"));
        // An approve default resolves only what a rule names: the query
        // would carry the name out before any approval.
        let ask = rules("default: approve\nrules:\n  - {name: ask, hosts: [\"*.ask.test\"], decision: approve}\n");
        assert!(!ask.could_allow_name("secret.attacker.example"));
        assert!(ask.could_allow_name("a.ask.test"));
    }

    #[test]
    fn bad_hosts_and_cidrs_say_what_to_write() {
        for (h, want) in [
            ("https://pypi.org/simple", "is a URL"),
            ("pypi.org:443", "has a port"),
            ("a*b.com", "whole first label"),
            ("*.*.com", "whole first label"),
            ("1.2.3.4", "cidrs"),
            ("bad name.com", "not a host name"),
            ("", "not a host name"),
        ] {
            let e = parse_host(h).unwrap_err().to_string();
            assert!(e.contains(want), "{h}: {e}");
        }
        for (c, want) in [
            ("10.0.0.0/33", "prefix must be 0 to 32"),
            ("10.0.0.1/8", "did you mean 10.0.0.0/8"),
            ("example.com/8", "not an address block"),
            ("fd00::/129", "0 to 128"),
        ] {
            let e = parse_cidr(c).unwrap_err().to_string();
            assert!(e.contains(want), "{c}: {e}");
        }
        assert_eq!(parse_cidr("1.2.3.4").unwrap().prefix, 32);
        assert!(family("bluetoth")
            .unwrap_err()
            .to_string()
            .contains("bluetooth"));
        assert_eq!(family("inet6").unwrap(), 10);
    }
}
