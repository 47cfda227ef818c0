//! Resolving an exec's program the way the kernel will: in the calling
//! thread's view (its root, cwd and fd table, `/proc/<pid>/task/<tid>/…`),
//! never the thread-group leader's and never the server's. An absolute path
//! is opened beneath the thread's root (`openat2` with `RESOLVE_IN_ROOT`;
//! without `openat2`, as on gVisor, only a thread whose root is ours is
//! resolved), a relative one from its cwd or dirfd; `/proc/self` and
//! `/dev/fd` name the tracee. One exec's resolutions share one [`View`].
//!
//! Failure modes: a path that names nothing is [`ResolveError::Missing`]
//! with the kernel's own errno; anything else (the tracee gone, a link that
//! cannot be read) is [`ResolveError::Other`].

use super::file::{fd_meta, FileMeta};
use std::ffi::{CString, OsStr};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::sync::Arc;

/// The program an exec names, resolved in the tracee's view.
#[derive(Debug)]
pub struct ExecTarget {
    /// The path as the tracee named it, made absolute against its cwd (or the
    /// dirfd's path); for `AT_EMPTY_PATH` the fd's link text.
    pub filename: String,
    /// The canonical path of the file (symlinks followed), if it differs.
    pub resolved: Option<String>,
    /// The fd's link text says it is a memfd or a deleted file.
    pub anonymous: bool,
    /// An O_PATH fd on the file (keeps its identity for later checks).
    pub file: OwnedFd,
    /// `fstat` of `file`, taken when it was opened.
    pub meta: FileMeta,
}

impl ExecTarget {
    /// (device, inode) of the file judged.
    pub fn identity(&self) -> (u64, u64) {
        (self.meta.dev, self.meta.ino)
    }

    /// The file's canonical path in the tracee's view.
    pub fn canonical(&self) -> &str {
        self.resolved.as_deref().unwrap_or(&self.filename)
    }
}

/// The `/proc` directory of thread `tid` of process `pid`: its own fd table,
/// cwd and root (which a thread may have unshared from its leader). For the
/// leader itself that is `/proc/<pid>` (cheaper: no task directory to look up).
pub fn task_dir(pid: u32, tid: u32) -> String {
    if pid == tid {
        format!("/proc/{pid}")
    } else {
        format!("/proc/{pid}/task/{tid}")
    }
}

/// Where thread `tid` of process `pid` resolves paths, for the resolutions
/// of one exec (the program, its interpreters, the stability check): its
/// `/proc` directory, and its root, opened and read once. Take a new view
/// after anything that shares the thread's root may have run.
#[derive(Debug)]
pub struct View {
    pid: u32,
    tid: u32,
    task: String,
    root_fd: Arc<OwnedFd>,
    /// The root's path in the server's view (`readlink`).
    root: String,
}

impl View {
    /// Opens thread `tid`'s root and reads where it is.
    ///
    /// # Errors
    /// The thread is gone (ENOENT) or its root cannot be read.
    pub fn open(pid: u32, tid: u32) -> io::Result<View> {
        let _owner = super::access::as_owner(tid);
        let task = task_dir(pid, tid);
        let link = format!("{task}/root");
        let root_fd = Arc::new(open_path(&link)?);
        let root = readlink(&link)?;
        Ok(View {
            pid,
            tid,
            task,
            root_fd,
            root,
        })
    }

    /// The thread's `/proc` directory ([`task_dir`]).
    pub fn task(&self) -> &str {
        &self.task
    }

    /// The prefix that puts a path of the tracee's view into the server's:
    /// empty when the thread's root is `/`, its `/proc/…/root` otherwise.
    pub fn root_prefix(&self) -> String {
        if self.root == "/" {
            String::new()
        } else {
            format!("{}/root", self.task)
        }
    }

    /// Whether the thread's root is still the directory this view opened
    /// (the same mount and inode): a `chroot` by a task sharing the thread's
    /// filesystem context since then would show. `false` when unsure.
    pub fn root_unchanged(&self) -> bool {
        let owner = super::access::as_owner(self.tid);
        let now = open_path(&format!("{}/root", self.task));
        drop(owner);
        let Ok(now) = now else {
            return false;
        };
        match (
            mount_identity(self.root_fd.as_raw_fd()),
            mount_identity(now.as_raw_fd()),
        ) {
            (Ok(a), Ok(b)) => a == b,
            _ => false,
        }
    }

    /// Our view of a path to the tracee's view, when the tracee is chrooted.
    fn strip_root(&self, ours: String) -> String {
        if self.root == "/" {
            return ours;
        }
        match ours.strip_prefix(self.root.as_str()) {
            Some(rest) if rest.starts_with('/') => rest.to_string(),
            _ => ours,
        }
    }
}

/// The root every task of a tree shares until one of them calls `chroot`,
/// opened once from the first exec's caller instead of from each caller's
/// `/proc/<tid>/root` (an open and a `readlink` of a link the new pid's
/// `/proc` does not have yet: about 9 µs an exec).
///
/// Why it is the caller's root: a task's root is the one it was forked
/// with until it calls `chroot`, `pivot_root` or `setns` into a mount
/// namespace, or makes a new mount namespace; the base filter refuses all
/// of those but `chroot`, which it hands to the supervisor, and the tree's
/// thread hears of it ([`KeptRoot::chroot_seen`]) before answering it, so
/// before any root changes. Every task of a tree descends from the process
/// that loaded the filter, whose root was the first caller's. Once a
/// `chroot` is seen (allowed or not) each exec reads its caller's root
/// again, for the rest of the tree's life. A root changed by a task that
/// shares the caller's memory and filesystem context while the exec is
/// being judged is the race guard's question, which compares with the
/// caller's `/proc` root after the freeze ([`View::root_unchanged`]).
#[derive(Debug, Default)]
pub struct KeptRoot {
    kept: Option<(Arc<OwnedFd>, String)>,
    moved: bool,
}

impl KeptRoot {
    /// A task of the tree is about to call `chroot`: from now on every
    /// view reads its caller's root.
    pub fn chroot_seen(&mut self) {
        self.moved = true;
        self.kept = None;
    }

    /// Whether views still use the kept root.
    pub fn kept(&self) -> bool {
        !self.moved
    }

    /// Thread `tid`'s view, with the tree's kept root while no `chroot`
    /// was seen (the first call opens and keeps it).
    ///
    /// # Errors
    /// As [`View::open`].
    pub fn view(&mut self, pid: u32, tid: u32) -> io::Result<View> {
        if self.moved {
            return View::open(pid, tid);
        }
        if let Some((root_fd, root)) = &self.kept {
            return Ok(View {
                pid,
                tid,
                task: task_dir(pid, tid),
                root_fd: Arc::clone(root_fd),
                root: root.clone(),
            });
        }
        let v = View::open(pid, tid)?;
        self.kept = Some((Arc::clone(&v.root_fd), v.root.clone()));
        Ok(v)
    }
}

/// (mount id, device, inode) of an open fd: the same directory reached
/// through the same mount.
fn mount_identity(fd: i32) -> io::Result<(u64, u32, u32, u64)> {
    // SAFETY: statx is plain data, filled by the kernel.
    let mut stx: libc::statx = unsafe { std::mem::zeroed() };
    // SAFETY: a valid fd, an empty C string with AT_EMPTY_PATH, and a statx
    // buffer of the right size.
    let rc = unsafe {
        libc::statx(
            fd,
            c"".as_ptr(),
            libc::AT_EMPTY_PATH,
            libc::STATX_INO | libc::STATX_MNT_ID,
            &mut stx,
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    if stx.stx_mask & libc::STATX_MNT_ID == 0 {
        return Err(io::Error::from_raw_os_error(libc::ENOSYS));
    }
    Ok((
        stx.stx_mnt_id,
        stx.stx_dev_major,
        stx.stx_dev_minor,
        stx.stx_ino,
    ))
}

/// Why a path could not be resolved.
#[derive(Debug)]
pub enum ResolveError {
    /// The path does not name a file (ENOENT, ENOTDIR): no exec happens; the
    /// errno is the kernel's own answer.
    Missing(i32),
    /// Anything else: the exec cannot be judged.
    Other(io::Error),
}

pub(super) const AT_FDCWD: i32 = libc::AT_FDCWD;

pub(super) fn open_path(path: &str) -> io::Result<OwnedFd> {
    let c = CString::new(path).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    // SAFETY: `c` is a valid C string; O_PATH opens nothing for I/O.
    let fd = unsafe { libc::open(c.as_ptr(), libc::O_PATH | libc::O_CLOEXEC) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` was just returned by open and is owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

fn openat_path(dir: &OwnedFd, rel: &[u8], in_root: bool) -> io::Result<OwnedFd> {
    let c = CString::new(rel).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    // gVisor has no openat2: once it said so (ENOSYS), never asked again
    // (each call is a sandbox syscall there); the lookup is then walked.
    static NO_OPENAT2: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    if in_root && NO_OPENAT2.load(std::sync::atomic::Ordering::Relaxed) {
        return Err(io::Error::from_raw_os_error(libc::ENOSYS));
    }
    let fd = if in_root {
        // SAFETY: open_how is plain data; zero is valid for every field.
        let mut how: libc::open_how = unsafe { std::mem::zeroed() };
        how.flags = (libc::O_PATH | libc::O_CLOEXEC) as u64;
        how.resolve = libc::RESOLVE_IN_ROOT;
        // SAFETY: valid dirfd, C string and open_how of the size we pass.
        unsafe {
            libc::syscall(
                libc::SYS_openat2,
                dir.as_raw_fd(),
                c.as_ptr(),
                &how as *const libc::open_how,
                std::mem::size_of::<libc::open_how>(),
            ) as i32
        }
    } else {
        // SAFETY: valid dirfd and C string; O_PATH opens nothing for I/O.
        unsafe { libc::openat(dir.as_raw_fd(), c.as_ptr(), libc::O_PATH | libc::O_CLOEXEC) }
    };
    if fd < 0 {
        let e = io::Error::last_os_error();
        if in_root && e.raw_os_error() == Some(libc::ENOSYS) {
            NO_OPENAT2.store(true, std::sync::atomic::Ordering::Relaxed);
        }
        return Err(e);
    }
    // SAFETY: `fd` was just returned by the kernel and is owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

fn readlink(path: &str) -> io::Result<String> {
    std::fs::read_link(path).map(|p| p.to_string_lossy().into_owned())
}

/// Joins `base` and `rel` and removes `.` and empty components (`..` stays:
/// it is not ours to resolve lexically).
pub fn join_clean(base: &str, rel: &str) -> String {
    let joined = if rel.starts_with('/') {
        rel.to_string()
    } else {
        format!("{base}/{rel}")
    };
    let mut out = String::with_capacity(joined.len());
    for part in joined.split('/') {
        if part.is_empty() || part == "." {
            continue;
        }
        out.push('/');
        out.push_str(part);
    }
    if out.is_empty() {
        out.push('/');
    }
    out
}

/// Paths that name the calling process through /proc must name the tracee.
fn rewrite_self(path: &str, pid: u32, tid: u32) -> String {
    for (prefix, repl) in [
        ("/proc/self/", format!("/proc/{pid}/")),
        ("/proc/thread-self/", format!("/proc/{pid}/task/{tid}/")),
        ("/dev/fd/", format!("/proc/{pid}/fd/")),
    ] {
        if let Some(rest) = path.strip_prefix(prefix) {
            return format!("{repl}{rest}");
        }
    }
    path.to_string()
}

/// Resolves the program of an `execve`/`execveat` of process `pid` (thread `tid`)
/// the way the kernel will: relative to `dirfd` (or the cwd), inside the
/// tracee's root, each taken from the calling thread's own view.
pub fn resolve_exec_target(
    pid: u32,
    tid: u32,
    dirfd: i32,
    path: &[u8],
    empty_path: bool,
) -> Result<ExecTarget, ResolveError> {
    let view = View::open(pid, tid).map_err(|e| classify(e, true))?;
    resolve_in(&view, dirfd, path, empty_path)
}

/// [`resolve_exec_target`] in a view already open.
pub fn resolve_in(
    view: &View,
    dirfd: i32,
    path: &[u8],
    empty_path: bool,
) -> Result<ExecTarget, ResolveError> {
    let other = ResolveError::Other;
    let task = &view.task;
    // The thread's /proc links are read with its owner's ids (see
    // `access`); the program's own lookup then runs with them too, as the
    // kernel's will.
    let _owner = super::access::as_owner(view.tid);
    if path.is_empty() {
        if !empty_path {
            // execve("") fails with ENOENT in the kernel too.
            return Err(ResolveError::Missing(libc::ENOENT));
        }
        // execveat(fd, "", AT_EMPTY_PATH): the fd itself, in the thread's table.
        let link = format!("{task}/fd/{dirfd}");
        let filename = readlink(&link).map_err(other)?;
        let file = open_path(&link).map_err(|e| classify(e, true))?;
        let anonymous = is_anonymous(&filename);
        return finish(view, filename, anonymous, file);
    }
    let text = String::from_utf8_lossy(path).into_owned();
    let (filename, file) = if text.starts_with('/') {
        let text = rewrite_self(&text, view.pid, view.tid);
        let filename = join_clean("/", &text);
        let file = if filename.starts_with("/proc/") {
            // Magic links under /proc are not followed by RESOLVE_IN_ROOT; the
            // tracee's /proc is reached through its root directly.
            open_path(&format!("{task}/root{filename}"))
        } else {
            let rel = filename.trim_start_matches('/').as_bytes();
            match openat_path(&view.root_fd, rel, true) {
                // No openat2 (gVisor): a tracee whose root is ours resolves
                // the same without RESOLVE_IN_ROOT; any other is refused.
                Err(e) if e.raw_os_error() == Some(libc::ENOSYS) && view.root == "/" => {
                    openat_path(&view.root_fd, rel, false)
                }
                r => r,
            }
        }
        .map_err(|e| classify(e, false))?;
        (filename, file)
    } else {
        let base_link = if dirfd == AT_FDCWD {
            format!("{task}/cwd")
        } else {
            format!("{task}/fd/{dirfd}")
        };
        let base = view.strip_root(readlink(&base_link).map_err(other)?);
        let dir = open_path(&base_link).map_err(|e| classify(e, true))?;
        let file = openat_path(&dir, text.as_bytes(), false).map_err(|e| classify(e, false))?;
        (join_clean(&base, &text), file)
    };
    let anonymous = false;
    finish(view, filename, anonymous, file)
}

fn finish(
    view: &View,
    filename: String,
    anonymous: bool,
    file: OwnedFd,
) -> Result<ExecTarget, ResolveError> {
    // The name the file is judged by: unreadable, the exec cannot be judged.
    let resolved = Some(super::file::fd_path(file.as_raw_fd()).map_err(ResolveError::Other)?)
        .map(|r| view.strip_root(r))
        .filter(|r| *r != filename);
    let anonymous = anonymous || resolved.as_deref().is_some_and(is_anonymous);
    let meta = fd_meta(file.as_raw_fd()).map_err(ResolveError::Other)?;
    Ok(ExecTarget {
        filename,
        resolved,
        anonymous,
        file,
        meta,
    })
}

fn is_anonymous(link: &str) -> bool {
    link.starts_with("/memfd:") || link.ends_with(" (deleted)") || !link.starts_with('/')
}

/// ENOENT/ENOTDIR on the program path mean "no such program" (the kernel says
/// the same); on a /proc link we opened ourselves they mean the tracee is gone.
fn classify(e: io::Error, our_link: bool) -> ResolveError {
    match e.raw_os_error() {
        Some(code @ (libc::ENOENT | libc::ENOTDIR)) if !our_link => ResolveError::Missing(code),
        _ => ResolveError::Other(e),
    }
}

/// Basename of a path, as bytes-safe string.
pub fn basename(path: &str) -> &str {
    OsStr::new(path)
        .as_bytes()
        .rsplit(|&b| b == b'/')
        .next()
        .and_then(|b| std::str::from_utf8(b).ok())
        .unwrap_or(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn join_clean_cases() {
        assert_eq!(join_clean("/home/u", "./bin/x"), "/home/u/bin/x");
        assert_eq!(join_clean("/", "usr//bin/ls"), "/usr/bin/ls");
        assert_eq!(join_clean("/a", "/b/./c"), "/b/c");
        assert_eq!(join_clean("/a", "../b"), "/a/../b");
    }

    #[test]
    fn self_paths_name_the_tracee() {
        assert_eq!(rewrite_self("/proc/self/fd/3", 7, 8), "/proc/7/fd/3");
        assert_eq!(rewrite_self("/dev/fd/3", 7, 8), "/proc/7/fd/3");
        assert_eq!(
            rewrite_self("/proc/thread-self/exe", 7, 8),
            "/proc/7/task/8/exe"
        );
        assert_eq!(rewrite_self("/usr/bin/x", 7, 8), "/usr/bin/x");
    }

    #[test]
    fn resolves_in_the_tracee_view() {
        let me = std::process::id();
        let t = resolve_exec_target(me, me, AT_FDCWD, b"/bin/sh", false).unwrap();
        assert_eq!(t.filename, "/bin/sh");
        assert!(t.resolved.is_some(), "/bin/sh is a symlink here");
        match resolve_exec_target(me, me, AT_FDCWD, b"/nonexistent/x", false) {
            Err(ResolveError::Missing(e)) => assert_eq!(e, libc::ENOENT),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_view_sees_its_root_unchanged() {
        let me = std::process::id();
        let v = View::open(me, me).unwrap();
        assert!(v.root_unchanged());
        assert_eq!(v.root_prefix(), "");
    }

    #[test]
    fn a_kept_root_is_opened_once_and_given_up_at_a_chroot() {
        let me = std::process::id();
        let mut kept = KeptRoot::default();
        let a = kept.view(me, me).unwrap();
        let b = kept.view(me, me).unwrap();
        assert!(Arc::ptr_eq(&a.root_fd, &b.root_fd));
        kept.chroot_seen();
        assert!(!kept.kept());
        let c = kept.view(me, me).unwrap();
        let d = kept.view(me, me).unwrap();
        assert!(!Arc::ptr_eq(&a.root_fd, &c.root_fd));
        assert!(!Arc::ptr_eq(&c.root_fd, &d.root_fd));
        assert!(c.root_unchanged());
    }

    #[test]
    fn basename_cases() {
        assert_eq!(basename("/usr/bin/ls"), "ls");
        assert_eq!(basename("ls"), "ls");
    }
}
