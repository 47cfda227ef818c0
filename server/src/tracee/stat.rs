//! What `/proc` says about a process: its `stat` line (state, parent,
//! process group, thread count, start time), from a file that can be kept
//! open and read again ([`StatFile`]), and the thread group a thread
//! belongs to.
//!
//! Failure modes: a process that vanished gives ENOENT (opening) or ESRCH
//! (reading a kept file); a line that cannot be parsed gives InvalidData.

use std::io;

/// What `/proc/<tid>/stat` says about a thread.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProcStat {
    /// The scheduler state letter (`R`, `S`, `D`, `t`, `Z`, ...).
    pub state: u8,
    pub ppid: u32,
    /// Process group id.
    pub pgrp: u32,
    /// Session id.
    pub session: u32,
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
    ///
    /// [`path_is_stable`]: super::stable::path_is_stable
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
    let session = f.next()?.parse().ok()?;
    let num_threads = f.nth(13)?.parse().ok()?;
    let starttime = f.nth(1)?.parse().ok()?;
    Some(ProcStat {
        state,
        ppid,
        pgrp,
        session,
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
    ProcStatus::read(tid)?
        .number("Tgid")
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "no Tgid in status"))
}

/// `/proc/<who>/status` (`who`: `self`, a pid or a tid), read once: the one
/// reader of its `Name:\tvalue` lines.
pub struct ProcStatus(String);

impl ProcStatus {
    /// # Errors
    /// The process is gone (`NotFound`) or the file cannot be read.
    pub fn read(who: impl std::fmt::Display) -> io::Result<ProcStatus> {
        std::fs::read_to_string(format!("/proc/{who}/status")).map(ProcStatus)
    }

    /// The value of line `name` (without its colon), trimmed.
    pub fn field(&self, name: &str) -> Option<&str> {
        self.0.lines().find_map(|l| {
            l.strip_prefix(name)
                .and_then(|r| r.strip_prefix(':'))
                .map(str::trim)
        })
    }

    /// A decimal field (`Tgid`, `PPid`, `Seccomp_filters`).
    pub fn number(&self, name: &str) -> Option<u32> {
        self.field(name)?.parse().ok()
    }

    /// A hexadecimal mask (`CapEff`).
    pub fn mask(&self, name: &str) -> Option<u64> {
        u64::from_str_radix(self.field(name)?, 16).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_stat_with_hostile_comm() {
        let line = b"1234 (a) b (c)) S 99 1234 1230 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 3 0 777 1000 10 18446744073709551615";
        let s = parse_stat(line).unwrap();
        assert_eq!(s.ppid, 99);
        assert_eq!(s.pgrp, 1234);
        assert_eq!(s.session, 1230);
        assert_eq!(s.num_threads, 3);
        assert_eq!(s.starttime, 777);
    }

    #[test]
    fn reads_own_status_fields() {
        let st = ProcStatus::read("self").unwrap();
        assert_eq!(st.number("Tgid"), Some(std::process::id()));
        assert!(st.mask("CapEff").is_some());
        assert_eq!(st.field("NoSuchField"), None);
        // A name is a whole name: "Tgid" is not "TgidX".
        assert_eq!(
            ProcStatus("Tgidx:\t3\nTgid:\t4\n".into()).number("Tgid"),
            Some(4)
        );
    }

    #[test]
    fn reads_own_stat() {
        let s = proc_stat(std::process::id()).unwrap();
        assert_eq!(s.ppid, std::os::unix::process::parent_id());
        assert!(s.num_threads >= 1);
    }
}
