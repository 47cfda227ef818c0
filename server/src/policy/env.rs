//! `env:`: what a tree's shell inherits of the environment it was started
//! with. `deny` globs remove names, a non-empty `allow` keeps only the names
//! it matches, `inject` sets names after both (an inherited value is
//! replaced). unixwrap applies it at its final exec, after the filter and
//! Landlock (`agentsh_proto::env::EnvRules`), so the shell and everything it
//! starts begin without the removed variables; the wrap-init event lists the
//! names removed and injected, never values.
//!
//! What this does not watch: a variable the tree sets itself, and the
//! environment of processes outside the tree (`/proc/<pid>/environ` of the
//! SDK's daemon stays readable to a tree of the same uid where the kernel
//! allows that read: keep secrets out of the daemon's environment).
//!
//! Failure modes: a glob with characters other than letters, digits, `_`
//! and `*`, or an injected name that is not a name, is agentsh's own
//! (`AGENTSH_*`) or the dynamic loader's (`LD_*`, `GLIBC_TUNABLES`, ...): a
//! policy error naming the key and what to write instead.

use agentsh_proto::env::EnvRules;

pub use agentsh_proto::env::EnvDoc;

pub use agentsh_proto::env::EnvError;

/// Checks and compiles `env:` (see [`EnvDoc::compile`]).
///
/// # Errors
/// The first bad glob or injected name.
pub fn compile(doc: EnvDoc) -> Result<EnvRules, EnvError> {
    doc.compile()
}

/// One line for `policy check`.
pub fn describe(r: &EnvRules) -> String {
    let list = |v: &[String]| {
        if v.is_empty() {
            "-".to_string()
        } else {
            v.join(" ")
        }
    };
    format!(
        "env: deny {}; keep {}; allow {}; inject {} (applied to the shell's environment before it runs; the \
         wrap-init event names what was removed)",
        list(&r.deny),
        list(&r.keep),
        if r.allow.is_empty() {
            "every other name".to_string()
        } else {
            format!("only {}", r.allow.join(" "))
        },
        list(&r.inject.iter().map(|(k, _)| k.clone()).collect::<Vec<_>>())
    ) + if r.deny_url_passwords {
        "; and every variable whose value holds a URL with a password"
    } else {
        ""
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn doc(deny: &[&str], inject: &[(&str, &str)]) -> EnvDoc {
        EnvDoc {
            deny: deny.iter().map(ToString::to_string).collect(),
            allow: vec![],
            keep: vec![],
            inject: inject
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            deny_url_passwords: false,
        }
    }

    #[test]
    fn bad_globs_and_injections_say_what_to_write() {
        assert!(compile(doc(&["*_TOKEN", "AWS_*"], &[("PIP_INDEX_URL", "x")])).is_ok());
        for (d, i, want) in [
            (vec!["SECRET-*"], vec![], "not a name glob"),
            (vec![""], vec![], "not a name glob"),
            (vec![], vec![("LD_PRELOAD", "/x.so")], "dynamic loader"),
            (vec![], vec![("GLIBC_TUNABLES", "x")], "dynamic loader"),
            (vec![], vec![("AGENTSH_SESSION", "x")], "agentsh's own"),
            (vec![], vec![("1X", "x")], "not a variable name"),
        ] {
            let e = compile(doc(&d, &i)).unwrap_err();
            assert!(e.message.contains(want), "{d:?} {i:?}: {}", e.message);
        }
    }
}
