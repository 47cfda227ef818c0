//! Whether the server can read the processes of the trees it supervises
//! ([`TreeAccess`]): ptrace access, in attach mode, to a child of its own and
//! to a process it did not start (an orphaned grandchild, and its own
//! parent).
//!
//! Why probed for real: without `CAP_SYS_PTRACE`, Yama's `ptrace_scope` 1
//! (the default of Ubuntu and Debian, host-wide) allows only descendants,
//! and a Landlock domain allows the orphan but not the parent; neither shows
//! in a version number.
//!
//! Failure modes: a pipe or fork that fails reports both as not available,
//! with the reason; the probe processes only wait on a pipe and are killed
//! afterwards (nothing is traced).

use super::report::{Probe, TreeAccess};
use std::io;

/// `None` when this process may read and trace `pid` (attach-mode ptrace
/// access, as [`crate::tracee::access::can_attach`] checks), else why not.
fn read_one_of(pid: i32) -> Option<String> {
    crate::tracee::access::can_attach(pid as u32)
        .err()
        .map(|e| format!("ptrace access: {e}"))
}

/// Probes [`TreeAccess`]: ptrace access (attach mode, the check reading a
/// tree's memory takes; `/proc/<pid>/mem` is opened, which also works where
/// `process_vm_readv` does not exist, as in gVisor) to a child, and to a
/// grandchild whose parent has exited (so it is no descendant of this
/// process any more: its new parent is init or a subreaper above us). Both
/// children wait on a pipe and are killed afterwards; nothing is traced.
pub(super) fn probe_tree_access() -> TreeAccess {
    let sleepers = match Sleepers::start() {
        Ok(s) => s,
        Err(e) => {
            let why = format!("pipe: {e}");
            return TreeAccess {
                descendants: Probe::no(why.clone()),
                others: Probe::no(why),
            };
        }
    };
    let descendants = read_probe(sleepers.child);
    // Another process this one did not start: the grandchild (orphaned) and
    // our own parent. Both must be readable: a rule that follows domains
    // rather than ancestry (Landlock's ptrace scope) lets the orphan through
    // but not the parent; Yama refuses both.
    let others = match read_probe(sleepers.grandchild) {
        p if !p.available => p,
        p => {
            let parent = std::os::unix::process::parent_id();
            if parent > 0 {
                read_one_of(parent as i32).map_or(p, |why| Probe::no(format!("our parent: {why}")))
            } else {
                p
            }
        }
    };
    sleepers.end();
    TreeAccess {
        descendants,
        others,
    }
}

/// Whether this process may read `pid`, one of the [`Sleepers`] (not
/// started: `pid` is not above 0).
fn read_probe(pid: i32) -> Probe {
    if pid <= 0 {
        return Probe::no("cannot start the probe process");
    }
    match read_one_of(pid) {
        None => Probe::yes(),
        Some(why) => Probe::no(why),
    }
}

/// The processes [`probe_tree_access`] reads: a child of ours and an
/// orphaned grandchild, each blocked reading a pipe until [`Sleepers::end`]
/// closes its write end (a pid not above 0: that one did not start).
struct Sleepers {
    /// The write end of the pipe they wait on.
    hold: i32,
    child: i32,
    grandchild: i32,
}

impl Sleepers {
    /// Forks the child, and a middle child that forks the grandchild,
    /// reports its pid and exits at once.
    fn start() -> io::Result<Sleepers> {
        let mut hold = [0i32; 2];
        let mut report = [0i32; 2];
        // SAFETY: pipe writes two fds into arrays we own.
        if unsafe { libc::pipe2(hold.as_mut_ptr(), libc::O_CLOEXEC) } != 0
            // SAFETY: as above.
            || unsafe { libc::pipe2(report.as_mut_ptr(), libc::O_CLOEXEC) } != 0
        {
            return Err(io::Error::last_os_error());
        }
        // The children block reading `hold` until we close its write end.
        let wait_and_exit = move || -> ! {
            let mut b = 0u8;
            // SAFETY: raw syscalls in a forked child.
            unsafe {
                libc::close(hold[1]);
                libc::read(hold[0], (&mut b as *mut u8).cast(), 1);
                libc::_exit(0)
            }
        };
        // SAFETY: the child only makes raw syscalls.
        let child = unsafe { libc::fork() };
        if child == 0 {
            wait_and_exit();
        }
        // SAFETY: as above; the middle child forks the grandchild, reports its
        // pid and exits at once.
        let middle = unsafe { libc::fork() };
        if middle == 0 {
            // SAFETY: raw syscalls in a forked child.
            unsafe {
                let g = libc::fork();
                if g == 0 {
                    wait_and_exit();
                }
                libc::write(report[1], (&g as *const i32).cast(), 4);
                libc::_exit(0)
            }
        }
        let mut grandchild: i32 = -1;
        // SAFETY: closing our copies, reading 4 bytes into an i32 we own, and
        // reaping the middle child (ours).
        unsafe {
            libc::close(hold[0]);
            libc::close(report[1]);
            if middle > 0 {
                libc::read(report[0], (&mut grandchild as *mut i32).cast(), 4);
                let mut st = 0;
                libc::waitpid(middle, &mut st, 0);
            }
            libc::close(report[0]);
        }
        Ok(Sleepers {
            hold: hold[1],
            child,
            grandchild,
        })
    }

    /// Ends them: closing the pipe wakes them; the kill makes sure; our
    /// child is reaped (the grandchild's new parent reaps it).
    fn end(self) {
        // SAFETY: closing our fd; killing and reaping processes we started.
        unsafe {
            libc::close(self.hold);
            if self.child > 0 {
                libc::kill(self.child, libc::SIGKILL);
                let mut st = 0;
                libc::waitpid(self.child, &mut st, 0);
            }
            if self.grandchild > 0 {
                libc::kill(self.grandchild, libc::SIGKILL);
            }
        }
    }
}
