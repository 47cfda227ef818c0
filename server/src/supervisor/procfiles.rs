//! The `/proc` files of the processes a tree's execs keep asking about,
//! kept open between execs.
//!
//! Every exec of a vfork child asks about its parent (a shell's or a
//! runtime's spawning process: its stat for the sharing check and the depth,
//! its `syscall` line, its threads and their children when it has more than
//! one). That parent lives long and the child is new each time, so the
//! parent's files are opened once and read again (`pread` at 0, `lseek` +
//! `getdents64`): a read costs no path lookup and no open or close. An open
//! `/proc/<pid>/…` file belongs to the process it was opened on, not to the
//! number: once that process is gone its `stat` fails to read (ESRCH), and
//! the entry is reopened by number (a new process may have it now). At most
//! [`KEPT`] processes are kept per tree (a few file descriptors each), the
//! least recently used closed first; the files close with the tree.
//!
//! Within one exec, [`ProcFiles::stat`] answers a process's stat from what
//! this exec already read (the sharing check and the depth read the same
//! parent); [`ProcFiles::stat_now`] always reads.
//!
//! Failure modes: every read returns the kernel's error; a file that cannot
//! be kept open (EMFILE) is read the ordinary way instead.

use crate::tracee::{self, ProcStat, StatFile};
use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;

/// Processes kept per tree.
const KEPT: usize = 4;
/// Per-thread `children` files kept per process.
const CHILDREN_KEPT: usize = 4;
/// Per-thread `stat` files kept per process.
const THREADS_KEPT: usize = 8;

struct Kept {
    pid: u32,
    stat: StatFile,
    syscall: Option<File>,
    task: Option<File>,
    children: Vec<(u32, File)>,
    thread_stats: Vec<(u32, StatFile)>,
}

/// See the module doc.
#[derive(Default)]
pub struct ProcFiles {
    /// Most recently used last.
    kept: Vec<Kept>,
    /// (pid, stat) read during the current exec.
    memo: Vec<(u32, ProcStat)>,
}

impl ProcFiles {
    /// Forgets what the previous exec read (the files stay open).
    pub fn begin_exec(&mut self) {
        self.memo.clear();
    }

    /// `pid`'s entry, opened if needed, most recently used now.
    fn entry(&mut self, pid: u32) -> io::Result<&mut Kept> {
        if let Some(i) = self.kept.iter().position(|k| k.pid == pid) {
            let k = self.kept.remove(i);
            self.kept.push(k);
        } else {
            let stat = StatFile::open(pid)?;
            if self.kept.len() == KEPT {
                self.kept.remove(0);
            }
            self.kept.push(Kept {
                pid,
                stat,
                syscall: None,
                task: None,
                children: Vec::new(),
                thread_stats: Vec::new(),
            });
        }
        Ok(self.kept.last_mut().expect("just pushed"))
    }

    fn forget(&mut self, pid: u32) {
        self.kept.retain(|k| k.pid != pid);
    }

    /// `pid`'s stat: from this exec's reads if it was read already.
    ///
    /// # Errors
    /// The process is gone (ENOENT, ESRCH) or its stat cannot be parsed.
    pub fn stat(&mut self, pid: u32) -> io::Result<ProcStat> {
        if let Some((_, s)) = self.memo.iter().find(|(p, _)| *p == pid) {
            return Ok(*s);
        }
        self.stat_now(pid)
    }

    /// `pid`'s stat, read now.
    ///
    /// # Errors
    /// As [`ProcFiles::stat`].
    pub fn stat_now(&mut self, pid: u32) -> io::Result<ProcStat> {
        let s = match self.entry(pid).and_then(|k| k.stat.read()) {
            Ok(s) => s,
            Err(_) => {
                // Gone, or another process has the number now, or no fd
                // left: read it the ordinary way.
                self.forget(pid);
                tracee::proc_stat(pid)?
            }
        };
        self.memo.retain(|(p, _)| *p != pid);
        self.memo.push((pid, s));
        Ok(s)
    }

    /// The `/proc/<pid>/syscall` line of `pid`'s leader thread (call this
    /// right after a successful [`ProcFiles::stat_now`] of `pid`, so the
    /// entry is that process's).
    ///
    /// # Errors
    /// The file cannot be read.
    pub fn syscall_line(&mut self, pid: u32) -> io::Result<String> {
        let k = self.entry(pid)?;
        if k.syscall.is_none() {
            k.syscall = Some(File::open(format!("/proc/{pid}/syscall"))?);
        }
        read_small(k.syscall.as_ref().expect("opened above"))
    }

    /// The thread ids of `pid` (its `/proc/<pid>/task`). The listing stops
    /// once it has as many as this exec's stat of `pid` counted (callers
    /// read the count again after the freeze; a thread missed shows there).
    ///
    /// # Errors
    /// The directory cannot be read.
    pub fn threads(&mut self, pid: u32) -> io::Result<Vec<u32>> {
        let expected = self
            .memo
            .iter()
            .find(|(p, _)| *p == pid)
            .map_or(usize::MAX, |(_, s)| s.num_threads as usize);
        let k = self.entry(pid)?;
        if k.task.is_none() {
            k.task = Some(File::open(format!("/proc/{pid}/task"))?);
        }
        list_dir_numbers(k.task.as_ref().expect("opened above"), expected)
    }

    /// The scheduler state of thread `tid` of `pid`, read now (its stat is
    /// kept open: a thread that is gone fails to read, and the number is
    /// then read afresh, like any other).
    pub fn thread_state(&mut self, pid: u32, tid: u32) -> Option<u8> {
        if tid == pid {
            return self.stat_now(pid).ok().map(|s| s.state);
        }
        let k = self.entry(pid).ok()?;
        let i = match k.thread_stats.iter().position(|(t, _)| *t == tid) {
            Some(i) => i,
            None => {
                let f = StatFile::open_thread(pid, tid).ok()?;
                if k.thread_stats.len() == THREADS_KEPT {
                    k.thread_stats.remove(0);
                }
                k.thread_stats.push((tid, f));
                k.thread_stats.len() - 1
            }
        };
        match k.thread_stats[i].1.read() {
            Ok(s) => Some(s.state),
            Err(_) => {
                k.thread_stats.remove(i);
                tracee::proc_stat(tid).ok().map(|s| s.state)
            }
        }
    }

    /// The children of thread `tid` of `pid` (`/proc/<pid>/task/<tid>/children`).
    ///
    /// # Errors
    /// The file cannot be read.
    pub fn children(&mut self, pid: u32, tid: u32) -> io::Result<Vec<u32>> {
        let k = self.entry(pid)?;
        let i = match k.children.iter().position(|(t, _)| *t == tid) {
            Some(i) => i,
            None => {
                let f = File::open(format!("/proc/{pid}/task/{tid}/children"))?;
                if k.children.len() == CHILDREN_KEPT {
                    k.children.remove(0);
                }
                k.children.push((tid, f));
                k.children.len() - 1
            }
        };
        let text = read_small(&k.children[i].1)?;
        Ok(text
            .split_ascii_whitespace()
            .filter_map(|c| c.parse().ok())
            .collect())
    }
}

/// Reads a small `/proc` text file from its start (one `pread` when it fits
/// in 512 bytes).
fn read_small(f: &File) -> io::Result<String> {
    let mut out = Vec::new();
    let mut buf = [0u8; 512];
    loop {
        let n = f.read_at(&mut buf, out.len() as u64)?;
        out.extend_from_slice(&buf[..n]);
        if n < buf.len() {
            break;
        }
    }
    String::from_utf8(out).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
}

/// The numeric entries of an open directory, read from its start, until
/// the end or `enough` of them.
fn list_dir_numbers(dir: &File, enough: usize) -> io::Result<Vec<u32>> {
    // SAFETY: lseek on a valid fd; no memory is passed.
    if unsafe { libc::lseek(dir.as_raw_fd(), 0, libc::SEEK_SET) } < 0 {
        return Err(io::Error::last_os_error());
    }
    let mut out = Vec::new();
    let mut buf = [0u8; 2048];
    loop {
        // SAFETY: the kernel writes at most `buf.len()` bytes of
        // `struct linux_dirent64` records into `buf`.
        let n = unsafe {
            libc::syscall(
                libc::SYS_getdents64,
                dir.as_raw_fd(),
                buf.as_mut_ptr(),
                buf.len(),
            )
        };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        if n == 0 {
            return Ok(out);
        }
        let n = n as usize;
        let mut off = 0;
        // struct linux_dirent64 { u64 d_ino; i64 d_off; u16 d_reclen; u8 d_type; char d_name[]; }
        while off + 19 < n {
            let reclen = usize::from(u16::from_ne_bytes([buf[off + 16], buf[off + 17]]));
            if reclen == 0 || off + reclen > n {
                break;
            }
            let name = &buf[off + 19..off + reclen];
            let name = name.split(|&b| b == 0).next().unwrap_or_default();
            if let Some(t) = std::str::from_utf8(name).ok().and_then(|s| s.parse().ok()) {
                out.push(t);
            }
            off += reclen;
        }
        if out.len() >= enough {
            return Ok(out);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_again_what_changes() {
        let me = std::process::id();
        let mut files = ProcFiles::default();
        let before = files.stat_now(me).unwrap();
        let threads = files.threads(me).unwrap();
        assert!(threads.contains(&me));
        let (tx, rx) = std::sync::mpsc::channel();
        let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
        let t = std::thread::spawn(move || {
            // SAFETY: gettid has no preconditions.
            tx.send(unsafe { libc::gettid() } as u32).unwrap();
            done_rx.recv().ok();
        });
        let tid = rx.recv().unwrap();
        // The same open files see the new thread.
        let after = files.stat_now(me).unwrap();
        assert!(
            after.num_threads > before.num_threads,
            "{before:?} {after:?}"
        );
        assert!(files.threads(me).unwrap().contains(&tid));
        // Within an exec, stat answers from the memo; stat_now reads.
        assert_eq!(files.stat(me).unwrap(), after);
        done_tx.send(()).unwrap();
        t.join().unwrap();
        files.begin_exec();
        let later = files.stat(me).unwrap();
        assert!(later.num_threads < after.num_threads);
        assert!(files.children(me, me).is_ok());
    }

    #[test]
    fn a_gone_process_is_read_afresh() {
        let mut files = ProcFiles::default();
        let mut child = std::process::Command::new("/bin/sleep")
            .arg("10")
            .spawn()
            .unwrap();
        let pid = child.id();
        assert_eq!(files.stat_now(pid).unwrap().ppid, std::process::id());
        child.kill().unwrap();
        child.wait().unwrap();
        assert!(files.stat_now(pid).is_err());
    }
}
