//! `file_rules` and `exec_sources:`: each file rule on its own (a name,
//! paths Landlock can enforce, operations, allow or deny), then what the
//! rules mean together (`semantics`), then `exec_sources`, which needs the
//! places the file rules let a tree write.
//!
//! Failure modes: a path that is not absolute or starts with an unknown
//! variable, a glob Landlock cannot enforce, an empty list, a decision the
//! kernel cannot make, a combination `semantics` refuses: a [`PolicyError`]
//! naming the rule and the value.

use super::context::{Ctx, RuleAt, Seen};
use crate::policy::error::PolicyError;
use crate::policy::schema::{Decision, ExecSources, FileOperation, FileRule};
use crate::policy::semantics::{self, file_op_kind, FileOpKind, NotEnforceable};

/// The variables a file rule path may start with; the server expands them
/// per session.
pub const FILE_PATH_VARIABLES: &[&str] = &["WORKSPACE", "SESSION_ROOT", "HOME", "TMPDIR"];

/// Each file rule on its own, then what they mean together (an
/// operation's rules).
pub(super) fn check_file_rules(ctx: &Ctx<'_>, rules: &[FileRule]) -> Result<(), PolicyError> {
    let mut seen = Seen::default();
    for (index, rule) in rules.iter().enumerate() {
        let occurrence = seen.add(&rule.name);
        check_file_rule(ctx, index, rule, occurrence)?;
    }
    semantics::check_file_rules(rules)
        .map_err(|r| ctx.refused("file_rules", &rules[r.index].name, r))
}

fn check_file_rule(
    ctx: &Ctx<'_>,
    index: usize,
    rule: &FileRule,
    occurrence: usize,
) -> Result<(), PolicyError> {
    let at = RuleAt::checked(ctx, "file_rules", index, &rule.name, occurrence)?;
    if rule.paths.is_empty() {
        return Err(at.fail(
            "paths",
            None,
            "paths: is empty; name at least one path".into(),
        ));
    }
    for path in &rule.paths {
        check_file_path(path)
            .map_err(|why| at.fail("paths", Some(path), format!("paths: {why}")))?;
    }
    if rule.operations.is_empty() {
        return Err(at.fail(
            "operations",
            None,
            "operations: is empty; list some of read, write, create, delete, execute".into(),
        ));
    }
    at.allow_or_deny(rule.decision, "file access", "file rules")
}

/// Why a file rule path (or an `exec_sources.except` path) cannot be
/// enforced.
#[derive(Debug, thiserror::Error)]
pub(super) enum FilePathError {
    #[error("{0:?}: unterminated ${{")]
    Unterminated(String),
    #[error("{path:?}: unknown variable ${{{var}}} (known: {})", known_variables())]
    UnknownVariable { path: String, var: String },
    #[error("{path:?}: a '/' must follow ${{{var}}}")]
    NoSlashAfterVariable { path: String, var: String },
    #[error(
        "{0:?} is not absolute (start it with '/' or with ${{WORKSPACE}}, ${{HOME}}, ${{TMPDIR}})"
    )]
    NotAbsolute(String),
    #[error("{0:?}: a variable may only start the path")]
    VariableInside(String),
    #[error("invalid glob {path:?}: {source}")]
    InvalidGlob {
        path: String,
        source: glob::PatternError,
    },
    #[error(transparent)]
    NotEnforceable(#[from] NotEnforceable),
}

/// `${WORKSPACE}, ${SESSION_ROOT}, ...`, for the error that names them.
fn known_variables() -> String {
    FILE_PATH_VARIABLES
        .iter()
        .map(|v| format!("${{{v}}}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Absolute, or `${VAR}` / `${VAR}/...` with a known VAR; a valid glob.
pub(super) fn check_file_path(path: &str) -> Result<(), FilePathError> {
    let owned = || path.to_string();
    let rest = if let Some(after) = path.strip_prefix("${") {
        let Some((var, rest)) = after.split_once('}') else {
            return Err(FilePathError::Unterminated(owned()));
        };
        if !FILE_PATH_VARIABLES.contains(&var) {
            return Err(FilePathError::UnknownVariable {
                path: owned(),
                var: var.to_string(),
            });
        }
        if !(rest.is_empty() || rest.starts_with('/')) {
            return Err(FilePathError::NoSlashAfterVariable {
                path: owned(),
                var: var.to_string(),
            });
        }
        rest
    } else if path.starts_with('/') {
        path
    } else {
        return Err(FilePathError::NotAbsolute(owned()));
    };
    if rest.contains("${") {
        return Err(FilePathError::VariableInside(owned()));
    }
    glob::Pattern::new(rest).map_err(|source| FilePathError::InvalidGlob {
        path: owned(),
        source,
    })?;
    semantics::landlock_base(path)?;
    Ok(())
}

/// `exec_sources:`: `writable` is allow or deny; with deny, the places the
/// tree can write must be listed (write and create allow-listed by file
/// rules: a deny-list would make every path writable, and so nothing
/// runnable); `except` paths are file-rule paths.
pub(super) fn check_exec_sources(
    ctx: &Ctx<'_>,
    e: &ExecSources,
    file_rules: &[FileRule],
) -> Result<(), PolicyError> {
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
        for op in [FileOperation::Write, FileOperation::Create] {
            if file_op_kind(file_rules, op) != FileOpKind::AllowList {
                return Err(ctx.invalid(
                    at("writable", "deny"),
                    None,
                    format!(
                        "exec_sources.writable: deny needs the places the tree can write listed: \
                         no file rule allows `{}` on named paths, so every path is writable and \
                         nothing could run",
                        semantics::op_name(op)
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
