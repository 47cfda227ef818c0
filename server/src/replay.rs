//! Recorded exec events put to a policy before it is enforced: `agentsh
//! policy test` replays them through `policy::judge` and lists each whose
//! verdict would change; `agentsh policy generate` writes an allow-list of
//! what ran (profile, then lock).
//!
//! An event carries what `judge` needs (the name exec'd, its resolved
//! target, argv, depth, `#!` interpreters, loader payloads, copies, whether
//! the file had no name on disk, whether argv was cut). What a replay does
//! not see: the interpreters' own argv (not recorded: their rules match by
//! name), and the supervisor's own refusals (a program from a place the
//! tree can write, memory it could not freeze...), which no policy changes:
//! such events are skipped and counted, as are retries of a refused exec.
//!
//! Failure modes: a line that is not JSON is an error naming its line; a
//! JSON line that is not an event is skipped and counted.

use crate::audit::{Action, Event, EventBody, ExecEvent, ExecSubject};
use crate::policy::{Decision, ExecFacts, Policy, ProgramFacts, Truncation, Verdict};
use std::collections::{BTreeMap, BTreeSet};

/// Events that cannot be read: text that is not JSON.
#[derive(Debug, thiserror::Error)]
pub enum ParseError {
    /// The API's array (text starting with `[`) is not JSON.
    #[error("{origin}: {source}")]
    NotJson {
        origin: String,
        source: serde_json::Error,
    },
    /// A line of JSON Lines is not JSON.
    #[error("{origin}:{line}: not JSON: {source}")]
    LineNotJson {
        origin: String,
        line: usize,
        source: serde_json::Error,
    },
}

/// Why `policy generate` writes nothing.
#[derive(Debug, thiserror::Error)]
pub enum GenerateError {
    #[error("{origin}: no exec ran among {events} exec events: nothing to allow")]
    NothingRan { origin: String, events: usize },
}

/// Why a program is named by its path, not pinned by its digest
/// (`--pin-hashes`); written beside it in the generated policy.
#[derive(Debug, thiserror::Error)]
pub enum Unpinned {
    #[error("{path}: {source}")]
    Unreadable {
        path: String,
        source: std::io::Error,
    },
    #[error("{0} is not the file that ran (replaced since)")]
    Replaced(String),
}

/// Events read from JSON Lines (or the API's array).
#[derive(Debug, Default)]
pub struct Loaded {
    pub events: Vec<Event>,
    /// JSON lines that are not events (skipped).
    pub not_events: usize,
}

/// Parses `text`: JSON Lines, or one JSON array of events (the API's).
///
/// # Errors
/// A line that is not JSON: `origin:LINE: ...`.
pub fn parse(text: &str, origin: &str) -> Result<Loaded, ParseError> {
    let mut out = Loaded::default();
    let trimmed = text.trim_start();
    if trimmed.starts_with('[') {
        let values: Vec<serde_json::Value> =
            serde_json::from_str(trimmed).map_err(|source| ParseError::NotJson {
                origin: origin.to_string(),
                source,
            })?;
        for v in values {
            match serde_json::from_value::<Event>(v) {
                Ok(e) => out.events.push(e),
                Err(_) => out.not_events += 1,
            }
        }
        return Ok(out);
    }
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let v: serde_json::Value =
            serde_json::from_str(line).map_err(|source| ParseError::LineNotJson {
                origin: origin.to_string(),
                line: i + 1,
                source,
            })?;
        match serde_json::from_value::<Event>(v) {
            Ok(e) => out.events.push(e),
            Err(_) => out.not_events += 1,
        }
    }
    Ok(out)
}

/// The exec events a replay judges, and why the others are not.
struct Execs<'a> {
    judged: Vec<(&'a Event, &'a ExecEvent)>,
    retries: usize,
    mechanism: usize,
}

fn execs(events: &[Event]) -> Execs<'_> {
    let mechanism_rules = crate::supervisor::mechanism_rules();
    let mut out = Execs {
        judged: Vec::new(),
        retries: 0,
        mechanism: 0,
    };
    for e in events {
        let EventBody::Execve(x) = &e.body else {
            continue;
        };
        if x.retry {
            out.retries += 1;
        } else if mechanism_rules.contains(&x.rule.as_str()) {
            out.mechanism += 1;
        } else {
            out.judged.push((e, x));
        }
    }
    out
}

/// Each session of `loaded`, with the policies its trees ran under (from
/// their `wrap_init` events; empty when none was recorded). Pure.
pub fn sessions(loaded: &Loaded) -> BTreeMap<String, BTreeSet<String>> {
    let mut out: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for e in &loaded.events {
        let s = out.entry(e.session_id.clone()).or_default();
        if let EventBody::WrapInit(w) = &e.body {
            s.insert(w.policy.clone());
        }
    }
    out
}

/// `loaded` with only the events of the sessions in `keep`. Pure.
pub fn only(loaded: Loaded, keep: &BTreeSet<String>) -> Loaded {
    Loaded {
        events: loaded
            .events
            .into_iter()
            .filter(|e| keep.contains(&e.session_id))
            .collect(),
        not_events: loaded.not_events,
    }
}

/// Whether the recorded file had no name on disk (events written before
/// `anonymous` was recorded say so in the path).
fn fileless(s: &ExecSubject) -> bool {
    s.anonymous
        || [Some(s.filename.as_str()), s.resolved.as_deref()]
            .into_iter()
            .flatten()
            .any(|p| p.ends_with(" (deleted)") || p.starts_with("/memfd:"))
}

/// `policy` on one recorded exec. Pure.
pub fn judge_recorded(policy: &Policy, s: &ExecSubject) -> Verdict {
    let truncated = s.truncated.then_some(Truncation {
        deny: true,
        max_argc: 0,
        max_argv_bytes: 0,
    });
    let facts = ExecFacts {
        program: ProgramFacts {
            filename: &s.filename,
            resolved: s.resolved.as_deref(),
            argv: &s.argv,
            depth: s.depth,
        },
        anonymous: fileless(s),
        truncated,
        interpreters: &s.interpreters,
        copy_of: &s.copy_of,
        loader_payloads: &s.loader_payloads,
    };
    crate::policy::judge(policy, &facts)
}

/// One event whose verdict would change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    pub id: u64,
    pub session: String,
    pub depth: u32,
    pub argv: Vec<String>,
    pub filename: String,
    pub before: (Decision, String),
    pub after: (Decision, String),
    /// It ran (or would have, under `before`) and would be denied.
    pub newly_denied: bool,
}

/// What `policy test` found.
#[derive(Debug, Default)]
pub struct TestReport {
    pub replayed: usize,
    pub changes: Vec<Change>,
    pub retries: usize,
    pub mechanism: usize,
    pub not_events: usize,
}

impl TestReport {
    pub fn newly_denied(&self) -> usize {
        self.changes.iter().filter(|c| c.newly_denied).count()
    }
}

/// Replays `loaded` through `after`; `before` is the recorded verdict, or
/// `against`'s. Pure.
pub fn test(loaded: &Loaded, after: &Policy, against: Option<&Policy>) -> TestReport {
    let ex = execs(&loaded.events);
    let mut report = TestReport {
        retries: ex.retries,
        mechanism: ex.mechanism,
        not_events: loaded.not_events,
        ..TestReport::default()
    };
    for (e, x) in ex.judged {
        report.replayed += 1;
        let (before, ran) = match against {
            Some(p) => {
                let v = judge_recorded(p, &x.subject);
                let ran = matches!(v.decision, Decision::Allow | Decision::Audit);
                ((v.decision, v.rule), ran)
            }
            None => (
                (x.decision, x.rule.clone()),
                x.effective_action == Action::Allow,
            ),
        };
        let v = judge_recorded(after, &x.subject);
        let now = (v.decision, v.rule);
        if now == before {
            continue;
        }
        report.changes.push(Change {
            id: e.id,
            session: e.session_id.clone(),
            depth: x.subject.depth,
            argv: x.subject.argv.clone(),
            filename: x.subject.filename.clone(),
            newly_denied: ran && now.0 == Decision::Deny,
            before,
            after: now,
        });
    }
    report
}

/// `policy test`'s output: one line per change, then a summary.
pub fn render_test(r: &TestReport) -> String {
    let mut s = String::new();
    for c in &r.changes {
        let cmd: String = c.argv.join(" ").chars().take(120).collect();
        s.push_str(&format!(
            "{}event {} ({}, depth {}): {}: {} ({}) -> {} ({})\n",
            if c.newly_denied { "DENIED NOW " } else { "" },
            c.id,
            c.session,
            c.depth,
            if cmd.is_empty() { &c.filename } else { &cmd },
            c.before.0,
            c.before.1,
            c.after.0,
            c.after.1
        ));
    }
    s.push_str(&format!(
        "{} exec events replayed: {} would change, {} allowed now denied; skipped: {} retries, \
         {} refused by the supervisor whatever the policy, {} lines that are not events\n",
        r.replayed,
        r.changes.len(),
        r.newly_denied(),
        r.retries,
        r.mechanism,
        r.not_events
    ));
    s
}

/// How `policy generate` writes its file.
pub struct GenerateOptions<'a> {
    /// The base policy's YAML: every section but its `name`, `description`,
    /// `default` and `command_rules` is kept.
    pub base_text: &'a str,
    pub base_name: &'a str,
    /// Where the events came from (a session or a file), for the header.
    pub origin: &'a str,
    /// The generated policy's `name`.
    pub name: &'a str,
    /// `sha256:` entries instead of paths.
    pub pin_hashes: bool,
    /// The base policy itself: what it denies is never allow-listed.
    pub base: &'a Policy,
}

/// Directories whose programs never go on an allow-list: every tree can
/// write them.
const WRITABLE_BY_ALL: &[&str] = &["/tmp/", "/var/tmp/", "/dev/shm/"];

/// The names a program is judged by (the name exec'd and its resolved
/// target; the policy's verdict is the stricter of the two), for the
/// allow-list; or why it never goes on one.
fn names_of(s: &ExecSubject) -> Result<Vec<String>, &'static str> {
    if fileless(s) {
        return Err("ran from memory or a deleted file (fileless)");
    }
    let names: Vec<String> = std::iter::once(s.filename.clone())
        .chain(s.resolved.clone())
        .chain(s.copy_of.iter().filter(|c| c.starts_with('/')).cloned())
        .collect();
    if !names[0].starts_with('/') {
        return Err("has no absolute path");
    }
    if names
        .iter()
        .any(|p| WRITABLE_BY_ALL.iter().any(|d| p.starts_with(d)))
    {
        return Err("is in a directory every tree can write");
    }
    let base = |x: &str| x.rsplit('/').next().unwrap_or("").to_string();
    if names.iter().any(|p| base(p) == "agentsh") {
        return Err("is the agentsh CLI (a tree never gets it)");
    }
    Ok(names)
}

/// A command entry for `path` (glob characters escaped).
fn entry_of(path: &str) -> String {
    if path.contains(['*', '?', '[', ']']) {
        glob::Pattern::escape(path)
    } else {
        path.to_string()
    }
}

/// YAML double-quoted.
fn quoted(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_else(|_| format!("{s:?}"))
}

/// The base policy's text without its header comments and its `name`,
/// `description`, `default` and `command_rules` sections.
fn base_sections(text: &str) -> String {
    const DROP: &[&str] = &["name", "description", "default", "command_rules"];
    let mut out = String::new();
    let mut dropping = false;
    for line in text.lines() {
        let top = !line.starts_with([' ', '\t', '#', '-']) && !line.trim().is_empty();
        if top {
            let key = line.split(':').next().unwrap_or("").trim();
            dropping = DROP.contains(&key);
        }
        if line.starts_with('#') || dropping {
            continue;
        }
        if line.trim().is_empty() && out.ends_with("\n\n") {
            continue;
        }
        out.push_str(line);
        out.push('\n');
    }
    out.trim_start_matches('\n').to_string()
}

/// A file's device and inode, as the event recorded them.
pub type FileId = Option<(u64, u64)>;

/// A file's digest now, if it is still the file that ran.
pub type HashNow<'a> = &'a dyn Fn(&str, FileId) -> Result<String, Unpinned>;

/// One program that ran: the deepest depth, the file, its digest if the
/// event had one.
#[derive(Default)]
struct Ran {
    depth: u32,
    id: FileId,
    digest: Option<String>,
}

/// What `policy generate` made.
pub struct Generated {
    pub yaml: String,
    pub programs: usize,
    pub rules: usize,
    pub left_out: usize,
    pub findings: usize,
}

/// What the recorded execs say about the programs that ran.
#[derive(Default)]
struct Survey {
    /// path -> (deepest depth, identity, digest recorded)
    ran: BTreeMap<String, Ran>,
    /// Programs that ran but never go on an allow-list, and why.
    left_out: BTreeMap<String, &'static str>,
    /// agent-observe's would-deny findings.
    findings: BTreeSet<String>,
    /// Execs refused while recorded.
    refused: BTreeSet<String>,
    /// Execs that ran but the base denies, or that a would-deny finding
    /// names: never allow-listed (they stay denied).
    kept_denied: BTreeSet<String>,
}

impl Survey {
    /// Takes in one exec judged while recorded; `base` is the policy the
    /// allow-list is made on.
    fn add(&mut self, x: &ExecEvent, base: &Policy) {
        let s = &x.subject;
        let cmd: String = s.argv.join(" ").chars().take(100).collect();
        if x.rule.starts_with("would-deny-") {
            self.findings
                .insert(format!("{}: {cmd} (depth {})", x.rule, s.depth));
        }
        if x.effective_action != Action::Allow {
            self.refused
                .insert(format!("{cmd} (rule {}, depth {})", x.rule, s.depth));
            return;
        }
        let names = match names_of(s) {
            Ok(names) => names,
            Err(why) => {
                self.left_out.insert(
                    s.resolved.clone().unwrap_or_else(|| s.filename.clone()),
                    why,
                );
                return;
            }
        };
        // What ran only because the recording policy let everything run
        // (agent-observe) is not what the base allows: it stays denied.
        let v = judge_recorded(base, s);
        if v.decision == Decision::Deny || x.rule.starts_with("would-deny-") {
            let why = if v.decision == Decision::Deny {
                format!("the base denies it (rule {})", v.rule)
            } else {
                format!("a finding ({})", x.rule)
            };
            self.kept_denied
                .insert(format!("{cmd} (depth {}): {why}", s.depth));
            return;
        }
        self.add_program(s, names);
        // What the kernel starts for it is judged at the same depth.
        for i in s.interpreters.iter().chain(&s.loader_payloads) {
            let names = std::iter::once(i.path.clone())
                .chain(i.resolved.clone())
                .chain(i.copy_of.iter().filter(|c| c.starts_with('/')).cloned());
            for p in names {
                if p.starts_with('/') && !WRITABLE_BY_ALL.iter().any(|d| p.starts_with(d)) {
                    let e = self.ran.entry(p).or_default();
                    e.depth = e.depth.max(s.depth);
                }
            }
        }
    }

    /// Records the names a program that ran is judged by.
    fn add_program(&mut self, s: &ExecSubject, names: Vec<String>) {
        let id = s.file.as_ref().map(|f| (f.dev, f.ino));
        let digest = s.file.as_ref().and_then(|f| f.sha256.clone());
        for (i, p) in names.into_iter().enumerate() {
            // The identity recorded is the file's: the resolved
            // target's (the last name that is not a copy's).
            let own = i + 1 == 1 + usize::from(s.resolved.is_some());
            let e = self.ran.entry(p).or_insert(Ran {
                depth: 0,
                id: if own { id } else { None },
                digest: if own { digest.clone() } else { None },
            });
            e.depth = e.depth.max(s.depth);
        }
    }
}

/// The allow rules' entries: (directory, deepest depth) -> (entry, its comment).
type Groups = BTreeMap<(String, u32), Vec<(String, Option<String>)>>;

/// The programs that ran grouped by directory and depth, each a path or
/// (`--pin-hashes`) its digest.
fn groups(ran: &BTreeMap<String, Ran>, pin_hashes: bool, hash: HashNow<'_>) -> Groups {
    let mut groups = Groups::new();
    for (path, r) in ran {
        let (depth, id, recorded) = (&r.depth, &r.id, &r.digest);
        let dir = path.rsplit_once('/').map_or("/", |(d, _)| d);
        let dir = if dir.is_empty() { "/" } else { dir };
        let (entry, note) = if pin_hashes {
            match recorded.clone().map_or_else(|| hash(path, *id), Ok) {
                Ok(d) => (format!("sha256:{d}"), Some(path.clone())),
                Err(why) => (entry_of(path), Some(format!("not pinned: {why}"))),
            }
        } else {
            (entry_of(path), None)
        };
        groups
            .entry((dir.to_string(), *depth))
            .or_default()
            .push((entry, note));
    }
    groups
}

/// The generated policy's header: where it came from, then its findings,
/// what was left out and what was refused, as comments.
fn header(y: &mut String, survey: &Survey, opts: &GenerateOptions<'_>, events: usize) {
    y.push_str(&format!(
        "# Generated by `agentsh policy generate` from {} ({} exec events).\n\
         # An allow-list of what ran: every program below, at most as deep as it ran;\n\
         # anything else is denied (default: deny). The other sections are {}'s.\n\
         # Review it, then `agentsh policy test` it against new events before enforcing.\n",
        opts.origin, events, opts.base_name
    ));
    if !survey.findings.is_empty() {
        y.push_str(
            "#\n# Findings: what agent-default would deny (it ran while recorded; not\n\
             # allow-listed here):\n",
        );
        for f in &survey.findings {
            y.push_str(&format!("#   {f}\n"));
        }
    }
    if !survey.kept_denied.is_empty() {
        y.push_str(
            "#\n# Ran while recorded, but denied by the base or a finding (not allow-listed:\n\
             # it stays denied; allow it by hand only if it must run):\n",
        );
        for k in &survey.kept_denied {
            y.push_str(&format!("#   {k}\n"));
        }
    }
    if !survey.left_out.is_empty() {
        y.push_str("#\n# Ran, but not allow-listed (never belongs on an allow-list):\n");
        for (p, why) in &survey.left_out {
            y.push_str(&format!("#   {p}: {why}\n"));
        }
    }
    if !survey.refused.is_empty() {
        y.push_str("#\n# Refused while recorded (not allow-listed):\n");
        for r in &survey.refused {
            y.push_str(&format!("#   {r}\n"));
        }
    }
}

/// The `command_rules` section: one allow rule per directory and depth.
fn command_rules(y: &mut String, groups: &Groups) {
    y.push_str("\ncommand_rules:\n");
    for ((dir, depth), entries) in groups {
        let slug: String = dir
            .trim_matches('/')
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
            .collect();
        let slug = if slug.is_empty() { "root".into() } else { slug };
        y.push_str(&format!(
            "  - name: ran-in-{slug}-depth-{depth}\n    commands:\n"
        ));
        for (entry, note) in entries {
            match note {
                Some(n) => y.push_str(&format!("      - {}  # {n}\n", quoted(entry))),
                None => y.push_str(&format!("      - {}\n", quoted(entry))),
            }
        }
        y.push_str(&format!(
            "    decision: allow\n    context: {{max_depth: {depth}}}\n"
        ));
    }
}

/// An allow-list policy of what ran in `loaded`: `default: deny`, one
/// allow rule per directory (and deepest depth) of the programs that ran,
/// their interpreters and loader payloads; the base's other sections.
/// `hash(path, dev, ino)` gives a file's digest now if it is still that
/// file (`--pin-hashes`). Pure but for `hash`.
///
/// # Errors
/// Nothing ran (no allowed exec among the events).
pub fn generate(
    loaded: &Loaded,
    opts: &GenerateOptions<'_>,
    hash: HashNow<'_>,
) -> Result<Generated, GenerateError> {
    let ex = execs(&loaded.events);
    let mut survey = Survey::default();
    for (_, x) in &ex.judged {
        survey.add(x, opts.base);
    }
    if survey.ran.is_empty() {
        return Err(GenerateError::NothingRan {
            origin: opts.origin.to_string(),
            events: ex.judged.len(),
        });
    }
    let groups = groups(&survey.ran, opts.pin_hashes, hash);
    let mut y = String::new();
    header(&mut y, &survey, opts, ex.judged.len());
    y.push_str(&format!(
        "\nname: {}\ndescription: {}\ndefault: deny\n\n",
        opts.name,
        quoted(&format!(
            "Allow-list generated from {} on the base {}",
            opts.origin, opts.base_name
        ))
    ));
    y.push_str(&base_sections(opts.base_text));
    command_rules(&mut y, &groups);
    Ok(Generated {
        programs: survey.ran.len(),
        rules: groups.len(),
        left_out: survey.left_out.len(),
        findings: survey.findings.len(),
        yaml: y,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exec(id: u64, filename: &str, resolved: Option<&str>, depth: u32, rule: &str) -> String {
        let ev = Event {
            id,
            timestamp: "t".into(),
            session_id: "s".into(),
            body: EventBody::Execve(ExecEvent::new(
                ExecSubject {
                    pid: 10 + id as u32,
                    filename: filename.into(),
                    resolved: resolved.map(Into::into),
                    argv: vec![filename.rsplit('/').next().unwrap().into(), "-x".into()],
                    depth,
                    ..ExecSubject::default()
                },
                Decision::Audit,
                rule,
                Action::Allow,
                None,
            )),
        };
        serde_json::to_string(&ev).unwrap()
    }

    fn policy(text: &str) -> Policy {
        Policy::from_yaml(text, "t").unwrap()
    }

    #[test]
    fn parse_names_the_bad_line_and_counts_what_is_not_an_event() {
        let text = format!(
            "{}\n{{\"x\": 1}}\n\n{}\n",
            exec(1, "/bin/ls", None, 0, "default"),
            exec(2, "/bin/ls", None, 0, "default")
        );
        let l = parse(&text, "f.jsonl").unwrap();
        assert_eq!((l.events.len(), l.not_events), (2, 1));
        let e = parse("{\"id\": 1}\n{oops\n", "f.jsonl")
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("f.jsonl:2: not JSON"), "{e}");
    }

    #[test]
    fn test_lists_what_would_change_and_what_is_denied_now() {
        let text = [
            exec(1, "/usr/bin/git", None, 0, "default"),
            exec(
                2,
                "/usr/bin/curl",
                None,
                1,
                "would-deny-nested-network-tools",
            ),
            exec(
                3,
                "/usr/bin/python3",
                Some("/usr/bin/python3.11"),
                0,
                "default",
            ),
        ]
        .join("\n");
        let l = parse(&text, "f").unwrap();
        let strict = policy(
            "default: allow\ncommand_rules:\n  - {name: no-curl, commands: [curl], decision: deny}\n",
        );
        let r = test(&l, &strict, None);
        // audit (recorded) -> allow for git and python, deny for curl.
        assert_eq!(r.replayed, 3);
        assert_eq!(r.newly_denied(), 1);
        let curl = r.changes.iter().find(|c| c.id == 2).unwrap();
        assert_eq!(curl.after, (Decision::Deny, "no-curl".to_string()));
        assert!(render_test(&r).contains("DENIED NOW event 2 (s, depth 1): curl -x: audit"));
        // Against another policy: only what differs between the two.
        let open = policy("default: allow\n");
        let r = test(&l, &strict, Some(&open));
        assert_eq!(r.changes.len(), 1);
        assert_eq!(
            r.changes[0].before,
            (Decision::Allow, "default".to_string())
        );
    }

    #[test]
    fn generate_allows_what_ran_and_nothing_else() {
        let text = [
            exec(
                1,
                "/usr/lib/agentsh/shells/sh",
                Some("/usr/bin/dash"),
                0,
                "default",
            ),
            exec(2, "/usr/bin/git", None, 1, "default"),
            exec(
                3,
                "/usr/bin/curl",
                None,
                2,
                "would-deny-nested-network-tools",
            ),
            exec(4, "/tmp/x", None, 1, "default"),
            exec(5, "/memfd:p (deleted)", None, 1, "default"),
            exec(6, "/usr/bin/agentsh", None, 1, "would-deny-agentsh-cli"),
            exec(
                7,
                "/usr/lib/gcc/x86_64-linux-gnu/12/cc1",
                None,
                3,
                "default",
            ),
            // Ran while recorded (agent-observe let it), denied by the base.
            exec(8, "/usr/bin/su", None, 1, "default"),
        ]
        .join("\n");
        let l = parse(&text, "f").unwrap();
        let base = crate::policy::shipped("agent-default").unwrap();
        let base_policy = Policy::from_yaml(base, "agent-default").unwrap();
        let opts = GenerateOptions {
            base_text: base,
            base_name: "agent-default",
            origin: "f",
            name: "gen",
            pin_hashes: false,
            base: &base_policy,
        };
        let g = generate(&l, &opts, &|p, _| Err(Unpinned::Replaced(p.into()))).unwrap();
        assert_eq!(
            (g.programs, g.left_out, g.findings),
            (4, 3, 2),
            "{}",
            g.yaml
        );
        let p = Policy::from_yaml(&g.yaml, "gen").unwrap_or_else(|e| panic!("{e}\n{}", g.yaml));
        assert_eq!(p.name(), "gen");
        let verdict = |f: &str, depth| {
            judge_recorded(
                &p,
                &ExecSubject {
                    filename: f.into(),
                    argv: vec![f.into()],
                    depth,
                    ..ExecSubject::default()
                },
            )
            .decision
        };
        assert_eq!(verdict("/usr/bin/git", 1), Decision::Allow);
        assert_eq!(
            verdict("/usr/bin/git", 2),
            Decision::Deny,
            "deeper than it ran"
        );
        // What the base denies, or a finding names, stays denied.
        assert_eq!(verdict("/usr/bin/curl", 2), Decision::Deny);
        assert_eq!(verdict("/usr/bin/su", 1), Decision::Deny);
        assert!(
            g.yaml.contains(
                "#   su -x (depth 1): the base denies it (rule deny-privilege-escalation)"
            ),
            "{}",
            g.yaml
        );
        assert_eq!(verdict("/usr/bin/wget", 1), Decision::Deny, "never ran");
        assert_eq!(verdict("/tmp/x", 1), Decision::Deny);
        assert_eq!(verdict("/usr/bin/agentsh", 1), Decision::Deny);
        assert!(g
            .yaml
            .contains("#   would-deny-nested-network-tools: curl -x (depth 2)"));
        assert!(g
            .yaml
            .contains("#   /tmp/x: is in a directory every tree can write"));
        // The base's other sections are kept.
        assert!(p.egress().is_some() && !p.file_rules().is_empty());
        // Pinned: digests instead of paths, or the path with why not.
        let opts = GenerateOptions {
            pin_hashes: true,
            ..opts
        };
        let g = generate(&l, &opts, &|p, _| {
            if p == "/usr/bin/git" {
                Ok("ab".repeat(32))
            } else {
                Err(Unpinned::Unreadable {
                    path: p.into(),
                    source: std::io::ErrorKind::NotFound.into(),
                })
            }
        })
        .unwrap();
        assert!(
            g.yaml
                .contains(&format!("\"sha256:{}\"  # /usr/bin/git", "ab".repeat(32))),
            "{}",
            g.yaml
        );
        assert!(
            g.yaml.contains(
                "\"/usr/lib/gcc/x86_64-linux-gnu/12/cc1\"  # not pinned: \
                 /usr/lib/gcc/x86_64-linux-gnu/12/cc1: entity not found"
            ),
            "{}",
            g.yaml
        );
        Policy::from_yaml(&g.yaml, "gen").unwrap();
    }
}
