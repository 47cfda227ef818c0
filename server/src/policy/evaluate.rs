//! The decision: `evaluate(policy, facts) -> Verdict`, pure (no I/O, no
//! clock, no environment), so the supervisor gathers facts, calls it and acts,
//! and tests drive it with tables.
//!
//! Order for one program name:
//! 1. an absolute name matching `internal_bypass` is allowed as is
//!    (rule `internal_bypass`): agentsh's own helpers;
//! 2. otherwise the first command rule whose commands, args_patterns and
//!    context all match decides; none matching: the policy's `default`;
//! 3. if the program is a wrapper (`env`, `timeout`, `ld.so`, ...), its
//!    payload is judged the same way, at the same depth, recursively, and
//!    the stricter result stands (deny > approve > audit > allow). A wrapper
//!    whose arguments cannot be parsed gets `unparsable_wrapper` (deny unless
//!    the policy says otherwise), unless the wrapper itself is already denied.
//!
//! The exec'd name and its resolved target (symlinks) are judged separately
//! and the stricter verdict stands, so a symlink cannot launder a program
//! past a rule on either name. On a tie the outer verdict (the exec'd name,
//! the wrapper itself) is reported.

use super::compile::{CommandRule, RULE_DEFAULT, RULE_INTERNAL_BYPASS, RULE_UNPARSABLE_WRAPPER};
use super::pattern::ProgramName;
use super::schema::Decision;
use super::wrappers::{self, Unwrapped, Wrapper};
use super::Policy;
use serde::Serialize;

/// Wrappers inside wrappers deeper than this are not judged but denied:
/// `env env env ...` only exists to tire a checker.
const MAX_WRAPPER_NESTING: usize = 16;

/// What the supervisor knows about one trapped exec.
#[derive(Debug, Clone, Copy)]
pub struct ExecFacts<'a> {
    /// Absolute path of the program, as the tracee named it (against its cwd).
    pub filename: &'a str,
    /// Its canonical target when different (symlinks).
    pub resolved: Option<&'a str>,
    /// argv as read; argv[0] as the caller set it.
    pub argv: &'a [String],
    /// 0 = the command the SDK asked for, >= 1 nested.
    pub depth: u32,
}

/// The policy's answer for one exec.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Verdict {
    pub decision: Decision,
    /// The deciding rule's name, `default`, `internal_bypass` or `unparsable_wrapper`.
    pub rule: String,
    pub message: Option<String>,
    /// The program that decided it: the exec'd name, its resolved target, or
    /// a wrapper's payload.
    pub judged: String,
}

impl Verdict {
    /// The stricter of two verdicts; `self` on a tie.
    fn stricter(self, other: Verdict) -> Verdict {
        if other.decision.strictness() > self.decision.strictness() {
            other
        } else {
            self
        }
    }
}

/// Judge one exec.
pub fn evaluate(policy: &Policy, facts: &ExecFacts<'_>) -> Verdict {
    let exec = |name| judge(policy, ProgramName::exec(name), facts.argv, facts.depth, 0);
    let verdict = exec(facts.filename);
    match facts.resolved {
        Some(resolved) if resolved != facts.filename => verdict.stricter(exec(resolved)),
        _ => verdict,
    }
}

fn judge(
    policy: &Policy,
    program: ProgramName<'_>,
    argv: &[String],
    depth: u32,
    nesting: usize,
) -> Verdict {
    let name = program.name();
    if program.is_absolute() && policy.internal_bypass.iter().any(|m| m.matches(name)) {
        return Verdict {
            decision: Decision::Allow,
            rule: RULE_INTERNAL_BYPASS.into(),
            message: None,
            judged: name.into(),
        };
    }
    let own = match first_match(&policy.command_rules, &program, argv, depth) {
        Some(rule) => Verdict {
            decision: rule.decision,
            rule: rule.name.clone(),
            message: rule.message.clone(),
            judged: name.into(),
        },
        None => Verdict {
            decision: policy.default,
            rule: RULE_DEFAULT.into(),
            message: None,
            judged: name.into(),
        },
    };
    let Some(wrapper) = Wrapper::of(&program) else {
        return own;
    };
    if nesting >= MAX_WRAPPER_NESTING {
        return unparsable(
            policy,
            own,
            name,
            &format!("wrappers nested more than {MAX_WRAPPER_NESTING} deep"),
        );
    }
    match wrappers::unwrap(wrapper, argv) {
        Ok(Unwrapped::NoPayload) => own,
        Ok(Unwrapped::Payload { program, argv }) => {
            let payload = ProgramName::payload(&program);
            own.stricter(judge(policy, payload, &argv, depth, nesting + 1))
        }
        Err(wrappers::Unparsable(why)) => unparsable(policy, own, name, &why),
    }
}

/// The fail-closed verdict for a wrapper whose payload cannot be known,
/// unless the wrapper's own verdict is already a deny.
fn unparsable(policy: &Policy, own: Verdict, name: &str, why: &str) -> Verdict {
    if own.decision == Decision::Deny {
        return own;
    }
    let fallback = Verdict {
        decision: policy.unparsable_wrapper,
        rule: RULE_UNPARSABLE_WRAPPER.into(),
        message: Some(format!(
            "cannot tell what `{name}` would run ({why}), so its payload cannot be judged"
        )),
        judged: name.into(),
    };
    if fallback.decision.strictness() >= own.decision.strictness() {
        fallback
    } else {
        own
    }
}

fn first_match<'p>(
    rules: &'p [CommandRule],
    program: &ProgramName<'_>,
    argv: &[String],
    depth: u32,
) -> Option<&'p CommandRule> {
    let mut joined: Option<String> = None;
    rules.iter().find(|rule| {
        if !rule.depth.contains(depth) || !rule.commands.iter().any(|c| c.matches(program)) {
            return false;
        }
        if rule.args_patterns.is_empty() {
            return true;
        }
        let args = joined.get_or_insert_with(|| argv.get(1..).unwrap_or_default().join(" "));
        rule.args_patterns.iter().any(|re| re.is_match(args))
    })
}
