//! Reading a tracee's memory: C strings, pointer arrays and argv, through
//! `process_vm_readv` (`/proc/<pid>/mem` where there is none: gVisor), a
//! page at a time and kept ([`MemReader`]), so an exec's strings cost as
//! few system calls as their layout allows.
//!
//! Failure modes: unreadable memory gives EFAULT, a vanished process ESRCH.
//! Memory read here could change after the read if another task shared it:
//! the supervisor stops every such task first (`supervisor::sharing`).

use std::io;

/// Reads up to `buf.len()` bytes of `pid`'s memory at `addr`.
fn read_mem(pid: u32, addr: u64, buf: &mut [u8]) -> io::Result<usize> {
    use std::sync::atomic::{AtomicBool, Ordering};
    // gVisor has no process_vm_readv: once it said so, never asked again
    // (each call is a sandbox syscall there).
    static NO_VM_READV: AtomicBool = AtomicBool::new(false);
    if buf.is_empty() {
        return Ok(0);
    }
    if NO_VM_READV.load(Ordering::Relaxed) {
        let _owner = super::access::as_owner(pid);
        return read_proc_mem(pid, addr, buf);
    }
    let local = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    let remote = libc::iovec {
        iov_base: addr as *mut libc::c_void,
        iov_len: buf.len(),
    };
    let _owner = super::access::as_owner(pid);
    // SAFETY: `local` points into `buf`, valid for its length; the remote
    // address is only interpreted by the kernel in the other process.
    let n = unsafe { libc::process_vm_readv(pid as libc::pid_t, &local, 1, &remote, 1, 0) };
    if n < 0 {
        let e = io::Error::last_os_error();
        // gVisor has no process_vm_readv; its /proc/<pid>/mem reads the same.
        if e.raw_os_error() == Some(libc::ENOSYS) {
            NO_VM_READV.store(true, Ordering::Relaxed);
            return read_proc_mem(pid, addr, buf);
        }
        return Err(e);
    }
    Ok(n as usize)
}

/// [`read_mem`] through `/proc/<pid>/mem` (ptrace-mode access, like
/// process_vm_readv's). The fd is kept for the next read of the same
/// process ([`MEM_FDS`]) until its next image ([`forget_mem`], which the
/// tracer calls at every exec and exit: an fd reads the memory it was
/// opened on, which a vfork child's former image shares with its parent);
/// one that reads nothing or fails is opened again once.
fn read_proc_mem(pid: u32, addr: u64, buf: &mut [u8]) -> io::Result<usize> {
    use std::os::unix::fs::FileExt;
    let read = |f: &std::fs::File, buf: &mut [u8]| match f.read_at(buf, addr) {
        // An unmapped address reads as EIO here; process_vm_readv says EFAULT.
        Err(e) if e.raw_os_error() == Some(libc::EIO) => {
            Err(io::Error::from_raw_os_error(libc::EFAULT))
        }
        r => r,
    };
    if let Ok(m) = MEM_FDS.lock() {
        if let Some(Ok(n)) = m.get(&pid).map(|f| read(f, buf)) {
            if n > 0 {
                return Ok(n);
            }
        }
    }
    let f = std::fs::File::open(format!("/proc/{pid}/mem"))?;
    let r = read(&f, buf);
    if let Ok(mut m) = MEM_FDS.lock() {
        if m.len() >= MAX_MEM_FDS {
            m.clear();
        }
        m.insert(pid, f);
    }
    r
}

/// Process `pid` runs a new image or is gone: its kept `/proc/<pid>/mem`
/// fd goes.
pub fn forget_mem(pid: u32) {
    if let Ok(mut m) = MEM_FDS.lock() {
        m.remove(&pid);
    }
}

/// `/proc/<pid>/mem` fds kept between reads, by pid.
static MEM_FDS: std::sync::Mutex<std::collections::BTreeMap<u32, std::fs::File>> =
    std::sync::Mutex::new(std::collections::BTreeMap::new());

/// At most this many kept (then they start over).
const MAX_MEM_FDS: usize = 128;

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

/// [`read_cstring`] by `PTRACE_PEEKDATA`, a word at a time: for the
/// tracer, while thread `tid` is in a ptrace stop (cheaper than opening
/// `/proc/<pid>/mem` where `process_vm_readv` is missing, as in gVisor).
///
/// # Errors
/// Not our stopped tracee (ESRCH), or the address unreadable (EIO/EFAULT).
pub fn peek_cstring(tid: u32, addr: u64, max: usize) -> io::Result<(Vec<u8>, bool)> {
    let mut out = Vec::new();
    let mut word_at = addr & !7;
    let mut skip = (addr - word_at) as usize;
    while out.len() < max {
        // SAFETY: errno is thread-local; PEEKDATA returns the word read, so
        // an error shows only in errno.
        let word = unsafe {
            *libc::__errno_location() = 0;
            libc::ptrace(
                libc::PTRACE_PEEKDATA,
                tid as libc::pid_t,
                word_at as *mut libc::c_void,
                std::ptr::null_mut::<libc::c_void>(),
            )
        };
        let err = io::Error::last_os_error();
        if word == -1 && err.raw_os_error().is_some_and(|e| e != 0) {
            return Err(err);
        }
        for &b in &word.to_ne_bytes()[skip..] {
            if b == 0 {
                return Ok((out, true));
            }
            out.push(b);
        }
        skip = 0;
        word_at += 8;
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
        let owner = super::access::as_owner(self.pid);
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
        drop(owner);
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

/// Reads exactly `len` bytes of `pid`'s memory at `addr` (a copy the
/// supervisor judges and then uses itself: nothing is read twice).
///
/// # Errors
/// EFAULT if any byte is unreadable; ESRCH if the process is gone.
pub fn read_bytes(pid: u32, addr: u64, len: usize) -> io::Result<Vec<u8>> {
    let mut buf = vec![0u8; len];
    let mut done = 0;
    while done < len {
        let at = addr
            .checked_add(done as u64)
            .ok_or_else(|| io::Error::from_raw_os_error(libc::EFAULT))?;
        let n = read_mem(pid, at, &mut buf[done..])?;
        if n == 0 {
            return Err(io::Error::from_raw_os_error(libc::EFAULT));
        }
        done += n;
    }
    Ok(buf)
}

/// Writes `data` at `addr` in `pid`'s memory (what a syscall the
/// supervisor made for the caller returns through the caller's memory, such
/// as `sendmmsg`'s `msg_len`), with the owner's ids where the server must
/// take them ([`super::access::as_owner`]).
///
/// # Errors
/// EFAULT if the address is not writable; ESRCH if the process is gone.
pub fn write_bytes(pid: u32, addr: u64, data: &[u8]) -> io::Result<()> {
    let local = libc::iovec {
        iov_base: data.as_ptr() as *mut libc::c_void,
        iov_len: data.len(),
    };
    let remote = libc::iovec {
        iov_base: addr as *mut libc::c_void,
        iov_len: data.len(),
    };
    let _owner = super::access::as_owner(pid);
    // SAFETY: `local` points into `data`, valid for its length; the remote
    // address is only interpreted by the kernel in the other process.
    let n = unsafe { libc::process_vm_writev(pid as libc::pid_t, &local, 1, &remote, 1, 0) };
    if n < 0 {
        let e = io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::ENOSYS) {
            return Err(e);
        }
        use std::os::unix::fs::FileExt;
        let f = std::fs::OpenOptions::new()
            .write(true)
            .open(format!("/proc/{pid}/mem"))?;
        return f.write_all_at(data, addr);
    }
    if n as usize != data.len() {
        return Err(io::Error::from_raw_os_error(libc::EFAULT));
    }
    Ok(())
}

/// Writes `data` at `addr` in the memory of `tid`, a tracee of the calling
/// thread stopped in a ptrace stop, a word at a time (`PTRACE_PEEKDATA`,
/// `PTRACE_POKEDATA`): where neither `process_vm_writev` nor a write to
/// `/proc/<pid>/mem` is there (gVisor: ENOSYS, EINVAL). Like a debugger's
/// write, it reaches a private read-only page too (copy on write).
///
/// # Errors
/// ESRCH if `tid` is not this thread's stopped tracee; EFAULT/EIO if the
/// address is not mapped.
pub fn poke_bytes(tid: u32, addr: u64, data: &[u8]) -> io::Result<()> {
    const WORD: u64 = std::mem::size_of::<libc::c_long>() as u64;
    let end = addr
        .checked_add(data.len() as u64)
        .ok_or_else(|| io::Error::from_raw_os_error(libc::EFAULT))?;
    let mut at = addr - addr % WORD;
    while at < end {
        // SAFETY: errno is this thread's; PEEKDATA's result is a word, its
        // failure told only by errno.
        let word = unsafe {
            *libc::__errno_location() = 0;
            libc::ptrace(
                libc::PTRACE_PEEKDATA,
                tid as libc::pid_t,
                at as usize,
                0usize,
            )
        };
        let e = io::Error::last_os_error();
        if word == -1 && e.raw_os_error().is_some_and(|n| n != 0) {
            return Err(e);
        }
        let mut bytes = word.to_ne_bytes();
        for (i, b) in bytes.iter_mut().enumerate() {
            let a = at + i as u64;
            if a >= addr && a < end {
                *b = data[(a - addr) as usize];
            }
        }
        let word = libc::c_long::from_ne_bytes(bytes);
        poke(tid, at, word)?;
        at += WORD;
    }
    Ok(())
}

/// `PTRACE_POKEDATA` of one word at `at` in the stopped tracee `tid`.
///
/// # Errors
/// ESRCH if `tid` is not this thread's stopped tracee; EFAULT/EIO if the
/// address is not mapped.
pub fn poke(tid: u32, at: u64, word: libc::c_long) -> io::Result<()> {
    // SAFETY: POKEDATA takes the word by value; no memory of ours is passed.
    let rc = unsafe {
        libc::ptrace(
            libc::PTRACE_POKEDATA,
            tid as libc::pid_t,
            at as usize,
            word as usize,
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Writes `data` at `addr` (word-aligned) in the memory of `tid`, a
/// stopped tracee of the calling thread, whole words at a time
/// (`PTRACE_POKEDATA`; the last word's bytes beyond `data` are zeros):
/// for memory only the tracer uses, where nothing beside `data` is kept.
/// Reaches a private read-only page (copy on write).
///
/// # Errors
/// EINVAL if `addr` is not word-aligned; ESRCH if `tid` is not this
/// thread's stopped tracee; EFAULT/EIO if the address is not mapped.
pub fn poke_words(tid: u32, addr: u64, data: &[u8]) -> io::Result<()> {
    const WORD: usize = std::mem::size_of::<libc::c_long>();
    if !addr.is_multiple_of(WORD as u64) {
        return Err(io::Error::from_raw_os_error(libc::EINVAL));
    }
    for (i, chunk) in data.chunks(WORD).enumerate() {
        let mut bytes = [0u8; WORD];
        bytes[..chunk.len()].copy_from_slice(chunk);
        let word = libc::c_long::from_ne_bytes(bytes);
        let at = addr + (i * WORD) as u64;
        poke(tid, at, word)?;
    }
    Ok(())
}

/// Overwrites `data` at `addr` in `pid`'s memory through `/proc/<pid>/mem`,
/// which writes a private read-only page too (copy on write, as a debugger
/// does): a path an exec names may be a string literal. With the owner's
/// ids where the server must take them.
///
/// # Errors
/// EFAULT if the address is not mapped (or a shared read-only mapping);
/// ESRCH if the process is gone.
pub fn overwrite_bytes(pid: u32, addr: u64, data: &[u8]) -> io::Result<()> {
    use std::os::unix::fs::FileExt;
    let _owner = super::access::as_owner(pid);
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(format!("/proc/{pid}/mem"))?;
    f.write_all_at(data, addr)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::CString;

    /// The tracer's peek reads a stopped child's string at any alignment,
    /// across words, up to its NUL, and says when there is none within max.
    #[test]
    fn peek_reads_a_stopped_tracees_string() {
        let text = CString::new("/etc/agentsh/shim.conf, and more words").unwrap();
        let addr = text.as_ptr() as u64;
        // SAFETY: the child only calls async-signal-safe functions.
        let child = unsafe { libc::fork() };
        if child == 0 {
            // SAFETY: as above.
            unsafe {
                libc::ptrace(libc::PTRACE_TRACEME, 0, 0, 0);
                libc::raise(libc::SIGSTOP);
                libc::_exit(0);
            }
        }
        let mut status = 0;
        // SAFETY: waiting for our own child.
        unsafe { libc::waitpid(child, &mut status, 0) };
        assert!(libc::WIFSTOPPED(status));
        let tid = child as u32;
        let whole = peek_cstring(tid, addr, 4096).unwrap();
        assert_eq!(whole, (text.as_bytes().to_vec(), true));
        let from3 = peek_cstring(tid, addr + 3, 4096).unwrap();
        assert_eq!(from3.0, text.as_bytes()[3..].to_vec());
        assert_eq!(
            peek_cstring(tid, addr + 1, 5).unwrap(),
            (b"etc/a".to_vec(), false)
        );
        // SAFETY: our own child, then reaped.
        unsafe {
            libc::kill(child, libc::SIGKILL);
            libc::waitpid(child, &mut status, 0);
        }
        // Not a tracee (any more): an error, never bytes.
        assert!(peek_cstring(tid, addr, 16).is_err());
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
}
