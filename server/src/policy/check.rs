//! What `agentsh policy check` says of a policy: a human summary of what
//! each section compiles to, the command rules no input can reach, and,
//! for a file, whether its denied paths can be carved out on this machine.
//!
//! Failure modes: [`check_file`] fails as loading does, or with an
//! `Invalid` error for a denied path Landlock could not carve here (saying
//! what to write instead); the summary and the warnings cannot fail.

use super::compile::DepthRange;
use super::error::PolicyError;
use super::loaded::Policy;
use super::schema::{Decision, NetworkDirection};
use super::{egress, env, landlock, pattern, semantics};
use std::fmt::Write as _;
use std::path::Path;

impl Policy {
    /// Rules that can never decide anything: an earlier rule (first match
    /// wins) matches every program they name, at every depth they apply
    /// to, whatever the arguments. Conservative: a warning means the later
    /// rule is unreachable for every input; a rule not listed may still be.
    pub fn shadowed_rules(&self) -> Vec<String> {
        let mut out = Vec::new();
        if let Some(e) = &self.egress {
            out.extend(e.unbuilt());
        }
        for (j, later) in self.command_rules.iter().enumerate() {
            let shadow = self.command_rules[..j].iter().find(|earlier| {
                earlier.args_patterns.is_empty()
                    && earlier.depth.min <= later.depth.min
                    && later.depth.max <= earlier.depth.max
                    && later
                        .commands_text
                        .iter()
                        .all(|c| covers(&earlier.commands, &earlier.commands_text, c))
            });
            if let Some(earlier) = shadow {
                out.push(format!(
                    "rule {:?} is never reached: the earlier rule {:?} ({}) matches every \
                     program it names ({}), at every depth, whatever the arguments; move it \
                     above {:?} or narrow {:?}",
                    later.name,
                    earlier.name,
                    earlier.decision,
                    later.commands_text.join(" "),
                    earlier.name,
                    earlier.name
                ));
            }
        }
        out
    }

    /// A human summary, as `agentsh policy check` prints it.
    pub fn summary(&self) -> String {
        let mut s = String::new();
        self.summarize_head(&mut s);
        self.summarize_commands(&mut s);
        self.summarize_files(&mut s);
        self.summarize_network(&mut s);
        self.summarize_families_env_egress(&mut s);
        self.summarize_sockets_and_syscalls(&mut s);
        s
    }

    /// `summary`'s first lines: the name, the defaults, the bypass.
    fn summarize_head(&self, s: &mut String) {
        let _ = writeln!(*s, "policy {:?} ({}): OK", self.name, self.origin);
        if let Some(d) = &self.description {
            let _ = writeln!(*s, "  {}", d.trim());
        }
        let _ = writeln!(*s, "  default: {}", self.default);
        let _ = writeln!(*s, "  unparsable wrappers: {}", self.unparsable_wrapper);
        let _ = writeln!(
            *s,
            "  internal_bypass: {} pattern(s)",
            self.internal_bypass.len()
        );
    }

    /// `summary`'s command rules, one line each, in order.
    fn summarize_commands(&self, s: &mut String) {
        let _ = writeln!(
            *s,
            "  command_rules: {} (first match wins)",
            self.command_rules.len()
        );
        for (i, r) in self.command_rules.iter().enumerate() {
            let args = if r.args_patterns.is_empty() {
                String::new()
            } else {
                format!(", {} args pattern(s)", r.args_patterns.len())
            };
            let depth = if r.depth == DepthRange::ANY {
                String::new()
            } else {
                format!(", {}", r.depth.describe())
            };
            let to = r
                .redirect_to
                .as_deref()
                .map_or_else(String::new, |t| format!(" -> {t}"));
            let _ = writeln!(
                *s,
                "    {:>2}. {:<7} {} [{}{depth}{args}]{to}",
                i + 1,
                r.decision.as_str(),
                r.name,
                r.commands_text.join(" "),
            );
        }
    }

    /// `summary`'s socket families, environment and egress sections.
    fn summarize_families_env_egress(&self, s: &mut String) {
        let _ = writeln!(
            *s,
            "  socket_families: {}",
            match &self.socket_families {
                None => "not restricted".to_string(),
                Some(f) => format!(
                    "{} (others fail with EAFNOSUPPORT)",
                    f.iter()
                        .map(|&n| egress::family_name(n).map_or(n.to_string(), str::to_string))
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            }
        );
        if let Some(e) = &self.env {
            let _ = writeln!(*s, "  {}", env::describe(e));
        }
        let c = &self.credential_files;
        if !c.hide.is_empty() {
            let _ = writeln!(
                *s,
                "  credential_files: hidden in every home ({}); where no mount namespace: {}",
                c.hide.join(", "),
                match c.fallback {
                    super::credential_files::Fallback::Carve => "read denied by Landlock (carve)",
                    super::credential_files::Fallback::Readable => "READABLE",
                }
            );
        }
        match &self.egress {
            None => {
                let _ = writeln!(*s, "  egress: none (destinations are not judged)");
            }
            Some(e) => {
                for l in e.describe() {
                    let _ = writeln!(*s, "  {l}");
                }
            }
        }
    }

    /// `summary`'s last lines: daemon sockets and the extra blocklist (no
    /// newline after the last).
    fn summarize_sockets_and_syscalls(&self, s: &mut String) {
        let _ = writeln!(
            *s,
            "  daemon_sockets: the built-in list{}{}",
            if self.daemon_sockets.deny.is_empty() {
                String::new()
            } else {
                format!(" + {}", self.daemon_sockets.deny.join(", "))
            },
            if self.daemon_sockets.allow.is_empty() {
                String::new()
            } else {
                format!(", except {}", self.daemon_sockets.allow.join(", "))
            }
        );
        if self.reads_unjudged {
            let _ = writeln!(
                *s,
                "  tracer_reads: unjudged (under the tracer without Landlock: {})",
                Self::reads_unjudged_cost()
            );
        }
        let _ = write!(
            *s,
            "  syscalls.block: {}",
            if self.blocked_syscalls.is_empty() {
                "-".to_string()
            } else {
                self.blocked_syscalls.join(", ")
            }
        );
    }

    /// `summary`'s file section: what each operation compiles to.
    fn summarize_files(&self, s: &mut String) {
        let _ = writeln!(
            *s,
            "  file_rules: {} (Landlock; write/create/delete beneath agentsh's own and system \
             files are always denied)",
            self.file_rules.len()
        );
        for op in semantics::FILE_OPERATIONS {
            let paths = |d: Decision| {
                self.file_rules
                    .iter()
                    .filter(|r| r.decision == d && r.operations.contains(&op))
                    .flat_map(|r| r.paths.iter().map(String::as_str))
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            let (allowed, denied) = (paths(Decision::Allow), paths(Decision::Deny));
            let text = match semantics::file_op_kind(&self.file_rules, op) {
                semantics::FileOpKind::Open => "not restricted by the policy".to_string(),
                semantics::FileOpKind::AllowList if denied.is_empty() => {
                    format!("allowed only beneath {allowed}")
                }
                semantics::FileOpKind::AllowList => {
                    format!("allowed only beneath {allowed}, except beneath {denied}")
                }
                semantics::FileOpKind::DenyList => {
                    format!("allowed everywhere except beneath {denied} (deny-only)")
                }
            };
            let _ = writeln!(*s, "    {}: {text}", semantics::op_name(op));
        }
    }

    /// `summary`'s network section: what each TCP direction compiles to.
    fn summarize_network(&self, s: &mut String) {
        let _ = writeln!(*s, "  network_rules: {}", self.network_rules.len());
        let mut warnings = Vec::new();
        for (what, dir) in [
            ("connect", NetworkDirection::Connect),
            ("bind", NetworkDirection::Bind),
        ] {
            let ports = landlock::tcp_ports(&self.network_rules, dir, &mut warnings);
            let text = match ports {
                None if what == "connect" => {
                    "unrestricted (the server's API port stays reachable)".to_string()
                }
                None => "unrestricted".to_string(),
                Some(p) if p.is_empty() => "closed".to_string(),
                Some(p) => format!("only {p:?}"),
            };
            let _ = writeln!(*s, "    TCP {what}: {text}");
        }
        for w in warnings {
            let _ = writeln!(*s, "    warning: {w}");
        }
    }
}

/// Whether the patterns `earlier` (their texts `texts`) match every
/// program the command entry `entry` matches: an absolute path is matched
/// as that program; a bare name (which matches that name in any directory,
/// and a payload named so) only by the same name or a basename glob that
/// matches it; a glob or a digest only by the same text.
fn covers(earlier: &[pattern::CommandPattern], texts: &[String], entry: &str) -> bool {
    if texts.iter().any(|t| t == entry) {
        return true;
    }
    let is_glob = entry.contains(['*', '?', '[']);
    if is_glob || entry.starts_with("sha256:") {
        return texts.iter().any(|t| t == "*");
    }
    if entry.starts_with('/') {
        return earlier
            .iter()
            .any(|p| p.matches(&pattern::ProgramName::exec(entry)));
    }
    earlier
        .iter()
        .zip(texts)
        .any(|(p, t)| !t.contains('/') && p.matches(&pattern::ProgramName::exec(entry)))
}

/// For `agentsh policy check FILE`: the summary, or the error to print.
///
/// Besides loading it, compiles its Landlock rules on this machine's
/// filesystem (with the default config's self-protection, for the calling
/// uid): a denied path that cannot be carved out here (its directory is too
/// big or unreadable, so its operation would be granted nowhere beneath that
/// directory) is an error saying what to write instead.
///
/// # Errors
/// Any error of [`Policy::load`], or `Invalid` for such a path.
pub fn check_file(path: &Path) -> Result<String, PolicyError> {
    let policy = Policy::load(path)?;
    carvable_here(&policy)?;
    let mut s = policy.summary();
    for w in policy.shadowed_rules() {
        let _ = write!(s, "\n  warning: {w}");
    }
    Ok(s)
}

fn carvable_here(policy: &Policy) -> Result<(), PolicyError> {
    let config = crate::config::Config::default();
    let ruleset =
        landlock::SessionLandlock::for_server(std::sync::Arc::new(policy.clone()), &config, None);
    // SAFETY: geteuid has no preconditions.
    let uid = unsafe { libc::geteuid() };
    let compiled = ruleset.compile(uid);
    let Some((failure, (denied, rule))) = compiled
        .carve_failures
        .iter()
        .find_map(|f| f.denied_by_policy.first().map(|d| (f, d)))
    else {
        return Ok(());
    };
    let op = format!("{:?}", failure.access).to_lowercase();
    let dir = &failure.dir;
    let why = match failure.entries {
        Some(n) => format!(
            "it has {n} entries and at most {} are granted one by one (each is a rule every \
             shell pays for)",
            landlock::MAX_CARVE_CHILDREN
        ),
        None => "it cannot be listed".to_string(),
    };
    let program = Path::new(denied)
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    Err(PolicyError::Invalid {
        origin: policy.origin().to_string(),
        location: None,
        rule: Some(rule.clone()),
        message: format!(
            "file_rules {rule:?}: on this machine, denying {op} on {denied} means granting {op} \
             on every other entry of {dir}, and {why}: {op} would be granted nowhere beneath \
             {dir}. Deny the whole directory (\"{dir}/**\") or a path in a smaller one instead; \
             to keep a program from running, deny it with a command rule \
             (`commands: [{program}]`, `decision: deny`)"
        ),
    })
}
