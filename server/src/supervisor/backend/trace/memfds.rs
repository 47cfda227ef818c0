//! A traced process's memory read through a `/proc/<pid>/mem` fd kept
//! open across its stops: one `pread` for a string where
//! `PTRACE_PEEKDATA` takes one request per eight bytes (gVisor has no
//! `process_vm_readv`, and each request is a sandbox syscall there).
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
            let f =
                crate::tracee::with_owner(pid, || File::open(format!("/proc/{pid}/mem"))).ok()?;
            if self.files.len() >= MAX_KEPT {
                self.files.clear();
            }
            self.files.insert(pid, f);
        }
        let f = self.files.get(&pid)?;
        let mut out = Vec::new();
        let mut at = addr;
        let mut buf = [0u8; 4096];
        while out.len() <= max {
            // Up to the end of the page (the next may be unmapped).
            let rest = (4096 - (at % 4096)) as usize;
            let want = rest.min(max + 1 - out.len());
            match f.read_at(&mut buf[..want], at) {
                Ok(0) | Err(_) if out.is_empty() => {
                    self.files.remove(&pid);
                    return None;
                }
                Ok(0) => return Some(Err(io::Error::from_raw_os_error(libc::EFAULT))),
                Err(e) => return Some(Err(e)),
                Ok(n) => {
                    if let Some(end) = buf[..n].iter().position(|b| *b == 0) {
                        out.extend_from_slice(&buf[..end]);
                        return Some(Ok((out, true)));
                    }
                    out.extend_from_slice(&buf[..n]);
                    at += n as u64;
                }
            }
        }
        out.truncate(max);
        Some(Ok((out, false)))
    }

    /// Process `pid` runs a new image, or is gone: its fd goes.
    pub(super) fn forget(&mut self, pid: u32) {
        self.files.remove(&pid);
    }
}
