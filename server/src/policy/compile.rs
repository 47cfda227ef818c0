//! From the parsed document to a `Policy`: validate every value and compile
//! the matchers (globs, regexes) once, so evaluation is only matching.
//!
//! Every check that can fail names the rule and, via `locate`, points at the
//! line of the offending value. The first error found is reported.

use super::daemon_sockets::DaemonSocketsDoc;
use super::error::{Location, PolicyError};
use super::locate::Source;
use super::pattern::{CommandPattern, Matcher};
use super::schema::{
    CommandRuleDoc, ContextDoc, Decision, DepthKind, FileRule, NetworkDirection, NetworkRule,
    PolicyDoc, PortSet,
};
use super::Policy;
use regex::{Regex, RegexBuilder};
use std::collections::HashMap;

/// Rule names the engine itself puts in a verdict.
pub(crate) const RULE_DEFAULT: &str = "default";
pub(crate) const RULE_INTERNAL_BYPASS: &str = "internal_bypass";
pub(crate) const RULE_UNPARSABLE_WRAPPER: &str = "unparsable_wrapper";
const RESERVED_RULE_NAMES: &[&str] = &[RULE_DEFAULT, RULE_INTERNAL_BYPASS, RULE_UNPARSABLE_WRAPPER];

/// The variables a file rule path may start with; the server expands them
/// per session.
pub const FILE_PATH_VARIABLES: &[&str] = &["WORKSPACE", "SESSION_ROOT", "HOME", "TMPDIR"];

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

struct Ctx<'a> {
    origin: &'a str,
    source: Source<'a>,
}

impl Ctx<'_> {
    /// The error for `field` (= `value`) of rule `name`, the `occurrence`-th
    /// rule of that name in `section`, at list index `index`.
    #[allow(clippy::too_many_arguments)]
    fn rule_invalid(
        &self,
        section: &str,
        index: usize,
        name: &str,
        occurrence: usize,
        field: &str,
        value: Option<&str>,
        what: String,
    ) -> PolicyError {
        self.invalid(
            self.source
                .rule_value(section, name, occurrence, field, value),
            Some(name),
            format!("{section}[{index}] {name:?}: {what}"),
        )
    }

    fn invalid(
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
}

/// Names of rules in one section, to find duplicates and the n-th definition.
#[derive(Default)]
struct Seen<'a> {
    counts: HashMap<&'a str, usize>,
}

impl<'a> Seen<'a> {
    /// How many earlier rules had this name (0 for the first).
    fn add(&mut self, name: &'a str) -> usize {
        let n = self.counts.entry(name).or_insert(0);
        *n += 1;
        *n - 1
    }
}

/// The loaded document as a [`Policy`], section by section; the first
/// refusal is the error, with its place in `text`.
pub(crate) fn compile(doc: PolicyDoc, text: &str, origin: &str) -> Result<Policy, PolicyError> {
    let ctx = Ctx {
        origin,
        source: Source::new(text),
    };
    let name = match doc.name {
        Some(name) => {
            check_policy_name(&name).map_err(|m| ctx.invalid(ctx.source.key("name"), None, m))?;
            name
        }
        None => stem_of_origin(origin),
    };
    if doc.default == Decision::Redirect {
        return Err(ctx.invalid(
            ctx.source.key("default"),
            None,
            "default: redirect needs a rule's redirect_to; write a command rule with decision: \
             redirect"
                .into(),
        ));
    }
    let unparsable_wrapper = unparsable_wrapper(&ctx, doc.unparsable_wrapper)?;
    let internal_bypass = internal_bypass(&ctx, doc.internal_bypass.unwrap_or_default())?;
    let docs = doc.command_rules.unwrap_or_default();
    let mut seen = Seen::default();
    let mut command_rules = Vec::with_capacity(docs.len());
    for (index, rule) in docs.iter().enumerate() {
        let occurrence = seen.add(&rule.name);
        command_rules.push(compile_command_rule(&ctx, index, rule, occurrence)?);
    }
    check_examples(&ctx, &docs, &command_rules)?;
    let file_rules = doc.file_rules.unwrap_or_default();
    let network_rules = doc.network_rules.unwrap_or_default();
    check_file_and_network_rules(&ctx, &file_rules, &network_rules)?;
    let blocked_syscalls = doc.syscalls.map(|s| s.block).unwrap_or_default();
    check_blocked_syscalls(&ctx, &blocked_syscalls)?;
    let daemon_sockets = doc.daemon_sockets.unwrap_or_default();
    check_daemon_sockets(&ctx, &daemon_sockets)?;
    let exec_sources = doc.exec_sources.unwrap_or_default();
    check_exec_sources(&ctx, &exec_sources, &file_rules)?;
    let multi_call = doc.multi_call.unwrap_or_default();
    for name in &multi_call {
        if name.is_empty() || name.contains('/') || name.contains(['*', '?', '[', ']']) {
            return Err(ctx.invalid(
                ctx.source.section_value("multi_call", None, name),
                None,
                format!("multi_call: {name:?} is not a file name (no `/`, no glob: `mybox`)"),
            ));
        }
    }
    let exec_memory_denied = match doc.exec_memory {
        None | Some(Decision::Allow) => false,
        Some(Decision::Deny) => true,
        Some(d @ (Decision::Approve | Decision::Audit | Decision::Redirect)) => {
            return Err(ctx.invalid(
                ctx.source.key("exec_memory"),
                None,
                format!(
                    "exec_memory: {d} is not possible (the seccomp filter refuses it in the \
                     kernel, which can neither ask nor log); use allow or deny"
                ),
            ))
        }
    };
    let (socket_families, egress) =
        check_network_policy(&ctx, doc.socket_families, doc.egress, &network_rules)?;
    let env = match doc.env {
        None => None,
        Some(d) => Some(super::env::compile(d).map_err(|e| {
            let location = ctx.source.section_value("env", Some(e.field), &e.value);
            ctx.invalid(location, None, format!("env.{}", e.message))
        })?),
    };
    Ok(Policy {
        name,
        description: doc.description,
        origin: origin.to_string(),
        default: doc.default,
        unparsable_wrapper,
        internal_bypass,
        command_rules,
        file_rules,
        network_rules,
        blocked_syscalls,
        daemon_sockets,
        exec_sources,
        exec_memory_denied,
        multi_call,
        socket_families,
        egress,
        env,
    })
}

/// `socket_families:` and `egress:`: names to numbers, rules compiled; with
/// `egress` and no list, the families are unix, inet and inet6. `egress`
/// beside a `network_rules` entry that allows every TCP port is refused:
/// the two would say different things about the same connect.
fn check_network_policy(
    ctx: &Ctx<'_>,
    families: Option<Vec<String>>,
    egress: Option<super::egress::EgressDoc>,
    network_rules: &[NetworkRule],
) -> Result<
    (
        Option<std::collections::BTreeSet<u32>>,
        Option<super::egress::Egress>,
    ),
    PolicyError,
> {
    let egress = match egress {
        None => None,
        Some(doc) => Some(super::egress::compile(doc).map_err(|e| {
            let location = match &e.rule {
                Some((_, name)) => {
                    ctx.source
                        .rule_value("egress", name, 0, e.field, e.value.as_deref())
                }
                None => ctx.source.section_value(
                    "egress",
                    Some(e.field),
                    e.value.as_deref().unwrap_or(""),
                ),
            };
            let what = match &e.rule {
                Some((i, name)) => format!("egress.rules[{i}] {name:?}: {}", e.message),
                None => format!("egress.{}", e.message),
            };
            ctx.invalid(location, e.rule.as_ref().map(|(_, n)| n.as_str()), what)
        })?),
    };
    let families = match (families, &egress) {
        (Some(names), _) => {
            let mut set = std::collections::BTreeSet::new();
            for n in &names {
                let v = super::egress::family(n).map_err(|m| {
                    ctx.invalid(
                        ctx.source.section_value("socket_families", None, n),
                        None,
                        m,
                    )
                })?;
                set.insert(v);
            }
            Some(set)
        }
        // Nothing to keep a tree from: no family list either.
        (None, Some(e)) if e.allows_everything() => None,
        (None, Some(_)) => Some(
            super::egress::DEFAULT_FAMILIES
                .iter()
                .filter_map(|n| super::egress::family(n).ok())
                .collect(),
        ),
        (None, None) => None,
    };
    if egress.is_some() {
        if let Some(open) = network_rules.iter().find(|r| {
            r.direction == NetworkDirection::Connect
                && r.decision == Decision::Allow
                && r.ports == super::schema::PortSet::Any
        }) {
            return Err(ctx.invalid(
                ctx.source.rule("network_rules", &open.name, 0),
                Some(&open.name),
                format!(
                    "network_rules {:?} allows connects to every TCP port while egress: judges each destination; remove that rule (egress decides connects) or list its ports",
                    open.name
                ),
            ));
        }
    }
    Ok((families, egress))
}

/// `exec_sources:`: `writable` is allow or deny; with deny, the places the
/// tree can write must be listed (write and create allow-listed by file
/// rules: a deny-list would make every path writable, and so nothing
/// runnable); `except` paths are file-rule paths.
fn check_exec_sources(
    ctx: &Ctx<'_>,
    e: &super::schema::ExecSources,
    file_rules: &[FileRule],
) -> Result<(), PolicyError> {
    use super::semantics::{file_op_kind, FileOpKind};
    let at = |key: &str, value: &str| ctx.source.section_value("exec_sources", Some(key), value);
    match e.writable {
        None | Some(Decision::Allow | Decision::Deny) => {}
        Some(d @ (Decision::Approve | Decision::Audit | Decision::Redirect)) => {
            return Err(ctx.invalid(
                at("writable", d.as_str()),
                None,
                format!(
                    "exec_sources.writable: {d} is not possible (the kernel enforces it and can \
                     neither ask nor log); use allow or deny"
                ),
            ))
        }
    }
    if e.writable_denied() {
        for op in [
            super::schema::FileOperation::Write,
            super::schema::FileOperation::Create,
        ] {
            if file_op_kind(file_rules, op) != FileOpKind::AllowList {
                return Err(ctx.invalid(
                    at("writable", "deny"),
                    None,
                    format!(
                        "exec_sources.writable: deny needs the places the tree can write listed: \
                         no file rule allows `{}` on named paths, so every path is writable and \
                         nothing could run",
                        super::semantics::op_name(op)
                    ),
                ));
            }
        }
    }
    for p in &e.except {
        check_file_path(p).map_err(|why| {
            ctx.invalid(at("except", p), None, format!("exec_sources.except: {why}"))
        })?;
    }
    Ok(())
}

/// `unparsable_wrapper:` (deny when absent; allow is refused).
fn unparsable_wrapper(ctx: &Ctx<'_>, value: Option<Decision>) -> Result<Decision, PolicyError> {
    match value {
        None => Ok(Decision::Deny),
        Some(Decision::Allow) => Err(ctx.invalid(
            ctx.source.key("unparsable_wrapper"),
            None,
            "unparsable_wrapper: allow would run payloads nobody judged; use audit \
             to let them run and flag them"
                .into(),
        )),
        Some(d @ (Decision::Deny | Decision::Approve | Decision::Audit)) => Ok(d),
        Some(Decision::Redirect) => Err(ctx.invalid(
            ctx.source.key("unparsable_wrapper"),
            None,
            "unparsable_wrapper: redirect needs a rule's redirect_to; use deny, approve or audit"
                .into(),
        )),
    }
}

/// `internal_bypass:`: absolute paths or path globs.
fn internal_bypass(ctx: &Ctx<'_>, patterns: Vec<String>) -> Result<Vec<Matcher>, PolicyError> {
    let mut out = Vec::with_capacity(patterns.len());
    for pattern in patterns {
        let at = || ctx.source.section_value("internal_bypass", None, &pattern);
        if !pattern.starts_with('/') {
            return Err(ctx.invalid(
                at(),
                None,
                format!("internal_bypass: {pattern:?} is not an absolute path or path glob"),
            ));
        }
        let m = Matcher::new(&pattern).map_err(|e| {
            ctx.invalid(
                at(),
                None,
                format!("internal_bypass: invalid glob {pattern:?}: {e}"),
            )
        })?;
        out.push(m);
    }
    Ok(out)
}

/// Each file and network rule on its own, then what they mean together
/// (an operation's rules, a direction's ports).
fn check_file_and_network_rules(
    ctx: &Ctx<'_>,
    file_rules: &[FileRule],
    network_rules: &[NetworkRule],
) -> Result<(), PolicyError> {
    let mut seen = Seen::default();
    for (index, rule) in file_rules.iter().enumerate() {
        let occurrence = seen.add(&rule.name);
        check_file_rule(ctx, index, rule, occurrence)?;
    }
    // Rule names are unique by now: each refusal points at occurrence 0.
    let refused = |section: &str, rule: &str, r: super::semantics::Refusal| {
        ctx.rule_invalid(
            section,
            r.index,
            rule,
            0,
            r.field,
            r.value.as_deref(),
            r.message,
        )
    };
    super::semantics::check_file_rules(file_rules)
        .map_err(|r| refused("file_rules", &file_rules[r.index].name, r))?;
    let mut seen = Seen::default();
    for (index, rule) in network_rules.iter().enumerate() {
        let occurrence = seen.add(&rule.name);
        check_network_rule(ctx, index, rule, occurrence)?;
    }
    for direction in [NetworkDirection::Connect, NetworkDirection::Bind] {
        super::semantics::tcp_ports(network_rules, direction)
            .map_err(|r| refused("network_rules", &network_rules[r.index].name, r))?;
    }
    Ok(())
}

/// `syscalls: { block: [...] }`: syscall names.
fn check_blocked_syscalls(ctx: &Ctx<'_>, blocked: &[String]) -> Result<(), PolicyError> {
    for syscall in blocked {
        if !is_syscall_name(syscall) {
            return Err(ctx.invalid(
                ctx.source.section_value("syscalls", Some("block"), syscall),
                None,
                format!(
                    "syscalls.block: {syscall:?} is not a syscall name (lowercase letters, \
                     digits and '_', like `keyctl`)"
                ),
            ));
        }
    }
    Ok(())
}

/// `daemon_sockets: { allow, deny }`: absolute paths or component globs.
fn check_daemon_sockets(ctx: &Ctx<'_>, d: &DaemonSocketsDoc) -> Result<(), PolicyError> {
    for (key, paths) in [("allow", &d.allow), ("deny", &d.deny)] {
        for p in paths {
            if let Err(message) = super::daemon_sockets::validate(p) {
                return Err(ctx.invalid(
                    ctx.source.section_value("daemon_sockets", Some(key), p),
                    None,
                    format!("daemon_sockets.{key}: {message}"),
                ));
            }
        }
    }
    Ok(())
}

/// `name:` when absent: the file stem of the origin (`embedded:` dropped).
fn stem_of_origin(origin: &str) -> String {
    let path = origin.strip_prefix("embedded:").unwrap_or(origin);
    std::path::Path::new(path)
        .file_stem()
        .and_then(|s| s.to_str())
        .filter(|s| !s.is_empty())
        .unwrap_or(path)
        .to_string()
}

/// A policy name doubles as a file name under the policies directory.
pub(crate) fn check_policy_name(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("the policy name is empty".into());
    }
    if name.starts_with('.') || name.starts_with('-') {
        return Err(format!(
            "policy name {name:?} must not start with '.' or '-'"
        ));
    }
    if !name
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
    {
        return Err(format!(
            "policy name {name:?} may only use letters, digits, '-', '_' and '.'"
        ));
    }
    Ok(())
}

fn is_syscall_name(s: &str) -> bool {
    let mut chars = s.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_lowercase() || c == '_')
        && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
}

/// The name check shared by all rule sections.
fn check_rule_name(
    ctx: &Ctx<'_>,
    section: &str,
    index: usize,
    name: &str,
    occurrence: usize,
) -> Result<(), PolicyError> {
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
            format!("{section}[{index}]: duplicate rule name {name:?}: rule names must be unique"),
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
    Ok(())
}

fn compile_command_rule(
    ctx: &Ctx<'_>,
    index: usize,
    rule: &CommandRuleDoc,
    occurrence: usize,
) -> Result<CommandRule, PolicyError> {
    const SECTION: &str = "command_rules";
    let name = rule.name.as_str();
    check_rule_name(ctx, SECTION, index, name, occurrence)?;
    let fail = |field: &str, value: Option<&str>, what: String| {
        ctx.rule_invalid(SECTION, index, name, occurrence, field, value, what)
    };
    if rule.commands.is_empty() {
        return Err(fail(
            "commands",
            None,
            "commands: is empty; name at least one program".into(),
        ));
    }
    let mut commands = Vec::with_capacity(rule.commands.len());
    for entry in &rule.commands {
        let pattern = CommandPattern::new(entry)
            .map_err(|why| fail("commands", Some(entry), format!("commands: {why}")))?;
        commands.push(pattern);
    }
    let args_patterns = match &rule.args_patterns {
        None => Vec::new(),
        Some(patterns) => {
            args_patterns(patterns).map_err(|(p, why)| fail("args_patterns", p, why))?
        }
    };
    let depth = depth_of(rule.context.as_ref()).map_err(|why| fail("context", None, why))?;
    if rule.message.as_deref().is_some_and(|m| m.trim().is_empty()) {
        return Err(fail(
            "message",
            None,
            "message: is empty; remove it or say why".into(),
        ));
    }
    let redirect_to = match (rule.decision, &rule.redirect_to) {
        (Decision::Redirect, Some(r)) => Some(
            redirect_target(&r.program)
                .map_err(|why| fail("redirect_to", Some(&r.program), why))?,
        ),
        (Decision::Redirect, None) => {
            return Err(fail(
                "decision",
                Some("redirect"),
                "decision: redirect needs redirect_to: {program: /ABSOLUTE/PATH}".into(),
            ))
        }
        (_, Some(r)) => {
            return Err(fail(
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

/// `redirect_to.program` checked: an absolute, clean path to a regular,
/// executable file owned by root, in directories only root can write (no
/// tree can change what runs), and not a wrapper (a redirect runs one
/// program with the caller's argv, nothing it names). Reads the file's
/// metadata: a policy naming a target that is not there does not load.
fn redirect_target(program: &str) -> Result<String, String> {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let clean = program.starts_with('/')
        && !program.ends_with('/')
        && !program
            .split('/')
            .skip(1)
            .any(|c| c.is_empty() || c == "." || c == "..");
    if !clean {
        return Err(format!(
            "redirect_to.program {program:?} is not a clean absolute path"
        ));
    }
    let name = super::pattern::ProgramName::exec(program);
    if super::wrappers::Wrapper::of(&name).is_some() {
        return Err(format!(
            "redirect_to.program {program:?} is a wrapper (it runs what its arguments name): \
             redirect to the program itself"
        ));
    }
    let m = std::fs::symlink_metadata(program)
        .map_err(|e| format!("redirect_to.program {program:?}: {e}"))?;
    if !m.file_type().is_file() {
        return Err(format!(
            "redirect_to.program {program:?} is not a regular file (a symlink is not accepted: \
             name its target)"
        ));
    }
    if m.uid() != 0 || m.permissions().mode() & 0o022 != 0 {
        return Err(format!(
            "redirect_to.program {program:?} must be owned by root and writable by nobody else \
             (owner {}, mode {:o})",
            m.uid(),
            m.permissions().mode() & 0o7777
        ));
    }
    if m.permissions().mode() & 0o111 == 0 {
        return Err(format!("redirect_to.program {program:?} is not executable"));
    }
    let mut head = [0u8; 2];
    let script = std::fs::File::open(program)
        .and_then(|f| std::os::unix::fs::FileExt::read_at(&f, &mut head, 0))
        .is_ok_and(|n| n == 2 && &head == b"#!");
    if script {
        return Err(format!(
            "redirect_to.program {program:?} is a #! script: its interpreter would run and \
             could not be checked; redirect to a binary"
        ));
    }
    let mut dir = std::path::Path::new(program).parent();
    while let Some(d) = dir {
        let dm = std::fs::metadata(d).map_err(|e| format!("{}: {e}", d.display()))?;
        if dm.uid() != 0 || dm.permissions().mode() & 0o022 != 0 {
            return Err(format!(
                "redirect_to.program {program:?} is in {}, which someone other than root can \
                 write (owner {}, mode {:o}): a tree could replace the program",
                d.display(),
                dm.uid(),
                dm.permissions().mode() & 0o7777
            ));
        }
        dir = d.parent();
    }
    Ok(program.to_string())
}

/// The first of `rules` that decides `program` with `argv` at `depth`.
pub(crate) fn first_match<'p>(
    rules: &'p [CommandRule],
    program: &super::pattern::ProgramName<'_>,
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

/// The first of `among` that decides example `line` at `depth` (argv split
/// on whitespace; a first word without `/` is a name, matched as a
/// wrapper's payload is); `None` for an empty line.
fn example_decider<'r>(
    among: &'r [CommandRule],
    line: &str,
    depth: u32,
) -> Option<Option<&'r CommandRule>> {
    use super::pattern::ProgramName;
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
fn check_examples(
    ctx: &Ctx<'_>,
    docs: &[CommandRuleDoc],
    rules: &[CommandRule],
) -> Result<(), PolicyError> {
    const SECTION: &str = "command_rules";
    let mut seen = Seen::default();
    for (index, (doc, rule)) in docs.iter().zip(rules).enumerate() {
        let occurrence = seen.add(&doc.name);
        let Some(ex) = &doc.examples else { continue };
        let fail = |value: &str, what: String| {
            ctx.rule_invalid(
                SECTION,
                index,
                &doc.name,
                occurrence,
                "examples",
                Some(value),
                what,
            )
        };
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

/// `args_patterns:` compiled; the error names the pattern (if one) and why.
fn args_patterns(patterns: &[String]) -> Result<Vec<Regex>, (Option<&str>, String)> {
    if patterns.is_empty() {
        return Err((
            None,
            "args_patterns: is empty and would match nothing; remove it to match any \
             arguments"
                .into(),
        ));
    }
    let mut out = Vec::with_capacity(patterns.len());
    for p in patterns {
        let re = RegexBuilder::new(p)
            .size_limit(REGEX_SIZE_LIMIT)
            .build()
            .map_err(|e| {
                (
                    Some(p.as_str()),
                    format!(
                        "args_patterns: invalid regex {p:?}: {}",
                        one_line(&e.to_string())
                    ),
                )
            })?;
        out.push(re);
    }
    Ok(out)
}

/// `context:` as a depth range.
fn depth_of(context: Option<&ContextDoc>) -> Result<DepthRange, String> {
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
                (false, false) => Err("context: is empty and would match nothing; use \
                                       [direct], [nested] or remove it"
                    .into()),
            }
        }
        Some(ContextDoc::Range(range)) => {
            let min = range.min_depth.unwrap_or(0);
            let max = range.max_depth.unwrap_or(u32::MAX);
            if min > max {
                return Err(format!(
                    "context: min_depth {min} is greater than max_depth {max}"
                ));
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

fn check_file_rule(
    ctx: &Ctx<'_>,
    index: usize,
    rule: &FileRule,
    occurrence: usize,
) -> Result<(), PolicyError> {
    const SECTION: &str = "file_rules";
    let name = rule.name.as_str();
    check_rule_name(ctx, SECTION, index, name, occurrence)?;
    let fail = |field: &str, value: Option<&str>, what: String| {
        ctx.rule_invalid(SECTION, index, name, occurrence, field, value, what)
    };
    if rule.paths.is_empty() {
        return Err(fail(
            "paths",
            None,
            "paths: is empty; name at least one path".into(),
        ));
    }
    for path in &rule.paths {
        check_file_path(path).map_err(|why| fail("paths", Some(path), format!("paths: {why}")))?;
    }
    if rule.operations.is_empty() {
        return Err(fail(
            "operations",
            None,
            "operations: is empty; list some of read, write, create, delete, execute".into(),
        ));
    }
    match rule.decision {
        Decision::Allow | Decision::Deny => Ok(()),
        d @ (Decision::Approve | Decision::Audit | Decision::Redirect) => Err(fail(
            "decision",
            Some(d.as_str()),
            format!(
                "decision: {d} is not possible for file access (the kernel enforces file \
                 rules and can neither ask nor log); use allow or deny"
            ),
        )),
    }
}

/// Absolute, or `${VAR}` / `${VAR}/...` with a known VAR; a valid glob.
fn check_file_path(path: &str) -> Result<(), String> {
    let rest = if let Some(after) = path.strip_prefix("${") {
        let Some((var, rest)) = after.split_once('}') else {
            return Err(format!("{path:?}: unterminated ${{"));
        };
        if !FILE_PATH_VARIABLES.contains(&var) {
            return Err(format!(
                "{path:?}: unknown variable ${{{var}}} (known: {})",
                FILE_PATH_VARIABLES
                    .iter()
                    .map(|v| format!("${{{v}}}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
        if !(rest.is_empty() || rest.starts_with('/')) {
            return Err(format!("{path:?}: a '/' must follow ${{{var}}}"));
        }
        rest
    } else if path.starts_with('/') {
        path
    } else {
        return Err(format!(
            "{path:?} is not absolute (start it with '/' or with ${{WORKSPACE}}, ${{HOME}}, ${{TMPDIR}})"
        ));
    };
    if rest.contains("${") {
        return Err(format!("{path:?}: a variable may only start the path"));
    }
    glob::Pattern::new(rest).map_err(|e| format!("invalid glob {path:?}: {e}"))?;
    super::landlock::landlock_base(path)?;
    Ok(())
}

fn check_network_rule(
    ctx: &Ctx<'_>,
    index: usize,
    rule: &NetworkRule,
    occurrence: usize,
) -> Result<(), PolicyError> {
    const SECTION: &str = "network_rules";
    let name = rule.name.as_str();
    check_rule_name(ctx, SECTION, index, name, occurrence)?;
    let fail = |field: &str, value: Option<&str>, what: String| {
        ctx.rule_invalid(SECTION, index, name, occurrence, field, value, what)
    };
    match &rule.ports {
        PortSet::Any => {}
        PortSet::List(ports) if ports.is_empty() => {
            return Err(fail(
                "ports",
                None,
                "ports: is empty; list ports or write `ports: any`".into(),
            ))
        }
        PortSet::List(ports) => {
            if ports.contains(&0) {
                return Err(fail(
                    "ports",
                    Some("0"),
                    "ports: port 0 is not a port (write `ports: any` for all ports)".into(),
                ));
            }
        }
    }
    match rule.decision {
        Decision::Allow | Decision::Deny => Ok(()),
        d @ (Decision::Approve | Decision::Audit | Decision::Redirect) => Err(fail(
            "decision",
            Some(d.as_str()),
            format!(
                "decision: {d} is not possible for network rules (the kernel enforces them \
                 and can neither ask nor log); use allow or deny"
            ),
        )),
    }
}

#[cfg(test)]
#[path = "compile_tests.rs"]
mod tests;
