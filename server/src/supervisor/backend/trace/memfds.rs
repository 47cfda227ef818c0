//! A traced process's memory read with `process_vm_readv` where the kernel
//! has it and lets the tracer read (current gVisor does), else through a
//! `/proc/<pid>/mem` fd kept open across its stops: one call for a string
//! where `PTRACE_PEEKDATA` takes one request per eight bytes (each a
//! sandbox syscall under gVisor). `process_vm_readv` needs no open per
//! process (an open of `/proc/<pid>/mem` costs gVisor about 80 µs); gVisor
//! builds before 2023 have none (`ENOSYS`: never asked again), and a tracer
//! that may not read another uid's memory without its credentials, or
//! under Docker's default profile without `CAP_SYS_PTRACE`, gets `EPERM`
//! (that process is read through its fd, opened as its owner).
//!
//! The fd is kept per process until its next image (`exec`) or its end
//! (`gone`): it reads the memory it was opened on.
//!
//! Failure modes: an fd that cannot be opened or reads nothing is dropped
//! and the caller falls back to peeking (`None`).

use std::collections::HashMap;
use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;

/// Kept `/proc/<pid>/mem` fds, by process.
#[derive(Default)]
pub(super) struct MemFds {
    files: HashMap<u32, File>,
}

/// At most this many kept (a process beyond: opened again next time).
const MAX_KEPT: usize = 256;

impl MemFds {
    /// The NUL-terminated string at `addr` in process `pid` (at most `max`
    /// bytes, and whether its NUL came within them); `None` where the fd
    /// cannot read it (the caller peeks instead).
    pub(super) fn cstring(
        &mut self,
        pid: u32,
        addr: u64,
        max: usize,
    ) -> Option<io::Result<(Vec<u8>, bool)>> {
        if !self.files.contains_key(&pid) {
            match vm_cstring(pid, addr, max) {
                Vm::Read(r) => return Some(r),
                Vm::Unavailable => {}
            }
            let f =
                crate::tracee::with_owner(pid, || File::open(format!("/proc/{pid}/mem"))).ok()?;
            if self.files.len() >= MAX_KEPT {
                self.files.clear();
            }
            self.files.insert(pid, f);
        }
        let f = self.files.get(&pid)?;
        match page_walk(addr, max, |buf, at| f.read_at(buf, at)) {
            Ok(found) => Some(Ok(found)),
            // Nothing read at all: the fd goes, the caller peeks.
            Err((_, true)) => {
                self.files.remove(&pid);
                None
            }
            Err((e, false)) => Some(Err(e)),
        }
    }

    /// Process `pid` runs a new image, or is gone: its fd goes.
    pub(super) fn forget(&mut self, pid: u32) {
        self.files.remove(&pid);
    }
}

/// What `process_vm_readv` gave.
enum Vm {
    /// The string (or EFAULT: nothing readable at `addr`).
    Read(io::Result<(Vec<u8>, bool)>),
    /// Not here (`ENOSYS`), or not for this process (`EPERM`, `ESRCH`...):
    /// read it through its fd.
    Unavailable,
}

/// The NUL-terminated string at `addr` in process `pid` read with
/// `process_vm_readv`, a page at a time (the next may be unmapped).
fn vm_cstring(pid: u32, addr: u64, max: usize) -> Vm {
    use std::sync::atomic::{AtomicBool, Ordering};
    static NONE_HERE: AtomicBool = AtomicBool::new(false);
    if NONE_HERE.load(Ordering::Relaxed) {
        return Vm::Unavailable;
    }
    let read = |buf: &mut [u8], at: u64| {
        let local = libc::iovec {
            iov_base: buf.as_mut_ptr().cast(),
            iov_len: buf.len(),
        };
        let remote = libc::iovec {
            iov_base: at as *mut libc::c_void,
            iov_len: buf.len(),
        };
        // SAFETY: `local` points into `buf`, valid for its length; the
        // remote address is only interpreted by the kernel in the other
        // process.
        let n = unsafe { libc::process_vm_readv(pid as libc::pid_t, &local, 1, &remote, 1, 0) };
        usize::try_from(n).map_err(|_| io::Error::last_os_error())
    };
    match page_walk(addr, max, read) {
        Ok(found) => Vm::Read(Ok(found)),
        Err((e, _)) => match e.raw_os_error() {
            Some(libc::ENOSYS) => {
                NONE_HERE.store(true, Ordering::Relaxed);
                Vm::Unavailable
            }
            // Nothing mapped there: what peeking or the fd would find.
            Some(libc::EFAULT) => Vm::Read(Err(e)),
            _ => Vm::Unavailable,
        },
    }
}

/// The NUL-terminated string at `addr` (at most `max` bytes, and whether
/// its NUL came within them), read a page at a time with `read(buf, at)`
/// (the next page may be unmapped). A read of nothing is EFAULT. An error
/// says whether nothing was read before it.
fn page_walk(
    addr: u64,
    max: usize,
    mut read: impl FnMut(&mut [u8], u64) -> io::Result<usize>,
) -> Result<(Vec<u8>, bool), (io::Error, bool)> {
    let mut out = Vec::new();
    let mut at = addr;
    let mut buf = [0u8; 4096];
    while out.len() <= max {
        let rest = (4096 - (at % 4096)) as usize;
        let want = rest.min(max + 1 - out.len());
        let n = match read(&mut buf[..want], at) {
            Ok(0) => Err(io::Error::from_raw_os_error(libc::EFAULT)),
            r => r,
        }
        .map_err(|e| (e, out.is_empty()))?;
        let got = &buf[..n];
        if let Some(end) = got.iter().position(|b| *b == 0) {
            out.extend_from_slice(&got[..end]);
            return Ok((out, true));
        }
        out.extend_from_slice(got);
        at += n as u64;
    }
    out.truncate(max);
    Ok((out, false))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A child's string is read (whole, cut at `max`), and an address with
    /// nothing mapped is EFAULT, not a fall back to the fd.
    #[test]
    fn a_childs_string_is_read_and_an_unmapped_address_is_efault() {
        let text = b"/etc/agentsh/shim.conf\0";
        // SAFETY: the child only sleeps in a loop until killed.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0);
        if pid == 0 {
            loop {
                // SAFETY: plain syscall.
                unsafe { libc::pause() };
            }
        }
        // The child has this process's memory as it was at fork.
        let addr = text.as_ptr() as u64;
        let mut m = MemFds::default();
        let got = m
            .cstring(pid as u32, addr, 4096)
            .expect("read")
            .expect("ok");
        assert_eq!(got, (b"/etc/agentsh/shim.conf".to_vec(), true));
        let cut = m.cstring(pid as u32, addr, 4).expect("read").expect("ok");
        assert_eq!(cut, (b"/etc".to_vec(), false));
        let unmapped = m.cstring(pid as u32, 8, 16).expect("an answer");
        assert_eq!(unmapped.unwrap_err().raw_os_error(), Some(libc::EFAULT));
        assert!(m.files.is_empty(), "no fd was needed");
        // SAFETY: our own child.
        unsafe {
            libc::kill(pid, libc::SIGKILL);
            libc::waitpid(pid, std::ptr::null_mut(), 0);
        }
    }
}
