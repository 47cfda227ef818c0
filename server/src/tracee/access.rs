//! Reaching another user's process without `CAP_SYS_PTRACE`: for the length
//! of one access, the calling thread takes the credentials the kernel
//! compares with the target's.
//!
//! Why: every read of a tracee (its memory with `process_vm_readv`, its
//! `/proc/<pid>/{root,cwd,fd,exe,maps,mem,syscall}`) and every
//! `PTRACE_SEIZE` passes the kernel's ptrace access check. Without
//! `CAP_SYS_PTRACE` (Docker's and podman's default capability set) that check
//! lets root reach only processes whose uids and gids all equal its own: a
//! tree an SDK daemon runs as `user` cannot be read at all, and every one of
//! its execs would be refused. The check compares the *real* uid and gid for
//! `process_vm_readv` and ptrace attach, and the *filesystem* uid and gid for
//! `/proc` files; both are per-thread credentials in Linux. So [`as_owner`]
//! sets the calling thread's real and filesystem ids to the owner of the
//! target's `/proc` entry (its effective ids, while it is dumpable), and the
//! guard it returns puts them back. The effective and saved ids stay 0, so
//! the thread keeps its capabilities (`CAP_SETUID`/`CAP_SETGID` to restore;
//! the filesystem capabilities return with the filesystem uid 0).
//!
//! Only a few system calls, only while a server without `CAP_SYS_PTRACE`
//! ([`match_owners`]) touches a process of another uid; never while the
//! thread could create a thread or a file: callers hold the guard around the
//! one access (the guard is not `Send`). A tree cannot use the moment: it can
//! neither signal the server (Landlock's signal scope or the signal guard) nor
//! read its thread (the kernel compares the target's effective and saved ids
//! too, which stay 0).
//!
//! What this cannot do: reach a process that is not dumpable (one that changed
//! its credentials and has not exec'd since): its `/proc` entry is root's and
//! the kernel wants `CAP_SYS_PTRACE` for it; the access fails and the caller
//! refuses the exec. Nor get past Yama's `ptrace_scope` 1, which wants the
//! server to be an ancestor of the tree (`agentsh entrypoint`, see
//! `detect`).
//!
//! Failure modes: a target that vanished leaves the credentials alone (the
//! access then fails on its own). Credentials that cannot be put back abort
//! the server: a thread left with a tree's ids must not go on.

use std::marker::PhantomData;
use std::sync::atomic::{AtomicBool, Ordering};

static MATCH_OWNERS: AtomicBool = AtomicBool::new(false);

/// Says whether accesses must take the target's ids: true when this process
/// lacks `CAP_SYS_PTRACE` (set once at start; tests of the server set it to
/// exercise the path).
pub fn match_owners(on: bool) {
    MATCH_OWNERS.store(on, Ordering::Relaxed);
}

/// Whether [`as_owner`] switches credentials at all.
pub fn matching_owners() -> bool {
    MATCH_OWNERS.load(Ordering::Relaxed)
}

/// The ids the calling thread had before [`as_owner`] changed them.
#[derive(Debug, Clone, Copy)]
struct Saved {
    ruid: u32,
    rgid: u32,
    fsuid: u32,
    fsgid: u32,
    /// The effective capabilities, compared after the ids come back.
    caps: u64,
}

/// While alive, the calling thread acts with the target's ids (or with its
/// own, when no switch was needed). Not `Send`: credentials are per thread.
#[must_use = "the credentials are put back when the guard is dropped"]
pub struct AsOwner {
    saved: Option<Saved>,
    _thread: PhantomData<*const ()>,
}

fn raw_ids() -> (u32, u32, u32, u32) {
    let (mut r, mut e, mut s) = (0u32, 0u32, 0u32);
    let (mut gr, mut ge, mut gs) = (0u32, 0u32, 0u32);
    // SAFETY: getresuid/getresgid write three ids each into our locals.
    unsafe {
        libc::getresuid(&mut r, &mut e, &mut s);
        libc::getresgid(&mut gr, &mut ge, &mut gs);
    }
    if !fs_ids_kept() {
        // No filesystem ids of their own: the effective ones stand in.
        return (r, gr, e, ge);
    }
    // setfsuid/setfsgid with an invalid id change nothing and return the
    // current value.
    // SAFETY: plain syscalls taking an integer.
    let (fsu, fsg) = unsafe {
        (
            libc::syscall(libc::SYS_setfsuid, u32::MAX) as u32,
            libc::syscall(libc::SYS_setfsgid, u32::MAX) as u32,
        )
    };
    (r, gr, fsu, fsg)
}

/// Whether the kernel keeps filesystem ids apart from the effective ones
/// (`setfsuid` answers): gVisor (Debian's runsc) does not implement them,
/// and its access checks on another process (ptrace, `/proc`) compare the
/// real ids, which is what [`as_owner`] sets then.
fn fs_ids_kept() -> bool {
    static KEPT: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *KEPT.get_or_init(|| {
        // SAFETY: an invalid id changes nothing; the call only answers.
        unsafe { libc::syscall(libc::SYS_setfsuid, u32::MAX) != -1 }
    })
}

/// This thread's effective capability set (`capget`), 0 when unreadable.
fn effective_caps() -> u64 {
    effective_caps_of(0).unwrap_or(0)
}

/// Thread `tid`'s effective capability set (`capget`; 0: the caller), as
/// `/proc/<tid>/status` says `CapEff`, without making that file (about
/// 20 µs a read).
///
/// # Errors
/// The kernel's: ESRCH when the thread is gone.
pub fn effective_caps_of(tid: u32) -> std::io::Result<u64> {
    let mut h = CapHeader {
        version: CAP_V3,
        pid: tid as i32,
    };
    let mut d = [CapData::default(); 2];
    // SAFETY: capget writes two data structs we own; the header is ours.
    let rc = unsafe { libc::syscall(libc::SYS_capget, &mut h as *mut CapHeader, d.as_mut_ptr()) };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(u64::from(d[0].effective) | (u64::from(d[1].effective) << 32))
}

/// Sets this thread's effective capability set back to `eff` (a subset of
/// its permitted set, which nothing here changes).
fn set_effective_caps(eff: u64) -> bool {
    let mut h = CapHeader {
        version: CAP_V3,
        pid: 0,
    };
    let mut d = [CapData::default(); 2];
    // SAFETY: as in `effective_caps`.
    if unsafe { libc::syscall(libc::SYS_capget, &mut h as *mut CapHeader, d.as_mut_ptr()) } != 0 {
        return false;
    }
    d[0].effective = eff as u32;
    d[1].effective = (eff >> 32) as u32;
    // SAFETY: capset reads the header and two data structs we own.
    unsafe { libc::syscall(libc::SYS_capset, &mut h as *mut CapHeader, d.as_ptr()) == 0 }
}

#[repr(C)]
struct CapHeader {
    version: u32,
    pid: i32,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
struct CapData {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

const CAP_V3: u32 = 0x2008_0522;

const KEEP: libc::c_long = -1;

/// Takes the tree's ids: real ids first (`setresuid` also resets the
/// filesystem id to the effective one, 0), then the filesystem ids (which
/// drops the filesystem capabilities from the effective set). Raw system
/// calls: glibc's wrappers would change every thread of the process.
fn take_ids(uid: u32, gid: u32) -> bool {
    // SAFETY: plain syscalls taking integers; they change only this thread.
    unsafe {
        let g = libc::syscall(libc::SYS_setresgid, gid as libc::c_long, KEEP, KEEP);
        let u = libc::syscall(libc::SYS_setresuid, uid as libc::c_long, KEEP, KEEP);
        libc::syscall(libc::SYS_setfsgid, gid as libc::c_long);
        libc::syscall(libc::SYS_setfsuid, uid as libc::c_long);
        g == 0 && u == 0
    }
}

/// Puts the ids back in the reverse order: the filesystem ids first (the
/// kernel gives the filesystem capabilities back only when the filesystem
/// uid itself returns to 0), then the real ones.
fn give_back_ids(s: Saved) -> bool {
    // SAFETY: as in `take_ids`.
    unsafe {
        libc::syscall(libc::SYS_setfsuid, s.fsuid as libc::c_long);
        libc::syscall(libc::SYS_setfsgid, s.fsgid as libc::c_long);
        let u = libc::syscall(libc::SYS_setresuid, s.ruid as libc::c_long, KEEP, KEEP);
        let g = libc::syscall(libc::SYS_setresgid, s.rgid as libc::c_long, KEEP, KEEP);
        u == 0 && g == 0
    }
}

/// The owner (uid, gid) of `/proc/<tid>`, with `stat(2)`: gVisor (Debian's
/// runsc) refuses the `statx` that `std::fs::metadata` makes (EINVAL).
fn owner_of_proc_entry(tid: u32) -> Option<(u32, u32)> {
    let path = std::ffi::CString::new(format!("/proc/{tid}")).ok()?;
    // SAFETY: stat writes one struct stat we own; the path is NUL-terminated.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    (unsafe { libc::stat(path.as_ptr(), &mut st) } == 0).then_some((st.st_uid, st.st_gid))
}

/// Takes, for the life of the guard, the ids of the owner of `/proc/<tid>`
/// (the thread's effective uid and gid while it is dumpable), when this
/// server must ([`match_owners`]) and they differ from the thread's own.
pub fn as_owner(tid: u32) -> AsOwner {
    let none = AsOwner {
        saved: None,
        _thread: PhantomData,
    };
    if !matching_owners() {
        return none;
    }
    let Some((uid, gid)) = owner_of_proc_entry(tid) else {
        return none;
    };
    let (ruid, rgid, fsuid, fsgid) = raw_ids();
    let fs = fs_ids_kept();
    if (uid, gid) == (ruid, rgid) && (!fs || (uid, gid) == (fsuid, fsgid)) {
        return none;
    }
    let saved = Saved {
        ruid,
        rgid,
        fsuid,
        fsgid,
        caps: effective_caps(),
    };
    if !take_ids(uid, gid) {
        // Half changed is worse than not at all.
        restore(saved);
        return none;
    }
    let (r, g, fu, fg) = raw_ids();
    if (r, g) != (uid, gid) || (fs && (fu, fg) != (uid, gid)) {
        restore(saved);
        return none;
    }
    AsOwner {
        saved: Some(saved),
        _thread: PhantomData,
    }
}

fn restore(s: Saved) {
    let ok = give_back_ids(s)
        && (effective_caps() == s.caps || set_effective_caps(s.caps))
        && effective_caps() == s.caps;
    if !ok || raw_ids() != (s.ruid, s.rgid, s.fsuid, s.fsgid) {
        // A supervisor thread must never run on with a tree's ids.
        tracing::error!(
            "cannot restore this thread's credentials after reading a tracee: stopping the server"
        );
        std::process::abort();
    }
}

impl Drop for AsOwner {
    fn drop(&mut self) {
        if let Some(s) = self.saved.take() {
            restore(s);
        }
    }
}

/// Whether this thread may read and trace `pid` (the kernel's ptrace access
/// check in attach mode, with the owner's ids where [`match_owners`]): opens
/// `/proc/<pid>/mem`, which takes exactly that check, and closes it.
///
/// # Errors
/// The kernel's refusal (EPERM/EACCES), or ENOENT when `pid` is gone.
pub fn can_attach(pid: u32) -> std::io::Result<()> {
    let _owner = as_owner(pid);
    std::fs::File::open(format!("/proc/{pid}/mem")).map(drop)
}

/// Runs `f` as the owner of `/proc/<tid>` ([`as_owner`]).
pub fn with_owner<T>(tid: u32, f: impl FnOnce() -> T) -> T {
    let _g = as_owner(tid);
    f()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `capget` of another process says what its `/proc/<pid>/status`
    /// says (`CapEff`): a child with its capabilities dropped, and this one.
    #[test]
    fn capget_of_a_process_is_its_status_cap_eff() {
        let mut child = std::process::Command::new("/usr/bin/setpriv")
            .args([
                "--inh-caps=-all",
                "--bounding-set=-all",
                "--",
                "/usr/bin/sleep",
                "30",
            ])
            .spawn()
            .expect("start a child");
        let status = |pid: u32| {
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
            loop {
                let s = crate::tracee::ProcStatus::read(pid).expect("status");
                // setpriv has exec'd sleep once the name says so.
                if s.field("Name") == Some("sleep") || pid == std::process::id() {
                    return s.mask("CapEff").expect("CapEff");
                }
                assert!(std::time::Instant::now() < deadline, "setpriv never exec'd");
                std::thread::yield_now();
            }
        };
        let want = status(child.id());
        assert_eq!(effective_caps_of(child.id()).unwrap(), want);
        let me = std::process::id();
        assert_eq!(effective_caps_of(me).unwrap(), status(me));
        let _ = child.kill();
        let _ = child.wait();
        assert_eq!(
            effective_caps_of(child.id()).unwrap_err().raw_os_error(),
            Some(libc::ESRCH)
        );
    }

    /// A child of another uid, exec'd so it is dumpable, is readable only
    /// with the guard, and the thread's ids come back afterwards.
    #[test]
    fn the_guard_reaches_another_uid_and_puts_the_ids_back() {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            eprintln!("skipped: needs root");
            return;
        }
        let before = raw_ids();
        let caps_before = effective_caps();
        let child = std::process::Command::new("/bin/sleep")
            .arg("30")
            .uid(65534)
            .gid(65534)
            .spawn();
        use std::os::unix::process::CommandExt;
        let Ok(mut child) = child else {
            panic!("cannot start a child as nobody");
        };
        let pid = child.id();
        // Wait until it has exec'd (its /proc entry is nobody's).
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        while std::fs::metadata(format!("/proc/{pid}"))
            .map_or(0, |m| std::os::unix::fs::MetadataExt::uid(&m))
            != 65534
        {
            assert!(
                std::time::Instant::now() < deadline,
                "the child never ran as nobody"
            );
            std::thread::yield_now();
        }
        match_owners(true);
        {
            let _g = as_owner(pid);
            assert_eq!(raw_ids(), (65534, 65534, 65534, 65534));
            assert!(std::fs::read_link(format!("/proc/{pid}/cwd")).is_ok());
        }
        match_owners(false);
        assert_eq!(raw_ids(), before);
        // The filesystem capabilities came back with the ids.
        assert_eq!(
            effective_caps(),
            caps_before,
            "effective capabilities changed"
        );
        let _ = child.kill();
        let _ = child.wait();
    }
}
