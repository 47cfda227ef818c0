//! Carving: a grant beneath which something is denied becomes grants on the
//! grant's children, recursively, minus the denied path (see `landlock`);
//! every operation's grants carved into the ruleset's path rules.
//!
//! Failure modes: a directory that cannot be listed, or has more than
//! [`MAX_CARVE_CHILDREN`] entries, is not carved: nothing is granted beneath
//! it (a [`CarveFailure`] and a warning); beyond [`MAX_FS_RULES`] path
//! rules, the rest are dropped (a warning).

use super::operations::{Deny, FileOperations};
use super::paths::{at_or_beneath, FsView};
use agentsh_proto::{FsAccess, FsRule};
use std::collections::{BTreeMap, BTreeSet};

/// A directory with more entries than this is not carved (nothing is
/// granted beneath it): the rules would cost every shell start.
pub const MAX_CARVE_CHILDREN: usize = 256;
/// The most filesystem rules one ruleset gets; beyond, grants are dropped.
pub const MAX_FS_RULES: usize = 1024;

/// A directory a grant could not be carved in: nothing is granted beneath it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CarveFailure {
    pub access: FsAccess,
    pub dir: String,
    /// How many entries it has (`None`: it could not be listed).
    pub entries: Option<usize>,
    /// The policy's denied paths beneath it, with their rules (empty when
    /// only agentsh's own protection split it).
    pub denied_by_policy: Vec<(String, String)>,
}

struct Carver<'a> {
    fs: &'a dyn FsView,
    warnings: Vec<String>,
    failures: Vec<CarveFailure>,
    /// Directories split into their children (they keep no grant themselves).
    split: Vec<String>,
}

impl Carver<'_> {
    /// The paths a grant on `p` becomes once every deny is carved out.
    fn carve(&mut self, p: &str, denies: &[Deny], what: FsAccess, out: &mut Vec<String>) {
        for d in denies {
            if at_or_beneath(p, &d.path) && (d.protected || d.path == p) {
                return;
            }
        }
        if !denies
            .iter()
            .any(|d| d.path != p && at_or_beneath(&d.path, p))
        {
            out.push(p.to_string());
            return;
        }
        let children = self.fs.children(p);
        let entries = children.as_ref().map(Vec::len);
        if entries.is_none_or(|n| n > MAX_CARVE_CHILDREN) {
            self.warnings.push(match entries {
                None => format!(
                    "{what:?} on {p}: cannot list it to carve out a denied path; nothing granted there"
                ),
                Some(n) => format!(
                    "{what:?} on {p}: {n} entries is too many to carve out a denied path; \
                     nothing granted there"
                ),
            });
            self.failures.push(CarveFailure {
                access: what,
                dir: p.to_string(),
                entries,
                denied_by_policy: denies
                    .iter()
                    .filter(|d| d.path != p && at_or_beneath(&d.path, p))
                    .filter_map(|d| d.rule.clone().map(|r| (d.path.clone(), r)))
                    .collect(),
            });
            return;
        }
        self.split.push(p.to_string());
        for child in children.unwrap_or_default() {
            self.carve(&child, denies, what, out);
        }
    }
}

/// A protected path strictly beneath `grant` (other than `/`), if any: the
/// grant will be split around it.
fn split_by_protection<'a>(grant: &str, denies: &'a [Deny]) -> Option<&'a str> {
    if grant == "/" {
        return None;
    }
    denies
        .iter()
        .find(|d| d.protected && d.path != grant && at_or_beneath(&d.path, grant))
        .map(|d| d.path.as_str())
}

/// Each operation's grants minus its denies, as path rules (at most
/// [`MAX_FS_RULES`]), and the paths that could not be carved.
pub(super) fn carve_all(
    ops: &FileOperations,
    fs: &dyn FsView,
    warnings: &mut Vec<String>,
) -> (Vec<FsRule>, Vec<CarveFailure>) {
    let mut carver = Carver {
        fs,
        warnings: Vec::new(),
        failures: Vec::new(),
        split: Vec::new(),
    };
    let mut by_path: BTreeMap<String, BTreeSet<FsAccess>> = BTreeMap::new();
    for (op, list) in &ops.grants {
        let d = ops.denies.get(op).map(Vec::as_slice).unwrap_or_default();
        let mut out = Vec::new();
        for g in list {
            if let (Some(name), Some(inner)) = (&g.rule, split_by_protection(&g.path, d)) {
                warnings.push(format!(
                    "file rule {name:?}: {op:?} on {} is split around {inner}, which no tree \
                     may change (agentsh's own or system files): {} and the directories down \
                     to {inner} keep no {op:?} right of their own (nothing can be created in or \
                     removed from them directly); keep agentsh's state and audit log outside \
                     the directories trees work in",
                    g.path, g.path
                ));
            }
            carver.carve(&g.path, d, *op, &mut out);
        }
        for p in out {
            by_path.entry(p).or_default().insert(*op);
        }
        // A directory split for read stays listable (`ls /`); the files of
        // the denied paths stay unreadable (their names do not).
        for p in carver.split.drain(..) {
            if *op == FsAccess::Read {
                by_path.entry(p).or_default().insert(FsAccess::List);
            }
        }
    }
    warnings.append(&mut carver.warnings);
    if by_path.len() > MAX_FS_RULES {
        warnings.push(format!(
            "{} filesystem rules exceed {MAX_FS_RULES}; the rest are dropped",
            by_path.len()
        ));
    }
    let fs_rules = by_path
        .into_iter()
        .take(MAX_FS_RULES)
        .map(|(path, ops)| FsRule {
            path,
            access: ops.into_iter().collect(),
        })
        .collect();
    (fs_rules, carver.failures)
}
