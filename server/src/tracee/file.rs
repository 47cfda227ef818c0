//! What `fstat` says about a file an exec names, taken once when it is
//! resolved: its identity (device, inode), its cheap key (which changes
//! whenever its content may have), its owner and mode.
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
    Ok(FileMeta {
        dev: st.st_dev,
        ino: st.st_ino,
        mode: st.st_mode,
        uid: st.st_uid,
        size: st.st_size as u64,
        mtime: (st.st_mtime, st.st_mtime_nsec),
        ctime: (st.st_ctime, st.st_ctime_nsec),
    })
}

/// (device, inode) of an open fd.
///
/// # Errors
/// fstat failed.
pub fn fd_identity(fd: i32) -> io::Result<(u64, u64)> {
    fd_meta(fd).map(|m| (m.dev, m.ino))
}
