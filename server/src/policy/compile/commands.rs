//! `command_rules`: each entry compiled to a [`CommandRule`] (its commands
//! as patterns, `args_patterns` as regexes, `context` as a depth range, a
//! redirect's target checked), and [`first_match`], the lookup `judge` and
//! the examples decide by.
//!
//! Failure modes: an empty list, a bad command entry, regex or depth range,
//! an empty message or a redirect without its target (or a target without
//! the redirect) is a [`PolicyError`] naming the rule and the value.

use super::context::{Ctx, RuleAt, Seen};
use super::redirect::redirect_target;
use crate::policy::error::PolicyError;
use crate::policy::pattern::{CommandPattern, ProgramName};
use crate::policy::schema::{CommandRuleDoc, ContextDoc, Decision, DepthKind};
use regex::{Regex, RegexBuilder};

/// Regexes come from the policy author, but keep a bad one from eating memory.
const REGEX_SIZE_LIMIT: usize = 1 << 20;

/// Inclusive depth bounds of a command rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct DepthRange {
    pub min: u32,
    pub max: u32,
}

impl DepthRange {
    pub const ANY: DepthRange = DepthRange {
        min: 0,
        max: u32::MAX,
    };

    pub fn contains(&self, depth: u32) -> bool {
        self.min <= depth && depth <= self.max
    }

    pub fn describe(&self) -> String {
        match (self.min, self.max) {
            (0, u32::MAX) => "any depth".into(),
            (0, 0) => "direct".into(),
            (1, u32::MAX) => "nested".into(),
            (min, u32::MAX) => format!("depth >= {min}"),
            (min, max) if min == max => format!("depth {min}"),
            (min, max) => format!("depth {min}..={max}"),
        }
    }
}

/// A compiled `command_rules` entry.
#[derive(Debug, Clone)]
pub(crate) struct CommandRule {
    pub name: String,
    pub commands_text: Vec<String>,
    pub commands: Vec<CommandPattern>,
    /// Empty: any arguments.
    pub args_patterns: Vec<Regex>,
    pub depth: DepthRange,
    pub decision: Decision,
    pub message: Option<String>,
    /// `decision: redirect`: the program run instead.
    pub redirect_to: Option<String>,
}

/// Every `command_rules` entry compiled, in order.
pub(super) fn compile_command_rules(
    ctx: &Ctx<'_>,
    docs: &[CommandRuleDoc],
) -> Result<Vec<CommandRule>, PolicyError> {
    let mut seen = Seen::default();
    let mut rules = Vec::with_capacity(docs.len());
    for (index, rule) in docs.iter().enumerate() {
        let occurrence = seen.add(&rule.name);
        rules.push(compile_command_rule(ctx, index, rule, occurrence)?);
    }
    Ok(rules)
}

fn compile_command_rule(
    ctx: &Ctx<'_>,
    index: usize,
    rule: &CommandRuleDoc,
    occurrence: usize,
) -> Result<CommandRule, PolicyError> {
    let at = RuleAt::checked(ctx, "command_rules", index, &rule.name, occurrence)?;
    if rule.commands.is_empty() {
        return Err(at.fail(
            "commands",
            None,
            "commands: is empty; name at least one program".into(),
        ));
    }
    let mut commands = Vec::with_capacity(rule.commands.len());
    for entry in &rule.commands {
        let pattern = CommandPattern::new(entry)
            .map_err(|why| at.fail("commands", Some(entry), format!("commands: {why}")))?;
        commands.push(pattern);
    }
    let args_patterns = match &rule.args_patterns {
        None => Vec::new(),
        Some(patterns) => args_patterns(patterns)
            .map_err(|e| at.fail("args_patterns", e.value(), e.to_string()))?,
    };
    let depth =
        depth_of(rule.context.as_ref()).map_err(|e| at.fail("context", None, e.to_string()))?;
    if rule.message.as_deref().is_some_and(|m| m.trim().is_empty()) {
        return Err(at.fail(
            "message",
            None,
            "message: is empty; remove it or say why".into(),
        ));
    }
    let redirect_to = match (rule.decision, &rule.redirect_to) {
        (Decision::Redirect, Some(r)) => Some(
            redirect_target(&r.program)
                .map_err(|e| at.fail("redirect_to", Some(&r.program), e.to_string()))?,
        ),
        (Decision::Redirect, None) => {
            return Err(at.fail(
                "decision",
                Some("redirect"),
                "decision: redirect needs redirect_to: {program: /ABSOLUTE/PATH}".into(),
            ))
        }
        (_, Some(r)) => {
            return Err(at.fail(
                "redirect_to",
                Some(&r.program),
                "redirect_to: only with decision: redirect".into(),
            ))
        }
        (_, None) => None,
    };
    Ok(CommandRule {
        redirect_to,
        name: rule.name.clone(),
        commands_text: rule.commands.clone(),
        commands,
        args_patterns,
        depth,
        decision: rule.decision,
        message: rule.message.clone(),
    })
}

/// The first of `rules` that decides `program` with `argv` at `depth`.
pub(crate) fn first_match<'p>(
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

/// Why `args_patterns:` or `context:` cannot be compiled.
#[derive(Debug, thiserror::Error)]
pub(super) enum CommandRuleError {
    #[error("args_patterns: is empty and would match nothing; remove it to match any arguments")]
    NoArgsPatterns,
    #[error("args_patterns: invalid regex {pattern:?}: {}", one_line(&.source.to_string()))]
    InvalidRegex {
        pattern: String,
        source: regex::Error,
    },
    #[error("context: is empty and would match nothing; use [direct], [nested] or remove it")]
    EmptyContext,
    #[error("context: min_depth {min} is greater than max_depth {max}")]
    InvertedDepths { min: u32, max: u32 },
}

impl CommandRuleError {
    /// The value to point at, when one is to blame.
    fn value(&self) -> Option<&str> {
        match self {
            CommandRuleError::InvalidRegex { pattern, .. } => Some(pattern),
            CommandRuleError::NoArgsPatterns
            | CommandRuleError::EmptyContext
            | CommandRuleError::InvertedDepths { .. } => None,
        }
    }
}

/// `args_patterns:` compiled.
fn args_patterns(patterns: &[String]) -> Result<Vec<Regex>, CommandRuleError> {
    if patterns.is_empty() {
        return Err(CommandRuleError::NoArgsPatterns);
    }
    let mut out = Vec::with_capacity(patterns.len());
    for p in patterns {
        let re = RegexBuilder::new(p)
            .size_limit(REGEX_SIZE_LIMIT)
            .build()
            .map_err(|source| CommandRuleError::InvalidRegex {
                pattern: p.clone(),
                source,
            })?;
        out.push(re);
    }
    Ok(out)
}

/// `context:` as a depth range.
fn depth_of(context: Option<&ContextDoc>) -> Result<DepthRange, CommandRuleError> {
    match context {
        None => Ok(DepthRange::ANY),
        Some(ContextDoc::Kinds(kinds)) => {
            let direct = kinds.contains(&DepthKind::Direct);
            let nested = kinds.contains(&DepthKind::Nested);
            match (direct, nested) {
                (true, true) => Ok(DepthRange::ANY),
                (true, false) => Ok(DepthRange { min: 0, max: 0 }),
                (false, true) => Ok(DepthRange {
                    min: 1,
                    max: u32::MAX,
                }),
                (false, false) => Err(CommandRuleError::EmptyContext),
            }
        }
        Some(ContextDoc::Range(range)) => {
            let min = range.min_depth.unwrap_or(0);
            let max = range.max_depth.unwrap_or(u32::MAX);
            if min > max {
                return Err(CommandRuleError::InvertedDepths { min, max });
            }
            Ok(DepthRange { min, max })
        }
    }
}

/// Regex errors are multi-line drawings; keep the last line (the reason).
fn one_line(s: &str) -> String {
    let reason = s
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or(s)
        .trim();
    reason.trim_start_matches("error: ").to_string()
}
