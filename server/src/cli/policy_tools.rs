//! `agentsh policy test` and `agentsh policy generate`: recorded events
//! (a JSON Lines file, or a session's events from a running server) put to
//! a policy before it is enforced (see `replay`).

use crate::cli::client::{Client, ClientError};
use crate::policy::PolicyError;
use crate::replay;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Bad input for `policy test` or `policy generate` (exit 2), or an output
/// that cannot be written.
#[derive(Debug, thiserror::Error)]
pub enum PolicyToolError {
    #[error("cannot read events {from}: {source}")]
    ReadEvents {
        from: String,
        source: std::io::Error,
    },
    #[error(transparent)]
    Events(#[from] replay::ParseError),
    #[error("{0:?} is neither a file nor a session id (1-64 letters, digits, '-', '_', '.')")]
    NotASource(String),
    #[error(transparent)]
    Client(#[from] ClientError),
    #[error(transparent)]
    Policy(#[from] PolicyError),
    #[error("--base {base}: not a shipped policy, and {source}")]
    Base {
        base: String,
        source: std::io::Error,
    },
    #[error(transparent)]
    Generate(#[from] replay::GenerateError),
    #[error("the generated policy does not load (a bug): {0}")]
    GeneratedInvalid(#[source] PolicyError),
    #[error("{0}")]
    Sessions(String),
    #[error("cannot write {}: {source}", path.display())]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
}

type Result<T> = std::result::Result<T, PolicyToolError>;

/// Exit status of `policy test` when an allowed event would be denied.
pub const NEWLY_DENIED: i32 = 1;

/// The events `source` names: a file (it exists, has a `/`, or ends in
/// `.jsonl`/`.json`), else a session of the server at `server`.
///
/// # Errors
/// The file cannot be read or has a line that is not JSON; the server
/// cannot be reached or has no such session.
pub fn load_events(source: &str, server: &str) -> Result<(replay::Loaded, String)> {
    let as_file = Path::new(source);
    if as_file.exists()
        || source.contains('/')
        || source.ends_with(".jsonl")
        || source.ends_with(".json")
    {
        let text = std::fs::read_to_string(as_file).map_err(|e| PolicyToolError::ReadEvents {
            from: source.to_string(),
            source: e,
        })?;
        return Ok((replay::parse(&text, source)?, source.to_string()));
    }
    if !crate::session::valid_id(source) {
        return Err(PolicyToolError::NotASource(source.to_string()));
    }
    let client = Client::new(server, None)?.with_timeout(Duration::from_secs(60));
    let v = client.get_json(&format!("/api/v1/sessions/{source}/events"))?;
    let text = v.to_string();
    Ok((
        replay::parse(&text, &format!("session {source}"))?,
        format!("session {source}"),
    ))
}

fn load_policy(name_or_file: &str) -> Result<crate::policy::Policy> {
    // A name is a shipped policy (or one under the default policies
    // directory); anything with a `/` or `.yaml` a file.
    Ok(crate::policy::Policy::resolve(
        name_or_file,
        Path::new("/etc/agentsh/policies"),
    )?)
}

/// `policy test FILE --events SRC [--against FILE2] [--session ID]`:
/// prints the changes; returns the exit status.
///
/// # Errors
/// Bad input (exit 2).
pub fn test(
    file: &Path,
    events: &str,
    against: Option<&Path>,
    session: Option<&str>,
    server: &str,
) -> Result<i32> {
    let after = load_policy(&file.to_string_lossy())?;
    let before = against
        .map(|a| load_policy(&a.to_string_lossy()))
        .transpose()?;
    let (loaded, origin) = load_events(events, server)?;
    let loaded = sessions_to_replay(loaded, &origin, after.name(), session, before.is_some())?;
    let report = replay::test(&loaded, &after, before.as_ref());
    print!("{}", replay::render_test(&report));
    Ok(if report.newly_denied() > 0 {
        NEWLY_DENIED
    } else {
        0
    })
}

/// The events `policy test` replays: one session's (`--session`); every
/// event when they are of one session, or compared against another policy
/// (`--against` judges them all by both); else the sessions that ran under
/// the policy tested (`name`), the others named on stderr (their recorded
/// verdicts came from other rules: replayed against this policy they would
/// report changes nobody made).
///
/// # Errors
/// `--session` names no session of the events, or no session ran under
/// the policy tested: which ones there are, and what to write.
fn sessions_to_replay(
    loaded: replay::Loaded,
    origin: &str,
    name: &str,
    session: Option<&str>,
    against: bool,
) -> Result<replay::Loaded> {
    let all = replay::sessions(&loaded);
    let listed = || {
        all.iter()
            .map(|(s, p)| {
                if p.is_empty() {
                    s.clone()
                } else {
                    format!("{s} ({})", p.iter().cloned().collect::<Vec<_>>().join(", "))
                }
            })
            .collect::<Vec<_>>()
            .join(", ")
    };
    if let Some(id) = session {
        if !all.contains_key(id) {
            return Err(PolicyToolError::Sessions(format!(
                "{origin} has no session {id:?}; its sessions: {}",
                listed()
            )));
        }
        return Ok(replay::only(
            loaded,
            &[id.to_string()].into_iter().collect(),
        ));
    }
    if all.len() <= 1 || against {
        return Ok(loaded);
    }
    let (mine, others): (Vec<_>, Vec<_>) = all.iter().partition(|(_, p)| p.contains(name));
    if mine.is_empty() {
        return Err(PolicyToolError::Sessions(format!(
            "{origin} holds events of {} sessions and none ran under policy {name:?}: name one \
             with --session ID (its sessions: {}), or compare two policies on all of them with \
             --against FILE",
            all.len(),
            listed()
        )));
    }
    eprintln!(
        "agentsh: replaying the sessions that ran under {name:?} ({}); left out, they ran \
         under other policies: {} (name one with --session ID)",
        mine.iter()
            .map(|(s, _)| s.as_str())
            .collect::<Vec<_>>()
            .join(", "),
        others
            .iter()
            .map(|(s, p)| format!("{s} ({})", p.iter().cloned().collect::<Vec<_>>().join(", ")))
            .collect::<Vec<_>>()
            .join(", ")
    );
    let keep = mine.into_iter().map(|(s, _)| s.clone()).collect();
    Ok(replay::only(loaded, &keep))
}

/// `policy generate --from SRC [--base NAME|FILE] [--pin-hashes] -o FILE`.
///
/// # Errors
/// Bad input, nothing ran, or the file cannot be written (exit 2 for the
/// first two).
pub fn generate(
    from: &str,
    base: &str,
    pin_hashes: bool,
    name: Option<&str>,
    output: &Path,
    server: &str,
) -> Result<()> {
    let base_text = match crate::policy::shipped(base) {
        Some(t) if !base.contains('/') => t.to_string(),
        _ => std::fs::read_to_string(base).map_err(|source| PolicyToolError::Base {
            base: base.to_string(),
            source,
        })?,
    };
    // The base must be a policy itself; what it denies is never allow-listed.
    let base_policy = crate::policy::Policy::from_yaml(&base_text, base)?;
    let (loaded, origin) = load_events(from, server)?;
    let stem = output
        .file_stem()
        .map_or_else(|| "generated".into(), |s| s.to_string_lossy().into_owned());
    let name = name.map_or(stem, str::to_string);
    let g = replay::generate(
        &loaded,
        &replay::GenerateOptions {
            base_text: &base_text,
            base_name: base,
            origin: &origin,
            name: &name,
            pin_hashes,
            base: &base_policy,
        },
        &hash_now,
    )?;
    // What is written is a policy the server would load.
    crate::policy::Policy::from_yaml(&g.yaml, &output.display().to_string())
        .map_err(PolicyToolError::GeneratedInvalid)?;
    write_file(output, &g.yaml)?;
    eprintln!(
        "agentsh: wrote {}: {} programs in {} allow rules; {} left out, {} findings (see its \
         comments); check it with `agentsh policy test {} --events ...`",
        output.display(),
        g.programs,
        g.rules,
        g.left_out,
        g.findings,
        output.display()
    );
    Ok(())
}

/// The digest of `path` now, if it is still the file that ran (same
/// device and inode).
fn hash_now(path: &str, id: Option<(u64, u64)>) -> std::result::Result<String, replay::Unpinned> {
    use std::os::unix::fs::MetadataExt;
    let unreadable = |source| replay::Unpinned::Unreadable {
        path: path.to_string(),
        source,
    };
    let mut f = std::fs::File::open(path).map_err(unreadable)?;
    let m = f.metadata().map_err(unreadable)?;
    if let Some((dev, ino)) = id {
        if (m.dev(), m.ino()) != (dev, ino) {
            return Err(replay::Unpinned::Replaced(path.to_string()));
        }
    }
    crate::supervisor::sha256_hex(&mut f).map_err(unreadable)
}

/// Writes `text` to `path` through a temporary file beside it.
fn write_file(path: &Path, text: &str) -> Result<()> {
    let tmp = PathBuf::from(format!("{}.tmp-{}", path.display(), std::process::id()));
    std::fs::write(&tmp, text).map_err(|source| PolicyToolError::Write {
        path: tmp.clone(),
        source,
    })?;
    std::fs::rename(&tmp, path).map_err(|source| {
        let _ = std::fs::remove_file(&tmp);
        PolicyToolError::Write {
            path: path.to_path_buf(),
            source,
        }
    })
}
