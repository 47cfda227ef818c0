//! `http:` on an egress rule: every request to the rule's destinations is
//! judged by method and path, and headers are added to the ones allowed.
//!
//! A connect the rule allows is made by agentsh to its own proxy (see
//! `proxy`), which reads each request (TLS terminated with agentsh's CA)
//! and asks [`judge_request`]: the first rule whose `methods` and `paths`
//! match decides, none: `default`. Paths are globs over `/`-separated
//! segments: `*` is one segment (or part of one: `v*`), `**` any number of
//! segments (also none); the query string is not part of the path. A path
//! that is not in normal form (a `.` or `..` segment, an encoded `/` or
//! `\`, a backslash, no leading `/`) is refused whatever the rules say: the
//! upstream might read it as another path than the one judged.
//!
//! `inject.headers` are set on an allowed request, replacing any the
//! request carries of the same name; `${secret:NAME}` in a value is the
//! server's `secrets.NAME` (see `config`), read by the server when the
//! request is sent, never shown to the tree.
//!
//! Failure modes: a method that is not a token, a path pattern without a
//! leading `/`, a header name that is not a token, an unknown `${...}` in a
//! value, a decision that is not allow/deny/approve: an [`HttpError`] at
//! the value (the policy does not load).

use super::decision::Decision;
use serde::Deserialize;
use std::collections::BTreeMap;

/// `http:` as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct HttpDoc {
    pub default: Decision,
    pub rules: Option<Vec<HttpRuleDoc>>,
    pub inject: Option<InjectDoc>,
}

/// One `http.rules` entry as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct HttpRuleDoc {
    pub name: String,
    pub methods: Option<Vec<String>>,
    pub paths: Option<Vec<String>>,
    pub decision: Decision,
}

/// `http.inject` as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct InjectDoc {
    pub headers: BTreeMap<String, String>,
}

/// One compiled request rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpRule {
    pub name: String,
    /// Upper case; `None`: any method.
    pub methods: Option<Vec<String>>,
    /// `None`: any path.
    pub paths: Option<Vec<PathGlob>>,
    pub decision: Decision,
}

/// A path pattern, by segment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PathGlob {
    pub text: String,
    segments: Vec<Segment>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Segment {
    /// `**`: any number of segments.
    Any,
    /// A segment with `*` wildcards inside (`*` alone: any one segment).
    Glob(String),
}

/// A part of a header value to inject.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Piece {
    Text(String),
    /// `${secret:NAME}`
    Secret(String),
}

/// A header to set on every allowed request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Inject {
    /// Lower case.
    pub name: String,
    pub value: Vec<Piece>,
}

/// The compiled `http:` of one egress rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Http {
    pub default: Decision,
    pub rules: Vec<HttpRule>,
    pub inject: Vec<Inject>,
}

/// What [`judge_request`] decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpVerdict {
    pub decision: Decision,
    /// The rule's name, `default`, or `http_path_form` (a path refused
    /// whatever the rules say).
    pub rule: String,
    /// Why, for the 403 body and the audit (a path refused by form).
    pub why: Option<String>,
}

/// The rule of a path refused whatever the rules say.
pub const RULE_PATH_FORM: &str = crate::vocab::Refusal::HttpPathForm.rule();

impl Http {
    /// The secrets the rule's headers name.
    pub fn secrets(&self) -> Vec<&str> {
        self.inject
            .iter()
            .flat_map(|i| i.value.iter())
            .filter_map(|p| match p {
                Piece::Secret(s) => Some(s.as_str()),
                Piece::Text(_) => None,
            })
            .collect()
    }

    /// One line per rule, for `agentsh policy check`.
    pub fn describe(&self) -> Vec<String> {
        let mut out = Vec::new();
        for r in &self.rules {
            let methods = r
                .methods
                .as_ref()
                .map_or_else(|| "any method".to_string(), |m| m.join(","));
            let paths = r.paths.as_ref().map_or_else(
                || "any path".to_string(),
                |p| {
                    p.iter()
                        .map(|g| g.text.as_str())
                        .collect::<Vec<_>>()
                        .join(" ")
                },
            );
            out.push(format!(
                "http {:<7} {} [{methods} {paths}]",
                r.decision.as_str(),
                r.name
            ));
        }
        out.push(format!("http default {}", self.default.as_str()));
        for i in &self.inject {
            let secrets: Vec<&str> = i
                .value
                .iter()
                .filter_map(|p| match p {
                    Piece::Secret(s) => Some(s.as_str()),
                    Piece::Text(_) => None,
                })
                .collect();
            out.push(format!(
                "http sets header {} on allowed requests{}",
                i.name,
                if secrets.is_empty() {
                    String::new()
                } else {
                    format!(" (from the server's secrets {})", secrets.join(", "))
                }
            ));
        }
        out
    }
}

/// Judges one request: a path not in normal form is refused; then the
/// first rule whose methods and paths match decides; none: `default`. Pure.
pub fn judge_request(h: &Http, method: &str, path: &str) -> HttpVerdict {
    let path = match normal_path(path) {
        Ok(p) => p,
        Err(why) => {
            return HttpVerdict {
                decision: Decision::Deny,
                rule: RULE_PATH_FORM.into(),
                why: Some(why),
            }
        }
    };
    let method = method.to_ascii_uppercase();
    for r in &h.rules {
        let by_method = r.methods.as_ref().is_none_or(|m| m.contains(&method));
        let by_path = r
            .paths
            .as_ref()
            .is_none_or(|p| p.iter().any(|g| g.matches(&path)));
        if by_method && by_path {
            return HttpVerdict {
                decision: r.decision,
                rule: r.name.clone(),
                why: None,
            };
        }
    }
    HttpVerdict {
        decision: h.default,
        rule: crate::vocab::Builtin::Default.rule().into(),
        why: Some("no http rule of the destination's egress rule matches".into()),
    }
}

/// The path a request names, without its query, with percent-encoded
/// unreserved characters decoded (RFC 3986 6.2.2.2); an error when it is
/// not in normal form.
///
/// # Errors
/// No leading `/`, a backslash, an encoded `/`, `\` or control character,
/// a `.` or `..` segment, an empty segment inside the path (`//`).
pub fn normal_path(raw: &str) -> Result<String, String> {
    let path = raw.split(['?', '#']).next().unwrap_or_default();
    if !path.starts_with('/') {
        return Err(format!("the path {path:?} does not start with /"));
    }
    let mut out = String::with_capacity(path.len());
    let b = path.as_bytes();
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        if c == b'%' {
            let hex = path.get(i + 1..i + 3).unwrap_or_default();
            let Ok(v) = u8::from_str_radix(hex, 16) else {
                return Err(format!("the path {path:?} has a broken %-escape"));
            };
            if v.is_ascii_alphanumeric() || b"-._~".contains(&v) {
                out.push(char::from(v));
            } else if v == b'/' || v == b'\\' || v < 0x20 || v == 0x7f {
                return Err(format!(
                    "the path {path:?} encodes a / or \\ or a control character: an upstream \
                     might read it as another path than the one judged"
                ));
            } else {
                out.push('%');
                out.push_str(&hex.to_ascii_uppercase());
            }
            i += 3;
            continue;
        }
        if c == b'\\' || c < 0x20 || c == 0x7f {
            return Err(format!(
                "the path {path:?} holds a backslash or a control character"
            ));
        }
        out.push(char::from(c));
        i += 1;
    }
    let inner = &out[1..];
    let segments: Vec<&str> = inner.split('/').collect();
    for (n, s) in segments.iter().enumerate() {
        if *s == "." || *s == ".." {
            return Err(format!(
                "the path {path:?} has a {s:?} segment: an upstream would read it as another \
                 path than the one judged"
            ));
        }
        if s.is_empty() && n + 1 < segments.len() {
            return Err(format!("the path {path:?} has an empty segment (//)"));
        }
    }
    Ok(out)
}

impl PathGlob {
    /// Whether the (normal) path matches.
    pub fn matches(&self, path: &str) -> bool {
        let segs: Vec<&str> = path[1..].split('/').collect();
        match_segments(&self.segments, &segs)
    }
}

fn match_segments(pat: &[Segment], segs: &[&str]) -> bool {
    match pat.split_first() {
        None => segs.is_empty(),
        Some((Segment::Any, rest)) => (0..=segs.len()).any(|k| match_segments(rest, &segs[k..])),
        Some((Segment::Glob(g), rest)) => match segs.split_first() {
            Some((s, more)) => match_one(g, s) && match_segments(rest, more),
            None => false,
        },
    }
}

/// `*` in one segment: any run of characters (none too).
fn match_one(glob: &str, s: &str) -> bool {
    let parts: Vec<&str> = glob.split('*').collect();
    if parts.len() == 1 {
        return glob == s;
    }
    let (first, last) = (parts[0], parts[parts.len() - 1]);
    if !s.starts_with(first) || s.len() < first.len() + last.len() || !s.ends_with(last) {
        return false;
    }
    let mut rest = &s[first.len()..s.len() - last.len()];
    for p in &parts[1..parts.len() - 1] {
        match rest.find(p) {
            Some(at) => rest = &rest[at + p.len()..],
            None => return false,
        }
    }
    true
}

/// A value of `http:` that cannot be compiled: where and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct HttpError {
    /// `http.rules[N].methods`, `http.inject.headers`, ...
    pub field: String,
    pub value: Option<String>,
    pub message: String,
}

/// A token (RFC 9110): a method or a header name.
fn is_token(s: &str) -> bool {
    !s.is_empty()
        && s.bytes()
            .all(|c| c.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&c))
}

fn decision(field: String, d: Decision) -> Result<Decision, HttpError> {
    match d {
        Decision::Allow | Decision::Deny | Decision::Approve => Ok(d),
        other => Err(HttpError {
            field,
            value: Some(other.as_str().into()),
            message: format!(
                "{} is not an http decision; use allow, deny or approve",
                other.as_str()
            ),
        }),
    }
}

/// Compiles a path pattern.
fn path_glob(field: &str, p: &str) -> Result<PathGlob, HttpError> {
    let err = |message: String| HttpError {
        field: field.into(),
        value: Some(p.into()),
        message,
    };
    if !p.starts_with('/') {
        return Err(err("a path pattern starts with / (write /repos/**)".into()));
    }
    if p.contains(['?', '#']) {
        return Err(err(
            "a path pattern names no query string (the query is not judged)".into(),
        ));
    }
    let mut segments = Vec::new();
    for s in p[1..].split('/') {
        if s == "**" {
            segments.push(Segment::Any);
        } else if s.contains("**") {
            return Err(err(
                "** stands alone as a segment (/a/**/b, not /a**)".into()
            ));
        } else {
            segments.push(Segment::Glob(s.into()));
        }
    }
    Ok(PathGlob {
        text: p.into(),
        segments,
    })
}

/// Compiles a header value: text and `${secret:NAME}`.
fn value(field: &str, v: &str) -> Result<Vec<Piece>, HttpError> {
    let mut out = Vec::new();
    let mut rest = v;
    while let Some(at) = rest.find("${") {
        if at > 0 {
            out.push(Piece::Text(rest[..at].into()));
        }
        let Some(end) = rest[at..].find('}') else {
            return Err(HttpError {
                field: field.into(),
                value: Some(v.into()),
                message: "an unclosed ${ (write ${secret:NAME})".into(),
            });
        };
        let inner = &rest[at + 2..at + end];
        match inner.strip_prefix("secret:") {
            Some(name) if is_token(name) => out.push(Piece::Secret(name.into())),
            _ => {
                return Err(HttpError {
                    field: field.into(),
                    value: Some(v.into()),
                    message: format!(
                        "${{{inner}}} is not a secret reference (write ${{secret:NAME}}, NAME \
                         a key of the server config's secrets:)"
                    ),
                })
            }
        }
        rest = &rest[at + end + 1..];
    }
    if !rest.is_empty() {
        out.push(Piece::Text(rest.into()));
    }
    if out
        .iter()
        .any(|p| matches!(p, Piece::Text(t) if t.contains(['\r', '\n', '\0'])))
    {
        return Err(HttpError {
            field: field.into(),
            value: Some(v.into()),
            message: "a header value holds no line break or NUL".into(),
        });
    }
    Ok(out)
}

/// Compiles `http:`. Long: one check per field, each with its own
/// message, in the order they are written.
pub(crate) fn compile(doc: HttpDoc) -> Result<Http, HttpError> {
    let default = decision("http.default".into(), doc.default)?;
    let mut rules = Vec::new();
    let mut names = std::collections::BTreeSet::new();
    for (i, r) in doc.rules.unwrap_or_default().into_iter().enumerate() {
        let at = |k: &str| format!("http.rules[{i}].{k}");
        if r.name.is_empty() || !names.insert(r.name.clone()) {
            return Err(HttpError {
                field: at("name"),
                value: Some(r.name.clone()),
                message: "every http rule needs a name of its own".into(),
            });
        }
        let methods = match r.methods {
            None => None,
            Some(m) if m.is_empty() => {
                return Err(HttpError {
                    field: at("methods"),
                    value: None,
                    message: "methods: is empty (omit it for any method)".into(),
                })
            }
            Some(m) => {
                let mut out = Vec::new();
                for x in m {
                    if !is_token(&x) {
                        return Err(HttpError {
                            field: at("methods"),
                            value: Some(x),
                            message: "not an HTTP method".into(),
                        });
                    }
                    out.push(x.to_ascii_uppercase());
                }
                Some(out)
            }
        };
        let paths = match r.paths {
            None => None,
            Some(p) if p.is_empty() => {
                return Err(HttpError {
                    field: at("paths"),
                    value: None,
                    message: "paths: is empty (omit it for any path)".into(),
                })
            }
            Some(p) => Some(
                p.iter()
                    .map(|x| path_glob(&at("paths"), x))
                    .collect::<Result<Vec<_>, _>>()?,
            ),
        };
        rules.push(HttpRule {
            name: r.name,
            methods,
            paths,
            decision: decision(at("decision"), r.decision)?,
        });
    }
    let mut inject = Vec::new();
    for (name, v) in doc.inject.map(|i| i.headers).unwrap_or_default() {
        let field = "http.inject.headers";
        if !is_token(&name) {
            return Err(HttpError {
                field: field.into(),
                value: Some(name),
                message: "not a header name".into(),
            });
        }
        let lower = name.to_ascii_lowercase();
        if [
            "host",
            "content-length",
            "transfer-encoding",
            "connection",
            "upgrade",
        ]
        .contains(&lower.as_str())
        {
            return Err(HttpError {
                field: field.into(),
                value: Some(name),
                message: "this header frames or routes the request; it cannot be injected".into(),
            });
        }
        inject.push(Inject {
            name: lower,
            value: value(field, &v)?,
        });
    }
    Ok(Http {
        default,
        rules,
        inject,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn http(yaml: &str) -> Http {
        compile(serde_yaml_ng::from_str(yaml).expect("yaml")).expect("compiles")
    }

    #[test]
    fn first_matching_rule_decides_by_method_and_path() {
        let h = http(
            "default: deny\nrules:\n  - {name: read, methods: [get, HEAD], paths: [\"/repos/**\"], decision: allow}\n  - {name: issues, methods: [POST], paths: [\"/repos/*/*/issues\"], decision: approve}\n",
        );
        let d = |m: &str, p: &str| judge_request(&h, m, p);
        assert_eq!(d("GET", "/repos/a/b").rule, "read");
        assert_eq!(
            d("GET", "/repos").decision,
            Decision::Allow,
            "** matches none"
        );
        assert_eq!(d("HEAD", "/repos/a/b?x=1").decision, Decision::Allow);
        assert_eq!(d("POST", "/repos/a/b/issues").decision, Decision::Approve);
        assert_eq!(d("POST", "/repos/a/b/c/issues").rule, "default");
        assert_eq!(d("DELETE", "/repos/a/b").decision, Decision::Deny);
        assert_eq!(d("GET", "/user").decision, Decision::Deny);
    }

    #[test]
    fn paths_not_in_normal_form_are_refused_whatever_the_rules() {
        let h = http("default: allow\n");
        for p in [
            "/repos/../admin",
            "/repos/%2e%2E/admin",
            "/a/./b",
            "/a%2fb",
            "/a%5Cb",
            "/a\\b",
            "//x",
            "x",
            "/a%zz",
        ] {
            let v = judge_request(&h, "GET", p);
            assert_eq!(
                (v.decision, v.rule.as_str()),
                (Decision::Deny, RULE_PATH_FORM),
                "{p}"
            );
        }
        assert_eq!(normal_path("/a/%7euser/").as_deref(), Ok("/a/~user/"));
        assert_eq!(normal_path("/a%20b").as_deref(), Ok("/a%20b"));
    }

    #[test]
    fn stars_stay_in_their_segment() {
        let g = path_glob("p", "/v*/x/*.json").expect("glob");
        assert!(g.matches("/v1/x/a.json"));
        assert!(!g.matches("/v1/x/a/b.json"));
        assert!(!g.matches("/w1/x/a.json"));
        assert!(path_glob("p", "/a**").is_err());
        assert!(path_glob("p", "a/b").is_err());
    }

    #[test]
    fn inject_values_name_secrets_and_nothing_else() {
        let h =
            http("default: allow\ninject:\n  headers: {Authorization: \"Bearer ${secret:gh}\"}\n");
        assert_eq!(
            h.inject,
            vec![Inject {
                name: "authorization".into(),
                value: vec![Piece::Text("Bearer ".into()), Piece::Secret("gh".into())]
            }]
        );
        assert_eq!(h.secrets(), vec!["gh"]);
        let bad = |y: &str| compile(serde_yaml_ng::from_str(y).expect("yaml")).is_err();
        assert!(bad(
            "default: allow\ninject:\n  headers: {A: \"${env:HOME}\"}\n"
        ));
        assert!(bad("default: allow\ninject:\n  headers: {Host: x}\n"));
        assert!(bad("default: redirect\n"));
        assert!(bad(
            "default: allow\nrules:\n  - {name: a, methods: [\"G T\"], decision: allow}\n"
        ));
    }
}
