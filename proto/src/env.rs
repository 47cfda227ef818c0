//! Names of the environment variables agentsh reads.
//!
//! None of them can weaken enforcement: the mode variable may only make the
//! shim stricter, and the wrapper variables are set by the shim for unixwrap and
//! removed by unixwrap before the user's command runs.
//!
//! The dynamic loader's variables ([`is_loader_var`]) are moved out of the way
//! of agentsh's own binaries: the shim carries them to unixwrap packed in
//! [`LOADER_ENV`], and unixwrap hands them back to the user's command only
//! after the seccomp filter and Landlock are in place, so nothing they name
//! (an `LD_PRELOAD` library, an `LD_AUDIT` module, a `GCONV_PATH` module, a
//! tunable) runs or takes effect before supervision exists. Failure modes:
//! [`unpack_loader_env`] refuses anything it did not [`pack_loader_env`]
//! itself (the caller then refuses to run rather than lose or guess variables).

/// Set by the shim for unixwrap: the number of the SOCK_SEQPACKET end to send the notify fd on.
pub const NOTIFY_SOCK_FD: &str = "AGENTSH_NOTIFY_SOCK_FD";
/// Set by the shim for unixwrap: the JSON [`crate::SeccompConfig`].
pub const SECCOMP_CONFIG: &str = "AGENTSH_SECCOMP_CONFIG";
/// Optional: an fd number unixwrap and the shim write their diagnostics to.
pub const WRAPPER_LOG_FD: &str = "AGENTSH_WRAPPER_LOG_FD";
/// Optional, set by the shim for unixwrap: the pid of the relay helper (a child
/// of the process that becomes unixwrap), which unixwrap reaps after the ACK so
/// the user's shell inherits no zombie.
pub const RELAY_PID: &str = "AGENTSH_RELAY_PID";
/// Read by the shim: `off`, `auto` or `on`. Can only make the mode stricter than shim.conf.
pub const SHIM_INSTALL: &str = "AGENTSH_SHIM_INSTALL";
/// Read by the shim in the first shell of a tree: the session it joins
/// instead of shim.conf's `session=` (chosen by whoever starts that shell,
/// outside every tree; nested shells never read it).
pub const SESSION: &str = "AGENTSH_SESSION";
/// Set by the server for unixwrap: the session the tree belongs to.
pub const SESSION_ID: &str = "AGENTSH_SESSION_ID";
/// Prefix of every variable agentsh owns; unixwrap strips them before exec.
pub const PREFIX: &str = "AGENTSH_";
/// Set by the shim for unixwrap (always, empty when there were none): the
/// dynamic loader's variables of the caller's environment, packed by
/// [`pack_loader_env`], in their original order.
pub const LOADER_ENV: &str = "AGENTSH_LOADER_ENV";

/// glibc's list of variables a setuid program must not honour
/// (`sysdeps/generic/unsecvars.h`), the reference for what reaches the
/// dynamic loader or changes how libc behaves before `main`.
pub const UNSECURE_VARS: &[&str] = &[
    "GCONV_PATH",
    "GETCONF_DIR",
    "GLIBC_TUNABLES",
    "HOSTALIASES",
    "LD_AUDIT",
    "LD_DEBUG",
    "LD_DEBUG_OUTPUT",
    "LD_DYNAMIC_WEAK",
    "LD_HWCAP_MASK",
    "LD_LIBRARY_PATH",
    "LD_ORIGIN_PATH",
    "LD_PRELOAD",
    "LD_PROFILE",
    "LD_SHOW_AUXV",
    "LD_USE_LOAD_BIAS",
    "LOCALDOMAIN",
    "LOCPATH",
    "MALLOC_TRACE",
    "NIS_PATH",
    "NLSPATH",
    "RESOLV_HOST_CONF",
    "RES_OPTIONS",
    "TMPDIR",
    "TZDIR",
];

/// Is `name` a variable the shim keeps away from agentsh's own binaries?
/// glibc's [`UNSECURE_VARS`], every `LD_*` (the loader reads more than glibc
/// lists: `LD_BIND_NOW`, `LD_ASSUME_KERNEL`, ...) and every `MALLOC_*` (the
/// malloc tunables' old names, `MALLOC_CHECK_`, `MALLOC_ARENA_MAX`, ...).
pub fn is_loader_var(name: &[u8]) -> bool {
    name.starts_with(b"LD_")
        || name.starts_with(b"MALLOC_")
        || UNSECURE_VARS.iter().any(|v| v.as_bytes() == name)
}

/// Packs `NAME=VALUE` entries (no NUL inside, as in any environment) for
/// [`LOADER_ENV`]: base64 of the entries joined by NUL bytes.
pub fn pack_loader_env<'a>(entries: impl IntoIterator<Item = &'a [u8]>) -> String {
    let mut raw = Vec::new();
    for (i, e) in entries.into_iter().enumerate() {
        if i > 0 {
            raw.push(0);
        }
        raw.extend_from_slice(e);
    }
    crate::bpf::base64_encode(&raw)
}

/// The entries [`pack_loader_env`] packed, in order.
///
/// # Errors
/// Not base64, or an entry that is not `NAME=VALUE` of a loader variable
/// (unixwrap never puts back anything the shim would not have taken out).
pub fn unpack_loader_env(value: &[u8]) -> Result<Vec<Vec<u8>>, String> {
    let text = std::str::from_utf8(value).map_err(|_| format!("{LOADER_ENV} is not ASCII"))?;
    let raw = crate::bpf::base64_decode(text).map_err(|e| format!("{LOADER_ENV}: {e}"))?;
    if raw.is_empty() {
        return Ok(Vec::new());
    }
    raw.split(|b| *b == 0)
        .map(|e| {
            let name = e.split(|b| *b == b'=').next().unwrap_or_default();
            if e.contains(&b'=') && !name.is_empty() && is_loader_var(name) {
                Ok(e.to_vec())
            } else {
                Err(format!(
                    "{LOADER_ENV} carries {:?}, which is not a loader variable",
                    String::from_utf8_lossy(e)
                ))
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loader_vars_are_recognised() {
        for v in [
            "LD_PRELOAD",
            "LD_AUDIT",
            "LD_BIND_NOW",
            "GLIBC_TUNABLES",
            "MALLOC_ARENA_MAX",
            "TZDIR",
            "GCONV_PATH",
        ] {
            assert!(is_loader_var(v.as_bytes()), "{v}");
        }
        for v in ["PATH", "HOME", "LDFLAGS", "OLD_PRELOAD", "AGENTSH_X", "TZ"] {
            assert!(!is_loader_var(v.as_bytes()), "{v}");
        }
    }

    #[test]
    fn loader_env_round_trips_in_order() {
        let entries: Vec<&[u8]> = vec![
            b"LD_PRELOAD=/a.so b.so",
            b"GLIBC_TUNABLES=glibc.malloc.check=3",
            b"TMPDIR=",
        ];
        let packed = pack_loader_env(entries.iter().copied());
        let back = unpack_loader_env(packed.as_bytes()).unwrap();
        assert_eq!(back, entries.iter().map(|e| e.to_vec()).collect::<Vec<_>>());
        assert!(unpack_loader_env(b"").unwrap().is_empty());
        assert_eq!(pack_loader_env(std::iter::empty()), "");
    }

    #[test]
    fn loader_env_refuses_what_the_shim_would_not_pack() {
        let forged = pack_loader_env([&b"PATH=/evil"[..]]);
        assert!(unpack_loader_env(forged.as_bytes()).is_err());
        assert!(unpack_loader_env(pack_loader_env([&b"LD_PRELOAD"[..]]).as_bytes()).is_err());
        assert!(unpack_loader_env(b"!!!!").is_err());
    }
}

/// `env:` as written (a policy's, or a session's in the server config):
/// `deny` and `allow` are name globs, `inject` sets names. The server
/// checks and compiles it into [`EnvRules`].
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct EnvDoc {
    /// Globs of names removed.
    #[serde(default)]
    pub deny: Vec<String>,
    /// Non-empty: only names matching one of these globs pass.
    #[serde(default)]
    pub allow: Vec<String>,
    /// Globs of names passed whatever `deny` and `allow` say (what the
    /// workload legitimately needs of a denied pattern: `AWS_REGION`).
    #[serde(default)]
    pub keep: Vec<String>,
    /// Names set, replacing an inherited value.
    #[serde(default)]
    pub inject: std::collections::BTreeMap<String, String>,
    /// Remove every variable whose value holds a URL with a password in it
    /// (`redis://:pw@host`, `https://user:pw@proxy:3128`), whatever its
    /// name (`keep` still passes a name).
    #[serde(default)]
    pub deny_url_passwords: bool,
}

/// Why an `env:` block does not compile: the field, the value, what is
/// wrong (the message names the field and the value).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EnvError {
    /// `deny`, `allow`, `keep` or `inject`.
    pub field: &'static str,
    /// The glob or the injected name.
    pub value: String,
    /// What is wrong and what to write instead.
    pub message: String,
}

impl EnvDoc {
    /// Checks and compiles the block: globs of letters, digits, `_` and
    /// `*`; injected names that are names, not agentsh's own (`AGENTSH_*`)
    /// nor the dynamic loader's (`LD_*`, `GLIBC_TUNABLES`, ...).
    ///
    /// # Errors
    /// The first bad glob or injected name.
    pub fn compile(self) -> Result<EnvRules, EnvError> {
        for (field, globs) in [
            ("deny", &self.deny),
            ("allow", &self.allow),
            ("keep", &self.keep),
        ] {
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
                            "{field}: {g:?} is not a name glob: letters, digits, '_' and '*' \
                             only (e.g. \"*_TOKEN\", \"AWS_*\")"
                        ),
                    });
                }
            }
        }
        for (k, v) in &self.inject {
            let named = k
                .bytes()
                .next()
                .is_some_and(|b| b.is_ascii_alphabetic() || b == b'_')
                && k.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
            let why = if !named {
                Some("is not a variable name (letters, digits and '_', not starting with a digit)")
            } else if k.starts_with(PREFIX) {
                Some("is agentsh's own")
            } else if is_loader_var(k.as_bytes()) {
                Some(
                    "is the dynamic loader's (it would change what every program of the tree \
                     loads)",
                )
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
            deny: self.deny,
            allow: self.allow,
            keep: self.keep,
            inject: self.inject.into_iter().collect(),
            also_allow: Vec::new(),
            deny_url_passwords: self.deny_url_passwords,
        })
    }
}

/// A policy's `env:` rules, as the server hands them to unixwrap
/// (`SeccompConfig::env`): applied to the command's environment at
/// unixwrap's final exec, after the filter and Landlock.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct EnvRules {
    /// Globs (`*` matches any run of characters) of names removed.
    #[serde(default)]
    pub deny: Vec<String>,
    /// Non-empty: only names matching one of these globs pass.
    #[serde(default)]
    pub allow: Vec<String>,
    /// Globs of names passed whatever `deny` and `allow` say.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub keep: Vec<String>,
    /// Set after the others, replacing an inherited value.
    #[serde(default)]
    pub inject: Vec<(String, String)>,
    /// Non-empty: names must match one of these globs too (a session's
    /// `allow` and its policy's both apply).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub also_allow: Vec<String>,
    /// Remove a variable whose value holds a URL with a password (see
    /// [`url_with_password`]), unless `keep` names it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub deny_url_passwords: bool,
}

/// Whether `value` holds a URL with a password in its user part
/// (`SCHEME://USER:PASSWORD@HOST`, the password not empty), anywhere in it
/// (a list of URLs too). Pure.
pub fn url_with_password(value: &[u8]) -> bool {
    let mut at = 0;
    while let Some(i) = value[at..].windows(3).position(|w| w == b"://") {
        let start = at + i + 3;
        // The authority: up to the first '/', '?', '#' or space.
        let end = value[start..]
            .iter()
            .position(|b| matches!(b, b'/' | b'?' | b'#' | b' ' | b',' | b';'))
            .map_or(value.len(), |e| start + e);
        let authority = &value[start..end];
        if let Some(atsign) = authority.iter().rposition(|b| *b == b'@') {
            let user = &authority[..atsign];
            if let Some(colon) = user.iter().position(|b| *b == b':') {
                if colon + 1 < user.len() {
                    return true;
                }
            }
        }
        at = start;
    }
    false
}

impl EnvRules {
    /// Whether an inherited variable `name` passes (an injected name is
    /// replaced, whatever this says).
    pub fn keeps(&self, name: &[u8]) -> bool {
        if self.keep.iter().any(|g| glob(g.as_bytes(), name)) {
            return true;
        }
        !self.deny.iter().any(|g| glob(g.as_bytes(), name))
            && (self.allow.is_empty() || self.allow.iter().any(|g| glob(g.as_bytes(), name)))
            && (self.also_allow.is_empty()
                || self.also_allow.iter().any(|g| glob(g.as_bytes(), name)))
    }

    /// Both `a` and `b` applied: a name passes if both keep it; an injected
    /// name of `a` (the session's) wins over `b`'s (its policy's).
    pub fn merged(a: Option<&EnvRules>, b: Option<&EnvRules>) -> Option<EnvRules> {
        let (a, b) = match (a, b) {
            (None, None) => return None,
            (Some(x), None) | (None, Some(x)) => return Some(x.clone()),
            (Some(a), Some(b)) => (a, b),
        };
        let mut deny = a.deny.clone();
        deny.extend(b.deny.iter().filter(|g| !a.deny.contains(g)).cloned());
        // Each side is one `env:` block (compiled alone: no `also_allow`).
        let (allow, also_allow) = match (a.allow.is_empty(), b.allow.is_empty()) {
            (true, _) => (b.allow.clone(), Vec::new()),
            (false, true) => (a.allow.clone(), Vec::new()),
            (false, false) => (a.allow.clone(), b.allow.clone()),
        };
        let mut keep = a.keep.clone();
        keep.extend(b.keep.iter().filter(|g| !a.keep.contains(g)).cloned());
        let mut inject = a.inject.clone();
        inject.extend(
            b.inject
                .iter()
                .filter(|(k, _)| !a.inject.iter().any(|(ak, _)| ak == k))
                .cloned(),
        );
        Some(EnvRules {
            deny,
            allow,
            keep,
            inject,
            also_allow,
            deny_url_passwords: a.deny_url_passwords || b.deny_url_passwords,
        })
    }

    /// `vars` (`NAME=VALUE` entries) without what is not kept, then the
    /// injected ones; returns the entries and the names removed.
    pub fn apply(&self, vars: Vec<Vec<u8>>) -> (Vec<Vec<u8>>, Vec<String>) {
        let mut removed = Vec::new();
        let mut out = Vec::with_capacity(vars.len() + self.inject.len());
        for kv in vars {
            let name = kv.split(|b| *b == b'=').next().unwrap_or_default();
            let injected = self.inject.iter().any(|(k, _)| k.as_bytes() == name);
            if injected {
                continue;
            }
            let value = kv.get(name.len() + 1..).unwrap_or_default();
            let kept_by_name = self.keep.iter().any(|g| glob(g.as_bytes(), name));
            let url_password = self.deny_url_passwords && !kept_by_name && url_with_password(value);
            if self.keeps(name) && !url_password {
                out.push(kv);
            } else {
                removed.push(String::from_utf8_lossy(name).into_owned());
            }
        }
        for (k, v) in &self.inject {
            let mut kv = k.as_bytes().to_vec();
            kv.push(b'=');
            kv.extend_from_slice(v.as_bytes());
            out.push(kv);
        }
        (out, removed)
    }
}

/// Whether `name` matches `pattern`, where `*` stands for any run of bytes
/// (none included) and everything else for itself. Pure.
pub fn glob(pattern: &[u8], name: &[u8]) -> bool {
    // Iterative, with one backtrack point: linear in practice.
    let (mut p, mut n) = (0, 0);
    let (mut star, mut mark) = (None, 0);
    while n < name.len() {
        if p < pattern.len() && pattern[p] == b'*' {
            star = Some(p);
            mark = n;
            p += 1;
        } else if p < pattern.len() && pattern[p] == name[n] {
            p += 1;
            n += 1;
        } else if let Some(s) = star {
            p = s + 1;
            mark += 1;
            n = mark;
        } else {
            return false;
        }
    }
    pattern[p..].iter().all(|b| *b == b'*')
}

#[cfg(test)]
mod env_rules_tests {
    use super::*;

    #[test]
    fn urls_with_a_password_are_known_by_their_value() {
        for v in [
            "redis://:hunter2@cache:6379/0",
            "mongodb://app:pw@db1,db2/app",
            "postgres://u:p@localhost/x",
            "https://user:tok@pypi.internal/simple",
            "http://proxyuser:proxypass@proxy:3128",
            "a b https://u:p@h",
        ] {
            assert!(url_with_password(v.as_bytes()), "{v}");
        }
        for v in [
            "https://pypi.org/simple",
            "http://user@host/x",
            "https://host/a:b@c",
            "redis://:@cache",
            "not a url: x@y",
            "",
        ] {
            assert!(!url_with_password(v.as_bytes()), "{v}");
        }
        let r = EnvRules {
            deny_url_passwords: true,
            keep: vec!["HTTPS_PROXY".into()],
            ..EnvRules::default()
        };
        let (out, removed) = r.apply(vec![
            b"REDIS_URL=redis://:pw@cache".to_vec(),
            b"HTTPS_PROXY=http://u:p@proxy:3128".to_vec(),
            b"PIP_INDEX_URL=https://pypi.org/simple".to_vec(),
        ]);
        assert_eq!(removed, ["REDIS_URL"]);
        assert_eq!(out.len(), 2);
    }

    #[test]
    fn globs_match_names() {
        for (g, n, want) in [
            ("*_TOKEN", "SECRET_TOKEN", true),
            ("*_TOKEN", "TOKEN", false),
            ("AWS_*", "AWS_SECRET_ACCESS_KEY", true),
            ("AWS_*", "XAWS_A", false),
            ("PATH", "PATH", true),
            ("PATH", "PATHX", false),
            ("*", "ANY", true),
            ("A*B*C", "AxxBxxC", true),
            ("A*B*C", "AxxBxx", false),
        ] {
            assert_eq!(glob(g.as_bytes(), n.as_bytes()), want, "{g} {n}");
        }
    }

    #[test]
    fn deny_then_allow_then_inject() {
        let r = EnvRules {
            deny: vec!["*_TOKEN".into()],
            allow: vec![],
            keep: vec![],
            inject: vec![(
                "PIP_INDEX_URL".into(),
                "https://pypi.internal/simple".into(),
            )],
            also_allow: vec![],
            deny_url_passwords: false,
        };
        let (out, removed) = r.apply(vec![
            b"PATH=/bin".to_vec(),
            b"SECRET_TOKEN=sk-live".to_vec(),
            b"PIP_INDEX_URL=https://evil/".to_vec(),
        ]);
        assert_eq!(
            out,
            vec![
                b"PATH=/bin".to_vec(),
                b"PIP_INDEX_URL=https://pypi.internal/simple".to_vec()
            ]
        );
        assert_eq!(removed, vec!["SECRET_TOKEN".to_string()]);
        let only = EnvRules {
            allow: vec!["PATH".into(), "HOME".into()],
            ..EnvRules::default()
        };
        let (out, removed) = only.apply(vec![b"PATH=/bin".to_vec(), b"AWS_KEY=x".to_vec()]);
        assert_eq!(out, vec![b"PATH=/bin".to_vec()]);
        assert_eq!(removed, vec!["AWS_KEY".to_string()]);
    }

    #[test]
    fn keep_passes_a_name_whatever_deny_and_allow_say() {
        let r = EnvRules {
            deny: vec!["AWS_*".into(), "*_KEY".into()],
            allow: vec!["PATH".into()],
            keep: vec!["AWS_REGION".into(), "OPENAI_API_KEY".into()],
            ..EnvRules::default()
        };
        assert!(r.keeps(b"AWS_REGION") && r.keeps(b"OPENAI_API_KEY"));
        assert!(!r.keeps(b"AWS_SECRET_ACCESS_KEY") && !r.keeps(b"HOME"));
        let m = EnvRules::merged(
            Some(&EnvRules {
                keep: vec!["GH_TOKEN".into()],
                ..EnvRules::default()
            }),
            Some(&r),
        )
        .unwrap();
        assert_eq!(m.keep, ["GH_TOKEN", "AWS_REGION", "OPENAI_API_KEY"]);
    }

    #[test]
    fn a_session_and_its_policy_both_apply() {
        let session = EnvRules {
            deny: vec!["*_TOKEN".into()],
            allow: vec!["PATH".into(), "HOME".into(), "PIP_*".into()],
            keep: vec![],
            inject: vec![("PIP_INDEX_URL".into(), "https://session/".into())],
            also_allow: vec![],
            deny_url_passwords: false,
        };
        let policy = EnvRules {
            deny: vec!["AWS_*".into(), "*_TOKEN".into()],
            allow: vec!["PATH".into(), "PIP_*".into(), "LANG".into()],
            keep: vec![],
            inject: vec![
                ("PIP_INDEX_URL".into(), "https://policy/".into()),
                ("LANG".into(), "C.UTF-8".into()),
            ],
            also_allow: vec![],
            deny_url_passwords: false,
        };
        let m = EnvRules::merged(Some(&session), Some(&policy)).unwrap();
        assert_eq!(m.deny, vec!["*_TOKEN".to_string(), "AWS_*".to_string()]);
        // Kept only if both allow-lists match it.
        assert!(m.keeps(b"PATH"));
        assert!(
            !m.keeps(b"HOME"),
            "the policy's allow-list does not have it"
        );
        assert!(
            !m.keeps(b"LANG"),
            "the session's allow-list does not have it"
        );
        assert!(!m.keeps(b"PIP_TOKEN"), "denied by both");
        // The session's injected value wins; the policy's other one stays.
        assert_eq!(
            m.inject,
            vec![
                ("PIP_INDEX_URL".to_string(), "https://session/".to_string()),
                ("LANG".to_string(), "C.UTF-8".to_string())
            ]
        );
        assert_eq!(EnvRules::merged(None, Some(&policy)), Some(policy.clone()));
        assert_eq!(EnvRules::merged(None, None), None);
    }
}
