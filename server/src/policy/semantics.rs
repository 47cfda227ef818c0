//! What `file_rules` and `network_rules` mean, decided from the rules as
//! written (before any path variable is expanded), and which combinations
//! Landlock cannot enforce.
//!
//! Per file operation (`read`, `write`, `create`, `delete`, `execute`):
//!
//! * no rule names it: not restricted by the policy ([`FileOpKind::Open`]);
//! * an `allow` rule names it: an allow-list ([`FileOpKind::AllowList`]) —
//!   allowed only beneath the allowed paths, minus the denied ones;
//! * only `deny` rules name it: a deny-list ([`FileOpKind::DenyList`]) —
//!   allowed everywhere except beneath the denied paths.
//!
//! The kind never depends on what a variable expands to, so an allow whose
//! `${WORKSPACE}` is unset cannot turn an allow-list into "everything".
//!
//! Per TCP direction, rules are read in order, first match per port: no rule
//! leaves it open; a `ports: any` rule settles every port not matched yet; a
//! port list that only `deny` rules name would mean "every port but these",
//! which Landlock can only express as an allow-list of the 65,535 others
//! (25–117 ms more for every shell: `docs/benchmarks.md`),
//! so it is refused with the allow-list to write instead.
//!
//! Failure modes: [`check_file_rules`] and [`tcp_ports`] return a
//! [`Refusal`] naming the rule and saying what to write instead; the policy
//! loader turns it into an error, so the server never starts on a policy
//! whose meaning it could not enforce. A path Landlock cannot express as
//! one rule is [`NotEnforceable`].

use super::schema::{Decision, FileOperation, FileRule, NetworkDirection, NetworkRule, PortSet};
use std::collections::BTreeSet;

/// How the policy restricts one file operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileOpKind {
    /// No rule names it (agentsh's own protection still applies).
    Open,
    /// Allowed only beneath the paths an `allow` grants it on.
    AllowList,
    /// Allowed everywhere except beneath the paths a `deny` names.
    DenyList,
}

/// The kind of `op` under `rules`.
pub fn file_op_kind(rules: &[FileRule], op: FileOperation) -> FileOpKind {
    let naming = || rules.iter().filter(|r| r.operations.contains(&op));
    if naming().any(|r| r.decision == Decision::Allow) {
        FileOpKind::AllowList
    } else if naming().next().is_some() {
        FileOpKind::DenyList
    } else {
        FileOpKind::Open
    }
}

pub const FILE_OPERATIONS: [FileOperation; 5] = [
    FileOperation::Read,
    FileOperation::Write,
    FileOperation::Create,
    FileOperation::Delete,
    FileOperation::Execute,
];

pub fn op_name(op: FileOperation) -> &'static str {
    match op {
        FileOperation::Read => "read",
        FileOperation::Write => "write",
        FileOperation::Create => "create",
        FileOperation::Delete => "delete",
        FileOperation::Execute => "execute",
    }
}

fn direction_name(d: NetworkDirection) -> &'static str {
    match d {
        NetworkDirection::Connect => "connect",
        NetworkDirection::Bind => "bind",
    }
}

/// A combination Landlock cannot enforce: which rule (index in its
/// section), which field to point at, and the message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub index: usize,
    pub field: &'static str,
    pub value: Option<String>,
    pub message: String,
}

/// `p` is `ancestor` or beneath it, comparing the text (variables included).
fn beneath(p: &str, ancestor: &str) -> bool {
    p == ancestor
        || ancestor == "/"
        || (p.starts_with(ancestor) && p.as_bytes().get(ancestor.len()) == Some(&b'/'))
}

/// Refuses file rules whose meaning Landlock cannot enforce.
///
/// * A denied path strictly beneath `/proc`: carving needs the entries of
///   `/proc`, which are processes that do not exist yet when a tree's
///   ruleset is built (and `/proc/self` would be the server's).
/// * An operation whose every allowed path lies beneath a denied one (other
///   than `/`): the allow makes it an allow-list of those paths alone, so the
///   deny would change nothing and the operation would be denied everywhere
///   else — the opposite of what such a pair reads like.
///
/// # Errors
/// The first such rule, with what to write instead.
pub fn check_file_rules(rules: &[FileRule]) -> Result<(), Refusal> {
    let base = |p: &str| landlock_base(p).map(str::to_string).unwrap_or_default();
    for (i, r) in rules.iter().enumerate() {
        if r.decision != Decision::Deny {
            continue;
        }
        for p in &r.paths {
            let b = base(p);
            if b != "/proc" && beneath(&b, "/proc") {
                return Err(Refusal {
                    index: i,
                    field: "paths",
                    value: Some(p.clone()),
                    message: format!(
                        "paths: {p:?} cannot be denied on its own: Landlock would have to grant \
                         every other entry of /proc one by one, and those are processes that do \
                         not exist yet when a command starts. Deny \"/proc/**\" as a whole \
                         instead, or leave /proc out of the rule"
                    ),
                });
            }
        }
    }
    for op in FILE_OPERATIONS {
        let naming = |d: Decision| {
            rules
                .iter()
                .enumerate()
                .filter(move |(_, r)| r.decision == d && r.operations.contains(&op))
                .flat_map(move |(i, r)| r.paths.iter().map(move |p| (i, base(p))))
                .collect::<Vec<_>>()
        };
        let allows = naming(Decision::Allow);
        let denies = naming(Decision::Deny);
        if allows.is_empty() || denies.is_empty() || denies.iter().any(|(_, d)| d == "/") {
            continue;
        }
        let inside = |a: &str| denies.iter().find(|(_, d)| beneath(a, d));
        if allows.iter().all(|(_, a)| inside(a).is_some()) {
            let (ai, a) = &allows[0];
            let (di, d) = inside(a).expect("checked above");
            let op = op_name(op);
            return Err(Refusal {
                index: *ai,
                field: "decision",
                value: Some("allow".into()),
                message: format!(
                    "allows {op} only beneath paths that file rule {:?} denies ({a} is beneath \
                     {d}): an allow makes {op} an allow-list of those paths alone, so the deny \
                     would change nothing and {op} would be denied everywhere else. To keep {op} \
                     allowed everywhere except the denied paths, add \"/**\" to this rule's \
                     paths (the denied paths stay carved out and the allowed ones beneath them \
                     win); to allow {op} only here, remove the deny",
                    rules[*di].name
                ),
            });
        }
    }
    Ok(())
}

/// The TCP ports a direction keeps open: `Ok(None)` when it is not
/// restricted, `Ok(Some(ports))` for an allow-list (empty: closed).
///
/// # Errors
/// Rules that mean "every port except these": a deny-only port list, or
/// denied ports followed by `ports: any` + `allow`.
pub fn tcp_ports(
    rules: &[NetworkRule],
    direction: NetworkDirection,
) -> Result<Option<BTreeSet<u16>>, Refusal> {
    let mut named = false;
    let mut any_allow_list = false;
    let mut allowed: BTreeSet<u16> = BTreeSet::new();
    let mut denied: BTreeSet<u16> = BTreeSet::new();
    let mut first_deny: Option<usize> = None;
    let dir = direction_name(direction);
    let instead = |ports: &BTreeSet<u16>| {
        format!(
            "Landlock keeps open only the ports a ruleset lists, so every other port would have \
             to be listed (about 65,000 rules: 25 ms or more for every shell, even prebuilt). Write the ports \
             to keep open instead, e.g. `- {{name: open-ports, ports: [80, 443], direction: \
             {dir}, decision: allow}}` (every port not listed is closed, {} included), or \
             remove the deny to leave {dir} unrestricted",
            list(ports)
        )
    };
    for (i, r) in rules.iter().enumerate() {
        if r.direction != direction {
            continue;
        }
        named = true;
        match (&r.ports, r.decision) {
            (PortSet::List(ports), Decision::Allow) => {
                any_allow_list = true;
                allowed.extend(ports.iter().filter(|p| !denied.contains(*p)));
            }
            (PortSet::List(ports), _) => {
                first_deny.get_or_insert(i);
                denied.extend(ports.iter().filter(|p| !allowed.contains(*p)));
            }
            (PortSet::Any, Decision::Allow) if denied.is_empty() => return Ok(None),
            (PortSet::Any, Decision::Allow) => {
                let by = first_deny.map_or("", |d| rules[d].name.as_str());
                return Err(Refusal {
                    index: i,
                    field: "ports",
                    value: Some("any".into()),
                    message: format!(
                        "allows TCP {dir} to every port except {} (denied by {by:?}). {}",
                        list(&denied),
                        instead(&denied)
                    ),
                });
            }
            (PortSet::Any, _) => return Ok(Some(allowed)),
        }
    }
    if !named {
        return Ok(None);
    }
    if any_allow_list {
        return Ok(Some(allowed));
    }
    let i = first_deny.expect("a named direction without allow has a deny list");
    Err(Refusal {
        index: i,
        field: "decision",
        value: Some("deny".into()),
        message: format!(
            "denies TCP {dir} to {} and no rule allows any port, which would mean every other \
             port stays open. {}",
            list(&denied),
            instead(&denied)
        ),
    })
}

fn list(ports: &BTreeSet<u16>) -> String {
    let v: Vec<String> = ports.iter().map(u16::to_string).collect();
    match v.len() {
        1 => format!("port {}", v[0]),
        _ => format!("ports {}", v.join(", ")),
    }
}

/// A rule path Landlock cannot enforce: it grants a path and everything
/// beneath it, so only a literal path or one ending in `/**` means one rule.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "{pattern:?}: Landlock grants a path and everything beneath it, so only a literal path or \
     one ending in /** can be enforced"
)]
pub struct NotEnforceable {
    pub pattern: String,
}

/// What a rule path means as a Landlock path-beneath rule, or why it cannot.
///
/// # Errors
/// A glob other than a trailing `/**`.
pub fn landlock_base(pattern: &str) -> Result<&str, NotEnforceable> {
    let base = pattern.strip_suffix("/**").unwrap_or(pattern);
    let base = if base.is_empty() { "/" } else { base };
    let literal = match base.strip_prefix("${").and_then(|a| a.split_once('}')) {
        Some((_, rest)) => rest,
        None => base,
    };
    if literal.contains(['*', '?', '[', ']', '{', '}']) {
        return Err(NotEnforceable {
            pattern: pattern.to_string(),
        });
    }
    Ok(base)
}
