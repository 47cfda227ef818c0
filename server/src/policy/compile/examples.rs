//! A command rule's `examples:`, checked against the compiled rules: the
//! policy's author says what a rule is for, and the loader holds it to that.
//!
//! Failure modes: an empty example, a `match` example this rule does not
//! decide (another rule first, or none), a `not_match` example it matches:
//! a [`PolicyError`] at the example's line.

use super::commands::{first_match, CommandRule};
use super::context::{Ctx, RuleAt, Seen};
use crate::policy::error::PolicyError;
use crate::policy::pattern::ProgramName;
use crate::policy::schema::CommandRuleDoc;

/// The first of `among` that decides example `line` at `depth` (argv split
/// on whitespace; a first word without `/` is a name, matched as a
/// wrapper's payload is); `None` for an empty line.
fn example_decider<'r>(
    among: &'r [CommandRule],
    line: &str,
    depth: u32,
) -> Option<Option<&'r CommandRule>> {
    let argv: Vec<String> = line.split_whitespace().map(str::to_string).collect();
    let p = argv.first()?;
    let name = if p.starts_with('/') {
        ProgramName::exec(p)
    } else {
        ProgramName::payload(p)
    };
    Some(first_match(among, &name, &argv, depth))
}

/// Each rule's `examples:` hold against the compiled rules: a `match`
/// example is decided by that rule (the first to match it at the smallest
/// depth the rule covers), a `not_match` example is not matched by it.
pub(super) fn check_examples(
    ctx: &Ctx<'_>,
    docs: &[CommandRuleDoc],
    rules: &[CommandRule],
) -> Result<(), PolicyError> {
    let mut seen = Seen::default();
    for (index, (doc, rule)) in docs.iter().zip(rules).enumerate() {
        let occurrence = seen.add(&doc.name);
        let Some(ex) = &doc.examples else { continue };
        let at = RuleAt::new(ctx, "command_rules", index, &doc.name, occurrence);
        let fail = |value: &str, what: String| at.fail("examples", Some(value), what);
        let empty = |line: &str| fail(line, "examples: an example is empty".into());
        for line in &ex.matches {
            match example_decider(rules, line, rule.depth.min).ok_or_else(|| empty(line))? {
                Some(r) if std::ptr::eq(r, rule) => {}
                Some(r) => {
                    return Err(fail(
                        line,
                        format!(
                            "examples.match {line:?}: decided by the earlier rule {:?}, not this \
                             one",
                            r.name
                        ),
                    ))
                }
                None => {
                    return Err(fail(
                        line,
                        format!(
                            "examples.match {line:?}: this rule does not match it (its commands \
                             or args_patterns)"
                        ),
                    ))
                }
            }
        }
        for line in &ex.not_match {
            let own = std::slice::from_ref(rule);
            if example_decider(own, line, rule.depth.min)
                .ok_or_else(|| empty(line))?
                .is_some()
            {
                return Err(fail(
                    line,
                    format!("examples.not_match {line:?}: this rule matches it"),
                ));
            }
        }
    }
    Ok(())
}
