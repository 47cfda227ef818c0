//! Carving: a grant beneath which something is denied becomes grants on the
//! grant's children, recursively, minus the denied path (see `landlock`).

use super::*;

/// A path an operation is granted beneath, and the file rule that granted
/// it (`None`: the operation is open there because no allow restricts it).
pub(super) struct Grant {
    pub(in crate::policy) path: String,
    pub(in crate::policy) rule: Option<String>,
}

pub(super) struct Deny {
    pub(in crate::policy) path: String,
    /// Self-protection: no allow overrides it, however specific.
    pub(in crate::policy) protected: bool,
    /// The file rule that denied it (`None` for self-protection).
    pub(in crate::policy) rule: Option<String>,
}

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

pub(super) struct Carver<'a> {
    pub(in crate::policy) fs: &'a dyn FsView,
    pub(in crate::policy) warnings: Vec<String>,
    pub(in crate::policy) failures: Vec<CarveFailure>,
    /// Directories split into their children (they keep no grant themselves).
    pub(in crate::policy) split: Vec<String>,
}

impl Carver<'_> {
    /// The paths a grant on `p` becomes once every deny is carved out.
    pub(super) fn carve(
        &mut self,
        p: &str,
        denies: &[Deny],
        what: FsAccess,
        out: &mut Vec<String>,
    ) {
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
pub(super) fn split_by_protection<'a>(grant: &str, denies: &'a [Deny]) -> Option<&'a str> {
    if grant == "/" {
        return None;
    }
    denies
        .iter()
        .find(|d| d.protected && d.path != grant && at_or_beneath(&d.path, grant))
        .map(|d| d.path.as_str())
}
