//! wrap's per-run files kept bounded: each run leaves its audit
//! (`<session>.jsonl`), its server's log (`<session>.log`) and its state
//! directory (`<session>/`) under `$XDG_STATE_HOME/agentsh`; at each start
//! only the newest `--keep-runs` runs (100 by default; 0 keeps every run)
//! stay, by the audit's last change.
//!
//! Only runs wrap made are touched: a state directory whose `config.yaml`
//! begins with wrap's own first line. A run whose API socket is still
//! there (running, or ended without cleaning up) and the run starting are
//! never removed. Audits written elsewhere (`--audit`) are not wrap's to
//! remove.
//!
//! Failure modes: what cannot be read or removed stays (logged at debug);
//! nothing here stops a run from starting.

use super::files::Dirs;
use std::path::Path;
use std::time::SystemTime;

/// The first line of every config wrap writes (`standalone::config_text`).
pub(super) const MARK: &str = "# Written by `agentsh wrap` for this session.";

/// Removes the files of wrap's runs under `base` beyond the newest `keep`
/// (`current`, the run starting, counts and stays). The sessions removed.
pub(super) fn prune(base: &Path, keep: usize, current: &str) -> Vec<String> {
    if keep == 0 {
        return Vec::new();
    }
    let Ok(entries) = std::fs::read_dir(base) else {
        return Vec::new();
    };
    let mut runs: Vec<(SystemTime, String)> = entries
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            let session = name.strip_suffix(".jsonl")?.to_string();
            let config = std::fs::read_to_string(base.join(&session).join("config.yaml")).ok()?;
            config.starts_with(MARK).then_some(())?;
            let when = e.metadata().ok()?.modified().ok()?;
            Some((when, session))
        })
        .filter(|(_, s)| s != current)
        .collect();
    runs.sort_by_key(|r| std::cmp::Reverse(r.0));
    let mut removed = Vec::new();
    for (_, session) in runs.into_iter().skip(keep.saturating_sub(1)) {
        if Dirs::of(&session).is_ok_and(|d| d.socket.symlink_metadata().is_ok()) {
            continue;
        }
        let gone = [
            std::fs::remove_file(base.join(format!("{session}.jsonl"))),
            std::fs::remove_file(base.join(format!("{session}.log"))).or_else(absent),
            std::fs::remove_dir_all(base.join(&session)),
        ];
        if let Some(e) = gone.iter().find_map(|r| r.as_ref().err()) {
            tracing::debug!(session, "an earlier run's files not all removed: {e}");
        }
        removed.push(session);
    }
    removed
}

fn absent(e: std::io::Error) -> std::io::Result<()> {
    if e.kind() == std::io::ErrorKind::NotFound {
        Ok(())
    } else {
        Err(e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn run(base: &Path, session: &str, age_s: u64, ours: bool) {
        let dir = base.join(session);
        std::fs::create_dir_all(&dir).unwrap();
        let first = if ours { MARK } else { "# mine" };
        std::fs::write(dir.join("config.yaml"), format!("{first}\npolicy: x\n")).unwrap();
        std::fs::write(base.join(format!("{session}.log")), "log\n").unwrap();
        let audit = base.join(format!("{session}.jsonl"));
        std::fs::write(&audit, "{}\n").unwrap();
        let f = std::fs::File::options().write(true).open(&audit).unwrap();
        f.set_modified(SystemTime::now() - Duration::from_secs(age_s))
            .unwrap();
    }

    #[test]
    fn only_the_newest_runs_wrap_made_stay() {
        let base = std::env::temp_dir().join(format!("agentsh-prune-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        std::fs::create_dir_all(&base).unwrap();
        for (i, age) in [500u64, 400, 300, 200, 100].iter().enumerate() {
            run(&base, &format!("wrap-{i}"), *age, true);
        }
        run(&base, "theirs", 1000, false);
        run(&base, "now", 10_000, true);
        std::fs::write(base.join("notes.jsonl"), "{}\n").unwrap();
        let mut removed = prune(&base, 3, "now");
        removed.sort();
        assert_eq!(
            removed,
            vec!["wrap-0", "wrap-1", "wrap-2"],
            "the run starting counts"
        );
        for s in ["wrap-0", "wrap-1", "wrap-2"] {
            assert!(!base.join(s).exists() && !base.join(format!("{s}.jsonl")).exists());
            assert!(!base.join(format!("{s}.log")).exists());
        }
        for s in ["wrap-3", "wrap-4", "theirs", "now"] {
            assert!(base.join(format!("{s}.jsonl")).exists(), "{s} kept");
        }
        assert!(base.join("notes.jsonl").exists(), "not a run of wrap's");
        assert!(prune(&base, 0, "now").is_empty(), "0 keeps every run");
        std::fs::remove_dir_all(&base).unwrap();
    }
}
