//! `agentsh wrap --agent NAME`: what the agents people run need to work
//! under wrap, so a developer need not find it out: the model API hosts
//! each reaches (allowed on 443, as `--allow-host` does) and the variable
//! holding its key (kept, as `--keep-env` does). Their own configuration
//! directories (`~/.claude`, `~/.codex`, `~/.gemini`, aider's files) stay
//! writable: wrap keeps none of them read-only.
//!
//! Failure modes: an unknown name is an error listing the known ones.

/// One agent's needs.
pub struct Profile {
    pub name: &'static str,
    /// What it is, for `--help` and the error.
    pub about: &'static str,
    pub hosts: &'static [&'static str],
    pub keep_env: &'static [&'static str],
}

/// The known agents.
pub const PROFILES: &[Profile] = &[
    Profile {
        name: "claude-code",
        about: "Anthropic's Claude Code (node; bash -c per tool call; ~/.claude)",
        hosts: &["api.anthropic.com"],
        keep_env: &["ANTHROPIC_API_KEY"],
    },
    Profile {
        name: "codex",
        about: "OpenAI's Codex CLI (sh -lc per command; ~/.codex)",
        hosts: &["api.openai.com", "chatgpt.com"],
        keep_env: &["OPENAI_API_KEY"],
    },
    Profile {
        name: "gemini",
        about: "Google's Gemini CLI (node; ~/.gemini)",
        hosts: &[
            "generativelanguage.googleapis.com",
            "cloudcode-pa.googleapis.com",
            "oauth2.googleapis.com",
        ],
        keep_env: &["GEMINI_API_KEY", "GOOGLE_API_KEY"],
    },
    Profile {
        name: "aider",
        about: "Aider (python subprocess; ~/.aider*)",
        hosts: &["api.openai.com", "api.anthropic.com"],
        keep_env: &["OPENAI_API_KEY", "ANTHROPIC_API_KEY"],
    },
];

/// Why a profile is not there.
#[derive(Debug, thiserror::Error)]
#[error("--agent {0:?}: not an agent wrap knows (known: {known})", known = names())]
pub struct UnknownAgent(pub String);

fn names() -> String {
    PROFILES
        .iter()
        .map(|p| format!("{}: {}", p.name, p.about))
        .collect::<Vec<_>>()
        .join("; ")
}

/// The profile called `name`.
///
/// # Errors
/// No such profile.
pub fn profile(name: &str) -> Result<&'static Profile, UnknownAgent> {
    PROFILES
        .iter()
        .find(|p| p.name == name)
        .ok_or_else(|| UnknownAgent(name.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_profile_names_hosts_and_keys_wrap_accepts() {
        for p in PROFILES {
            assert!(!p.hosts.is_empty() && !p.keep_env.is_empty(), "{}", p.name);
            let hosts: Vec<String> = p.hosts.iter().map(ToString::to_string).collect();
            let keep: Vec<String> = p.keep_env.iter().map(ToString::to_string).collect();
            super::super::derived::derived_with("agent-default", &hosts, &keep, &[], &[], &[])
                .unwrap_or_else(|e| panic!("{}: {e}", p.name));
        }
        assert!(profile("claude-code").is_ok());
        assert!(profile("clippy").is_err_and(|e| e.to_string().contains("claude-code: ")));
    }
}
