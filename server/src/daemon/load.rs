//! What start-up loads before anything runs: the config (only one no one
//! else could have changed), every session's policy, the audit log and the
//! operator token.
//!
//! Failure modes: a config not owned by root (or the server's user), or
//! writable by group or others; a config, policy or audit log that cannot
//! be read or opened; a token that cannot be written: each a
//! [`StartError`] naming the file and what to do.

use super::error::{Result, StartError};
use crate::approval;
use crate::audit::AuditLog;
use crate::config::Config;
use crate::policy::Policy;
use std::sync::Arc;

/// Checks (trusted owner and mode) and loads the config, and refuses
/// agentsh's own files in a directory anyone can write.
pub(super) fn trusted_config(config_file: Option<&std::path::Path>) -> Result<Config> {
    if let Some(path) = config_file {
        trust_config(path)?;
    }
    let config = Config::load(config_file)?;
    config.check_own_locations(config_file)?;
    match config_file {
        Some(f) => tracing::info!(config = %f.display(), "config read"),
        None => tracing::info!(
            "config: the embedded defaults (no --config, and nothing at {})",
            crate::config::DEFAULT_CONFIG_FILE
        ),
    }
    Ok(config)
}

/// The config decides what is enforced, so the server runs only one no one
/// else could have changed, as the shim trusts only such a shim.conf:
/// owned by root (or by the server's own user) and writable by no group or
/// other.
///
/// # Errors
/// What is wrong with the file, and the command that fixes it.
fn trust_config(path: &std::path::Path) -> Result<()> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(path).map_err(|source| StartError::ConfigUnreadable {
        path: path.to_path_buf(),
        source,
    })?;
    // SAFETY: geteuid has no preconditions.
    let euid = unsafe { libc::geteuid() };
    if m.uid() != 0 && m.uid() != euid {
        return Err(StartError::ConfigOwner {
            path: path.to_path_buf(),
            uid: m.uid(),
        });
    }
    if m.mode() & 0o022 != 0 {
        return Err(StartError::ConfigMode {
            path: path.to_path_buf(),
            mode: m.mode() & 0o7777,
        });
    }
    Ok(())
}

/// Every session's policy, the default's first, loaded before anything
/// starts (the indexes and the rest are compiled later, once the backend
/// is known).
pub(super) fn policies(config: &Config) -> Result<Vec<Arc<Policy>>> {
    let mut policies = vec![
        Policy::resolve(&config.policy, &config.policies_dir).map_err(|source| {
            StartError::Policy {
                name: config.policy.clone(),
                source: Box::new(source),
            }
        })?,
    ];
    for (id, s) in &config.sessions {
        if let Some(p) = &s.policy {
            policies.push(Policy::resolve(p, &config.policies_dir).map_err(|source| {
                StartError::SessionPolicy {
                    id: id.clone(),
                    name: p.clone(),
                    source: Box::new(source),
                }
            })?);
        }
    }
    Ok(policies.into_iter().map(Arc::new).collect())
}

/// The audit log, exporting to OTLP when the config says so.
pub(super) fn audit_log(config: &Config) -> Result<Arc<AuditLog>> {
    let audit = AuditLog::open(&config.audit.jsonl, config.audit.memory_events_per_session)
        .map_err(|source| StartError::Audit {
            path: config.audit.jsonl.clone(),
            source,
        })?;
    let audit = Arc::new(audit);
    if let Some(exporter) = crate::otlp::Exporter::start(&config.audit.otlp.endpoint)? {
        audit.export_to(exporter);
    }
    Ok(audit)
}

/// Writes the operator token file (root-only) and returns the token.
pub(super) fn operator_token(config: &Config) -> Result<String> {
    let (token, token_path) =
        approval::create_token_file(&config.state_dir).map_err(|source| StartError::Token {
            dir: config.state_dir.clone(),
            source,
        })?;
    tracing::info!(token_file = %token_path.display(), "operator token written (root-only)");
    Ok(token)
}
