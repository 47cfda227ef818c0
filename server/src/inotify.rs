//! Eyes on directories: one inotify instance (non-blocking), directories
//! added to it with what to watch in each, and its events read and parsed.
//! What an event means is decided by the user (the identity index: where
//! named programs live; wrap-init's walk for nested repositories); this
//! module only speaks to the kernel.
//!
//! Failure modes: an instance that cannot be made or a directory that
//! cannot be watched is an error the caller handles (the identity index
//! logs it, the walk is then made again at every wrap-init); a read that finds nothing
//! is `Ok(empty)`, never a wait; a queue that overflowed is an event of its
//! own ([`Event::overflowed`]) after which the caller must look again at
//! everything it watches.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

/// One event's fixed part (`struct inotify_event` without its name).
const HEADER: usize = 16;

/// An inotify instance, and an eventfd that wakes its waiter when another
/// thread read the events it would have waited for.
pub struct Inotify {
    fd: OwnedFd,
    kick: OwnedFd,
}

/// One event, as the kernel queued it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    /// The watch it came from (-1 for an overflow).
    pub wd: i32,
    pub mask: u32,
    /// The file's name in the watched directory ("" for the directory itself).
    pub name: String,
}

impl Event {
    /// The kernel dropped events: everything watched must be looked at again.
    pub fn overflowed(&self) -> bool {
        self.mask & libc::IN_Q_OVERFLOW != 0
    }

    /// The watch is gone (the directory was removed, moved or unmounted).
    pub fn watch_gone(&self) -> bool {
        self.mask & (libc::IN_IGNORED | libc::IN_DELETE_SELF | libc::IN_MOVE_SELF) != 0
    }
}

impl Inotify {
    /// # Errors
    /// `inotify_init1` failed (e.g. `EMFILE`: the per-user instance limit,
    /// `fs.inotify.max_user_instances`).
    pub fn new() -> io::Result<Inotify> {
        // SAFETY: inotify_init1 takes flags only and returns a new fd or -1.
        let fd = unsafe { libc::inotify_init1(libc::IN_NONBLOCK | libc::IN_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: a fresh fd nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        // SAFETY: eventfd takes two integers and returns a new fd or -1.
        let kick = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
        if kick < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: a fresh fd nothing else owns.
        let kick = unsafe { OwnedFd::from_raw_fd(kick) };
        Ok(Inotify { fd, kick })
    }

    /// Wakes [`Inotify::wait`].
    pub fn kick(&self) {
        let one: u64 = 1;
        // SAFETY: writes 8 bytes from a live u64 to our eventfd. It cannot
        // fail short of a counter at 2^64-1 (then a wake-up is pending anyway).
        unsafe { libc::write(self.kick.as_raw_fd(), (&one as *const u64).cast(), 8) };
    }

    /// Watches directory `dir` for the events of `mask` (`IN_*`); returns
    /// the watch descriptor.
    ///
    /// # Errors
    /// `inotify_add_watch` failed: `ENOENT`, `ENOTDIR`, `EACCES`, or `ENOSPC`
    /// (the per-user watch limit, `fs.inotify.max_user_watches`).
    pub fn add(&self, dir: &str, mask: u32) -> io::Result<i32> {
        let c = std::ffi::CString::new(dir)
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "a NUL in the path"))?;
        // SAFETY: our inotify fd, a NUL-terminated path that outlives the call.
        let wd = unsafe { libc::inotify_add_watch(self.fd.as_raw_fd(), c.as_ptr(), mask) };
        if wd < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(wd)
    }

    /// Every event queued now; never waits (empty: none).
    ///
    /// # Errors
    /// The read failed for a reason other than "nothing queued".
    pub fn read(&self) -> io::Result<Vec<Event>> {
        let mut events = Vec::new();
        // Room for 15 events of the longest name; on the stack, as every
        // exec reads (and usually finds nothing).
        let mut buf = [0u8; 4096];
        loop {
            // SAFETY: reads at most buf.len() bytes into our buffer.
            let n = unsafe { libc::read(self.fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
            if n < 0 {
                let e = io::Error::last_os_error();
                match e.raw_os_error() {
                    Some(libc::EAGAIN) => return Ok(events),
                    Some(libc::EINTR) => continue,
                    _ => return Err(e),
                }
            }
            if n == 0 {
                return Ok(events);
            }
            events.extend(parse(&buf[..n as usize]));
        }
    }

    /// Waits until an event is queued or [`Inotify::kick`] was called.
    ///
    /// # Errors
    /// `poll` failed (not `EINTR`, which is retried).
    pub fn wait(&self) -> io::Result<()> {
        self.wait_for(-1).map(|_| ())
    }

    /// [`Inotify::wait`], for at most `timeout_ms` (-1: no limit); whether
    /// it woke before the time was up.
    ///
    /// # Errors
    /// `poll` failed (not `EINTR`, which is retried).
    pub fn wait_for(&self, timeout_ms: i32) -> io::Result<bool> {
        let mut p = [self.fd.as_raw_fd(), self.kick.as_raw_fd()].map(|fd| libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        });
        loop {
            // SAFETY: two pollfds we own, for the duration of the call.
            let n = unsafe { libc::poll(p.as_mut_ptr(), 2, timeout_ms) };
            if n >= 0 {
                let mut k: u64 = 0;
                // SAFETY: reads 8 bytes into a live u64 from our
                // non-blocking eventfd (EAGAIN when not kicked: ignored).
                unsafe { libc::read(self.kick.as_raw_fd(), (&mut k as *mut u64).cast(), 8) };
                return Ok(n > 0);
            }
            let e = io::Error::last_os_error();
            if e.raw_os_error() != Some(libc::EINTR) {
                return Err(e);
            }
        }
    }
}

/// The events in `buf` (whole events, as one `read` returns them).
pub fn parse(buf: &[u8]) -> Vec<Event> {
    let mut out = Vec::new();
    let mut at = 0;
    while at + HEADER <= buf.len() {
        let word = |i: usize| {
            let mut w = [0u8; 4];
            w.copy_from_slice(&buf[at + i..at + i + 4]);
            w
        };
        let wd = i32::from_ne_bytes(word(0));
        let mask = u32::from_ne_bytes(word(4));
        let len = u32::from_ne_bytes(word(12)) as usize;
        let Some(raw) = buf.get(at + HEADER..at + HEADER + len) else {
            break;
        };
        let end = raw.iter().position(|&b| b == 0).unwrap_or(raw.len());
        out.push(Event {
            wd,
            mask,
            name: String::from_utf8_lossy(&raw[..end]).into_owned(),
        });
        at += HEADER + len;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(wd: i32, mask: u32, name: &str) -> Vec<u8> {
        let mut padded = name.as_bytes().to_vec();
        if !name.is_empty() {
            padded.resize((name.len() + 1).div_ceil(16) * 16, 0);
        }
        let mut v = Vec::new();
        v.extend(wd.to_ne_bytes());
        v.extend(mask.to_ne_bytes());
        v.extend(0u32.to_ne_bytes());
        v.extend((padded.len() as u32).to_ne_bytes());
        v.extend(padded);
        v
    }

    #[test]
    fn events_are_parsed_with_their_names_and_a_cut_event_is_dropped() {
        let mut buf = raw(3, libc::IN_CLOSE_WRITE, "curl");
        buf.extend(raw(-1, libc::IN_Q_OVERFLOW, ""));
        buf.extend(raw(4, libc::IN_CREATE, "a-much-longer-name-than-sixteen"));
        let ev = parse(&buf);
        assert_eq!(ev.len(), 3);
        assert_eq!((ev[0].wd, ev[0].name.as_str()), (3, "curl"));
        assert!(ev[1].overflowed());
        assert_eq!(ev[2].name, "a-much-longer-name-than-sixteen");
        assert_eq!(parse(&buf[..buf.len() - 1]).len(), 2);
    }

    #[test]
    fn a_file_written_in_a_watched_directory_is_seen() {
        let dir = std::env::temp_dir().join(format!("agentsh-inotify-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let ino = Inotify::new().unwrap();
        let mask = libc::IN_CLOSE_WRITE | libc::IN_MOVED_TO | libc::IN_DELETE_SELF;
        let wd = ino.add(&dir.display().to_string(), mask).unwrap();
        assert!(ino.read().unwrap().is_empty());
        std::fs::write(dir.join("tool"), b"x").unwrap();
        std::fs::rename(dir.join("tool"), dir.join("tool2")).unwrap();
        let ev = ino.read().unwrap();
        assert!(
            ev.iter()
                .any(|e| e.wd == wd && e.name == "tool" && e.mask & libc::IN_CLOSE_WRITE != 0),
            "{ev:?}"
        );
        assert!(
            ev.iter()
                .any(|e| e.name == "tool2" && e.mask & libc::IN_MOVED_TO != 0),
            "{ev:?}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
        ino.wait().unwrap();
        assert!(ino.read().unwrap().iter().any(Event::watch_gone));
    }
}
