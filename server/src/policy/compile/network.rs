//! `network_rules`: each rule on its own (a name, ports, allow or deny),
//! then what each TCP direction's rules mean together (`semantics`).
//!
//! Failure modes: an empty port list, port 0, a decision the kernel cannot
//! make, or ports that mean "every port but these" (which Landlock can only
//! express by listing the others): a [`PolicyError`] naming the rule.

use super::context::{Ctx, RuleAt, Seen};
use crate::policy::error::PolicyError;
use crate::policy::schema::{NetworkDirection, NetworkRule, PortSet};
use crate::policy::semantics;

/// Each network rule on its own, then what they mean together (a
/// direction's ports).
pub(super) fn check_network_rules(ctx: &Ctx<'_>, rules: &[NetworkRule]) -> Result<(), PolicyError> {
    let mut seen = Seen::default();
    for (index, rule) in rules.iter().enumerate() {
        let occurrence = seen.add(&rule.name);
        check_network_rule(ctx, index, rule, occurrence)?;
    }
    for direction in [NetworkDirection::Connect, NetworkDirection::Bind] {
        semantics::tcp_ports(rules, direction)
            .map_err(|r| ctx.refused("network_rules", &rules[r.index].name, r))?;
    }
    Ok(())
}

fn check_network_rule(
    ctx: &Ctx<'_>,
    index: usize,
    rule: &NetworkRule,
    occurrence: usize,
) -> Result<(), PolicyError> {
    let at = RuleAt::checked(ctx, "network_rules", index, &rule.name, occurrence)?;
    match &rule.ports {
        PortSet::Any => {}
        PortSet::List(ports) if ports.is_empty() => {
            return Err(at.fail(
                "ports",
                None,
                "ports: is empty; list ports or write `ports: any`".into(),
            ))
        }
        PortSet::List(ports) => {
            if ports.contains(&0) {
                return Err(at.fail(
                    "ports",
                    Some("0"),
                    "ports: port 0 is not a port (write `ports: any` for all ports)".into(),
                ));
            }
        }
    }
    at.allow_or_deny(rule.decision, "network rules", "them")
}
