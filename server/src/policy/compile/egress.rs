//! `egress:` and `socket_families:`: the rules by destination compiled
//! (`policy::egress`), family names as numbers.
//!
//! Failure modes: a value `policy::egress` cannot compile, an unknown
//! family, or `egress` beside a network rule that allows connects to every
//! TCP port (the two would say different things about the same connect):
//! a [`PolicyError`] at the value's line.

use super::context::Ctx;
use crate::policy::egress::{self, Egress, EgressDoc};
use crate::policy::error::PolicyError;
use crate::policy::schema::{Decision, NetworkDirection, NetworkRule, PortSet};
use std::collections::BTreeSet;

/// `socket_families:` and `egress:`: names to numbers, rules compiled; with
/// `egress` and no list, the families are unix, inet and inet6. `egress`
/// beside a `network_rules` entry that allows every TCP port is refused:
/// the two would say different things about the same connect.
pub(super) fn check_network_policy(
    ctx: &Ctx<'_>,
    families: Option<Vec<String>>,
    egress: Option<EgressDoc>,
    network_rules: &[NetworkRule],
) -> Result<(Option<BTreeSet<u32>>, Option<Egress>), PolicyError> {
    let egress = egress.map(|doc| compile_egress(ctx, doc)).transpose()?;
    let families = socket_families(ctx, families, egress.as_ref())?;
    if egress.is_some() {
        refuse_every_port_open(ctx, network_rules)?;
    }
    Ok((families, egress))
}

/// `egress:` compiled, its error at the value's line (in a rule, or a key
/// of the section).
fn compile_egress(ctx: &Ctx<'_>, doc: EgressDoc) -> Result<Egress, PolicyError> {
    egress::compile(doc).map_err(|e| {
        let location = match &e.rule {
            Some((_, name)) => {
                ctx.source
                    .rule_value("egress", name, 0, e.field, e.value.as_deref())
            }
            None => {
                ctx.source
                    .section_value("egress", Some(e.field), e.value.as_deref().unwrap_or(""))
            }
        };
        let what = match &e.rule {
            Some((i, name)) => format!("egress.rules[{i}] {name:?}: {}", e.message),
            None => format!("egress.{}", e.message),
        };
        ctx.invalid(location, e.rule.as_ref().map(|(_, n)| n.as_str()), what)
    })
}

/// `socket_families:` as numbers; without the list, unix, inet and inet6
/// when `egress` restricts anything, else any family.
fn socket_families(
    ctx: &Ctx<'_>,
    families: Option<Vec<String>>,
    egress: Option<&Egress>,
) -> Result<Option<BTreeSet<u32>>, PolicyError> {
    Ok(match (families, egress) {
        (Some(names), _) => {
            let mut set = BTreeSet::new();
            for n in &names {
                let v = egress::family(n).map_err(|e| {
                    ctx.invalid(
                        ctx.source.section_value("socket_families", None, n),
                        None,
                        e.to_string(),
                    )
                })?;
                set.insert(v);
            }
            Some(set)
        }
        // Nothing to keep a tree from: no family list either.
        (None, Some(e)) if e.allows_everything() => None,
        (None, Some(_)) => Some(
            egress::DEFAULT_FAMILIES
                .iter()
                .filter_map(|n| egress::family(n).ok())
                .collect(),
        ),
        (None, None) => None,
    })
}

/// With `egress:`, no network rule may allow connects to every TCP port.
fn refuse_every_port_open(ctx: &Ctx<'_>, network_rules: &[NetworkRule]) -> Result<(), PolicyError> {
    let open = network_rules.iter().find(|r| {
        r.direction == NetworkDirection::Connect
            && r.decision == Decision::Allow
            && r.ports == PortSet::Any
    });
    match open {
        None => Ok(()),
        Some(open) => Err(ctx.invalid(
            ctx.source.rule("network_rules", &open.name, 0),
            Some(&open.name),
            format!(
                "network_rules {:?} allows connects to every TCP port while egress: judges each destination; remove that rule (egress decides connects) or list its ports",
                open.name
            ),
        )),
    }
}
