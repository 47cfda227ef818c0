//! What the supervisor asks the kernel and `/proc` about a caller, behind
//! one trait ([`Host`]), where a failed answer is a refusal: the caller's
//! stat file, its view (root and cwd), a path resolved in it, the `#!`
//! interpreter chain, its maps, and the file behind one of its fds. The
//! supervisor's context holds one `Host`: [`RealHost`] (the functions of
//! this module's siblings, unchanged) in the server, a recording double
//! (`recording`, tests only) in the unit tests, so each fail-closed branch
//! of a family that asks it is tested without root and without a tracee
//! (youki's `Syscall` trait is the model).
//!
//! Kept as small as those tests need: a question whose answer is only ever
//! a fact to judge (not a way to fail) stays a plain call. The memory read
//! (`process_vm_readv`, `MemReader`) is not here: the tests read
//! their own memory, where a bad address fails as a tracee's does.
//!
//! Failure modes: those of the siblings each method calls (said there);
//! the trait adds none. Dispatch is one virtual call per question, no
//! allocation.

use super::maps::Maps;
use super::resolve::{ExecTarget, KeptRoot, ResolveError, View};
use super::shebang::{ChainError, ChainLink};
use super::stat::StatFile;
use std::fs::{File, Metadata};
use std::io;
use std::path::PathBuf;

/// What the kernel and `/proc` answer about a caller (module doc).
pub trait Host: Send + Sync {
    /// Thread `tid`'s `/proc` stat file, opened (read again later).
    ///
    /// # Errors
    /// The thread is gone (ENOENT).
    fn stat_file(&self, tid: u32) -> io::Result<StatFile>;
    /// Thread `tid` (of process `pid`)'s view: its root and cwd, the
    /// tree's kept root while it stands ([`KeptRoot::view`]).
    ///
    /// # Errors
    /// Its root or cwd cannot be opened or read.
    fn view(&self, root: &mut KeptRoot, pid: u32, tid: u32) -> io::Result<View>;
    /// `path` resolved as an exec resolves it in `view` (`resolve_in`).
    ///
    /// # Errors
    /// As `resolve_in`.
    fn resolve(
        &self,
        view: &View,
        dirfd: i32,
        path: &[u8],
        empty_path: bool,
    ) -> Result<ExecTarget, ResolveError>;
    /// The `#!` interpreters the kernel will start for `target`
    /// (`interpreter_chain`).
    ///
    /// # Errors
    /// As `interpreter_chain`.
    fn interpreters(
        &self,
        view: &View,
        target: &ExecTarget,
        script_name: &str,
        argv: &[String],
    ) -> Result<Vec<ChainLink>, ChainError>;
    /// Process `pid`'s mappings ([`Maps::open`]).
    ///
    /// # Errors
    /// As [`Maps::open`].
    fn maps(&self, pid: u32) -> io::Result<Maps>;
    /// The name of the file at thread `tid`'s fd `fd` (its `/proc` link).
    ///
    /// # Errors
    /// The fd is closed, or the thread gone.
    fn fd_name(&self, tid: u32, fd: i32) -> io::Result<PathBuf>;
    /// What `stat` says of the file at thread `tid`'s fd `fd`.
    ///
    /// # Errors
    /// As [`Host::fd_name`].
    fn fd_meta(&self, tid: u32, fd: i32) -> io::Result<Metadata>;
    /// The file at thread `tid`'s fd `fd`, opened for reading
    /// (non-blocking: the caller's fd table is held, so it is the fd's file).
    ///
    /// # Errors
    /// As [`Host::fd_name`], or it cannot be opened.
    fn fd_open(&self, tid: u32, fd: i32) -> io::Result<File>;
}

/// The kernel and `/proc` themselves.
#[derive(Debug, Clone, Copy, Default)]
pub struct RealHost;

/// The `/proc` link of thread `tid`'s fd `fd`.
fn fd_link(tid: u32, fd: i32) -> String {
    format!("/proc/{tid}/fd/{fd}")
}

impl Host for RealHost {
    fn stat_file(&self, tid: u32) -> io::Result<StatFile> {
        StatFile::open(tid)
    }

    fn view(&self, root: &mut KeptRoot, pid: u32, tid: u32) -> io::Result<View> {
        root.view(pid, tid)
    }

    fn resolve(
        &self,
        view: &View,
        dirfd: i32,
        path: &[u8],
        empty_path: bool,
    ) -> Result<ExecTarget, ResolveError> {
        super::resolve::resolve_in(view, dirfd, path, empty_path)
    }

    fn interpreters(
        &self,
        view: &View,
        target: &ExecTarget,
        script_name: &str,
        argv: &[String],
    ) -> Result<Vec<ChainLink>, ChainError> {
        super::shebang::interpreter_chain(view, target, script_name, argv)
    }

    fn maps(&self, pid: u32) -> io::Result<Maps> {
        Maps::open(pid)
    }

    // A tree's fds are read with its owner's credentials where this
    // process has no CAP_SYS_PTRACE (`access::as_owner`): a root server in
    // a container with the default capabilities may not name another
    // uid's fds.
    fn fd_name(&self, tid: u32, fd: i32) -> io::Result<PathBuf> {
        super::access::with_owner(tid, || std::fs::read_link(fd_link(tid, fd)))
    }

    fn fd_meta(&self, tid: u32, fd: i32) -> io::Result<Metadata> {
        super::access::with_owner(tid, || std::fs::metadata(fd_link(tid, fd)))
    }

    fn fd_open(&self, tid: u32, fd: i32) -> io::Result<File> {
        use std::os::unix::fs::OpenOptionsExt;
        super::access::with_owner(tid, || {
            std::fs::OpenOptions::new()
                .read(true)
                .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC)
                .open(fd_link(tid, fd))
        })
    }
}
