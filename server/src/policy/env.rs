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

/// Why `env:` does not compile: the field, the value, what is wrong.
#[derive(Debug)]
pub struct EnvError {
    pub field: &'static str,
    pub value: String,
    pub message: String,
}

/// Checks and compiles `env:`.
///
/// # Errors
/// The first bad glob or injected name.
pub fn compile(doc: EnvDoc) -> Result<EnvRules, EnvError> {
    for (field, globs) in [("deny", &doc.deny), ("allow", &doc.allow)] {
        for g in globs {
            if g.is_empty()
                || !g
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'*')
            {
                return Err(EnvError {
                    field,
                    value: g.clone(),
                    message: format!(
                        "{field}: {g:?} is not a name glob: letters, digits, '_' and '*' only \
                         (e.g. \"*_TOKEN\", \"AWS_*\")"
                    ),
                });
            }
        }
    }
    for (k, v) in &doc.inject {
        let named = k
            .bytes()
            .next()
            .is_some_and(|b| b.is_ascii_alphabetic() || b == b'_')
            && k.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
        let why = if !named {
            Some("is not a variable name (letters, digits and '_', not starting with a digit)")
        } else if k.starts_with(agentsh_proto::env::PREFIX) {
            Some("is agentsh's own")
        } else if agentsh_proto::env::is_loader_var(k.as_bytes()) {
            Some("is the dynamic loader's (it would change what every program of the tree loads)")
        } else if v.contains('\0') {
            Some("has a NUL byte in its value")
        } else {
            None
        };
        if let Some(why) = why {
            return Err(EnvError {
                field: "inject",
                value: k.clone(),
                message: format!("inject: {k:?} {why}; inject ordinary variables only"),
            });
        }
    }
    Ok(EnvRules {
        deny: doc.deny,
        allow: doc.allow,
        inject: doc.inject.into_iter().collect(),
        also_allow: Vec::new(),
    })
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
        "env: deny {}; allow {}; inject {} (applied to the shell's environment before it runs; the \
         wrap-init event names what was removed)",
        list(&r.deny),
        if r.allow.is_empty() {
            "every other name".to_string()
        } else {
            format!("only {}", r.allow.join(" "))
        },
        list(&r.inject.iter().map(|(k, _)| k.clone()).collect::<Vec<_>>())
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn doc(deny: &[&str], inject: &[(&str, &str)]) -> EnvDoc {
        EnvDoc {
            deny: deny.iter().map(ToString::to_string).collect(),
            allow: vec![],
            inject: inject
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
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
