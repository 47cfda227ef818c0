//! Step 2, the install path: the first shell of a tree, which makes the
//! wrap-init call and installs supervision (unixwrap's steps in the shim:
//! masks, filter, handoff, Landlock), against the real shell and the bare
//! hop, unsupervised; then where its time goes, stage by stage, from the
//! shim's own log over first shells of a pass of their own.

use super::Bench;
use crate::report::{stats, Report};
use crate::timer::{timed, Entry, Spec};
use crate::workload::{entry, s};
use serde_json::{json, Value};

/// Step 2: the shim's first `sh -c true` of a tree against the real shell.
/// Fails unless every shim run made exactly one wrap-init.
pub fn install_path(rep: &mut Report, b: &Bench<'_>) -> Result<(), String> {
    let (hop, shim_mnt, plain_mnt) = (b.hop, b.shim_mnt, b.plain_mnt);
    let spec = Spec {
        rounds: b.rounds.install,
        warmup: b.rounds.install / 10 + 5,
        entries: vec![
            entry(
                "shim sh -c true (install)",
                s(&["/bin/sh", "-c", "true"]),
                Some(shim_mnt),
            ),
            entry(
                "real sh -c true",
                s(&["/bin/sh", "-c", "true"]),
                Some(plain_mnt),
            ),
            entry(
                "hop → real sh -c true",
                s(&[hop, "/bin/sh", "-c", "true"]),
                Some(plain_mnt),
            ),
        ],
    };
    let (install, got) = timed(b.ws, &spec, "install", None, b.audit)?;
    let new_inits = got.wrap_inits;
    let runs = spec.runs();
    if new_inits != runs {
        return Err(format!(
            "install: expected {runs} wrap-inits, saw {new_inits}: the shim did not install supervision each time"
        ));
    }
    rep.pair(
        "2. Install path: the first shell of a tree (wrap-init, unixwrap's steps in the shim: filter, handoff, Landlock)",
        "install",
        &spec,
        &install,
        &[
            (
                "shim sh -c true (install)",
                "real sh -c true",
                "≤ real + 2.0 ms (issue 44)",
            ),
            ("hop → real sh -c true", "real sh -c true", ""),
        ],
    );
    rep.line(&format!(
        "\n({new_inits} wrap-inits audited, one per shim run.)"
    ));
    install_stages(rep, b)
}

/// What each stage name of the shim's and unixwrap's `stages` lines
/// covers, in the order they run.
const STAGES: [(&str, &str); 8] = [
    (
        "wrap-init",
        "wrap-init: the shim's request until the answer is parsed",
    ),
    ("connect", "connecting to the notify socket"),
    ("decode", "the filter decoded"),
    (
        "masks",
        "mount masks (a private mount namespace, the covers)",
    ),
    (
        "filter",
        "the filter: no_new_privs, the courier thread, the load",
    ),
    ("load", "… of which the kernel's load of the program"),
    (
        "handoff",
        "the handoff: sent, the server takes the tree, the ACK",
    ),
    ("landlock", "Landlock: the ruleset enforced"),
];

/// The install path's stages (step 2's stage table): the shim's and
/// unixwrap's own timestamps, their `stages` log lines, over a pass of
/// first shells of its own, after the timed pairs (the log's writes are not
/// in them). Fails unless every shell installed supervision and wrote
/// every stage.
fn install_stages(rep: &mut Report, b: &Bench<'_>) -> Result<(), String> {
    let log = b.ws.join("install-stages.log");
    let _ = std::fs::remove_file(&log);
    let warmup = 5;
    let spec = Spec {
        rounds: b.rounds.install,
        warmup,
        entries: vec![Entry {
            wrapper_log: Some(log.display().to_string()),
            ..entry(
                "shim sh -c true (stages logged)",
                s(&["/bin/sh", "-c", "true"]),
                Some(b.shim_mnt),
            )
        }],
    };
    let (_, got) = timed(b.ws, &spec, "install-stages", None, b.audit)?;
    if got.wrap_inits != spec.runs() {
        return Err(format!(
            "install stages: expected {} wrap-inits, saw {}",
            spec.runs(),
            got.wrap_inits
        ));
    }
    let text = std::fs::read_to_string(&log).map_err(|e| format!("{}: {e}", log.display()))?;
    let all = stage_times(&text);
    rep.line(&format!(
        "\nWhere the first shell's time goes: the shim's and unixwrap's own stage times \
         (`AGENTSH_WRAPPER_LOG_FD`), {} more first shells after the pairs above:\n",
        spec.rounds
    ));
    rep.line("| stage | n | median | p10 | p90 |");
    rep.line("|---|---:|---:|---:|---:|");
    let mut js = serde_json::Map::new();
    for (name, what) in STAGES {
        let v = all.get(name).map(Vec::as_slice).unwrap_or_default();
        if v.len() != spec.runs() {
            return Err(format!(
                "install stages: {} `{name}` times for {} shells in {}",
                v.len(),
                spec.runs(),
                log.display()
            ));
        }
        let st = stats(&v[warmup..]);
        rep.stats_row(what, &st);
        js.insert(name.to_string(), json!(st));
    }
    rep.json.insert("install_stages".into(), Value::Object(js));
    Ok(())
}

/// Every `name=Nus` of the log's stage lines (`stages (shim):`, `stages:`,
/// `filter loaded:`), in nanoseconds, by name, in the order written.
fn stage_times(log: &str) -> std::collections::BTreeMap<String, Vec<u64>> {
    let mut out: std::collections::BTreeMap<String, Vec<u64>> = Default::default();
    for line in log.lines() {
        let Some((_, rest)) = line
            .split_once("stages (shim): ")
            .or_else(|| line.split_once("stages: "))
            .or_else(|| line.split_once("filter loaded: "))
        else {
            continue;
        };
        for word in rest.split_whitespace() {
            let Some((name, value)) = word.split_once('=') else {
                continue;
            };
            if let Some(us) = value.strip_suffix("us").and_then(|n| n.parse::<u64>().ok()) {
                out.entry(name.to_string()).or_default().push(us * 1000);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stage_lines_are_read_by_name() {
        let log = "agentsh-unixwrap: stages (shim): wrap-init=815us connect=17us\n\
                   agentsh-unixwrap: filter loaded: backend=notify flags=NEW_LISTENER insns=913 decode=18us load=212us\n\
                   agentsh-unixwrap: ACK accepted: the server supervises this tree\n\
                   agentsh-unixwrap: stages: masks=143us filter=280us handoff=474us landlock=43us\n";
        let t = stage_times(log);
        assert_eq!(t["wrap-init"], vec![815_000]);
        assert_eq!(t["load"], vec![212_000]);
        assert_eq!(t["landlock"], vec![43_000]);
        assert!(!t.contains_key("insns") && !t.contains_key("backend"));
        assert_eq!(t.len(), 8);
    }
}
