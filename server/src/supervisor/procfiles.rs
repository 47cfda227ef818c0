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
//! the entry is reopened by number (a new process may have it now). Every
//! file of an entry is opened beneath the entry's own `/proc/<pid>`
//! directory fd, so all of them are that one process's even when opened
//! later (beneath a process that is gone, nothing opens). At most
//! [`KEPT`] processes are kept per tree (a few file descriptors each), the
//! least recently used closed first; the files close with the tree.
//!
//! Within one exec, [`ProcFiles::stat`] answers a process's stat from what
//! this exec already read (the sharing check and the depth read the same
//! parent); [`ProcFiles::stat_now`] always reads.
//!
//! A parent's `/proc/<pid>/maps` is kept too, for its vfork children: an
//! open maps file answers `PROCMAP_QUERY` about the address space the
//! process had when it was opened, which is the one it has now unless it
//! exec'd since, and the child's own as long as `kcmp` says they share it.
//! Every exec of a tree comes to its supervisor, so the file is dropped
//! whenever the supervisor lets an exec of that process proceed
//! ([`ProcFiles::exec_seen`]), and not used while an exec of the process
//! waits for an operator, whose answer may let it proceed from another
//! thread at any moment ([`ProcFiles::held`], [`ProcFiles::approved`]).
//!
//! Failure modes: every read returns the kernel's error; a file that cannot
//! be kept open (EMFILE) is read the ordinary way instead.

use crate::tracee::{self, ProcStat, StatFile};
use std::ffi::CString;
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::fs::FileExt;

/// Processes kept per tree.
const KEPT: usize = 4;
/// Per-thread `children` files kept per process.
const CHILDREN_KEPT: usize = 4;
/// Per-thread `stat` files kept per process.
const THREADS_KEPT: usize = 8;

struct Kept {
    pid: u32,
    /// `/proc/<pid>`, everything else is opened beneath it.
    dir: OwnedFd,
    stat: StatFile,
    syscall: Option<File>,
    task: Option<File>,
    children: Vec<(u32, File)>,
    thread_stats: Vec<(u32, StatFile)>,
    maps: Option<File>,
}

/// See the module doc.
#[derive(Default)]
pub struct ProcFiles {
    /// Most recently used last.
    kept: Vec<Kept>,
    /// (pid, stat) read during the current exec.
    memo: Vec<(u32, ProcStat)>,
    /// Processes with an exec held for an operator.
    holding: Vec<u32>,
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
            let dir = open_dir(&format!("/proc/{pid}"))?;
            let stat = StatFile::from_file(open_in(&dir, "stat")?, pid);
            if self.kept.len() == KEPT {
                self.kept.remove(0);
            }
            self.kept.push(Kept {
                pid,
                dir,
                stat,
                syscall: None,
                task: None,
                children: Vec::new(),
                thread_stats: Vec::new(),
                maps: None,
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
        // Checked at every read, not only at open.
        let _owner = crate::tracee::as_owner(pid);
        let k = self.entry(pid)?;
        if k.syscall.is_none() {
            k.syscall = Some(open_in(&k.dir, "syscall")?);
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
            k.task = Some(open_in(&k.dir, "task")?);
        }
        list_dir_numbers(k.task.as_ref().expect("opened above"), expected)
    }

    /// A duplicate of `pid`'s kept `/proc/<pid>/maps` (opened now if
    /// needed), for a vfork child that shares its memory: see the module
    /// doc. Call only after a successful [`ProcFiles::stat`] of `pid` in this
    /// exec (so the entry is the live process's) and a `kcmp` that says the
    /// child shares `pid`'s memory. `None` while an exec of `pid` is held.
    pub fn maps(&mut self, pid: u32) -> Option<File> {
        if self.holding.contains(&pid) || !self.memo.iter().any(|(p, _)| *p == pid) {
            return None;
        }
        let k = self.kept.iter_mut().find(|k| k.pid == pid)?;
        if k.maps.is_none() {
            let _owner = crate::tracee::as_owner(pid);
            k.maps = Some(open_in(&k.dir, "maps").ok()?);
        }
        k.maps.as_ref()?.try_clone().ok()
    }

    /// The supervisor let an exec of `pid` proceed: its address space may
    /// be new.
    pub fn exec_seen(&mut self, pid: u32) {
        if let Some(k) = self.kept.iter_mut().find(|k| k.pid == pid) {
            k.maps = None;
        }
    }

    /// An exec of `pid` waits for an operator, who may let it proceed at
    /// any moment.
    pub fn held(&mut self, pid: u32) {
        self.exec_seen(pid);
        if !self.holding.contains(&pid) {
            self.holding.push(pid);
        }
    }

    /// The operator let `pid`'s held exec proceed, and it has.
    pub fn approved(&mut self, pid: u32) {
        self.exec_seen(pid);
        self.holding.retain(|&p| p != pid);
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
                let f =
                    StatFile::from_file(open_in(&k.dir, &format!("task/{tid}/stat")).ok()?, tid);
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
                let f = open_in(&k.dir, &format!("task/{tid}/children"))?;
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

/// Opens directory `path` (`O_PATH`).
fn open_dir(path: &str) -> io::Result<OwnedFd> {
    let c = CString::new(path).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    // SAFETY: a valid C string; O_PATH opens nothing for I/O.
    let fd = unsafe {
        libc::open(
            c.as_ptr(),
            libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` was just returned by open and is owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Opens `rel` beneath directory `dir`, read-only.
fn open_in(dir: &OwnedFd, rel: &str) -> io::Result<File> {
    let c = CString::new(rel).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    // SAFETY: a valid dirfd and C string.
    let fd = unsafe {
        libc::openat(
            dir.as_raw_fd(),
            c.as_ptr(),
            libc::O_RDONLY | libc::O_CLOEXEC,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` was just returned by openat and is owned by nobody else.
    Ok(File::from(unsafe { OwnedFd::from_raw_fd(fd) }))
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

    /// A python child that starts and ends one thread on request: its
    /// thread count is ours to change (this process's is not: the test
    /// harness runs other tests on threads beside this one).
    struct Threaded {
        child: std::process::Child,
        stdin: std::process::ChildStdin,
        stdout: std::io::BufReader<std::process::ChildStdout>,
    }

    impl Threaded {
        fn start() -> Threaded {
            use std::process::{Command, Stdio};
            let script = "import sys, threading\n\
                          ev = threading.Event()\n\
                          t = None\n\
                          for line in sys.stdin:\n    \
                          if line.strip() == 'start':\n        \
                          t = threading.Thread(target=ev.wait); t.start(); print('started', flush=True)\n    \
                          elif line.strip() == 'stop':\n        \
                          ev.set(); t.join(); print('stopped', flush=True)\n";
            let mut child = Command::new("python3")
                .args(["-c", script])
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .spawn()
                .expect("python3");
            let stdin = child.stdin.take().expect("stdin");
            let stdout = std::io::BufReader::new(child.stdout.take().expect("stdout"));
            Threaded {
                child,
                stdin,
                stdout,
            }
        }

        fn ask(&mut self, what: &str) {
            use std::io::{BufRead, Write};
            writeln!(self.stdin, "{what}").expect("write");
            let mut line = String::new();
            self.stdout.read_line(&mut line).expect("read");
            assert!(!line.is_empty(), "the child ended");
        }
    }

    impl Drop for Threaded {
        fn drop(&mut self) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }

    #[test]
    fn reads_again_what_changes() {
        let mut p = Threaded::start();
        let pid = p.child.id();
        let mut files = ProcFiles::default();
        let before = files.stat_now(pid).unwrap();
        assert_eq!(before.num_threads, 1);
        assert_eq!(files.threads(pid).unwrap(), vec![pid]);
        p.ask("start");
        // The same open files see the new thread.
        let after = files.stat_now(pid).unwrap();
        assert_eq!(after.num_threads, 2, "{before:?} {after:?}");
        let threads = files.threads(pid).unwrap();
        assert_eq!(threads.len(), 2, "{threads:?}");
        // Within an exec, stat answers from the memo; stat_now reads.
        assert_eq!(files.stat(pid).unwrap(), after);
        p.ask("stop");
        assert_eq!(
            files.stat(pid).unwrap(),
            after,
            "the memo holds within an exec"
        );
        // A joined thread is gone from the process a moment later: each new
        // exec reads again, until it is (the wait is for the state, not a time).
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        let later = loop {
            files.begin_exec();
            let s = files.stat(pid).unwrap();
            if s.num_threads == 1 || std::time::Instant::now() > deadline {
                break s;
            }
            std::thread::sleep(std::time::Duration::from_millis(2));
        };
        assert_eq!(later.num_threads, 1);
        assert!(files.children(pid, pid).is_ok());
    }

    #[test]
    fn maps_only_of_a_process_read_in_this_exec_and_not_while_it_waits() {
        let me = std::process::id();
        let mut files = ProcFiles::default();
        assert!(files.maps(me).is_none(), "not read in this exec");
        files.stat(me).unwrap();
        let x = 7u64;
        let mut maps = crate::tracee::maps::Maps::over(files.maps(me).unwrap());
        assert!(!maps.find(std::ptr::from_ref(&x) as u64).unwrap().shared);
        files.held(me);
        assert!(files.maps(me).is_none(), "an exec of it is held");
        files.approved(me);
        assert!(files.maps(me).is_some());
        files.begin_exec();
        assert!(files.maps(me).is_none(), "a new exec: read it first");
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
