//! Reading a trapped process: its /proc entries and its memory.
//!
//! Everything here reads state the kernel keeps (ppid, thread count, start
//! time, cwd, root, fds) or the tracee's memory through `process_vm_readv`.
//! Paths are resolved in the *calling thread's* root, cwd and fd table
//! (`/proc/<pid>/task/<tid>/…`), never the thread-group leader's and never the
//! server's: a thread may have its own (`unshare(CLONE_FILES | CLONE_FS)`).
//!
//! The supervisor runs this for every exec, so it counts system calls: a
//! `/proc/<pid>/stat` can be kept open and read again ([`StatFile`]); one
//! exec's resolutions share one [`View`] (the thread's root opened and read
//! once); a resolved program is `fstat`ed once ([`ExecTarget::meta`]); the
//! exec's strings are read with as few `process_vm_readv` as their layout
//! allows ([`MemReader`]).
//!
//! Failure modes: a process that vanished gives ENOENT/ESRCH; unreadable memory
//! gives EFAULT; callers turn anything unreadable into a deny. Memory read here
//! could change after the read if another task shared it: the supervisor
//! stops every such task first (`supervisor::sharing`).

use std::collections::{HashMap, VecDeque};
use std::ffi::{CString, OsStr};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;

/// What `/proc/<tid>/stat` says about a thread.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProcStat {
    /// The scheduler state letter (`R`, `S`, `D`, `t`, `Z`, ...).
    pub state: u8,
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
    StatFile::open(pid)?.read()
}

/// An open `/proc/<pid>/stat`, read again (`pread` at 0: the kernel writes
/// it afresh) without another path lookup. The fd belongs to the process it
/// was opened on, not to its number: once that process is gone a read fails
/// (ESRCH), it never describes another process that got the same pid.
#[derive(Debug)]
pub struct StatFile {
    file: std::fs::File,
    pid: u32,
}

impl StatFile {
    /// Opens `/proc/<pid>/stat`.
    ///
    /// # Errors
    /// ENOENT when the process is gone.
    pub fn open(pid: u32) -> io::Result<StatFile> {
        Ok(StatFile {
            file: std::fs::File::open(format!("/proc/{pid}/stat"))?,
            pid,
        })
    }

    /// A `stat` file of `pid` (or of a thread) opened elsewhere.
    pub fn from_file(file: std::fs::File, pid: u32) -> StatFile {
        StatFile { file, pid }
    }

    /// What the file says now.
    ///
    /// # Errors
    /// ESRCH when the process is gone; InvalidData when it cannot be parsed.
    pub fn read(&self) -> io::Result<ProcStat> {
        use std::os::unix::fs::FileExt;
        // One pread into a stack buffer: the line fits (comm is at most 16
        // bytes, the 52 numbers at most 20 digits each); a full buffer reads
        // on to the end.
        let mut buf = [0u8; 1536];
        let n = self.file.read_at(&mut buf, 0)?;
        let mut long = Vec::new();
        let text = if n < buf.len() {
            &buf[..n]
        } else {
            long.extend_from_slice(&buf);
            let mut off = n as u64;
            loop {
                let mut more = [0u8; 1536];
                let k = self.file.read_at(&mut more, off)?;
                if k == 0 {
                    break;
                }
                long.extend_from_slice(&more[..k]);
                off += k as u64;
            }
            &long[..]
        };
        parse_stat(text).ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!("/proc/{}/stat cannot be parsed", self.pid),
            )
        })
    }

    /// The owner of the process's `/proc` entries: its effective uid (root
    /// when it is not dumpable: the stricter reading for
    /// [`path_is_stable`]). `fstat` on the open file: no lookup.
    ///
    /// # Errors
    /// fstat failed.
    pub fn owner(&self) -> io::Result<u32> {
        use std::os::unix::fs::MetadataExt;
        Ok(self.file.metadata()?.uid())
    }
}

fn parse_stat(text: &[u8]) -> Option<ProcStat> {
    // comm may contain spaces and parentheses: fields resume after the last ')'.
    let close = text.iter().rposition(|&b| b == b')')?;
    let rest = std::str::from_utf8(text.get(close + 2..)?).ok()?;
    let mut f = rest.split_ascii_whitespace();
    // rest[0] is field 3 (state); ppid is field 4, pgrp 5, num_threads 20, starttime 22.
    let state = *f.next()?.as_bytes().first()?;
    let ppid = f.next()?.parse().ok()?;
    let pgrp = f.next()?.parse().ok()?;
    let num_threads = f.nth(14)?.parse().ok()?;
    let starttime = f.nth(1)?.parse().ok()?;
    Some(ProcStat {
        state,
        ppid,
        pgrp,
        num_threads,
        starttime,
    })
}

/// The thread-group id of thread `tid`: cheap when the process has one
/// thread or `tid` leads it (`tgkill(tid, tid, 0)` succeeds only for a
/// leader: signal 0 checks, sends nothing); `/proc/<tid>/status` otherwise.
///
/// # Errors
/// The process is gone or its status cannot be parsed.
pub fn tgid_of(tid: u32, stat: &ProcStat) -> io::Result<u32> {
    if stat.num_threads <= 1 {
        return Ok(tid);
    }
    // SAFETY: tgkill takes three integers; signal 0 sends nothing.
    let leader = unsafe {
        libc::syscall(
            libc::SYS_tgkill,
            tid as libc::c_long,
            tid as libc::c_long,
            0 as libc::c_long,
        )
    } == 0;
    if leader {
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

/// Bytes from `addr` to the end of its page.
fn page_rest(addr: u64) -> usize {
    (PAGE - (addr % PAGE)) as usize
}

/// Reads a NUL-terminated string of at most `max` bytes (without the NUL).
/// Returns the bytes and whether the NUL was found within `max`.
///
/// # Errors
/// EFAULT if the first byte is unreadable; ESRCH if the process is gone.
pub fn read_cstring(pid: u32, addr: u64, max: usize) -> io::Result<(Vec<u8>, bool)> {
    MemReader::new(pid).cstring(addr, max)
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
    MemReader::new(pid).ptr_array(addr, ptr_size, max)
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
    MemReader::new(pid).argv(addr, ptr_size, max_argc, max_bytes)
}

/// Reads one process's memory, keeping what it read: an exec's path, argv
/// array and strings usually lie in one or two pages (argv[0] is often the
/// path itself), so [`MemReader::prefetch`] reads the spans it is given in
/// one `process_vm_readv` and later reads inside them cost nothing. Reads
/// never cross a page boundary in one piece, so a string that ends just
/// before an unmapped page is still read. What was read is one snapshot per
/// span: callers read only memory nobody else can write (see
/// `supervisor::sharing`), and take a fresh reader after anything may have.
pub struct MemReader {
    pid: u32,
    /// (address, bytes read there), each within one page.
    chunks: Vec<(u64, Vec<u8>)>,
}

/// The most spans one prefetch reads (`IOV_MAX` is 1024).
const PREFETCH_SPANS: usize = 64;

impl MemReader {
    pub fn new(pid: u32) -> MemReader {
        MemReader {
            pid,
            chunks: Vec::new(),
        }
    }

    /// Reads the spans `(address, length)` in one system call, each clipped
    /// to its page and skipped when already read. What cannot be read is
    /// left for the later reads to report.
    pub fn prefetch(&mut self, spans: &[(u64, usize)]) {
        let mut want: Vec<(u64, usize)> = Vec::new();
        for &(addr, len) in spans {
            let len = len.min(page_rest(addr));
            if addr == 0 || len == 0 || self.cached(addr).is_some() {
                continue;
            }
            if want.iter().any(|&(a, l)| a <= addr && addr < a + l as u64) {
                continue;
            }
            want.push((addr, len));
            if want.len() == PREFETCH_SPANS {
                break;
            }
        }
        if want.is_empty() {
            return;
        }
        let mut bufs: Vec<Vec<u8>> = want.iter().map(|&(_, l)| vec![0u8; l]).collect();
        let local: Vec<libc::iovec> = bufs
            .iter_mut()
            .map(|b| libc::iovec {
                iov_base: b.as_mut_ptr().cast(),
                iov_len: b.len(),
            })
            .collect();
        let remote: Vec<libc::iovec> = want
            .iter()
            .map(|&(a, l)| libc::iovec {
                iov_base: a as *mut libc::c_void,
                iov_len: l,
            })
            .collect();
        // SAFETY: each local iovec points into a buffer of `bufs`, valid for
        // its length and alive across the call; the remote addresses are
        // only interpreted by the kernel in the other process.
        let n = unsafe {
            libc::process_vm_readv(
                self.pid as libc::pid_t,
                local.as_ptr(),
                local.len() as libc::c_ulong,
                remote.as_ptr(),
                remote.len() as libc::c_ulong,
                0,
            )
        };
        // The kernel stops at the first span it cannot read: keep those before.
        let mut left = usize::try_from(n).unwrap_or(0);
        for ((addr, _), mut buf) in want.into_iter().zip(bufs) {
            if left == 0 {
                break;
            }
            let k = buf.len().min(left);
            buf.truncate(k);
            left -= k;
            self.chunks.push((addr, buf));
        }
    }

    /// The bytes read at `addr` onwards, if a chunk holds `addr`.
    fn cached(&self, addr: u64) -> Option<&[u8]> {
        self.chunks.iter().find_map(|(a, b)| {
            let off = addr.checked_sub(*a)?;
            (off < b.len() as u64).then(|| &b[off as usize..])
        })
    }

    /// Up to `want` bytes at `addr`, within its page: from a chunk, or read
    /// now (and kept).
    fn bytes(&mut self, addr: u64, want: usize) -> io::Result<&[u8]> {
        let want = want.min(page_rest(addr));
        let hit = self
            .chunks
            .iter()
            .position(|(a, b)| *a <= addr && addr < *a + b.len() as u64);
        let i = match hit {
            Some(i) => i,
            None => {
                let mut buf = vec![0u8; want];
                let n = read_mem(self.pid, addr, &mut buf)?;
                if n == 0 {
                    return Err(io::Error::from_raw_os_error(libc::EFAULT));
                }
                buf.truncate(n);
                self.chunks.push((addr, buf));
                self.chunks.len() - 1
            }
        };
        let (a, b) = &self.chunks[i];
        let off = (addr - a) as usize;
        let end = b.len().min(off + want);
        Ok(&b[off..end])
    }

    /// Reads a NUL-terminated string of at most `max` bytes (without the
    /// NUL). Returns the bytes and whether the NUL was found within `max`.
    ///
    /// # Errors
    /// EFAULT if the first byte is unreadable; ESRCH if the process is gone.
    pub fn cstring(&mut self, addr: u64, max: usize) -> io::Result<(Vec<u8>, bool)> {
        let mut out = Vec::new();
        let mut cur = addr;
        while out.len() < max {
            let chunk = self.bytes(cur, max - out.len() + 1)?;
            if let Some(nul) = chunk.iter().position(|&b| b == 0) {
                out.extend_from_slice(&chunk[..nul]);
                return Ok((out, true));
            }
            let n = chunk.len();
            out.extend_from_slice(chunk);
            cur += n as u64;
        }
        out.truncate(max);
        Ok((out, false))
    }

    /// Reads a NULL-terminated array of pointers (`ptr_size` 4 or 8 bytes
    /// each), at most `max` entries. Returns the pointers and whether the
    /// NULL was found.
    ///
    /// # Errors
    /// As [`MemReader::cstring`].
    pub fn ptr_array(
        &mut self,
        addr: u64,
        ptr_size: usize,
        max: usize,
    ) -> io::Result<(Vec<u64>, bool)> {
        let mut out = Vec::new();
        let mut cur = addr;
        while out.len() <= max {
            let want = page_rest(cur).min((max + 1 - out.len()) * ptr_size);
            let want = (want - want % ptr_size).max(ptr_size);
            let chunk = self.bytes(cur, want)?;
            let n = chunk.len() - chunk.len() % ptr_size;
            let raw = if n == 0 {
                // A pointer split across a page boundary: read it whole.
                let mut whole = vec![0u8; ptr_size];
                if read_mem(self.pid, cur, &mut whole)? < ptr_size {
                    return Err(io::Error::from_raw_os_error(libc::EFAULT));
                }
                whole
            } else {
                chunk[..n].to_vec()
            };
            let n = raw.len();
            for c in raw.chunks_exact(ptr_size) {
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

    /// Reads an argv (array of C strings) within the limits; the strings
    /// not already read are fetched together first.
    ///
    /// # Errors
    /// As [`MemReader::cstring`]; a NULL argv pointer gives an empty argv.
    pub fn argv(
        &mut self,
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
        let (mut ptrs, complete) = self.ptr_array(addr, ptr_size, max_argc)?;
        let spans: Vec<(u64, usize)> = ptrs.iter().map(|&p| (p, max_bytes + 1)).collect();
        self.prefetch(&spans);
        let mut truncated = !complete;
        let mut budget = max_bytes;
        let mut args = Vec::with_capacity(ptrs.len());
        for &p in &ptrs {
            if budget == 0 {
                truncated = true;
                break;
            }
            let (bytes, whole) = self.cstring(p, budget)?;
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
}

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

/// (device, inode) of an open fd.
///
/// # Errors
/// fstat failed.
pub fn fd_identity(fd: i32) -> io::Result<(u64, u64)> {
    fd_meta(fd).map(|m| (m.dev, m.ino))
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
    root_fd: OwnedFd,
    /// The root's path in the server's view (`readlink`).
    root: String,
}

impl View {
    /// Opens thread `tid`'s root and reads where it is.
    ///
    /// # Errors
    /// The thread is gone (ENOENT) or its root cannot be read.
    pub fn open(pid: u32, tid: u32) -> io::Result<View> {
        let task = task_dir(pid, tid);
        let link = format!("{task}/root");
        let root_fd = open_path(&link)?;
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
        let Ok(now) = open_path(&format!("{}/root", self.task)) else {
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
    let resolved = readlink(&format!("/proc/self/fd/{}", file.as_raw_fd()))
        .ok()
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

/// The interpreter line of a `#!` script: `[interpreter, optional argument]`.
///
/// The kernel runs the interpreter itself, without another `execve` the
/// supervisor could see, so the caller judges it here. Reads the first 256
/// bytes (the kernel's limit) through our own fd on the file; `None` if it
/// is not a script or cannot be read. Only a regular file of at least two
/// bytes can be a script: anything else is not opened (a FIFO would block
/// the open, a device would see it), and the kernel refuses to exec it.
///
/// What a file's first line says is remembered under its cheap key
/// ([`FileMeta::key`]: device, inode, size, mtime, ctime), like the identity
/// index's digests: any write changes ctime, so a changed file is read
/// again. The key is taken when the file is opened, before it is read: a
/// write in between is remembered under the old key, which no later look-up
/// of the changed file has. (A file the tree can write may change after any
/// read; such an exec is watched, see `supervisor::exec`.)
pub fn shebang(target: &ExecTarget) -> Option<Vec<String>> {
    if !target.meta.is_regular() || target.meta.size < 2 {
        return None;
    }
    let key = target.meta.key();
    if let Some(line) = SHEBANGS.lookup(&key) {
        return line;
    }
    let line = read_shebang(target)?;
    SHEBANGS.remember(key, line.clone());
    line
}

/// Reads the first line; `None`: unreadable, `Some(None)`: not a script.
fn read_shebang(target: &ExecTarget) -> Option<FirstLine> {
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
    Some(parse_shebang(&buf[..n]))
}

/// How many files' first lines [`shebang`] remembers.
const SHEBANG_ENTRIES: usize = 2048;

/// A first line read, or `None`: not a script.
type FirstLine = Option<Vec<String>>;

/// The first lines [`shebang`] read, by file key; the oldest forgotten first.
struct Shebangs(std::sync::Mutex<(HashMap<FileKey, FirstLine>, VecDeque<FileKey>)>);

static SHEBANGS: std::sync::LazyLock<Shebangs> =
    std::sync::LazyLock::new(|| Shebangs(std::sync::Mutex::new(Default::default())));

impl Shebangs {
    fn lookup(&self, key: &FileKey) -> Option<FirstLine> {
        let c = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        c.0.get(key).cloned()
    }

    fn remember(&self, key: FileKey, line: FirstLine) {
        let mut c = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if c.0.insert(key, line).is_none() {
            c.1.push_back(key);
            if c.1.len() > SHEBANG_ENTRIES {
                if let Some(old) = c.1.pop_front() {
                    c.0.remove(&old);
                }
            }
        }
    }
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
/// first, each resolved like an exec in `view`, with the argv the kernel
/// builds: `[interpreter, optional argument, file name, args...]` where the
/// file name is `script_name` (the name the kernel was given) for the first
/// level and the previous interpreter's path after that.
///
/// # Errors
/// A chain deeper than [`MAX_INTERPRETER_DEPTH`], or an interpreter that
/// exists but cannot be resolved.
pub fn interpreter_chain(
    view: &View,
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
        let t = match resolve_in(view, AT_FDCWD, interp.as_bytes(), false) {
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
/// walk fails or loops. An approximation: see docs/security-model.md.
///
/// `canonical` is where the lookup ends, as the kernel resolved it (the
/// path of the file opened, no symlink in it), when known: a step of the
/// walk that is a leading part of it is a real directory (or the file), so
/// it is not tested for a symlink. Only the other steps are (one `readlink`
/// each: EINVAL says "not a symlink"). Whatever a step's type, the
/// directory it is looked up in is checked.
pub fn path_is_stable(
    root: &str,
    path: &str,
    canonical: Option<&str>,
    uid: u32,
    no_write: &[&str],
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
    let on_canonical = |here: &str| {
        canonical
            .is_some_and(|c| c == here || c.strip_prefix(here).is_some_and(|r| r.starts_with('/')))
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
        if on_canonical(&here) {
            dir = here;
            continue;
        }
        match std::fs::read_link(format!("{root}{here}")) {
            Ok(target) => {
                hops += 1;
                if hops > 40 {
                    return false;
                }
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
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => dir = here,
            Err(_) => return false,
        }
    }
    true
}

/// Can the tree not write the file itself, so what the kernel reads from it
/// (its `#!` line, its content) is what was read here? For a caller with
/// uid `uid` other than 0: the file is owned by root and not writable by
/// group or others; for a root caller: its canonical path (in the tracee's
/// view) is beneath `no_write`, which Landlock keeps every tree from
/// writing. The same approximation as [`path_is_stable`].
pub fn file_is_stable(meta: &FileMeta, canonical: &str, uid: u32, no_write: &[&str]) -> bool {
    if uid == 0 {
        no_write.iter().any(|d| {
            canonical
                .strip_prefix(d)
                .is_some_and(|r| r.is_empty() || r.starts_with('/'))
        })
    } else {
        meta.uid == 0 && meta.mode & 0o022 == 0
    }
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
        let env = Some("/usr/bin/env");
        // Root-owned, not writable by others: stable for an ordinary user.
        assert!(path_is_stable("", "/usr/bin/env", None, 1000, &nw));
        assert!(path_is_stable("", "/usr/bin/env", env, 1000, &nw));
        // /tmp is world-writable.
        assert!(!path_is_stable("", "/tmp/x", None, 1000, &nw));
        assert!(!path_is_stable("", "/tmp/x", Some("/tmp/x"), 1000, &nw));
        // For root, only what Landlock keeps every tree from writing.
        assert!(path_is_stable("", "/usr/bin/env", None, 0, &nw));
        assert!(!path_is_stable("", "/var/tmp/x", None, 0, &nw));
        // A missing component is not stable.
        assert!(!path_is_stable("", "/nonexistent-dir/x", None, 1000, &nw));
    }

    #[test]
    fn a_canonical_hint_never_skips_a_detour_through_a_changeable_directory() {
        // For a root caller, with `no_write` = [<d>/a]: <d> (an ancestor) and
        // <d>/a are unchangeable, <d>/b is not.
        let d = std::env::temp_dir().join(format!("agentsh-walk-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(d.join("a")).unwrap();
        std::fs::create_dir_all(d.join("b")).unwrap();
        std::fs::write(d.join("a/f"), b"x").unwrap();
        std::os::unix::fs::symlink("a", d.join("link")).unwrap();
        std::os::unix::fs::symlink("../a/f", d.join("b/hop")).unwrap();
        std::os::unix::fs::symlink("b/hop", d.join("detour")).unwrap();
        let d = d.display().to_string();
        let a = format!("{d}/a");
        let nw = [a.as_str()];
        let f = format!("{d}/a/f");
        for hint in [None, Some(f.as_str())] {
            assert!(path_is_stable("", &f, hint, 0, &nw), "{hint:?}");
            assert!(path_is_stable("", &format!("{d}/link/f"), hint, 0, &nw));
            // Ends at <d>/a/f too, but through <d>/b.
            assert!(!path_is_stable("", &format!("{d}/detour"), hint, 0, &nw));
        }
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn who_may_write_the_file_itself() {
        let m = |uid, mode| FileMeta {
            dev: 1,
            ino: 2,
            mode: libc::S_IFREG | mode,
            uid,
            size: 3,
            mtime: (0, 0),
            ctime: (0, 0),
        };
        let nw = ["/usr/bin"];
        assert!(file_is_stable(&m(0, 0o755), "/opt/x", 1000, &nw));
        assert!(!file_is_stable(&m(1000, 0o755), "/opt/x", 1000, &nw));
        assert!(!file_is_stable(&m(0, 0o775), "/opt/x", 1000, &nw));
        assert!(!file_is_stable(&m(0, 0o757), "/opt/x", 1000, &nw));
        assert!(file_is_stable(&m(0, 0o755), "/usr/bin/x", 0, &nw));
        assert!(!file_is_stable(&m(0, 0o755), "/opt/x", 0, &nw));
        assert!(!file_is_stable(&m(0, 0o755), "/usr/binx", 0, &nw));
    }

    /// Two pages mapped, the second then unmapped: a string or array may end
    /// right at the hole.
    fn page_before_a_hole() -> *mut u8 {
        // SAFETY: an anonymous private mapping of two pages.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                8192,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert_ne!(p, libc::MAP_FAILED);
        // SAFETY: unmapping the second page of the mapping just made.
        unsafe { libc::munmap(p.cast::<u8>().add(4096).cast(), 4096) };
        p.cast()
    }

    #[test]
    fn strings_and_arrays_at_page_edges() {
        let me = std::process::id();
        let page = page_before_a_hole();
        // SAFETY: writes inside the first page, which stays mapped.
        unsafe {
            std::ptr::write_bytes(page, b'a', 4096);
            *page.add(4095) = 0;
        }
        let end = page as u64 + 4096;
        let mut mem = MemReader::new(me);
        mem.prefetch(&[(end - 10, 100), (end - 4000, 100)]);
        let (s, whole) = mem.cstring(end - 10, 100).unwrap();
        assert_eq!((s.len(), whole), (9, true));
        // No NUL before the hole: unreadable, not a short string.
        // SAFETY: inside the first page.
        unsafe { *page.add(4095) = b'a' };
        assert!(MemReader::new(me).cstring(end - 10, 100).is_err());
        // An unaligned pointer array that crosses a page boundary.
        let two = std::ptr::from_mut(Box::leak(Box::new([0u8; 16384])));
        let base = (two as u64).next_multiple_of(4096) + 4096 - 4;
        if base + 24 <= two as u64 + 16384 {
            let words = [0x1111_u64, 0x2222, 0];
            // SAFETY: 24 bytes inside the leaked buffer, written unaligned.
            unsafe {
                std::ptr::copy_nonoverlapping(words.as_ptr().cast::<u8>(), base as *mut u8, 24);
            };
            let (ptrs, complete) = MemReader::new(me).ptr_array(base, 8, 10).unwrap();
            assert_eq!((ptrs, complete), (vec![0x1111, 0x2222], true));
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
    fn basename_cases() {
        assert_eq!(basename("/usr/bin/ls"), "ls");
        assert_eq!(basename("ls"), "ls");
    }
}
