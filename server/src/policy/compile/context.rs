//! What every check of the compiler shares: the document's origin and text
//! (so an error points at its line), the names a section has seen (to find
//! duplicates and the n-th rule of a name), the rule names the engine keeps
//! for itself, and [`RuleAt`], the one way a rule's error is built.
//!
//! Failure modes: none of its own; it builds the [`PolicyError`]s the other
//! rooms return.

use crate::policy::error::{Location, PolicyError};
use crate::policy::locate::Source;
use crate::policy::schema::Decision;
use crate::policy::semantics::Refusal;
use crate::vocab::Builtin;
use std::collections::HashMap;

/// Rule names the engine itself puts in a verdict.
pub(crate) const RULE_DEFAULT: &str = Builtin::Default.rule();
pub(crate) const RULE_INTERNAL_BYPASS: &str = Builtin::InternalBypass.rule();
pub(crate) const RULE_UNPARSABLE_WRAPPER: &str = Builtin::UnparsableWrapper.rule();
const RESERVED_RULE_NAMES: &[&str] = &[RULE_DEFAULT, RULE_INTERNAL_BYPASS, RULE_UNPARSABLE_WRAPPER];

/// The document being compiled: where it came from and its text.
pub(super) struct Ctx<'a> {
    pub origin: &'a str,
    pub source: Source<'a>,
}

impl Ctx<'_> {
    pub fn invalid(
        &self,
        location: Option<Location>,
        rule: Option<&str>,
        message: String,
    ) -> PolicyError {
        PolicyError::Invalid {
            origin: self.origin.to_string(),
            location,
            rule: rule.map(str::to_string),
            message,
        }
    }

    /// What `semantics` refused, as the error of rule `name` (the
    /// refusal's index) in `section`. Rule names are unique by then: the
    /// error points at occurrence 0.
    pub fn refused(&self, section: &'static str, name: &str, r: Refusal) -> PolicyError {
        RuleAt::new(self, section, r.index, name, 0).fail(r.field, r.value.as_deref(), r.message)
    }
}

/// Names of rules in one section, to find duplicates and the n-th definition.
#[derive(Default)]
pub(super) struct Seen<'a> {
    counts: HashMap<&'a str, usize>,
}

impl<'a> Seen<'a> {
    /// How many earlier rules had this name (0 for the first).
    pub fn add(&mut self, name: &'a str) -> usize {
        let n = self.counts.entry(name).or_insert(0);
        *n += 1;
        *n - 1
    }
}

/// One rule of a section: the `occurrence`-th rule named `name` in
/// `section`, at list index `index`. Its errors say so and point at the
/// offending value.
pub(super) struct RuleAt<'c> {
    ctx: &'c Ctx<'c>,
    section: &'static str,
    index: usize,
    name: &'c str,
    occurrence: usize,
}

impl<'c> RuleAt<'c> {
    pub fn new(
        ctx: &'c Ctx<'c>,
        section: &'static str,
        index: usize,
        name: &'c str,
        occurrence: usize,
    ) -> RuleAt<'c> {
        RuleAt {
            ctx,
            section,
            index,
            name,
            occurrence,
        }
    }

    /// The rule, once its name is checked: not empty, not used before in
    /// the section, not one the engine reports for its own decisions.
    pub fn checked(
        ctx: &'c Ctx<'c>,
        section: &'static str,
        index: usize,
        name: &'c str,
        occurrence: usize,
    ) -> Result<RuleAt<'c>, PolicyError> {
        let at = || ctx.source.rule(section, name, occurrence);
        if name.trim().is_empty() {
            return Err(ctx.invalid(
                None,
                None,
                format!("{section}[{index}]: the rule name is empty"),
            ));
        }
        if occurrence > 0 {
            return Err(ctx.invalid(
                at(),
                Some(name),
                format!(
                    "{section}[{index}]: duplicate rule name {name:?}: rule names must be unique"
                ),
            ));
        }
        if RESERVED_RULE_NAMES.contains(&name) {
            return Err(ctx.invalid(
                at(),
                Some(name),
                format!(
                    "{section}[{index}]: rule name {name:?} is reserved (the engine reports it \
                     for its own decisions)"
                ),
            ));
        }
        Ok(RuleAt::new(ctx, section, index, name, occurrence))
    }

    /// The rule's `decision` is allow or deny: the kernel enforces `what`
    /// (as `enforces` says it) and can neither ask nor log.
    pub fn allow_or_deny(
        &self,
        decision: Decision,
        what: &str,
        enforces: &str,
    ) -> Result<(), PolicyError> {
        match decision {
            Decision::Allow | Decision::Deny => Ok(()),
            d @ (Decision::Approve | Decision::Audit | Decision::Redirect) => Err(self.fail(
                "decision",
                Some(d.as_str()),
                format!(
                    "decision: {d} is not possible for {what} (the kernel enforces {enforces} \
                     and can neither ask nor log); use allow or deny"
                ),
            )),
        }
    }

    /// The error for `field` (= `value`) of this rule.
    pub fn fail(&self, field: &str, value: Option<&str>, what: String) -> PolicyError {
        let (section, name) = (self.section, self.name);
        self.ctx.invalid(
            self.ctx
                .source
                .rule_value(section, name, self.occurrence, field, value),
            Some(name),
            format!("{section}[{}] {name:?}: {what}", self.index),
        )
    }
}
