//! Reading a trapped process: its /proc entries and its memory.
//!
//! Everything here reads state the kernel keeps (ppid, thread count, start
//! time, cwd, root, fds) or the tracee's memory through `process_vm_readv`.
//! Paths are resolved in the *calling thread's* root, cwd and fd table
//! (`/proc/<pid>/task/<tid>/…`), never the thread-group leader's and never the
//! server's: a thread may have its own (`unshare(CLONE_FILES | CLONE_FS)`).
//!
//! Failure modes: a process that vanished gives ENOENT/ESRCH; unreadable memory
//! gives EFAULT; callers turn anything unreadable into a deny. Memory read here
//! could change after the read if another task shared it: the supervisor
//! stops every such task first (`supervisor::sharing`).

use std::ffi::{CString, OsStr};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;

/// What `/proc/<tid>/stat` says about a thread.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProcStat {
    pub ppid: u32,
    /// Process group id.
    pub pgrp: u32,
    pub num_threads: u32,
    /// Start time in clock ticks since boot: with the pid, identifies a process
    /// across pid reuse.
    pub starttime: u64,
}

/// Reads `/proc/<pid>/stat`.
///
/// # Errors
/// ENOENT when the process is gone; InvalidData when the file cannot be parsed.
pub fn proc_stat(pid: u32) -> io::Result<ProcStat> {
    use std::io::Read;
    // Read on every exec (twice: the tracee and its parent): one open, one
    // read into a stack buffer and one close, instead of std::fs::read's
    // statx and second read. The line fits (comm is at most 16 bytes, the
    // 52 numbers at most 20 digits each); a full buffer reads on to the end.
    let mut f = std::fs::File::open(format!("/proc/{pid}/stat"))?;
    let mut buf = [0u8; 1536];
    let n = f.read(&mut buf)?;
    let mut long = Vec::new();
    let text = if n < buf.len() {
        &buf[..n]
    } else {
        long.extend_from_slice(&buf);
        f.read_to_end(&mut long)?;
        &long[..]
    };
    parse_stat(text).ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("/proc/{pid}/stat cannot be parsed"),
        )
    })
}

fn parse_stat(text: &[u8]) -> Option<ProcStat> {
    // comm may contain spaces and parentheses: fields resume after the last ')'.
    let close = text.iter().rposition(|&b| b == b')')?;
    let rest = std::str::from_utf8(text.get(close + 2..)?).ok()?;
    let f: Vec<&str> = rest.split_ascii_whitespace().collect();
    // rest[0] is field 3 (state); ppid is field 4, pgrp 5, num_threads 20, starttime 22.
    Some(ProcStat {
        ppid: f.get(1)?.parse().ok()?,
        pgrp: f.get(2)?.parse().ok()?,
        num_threads: f.get(17)?.parse().ok()?,
        starttime: f.get(19)?.parse().ok()?,
    })
}

/// The thread-group id of thread `tid`: cheap when the process has one thread.
///
/// # Errors
/// The process is gone or its status cannot be parsed.
pub fn tgid_of(tid: u32, stat: &ProcStat) -> io::Result<u32> {
    if stat.num_threads <= 1 {
        return Ok(tid);
    }
    let status = std::fs::read_to_string(format!("/proc/{tid}/status"))?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("Tgid:"))
        .and_then(|v| v.trim().parse().ok())
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "no Tgid in status"))
}

/// Reads up to `buf.len()` bytes of `pid`'s memory at `addr`.
fn read_mem(pid: u32, addr: u64, buf: &mut [u8]) -> io::Result<usize> {
    if buf.is_empty() {
        return Ok(0);
    }
    let local = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    let remote = libc::iovec {
        iov_base: addr as *mut libc::c_void,
        iov_len: buf.len(),
    };
    // SAFETY: `local` points into `buf`, valid for its length; the remote
    // address is only interpreted by the kernel in the other process.
    let n = unsafe { libc::process_vm_readv(pid as libc::pid_t, &local, 1, &remote, 1, 0) };
    if n < 0 {
        let e = io::Error::last_os_error();
        // gVisor has no process_vm_readv; its /proc/<pid>/mem reads the same.
        if e.raw_os_error() == Some(libc::ENOSYS) {
            return read_proc_mem(pid, addr, buf);
        }
        return Err(e);
    }
    Ok(n as usize)
}

/// [`read_mem`] through `/proc/<pid>/mem` (ptrace-mode access, like
/// process_vm_readv's).
fn read_proc_mem(pid: u32, addr: u64, buf: &mut [u8]) -> io::Result<usize> {
    use std::os::unix::fs::FileExt;
    let f = std::fs::File::open(format!("/proc/{pid}/mem"))?;
    match f.read_at(buf, addr) {
        // An unmapped address reads as EIO here; process_vm_readv says EFAULT.
        Err(e) if e.raw_os_error() == Some(libc::EIO) => {
            Err(io::Error::from_raw_os_error(libc::EFAULT))
        }
        r => r,
    }
}

const PAGE: u64 = 4096;

/// Reads a NUL-terminated string of at most `max` bytes (without the NUL).
/// Returns the bytes and whether the NUL was found within `max`.
///
/// Reads page by page so a string that ends just before an unmapped page is
/// still read.
///
/// # Errors
/// EFAULT if the first byte is unreadable; ESRCH if the process is gone.
pub fn read_cstring(pid: u32, addr: u64, max: usize) -> io::Result<(Vec<u8>, bool)> {
    let mut out = Vec::new();
    let mut cur = addr;
    while out.len() < max {
        let to_page_end = (PAGE - (cur % PAGE)) as usize;
        let want = to_page_end.min(max - out.len() + 1);
        let mut chunk = vec![0u8; want];
        let n = read_mem(pid, cur, &mut chunk)?;
        if n == 0 {
            return Err(io::Error::from_raw_os_error(libc::EFAULT));
        }
        chunk.truncate(n);
        if let Some(nul) = chunk.iter().position(|&b| b == 0) {
            out.extend_from_slice(&chunk[..nul]);
            return Ok((out, true));
        }
        out.extend_from_slice(&chunk);
        cur += n as u64;
    }
    out.truncate(max);
    Ok((out, false))
}

/// Reads a NULL-terminated array of pointers (`ptr_size` 4 or 8 bytes each),
/// at most `max` entries. Returns the pointers and whether the NULL was found.
///
/// # Errors
/// As [`read_cstring`].
pub fn read_ptr_array(
    pid: u32,
    addr: u64,
    ptr_size: usize,
    max: usize,
) -> io::Result<(Vec<u64>, bool)> {
    let mut out = Vec::new();
    let mut cur = addr;
    while out.len() <= max {
        let to_page_end = (PAGE - (cur % PAGE)) as usize;
        let want = to_page_end.min((max + 1 - out.len()) * ptr_size);
        let want = want - want % ptr_size;
        let want = want.max(ptr_size);
        let mut chunk = vec![0u8; want];
        let n = read_mem(pid, cur, &mut chunk)?;
        let n = n - n % ptr_size;
        if n == 0 {
            return Err(io::Error::from_raw_os_error(libc::EFAULT));
        }
        for c in chunk[..n].chunks_exact(ptr_size) {
            let p = if ptr_size == 8 {
                u64::from_ne_bytes(c.try_into().unwrap_or([0; 8]))
            } else {
                u64::from(u32::from_ne_bytes(c.try_into().unwrap_or([0; 4])))
            };
            if p == 0 {
                return Ok((out, true));
            }
            if out.len() == max {
                return Ok((out, false));
            }
            out.push(p);
        }
        cur += n as u64;
    }
    Ok((out, false))
}

/// An argv as read from the tracee.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Argv {
    pub args: Vec<String>,
    /// Something was left unread because of `max_argc` / `max_argv_bytes`.
    pub truncated: bool,
    /// Where each string read lies in the tracee's memory.
    pub ptrs: Vec<u64>,
}

/// Reads an argv (array of C strings) within the limits.
///
/// # Errors
/// As [`read_cstring`]; a NULL argv pointer gives an empty argv.
pub fn read_argv(
    pid: u32,
    addr: u64,
    ptr_size: usize,
    max_argc: usize,
    max_bytes: usize,
) -> io::Result<Argv> {
    if addr == 0 {
        return Ok(Argv {
            args: Vec::new(),
            truncated: false,
            ptrs: Vec::new(),
        });
    }
    let (mut ptrs, complete) = read_ptr_array(pid, addr, ptr_size, max_argc)?;
    let mut truncated = !complete;
    let mut budget = max_bytes;
    let mut args = Vec::with_capacity(ptrs.len());
    for &p in &ptrs {
        if budget == 0 {
            truncated = true;
            break;
        }
        let (bytes, whole) = read_cstring(pid, p, budget)?;
        budget = budget.saturating_sub(bytes.len() + 1);
        args.push(String::from_utf8_lossy(&bytes).into_owned());
        if !whole {
            truncated = true;
            break;
        }
    }
    ptrs.truncate(args.len());
    Ok(Argv {
        args,
        truncated,
        ptrs,
    })
}

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
}

impl ExecTarget {
    /// (device, inode) of the file judged.
    ///
    /// # Errors
    /// fstat failed (cannot happen on an O_PATH fd we hold, short of EIO).
    pub fn identity(&self) -> io::Result<(u64, u64)> {
        fd_identity(self.file.as_raw_fd())
    }
}

/// (device, inode) of an open fd.
///
/// # Errors
/// fstat failed.
pub fn fd_identity(fd: i32) -> io::Result<(u64, u64)> {
    // SAFETY: stat is plain data, filled by the kernel.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: a valid fd and a pointer to a stat buffer of the right size.
    if unsafe { libc::fstat(fd, &mut st) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok((st.st_dev, st.st_ino))
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

/// Why a path could not be resolved.
#[derive(Debug)]
pub enum ResolveError {
    /// The path does not name a file (ENOENT, ENOTDIR): no exec happens; the
    /// errno is the kernel's own answer.
    Missing(i32),
    /// Anything else: the exec cannot be judged.
    Other(io::Error),
}

const AT_FDCWD: i32 = libc::AT_FDCWD;

fn open_path(path: &str) -> io::Result<OwnedFd> {
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
        return Err(io::Error::last_os_error());
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
    let other = ResolveError::Other;
    let task = task_dir(pid, tid);
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
        return Ok(finish(&task, filename, anonymous, file));
    }
    let text = String::from_utf8_lossy(path).into_owned();
    let (filename, file) = if text.starts_with('/') {
        let text = rewrite_self(&text, pid, tid);
        let filename = join_clean("/", &text);
        let file = if filename.starts_with("/proc/") {
            // Magic links under /proc are not followed by RESOLVE_IN_ROOT; the
            // tracee's /proc is reached through its root directly.
            open_path(&format!("{task}/root{filename}"))
        } else {
            let root = open_path(&format!("{task}/root")).map_err(other)?;
            let rel = filename.trim_start_matches('/').as_bytes();
            match openat_path(&root, rel, true) {
                // No openat2 (gVisor): a tracee whose root is ours resolves
                // the same without RESOLVE_IN_ROOT; any other is refused.
                Err(e)
                    if e.raw_os_error() == Some(libc::ENOSYS)
                        && readlink(&format!("{task}/root")).is_ok_and(|r| r == "/") =>
                {
                    openat_path(&root, rel, false)
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
        let base = strip_root(&task, readlink(&base_link).map_err(other)?);
        let dir = open_path(&base_link).map_err(|e| classify(e, true))?;
        let file = openat_path(&dir, text.as_bytes(), false).map_err(|e| classify(e, false))?;
        (join_clean(&base, &text), file)
    };
    let anonymous = false;
    Ok(finish(&task, filename, anonymous, file))
}

fn finish(task: &str, filename: String, anonymous: bool, file: OwnedFd) -> ExecTarget {
    let resolved = readlink(&format!("/proc/self/fd/{}", file.as_raw_fd()))
        .ok()
        .map(|r| strip_root(task, r))
        .filter(|r| *r != filename);
    let anonymous = anonymous || resolved.as_deref().is_some_and(is_anonymous);
    ExecTarget {
        filename,
        resolved,
        anonymous,
        file,
    }
}

/// Our view of a path to the tracee's view, when the tracee is chrooted.
fn strip_root(task: &str, ours: String) -> String {
    match readlink(&format!("{task}/root")) {
        Ok(root) if root != "/" => match ours.strip_prefix(root.as_str()) {
            Some(rest) if rest.starts_with('/') => rest.to_string(),
            _ => ours,
        },
        _ => ours,
    }
}

/// The interpreter line of a `#!` script: `[interpreter, optional argument]`.
///
/// The kernel runs the interpreter itself, without another `execve` the
/// supervisor could see, so the caller judges it here. Reads the first 256
/// bytes (the kernel's limit) through our own fd on the file; `None` if it
/// is not a script or cannot be read.
pub fn shebang(target: &ExecTarget) -> Option<Vec<String>> {
    use std::io::Read;
    let mut f = std::fs::File::open(format!("/proc/self/fd/{}", target.file.as_raw_fd())).ok()?;
    let mut buf = [0u8; 256];
    let mut n = 0;
    while n < buf.len() {
        match f.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(_) => return None,
        }
    }
    parse_shebang(&buf[..n])
}

/// How deep the kernel follows `#!` interpreters that are scripts themselves
/// (`BINPRM_MAX_RECURSION`): one more fails the exec with ELOOP.
pub const MAX_INTERPRETER_DEPTH: usize = 4;

/// One `#!` interpreter the kernel will start.
#[derive(Debug)]
pub struct ChainLink {
    /// The path on the `#!` line.
    pub path: String,
    /// The argv the kernel builds for it.
    pub argv: Vec<String>,
    /// The file, resolved like an exec in the caller's view; `None` when it
    /// does not exist (the exec then fails with ENOENT).
    pub target: Option<ExecTarget>,
}

/// Why an interpreter chain cannot be followed.
#[derive(Debug)]
pub enum ChainError {
    /// Deeper than the kernel follows: the exec fails with ELOOP anyway.
    TooDeep,
    Unresolvable(String, io::Error),
}

/// The `#!` interpreters the kernel will start for `target`, outermost
/// first, each resolved like an exec in thread `tid`'s view, with the argv
/// the kernel builds: `[interpreter, optional argument, file name, args...]`
/// where the file name is `script_name` (the name the kernel was given) for
/// the first level and the previous interpreter's path after that.
///
/// # Errors
/// A chain deeper than [`MAX_INTERPRETER_DEPTH`], or an interpreter that
/// exists but cannot be resolved.
pub fn interpreter_chain(
    pid: u32,
    tid: u32,
    target: &ExecTarget,
    script_name: &str,
    argv: &[String],
) -> Result<Vec<ChainLink>, ChainError> {
    let mut chain: Vec<ChainLink> = Vec::new();
    let mut name = script_name.to_string();
    let mut args: Vec<String> = argv.to_vec();
    loop {
        let current = match chain.last() {
            None => Some(target),
            Some(l) => l.target.as_ref(),
        };
        let Some(current) = current else {
            return Ok(chain);
        };
        let Some(line) = shebang(current) else {
            return Ok(chain);
        };
        if chain.len() == MAX_INTERPRETER_DEPTH {
            return Err(ChainError::TooDeep);
        }
        let interp = line[0].clone();
        let mut new_args = line.clone();
        new_args.push(name.clone());
        new_args.extend(args.iter().skip(1).cloned());
        let t = match resolve_exec_target(pid, tid, AT_FDCWD, interp.as_bytes(), false) {
            Ok(t) => Some(t),
            Err(ResolveError::Missing(_)) => None,
            Err(ResolveError::Other(e)) => return Err(ChainError::Unresolvable(interp, e)),
        };
        name = interp.clone();
        args = new_args.clone();
        chain.push(ChainLink {
            path: interp,
            argv: new_args,
            target: t,
        });
    }
}

/// Is every directory a lookup of `path` passes through (following its
/// symlinks, in the tracee's root `root`) one the tree cannot change? A
/// directory counts as changeable when, for a caller with uid `uid` other
/// than 0, it is not owned by root or is group- or other-writable; for a root
/// caller, when it is neither beneath `no_write` (Landlock keeps every tree
/// from writing there) nor an ancestor of such a path. `false` also when the
/// walk fails or loops. `no_symlinks`: the path is already canonical (the
/// caller resolved it), so no component is looked at, only its directories.
/// An approximation: see docs/security-model.md.
pub fn path_is_stable(
    root: &str,
    path: &str,
    uid: u32,
    no_write: &[&str],
    no_symlinks: bool,
) -> bool {
    use std::os::unix::fs::MetadataExt;
    let beneath = |p: &str, d: &str| {
        p == d || p.strip_prefix(d).is_some_and(|r| r.starts_with('/')) || d == "/"
    };
    let changeable = |dir: &str| -> bool {
        if uid == 0 {
            // Root may write anything Landlock does not keep from every tree.
            return !no_write.iter().any(|d| beneath(dir, d) || beneath(d, dir));
        }
        match std::fs::metadata(format!("{root}{dir}")) {
            Ok(m) => m.uid() != 0 || m.mode() & 0o022 != 0,
            Err(_) => true,
        }
    };
    let mut todo: Vec<String> = path
        .split('/')
        .filter(|c| !c.is_empty())
        .map(str::to_string)
        .rev()
        .collect();
    let mut dir = String::from("/");
    let mut hops = 0;
    while let Some(comp) = todo.pop() {
        if comp == "." {
            continue;
        }
        if comp == ".." {
            dir = match dir.rsplit_once('/') {
                Some(("", _)) | None => "/".into(),
                Some((parent, _)) => parent.into(),
            };
            continue;
        }
        if changeable(&dir) {
            return false;
        }
        let here = if dir == "/" {
            format!("/{comp}")
        } else {
            format!("{dir}/{comp}")
        };
        if no_symlinks {
            // The kernel's own resolution equals the path: nothing to follow.
            dir = here;
            continue;
        }
        match std::fs::symlink_metadata(format!("{root}{here}")) {
            Ok(m) if m.file_type().is_symlink() => {
                hops += 1;
                if hops > 40 {
                    return false;
                }
                let Ok(target) = std::fs::read_link(format!("{root}{here}")) else {
                    return false;
                };
                let target = target.to_string_lossy().into_owned();
                if target.starts_with('/') {
                    dir = "/".into();
                }
                todo.extend(
                    target
                        .split('/')
                        .filter(|c| !c.is_empty())
                        .map(str::to_string)
                        .rev(),
                );
            }
            Ok(_) => dir = here,
            Err(_) => return false,
        }
    }
    true
}

fn parse_shebang(head: &[u8]) -> Option<Vec<String>> {
    let rest = head.strip_prefix(b"#!")?;
    let line = rest.split(|b| *b == b'\n').next()?;
    let line = String::from_utf8_lossy(line);
    let line = line.trim_matches(|c| c == ' ' || c == '\t' || c == '\r');
    let (interp, arg) = match line.split_once([' ', '\t']) {
        Some((i, a)) => (i, a.trim_matches([' ', '\t'])),
        None => (line, ""),
    };
    if interp.is_empty() {
        return None;
    }
    let mut v = vec![interp.to_string()];
    if !arg.is_empty() {
        v.push(arg.to_string());
    }
    Some(v)
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
    fn shebang_lines() {
        let v = |s: &[&str]| {
            Some(
                s.iter()
                    .map(std::string::ToString::to_string)
                    .collect::<Vec<_>>(),
            )
        };
        assert_eq!(parse_shebang(b"#!/bin/sh\necho"), v(&["/bin/sh"]));
        assert_eq!(
            parse_shebang(b"#! /usr/bin/env  python3 \n"),
            v(&["/usr/bin/env", "python3"])
        );
        assert_eq!(
            parse_shebang(b"#!/usr/bin/su -c x\r\n"),
            v(&["/usr/bin/su", "-c x"])
        );
        assert_eq!(parse_shebang(b"\x7fELF"), None);
        assert_eq!(parse_shebang(b"#!\n"), None);
    }

    #[test]
    fn parses_stat_with_hostile_comm() {
        let line = b"1234 (a) b (c)) S 99 1234 1234 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 3 0 777 1000 10 18446744073709551615";
        let s = parse_stat(line).unwrap();
        assert_eq!(s.ppid, 99);
        assert_eq!(s.pgrp, 1234);
        assert_eq!(s.num_threads, 3);
        assert_eq!(s.starttime, 777);
    }

    #[test]
    fn reads_own_stat() {
        let s = proc_stat(std::process::id()).unwrap();
        assert_eq!(s.ppid, std::os::unix::process::parent_id());
        assert!(s.num_threads >= 1);
    }

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
    fn reads_own_memory_strings_and_arrays() {
        let s = b"hello\0";
        let me = std::process::id();
        let (b, whole) = read_cstring(me, s.as_ptr() as u64, 100).unwrap();
        assert_eq!((b.as_slice(), whole), (&b"hello"[..], true));
        let (b, whole) = read_cstring(me, s.as_ptr() as u64, 3).unwrap();
        assert_eq!((b.as_slice(), whole), (&b"hel"[..], false));

        let a = CString::new("a").unwrap();
        let bb = CString::new("bb").unwrap();
        let arr: [u64; 3] = [a.as_ptr() as u64, bb.as_ptr() as u64, 0];
        let argv = read_argv(me, arr.as_ptr() as u64, 8, 10, 100).unwrap();
        assert_eq!(argv.args, vec!["a", "bb"]);
        assert!(!argv.truncated);
        let argv = read_argv(me, arr.as_ptr() as u64, 8, 1, 100).unwrap();
        assert_eq!(argv.args, vec!["a"]);
        assert!(argv.truncated);
        let argv = read_argv(me, arr.as_ptr() as u64, 8, 10, 3).unwrap();
        assert!(argv.truncated);
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
    fn stable_paths() {
        let nw = ["/usr/bin", "/usr/lib"];
        // Root-owned, not writable by others: stable for an ordinary user.
        assert!(path_is_stable("", "/usr/bin/env", 1000, &nw, false));
        assert!(path_is_stable("", "/usr/bin/env", 1000, &nw, true));
        // /tmp is world-writable.
        assert!(!path_is_stable("", "/tmp/x", 1000, &nw, false));
        assert!(!path_is_stable("", "/tmp/x", 1000, &nw, true));
        // For root, only what Landlock keeps every tree from writing.
        assert!(path_is_stable("", "/usr/bin/env", 0, &nw, false));
        assert!(!path_is_stable("", "/var/tmp/x", 0, &nw, false));
        // A missing component is not stable.
        assert!(!path_is_stable("", "/nonexistent-dir/x", 1000, &nw, false));
    }

    #[test]
    fn basename_cases() {
        assert_eq!(basename("/usr/bin/ls"), "ls");
        assert_eq!(basename("ls"), "ls");
    }
}
