//! Resolving a path call's path the way the kernel will, one component at
//! a time, in the calling thread's view: its cwd or dirfd for a relative
//! path, its root for an absolute one (which must be ours: a thread in
//! another root is not walked), `/proc/self` and `/proc/thread-self` naming
//! the thread, `..` the physical parent. Each component is opened with
//! `O_PATH | O_NOFOLLOW` beneath the one before (the kernel's lookup, on the
//! real directory, not a string): a symlink's text is read and walked in
//! its place (at most [`MAX_LINKS`]), a `/proc` magic link (`fd/N`, `cwd`,
//! `root`, `exe`, ...) is followed by the kernel to the object it names, and
//! the canonical path of every step is kept, for the file rules.
//!
//! What the walk finds is what the kernel finds at that moment; the
//! ptrace backend keeps the moment still (`backend::trace`: the caller's
//! other threads stopped, the tree's renames and unlinks held back while
//! the call runs).
//!
//! Failure modes: a component that does not exist, is not a directory, or
//! loops is [`WalkError::Kernel`] with the kernel's errno (the call would
//! fail so); anything else (the thread gone, a `/proc` link unreadable) is
//! [`WalkError::Other`].

use super::file::readlinkat;
use super::file::{fd_meta, FileMeta};
use super::resolve::open_path;
use std::collections::VecDeque;
use std::ffi::CString;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

/// The kernel's limit on symlinks followed in one lookup (`MAXSYMLINKS`).
pub const MAX_LINKS: usize = 40;

const PROC_SUPER_MAGIC: i64 = 0x9fa0;

/// What a path names.
#[derive(Debug)]
pub enum Found {
    /// An existing file or directory.
    Exists {
        /// An `O_PATH` fd on it (`None`: a name that ends the path, looked
        /// at without opening it).
        file: Option<OwnedFd>,
        /// Its canonical path; for an object with no path (a pipe, a
        /// socket, a memfd, a deleted file) `/proc`'s text for it.
        path: String,
        /// It has no path the file rules can name: [`Found::Exists::path`]
        /// is a pipe's, a socket's, an anonymous inode's or a memfd's.
        anonymous: bool,
        meta: FileMeta,
    },
    /// Everything but the last component: the directory a new entry would
    /// be made in, and the entry's name.
    Absent {
        /// The directory's canonical path.
        parent: String,
        /// The new entry's name (one component).
        name: String,
    },
}

impl Found {
    /// The canonical path named (for [`Found::Absent`], the path it would have).
    pub fn path(&self) -> String {
        match self {
            Found::Exists { path, .. } => path.clone(),
            Found::Absent { parent, name } => join(parent, name),
        }
    }
}

/// Why a path was not walked to its end.
#[derive(Debug)]
pub enum WalkError {
    /// The kernel would fail the call with this errno (ENOENT, ENOTDIR,
    /// ELOOP, ENAMETOOLONG, EACCES for a directory the caller cannot search).
    Kernel(i32),
    /// The walk itself failed: the call cannot be judged.
    Other(String),
}

impl std::fmt::Display for WalkError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            WalkError::Kernel(e) => write!(f, "{}", io::Error::from_raw_os_error(*e)),
            WalkError::Other(s) => f.write_str(s),
        }
    }
}

/// Where the walk starts and how it ends.
#[derive(Debug, Clone, Copy)]
pub struct Lookup {
    /// The call's dirfd (`AT_FDCWD`: the cwd).
    pub dirfd: i32,
    /// Follow a symlink in the last component.
    pub follow_last: bool,
    /// An empty path names the dirfd itself (`AT_EMPTY_PATH`).
    pub empty_path: bool,
    /// Directories on the way may be taken from those walked before
    /// ([`forget_dirs`]): only where every change of names by the tree is
    /// seen first (the ptrace backend's names gate).
    pub remembered: bool,
    /// The call only ever makes a new name: where the last name exists,
    /// whatever it is (a symlink too), the kernel fails it with `EEXIST`
    /// (`O_CREAT|O_EXCL`, `mkdir`, `mknod`). The last name is then not
    /// looked at and is taken for absent: what may be made there is what
    /// is judged, and an existing one makes nothing (one syscall fewer per
    /// call; a caller judging a refusal looks again without it).
    pub new_name_only: bool,
}

/// Directories walked before, by canonical path: each an `O_PATH` fd.
/// Valid while no name changes: the tracer calls [`forget_dirs`] when it
/// lets a rename, unlink, rmdir, link or symlink of any tree in (no walk
/// runs beside one), and names the tree does not see changed are the
/// walk's blind spot anyway (processes nothing traces). Nothing under
/// `/proc` is kept (its entries are per process and per moment).
static DIRS: std::sync::Mutex<Option<std::collections::HashMap<String, std::sync::Arc<OwnedFd>>>> =
    std::sync::Mutex::new(None);

/// At most this many directories are kept (then the set starts over).
const MAX_DIRS: usize = 512;

/// Every directory walked before is forgotten (see [`DIRS`]).
pub fn forget_dirs() {
    if let Ok(mut d) = DIRS.lock() {
        *d = None;
    }
}

fn remembered_dir(path: &str) -> Option<std::sync::Arc<OwnedFd>> {
    DIRS.lock().ok()?.as_ref()?.get(path).cloned()
}

fn remember_dir(path: &str, fd: &std::sync::Arc<OwnedFd>) {
    if path.starts_with("/proc") {
        return;
    }
    if let Ok(mut d) = DIRS.lock() {
        let map = d.get_or_insert_with(std::collections::HashMap::new);
        if map.len() >= MAX_DIRS {
            map.clear();
        }
        map.insert(path.to_string(), std::sync::Arc::clone(fd));
    }
}

/// Walks `path` for thread `tid` of process `pid` (see the module doc).
///
/// # Errors
/// See [`WalkError`].
pub fn walk(pid: u32, tid: u32, path: &[u8], how: Lookup) -> Result<Found, WalkError> {
    let _owner = super::access::as_owner(tid);
    let task = super::resolve::task_dir(pid, tid);
    if path.is_empty() {
        if !how.empty_path {
            return Err(WalkError::Kernel(libc::ENOENT));
        }
        let link = format!("{task}/fd/{}", how.dirfd);
        let file = open_path(&link).map_err(|e| other(&link, e))?;
        return found(file);
    }
    if path.len() >= libc::PATH_MAX as usize {
        return Err(WalkError::Kernel(libc::ENAMETOOLONG));
    }
    let (cur, cur_path) = start(&task, path[0] == b'/', how.dirfd, how.remembered)?;
    let mut w = Walker {
        pid,
        tid,
        cur,
        cur_path,
        parts: components(path),
        links: 0,
        trailing_slash: path.ends_with(b"/"),
        remembered: how.remembered,
        new_name_only: how.new_name_only,
    };
    while let Some(part) = w.parts.pop_front() {
        if let Some(end) = w.step(part, how.follow_last)? {
            return Ok(end);
        }
    }
    let meta = fd_meta(w.cur.as_fd().as_raw_fd()).map_err(|e| other(&w.cur_path, e))?;
    Ok(Found::Exists {
        file: Some(w.cur.owned().map_err(|e| other(&w.cur_path, e))?),
        path: w.cur_path,
        anonymous: false,
        meta,
    })
}

fn other(what: &str, e: io::Error) -> WalkError {
    WalkError::Other(format!("{what}: {e}"))
}

/// Where a path starts: the thread's root (absolute), or its cwd or dirfd.
/// Where directories may be remembered, the link's text is read first and
/// a directory remembered by that name is taken (one syscall instead of
/// an open, a read of the link and a close): the same trust the walk's
/// later components give a remembered name; a text that names none (a
/// directory not seen yet, one removed: "(deleted)") is opened as before.
fn start(
    task: &str,
    absolute: bool,
    dirfd: i32,
    remembered: bool,
) -> Result<(Dir, String), WalkError> {
    if absolute {
        return root();
    }
    let link = if dirfd == libc::AT_FDCWD {
        format!("{task}/cwd")
    } else {
        format!("{task}/fd/{dirfd}")
    };
    if remembered {
        match std::fs::read_link(&link) {
            Ok(text) => {
                let text = text.to_string_lossy();
                if let Some(dir) = remembered_dir(&text) {
                    return Ok((Dir::Shared(dir), text.into_owned()));
                }
            }
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {
                return Err(WalkError::Kernel(libc::EBADF));
            }
            Err(_) => {}
        }
    }
    let dir = open_path(&link).map_err(|e| match e.raw_os_error() {
        Some(libc::ENOENT) => WalkError::Kernel(libc::EBADF),
        _ => other(&link, e),
    })?;
    let at = fd_path(&dir).map_err(|e| other(&link, e))?;
    if !at.starts_with('/') {
        return Err(WalkError::Kernel(libc::ENOTDIR));
    }
    // A directory a walk starts at is remembered as one it passes through
    // is (a dirfd is walked from again and again: `tar`, `git`).
    if remembered && fd_meta(dir.as_raw_fd()).is_ok_and(|m| m.mode & libc::S_IFMT == libc::S_IFDIR)
    {
        let dir = std::sync::Arc::new(dir);
        remember_dir(&at, &dir);
        return Ok((Dir::Shared(dir), at));
    }
    Ok((Dir::Own(dir), at))
}

/// A walk in progress: where it is, and what is left.
struct Walker {
    pid: u32,
    tid: u32,
    cur: Dir,
    cur_path: String,
    parts: VecDeque<Vec<u8>>,
    links: usize,
    trailing_slash: bool,
    /// Directories on the way may be remembered ones ([`DIRS`]).
    remembered: bool,
    /// See [`Lookup::new_name_only`].
    new_name_only: bool,
}

impl Walker {
    /// One component of the path (`follow_last`: a symlink that ends it
    /// is followed): the walk's end, if this is it.
    fn step(&mut self, part: Vec<u8>, follow_last: bool) -> Result<Option<Found>, WalkError> {
        let last = self.parts.is_empty();
        if part == b"." {
            return Ok(None);
        }
        if part == b".." {
            if self.cur_path != "/" {
                self.cur = Dir::Own(
                    openat(self.cur.as_fd(), b"..", libc::O_NOFOLLOW)
                        .map_err(|e| kernel_or(e, &self.cur_path))?,
                );
                self.cur_path = parent_of(&self.cur_path);
            }
            return Ok(None);
        }
        let part = proc_self(&self.cur_path, part, self.pid, self.tid);
        let name = String::from_utf8_lossy(&part).into_owned();
        if !last {
            let next_path = join(&self.cur_path, &name);
            if self.remembered {
                if let Some(dir) = remembered_dir(&next_path) {
                    (self.cur, self.cur_path) = (Dir::Shared(dir), next_path);
                    return Ok(None);
                }
            }
            // A directory on the way, the common case, in one call: a
            // symlink or a file fails ENOTDIR and is looked at below.
            match openat(
                self.cur.as_fd(),
                &part,
                libc::O_NOFOLLOW | libc::O_DIRECTORY,
            ) {
                Ok(dir) => {
                    let dir = std::sync::Arc::new(dir);
                    if self.remembered {
                        remember_dir(&next_path, &dir);
                    }
                    (self.cur, self.cur_path) = (Dir::Shared(dir), next_path);
                    return Ok(None);
                }
                Err(e) if e.raw_os_error() == Some(libc::ENOTDIR) => {}
                Err(e) => return Err(kernel_or(e, &join(&self.cur_path, &name))),
            }
        }
        if last {
            return self.last(part, name, follow_last);
        }
        let next = match openat(self.cur.as_fd(), &part, libc::O_NOFOLLOW) {
            Ok(fd) => fd,
            Err(e) if last && e.raw_os_error() == Some(libc::ENOENT) => {
                return Ok(Some(Found::Absent {
                    parent: std::mem::take(&mut self.cur_path),
                    name,
                }));
            }
            Err(e) => return Err(kernel_or(e, &join(&self.cur_path, &name))),
        };
        let meta = fd_meta(next.as_raw_fd()).map_err(|e| other(&name, e))?;
        let is_link = meta.mode & libc::S_IFMT == libc::S_IFLNK;
        if is_link && (!last || follow_last || self.trailing_slash) {
            return self.follow(&part, &name, last);
        }
        let next_path = join(&self.cur_path, &name);
        if meta.mode & libc::S_IFMT != libc::S_IFDIR {
            return Err(WalkError::Kernel(libc::ENOTDIR));
        }
        (self.cur, self.cur_path) = (Dir::Own(next), next_path);
        Ok(None)
    }

    /// The name that ends the path: its own metadata, without opening it
    /// (two syscalls fewer per call under gVisor, where each is dear); a
    /// symlink followed as [`Walker::follow`] says.
    fn last(
        &mut self,
        part: Vec<u8>,
        name: String,
        follow_last: bool,
    ) -> Result<Option<Found>, WalkError> {
        if self.new_name_only && !self.trailing_slash {
            return Ok(Some(Found::Absent {
                parent: std::mem::take(&mut self.cur_path),
                name,
            }));
        }
        let meta = match super::file::meta_at(self.cur.as_fd().as_raw_fd(), &part) {
            Ok(m) => m,
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {
                return Ok(Some(Found::Absent {
                    parent: std::mem::take(&mut self.cur_path),
                    name,
                }));
            }
            Err(e) => return Err(kernel_or(e, &join(&self.cur_path, &name))),
        };
        let is_link = meta.mode & libc::S_IFMT == libc::S_IFLNK;
        if is_link && (follow_last || self.trailing_slash) {
            return self.follow(&part, &name, true);
        }
        Ok(Some(Found::Exists {
            file: None,
            path: join(&self.cur_path, &name),
            anonymous: false,
            meta,
        }))
    }

    /// Follows the symlink `part` (named `name`) of the current directory:
    /// a magic link by the kernel (the end, if `last`), any other by its
    /// text, walked in its place.
    fn follow(&mut self, part: &[u8], name: &str, last: bool) -> Result<Option<Found>, WalkError> {
        self.links += 1;
        if self.links > MAX_LINKS {
            return Err(WalkError::Kernel(libc::ELOOP));
        }
        let text = readlinkat(self.cur.as_fd(), part).map_err(|e| other(name, e))?;
        if is_magic(self.cur.as_fd(), &text) {
            // Another process's fd, cwd or root can change after the check
            // (it dup2s, fchdirs) and nothing holds it: never followed.
            if let Some(owner) = proc_owner(&self.cur_path) {
                if owner != self.pid && owner != self.tid {
                    return Err(WalkError::Other(format!(
                        "{} is a link of another process ({owner}), which can change what it \
                         names after the check: only the caller's own /proc links are followed",
                        join(&self.cur_path, name)
                    )));
                }
            }
            // Followed by the kernel to what it names (an fd's file, a cwd,
            // a root), as the tracee's own lookup would be.
            let target = openat(self.cur.as_fd(), part, 0).map_err(|e| kernel_or(e, name))?;
            if last {
                return found(target).map(Some);
            }
            let at = fd_path(&target).map_err(|e| other(name, e))?;
            if !at.starts_with('/') {
                return Err(WalkError::Kernel(libc::ENOTDIR));
            }
            (self.cur, self.cur_path) = (Dir::Own(target), clean(&at));
            return Ok(None);
        }
        if text.starts_with(b"/") {
            (self.cur, self.cur_path) = root()?;
        }
        let mut inserted = components(&text);
        if self.trailing_slash && last && inserted.is_empty() {
            inserted.push_back(b".".to_vec());
        }
        while let Some(p) = inserted.pop_back() {
            self.parts.push_front(p);
        }
        Ok(None)
    }
}

/// Whether thread `tid` of process `pid` has the server's root (the walk
/// starts there: the caller checks this once per tree, whose tasks cannot
/// `chroot`); else why not.
///
/// # Errors
/// The root is another directory, or cannot be read.
pub fn root_is_ours(pid: u32, tid: u32) -> Result<(), WalkError> {
    let _owner = super::access::as_owner(tid);
    let link = format!("{}/root", super::resolve::task_dir(pid, tid));
    let text = std::fs::read_link(&link).map_err(|e| other(&link, e))?;
    if text.as_os_str() != "/" {
        return Err(WalkError::Other(format!(
            "the caller's root is {} (not the server's)",
            text.display()
        )));
    }
    Ok(())
}

/// The server's root (the tree's: see [`root_is_ours`]), opened once.
fn root() -> Result<(Dir, String), WalkError> {
    static ROOT: std::sync::OnceLock<Option<OwnedFd>> = std::sync::OnceLock::new();
    let fd = ROOT
        .get_or_init(|| open_path("/").ok())
        .as_ref()
        .ok_or_else(|| WalkError::Other("/ cannot be opened".into()))?;
    Ok((Dir::Root(fd.as_fd()), "/".to_string()))
}

/// The directory a walk stands in: the server's root (kept open for every
/// walk) or one it opened.
enum Dir {
    Root(BorrowedFd<'static>),
    Own(OwnedFd),
    /// One that may be remembered for later walks ([`DIRS`]).
    Shared(std::sync::Arc<OwnedFd>),
}

impl Dir {
    fn as_fd(&self) -> BorrowedFd<'_> {
        match self {
            Dir::Root(fd) => *fd,
            Dir::Own(fd) => fd.as_fd(),
            Dir::Shared(fd) => fd.as_fd(),
        }
    }

    /// An fd of its own (the root's duplicated).
    fn owned(self) -> io::Result<OwnedFd> {
        match self {
            Dir::Root(fd) => fd.try_clone_to_owned(),
            Dir::Own(fd) => Ok(fd),
            Dir::Shared(fd) => fd.try_clone(),
        }
    }
}

/// The process whose `/proc` directory `dir` (a canonical path holding a
/// magic link) is: `/proc/N` (`cwd`, `root`, `exe`), `/proc/N/fd`,
/// `/proc/N/map_files`, `/proc/N/ns` and their `task/T` forms give N.
fn proc_owner(dir: &str) -> Option<u32> {
    let mut c: Vec<&str> = dir.split('/').filter(|s| !s.is_empty()).collect();
    let num = |s: &str| s.parse::<u32>().ok();
    if c.last().is_some_and(|s| num(s).is_none()) {
        c.pop(); // fd, map_files, ns...
    }
    match c.as_slice() {
        [.., n, "task", t] if num(t).is_some() => num(n),
        [.., n] => num(n),
        [] => None,
    }
}

/// `self` and `thread-self` in `/proc` name the tracee, not the server.
fn proc_self(dir: &str, part: Vec<u8>, pid: u32, tid: u32) -> Vec<u8> {
    if dir != "/proc" {
        return part;
    }
    match part.as_slice() {
        b"self" => pid.to_string().into_bytes(),
        b"thread-self" => format!("{pid}/task/{tid}").into_bytes(),
        _ => part,
    }
}

/// A `/proc` link the kernel follows to an object rather than by its text
/// (`fd/N`, `cwd`, `root`, `exe`, `map_files/…`, `ns/…`): every link in
/// procfs but those whose text is a relative path or a pid (`self`,
/// `thread-self`, `mounts` → `self/mounts`, `net` → `self/net`).
fn is_magic(dir: BorrowedFd<'_>, text: &[u8]) -> bool {
    // SAFETY: statfs is plain data, filled by the kernel for a valid fd.
    let mut sfs: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    if unsafe { libc::fstatfs(dir.as_raw_fd(), &mut sfs) } != 0 {
        return false;
    }
    #[allow(clippy::unnecessary_cast)]
    if sfs.f_type as i64 != PROC_SUPER_MAGIC {
        return false;
    }
    let relative_text = !text.is_empty()
        && !text.starts_with(b"/")
        && !text.contains(&b':')
        && !text.contains(&b'[');
    !relative_text
}

fn found(file: OwnedFd) -> Result<Found, WalkError> {
    let meta = fd_meta(file.as_raw_fd()).map_err(|e| WalkError::Other(e.to_string()))?;
    let text = fd_path(&file).map_err(|e| WalkError::Other(e.to_string()))?;
    let anonymous =
        !text.starts_with('/') || text.starts_with("/memfd:") || text.ends_with(" (deleted)");
    let path = if anonymous { text } else { clean(&text) };
    Ok(Found::Exists {
        file: Some(file),
        path,
        anonymous,
        meta,
    })
}

/// An errno the kernel's own lookup would give, or the walk's failure.
fn kernel_or(e: io::Error, what: &str) -> WalkError {
    match e.raw_os_error() {
        Some(
            code @ (libc::ENOENT | libc::ENOTDIR | libc::ELOOP | libc::ENAMETOOLONG | libc::EACCES),
        ) => WalkError::Kernel(code),
        _ => WalkError::Other(format!("{what}: {e}")),
    }
}

fn components(path: &[u8]) -> VecDeque<Vec<u8>> {
    path.split(|&b| b == b'/')
        .filter(|p| !p.is_empty())
        .map(<[u8]>::to_vec)
        .collect()
}

/// `dir/name` for a canonical `dir`.
pub fn join(dir: &str, name: &str) -> String {
    if dir == "/" {
        format!("/{name}")
    } else {
        format!("{dir}/{name}")
    }
}

/// The canonical parent of a canonical path (`/` for `/`).
pub fn parent_of(path: &str) -> String {
    match path.rfind('/') {
        Some(0) | None => "/".to_string(),
        Some(i) => path[..i].to_string(),
    }
}

/// `/`-separated, without empty or `.` components.
fn clean(path: &str) -> String {
    super::resolve::join_clean("/", path)
}

fn openat(dir: BorrowedFd<'_>, name: &[u8], extra: i32) -> io::Result<OwnedFd> {
    let c = CString::new(name).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    // SAFETY: a valid dirfd and C string; O_PATH opens nothing for I/O.
    let fd = unsafe {
        libc::openat(
            dir.as_raw_fd(),
            c.as_ptr(),
            libc::O_PATH | libc::O_CLOEXEC | extra,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a fresh fd nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// What `/proc` says an fd of ours is.
fn fd_path(fd: &OwnedFd) -> io::Result<String> {
    super::file::fd_path(fd.as_raw_fd())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    fn me() -> (u32, u32) {
        let pid = std::process::id();
        // SAFETY: gettid has no arguments.
        let tid = unsafe { libc::syscall(libc::SYS_gettid) } as u32;
        (pid, tid)
    }

    fn at(dirfd: i32, follow_last: bool) -> Lookup {
        Lookup {
            new_name_only: false,
            dirfd,
            follow_last,
            empty_path: false,
            remembered: false,
        }
    }

    fn path_of(f: Result<Found, WalkError>) -> String {
        match f {
            Ok(f) => f.path(),
            Err(e) => format!("error: {e}"),
        }
    }

    /// A call that only makes a new name (`O_CREAT|O_EXCL`, `mkdir`):
    /// its last name is taken for absent, existing or not, a symlink
    /// included (the kernel fails all of those with EEXIST and follows
    /// none); the directories on the way are walked as ever; a trailing
    /// slash is still looked at.
    #[test]
    fn a_name_only_ever_made_new_ends_the_walk_absent_where_the_kernel_would_make_it() {
        let (pid, tid) = me();
        let base = std::env::temp_dir().join(format!("walk-new-{pid}"));
        let _ = std::fs::remove_dir_all(&base);
        std::fs::create_dir_all(base.join("a/b")).unwrap();
        std::fs::write(base.join("a/b/f"), b"x").unwrap();
        symlink("a/b", base.join("l")).unwrap();
        symlink("/etc/passwd", base.join("a/b/to-passwd")).unwrap();
        let base = std::fs::canonicalize(&base).unwrap();
        let b = base.to_str().unwrap();
        let new = |p: &str| {
            walk(
                pid,
                tid,
                p.as_bytes(),
                Lookup {
                    new_name_only: true,
                    ..at(libc::AT_FDCWD, false)
                },
            )
        };
        for (p, at) in [
            (format!("{b}/l/f"), format!("{b}/a/b/f")),
            (format!("{b}/l/to-passwd"), format!("{b}/a/b/to-passwd")),
            (format!("{b}/l/new"), format!("{b}/a/b/new")),
        ] {
            match new(&p) {
                Ok(Found::Absent { parent, name }) => assert_eq!(join(&parent, &name), at, "{p}"),
                other => panic!("{p}: {other:?}"),
            }
        }
        assert!(
            matches!(new(&format!("{b}/a/b/")), Ok(Found::Exists { .. })),
            "a trailing slash is looked at"
        );
        std::fs::remove_dir_all(&base).unwrap();
    }

    #[test]
    fn symlinks_dotdot_and_absent_names_resolve_as_the_kernel_does() {
        let (pid, tid) = me();
        let base = std::env::temp_dir().join(format!("walk-{pid}"));
        let _ = std::fs::remove_dir_all(&base);
        std::fs::create_dir_all(base.join("a/b")).unwrap();
        std::fs::write(base.join("a/b/f"), b"x").unwrap();
        symlink("a/b", base.join("l")).unwrap();
        symlink(base.join("a/b/f"), base.join("abs")).unwrap();
        symlink("../../etc-not-here/x", base.join("a/b/dangling")).unwrap();
        symlink("loop", base.join("loop")).unwrap();
        let base = std::fs::canonicalize(&base).unwrap();
        let b = base.to_str().unwrap();
        let w = |p: &str, follow: bool| {
            path_of(walk(pid, tid, p.as_bytes(), at(libc::AT_FDCWD, follow)))
        };
        assert_eq!(w(&format!("{b}/l/f"), true), format!("{b}/a/b/f"));
        assert_eq!(w(&format!("{b}/l/../b/./f"), true), format!("{b}/a/b/f"));
        assert_eq!(w(&format!("{b}/abs"), true), format!("{b}/a/b/f"));
        assert_eq!(w(&format!("{b}/abs"), false), format!("{b}/abs"));
        assert_eq!(w(&format!("{b}/l/new"), true), format!("{b}/a/b/new"));
        // A dangling link is followed to where it would create.
        assert_eq!(
            w(&format!("{b}/a/b/dangling"), true),
            "error: No such file or directory (os error 2)"
        );
        assert!(w(&format!("{b}/loop"), true).contains("os error 40"));
        assert!(w(&format!("{b}/a/b/f/x"), true).contains("os error 20"));
        // /proc/self is the thread walked (here: this test), its fds magic.
        let f = std::fs::File::open(base.join("a/b/f")).unwrap();
        assert_eq!(
            w(&format!("/proc/self/fd/{}", f.as_raw_fd()), true),
            format!("{b}/a/b/f")
        );
        assert_eq!(
            w(&format!("/dev/fd/{}", f.as_raw_fd()), true),
            format!("{b}/a/b/f")
        );
        std::fs::remove_dir_all(&base).unwrap();
    }

    #[test]
    fn another_processs_proc_links_are_never_followed() {
        let (pid, tid) = me();
        let w = |p: &str| path_of(walk(pid, tid, p.as_bytes(), at(libc::AT_FDCWD, true)));
        let child = std::process::Command::new("sleep")
            .arg("5")
            .spawn()
            .unwrap();
        let other = child.id();
        for link in ["cwd", "root", "exe", "fd/0", "cwd/.", "root/etc"] {
            let got = w(&format!("/proc/{other}/{link}"));
            assert!(got.contains("another process"), "{link}: {got}");
            let got = w(&format!("/proc/{other}/task/{other}/{link}"));
            assert!(got.contains("another process"), "task/{link}: {got}");
        }
        // Its files that are no links, and our own links, as before.
        assert_eq!(
            w(&format!("/proc/{other}/status")),
            format!("/proc/{other}/status")
        );
        let cwd = std::env::current_dir().unwrap();
        assert_eq!(w("/proc/self/cwd"), cwd.to_str().unwrap());
        assert_eq!(w(&format!("/proc/{pid}/cwd")), cwd.to_str().unwrap());
        assert_eq!(
            w(&format!("/proc/{pid}/task/{tid}/cwd")),
            cwd.to_str().unwrap()
        );
        let mut child = child;
        let _ = child.kill();
        let _ = child.wait();
        assert_eq!(proc_owner("/proc/12/fd"), Some(12));
        assert_eq!(proc_owner("/proc/12"), Some(12));
        assert_eq!(proc_owner("/proc/12/task/13/fd"), Some(12));
        assert_eq!(proc_owner("/proc/12/task/13"), Some(12));
        assert_eq!(proc_owner("/proc"), None);
    }

    #[test]
    fn relative_paths_start_at_the_dirfd() {
        let (pid, tid) = me();
        let dir = std::fs::File::open("/usr").unwrap();
        let f = walk(pid, tid, b"bin/../lib", at(dir.as_raw_fd(), true)).unwrap();
        let want = std::fs::canonicalize("/usr/lib").unwrap();
        assert_eq!(f.path(), want.to_str().unwrap());
    }

    #[test]
    fn a_dirfd_start_is_taken_from_the_remembered_directories_by_what_it_is_now() {
        let (pid, tid) = me();
        let t = std::env::temp_dir().join(format!("agentsh-walk-start-{pid}-{tid}"));
        let _ = std::fs::remove_dir_all(&t);
        std::fs::create_dir_all(t.join("sub")).unwrap();
        std::fs::write(t.join("sub/f"), b"x").unwrap();
        let t = std::fs::canonicalize(&t).unwrap();
        let remembering = |dirfd| Lookup {
            new_name_only: false,
            remembered: true,
            ..at(dirfd, true)
        };
        let whole = format!("{}/sub/f", t.display());
        // The walk of the whole path remembers `sub`.
        assert_eq!(
            path_of(walk(
                pid,
                tid,
                whole.as_bytes(),
                remembering(libc::AT_FDCWD)
            )),
            whole
        );
        assert!(remembered_dir(&format!("{}/sub", t.display())).is_some());
        let sub = std::fs::File::open(t.join("sub")).unwrap();
        assert_eq!(
            path_of(walk(pid, tid, b"f", remembering(sub.as_raw_fd()))),
            whole
        );
        // A dirfd's directory not walked through before is remembered too.
        std::fs::create_dir(t.join("other")).unwrap();
        let other = std::fs::File::open(t.join("other")).unwrap();
        let other_path = format!("{}/other", t.display());
        assert!(remembered_dir(&other_path).is_none());
        let g = format!("{other_path}/g");
        assert_eq!(
            path_of(walk(pid, tid, b"g", remembering(other.as_raw_fd()))),
            g
        );
        assert!(remembered_dir(&other_path).is_some());
        // The directory moves and another takes its name: the dirfd's
        // link says where it is now, which is not the remembered name.
        std::fs::rename(t.join("sub"), t.join("moved")).unwrap();
        std::fs::create_dir(t.join("sub")).unwrap();
        let moved = format!("{}/moved/f", t.display());
        assert_eq!(
            path_of(walk(pid, tid, b"f", remembering(sub.as_raw_fd()))),
            moved
        );
        // A closed dirfd is the kernel's EBADF (a number far above those
        // the other tests' threads open meanwhile).
        // SAFETY: an fd this test owns duplicated to a number it then closes.
        let raw = unsafe { libc::dup2(sub.as_raw_fd(), 900) };
        assert_eq!(raw, 900);
        // SAFETY: the duplicate just made, closed once.
        unsafe { libc::close(raw) };
        let closed = walk(pid, tid, b"f", remembering(raw));
        assert!(
            matches!(closed, Err(WalkError::Kernel(libc::EBADF))),
            "{:?}",
            closed.map(|f| f.path())
        );
        std::fs::remove_dir_all(&t).unwrap();
    }

    #[test]
    fn parents_and_joins() {
        assert_eq!(parent_of("/a/b"), "/a");
        assert_eq!(parent_of("/a"), "/");
        assert_eq!(parent_of("/"), "/");
        assert_eq!(join("/", "x"), "/x");
        assert_eq!(join("/a", "x"), "/a/x");
    }
}
