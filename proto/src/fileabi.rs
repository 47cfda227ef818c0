//! The path system calls the ptrace backend traps where the kernel has no
//! Landlock (gVisor): one table for the filter and the supervisor's files
//! family, as `execabi` is for execs and `netabi` for egress. Each row says
//! what the call does to the filesystem and where its path arguments are.
//!
//! Only x86_64's calls are here (the ptrace backend is x86_64 only): the
//! filter traps the calls by name for every ABI it covers, and a trapped
//! call this table does not know is refused as `unexpected_syscall`.

use crate::execabi::AUDIT_ARCH_X86_64;

/// What a path call does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileOp {
    /// `open`, `openat`, `openat2`: what its flags ask.
    Open,
    /// `creat`: an open with `O_CREAT|O_WRONLY|O_TRUNC`.
    Creat,
    /// `truncate(path, len)`.
    Truncate,
    /// `unlink`, `unlinkat` (with `AT_REMOVEDIR`: a directory).
    Unlink,
    /// `rmdir`: a directory.
    Rmdir,
    /// `rename`, `renameat`, `renameat2`: from the first path to the second.
    Rename,
    /// `link`, `linkat`: a new name (the second path) for the first.
    Link,
    /// `symlink`, `symlinkat`: a new symlink at the second path (the first
    /// is its target's text, not a path of the call).
    Symlink,
    /// `mkdir`, `mkdirat`: a new directory.
    Mkdir,
    /// `mknod`, `mknodat`: a new FIFO, socket, regular file or device.
    Mknod,
    /// A change to an existing file's mode, owner, times or extended
    /// attributes (`chmod*`, `chown*`, `utime*`, `*setxattr`,
    /// `*removexattr`): judged as a write to it (Landlock has no right for
    /// these; agentsh keeps its own files from them too).
    Attr,
}

/// Where a call's arguments are (register indexes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileSyscall {
    /// The call's name (the filter's).
    pub name: &'static str,
    /// What it does.
    pub op: FileOp,
    /// The directory fd the first path is relative to (`None`: the cwd).
    pub dirfd: Option<usize>,
    /// The first path.
    pub path: usize,
    /// The second path (rename, link, symlink) and its directory fd.
    pub path2: Option<(Option<usize>, usize)>,
    /// The open flags (for `openat2`: the `struct open_how` pointer).
    pub flags: Option<usize>,
    /// `*at` flags (`unlinkat`'s `AT_REMOVEDIR`, `linkat`'s `AT_EMPTY_PATH`).
    pub at_flags: Option<usize>,
    /// `mknod`'s mode (the file type asked for).
    pub mode: Option<usize>,
    /// The flags are in a `struct open_how` the register points to.
    pub how: bool,
    /// The call never follows a symlink at the end of its path (`lchown`,
    /// `lsetxattr`, `lremovexattr`); `*at` calls say so in their flags.
    pub nofollow: bool,
}

const fn call(name: &'static str, op: FileOp, path: usize) -> FileSyscall {
    FileSyscall {
        name,
        op,
        dirfd: None,
        path,
        path2: None,
        flags: None,
        at_flags: None,
        mode: None,
        how: false,
        nofollow: false,
    }
}

/// Every trapped path call of x86_64, by number.
pub const X86_64_FILE_SYSCALLS: &[(i32, FileSyscall)] = &[
    (
        2,
        FileSyscall {
            flags: Some(1),
            ..call("open", FileOp::Open, 0)
        },
    ),
    (
        257,
        FileSyscall {
            dirfd: Some(0),
            flags: Some(2),
            ..call("openat", FileOp::Open, 1)
        },
    ),
    (
        437,
        FileSyscall {
            dirfd: Some(0),
            flags: Some(2),
            how: true,
            ..call("openat2", FileOp::Open, 1)
        },
    ),
    (85, call("creat", FileOp::Creat, 0)),
    (76, call("truncate", FileOp::Truncate, 0)),
    (87, call("unlink", FileOp::Unlink, 0)),
    (
        263,
        FileSyscall {
            dirfd: Some(0),
            at_flags: Some(2),
            ..call("unlinkat", FileOp::Unlink, 1)
        },
    ),
    (84, call("rmdir", FileOp::Rmdir, 0)),
    (
        82,
        FileSyscall {
            path2: Some((None, 1)),
            ..call("rename", FileOp::Rename, 0)
        },
    ),
    (
        264,
        FileSyscall {
            dirfd: Some(0),
            path2: Some((Some(2), 3)),
            ..call("renameat", FileOp::Rename, 1)
        },
    ),
    (
        316,
        FileSyscall {
            dirfd: Some(0),
            path2: Some((Some(2), 3)),
            ..call("renameat2", FileOp::Rename, 1)
        },
    ),
    (
        86,
        FileSyscall {
            path2: Some((None, 1)),
            ..call("link", FileOp::Link, 0)
        },
    ),
    (
        265,
        FileSyscall {
            dirfd: Some(0),
            path2: Some((Some(2), 3)),
            at_flags: Some(4),
            ..call("linkat", FileOp::Link, 1)
        },
    ),
    (
        88,
        FileSyscall {
            path2: Some((None, 1)),
            ..call("symlink", FileOp::Symlink, 0)
        },
    ),
    (
        266,
        FileSyscall {
            path2: Some((Some(1), 2)),
            ..call("symlinkat", FileOp::Symlink, 0)
        },
    ),
    (83, call("mkdir", FileOp::Mkdir, 0)),
    (
        258,
        FileSyscall {
            dirfd: Some(0),
            ..call("mkdirat", FileOp::Mkdir, 1)
        },
    ),
    (
        133,
        FileSyscall {
            mode: Some(1),
            ..call("mknod", FileOp::Mknod, 0)
        },
    ),
    (
        259,
        FileSyscall {
            dirfd: Some(0),
            mode: Some(2),
            ..call("mknodat", FileOp::Mknod, 1)
        },
    ),
    (90, call("chmod", FileOp::Attr, 0)),
    (
        268,
        FileSyscall {
            dirfd: Some(0),
            ..call("fchmodat", FileOp::Attr, 1)
        },
    ),
    (
        452,
        FileSyscall {
            dirfd: Some(0),
            at_flags: Some(3),
            ..call("fchmodat2", FileOp::Attr, 1)
        },
    ),
    (92, call("chown", FileOp::Attr, 0)),
    (
        94,
        FileSyscall {
            nofollow: true,
            ..call("lchown", FileOp::Attr, 0)
        },
    ),
    (
        260,
        FileSyscall {
            dirfd: Some(0),
            at_flags: Some(4),
            ..call("fchownat", FileOp::Attr, 1)
        },
    ),
    (132, call("utime", FileOp::Attr, 0)),
    (235, call("utimes", FileOp::Attr, 0)),
    (
        261,
        FileSyscall {
            dirfd: Some(0),
            ..call("futimesat", FileOp::Attr, 1)
        },
    ),
    (
        280,
        FileSyscall {
            dirfd: Some(0),
            at_flags: Some(3),
            ..call("utimensat", FileOp::Attr, 1)
        },
    ),
    (188, call("setxattr", FileOp::Attr, 0)),
    (
        189,
        FileSyscall {
            nofollow: true,
            ..call("lsetxattr", FileOp::Attr, 0)
        },
    ),
    (197, call("removexattr", FileOp::Attr, 0)),
    (
        198,
        FileSyscall {
            nofollow: true,
            ..call("lremovexattr", FileOp::Attr, 0)
        },
    ),
];

/// The names the filter traps (every ABI it covers knows them by name).
pub fn names() -> impl Iterator<Item = &'static str> {
    X86_64_FILE_SYSCALLS.iter().map(|(_, c)| c.name)
}

/// The calls that change names or files and take no open flags (`creat`,
/// `unlink*`, `rmdir`, `rename*`, `link*`, `symlink*`, `mkdir*`,
/// `mknod*`): every call of them changes something Landlock rules on.
pub fn changes() -> impl Iterator<Item = &'static str> {
    X86_64_FILE_SYSCALLS
        .iter()
        .filter(|(_, c)| {
            matches!(
                c.op,
                FileOp::Creat
                    | FileOp::Unlink
                    | FileOp::Rmdir
                    | FileOp::Rename
                    | FileOp::Link
                    | FileOp::Symlink
                    | FileOp::Mkdir
                    | FileOp::Mknod
            )
        })
        .map(|(_, c)| c.name)
}

/// Whether `nr` of ABI `arch` is, on an ABI this table does not judge
/// (i386, x32), one of the calls the filter sends to be explained where
/// Landlock keeps the file rules (an open or one of [`changes`]): such a
/// call goes on to the kernel, which decides.
pub fn explained_change_elsewhere(arch: u32, nr: i32) -> bool {
    const AUDIT_ARCH_I386: u32 = 0x4000_0003;
    const X32_BIT: i32 = 0x4000_0000;
    // open openat creat unlink unlinkat rmdir rename renameat renameat2
    // link linkat symlink symlinkat mkdir mkdirat mknod mknodat
    const I386: [i32; 17] = [
        5, 295, 8, 10, 301, 40, 38, 302, 353, 9, 303, 83, 304, 39, 296, 14, 297,
    ];
    match arch {
        AUDIT_ARCH_I386 => I386.contains(&nr),
        AUDIT_ARCH_X86_64 if nr & X32_BIT != 0 => X86_64_FILE_SYSCALLS
            .iter()
            .any(|(n, c)| *n == nr & !X32_BIT && c.op != FileOp::Attr),
        _ => false,
    }
}

/// The path call `nr` of ABI `arch`, if it is one this table knows.
pub fn classify(arch: u32, nr: i32) -> Option<&'static FileSyscall> {
    if arch != AUDIT_ARCH_X86_64 {
        return None;
    }
    X86_64_FILE_SYSCALLS
        .iter()
        .find(|(n, _)| *n == nr)
        .map(|(_, c)| c)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_name_is_once_and_numbers_are_unique() {
        let mut names: Vec<_> = names().collect();
        names.sort_unstable();
        let n = names.len();
        names.dedup();
        assert_eq!(names.len(), n);
        let mut nrs: Vec<_> = X86_64_FILE_SYSCALLS.iter().map(|(n, _)| *n).collect();
        nrs.sort_unstable();
        nrs.dedup();
        assert_eq!(nrs.len(), n);
        assert_eq!(
            classify(AUDIT_ARCH_X86_64, 257).map(|c| c.name),
            Some("openat")
        );
        assert!(classify(AUDIT_ARCH_X86_64, 0).is_none());
    }

    /// The numbers are the kernel's (libc's table, on x86_64 builds).
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn the_numbers_are_the_kernels() {
        let libc_nr = |name: &str| -> i64 {
            match name {
                "open" => libc::SYS_open,
                "openat" => libc::SYS_openat,
                "openat2" => libc::SYS_openat2,
                "creat" => libc::SYS_creat,
                "truncate" => libc::SYS_truncate,
                "unlink" => libc::SYS_unlink,
                "unlinkat" => libc::SYS_unlinkat,
                "rmdir" => libc::SYS_rmdir,
                "rename" => libc::SYS_rename,
                "renameat" => libc::SYS_renameat,
                "renameat2" => libc::SYS_renameat2,
                "link" => libc::SYS_link,
                "linkat" => libc::SYS_linkat,
                "symlink" => libc::SYS_symlink,
                "symlinkat" => libc::SYS_symlinkat,
                "mkdir" => libc::SYS_mkdir,
                "mkdirat" => libc::SYS_mkdirat,
                "mknod" => libc::SYS_mknod,
                "mknodat" => libc::SYS_mknodat,
                "chmod" => libc::SYS_chmod,
                "fchmodat" => libc::SYS_fchmodat,
                "fchmodat2" => 452,
                "chown" => libc::SYS_chown,
                "lchown" => libc::SYS_lchown,
                "fchownat" => libc::SYS_fchownat,
                "utime" => libc::SYS_utime,
                "utimes" => libc::SYS_utimes,
                "futimesat" => libc::SYS_futimesat,
                "utimensat" => libc::SYS_utimensat,
                "setxattr" => libc::SYS_setxattr,
                "lsetxattr" => libc::SYS_lsetxattr,
                "removexattr" => libc::SYS_removexattr,
                "lremovexattr" => libc::SYS_lremovexattr,
                other => panic!("no libc number for {other}"),
            }
        };
        for (nr, c) in X86_64_FILE_SYSCALLS {
            assert_eq!(i64::from(*nr), libc_nr(c.name), "{}", c.name);
        }
    }
}
