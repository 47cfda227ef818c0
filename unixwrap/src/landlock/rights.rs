//! Which Landlock rights each [`FsAccess`] of the config handles and grants.
//!
//! Mapping of [`FsAccess`] to Landlock rights (handled = denied unless a rule
//! grants it; granted = what a rule with that access allows):
//!
//! | FsAccess | handled | granted by a rule |
//! |---|---|---|
//! | read    | ReadFile, ReadDir | same |
//! | write   | WriteFile, Truncate | same |
//! | create  | MakeReg, MakeDir, MakeSym, MakeFifo, MakeSock, Refer, MakeChar, MakeBlock | all but MakeChar, MakeBlock |
//! | delete  | RemoveFile, RemoveDir | same |
//! | execute | Execute | same |
//! | list    | ReadDir | same |
//!
//! Why: device nodes are never grantable (a tree that may create files must
//! not mint `/dev/sda` look-alikes), but they are denied whenever creation is
//! handled. Refer rides with create because the kernel denies cross-directory
//! rename/link whenever any fs right is handled unless Refer is granted, which
//! would break `mv a/x b/`. For the same reason, when fs rights are handled but
//! `create` is not, Refer is handled and granted on `/` (see `plan`).
//! IoctlDev is left unhandled: shells need terminal
//! ioctls and it is not "write" in any sense a policy author means.
//! On a non-directory the rule is narrowed to the rights a file can carry
//! ([`file_rights`]).
//!
//! Failure modes: none; pure tables. A right missing here is a right the
//! ruleset neither handles nor grants, so the tests check that a grant never
//! exceeds what is handled.

use agentsh_proto::FsAccess;
use landlock::{AccessFs, BitFlags};

/// Rights the ruleset handles for one [`FsAccess`].
pub fn handled_rights(a: FsAccess) -> BitFlags<AccessFs> {
    match a {
        FsAccess::Read => AccessFs::ReadFile | AccessFs::ReadDir,
        FsAccess::Write => AccessFs::WriteFile | AccessFs::Truncate,
        FsAccess::Create => granted_rights(a) | AccessFs::MakeChar | AccessFs::MakeBlock,
        FsAccess::Delete => AccessFs::RemoveFile | AccessFs::RemoveDir,
        FsAccess::Execute => AccessFs::Execute.into(),
        FsAccess::List => AccessFs::ReadDir.into(),
    }
}

/// Rights a rule with one [`FsAccess`] grants.
pub fn granted_rights(a: FsAccess) -> BitFlags<AccessFs> {
    match a {
        FsAccess::Create => {
            AccessFs::MakeReg
                | AccessFs::MakeDir
                | AccessFs::MakeSym
                | AccessFs::MakeFifo
                | AccessFs::MakeSock
                | AccessFs::Refer
        }
        FsAccess::Read
        | FsAccess::Write
        | FsAccess::Delete
        | FsAccess::Execute
        | FsAccess::List => handled_rights(a),
    }
}

/// Rights that apply to a non-directory (the kernel's ACCESS_FILE).
pub(crate) fn file_rights() -> BitFlags<AccessFs> {
    AccessFs::Execute | AccessFs::WriteFile | AccessFs::ReadFile | AccessFs::Truncate
}

pub(crate) fn union<T: Copy>(items: &[T], f: fn(T) -> BitFlags<AccessFs>) -> BitFlags<AccessFs> {
    items.iter().fold(BitFlags::empty(), |acc, a| acc | f(*a))
}

#[cfg(test)]
mod tests {
    use super::*;

    const ALL: [FsAccess; 6] = [
        FsAccess::Read,
        FsAccess::Write,
        FsAccess::Create,
        FsAccess::Delete,
        FsAccess::Execute,
        FsAccess::List,
    ];

    #[test]
    fn granted_is_always_within_handled() {
        for a in ALL {
            assert_eq!(
                granted_rights(a) & handled_rights(a),
                granted_rights(a),
                "{a:?}"
            );
        }
    }

    #[test]
    fn device_nodes_are_handled_but_never_granted() {
        let handled = union(&ALL, handled_rights);
        let granted = union(&ALL, granted_rights);
        assert!(handled.contains(AccessFs::MakeChar | AccessFs::MakeBlock));
        assert!(!granted.intersects(AccessFs::MakeChar | AccessFs::MakeBlock));
    }

    #[test]
    fn read_does_not_imply_write() {
        assert!(!handled_rights(FsAccess::Read).intersects(handled_rights(FsAccess::Write)));
        assert!(!handled_rights(FsAccess::Read).contains(AccessFs::Execute));
    }
}
