//! A tree's file rules as the tracer keeps them where the kernel has no
//! Landlock: the same ruleset unixwrap would give Landlock (the handled
//! rights, and the grants beneath paths), with Landlock's meaning: a right
//! the ruleset handles is allowed at a path only if a grant at that path or
//! one of its ancestors gives it; a right it does not handle is allowed
//! everywhere. Grant paths are canonical (resolved once, when the tree is
//! made), as Landlock ties a rule to the directory it opened.
//!
//! Failure modes: a grant whose path does not exist (or cannot be
//! resolved) grants nothing, as unixwrap skips it.

use agentsh_proto::{FsAccess, LandlockConfig};

/// One tree's file rules (see the module doc).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileRules {
    handled: Vec<FsAccess>,
    /// (canonical path, rights granted at and beneath it).
    grants: Vec<(String, Vec<FsAccess>)>,
    /// Landlock keeps these rules (the notify backend): the family only
    /// explains and audits what Landlock would refuse, and lets every call
    /// it cannot decide through to the kernel.
    explain_only: bool,
    /// Places a mount in the tree's namespace keeps read-only (canonical):
    /// changes beneath them are explained as `read_only_files`.
    read_only: Vec<String>,
    /// Places kept read-only that did not exist when the tree started
    /// (nearest existing directory, canonical, and the names below it):
    /// their creation is refused.
    absent: Vec<String>,
    /// The missing directories on the way to those: a symlink or a rename
    /// may not put one in place (a directory made there is fine).
    absent_parents: Vec<String>,
}

impl FileRules {
    /// The rules of `config`, grant paths resolved in the server's view
    /// (the tree's: the tracer walks only trees whose root is ours); a
    /// grant beneath `/proc/self` names the tree's root process (unixwrap
    /// resolves it there, in the process that becomes the tree's shell):
    /// [`FileRules::for_root`] makes it so.
    pub fn from_config(config: &LandlockConfig) -> FileRules {
        let grants = config
            .fs_rules
            .iter()
            .filter_map(|r| {
                if r.path.starts_with("/proc/self/") {
                    return Some((r.path.clone(), r.access.clone()));
                }
                let path = std::fs::canonicalize(&r.path).ok()?;
                Some((path.to_str()?.to_string(), r.access.clone()))
            })
            .collect();
        FileRules {
            handled: config.handled_fs.clone(),
            grants,
            explain_only: false,
            read_only: Vec::new(),
            absent: Vec::new(),
            absent_parents: Vec::new(),
        }
    }

    /// These rules where Landlock keeps them (see `explain_only`).
    pub fn explaining(self) -> FileRules {
        FileRules {
            explain_only: true,
            ..self
        }
    }

    /// These rules with `paths` kept read-only by mounts (explained as
    /// `read_only_files`).
    pub fn with_read_only(
        self,
        paths: Vec<String>,
        absent: Vec<String>,
        absent_parents: Vec<String>,
    ) -> FileRules {
        FileRules {
            read_only: paths,
            absent,
            absent_parents,
            ..self
        }
    }

    /// The read-only place, not there at the tree's start, that `path` is.
    pub fn absent_kept(&self, path: &str) -> Option<&str> {
        self.absent.iter().find(|a| *a == path).map(String::as_str)
    }

    /// The read-only place, not there at the tree's start, that `path` is
    /// a missing directory on the way to.
    pub fn absent_parent(&self, path: &str) -> Option<&str> {
        if !self.absent_parents.iter().any(|p| p == path) {
            return None;
        }
        self.absent
            .iter()
            .find(|a| a.strip_prefix(path).is_some_and(|r| r.starts_with('/')))
            .map(String::as_str)
    }

    /// The read-only place `path` is at or beneath.
    pub fn read_only_at(&self, path: &str) -> Option<&str> {
        self.read_only
            .iter()
            .find(|ro| at_or_beneath(path, ro))
            .map(String::as_str)
    }

    /// Whether Landlock keeps these rules and the family only explains.
    pub fn explain_only(&self) -> bool {
        self.explain_only
    }

    /// These rules for the tree whose root is `root_pid`: `/proc/self` in a
    /// grant is that process.
    pub fn for_root(&self, root_pid: u32) -> FileRules {
        let grants = self
            .grants
            .iter()
            .map(|(p, a)| match p.strip_prefix("/proc/self/") {
                Some(rest) => (format!("/proc/{root_pid}/{rest}"), a.clone()),
                None => (p.clone(), a.clone()),
            })
            .collect();
        FileRules {
            handled: self.handled.clone(),
            grants,
            explain_only: self.explain_only,
            read_only: self.read_only.clone(),
            absent: self.absent.clone(),
            absent_parents: self.absent_parents.clone(),
        }
    }

    /// Rules already canonical (tests, and callers that resolved them).
    pub fn new(handled: Vec<FsAccess>, grants: Vec<(String, Vec<FsAccess>)>) -> FileRules {
        FileRules {
            handled,
            grants,
            explain_only: false,
            read_only: Vec::new(),
            absent: Vec::new(),
            absent_parents: Vec::new(),
        }
    }

    /// Whether `right` is allowed at canonical `path`.
    pub fn allows(&self, right: FsAccess, path: &str) -> bool {
        if !self.handles(right) {
            return true;
        }
        self.grants
            .iter()
            .filter(|(at, _)| at_or_beneath(path, at))
            .any(|(_, rights)| rights.iter().any(|&r| covers(r, right)))
    }

    /// Whether the ruleset handles `right` at all.
    pub fn handles(&self, right: FsAccess) -> bool {
        self.handled.iter().any(|&h| covers(h, right))
    }

    /// The handled rights allowed at `path`: what a file there has.
    pub fn rights_at(&self, path: &str) -> Vec<FsAccess> {
        ALL_RIGHTS
            .into_iter()
            .filter(|&r| self.handles(r) && self.allows(r, path))
            .collect()
    }

    /// Landlock's rule for a link or rename: the file must not gain a
    /// right by moving (what `to` allows is within what `from` allows).
    pub fn may_move(&self, from: &str, to: &str) -> bool {
        let before = self.rights_at(from);
        self.rights_at(to).iter().all(|r| before.contains(r))
    }
}

const ALL_RIGHTS: [FsAccess; 6] = [
    FsAccess::Read,
    FsAccess::Write,
    FsAccess::Create,
    FsAccess::Delete,
    FsAccess::Execute,
    FsAccess::List,
];

/// `Read` includes `List` (Landlock's ReadDir).
fn covers(granted: FsAccess, asked: FsAccess) -> bool {
    granted == asked || (granted == FsAccess::Read && asked == FsAccess::List)
}

fn at_or_beneath(path: &str, dir: &str) -> bool {
    dir == "/"
        || path == dir
        || path
            .strip_prefix(dir)
            .is_some_and(|rest| rest.starts_with('/'))
}

#[cfg(test)]
mod tests {
    use super::*;
    use FsAccess::*;

    fn rules() -> FileRules {
        FileRules::new(
            vec![Read, Write, Create, Delete, List],
            vec![
                ("/".into(), vec![Read]),
                ("/tmp".into(), vec![Read, Write, Create, Delete]),
                ("/srv/ws".into(), vec![Write, Create]),
                ("/var/lib/agentsh".into(), vec![List]),
            ],
        )
    }

    #[test]
    fn a_handled_right_needs_a_grant_at_or_above() {
        let r = rules();
        assert!(r.allows(Read, "/etc/passwd"));
        assert!(!r.allows(Write, "/etc/passwd"));
        assert!(!r.allows(Write, "/etc/agentsh/shim.conf"));
        assert!(r.allows(Write, "/tmp/x/y"));
        assert!(!r.allows(Write, "/tmpx/y"));
        assert!(r.allows(Create, "/srv/ws"));
        assert!(!r.allows(Delete, "/srv/ws/f"));
        // Read covers List; List alone does not give Read.
        assert!(r.allows(List, "/etc"));
        assert!(
            !FileRules::new(vec![Read, List], vec![("/v".into(), vec![List])]).allows(Read, "/v/f")
        );
        // Unhandled: allowed everywhere.
        assert!(r.allows(Execute, "/etc/x"));
    }

    #[test]
    fn proc_self_in_a_grant_is_the_trees_root() {
        let r = FileRules::new(
            vec![Write],
            vec![("/proc/self/oom_score_adj".into(), vec![Write])],
        )
        .for_root(58);
        assert!(r.allows(Write, "/proc/58/oom_score_adj"));
        assert!(!r.allows(Write, "/proc/59/oom_score_adj"));
        assert!(!r.allows(Write, "/proc/58/mem"));
    }

    #[test]
    fn a_file_may_not_gain_rights_by_moving() {
        let r = rules();
        assert!(r.may_move("/tmp/a", "/tmp/b"));
        assert!(r.may_move("/tmp/a", "/srv/ws/a"));
        assert!(!r.may_move("/etc/agentsh/shim.conf", "/tmp/shim.conf"));
        assert!(!r.may_move("/srv/ws/a", "/tmp/a"));
    }
}
