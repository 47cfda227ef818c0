//! What a path call needs of the file rules, with Landlock's meaning (see
//! `rules`), and the verdict. Pure: the paths come resolved (`walk`).
//!
//! | call | needs |
//! |---|---|
//! | open for reading | `read` on the file (`list` on a directory) |
//! | open for writing, `O_TRUNC`, `truncate` | `write` on the file |
//! | open `O_CREAT` of a new name, `mkdir`, `mknod`, `symlink` | `create` in its directory (and `write` on the new file when opened for writing) |
//! | `unlink`, `rmdir` | `delete` in its directory |
//! | `rename` | `delete` where it was, `create` where it goes (and `delete` there when it replaces a name), and the file gains no right by moving (else `EXDEV`) |
//! | `link` | `create` where the new name goes, no right gained (else `EXDEV`) |
//! | `chmod`, `chown`, `utime*`, `*xattr` | `write` on the file (Landlock has no such right; agentsh's own files need it) |
//! | `mknod` of a device | refused while `create` is handled (Landlock never grants devices) |
//!
//! `O_PATH` opens read and write nothing (Landlock does not check them).
//! A path the kernel would not find is answered with the kernel's errno,
//! without an event. An object with no path (a pipe or socket reopened
//! through `/proc/<pid>/fd`, a memfd) is no file the rules name.
//!
//! Failure modes: none; pure.

use super::rules::FileRules;
use crate::tracee::walk::parent_of;
use agentsh_proto::fileabi::{FileOp, FileSyscall};
use agentsh_proto::FsAccess;

pub const O_ACCMODE: u64 = 0o3;
pub const O_WRONLY: u64 = 0o1;
pub const O_RDWR: u64 = 0o2;
pub const O_CREAT: u64 = 0o100;
pub const O_EXCL: u64 = 0o200;
pub const O_TRUNC: u64 = 0o1000;
pub const O_NOFOLLOW: u64 = 0o400000;
pub const O_PATH: u64 = 0o10000000;
/// `O_TMPFILE` (with `O_DIRECTORY`).
pub const O_TMPFILE: u64 = 0o20200000;
pub const AT_SYMLINK_NOFOLLOW: u64 = 0x100;
pub const AT_SYMLINK_FOLLOW: u64 = 0x400;
pub const AT_EMPTY_PATH: u64 = 0x1000;
pub const RENAME_EXCHANGE: u64 = 2;

/// A call's flags as read (registers, or `open_how` for `openat2`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Flags {
    /// `open` flags (`creat`: `O_CREAT|O_WRONLY|O_TRUNC`).
    pub open: u64,
    /// `*at` flags.
    pub at: u64,
    /// `mknod`'s mode.
    pub mode: u64,
    /// `renameat2`'s flags.
    pub rename: u64,
}

/// What a path named, as the judge needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Named {
    /// An existing file (`dir`: a directory) at a canonical path.
    Exists { path: String, dir: bool },
    /// An object with no path (a pipe, a socket, a memfd, a deleted file).
    Anonymous,
    /// A new name: the canonical path it would have.
    Absent { path: String },
    /// The kernel would fail the call with this errno.
    Kernel(i32),
}

/// The verdict on a path call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    Allow,
    /// Not done, answered with the kernel's own errno (no event).
    Kernel(i32),
    /// Refused by the file rules.
    Deny(Denial),
}

/// Why the file rules refuse a call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Denial {
    /// The right missing (`None`: a device node).
    pub right: Option<FsAccess>,
    /// `file_rules`, or `read_only_files` (a place kept read-only by a
    /// mount in the tree's namespace: the kernel's answer is `EROFS`).
    pub rule: crate::vocab::Refusal,
    /// Where it is missing.
    pub path: String,
    pub errno: i32,
    pub reason: String,
}

/// Whether the call is judged at all: `O_PATH` opens and `utimensat` on
/// an fd (a NULL path) name nothing the rules keep.
pub fn needs_judging(call: &FileSyscall, flags: Flags, path_ptr: u64) -> bool {
    if call.op == FileOp::Open && flags.open & O_PATH != 0 {
        return false;
    }
    !(call.op == FileOp::Attr && path_ptr == 0 && call.dirfd.is_some())
}

/// Whether the first path's last symlink is followed.
pub fn follows_first(call: &FileSyscall, flags: Flags) -> bool {
    match call.op {
        FileOp::Open | FileOp::Creat => {
            let f = open_flags(call, flags);
            f & O_NOFOLLOW == 0 && f & (O_CREAT | O_EXCL) != O_CREAT | O_EXCL
        }
        FileOp::Truncate => true,
        FileOp::Attr => !call.nofollow && flags.at & AT_SYMLINK_NOFOLLOW == 0,
        FileOp::Link => flags.at & AT_SYMLINK_FOLLOW != 0,
        FileOp::Unlink | FileOp::Rmdir | FileOp::Rename => false,
        FileOp::Mkdir | FileOp::Mknod | FileOp::Symlink => false,
    }
}

/// The call only ever makes a new name at its first path: an existing
/// one, whatever it is, fails `EEXIST` (`tracee::walk::Lookup`).
pub fn new_name_only(call: &FileSyscall, flags: Flags) -> bool {
    match call.op {
        FileOp::Open => open_flags(call, flags) & (O_CREAT | O_EXCL) == O_CREAT | O_EXCL,
        FileOp::Mkdir | FileOp::Mknod => true,
        _ => false,
    }
}

/// An empty first path names the dirfd (`AT_EMPTY_PATH`).
pub fn empty_path(call: &FileSyscall, flags: Flags) -> bool {
    call.at_flags.is_some() && flags.at & AT_EMPTY_PATH != 0
}

/// The open flags a call acts with.
pub fn open_flags(call: &FileSyscall, flags: Flags) -> u64 {
    if call.op == FileOp::Creat {
        O_CREAT | O_WRONLY | O_TRUNC
    } else {
        flags.open
    }
}

/// The verdict on `call` (see the module doc). `first` is the path the
/// call acts on (for `symlink`, its new name is `second`: the first is
/// its text); `second` the second path of `rename` and `link`.
/// `right` at `path`, or why not (a read-only place's `EROFS`, else the
/// rules' `EACCES`).
fn need_right(
    rules: &FileRules,
    call: &FileSyscall,
    right: FsAccess,
    path: &str,
    what: &str,
) -> Result<(), Denial> {
    if let Some(d) = read_only(rules, call, right, path, what) {
        return Err(d);
    }
    if rules.allows(right, path) {
        return Ok(());
    }
    Err(Denial {
        rule: crate::vocab::Refusal::FileRules,
        right: Some(right),
        path: path.to_string(),
        errno: libc::EACCES,
        reason: format!("{what} {path}: no {} right there", right_name(right)),
    })
}

/// A new name that is a place kept read-only which did not exist when the
/// tree started (`~/.bash_login`, `~/.gitconfig` not there yet): no mount
/// can cover it, so the supervisor refuses its creation (`EROFS`, as a
/// cover would). Best effort: the name is judged as the supervisor
/// resolves it, and the kernel resolves it again (a symlink in the path
/// flipped between the two is not seen).
fn kept_absent(
    rules: &FileRules,
    call: &FileSyscall,
    flags: Flags,
    first: &Named,
    second: Option<&Named>,
) -> Option<Denial> {
    let new = match (call.op, first, second) {
        (FileOp::Open, Named::Absent { path }, _) if open_flags(call, flags) & O_CREAT != 0 => path,
        (FileOp::Creat | FileOp::Mkdir | FileOp::Mknod, Named::Absent { path }, _) => path,
        (FileOp::Symlink | FileOp::Link | FileOp::Rename, _, Some(Named::Absent { path })) => path,
        _ => return None,
    };
    let put_in_place = matches!(call.op, FileOp::Symlink | FileOp::Rename);
    if let Some(at) = rules.absent_parent(new).filter(|_| put_in_place) {
        return Some(Denial {
            rule: crate::vocab::Refusal::ReadOnlyFiles,
            right: Some(FsAccess::Create),
            path: new.clone(),
            errno: libc::EROFS,
            reason: format!(
                "{new} is on the way to {at}, kept read-only even before it exists: it may be \
                 made as a directory, not put in place by a link or a move (agentsh wrap \
                 --writable gives it back)"
            ),
        });
    }
    let at = rules.absent_kept(new)?;
    Some(Denial {
        rule: crate::vocab::Refusal::ReadOnlyFiles,
        right: Some(FsAccess::Create),
        path: new.clone(),
        errno: libc::EROFS,
        reason: format!(
            "{at} is kept read-only, even before it exists: code written there runs later, \
             outside agentsh (agentsh wrap --writable gives it back)"
        ),
    })
}

/// A change at `path` beneath a place the tree's mount namespace keeps
/// read-only (`read_only_files`): the kernel answers `EROFS`; said so here,
/// with the rule. Only for the calls whose answer there is `EROFS` (a move
/// or link across the mount is `EXDEV`, the kernel's to give).
fn read_only(
    rules: &FileRules,
    call: &FileSyscall,
    right: FsAccess,
    path: &str,
    what: &str,
) -> Option<Denial> {
    let changes = matches!(right, FsAccess::Write | FsAccess::Create | FsAccess::Delete);
    let ops = !matches!(call.op, FileOp::Rename | FileOp::Link | FileOp::Attr);
    if !changes || !ops {
        return None;
    }
    let at = rules.read_only_at(path)?;
    Some(Denial {
        rule: crate::vocab::Refusal::ReadOnlyFiles,
        right: Some(right),
        path: path.to_string(),
        errno: libc::EROFS,
        reason: format!(
            "{at} is kept read-only: code written there runs later, outside agentsh \
             (agentsh wrap --writable gives it back); {what} {path}"
        ),
    })
}

pub fn judge(
    rules: &FileRules,
    call: &FileSyscall,
    flags: Flags,
    first: &Named,
    second: Option<&Named>,
) -> Verdict {
    if let Some(d) = kept_absent(rules, call, flags, first, second) {
        return Verdict::Deny(d);
    }
    let need = |right: FsAccess, path: &str, what: &str| need_right(rules, call, right, path, what);
    let done = |r: Result<(), Denial>| match r {
        Ok(()) => Verdict::Allow,
        Err(d) => Verdict::Deny(d),
    };
    match call.op {
        FileOp::Open | FileOp::Creat => done(open(call, flags, first, &need)),
        FileOp::Truncate | FileOp::Attr => match first {
            Named::Exists { path, dir } => {
                if call.op == FileOp::Truncate && *dir {
                    return Verdict::Allow; // EISDIR from the kernel
                }
                let what = if call.op == FileOp::Truncate {
                    "truncate"
                } else {
                    "change"
                };
                done(need(FsAccess::Write, path, what))
            }
            Named::Anonymous => Verdict::Allow,
            Named::Absent { .. } => Verdict::Kernel(libc::ENOENT),
            Named::Kernel(e) => Verdict::Kernel(*e),
        },
        FileOp::Unlink | FileOp::Rmdir => match first {
            Named::Exists { path, .. } => {
                done(need(FsAccess::Delete, &parent_of(path), "remove in"))
            }
            Named::Anonymous => Verdict::Kernel(libc::ENOENT),
            Named::Absent { .. } => Verdict::Kernel(libc::ENOENT),
            Named::Kernel(e) => Verdict::Kernel(*e),
        },
        FileOp::Mkdir | FileOp::Mknod => match first {
            Named::Absent { path } => {
                let kind = flags.mode & u64::from(libc::S_IFMT);
                let device = call.op == FileOp::Mknod
                    && (kind == u64::from(libc::S_IFCHR) || kind == u64::from(libc::S_IFBLK));
                if device && rules.handles(FsAccess::Create) {
                    return Verdict::Deny(Denial {
                        rule: crate::vocab::Refusal::FileRules,
                        right: None,
                        path: path.clone(),
                        errno: libc::EACCES,
                        reason: format!("make a device node {path}: never allowed"),
                    });
                }
                done(need(FsAccess::Create, &parent_of(path), "create in"))
            }
            Named::Exists { .. } | Named::Anonymous => Verdict::Kernel(libc::EEXIST),
            Named::Kernel(e) => Verdict::Kernel(*e),
        },
        FileOp::Symlink => match second {
            Some(Named::Absent { path }) => {
                done(need(FsAccess::Create, &parent_of(path), "create in"))
            }
            Some(Named::Kernel(e)) => Verdict::Kernel(*e),
            _ => Verdict::Kernel(libc::EEXIST),
        },
        FileOp::Link => link(rules, first, second, &need),
        FileOp::Rename => rename(rules, flags, first, second, &need),
    }
}

type Need<'a> = dyn Fn(FsAccess, &str, &str) -> Result<(), Denial> + 'a;

fn open(call: &FileSyscall, flags: Flags, first: &Named, need: &Need) -> Result<(), Denial> {
    let f = open_flags(call, flags);
    let acc = f & O_ACCMODE;
    let writes = acc == O_WRONLY || acc == O_RDWR || f & O_TRUNC != 0;
    let reads = acc == 0 || acc == O_RDWR;
    match first {
        Named::Exists { path, dir: true } => {
            if f & O_TMPFILE == O_TMPFILE {
                need(FsAccess::Create, path, "create in")?;
                return need(FsAccess::Write, path, "write a new file in");
            }
            // Writing a directory is EISDIR from the kernel.
            if reads {
                need(FsAccess::List, path, "list")?;
            }
            Ok(())
        }
        Named::Exists { path, dir: false } => {
            if reads {
                need(FsAccess::Read, path, "read")?;
            }
            if writes {
                need(FsAccess::Write, path, "write")?;
            }
            Ok(())
        }
        Named::Anonymous => Ok(()),
        Named::Absent { path } => {
            if f & O_CREAT == 0 {
                return Ok(()); // ENOENT from the kernel
            }
            need(FsAccess::Create, &parent_of(path), "create in")?;
            if writes {
                need(FsAccess::Write, path, "write")?;
            }
            if reads {
                need(FsAccess::Read, path, "read")?;
            }
            Ok(())
        }
        Named::Kernel(_) => Ok(()),
    }
}

fn link(rules: &FileRules, first: &Named, second: Option<&Named>, need: &Need) -> Verdict {
    let from = match first {
        Named::Exists { path, dir: false } => path,
        Named::Exists { dir: true, .. } => return Verdict::Kernel(libc::EPERM),
        Named::Anonymous => return Verdict::Kernel(libc::ENOENT),
        Named::Absent { .. } => return Verdict::Kernel(libc::ENOENT),
        Named::Kernel(e) => return Verdict::Kernel(*e),
    };
    let to = match second {
        Some(Named::Absent { path }) => path,
        Some(Named::Kernel(e)) => return Verdict::Kernel(*e),
        _ => return Verdict::Kernel(libc::EEXIST),
    };
    if let Err(d) = need(FsAccess::Create, &parent_of(to), "create in") {
        return Verdict::Deny(d);
    }
    refer(rules, from, to)
}

fn rename(
    rules: &FileRules,
    flags: Flags,
    first: &Named,
    second: Option<&Named>,
    need: &Need,
) -> Verdict {
    let from = match first {
        Named::Exists { path, .. } => path,
        Named::Anonymous | Named::Absent { .. } => return Verdict::Kernel(libc::ENOENT),
        Named::Kernel(e) => return Verdict::Kernel(*e),
    };
    let (to, replaces) = match second {
        Some(Named::Absent { path }) => (path, false),
        Some(Named::Exists { path, .. }) => (path, true),
        Some(Named::Kernel(e)) => return Verdict::Kernel(*e),
        Some(Named::Anonymous) | None => return Verdict::Kernel(libc::ENOENT),
    };
    let exchange = flags.rename & RENAME_EXCHANGE != 0;
    let mut checks = vec![
        (FsAccess::Delete, parent_of(from), "remove in"),
        (FsAccess::Create, parent_of(to), "create in"),
    ];
    if replaces {
        checks.push((FsAccess::Delete, parent_of(to), "replace in"));
    }
    if exchange {
        checks.push((FsAccess::Create, parent_of(from), "create in"));
    }
    for (right, at, what) in checks {
        if let Err(d) = need(right, &at, what) {
            return Verdict::Deny(d);
        }
    }
    match refer(rules, from, to) {
        Verdict::Allow if exchange => refer(rules, to, from),
        v => v,
    }
}

/// The file at `from` would gain a right at `to`: `EXDEV`, as Landlock.
fn refer(rules: &FileRules, from: &str, to: &str) -> Verdict {
    if rules.may_move(from, to) {
        return Verdict::Allow;
    }
    let gained: Vec<&str> = rules
        .rights_at(to)
        .into_iter()
        .filter(|r| !rules.rights_at(from).contains(r))
        .map(right_name)
        .collect();
    Verdict::Deny(Denial {
        rule: crate::vocab::Refusal::FileRules,
        right: None,
        path: to.to_string(),
        errno: libc::EXDEV,
        reason: format!(
            "move {from} to {to}: it would gain the {} right there",
            gained.join(", ")
        ),
    })
}

pub fn right_name(r: FsAccess) -> &'static str {
    match r {
        FsAccess::Read => "read",
        FsAccess::Write => "write",
        FsAccess::Create => "create",
        FsAccess::Delete => "delete",
        FsAccess::Execute => "execute",
        FsAccess::List => "list",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use agentsh_proto::fileabi::X86_64_FILE_SYSCALLS;
    use FsAccess::*;

    fn rules() -> FileRules {
        FileRules::new(
            vec![Read, Write, Create, Delete, List],
            vec![
                ("/".into(), vec![Read]),
                ("/tmp".into(), vec![Read, Write, Create, Delete]),
            ],
        )
    }

    fn call(name: &str) -> &'static FileSyscall {
        &X86_64_FILE_SYSCALLS
            .iter()
            .find(|(_, c)| c.name == name)
            .unwrap()
            .1
    }

    fn file(p: &str) -> Named {
        Named::Exists {
            path: p.into(),
            dir: false,
        }
    }

    fn new(p: &str) -> Named {
        Named::Absent { path: p.into() }
    }

    fn open_with(flags: u64) -> Flags {
        Flags {
            open: flags,
            ..Flags::default()
        }
    }

    fn denied(v: Verdict) -> Option<i32> {
        match v {
            Verdict::Deny(d) => Some(d.errno),
            _ => None,
        }
    }

    #[test]
    fn opens() {
        let r = rules();
        let o = call("openat");
        let shim = file("/etc/agentsh/shim.conf");
        assert_eq!(judge(&r, o, open_with(0), &shim, None), Verdict::Allow);
        for f in [O_WRONLY, O_RDWR, O_TRUNC, O_WRONLY | O_CREAT] {
            assert_eq!(
                denied(judge(&r, o, open_with(f), &shim, None)),
                Some(libc::EACCES),
                "{f:o}"
            );
        }
        assert_eq!(
            judge(&r, o, open_with(O_WRONLY | O_CREAT), &new("/tmp/x"), None),
            Verdict::Allow
        );
        assert!(denied(judge(
            &r,
            o,
            open_with(O_WRONLY | O_CREAT),
            &new("/etc/x"),
            None
        ))
        .is_some());
        assert_eq!(
            judge(&r, call("creat"), Flags::default(), &file("/tmp/y"), None),
            Verdict::Allow
        );
        assert!(denied(judge(
            &r,
            call("creat"),
            Flags::default(),
            &file("/etc/y"),
            None
        ))
        .is_some());
        // A pipe reopened through /proc: no rule names it.
        assert_eq!(
            judge(&r, o, open_with(O_WRONLY), &Named::Anonymous, None),
            Verdict::Allow
        );
        assert!(!needs_judging(o, open_with(O_PATH | O_WRONLY), 1));
        assert!(!follows_first(o, open_with(O_CREAT | O_EXCL)));
        assert!(follows_first(o, open_with(O_CREAT)));
        assert!(!follows_first(o, open_with(O_NOFOLLOW)));
        // Only a call that can make nothing but a new name skips the last
        // name's look (an existing one is EEXIST whatever it is).
        assert!(new_name_only(o, open_with(O_CREAT | O_EXCL | O_WRONLY)));
        assert!(!new_name_only(o, open_with(O_CREAT | O_WRONLY)));
        assert!(!new_name_only(o, open_with(O_EXCL)));
        assert!(!new_name_only(call("creat"), Flags::default()));
        assert!(new_name_only(call("mkdirat"), Flags::default()));
        assert!(!new_name_only(call("unlinkat"), Flags::default()));
    }

    #[test]
    fn names_made_and_removed() {
        let r = rules();
        assert!(denied(judge(
            &r,
            call("unlink"),
            Flags::default(),
            &file("/etc/agentsh/shim.conf"),
            None
        ))
        .is_some());
        assert_eq!(
            judge(&r, call("unlink"), Flags::default(), &file("/tmp/a"), None),
            Verdict::Allow
        );
        assert_eq!(
            judge(&r, call("mkdir"), Flags::default(), &new("/tmp/d"), None),
            Verdict::Allow
        );
        assert_eq!(
            judge(&r, call("mkdir"), Flags::default(), &file("/tmp/d"), None),
            Verdict::Kernel(libc::EEXIST)
        );
        let dev = Flags {
            mode: u64::from(libc::S_IFCHR),
            ..Flags::default()
        };
        assert!(denied(judge(&r, call("mknod"), dev, &new("/tmp/null"), None)).is_some());
        let fifo = Flags {
            mode: u64::from(libc::S_IFIFO),
            ..Flags::default()
        };
        assert_eq!(
            judge(&r, call("mknod"), fifo, &new("/tmp/p"), None),
            Verdict::Allow
        );
        assert!(denied(judge(
            &r,
            call("symlink"),
            Flags::default(),
            &Named::Anonymous,
            Some(&new("/etc/l"))
        ))
        .is_some());
        assert!(denied(judge(
            &r,
            call("chmod"),
            Flags::default(),
            &file("/usr/bin/agentsh"),
            None
        ))
        .is_some());
        assert_eq!(
            judge(&r, call("chmod"), Flags::default(), &file("/tmp/s"), None),
            Verdict::Allow
        );
    }

    #[test]
    fn renames_and_links_gain_no_right() {
        let r = rules();
        let rn = call("renameat2");
        // Out of /etc: no delete right there.
        assert_eq!(
            denied(judge(
                &r,
                rn,
                Flags::default(),
                &file("/etc/agentsh/shim.conf"),
                Some(&new("/tmp/s"))
            )),
            Some(libc::EACCES)
        );
        // Over shim.conf: no create right in /etc.
        assert!(denied(judge(
            &r,
            rn,
            Flags::default(),
            &file("/tmp/s"),
            Some(&file("/etc/agentsh/shim.conf"))
        ))
        .is_some());
        assert_eq!(
            judge(
                &r,
                rn,
                Flags::default(),
                &file("/tmp/a"),
                Some(&new("/tmp/b"))
            ),
            Verdict::Allow
        );
        // A hard link of shim.conf into /tmp would be writable there.
        assert_eq!(
            denied(judge(
                &r,
                call("link"),
                Flags::default(),
                &file("/etc/agentsh/shim.conf"),
                Some(&new("/tmp/s"))
            )),
            Some(libc::EXDEV)
        );
        assert_eq!(
            judge(
                &r,
                call("link"),
                Flags::default(),
                &file("/tmp/a"),
                Some(&new("/tmp/b"))
            ),
            Verdict::Allow
        );
    }
}
