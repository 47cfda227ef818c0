//! One supervised tree and its terms: its session, its root, what it is
//! judged by (its session's rules now: a policy reload replaces them for
//! every running tree, [`LiveRules`]), and the flag that dooms it when its
//! session is ended by force.
//!
//! Failure modes: none; types.

use super::context::SupervisorContext;
use super::exec::identity::IdentityIndex;
use crate::policy::Policy;
use std::sync::Arc;

/// One supervised tree.
pub struct Tree {
    pub session_id: String,
    /// The wrapper's pid: its first exec (of the shell) is depth 0.
    pub root_pid: u32,
    /// Where its programs may not come from (`exec_sources`), checked by
    /// the supervisor as well as by Landlock.
    pub exec_places: crate::policy::landlock::ExecPlaces,
    /// Its session's rules, as a reload leaves them ([`Tree::rules`]).
    live: Arc<LiveRules>,
    /// The policy its filter, ruleset and environment were made from at
    /// its start (a reload cannot change those).
    pub started_with: Arc<Policy>,
    /// Set when its session's trees are killed: any call of the tree that
    /// reaches the supervisor then kills its caller.
    pub doomed: Arc<std::sync::atomic::AtomicBool>,
    /// Its file rules, where the supervisor keeps them (no Landlock: the
    /// filter sends its path calls to the tracer).
    pub files: Option<Arc<super::files::FileRules>>,
    /// Where Landlock keeps them and the supervisor explains what it
    /// refuses: the ruleset, resolved into rules at the tree's first call
    /// that changes a file (most trees make none; resolving costs a
    /// canonicalisation per rule).
    explained: Option<Explained>,
}

/// The places a tree's mounts keep read-only (canonical), and those that
/// did not exist at its start (canonical parent and name).
#[derive(Debug, Default)]
pub struct ReadOnly {
    pub covered: Vec<String>,
    pub absent: Vec<String>,
    /// The missing directories on the way to `absent` ones: made as
    /// directories only (see `FileRules::absent_parent`).
    pub absent_parents: Vec<String>,
}

/// A tree's ruleset as Landlock keeps it, the places its mounts keep
/// read-only, and the rules made of them at its first call that changes a
/// file.
type Explained = (
    Arc<agentsh_proto::LandlockConfig>,
    Arc<ReadOnly>,
    std::sync::OnceLock<super::files::FileRules>,
);

/// What a tree is judged by, given at its wrap-init (see [`Tree`]).
#[derive(Clone)]
pub struct TreeTerms {
    pub exec_places: crate::policy::landlock::ExecPlaces,
    /// Its session's rules (a reload replaces what they hold).
    pub rules: Arc<LiveRules>,
    /// The policy its filter and ruleset are made from.
    pub started_with: Arc<Policy>,
    pub doomed: Arc<std::sync::atomic::AtomicBool>,
    pub files: Option<TreeFiles>,
}

/// Which file rules the supervisor has of a tree.
#[derive(Clone)]
pub enum TreeFiles {
    /// It keeps them (the tracer judges every path call).
    Kept(Arc<super::files::FileRules>),
    /// Landlock keeps them (this ruleset); the supervisor explains, and
    /// the places mounts keep read-only (canonical) too.
    Explained(Arc<agentsh_proto::LandlockConfig>, Arc<ReadOnly>),
}

impl Tree {
    pub fn new(session_id: String, root_pid: u32, terms: TreeTerms) -> Tree {
        Tree {
            session_id,
            root_pid,
            exec_places: terms.exec_places,
            live: terms.rules,
            started_with: terms.started_with,
            doomed: terms.doomed,
            files: match &terms.files {
                Some(TreeFiles::Kept(f)) => Some(Arc::new(f.for_root(root_pid))),
                _ => None,
            },
            explained: match terms.files {
                Some(TreeFiles::Explained(c, ro)) => Some((c, ro, std::sync::OnceLock::new())),
                _ => None,
            },
        }
    }

    /// What the tree is judged by now: its session's rules as the last
    /// policy reload left them (each call reads them once).
    pub fn rules(&self) -> Arc<TreeRules> {
        self.live.current()
    }

    /// The cell its rules are read from (for what reads them later: the
    /// DNS stub).
    pub fn live(&self) -> Arc<LiveRules> {
        self.live.clone()
    }

    /// Its file rules, kept or explained (resolved at the first call).
    pub fn file_rules(&self) -> Option<&super::files::FileRules> {
        if let Some(f) = self.files.as_deref() {
            return Some(f);
        }
        let (config, read_only, rules) = self.explained.as_ref()?;
        Some(rules.get_or_init(|| {
            super::files::FileRules::from_config(config)
                .explaining()
                .with_read_only(
                    read_only.covered.clone(),
                    read_only.absent.clone(),
                    read_only.absent_parents.clone(),
                )
                .for_root(self.root_pid)
        }))
    }
}

/// The policy a tree is judged by, and the identity index of the programs
/// it names: one per session (sessions with the same policy share them).
pub struct TreeRules {
    pub policy: Arc<Policy>,
    pub index: &'static IdentityIndex,
}

/// A session's rules as they are now: every tree of the session holds
/// this cell, and a policy reload (`agentsh policy reload`) replaces what
/// it holds, so each tree's next exec, connect and DNS query are judged by
/// the new policy. What the kernel fixed at a tree's start (its filter,
/// its Landlock ruleset, its environment) stays as it was.
pub struct LiveRules(std::sync::RwLock<Arc<TreeRules>>);

impl LiveRules {
    pub fn new(rules: Arc<TreeRules>) -> Arc<LiveRules> {
        Arc::new(LiveRules(std::sync::RwLock::new(rules)))
    }

    /// The rules now.
    pub fn current(&self) -> Arc<TreeRules> {
        self.0
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// Puts `rules` in place for every tree holding this cell.
    pub fn replace(&self, rules: Arc<TreeRules>) {
        *self
            .0
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = rules;
    }
}

impl crate::dns::PolicyNow for LiveRules {
    fn policy(&self) -> Arc<Policy> {
        self.current().policy.clone()
    }
}

impl TreeRules {
    /// The DNS stub, if the tree's policy sends its DNS there (`dns: stub`).
    pub fn stub<'a>(&self, ctx: &'a SupervisorContext) -> Option<&'a Arc<crate::dns::Stub>> {
        ctx.dns.get().filter(|_| self.policy.wants_dns_stub())
    }
}
