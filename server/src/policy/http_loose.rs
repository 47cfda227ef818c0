//! A request judged the way the laxest plausible upstream could read it:
//! an `http:` rule that denies `/private/**` means nothing if the upstream
//! serves `/private/x` for `/PRIVATE/x`, `/private;x/y`,
//! `/public/..;/private/x` or `/ｐrivate/x`, or runs a DELETE for a POST
//! that says `X-HTTP-Method-Override: DELETE`.
//!
//! [`judge_loosely`] judges the request as written ([`judge_request`]), then
//! each reading a lax upstream could make of it, and the strictest decision
//! stands (deny over approve over allow, audit as allow); where a reading
//! decided, the reason says which reading and how an upstream comes to it.
//! The readings: `;` parameters dropped from each segment (Tomcat, Jetty,
//! Spring), then `.`/`..` resolved (`..;` is `..` there); case folded
//! (case-insensitive servers); Unicode compatibility forms folded (NFKC:
//! fullwidth letters, ligatures); and each of these together. The methods:
//! the request's own, and the one an override header or a `_method` query
//! parameter names (Rails, Laravel, many frameworks).
//!
//! Why the strictest: a rule cannot know how its upstream reads paths, and
//! a refusal a strict upstream would not need costs a request, while an
//! allow a lax one reads otherwise costs the deny.
//!
//! Failure modes: none; a reading that is not in normal form itself (an
//! NFKC fold that makes a `\` or a `%`) is refused as such.

use super::decision::Decision;
use super::http::{judge_request, normal_path, Http, HttpVerdict, RULE_PATH_FORM};
use unicode_normalization::UnicodeNormalization;

/// Headers that carry the method a framework runs instead of the request's
/// (lower case).
pub const OVERRIDE_HEADERS: [&str; 3] = [
    "x-http-method-override",
    "x-http-method",
    "x-method-override",
];

/// How strict a decision is: the larger wins.
fn rank(d: Decision) -> u8 {
    match d {
        Decision::Deny => 3,
        Decision::Approve => 2,
        Decision::Allow | Decision::Audit | Decision::Redirect => 1,
    }
}

/// `;` parameters dropped from each segment (raw or `%3B`), then `.` and
/// `..` segments resolved.
fn without_params(path: &str) -> String {
    let mut out: Vec<String> = Vec::new();
    for seg in path[1..].split('/') {
        let upper = seg.to_ascii_uppercase();
        let cut = [seg.find(';'), upper.find("%3B")]
            .into_iter()
            .flatten()
            .min()
            .unwrap_or(seg.len());
        match &seg[..cut] {
            "." => {}
            ".." => {
                out.pop();
            }
            s => out.push(s.to_string()),
        }
    }
    format!("/{}", out.join("/"))
}

/// The path with every `%XX` decoded, if that is UTF-8 with non-ASCII in
/// it, folded by NFKC.
fn nfkc(path: &str) -> Option<String> {
    let b = path.as_bytes();
    let mut bytes = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let hex = path.get(i + 1..i + 3).filter(|_| b[i] == b'%');
        match hex.and_then(|h| u8::from_str_radix(h, 16).ok()) {
            Some(v) => {
                bytes.push(v);
                i += 3;
            }
            None => {
                bytes.push(b[i]);
                i += 1;
            }
        }
    }
    let s = String::from_utf8(bytes).ok()?;
    if s.is_ascii() {
        return None;
    }
    let folded: String = s.nfkc().collect();
    (folded != s).then_some(folded)
}

/// The readings of normal path `path` (`raw` as the request wrote it) a
/// lax upstream could make, each with how it comes to it (the path as
/// written is not among them).
fn readings(path: &str, raw: &str) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = Vec::new();
    let mut add = |p: String, how: String| {
        if p != path && !out.iter().any(|(q, _)| *q == p) {
            out.push((p, how));
        }
    };
    let mut bases = vec![(path.to_string(), String::new())];
    if let Some(f) = nfkc(raw) {
        bases.push((
            f,
            "with Unicode compatibility forms folded (NFKC)".to_string(),
        ));
    }
    for (base, how) in bases {
        let and = |more: &str| {
            if how.is_empty() {
                more.to_string()
            } else {
                format!("{how}, {more}")
            }
        };
        if !how.is_empty() {
            add(base.clone(), how.clone());
        }
        let bare = without_params(&base);
        let stripped = bare != base;
        if stripped {
            add(bare.clone(), and("with `;` parameters dropped"));
        }
        for (p, more) in [
            (base.to_lowercase(), "case folded"),
            (
                bare.to_lowercase(),
                "with `;` parameters dropped, case folded",
            ),
        ] {
            add(p, and(more));
        }
    }
    out
}

/// The method a `_method` query parameter names, if any.
fn query_method(target: &str) -> Option<String> {
    let query = target.split_once('?')?.1.split('#').next()?;
    query
        .split('&')
        .find_map(|kv| kv.strip_prefix("_method="))
        .map(str::to_string)
}

/// Judges a request as written and as lax upstreams could read it (see
/// the module's text): the strictest decision. `target` is the path with
/// its query; `overrides` the values of [`OVERRIDE_HEADERS`] it carries.
pub fn judge_loosely(h: &Http, method: &str, target: &str, overrides: &[String]) -> HttpVerdict {
    let written = judge_request(h, method, target);
    let path = target.split(['?', '#']).next().unwrap_or_default();
    let Ok(normal) = normal_path(path) else {
        return written;
    };
    let mut methods: Vec<(String, Option<String>)> = vec![(method.to_ascii_uppercase(), None)];
    let named = overrides
        .iter()
        .map(|m| (m.trim().to_string(), "a method-override header"))
        .chain(query_method(target).map(|m| (m, "a _method parameter")));
    for (m, how) in named {
        let m = m.to_ascii_uppercase();
        if !m.is_empty() && !methods.iter().any(|(n, _)| *n == m) {
            methods.push((m.clone(), Some(format!("{how} names {m}"))));
        }
    }
    let mut paths: Vec<(String, Option<String>)> = vec![(normal.clone(), None)];
    paths.extend(
        readings(&normal, path)
            .into_iter()
            .map(|(p, how)| (p, Some(how))),
    );
    let mut worst = written;
    for (m, m_how) in &methods {
        for (p, p_how) in &paths {
            if m_how.is_none() && p_how.is_none() {
                continue;
            }
            let v = judge_request(h, m, p);
            if rank(v.decision) <= rank(worst.decision) {
                continue;
            }
            let read = match p_how {
                Some(how) => format!("a lax upstream reads the path {path} {how} as {p}"),
                None => String::new(),
            };
            let how = [m_how.clone().unwrap_or_default(), read]
                .into_iter()
                .filter(|s| !s.is_empty())
                .collect::<Vec<_>>()
                .join("; ");
            let decided = if v.rule == RULE_PATH_FORM {
                v.why.clone().unwrap_or_default()
            } else {
                format!("rule {} says {} for {m} {p}", v.rule, v.decision.as_str())
            };
            worst = HttpVerdict {
                why: Some(format!("{how}, and {decided}")),
                ..v
            };
        }
    }
    worst
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::Policy;

    /// An egress rule whose `http:` denies `/private/**` and DELETE,
    /// allowing the rest.
    fn http() -> Http {
        let yaml = "name: loose\ndefault: allow\negress:\n  default: deny\n  rules:\n    - name: api\n      hosts: [api.example.com]\n      decision: allow\n      http:\n        default: allow\n        rules:\n          - {name: no-private, paths: [\"/private/**\"], decision: deny}\n          - {name: no-delete, methods: [DELETE], decision: deny}\n          - {name: ask-admin, paths: [\"/admin/**\"], decision: approve}\n";
        let p = Policy::from_yaml(yaml, "loose").expect("the policy compiles");
        let h = p.egress().expect("egress").rules[0].http.clone();
        (*h.expect("http")).clone()
    }

    fn judged(method: &str, target: &str, overrides: &[&str]) -> HttpVerdict {
        let o: Vec<String> = overrides.iter().map(ToString::to_string).collect();
        judge_loosely(&http(), method, target, &o)
    }

    /// Each path variant a lax upstream serves as /private/x (issue 61) is
    /// refused, by the rule that denies /private/**, saying how.
    #[test]
    fn paths_lax_upstreams_read_as_a_denied_one_are_refused() {
        for target in [
            "/private/x",
            "/PRIVATE/x",
            "/Private/x",
            "/private;x/y",
            "/private%3bx/y",
            "/public/..;/private/x",
            "/public/..%3B/private/x",
            "/%EF%BD%90rivate/x",
            "/ｐrivate/x",
            "/%EF%BD%90RIVATE;a/x",
        ] {
            let v = judged("GET", target, &[]);
            assert_eq!(
                (v.decision, v.rule.as_str()),
                (Decision::Deny, "no-private"),
                "{target}: {v:?}"
            );
        }
        let v = judged("GET", "/PRIVATE/x", &[]);
        let why = v.why.unwrap_or_default();
        assert!(
            why.contains("case folded") && why.contains("/private/x"),
            "{why}"
        );
    }

    #[test]
    fn ordinary_paths_and_methods_keep_their_decision() {
        for (m, t) in [
            ("GET", "/public/x"),
            ("GET", "/public/x?q=1"),
            ("POST", "/privateer/x"),
            ("GET", "/caf%C3%A9/menu"),
        ] {
            let v = judged(m, t, &[]);
            assert_eq!(
                (v.decision, v.rule.as_str()),
                (Decision::Allow, "default"),
                "{m} {t}: {v:?}"
            );
            assert!(!v.why.unwrap_or_default().contains("lax"), "{m} {t}");
        }
    }

    #[test]
    fn a_method_override_is_judged_as_the_method_it_names() {
        let v = judged("POST", "/public/x", &["DELETE"]);
        assert_eq!((v.decision, v.rule.as_str()), (Decision::Deny, "no-delete"));
        assert!(v
            .why
            .unwrap_or_default()
            .contains("method-override header names DELETE"));
        let v = judged("GET", "/public/x?a=1&_method=delete", &[]);
        assert_eq!((v.decision, v.rule.as_str()), (Decision::Deny, "no-delete"));
    }

    #[test]
    fn the_strictest_reading_wins_and_approve_is_stricter_than_allow() {
        let v = judged("GET", "/ADMIN/users", &[]);
        assert_eq!(
            (v.decision, v.rule.as_str()),
            (Decision::Approve, "ask-admin")
        );
        // Deny over approve: /admin;x/../private/y reads as /private/y.
        let v = judged("GET", "/admin/..;/private/y", &[]);
        assert_eq!(
            (v.decision, v.rule.as_str()),
            (Decision::Deny, "no-private")
        );
    }

    /// A fold that makes a path not in normal form (a fullwidth reverse
    /// solidus is a `\` under NFKC) is refused as such.
    #[test]
    fn a_fold_into_a_backslash_is_refused_by_form() {
        let v = judged("GET", "/public/a%EF%BC%BCb", &[]);
        assert_eq!(
            (v.decision, v.rule.as_str()),
            (Decision::Deny, RULE_PATH_FORM),
            "{v:?}"
        );
    }
}
