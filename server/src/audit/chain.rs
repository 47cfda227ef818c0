//! The audit file's hash chain: every line carries `"prev"`, the SHA-256
//! (hex) of the line written before it (across a rotation too: the new
//! file's first line names the old file's last), so a line changed,
//! removed, inserted or moved breaks the link of the line after it.
//! `agentsh events verify FILE...` walks the chain (`verify`).
//!
//! What it does not catch alone: a change to the very last line (nothing
//! names it yet; the next event will), or a log truncated at its end; and
//! whoever can rewrite the whole file can rewrite the whole chain (an
//! export to a collector outside the machine, `audit.otlp`, carries the
//! chain for that).
//!
//! Failure modes: none when linking; `verify` reports the first broken
//! link, naming the file, line and event id.

use sha2::{Digest, Sha256};
use std::path::Path;

/// The SHA-256 (hex) of one line, without its newline.
pub fn digest(line: &str) -> String {
    crate::hex::hex(&Sha256::digest(line.as_bytes()))
}

/// `line` (one JSON object) with `"prev"` first: the link to the line
/// before it (`None`: the first line of a new chain, `"prev":""`).
pub fn linked(line: &str, prev: Option<&str>) -> String {
    let body = line.strip_prefix('{').unwrap_or(line);
    let sep = if body.starts_with('}') { "" } else { "," };
    format!("{{\"prev\":\"{}\"{sep}{body}", prev.unwrap_or(""))
}

/// The link the next line of `jsonl` carries: the digest of its last whole
/// line (`None`: no file, or an empty one).
pub fn last_link(jsonl: &Path) -> Option<String> {
    use std::io::{Read, Seek, SeekFrom};
    let mut f = std::fs::File::open(jsonl).ok()?;
    let len = f.metadata().ok()?.len();
    f.seek(SeekFrom::Start(len.saturating_sub(1 << 20))).ok()?;
    let mut tail = Vec::new();
    f.read_to_end(&mut tail).ok()?;
    let text = String::from_utf8_lossy(&tail);
    let last = text.strip_suffix('\n')?.rsplit('\n').next()?;
    Some(digest(last))
}

/// Where the chain of some files breaks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Break {
    pub file: String,
    /// 1-based.
    pub line: usize,
    pub id: Option<u64>,
    pub why: String,
}

/// What `verify` found: lines checked, and the first break.
#[derive(Debug, Default)]
pub struct Verified {
    pub lines: usize,
    /// The first line's `prev` named a line not among the files (a rotated
    /// file removed): the chain is checked from there.
    pub starts_mid_chain: bool,
    pub broken: Option<Break>,
}

/// Walks the chain through `files` (oldest first, as rotation numbers
/// them: FILE.2, FILE.1, FILE), given as (name, text). Pure.
pub fn verify(files: &[(String, String)]) -> Verified {
    let mut out = Verified::default();
    let mut before: Option<String> = None;
    for (name, text) in files {
        for (i, line) in text.lines().enumerate() {
            let v: serde_json::Value = match serde_json::from_str(line) {
                Ok(v) => v,
                Err(e) => {
                    out.broken = Some(Break {
                        file: name.clone(),
                        line: i + 1,
                        id: None,
                        why: format!("not JSON ({e}): a line was changed or cut"),
                    });
                    return out;
                }
            };
            let id = v.get("id").and_then(serde_json::Value::as_u64);
            let Some(prev) = v.get("prev").and_then(serde_json::Value::as_str) else {
                out.broken = Some(Break {
                    file: name.clone(),
                    line: i + 1,
                    id,
                    why: "no \"prev\": not written by a chaining server, or inserted".into(),
                });
                return out;
            };
            match &before {
                None => out.starts_mid_chain = !prev.is_empty(),
                Some(b) if b == prev => {}
                Some(_) => {
                    out.broken = Some(Break {
                        file: name.clone(),
                        line: i + 1,
                        id,
                        why: "its \"prev\" is not the digest of the line before it: that line \
                              was changed, or lines between were removed, inserted or moved"
                            .into(),
                    });
                    return out;
                }
            }
            before = Some(digest(line));
            out.lines += 1;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_digest_is_sha256_in_lowercase_hex() {
        assert_eq!(
            digest("abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }

    fn chain(n: u64) -> String {
        let mut prev: Option<String> = None;
        let mut out = String::new();
        for id in 1..=n {
            let l = linked(&format!("{{\"id\":{id},\"type\":\"x\"}}"), prev.as_deref());
            prev = Some(digest(&l));
            out.push_str(&l);
            out.push('\n');
        }
        out
    }

    #[test]
    fn an_intact_chain_verifies_and_a_change_or_removal_breaks_it() {
        let text = chain(5);
        let ok = verify(&[("f".into(), text.clone())]);
        assert!(
            ok.broken.is_none() && ok.lines == 5 && !ok.starts_mid_chain,
            "{ok:?}"
        );
        let changed = text.replacen("\"id\":2,\"type\":\"x\"", "\"id\":2,\"type\":\"y\"", 1);
        let b = verify(&[("f".into(), changed)]).broken.unwrap();
        assert_eq!((b.line, b.id), (3, Some(3)), "{b:?}");
        let lines: Vec<&str> = text.lines().collect();
        let removed = [lines[0], lines[1], lines[3], lines[4]].join("\n");
        let b = verify(&[("f".into(), removed)]).broken.unwrap();
        assert_eq!(b.id, Some(4), "{b:?}");
        let moved = [lines[0], lines[2], lines[1], lines[3], lines[4]].join("\n");
        assert!(verify(&[("f".into(), moved)]).broken.is_some());
        // Across a rotation: two files, one chain; the older one removed
        // leaves a chain that starts mid-way, still checked from there.
        let (old, new) = (lines[..2].join("\n"), lines[2..].join("\n"));
        assert!(verify(&[("f.1".into(), old), ("f".into(), new.clone())])
            .broken
            .is_none());
        let v = verify(&[("f".into(), new)]);
        assert!(v.broken.is_none() && v.starts_mid_chain);
        assert_eq!(linked("{}", None), "{\"prev\":\"\"}");
    }
}

#[cfg(test)]
mod parse_tests {
    /// A chained line still reads as an event (`prev` is not the event's).
    #[test]
    fn a_chained_line_reads_as_an_event() {
        let e = crate::audit::Event {
            id: 3,
            timestamp: "t".into(),
            session_id: "s".into(),
            body: crate::audit::EventBody::UnsupervisedRun(crate::audit::UnsupervisedEvent {
                ran_at: "t".into(),
                pid: 1,
                ppid: 0,
                uid: 0,
                argv: vec!["sh".into()],
                reason: "r".into(),
                earlier_life: false,
            }),
        };
        let line = super::linked(&serde_json::to_string(&e).unwrap(), Some("ab"));
        assert!(line.starts_with("{\"prev\":\"ab\",\"id\":3"), "{line}");
        let back: crate::audit::Event = serde_json::from_str(&line).unwrap();
        assert_eq!(back.id, 3);
    }
}
