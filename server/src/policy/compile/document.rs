//! The whole document, section by section, into a [`Policy`], and the
//! top-level values no other room owns: `name`, `default`,
//! `unparsable_wrapper`, `internal_bypass`, `syscalls.block`,
//! `daemon_sockets`, `multi_call`, `exec_memory`, `env`,
//! `credential_files`.
//!
//! Failure modes: the first refusal of any section is the error, with its
//! place in the text; a top-level value this room checks is refused with
//! what to write instead.

use super::commands::compile_command_rules;
use super::context::Ctx;
use super::egress::check_network_policy;
use super::examples::check_examples;
use super::files::{check_exec_sources, check_file_rules};
use super::network::check_network_rules;
use crate::policy::credential_files;
use crate::policy::daemon_sockets::{self, DaemonSocketsDoc};
use crate::policy::env::EnvDoc;
use crate::policy::error::{PolicyError, PolicyNameError};
use crate::policy::loaded::Policy;
use crate::policy::locate::Source;
use crate::policy::pattern::Matcher;
use crate::policy::schema::{Decision, PolicyDoc};
use agentsh_proto::env::EnvRules;

/// The loaded document as a [`Policy`], section by section; the first
/// refusal is the error, with its place in `text`.
pub(crate) fn compile(doc: PolicyDoc, text: &str, origin: &str) -> Result<Policy, PolicyError> {
    let ctx = Ctx {
        origin,
        source: Source::new(text),
    };
    let name = policy_name(&ctx, doc.name, origin)?;
    check_default(&ctx, doc.default)?;
    let unparsable_wrapper = unparsable_wrapper(&ctx, doc.unparsable_wrapper)?;
    let internal_bypass = internal_bypass(&ctx, doc.internal_bypass.unwrap_or_default())?;
    let docs = doc.command_rules.unwrap_or_default();
    let command_rules = compile_command_rules(&ctx, &docs)?;
    check_examples(&ctx, &docs, &command_rules)?;
    let file_rules = doc.file_rules.unwrap_or_default();
    check_file_rules(&ctx, &file_rules)?;
    let network_rules = doc.network_rules.unwrap_or_default();
    check_network_rules(&ctx, &network_rules)?;
    let blocked_syscalls = doc.syscalls.map(|s| s.block).unwrap_or_default();
    check_blocked_syscalls(&ctx, &blocked_syscalls)?;
    let daemon_sockets = doc.daemon_sockets.unwrap_or_default();
    check_daemon_sockets(&ctx, &daemon_sockets)?;
    let exec_sources = doc.exec_sources.unwrap_or_default();
    check_exec_sources(&ctx, &exec_sources, &file_rules)?;
    let multi_call = doc.multi_call.unwrap_or_default();
    check_multi_call(&ctx, &multi_call)?;
    let exec_memory_denied = exec_memory_denied(&ctx, doc.exec_memory)?;
    let (socket_families, egress) =
        check_network_policy(&ctx, doc.socket_families, doc.egress, &network_rules)?;
    let env = doc.env.map(|d| env(&ctx, d)).transpose()?;
    let credential_files = doc.credential_files.unwrap_or_default();
    check_covers(
        &ctx,
        "credential_files",
        "hide",
        &credential_files.hide,
        false,
    )?;
    let read_only_files = doc.read_only_files.unwrap_or_default();
    check_covers(
        &ctx,
        "read_only_files",
        "paths",
        &read_only_files.paths,
        true,
    )?;
    if let Some(l) = &doc.limits {
        crate::vocab::Limits::from_doc(l)
            .map_err(|e| ctx.invalid(ctx.source.key("limits"), None, e.to_string()))?;
    }
    Ok(Policy {
        name,
        hash: text_hash(text),
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
        credential_files,
        read_only_files,
        limits: doc.limits,
        reads_unjudged: doc.tracer_reads == Some(super::super::schema::TracerReads::Unjudged),
    })
}

/// The SHA-256 (hex) of a policy's text: which version of it a tree, a
/// reload or an event names.
fn text_hash(text: &str) -> String {
    use sha2::{Digest, Sha256};
    crate::hex::hex(&Sha256::digest(text.as_bytes()))
}

/// `name:` checked, or the origin's file stem when absent.
fn policy_name(ctx: &Ctx<'_>, name: Option<String>, origin: &str) -> Result<String, PolicyError> {
    match name {
        Some(name) => {
            check_policy_name(&name)
                .map_err(|e| ctx.invalid(ctx.source.key("name"), None, e.to_string()))?;
            Ok(name)
        }
        None => Ok(stem_of_origin(origin)),
    }
}

/// `default:` (redirect is refused: it needs a rule's target).
fn check_default(ctx: &Ctx<'_>, default: Decision) -> Result<(), PolicyError> {
    if default == Decision::Redirect {
        return Err(ctx.invalid(
            ctx.source.key("default"),
            None,
            "default: redirect needs a rule's redirect_to; write a command rule with decision: \
             redirect"
                .into(),
        ));
    }
    Ok(())
}

/// `multi_call:`: file names, no paths or globs.
fn check_multi_call(ctx: &Ctx<'_>, names: &[String]) -> Result<(), PolicyError> {
    for name in names {
        if name.is_empty() || name.contains('/') || name.contains(['*', '?', '[', ']']) {
            return Err(ctx.invalid(
                ctx.source.section_value("multi_call", None, name),
                None,
                format!("multi_call: {name:?} is not a file name (no `/`, no glob: `mybox`)"),
            ));
        }
    }
    Ok(())
}

/// `exec_memory:` (allow when absent; only allow or deny).
fn exec_memory_denied(ctx: &Ctx<'_>, value: Option<Decision>) -> Result<bool, PolicyError> {
    match value {
        None | Some(Decision::Allow) => Ok(false),
        Some(Decision::Deny) => Ok(true),
        Some(d @ (Decision::Approve | Decision::Audit | Decision::Redirect)) => Err(ctx.invalid(
            ctx.source.key("exec_memory"),
            None,
            format!(
                "exec_memory: {d} is not possible (the seccomp filter refuses it in the \
                 kernel, which can neither ask nor log); use allow or deny"
            ),
        )),
    }
}

/// `env:` compiled (`policy::env`), its error at the key's value.
fn env(ctx: &Ctx<'_>, doc: EnvDoc) -> Result<EnvRules, PolicyError> {
    crate::policy::env::compile(doc).map_err(|e| {
        let location = ctx.source.section_value("env", Some(e.field), &e.value);
        ctx.invalid(location, None, format!("env.{}", e.message))
    })
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
            if let Err(message) = daemon_sockets::validate(p) {
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

/// The entries of a cover section (`credential_files.hide`: stores in
/// every home or absolute; `read_only_files.paths`: `${WORKSPACE}/X` too).
fn check_covers(
    ctx: &Ctx<'_>,
    section: &str,
    key: &str,
    entries: &[String],
    workspace: bool,
) -> Result<(), PolicyError> {
    for p in entries {
        if let Some(message) = credential_files::entry_error(p, workspace) {
            return Err(ctx.invalid(
                ctx.source.section_value(section, Some(key), p),
                None,
                format!("{section}.{key}: {p:?} {message}"),
            ));
        }
    }
    Ok(())
}

/// `name:` when absent: the file stem of the origin (`embedded:` dropped).
pub(super) fn stem_of_origin(origin: &str) -> String {
    let path = origin.strip_prefix("embedded:").unwrap_or(origin);
    std::path::Path::new(path)
        .file_stem()
        .and_then(|s| s.to_str())
        .filter(|s| !s.is_empty())
        .unwrap_or(path)
        .to_string()
}

/// A policy name doubles as a file name under the policies directory.
pub(crate) fn check_policy_name(name: &str) -> Result<(), PolicyNameError> {
    if name.is_empty() {
        return Err(PolicyNameError::Empty);
    }
    if name.starts_with('.') || name.starts_with('-') {
        return Err(PolicyNameError::BadStart(name.to_string()));
    }
    if !name
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
    {
        return Err(PolicyNameError::BadCharacter(name.to_string()));
    }
    Ok(())
}

pub(super) fn is_syscall_name(s: &str) -> bool {
    let mut chars = s.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_lowercase() || c == '_')
        && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
}
