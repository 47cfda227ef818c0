//! Opening a path rule's file for Landlock without following a symlink.
//!
//! The server lists directories to carve and names only entries that were
//! not symlinks; the tree may have swapped one for a symlink since (to the
//! very file the carve left out). A rule holds the inode it was opened on, so
//! the path is opened with `openat2(RESOLVE_NO_SYMLINKS)`: a path with a
//! symlink now is skipped, which only removes access.
//!
//! Failure modes: the open's error is returned (ELOOP for a symlink, ENOENT,
//! ...) and the caller skips the rule with a log line. Before Linux 5.6 (no
//! `openat2`) only the last component is not followed (`O_NOFOLLOW`).

/// Opens a rule's path for Landlock (`O_PATH`) without following any
/// symlink on the way (`RESOLVE_NO_SYMLINKS`): the server lists directories
/// to carve and names only entries that were not symlinks, and the tree may
/// have swapped one for a symlink since (to the very file the carve left
/// out). A path with a symlink now is skipped: that only removes access.
/// `/proc/self/...` is the tree root's own entry, named by its pid
/// (`self_pid`: this process's, or the tree's when the server builds the
/// ruleset ahead). Says whether it is a directory (from the opened fd).
///
/// # Errors
/// It cannot be opened that way (ELOOP for a symlink, ENOENT, ...).
pub(crate) fn open_rule_path(
    path: &str,
    self_pid: u32,
) -> std::io::Result<(std::os::fd::OwnedFd, bool)> {
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
    let path = match path.strip_prefix("/proc/self/") {
        Some(rest) => format!("/proc/{self_pid}/{rest}"),
        None if path == "/proc/self" => format!("/proc/{self_pid}"),
        None => path.to_string(),
    };
    let c = std::ffi::CString::new(path)
        .map_err(|_| std::io::Error::from_raw_os_error(libc::EINVAL))?;
    // SAFETY: open_how is plain data; zero is valid for every field.
    let mut how: libc::open_how = unsafe { std::mem::zeroed() };
    how.flags = (libc::O_PATH | libc::O_CLOEXEC) as u64;
    how.resolve = libc::RESOLVE_NO_SYMLINKS;
    // SAFETY: a valid C string and an open_how of the size passed.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_openat2,
            libc::AT_FDCWD,
            c.as_ptr(),
            &how as *const libc::open_how,
            std::mem::size_of::<libc::open_how>(),
        )
    } as i32;
    let fd = if fd >= 0 {
        // SAFETY: a fresh fd the kernel just returned, owned by nobody else.
        unsafe { OwnedFd::from_raw_fd(fd) }
    } else {
        let e = std::io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::ENOSYS) {
            return Err(e);
        }
        // No openat2 (before 5.6): at least the last component is not followed.
        // SAFETY: a valid C string.
        let fd = unsafe {
            libc::open(
                c.as_ptr(),
                libc::O_PATH | libc::O_CLOEXEC | libc::O_NOFOLLOW,
            )
        };
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: as above.
        unsafe { OwnedFd::from_raw_fd(fd) }
    };
    // SAFETY: fstat writes one struct stat we own.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: a valid fd and a pointer to our struct.
    if unsafe { libc::fstat(fd.as_raw_fd(), &mut st) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    match st.st_mode & libc::S_IFMT {
        libc::S_IFLNK => Err(std::io::Error::from_raw_os_error(libc::ELOOP)),
        libc::S_IFDIR => Ok((fd, true)),
        _ => Ok((fd, false)),
    }
}
