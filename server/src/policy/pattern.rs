//! Matching a program name against the `commands:` of a rule and against
//! `internal_bypass`.
//!
//! A command entry without `/` matches the program's basename (`curl`,
//! `python3*`); an entry with `/` matches its absolute path (`/usr/bin/nc*`).
//! Globs use `*`, `?`, `[...]`, and `**` for any number of directories; `*`
//! never crosses a `/`. An entry without glob characters is compared
//! literally (a lone `[` names the test program; `[[]` is the glob form).
//!
//! The `.real` suffix the shim gives the real shells is ignored on the
//! exec'd name: `/bin/sh.real` matches both `sh` and `/bin/sh` (and still
//! matches `sh.real`).
//!
//! An exec'd name that is not absolute (an fd's link text such as
//! `anon_inode:[...]`) matches basename entries only.
//!
//! A wrapper's payload named without a leading `/` (`env curl`,
//! `timeout 5 ./run`) has no known absolute path, since the policy does no
//! I/O: a path entry then matches by its last component (`/usr/bin/nc*`
//! matches `nc`). For a deny rule that errs on the safe side; for an allow
//! rule it is harmless for real wrappers, because the payload's own execve is
//! trapped and judged again with its absolute path.
//!
//! Failure modes: an entry that names no program (empty, a NUL byte, a bad
//! digest, a relative path with `/`, a trailing `/`, an invalid glob) is a
//! [`CommandEntryError`] when the policy loads; matching cannot fail.

use glob::{MatchOptions, Pattern, PatternError};

const OPTIONS: MatchOptions = MatchOptions {
    case_sensitive: true,
    require_literal_separator: true,
    require_literal_leading_dot: false,
};

/// A literal string or a glob.
#[derive(Debug, Clone)]
pub(crate) enum Matcher {
    Literal(String),
    Glob(Pattern),
}

impl Matcher {
    pub fn new(text: &str) -> Result<Matcher, PatternError> {
        if is_glob(text) {
            Pattern::new(text).map(Matcher::Glob)
        } else {
            Ok(Matcher::Literal(text.to_string()))
        }
    }

    pub fn matches(&self, candidate: &str) -> bool {
        match self {
            Matcher::Literal(s) => s == candidate,
            Matcher::Glob(p) => p.matches_with(candidate, OPTIONS),
        }
    }
}

/// `*`, `?`, or a `[` closed by a later `]`. A lone `[` is literal: it is
/// the name of the `test` program.
fn is_glob(text: &str) -> bool {
    text.contains(['*', '?'])
        || text
            .find('[')
            .is_some_and(|open| text[open + 1..].contains(']'))
}

/// One entry of a rule's `commands:`.
#[derive(Debug, Clone)]
pub(crate) enum CommandPattern {
    Basename(Matcher),
    Path {
        full: Matcher,
        /// The last component, for payloads named without a path.
        last: Matcher,
    },
}

/// Why a `commands:` entry names no program.
#[derive(Debug, thiserror::Error)]
pub(crate) enum CommandEntryError {
    #[error("a command entry is empty")]
    Empty,
    #[error("command entry {0:?} contains a NUL byte")]
    Nul(String),
    #[error("command entry {0:?}: a digest is `sha256:` and 64 lowercase hex digits")]
    BadDigest(String),
    #[error("invalid glob {entry:?}: {source}")]
    InvalidGlob { entry: String, source: PatternError },
    #[error(
        "command entry {0:?} has a '/' but is not absolute: write a basename (`curl`), an \
         absolute path (`/usr/bin/curl`) or an absolute glob"
    )]
    NotAbsolute(String),
    #[error("command entry {0:?} ends in '/': name a program, or use `{0}*`")]
    TrailingSlash(String),
}

impl CommandPattern {
    /// Compile one entry; the error says what is wrong with it.
    pub fn new(entry: &str) -> Result<CommandPattern, CommandEntryError> {
        let owned = || entry.to_string();
        let glob = |text: &str| {
            Matcher::new(text).map_err(|source| CommandEntryError::InvalidGlob {
                entry: owned(),
                source,
            })
        };
        if entry.trim().is_empty() {
            return Err(CommandEntryError::Empty);
        }
        if entry.contains('\0') {
            return Err(CommandEntryError::Nul(owned()));
        }
        if let Some(hex) = entry.strip_prefix("sha256:") {
            // A program named by its content: the supervisor's identity index
            // gives every executed file with this digest this name too.
            if hex.len() != 64 || !hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) {
                return Err(CommandEntryError::BadDigest(owned()));
            }
            return Ok(CommandPattern::Basename(Matcher::Literal(owned())));
        }
        if !entry.contains('/') {
            return glob(entry).map(CommandPattern::Basename);
        }
        if !entry.starts_with('/') {
            return Err(CommandEntryError::NotAbsolute(owned()));
        }
        if entry.ends_with('/') {
            return Err(CommandEntryError::TrailingSlash(owned()));
        }
        let full = glob(entry)?;
        let last = glob(entry.rsplit('/').next().unwrap_or(entry))?;
        Ok(CommandPattern::Path { full, last })
    }

    pub fn matches(&self, program: &ProgramName<'_>) -> bool {
        match self {
            CommandPattern::Basename(m) => program.basenames().any(|b| m.matches(b)),
            CommandPattern::Path { full, last } => {
                if program.is_absolute() {
                    program.paths().any(|p| full.matches(p))
                } else if program.payload {
                    program.basenames().any(|b| last.matches(b))
                } else {
                    false
                }
            }
        }
    }
}

/// The name of a program as the policy sees it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ProgramName<'a> {
    name: &'a str,
    base: &'a str,
    /// A wrapper's payload: its location may be unknown.
    payload: bool,
}

const REAL_SUFFIX: &str = ".real";

impl<'a> ProgramName<'a> {
    /// The program an execve names (absolute, unless the supervisor could
    /// only give an fd's link text such as `anon_inode:...`).
    pub fn exec(name: &'a str) -> ProgramName<'a> {
        let base = name.rsplit('/').next().unwrap_or(name);
        ProgramName {
            name,
            base,
            payload: false,
        }
    }

    /// A wrapper's payload, as the wrapper's arguments name it.
    pub fn payload(name: &'a str) -> ProgramName<'a> {
        ProgramName {
            payload: true,
            ..ProgramName::exec(name)
        }
    }

    pub fn name(&self) -> &'a str {
        self.name
    }

    pub fn is_absolute(&self) -> bool {
        self.name.starts_with('/')
    }

    /// The basename with the `.real` suffix removed (the name wrappers are
    /// recognised by).
    pub fn stem(&self) -> &'a str {
        match self.base.strip_suffix(REAL_SUFFIX) {
            Some(s) if !s.is_empty() => s,
            _ => self.base,
        }
    }

    /// The basename as is, then without `.real` if it had it.
    pub fn basenames(&self) -> impl Iterator<Item = &'a str> {
        let stem = self.stem();
        std::iter::once(self.base).chain((stem.len() != self.base.len()).then_some(stem))
    }

    /// The full name as is, then without `.real` if it had it.
    pub fn paths(&self) -> impl Iterator<Item = &'a str> {
        let cut = self.base.len() - self.stem().len();
        let name = self.name;
        std::iter::once(name).chain((cut > 0).then(|| &name[..name.len() - cut]))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn command_patterns_match_basenames_paths_and_globs() {
        // (entry, program name, matches)
        let cases: &[(&str, &str, bool)] = &[
            ("curl", "/usr/bin/curl", true),
            ("curl", "curl", true),
            ("curl", "/usr/bin/curlx", false),
            ("curl", "/usr/bin/curl/", false),
            ("python3*", "/usr/bin/python3.12", true),
            ("python3*", "/usr/bin/python2", false),
            ("/usr/bin/curl", "/usr/bin/curl", true),
            ("/usr/bin/curl", "/usr/local/bin/curl", false),
            ("/usr/bin/nc*", "/usr/bin/ncat", true),
            ("/usr/bin/nc*", "/usr/bin/x/nc", false),
            ("/usr/bin/*", "/usr/bin/sub/ls", false),
            ("/opt/**", "/opt/a/b/c", true),
            ("/opt/**/bin/*", "/opt/a/b/bin/x", true),
            ("/usr/**", "/usr/bin/ls", true),
            ("[", "/usr/bin/[", true),
            ("[[]", "/usr/bin/[", true),
            ("ld-*.so*", "/lib64/ld-linux-x86-64.so.2", true),
            // `.real` is ignored on the exec'd name, in both forms.
            ("sh", "/bin/sh.real", true),
            ("/bin/sh", "/bin/sh.real", true),
            ("sh.real", "/bin/sh.real", true),
            ("/bin/sh.real", "/bin/sh.real", true),
            ("sh", "/bin/.real", false),
            ("real", "/bin/.real", false),
            (".real", "/bin/.real", true),
            // Payloads without an absolute path match path entries by their
            // last component.
            ("/usr/bin/nc*", "nc", true),
            ("/usr/bin/nc*", "./nc", true),
            ("/usr/bin/curl", "curl", true),
            ("/usr/bin/curl", "wget", false),
            ("/tmp/**", "anything", true),
        ];
        for (entry, name, want) in cases {
            let p = CommandPattern::new(entry).expect(entry);
            assert_eq!(
                p.matches(&ProgramName::payload(name)),
                *want,
                "{entry} vs {name}"
            );
            if name.starts_with('/') {
                assert_eq!(
                    p.matches(&ProgramName::exec(name)),
                    *want,
                    "{entry} vs {name}"
                );
            }
        }
        // An exec'd name that is not a path (an fd's link text) matches no
        // path entry, not even `/**`.
        for entry in ["/**", "/tmp/*", "/usr/bin/anon_inode:x"] {
            let p = CommandPattern::new(entry).expect(entry);
            assert!(!p.matches(&ProgramName::exec("anon_inode:x")), "{entry}");
        }
        assert!(CommandPattern::new("anon_inode:*")
            .unwrap()
            .matches(&ProgramName::exec("anon_inode:x")));
        // Deleted files and memfds.
        for (entry, name) in [
            ("/**/* (deleted)", "/tmp/x (deleted)"),
            ("/**/* (deleted)", "/x (deleted)"),
            ("/**/* (deleted)", "/memfd:a (deleted)"),
            ("/memfd:*", "/memfd:a (deleted)"),
        ] {
            let p = CommandPattern::new(entry).expect(entry);
            assert!(p.matches(&ProgramName::exec(name)), "{entry} vs {name}");
        }
    }

    #[test]
    fn bad_command_entries_are_rejected() {
        let cases: &[(&str, &str)] = &[
            ("", "empty"),
            ("  ", "empty"),
            ("bin/curl", "not absolute"),
            ("./curl", "not absolute"),
            ("/usr/bin/", "ends in '/'"),
            ("a***", "invalid glob"),
            ("/usr/**x", "invalid glob"),
            ("/usr/a***", "invalid glob"),
            ("a\0b", "NUL"),
        ];
        for (entry, why) in cases {
            let err = CommandPattern::new(entry).expect_err(entry).to_string();
            assert!(err.contains(why), "{entry:?}: {err}");
        }
    }

    #[test]
    fn program_name_forms() {
        let p = ProgramName::exec("/bin/bash.real");
        assert_eq!(p.basenames().collect::<Vec<_>>(), ["bash.real", "bash"]);
        assert_eq!(
            p.paths().collect::<Vec<_>>(),
            ["/bin/bash.real", "/bin/bash"]
        );
        assert_eq!(p.stem(), "bash");
        let p = ProgramName::exec("/usr/bin/env");
        assert_eq!(p.basenames().collect::<Vec<_>>(), ["env"]);
        assert_eq!(p.paths().collect::<Vec<_>>(), ["/usr/bin/env"]);
        assert!(!ProgramName::payload("env").is_absolute());
    }
}
