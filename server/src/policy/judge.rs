//! The decision: [`judge`]`(policy, exec facts) -> Verdict` for a whole exec,
//! and [`evaluate`]`(policy, program facts) -> Verdict` for one program name;
//! both pure (no I/O, no clock, no environment), so the supervisor gathers
//! facts, calls `judge` and acts, and tests drive them with tables.
//!
//! `judge` decides, in order: a program without a name on disk (memfd,
//! deleted file) is denied (`fileless_exec`: Landlock cannot see it, so
//! nothing else would stop it); an argv cut by the limits is denied when the
//! configuration says so (`execve_truncated`); otherwise the program is
//! evaluated under its exec'd name, its resolved target, every program of the
//! policy it is a byte-identical copy of, and every `#!` interpreter the
//! kernel will start for it (with the argv the kernel builds), and, when it
//! is a dynamic loader, every program the loader will map (resolved as it
//! will open it), and the stricter verdict stands.
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

use super::compile::{first_match, RULE_DEFAULT, RULE_INTERNAL_BYPASS, RULE_UNPARSABLE_WRAPPER};
use super::loaded::Policy;
use super::pattern::ProgramName;
use super::schema::Decision;
use super::wrappers::{self, Unwrapped, Wrapper};
use serde::Serialize;

/// Wrappers inside wrappers deeper than this are not judged but denied:
/// `env env env ...` only exists to tire a checker.
const MAX_WRAPPER_NESTING: usize = 16;

/// The rule that denies exec of a memfd or deleted file, for every policy.
pub const RULE_FILELESS_EXEC: &str = crate::vocab::Builtin::FilelessExec.rule();
/// The rule that denies an argv cut by `execve.max_argc` / `max_argv_bytes`.
pub const RULE_TRUNCATED: &str = crate::vocab::Builtin::ExecveTruncated.rule();

/// One program name as the rules see it.
#[derive(Debug, Clone, Copy)]
pub struct ProgramFacts<'a> {
    /// Absolute path of the program, as the tracee named it (against its cwd).
    pub filename: &'a str,
    /// Its canonical target when different (symlinks).
    pub resolved: Option<&'a str>,
    /// argv as read; argv[0] as the caller set it.
    pub argv: &'a [String],
    /// 0 = the command the SDK asked for, >= 1 nested.
    pub depth: u32,
}

/// The argv limits, when the argv read was cut by them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Truncation {
    /// `execve.on_truncated: deny`.
    pub deny: bool,
    pub max_argc: usize,
    pub max_argv_bytes: usize,
}

/// A `#!` interpreter the kernel starts for a script, as the supervisor
/// resolved it in the caller's view.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, serde::Deserialize)]
pub struct Interpreter {
    /// The path on the `#!` line.
    pub path: String,
    /// Its canonical target when different (symlinks).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub resolved: Option<String>,
    /// The argv the kernel gives it: `[path, optional argument, script, args...]`.
    #[serde(skip)]
    pub argv: Vec<String>,
    /// Programs of the policy this file is a byte-identical copy of.
    #[serde(skip_serializing_if = "Vec::is_empty", default)]
    pub copy_of: Vec<String>,
}

/// Everything the supervisor gathered about one trapped exec.
#[derive(Debug, Clone, Copy)]
pub struct ExecFacts<'a> {
    /// The program under its exec'd name and resolved target.
    pub program: ProgramFacts<'a>,
    /// The file has no name on disk (memfd, deleted).
    pub anonymous: bool,
    /// `Some` when the argv was cut by the limits.
    pub truncated: Option<Truncation>,
    /// The `#!` interpreters the kernel will start, outermost script's first.
    pub interpreters: &'a [Interpreter],
    /// Programs of the policy the executed file is a byte-identical copy of.
    pub copy_of: &'a [String],
    /// When the program is a dynamic loader: the programs it will map,
    /// outermost first, resolved as it will open them (names and content),
    /// with their argv.
    pub loader_payloads: &'a [Interpreter],
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

/// Judge one exec: see the module doc for the order.
pub fn judge(policy: &Policy, facts: &ExecFacts<'_>) -> Verdict {
    let p = &facts.program;
    if facts.anonymous {
        return Verdict {
            decision: Decision::Deny,
            rule: RULE_FILELESS_EXEC.into(),
            message: Some(
                "running a program from memory (memfd) or from a deleted file is not allowed"
                    .into(),
            ),
            judged: p.filename.into(),
        };
    }
    if let Some(t) = facts.truncated.filter(|t| t.deny) {
        return Verdict {
            decision: Decision::Deny,
            rule: RULE_TRUNCATED.into(),
            message: Some(format!(
                "argv exceeds execve.max_argc={} or execve.max_argv_bytes={} (the server's \
                 config: what the supervisor reads of an argv; raise them there)",
                t.max_argc, t.max_argv_bytes
            )),
            judged: p.filename.into(),
        };
    }
    let mut verdict = evaluate(policy, p);
    verdict = as_copies(policy, verdict, facts.copy_of, p.argv, p.depth);
    for i in facts.interpreters.iter().chain(facts.loader_payloads) {
        let own = evaluate(
            policy,
            &ProgramFacts {
                filename: &i.path,
                resolved: i.resolved.as_deref(),
                argv: &i.argv,
                depth: p.depth,
            },
        );
        let own = as_copies(policy, own, &i.copy_of, &i.argv, p.depth);
        verdict = verdict.stricter(own);
    }
    redirect_only_what_execs(verdict, facts)
}

/// A redirect replaces the program the exec names, with its argv; one
/// that judged something else this exec runs through (a wrapper's payload,
/// a `#!` interpreter, a loader's program) cannot stand: replacing the
/// exec would run the target with another program's argv. Refused then.
fn redirect_only_what_execs(verdict: Verdict, facts: &ExecFacts<'_>) -> Verdict {
    let p = &facts.program;
    let own = std::iter::once(p.filename)
        .chain(p.resolved)
        .chain(facts.copy_of.iter().map(String::as_str))
        .any(|n| n == verdict.judged);
    if verdict.decision != Decision::Redirect || own {
        return verdict;
    }
    let by = p.filename.rsplit('/').next().unwrap_or(p.filename);
    Verdict {
        decision: Decision::Deny,
        message: Some(format!(
            "rule {} redirects {}, which this exec would run through {by}: run it directly to \
             have it redirected",
            verdict.rule, verdict.judged
        )),
        ..verdict
    }
}

/// `verdict`, or the stricter verdict of a program the file is a copy of
/// (judged by that program's path, with the same argv and depth).
fn as_copies(
    policy: &Policy,
    verdict: Verdict,
    copy_of: &[String],
    argv: &[String],
    depth: u32,
) -> Verdict {
    copy_of.iter().fold(verdict, |v, original| {
        let mut c = evaluate(
            policy,
            &ProgramFacts {
                filename: original,
                resolved: None,
                argv,
                depth,
            },
        );
        if c.decision.strictness() > v.decision.strictness() {
            c.message = Some(match c.message.take() {
                Some(m) => format!("{m} (the file is a copy of {original})"),
                None => format!("the file is a copy of {original}"),
            });
        }
        v.stricter(c)
    })
}

/// Judge one program name (and its resolved target).
pub fn evaluate(policy: &Policy, facts: &ProgramFacts<'_>) -> Verdict {
    let exec = |name| judge_name(policy, ProgramName::exec(name), facts.argv, facts.depth, 0);
    let verdict = exec(facts.filename);
    match facts.resolved {
        Some(resolved) if resolved != facts.filename => verdict.stricter(exec(resolved)),
        _ => verdict,
    }
}

fn judge_name(
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
            // An allow-list's refusal says what is missing and how to add it.
            message: (policy.default == Decision::Deny).then(|| {
                format!(
                    "no rule of policy {} allows {name} at depth {depth} (default: deny); to \
                     allow it, add {name} to an allow rule's commands",
                    policy.name()
                )
            }),
            judged: name.into(),
        },
    };
    let own_names = &policy.multi_call;
    let Some(wrapper) = Wrapper::of(&program).or_else(|| {
        own_names
            .iter()
            .any(|m| program.basenames().any(|b| b == m))
            .then_some(Wrapper::MultiCall)
    }) else {
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
    let unwrapped = match wrapper {
        Wrapper::MultiCall => wrappers::multi_call_with(argv, own_names),
        _ => wrappers::unwrap(wrapper, argv),
    };
    match unwrapped {
        Ok(Unwrapped::NoPayload) => own,
        Ok(Unwrapped::Payload { program, argv }) => {
            let payload = ProgramName::payload(&program);
            own.stricter(judge_name(policy, payload, &argv, depth, nesting + 1))
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
