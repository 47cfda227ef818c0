//! What `fstat` says about a file an exec names, taken once when it is
//! resolved: its identity (device, inode), its cheap key (which changes
//! whenever its content may have), its owner and mode; and what `/proc`
//! says one of our fds is ([`fd_path`]).
//!
//! Failure modes: an `fstat` that fails is the caller's to judge (a
//! resolution answers `resolve::ResolveError::Other`: the exec cannot be
//! judged).

use std::io;

/// What `fstat` says about a file an exec names: taken once, when it is
/// resolved, and used for its identity, the identity index's key, whether it
/// can be a script and who may write it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileMeta {
    pub dev: u64,
    pub ino: u64,
    pub mode: u32,
    pub uid: u32,
    pub size: u64,
    /// (seconds, nanoseconds).
    pub mtime: (i64, i64),
    pub ctime: (i64, i64),
}

/// A file's cheap key: it changes whenever the content may have (any write
/// updates ctime; userspace cannot set ctime).
pub type FileKey = (u64, u64, u64, (i64, i64), (i64, i64));

impl FileMeta {
    pub fn is_regular(&self) -> bool {
        self.mode & libc::S_IFMT == libc::S_IFREG
    }

    /// (device, inode, size, mtime, ctime).
    pub fn key(&self) -> FileKey {
        (self.dev, self.ino, self.size, self.mtime, self.ctime)
    }
}

/// `fstat` of an open fd (an `O_PATH` fd is fine).
///
/// # Errors
/// fstat failed.
pub fn fd_meta(fd: i32) -> io::Result<FileMeta> {
    // SAFETY: stat is plain data, filled by the kernel.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: a valid fd and a pointer to a stat buffer of the right size.
    if unsafe { libc::fstat(fd, &mut st) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(meta_of(&st))
}

/// What `fstatat(dir, name, AT_SYMLINK_NOFOLLOW)` says: a name's own
/// metadata (a symlink's, not its target's), without opening it.
///
/// # Errors
/// fstatat failed (ENOENT: no such name).
pub fn meta_at(dir: i32, name: &[u8]) -> io::Result<FileMeta> {
    let c = std::ffi::CString::new(name).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    // SAFETY: stat is plain data, filled by the kernel.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: a valid dirfd, a C string and a stat buffer of the right size.
    if unsafe { libc::fstatat(dir, c.as_ptr(), &mut st, libc::AT_SYMLINK_NOFOLLOW) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(meta_of(&st))
}

/// What a `stat` says, as [`FileMeta`] keeps it.
fn meta_of(st: &libc::stat) -> FileMeta {
    FileMeta {
        dev: st.st_dev,
        ino: st.st_ino,
        mode: st.st_mode,
        uid: st.st_uid,
        size: st.st_size as u64,
        mtime: (st.st_mtime, st.st_mtime_nsec),
        ctime: (st.st_ctime, st.st_ctime_nsec),
    }
}

/// (device, inode) of an open fd.
///
/// # Errors
/// fstat failed.
pub fn fd_identity(fd: i32) -> io::Result<(u64, u64)> {
    fd_meta(fd).map(|m| (m.dev, m.ino))
}

/// What `/proc` says an fd of this process is (the link's text: a path, or
/// `anon_inode:…`, `/memfd:… (deleted)`). Read through this process's
/// `/proc/self/fd`, opened once: the look-up is then of the number alone
/// (not `/proc`, `self`, `fd` and the number; about 1 µs of the ~3.5 per
/// exec measured here). A forked child would read its parent's table
/// through that directory, so a process other than the one that opened it
/// reads the path instead.
///
/// # Errors
/// The fd is not open, or its link cannot be read.
pub fn fd_path(fd: std::os::fd::RawFd) -> io::Result<String> {
    use std::os::fd::{AsFd, FromRawFd, OwnedFd};
    static DIR: std::sync::OnceLock<Option<(u32, OwnedFd)>> = std::sync::OnceLock::new();
    let dir = DIR.get_or_init(|| {
        // SAFETY: a constant C string; the result is checked.
        let d = unsafe {
            libc::open(
                c"/proc/self/fd".as_ptr(),
                libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC,
            )
        };
        // SAFETY: a fresh fd nothing else owns.
        (d >= 0).then(|| (std::process::id(), unsafe { OwnedFd::from_raw_fd(d) }))
    });
    let Some((_, dir)) = dir.as_ref().filter(|(pid, _)| *pid == own_pid()) else {
        return std::fs::read_link(format!("/proc/self/fd/{fd}"))
            .map(|p| p.to_string_lossy().into_owned());
    };
    let text = readlinkat(dir.as_fd(), fd.to_string().as_bytes())?;
    if text.len() == libc::PATH_MAX as usize {
        // Maybe cut short: read the whole link the ordinary way.
        return std::fs::read_link(format!("/proc/self/fd/{fd}"))
            .map(|p| p.to_string_lossy().into_owned());
    }
    Ok(String::from_utf8_lossy(&text).into_owned())
}

/// This process's id, asked of the kernel once (every syscall counts under
/// gVisor, where `getpid` is one per walk): a forked child asks again (the
/// cache is emptied in the child by a `pthread_atfork` handler, so a child
/// never takes its parent's `/proc/self/fd` for its own).
fn own_pid() -> u32 {
    use std::sync::atomic::{AtomicU32, Ordering};
    static PID: AtomicU32 = AtomicU32::new(0);
    static ATFORK: std::sync::Once = std::sync::Once::new();
    extern "C" fn forget() {
        PID.store(0, Ordering::Relaxed);
    }
    ATFORK.call_once(|| {
        // SAFETY: registers a handler that only stores to an atomic
        // (async-signal-safe, as a forked child's handlers must be).
        unsafe { libc::pthread_atfork(None, None, Some(forget)) };
    });
    match PID.load(Ordering::Relaxed) {
        0 => {
            let pid = std::process::id();
            PID.store(pid, Ordering::Relaxed);
            pid
        }
        pid => pid,
    }
}

/// The text of the link `name` beneath `dir`, at most `PATH_MAX` bytes (a
/// text of exactly that length may have been cut short).
///
/// # Errors
/// The kernel's (not a link, gone, a NUL in `name`: EINVAL).
pub fn readlinkat(dir: std::os::fd::BorrowedFd<'_>, name: &[u8]) -> io::Result<Vec<u8>> {
    use std::os::fd::AsRawFd;
    let c = std::ffi::CString::new(name).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    let mut buf = vec![0u8; libc::PATH_MAX as usize];
    // SAFETY: a valid dirfd, C string and buffer of the length passed.
    let n = unsafe {
        libc::readlinkat(
            dir.as_raw_fd(),
            c.as_ptr(),
            buf.as_mut_ptr().cast(),
            buf.len(),
        )
    };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    buf.truncate(n as usize);
    Ok(buf)
}

#[cfg(test)]
mod fd_path_tests {
    use super::fd_path;
    use std::os::fd::AsRawFd;

    #[test]
    fn an_fd_reads_as_its_path_and_a_closed_one_fails() {
        let f = std::fs::File::open("/proc/self/status").unwrap();
        let want = std::fs::read_link(format!("/proc/self/fd/{}", f.as_raw_fd())).unwrap();
        assert_eq!(fd_path(f.as_raw_fd()).unwrap(), want.to_string_lossy());
        let raw = f.as_raw_fd();
        drop(f);
        assert!(fd_path(raw).is_err() || fd_path(raw).unwrap() != want.to_string_lossy());
    }

    #[test]
    fn a_forked_child_reads_its_own_table_not_its_parents() {
        let _ = fd_path(0); // the directory is opened by this process first
        let (r, w) = nix::unistd::pipe().unwrap();
        // SAFETY: the child opens a file, reads one link and exits.
        match unsafe { libc::fork() } {
            0 => {
                let f = std::fs::File::open("/proc/version").unwrap();
                let ok = fd_path(f.as_raw_fd()).is_ok_and(|p| p == "/proc/version");
                // SAFETY: a valid fd and one byte.
                unsafe { libc::write(w.as_raw_fd(), [ok as u8].as_ptr().cast(), 1) };
                // SAFETY: ends the child without running the parent's destructors.
                unsafe { libc::_exit(0) };
            }
            pid => {
                drop(w);
                let mut b = [0u8; 1];
                let n = nix::unistd::read(&r, &mut b).unwrap();
                // SAFETY: reaps our own child.
                unsafe { libc::waitpid(pid, std::ptr::null_mut(), 0) };
                assert_eq!((n, b[0]), (1, 1), "the child read another table's fd");
            }
        }
    }
}
