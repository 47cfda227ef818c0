//! `agentsh detect`: what this host offers agentsh, probed for real.
//!
//! Every answer comes from trying the thing in a short-lived child process
//! (loading a filter with a listener, tracing a seccomp stop, creating a
//! fanotify group) or from the kernel's own files, never from version
//! numbers: gVisor, restrictive seccomp profiles and capped capabilities all
//! look like ordinary Linux from `uname`. The server logs the same report at
//! start and serves it at `GET /api/v1/status`.
//!
//! Failure modes: a probe that cannot run (fork fails, a child dies) reports
//! the capability as absent with the reason; nothing here changes the host.

use crate::config::BackendChoice;
use crate::supervisor::backend;
use agentsh_proto::ExecBackend;
use serde::Serialize;
use std::io;

/// One capability: present or not, and why not.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Probe {
    pub available: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
}

impl Probe {
    fn yes() -> Probe {
        Probe {
            available: true,
            detail: None,
        }
    }

    fn no(why: impl Into<String>) -> Probe {
        Probe {
            available: false,
            detail: Some(why.into()),
        }
    }
}

/// The whole report.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// The kernel says it is gVisor (runsc).
    pub gvisor: bool,
    pub kernel: String,
    /// `SECCOMP_FILTER_FLAG_NEW_LISTENER` loads (user-notify).
    pub seccomp_user_notif: Probe,
    /// `SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV` (Linux 5.19).
    pub wait_killable_recv: Probe,
    /// `SECCOMP_USER_NOTIF_FD_SYNC_WAKE_UP` (Linux 6.6).
    pub sync_wake_up: Probe,
    /// `SECCOMP_RET_TRACE` seen by a tracer at `PTRACE_EVENT_SECCOMP`.
    pub seccomp_trace_ptrace: Probe,
    /// The kernel's Landlock ABI (0: none).
    pub landlock_abi: i64,
    /// `fanotify_init(FAN_CLASS_CONTENT)`: permission events (exec checks).
    pub fanotify_permission: Probe,
    /// Yama's `ptrace_scope` (absent: no Yama).
    pub yama_ptrace_scope: Option<u32>,
    /// The server's effective capabilities that matter.
    pub cap_sys_admin: bool,
    pub cap_sys_ptrace: bool,
    /// The server itself runs with no_new_privs.
    pub no_new_privs: bool,
    /// Whether the server can read processes (ptrace access, as
    /// `process_vm_readv` needs) of its own and of others.
    pub tree_access: TreeAccess,
    /// `pidfd_getfd` works here (egress takes a tree's sockets with it; a
    /// seccomp profile such as Docker's default refuses it without
    /// CAP_SYS_PTRACE).
    pub pidfd_getfd: Probe,
    /// What a wrap-init gets on this host, in words.
    pub backend: String,
    /// The exec backend a wrap-init gets (`None`: none can work here).
    pub exec_backend: Option<agentsh_proto::ExecBackend>,
    pub protections: Vec<String>,
    /// Whether trees can get cgroups with their session's `limits:`
    /// (`cgroup::assess`): where, or why not.
    pub limits: Probe,
}

/// Whether ptrace access (what reading a tree's memory, its `/proc` links
/// and `PTRACE_SEIZE` need) reaches a process this one started, and one it
/// did not. Without `CAP_SYS_PTRACE`, Yama's `ptrace_scope` 1 (Ubuntu's and
/// Debian's default, host-wide, so inside every container too) allows only
/// the first; `ptrace_scope` 2 and 3 neither.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TreeAccess {
    /// A child of this process (a tree under `agentsh entrypoint`).
    pub descendants: Probe,
    /// A process this one did not start (a tree an SDK daemon started).
    pub others: Probe,
}

/// Which trees a server can supervise, from [`TreeAccess`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Reach {
    /// Every tree (as root; another uid's tree through `tracee::access`).
    Any,
    /// Only trees whose root descends from the server.
    Descendants,
    /// None: ptrace access is refused even for its own children.
    Nothing,
}

impl TreeAccess {
    pub fn reach(&self) -> Reach {
        if self.others.available {
            Reach::Any
        } else if self.descendants.available {
            Reach::Descendants
        } else {
            Reach::Nothing
        }
    }
}

/// What to do about a [`Reach`] short of [`Reach::Any`], for the log,
/// `agentsh ready` and the shim's refusal; `None` for [`Reach::Any`].
pub fn reach_remedy(reach: Reach, yama: Option<u32>) -> Option<String> {
    let yama = match yama {
        Some(s) => format!("Yama ptrace_scope {s}"),
        None => "the kernel".into(),
    };
    match reach {
        Reach::Any => None,
        Reach::Descendants => Some(format!(
            "the server lacks CAP_SYS_PTRACE and {yama} lets it read only the processes it \
             started: run the SDK's daemon under `agentsh entrypoint -- DAEMON` (the server is \
             then an ancestor of every shell), or give the container CAP_SYS_PTRACE \
             (`docker run --cap-add SYS_PTRACE`)"
        )),
        Reach::Nothing => Some(format!(
            "the server cannot read even its own children's memory (ptrace access refused by \
             {yama} or a seccomp profile): give the container CAP_SYS_PTRACE \
             (`docker run --cap-add SYS_PTRACE`), or set kernel.yama.ptrace_scope to 1 or 0 on \
             the host"
        )),
    }
}

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
fn probe_tree_access() -> TreeAccess {
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

/// The exec backend `choice` (`execve.backend`) comes to on a host whose
/// probe for each backend is `probe`: the first registered backend the
/// choice allows and the host offers (`supervisor::backend::ALL`, in
/// preference order).
///
/// # Errors
/// The choice cannot work here (an explicit backend the host does not
/// offer, or `auto` with none).
pub fn choose_backend<'a>(
    choice: BackendChoice,
    probe: impl Fn(ExecBackend) -> &'a Probe,
) -> Result<ExecBackend, NoBackend> {
    let why = |p: &Probe| p.detail.clone().unwrap_or_else(|| "unavailable".into());
    let allowed = || {
        backend::ALL
            .iter()
            .filter(move |b| choice.only().is_none_or(|k| k == b.kind()))
    };
    if let Some(b) = allowed().find(|b| probe(b.kind()).available) {
        return Ok(b.kind());
    }
    Err(match choice.only() {
        Some(kind) => {
            let others: Vec<&str> = backend::ALL
                .iter()
                .filter(|b| b.kind() != kind)
                .map(|b| b.kind().name())
                .collect();
            NoBackend::Chosen {
                name: kind.name(),
                why: backend::of(kind).unavailable(&why(probe(kind))),
                others: others.join(" or "),
            }
        }
        None => NoBackend::None(
            allowed()
                .map(|b| format!("no {} ({})", b.facts().needs, why(probe(b.kind()))))
                .collect::<Vec<_>>()
                .join(" and "),
        ),
    })
}

/// Why no exec backend can run here.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NoBackend {
    #[error("execve.backend is {name}, but {why}; use auto or {others}")]
    Chosen {
        name: &'static str,
        why: String,
        others: String,
    },
    #[error("this host can supervise no exec: {0}")]
    None(String),
}

impl Report {
    /// What this host offers the backend of `kind`.
    pub fn probe_of(&self, kind: ExecBackend) -> &Probe {
        match kind.trap() {
            agentsh_proto::wire::Trap::UserNotif => &self.seccomp_user_notif,
            agentsh_proto::wire::Trap::Tracer => &self.seccomp_trace_ptrace,
        }
    }
}

fn read(path: &str) -> Option<String> {
    std::fs::read_to_string(path).ok()
}

fn caps() -> (bool, bool) {
    let eff = crate::tracee::ProcStatus::read("self")
        .ok()
        .and_then(|s| s.mask("CapEff"))
        .unwrap_or(0);
    (eff & (1 << 21) != 0, eff & (1 << 19) != 0)
}

/// Runs `f` in a forked child and returns its exit code (or the signal as
/// 128 + N). The child does only raw syscalls.
pub(crate) fn in_child(f: impl FnOnce() -> i32) -> io::Result<i32> {
    // SAFETY: the child runs `f`, which makes only async-signal-safe raw
    // syscalls, then _exits; the parent only waits for it.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(io::Error::last_os_error());
    }
    if pid == 0 {
        let code = f();
        // SAFETY: leaving the forked child without running destructors.
        unsafe { libc::_exit(code) };
    }
    let mut st = 0;
    // SAFETY: waiting for our own child.
    if unsafe { libc::waitpid(pid, &mut st, 0) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(if libc::WIFEXITED(st) {
        libc::WEXITSTATUS(st)
    } else {
        128 + libc::WTERMSIG(st)
    })
}

/// A filter that allows everything (one `RET_ALLOW`).
fn allow_all() -> [libc::sock_filter; 1] {
    [libc::sock_filter {
        code: (libc::BPF_RET | libc::BPF_K) as u16,
        jt: 0,
        jf: 0,
        k: libc::SECCOMP_RET_ALLOW,
    }]
}

fn load(prog: &[libc::sock_filter], flags: libc::c_ulong) -> i64 {
    let fprog = libc::sock_fprog {
        len: prog.len() as u16,
        filter: prog.as_ptr().cast_mut(),
    };
    // SAFETY: a valid program for the call's duration; in a throwaway child.
    unsafe {
        libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0);
        libc::syscall(
            libc::SYS_seccomp,
            libc::SECCOMP_SET_MODE_FILTER,
            flags,
            &fprog as *const libc::sock_fprog,
        )
    }
}

fn errno_probe(code: io::Result<i32>) -> Probe {
    match code {
        Ok(0) => Probe::yes(),
        Ok(c) if c < 128 => Probe::no(format!("{}", io::Error::from_raw_os_error(c))),
        Ok(c) => Probe::no(format!("the probe died (signal {})", c - 128)),
        Err(e) => Probe::no(format!("cannot run the probe: {e}")),
    }
}

fn probe_notify(flags: libc::c_ulong) -> Probe {
    errno_probe(in_child(|| {
        let prog = allow_all();
        if load(&prog, flags) < 0 {
            // SAFETY: reading this thread's errno.
            return unsafe { *libc::__errno_location() };
        }
        0
    }))
}

fn probe_sync_wakeup() -> Probe {
    errno_probe(in_child(|| {
        let prog = allow_all();
        let fd = load(&prog, libc::SECCOMP_FILTER_FLAG_NEW_LISTENER);
        if fd < 0 {
            // SAFETY: reading this thread's errno.
            return unsafe { *libc::__errno_location() };
        }
        // SAFETY: the flags ioctl on the listener we just got.
        let rc = unsafe { libc::ioctl(fd as i32, libc::SECCOMP_IOCTL_NOTIF_SET_FLAGS, 1u64) };
        if rc < 0 {
            // SAFETY: as above.
            return unsafe { *libc::__errno_location() };
        }
        0
    }))
}

/// Can this process take an fd from another with `pidfd_getfd`? Tried on
/// itself: ptrace access to a tree is `tree_access`'s question; this one is
/// whether the syscall itself is refused (a seccomp profile, an old kernel).
fn probe_pidfd_getfd() -> Probe {
    // SAFETY: pidfd_open takes two integers.
    let pidfd = unsafe { libc::syscall(libc::SYS_pidfd_open, libc::getpid() as libc::c_long, 0) };
    if pidfd < 0 {
        return Probe::no(format!("pidfd_open: {}", io::Error::last_os_error()));
    }
    // SAFETY: a pidfd we own, fd 0 (or any open fd), flags 0.
    let got = unsafe {
        libc::syscall(
            libc::SYS_pidfd_getfd,
            pidfd,
            0 as libc::c_long,
            0 as libc::c_long,
        )
    };
    let err = io::Error::last_os_error();
    // SAFETY: closing fds we own.
    unsafe {
        libc::close(pidfd as libc::c_int);
        if got >= 0 {
            libc::close(got as libc::c_int);
        }
    }
    match got {
        g if g >= 0 => Probe::yes(),
        // fd 0 closed: the call itself works.
        _ if err.raw_os_error() == Some(libc::EBADF) => Probe::yes(),
        _ => Probe::no(format!("pidfd_getfd: {err}")),
    }
}

/// A child asks to be traced (it stops itself), loads a filter answering
/// `getppid` with `RET_TRACE` and calls it; the parent seizes it and must
/// see `PTRACE_EVENT_SECCOMP`. Every path reaps the child here.
fn probe_trace() -> Probe {
    // SAFETY: the child only makes raw syscalls, then _exits.
    let child = unsafe { libc::fork() };
    if child < 0 {
        return Probe::no(format!("fork: {}", io::Error::last_os_error()));
    }
    if child == 0 {
        traced_child();
    }
    let outcome = await_seccomp_stop(child);
    // SAFETY: our child; EXITKILL would also end it.
    unsafe {
        libc::kill(child, libc::SIGKILL);
        let mut st = 0;
        libc::waitpid(child, &mut st, libc::__WALL);
    }
    match outcome {
        Ok(()) => Probe::yes(),
        Err(e) => Probe::no(e.to_string()),
    }
}

/// Why [`probe_trace`] saw no seccomp stop.
#[derive(Debug, thiserror::Error)]
enum TraceProbeError {
    #[error("waitpid: {0}")]
    Wait(#[source] io::Error),
    #[error("PTRACE_SEIZE: {0}")]
    Seize(#[source] io::Error),
    #[error("the traced child ended without a seccomp stop")]
    Ended,
    #[error("no seccomp stop")]
    NoStop,
}

/// [`probe_trace`]'s child, after fork (async-signal-safe calls only):
/// stops itself, loads `getppid -> TRACE`, calls getppid.
fn traced_child() -> ! {
    // BPF: load nr; if getppid -> TRACE else ALLOW.
    let prog = [
        libc::sock_filter {
            code: (libc::BPF_LD | libc::BPF_W | libc::BPF_ABS) as u16,
            jt: 0,
            jf: 0,
            k: 0,
        },
        libc::sock_filter {
            code: (libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K) as u16,
            jt: 0,
            jf: 1,
            k: libc::SYS_getppid as u32,
        },
        libc::sock_filter {
            code: (libc::BPF_RET | libc::BPF_K) as u16,
            jt: 0,
            jf: 0,
            k: libc::SECCOMP_RET_TRACE,
        },
        libc::sock_filter {
            code: (libc::BPF_RET | libc::BPF_K) as u16,
            jt: 0,
            jf: 0,
            k: libc::SECCOMP_RET_ALLOW,
        },
    ];
    // SAFETY: raw syscalls in the child.
    unsafe {
        libc::raise(libc::SIGSTOP);
        if load(&prog, 0) < 0 {
            libc::_exit(2);
        }
        libc::syscall(libc::SYS_getppid);
        libc::_exit(0);
    }
}

/// [`probe_trace`]'s parent: seizes the stopped child, resumes it and waits
/// (a few stops at most) for its seccomp stop.
fn await_seccomp_stop(child: libc::pid_t) -> Result<(), TraceProbeError> {
    let mut st = 0;
    // SAFETY: waiting for our own child's stop.
    if unsafe { libc::waitpid(child, &mut st, libc::WUNTRACED) } < 0 {
        return Err(TraceProbeError::Wait(io::Error::last_os_error()));
    }
    let opts = libc::PTRACE_O_TRACESECCOMP | libc::PTRACE_O_EXITKILL;
    // SAFETY: seizing our own stopped child.
    if unsafe { libc::ptrace(libc::PTRACE_SEIZE, child, 0, opts as libc::c_ulong) } < 0 {
        return Err(TraceProbeError::Seize(io::Error::last_os_error()));
    }
    // SAFETY: resume it (SIGCONT ends the stop; the tracer sees it).
    unsafe { libc::kill(child, libc::SIGCONT) };
    for _ in 0..16 {
        // SAFETY: waiting for our tracee.
        if unsafe { libc::waitpid(child, &mut st, libc::__WALL) } < 0 {
            return Err(TraceProbeError::Wait(io::Error::last_os_error()));
        }
        if libc::WIFEXITED(st) || libc::WIFSIGNALED(st) {
            return Err(TraceProbeError::Ended);
        }
        let event = (st >> 16) & 0xff;
        if libc::WIFSTOPPED(st) && event == libc::PTRACE_EVENT_SECCOMP {
            return Ok(());
        }
        let sig = if libc::WIFSTOPPED(st) && event == 0 {
            let s = libc::WSTOPSIG(st);
            if s == libc::SIGSTOP || s == libc::SIGCONT {
                0
            } else {
                s
            }
        } else {
            0
        };
        // SAFETY: continue our tracee (re-injecting an ordinary signal).
        unsafe { libc::ptrace(libc::PTRACE_CONT, child, 0, sig as libc::c_ulong) };
    }
    Err(TraceProbeError::NoStop)
}

fn probe_fanotify() -> Probe {
    const FAN_CLASS_CONTENT: u32 = 0x04;
    const FAN_CLOEXEC: u32 = 0x01;
    // SAFETY: creates a notification group or fails; closed at once.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_fanotify_init,
            FAN_CLASS_CONTENT | FAN_CLOEXEC,
            libc::O_RDONLY as u32,
        )
    };
    if fd < 0 {
        return Probe::no(format!("{}", io::Error::last_os_error()));
    }
    // SAFETY: our own fd.
    unsafe { libc::close(fd as i32) };
    Probe::yes()
}

/// Probes everything; `max_abi` is the config's `landlock.max_abi` cap.
/// Probes this host; `choice` is the configured `execve.backend`.
pub fn detect(max_abi: Option<i64>, choice: BackendChoice) -> Report {
    let version = read("/proc/version").unwrap_or_default();
    // runsc presents this fixed, fake kernel identity.
    let gvisor = version.contains("#1 SMP Sun Jan 10 15:06:54 PST 2016")
        || std::path::Path::new("/proc/self/gvisor").exists();
    let (cap_sys_admin, cap_sys_ptrace) = caps();
    let no_new_privs = crate::tracee::ProcStatus::read("self")
        .ok()
        .is_some_and(|s| s.field("NoNewPrivs") == Some("1"));
    let notify = probe_notify(libc::SECCOMP_FILTER_FLAG_NEW_LISTENER);
    let killable = if notify.available {
        probe_notify(
            libc::SECCOMP_FILTER_FLAG_NEW_LISTENER | libc::SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV,
        )
    } else {
        Probe::no("no user-notify")
    };
    let sync = if notify.available {
        probe_sync_wakeup()
    } else {
        Probe::no("no user-notify")
    };
    let trace = probe_trace();
    let kernel_abi = agentsh_proto::wire::kernel_landlock_abi();
    let abi = agentsh_proto::wire::effective_landlock_abi(kernel_abi, max_abi);
    let exec_backend = choose_backend(choice, |k| match k.trap() {
        agentsh_proto::wire::Trap::UserNotif => &notify,
        agentsh_proto::wire::Trap::Tracer => &trace,
    });
    let backend = match &exec_backend {
        Ok(k) => backend::of(*k).facts().describe.to_string(),
        Err(e) => format!("none: {e}"),
    };
    let mut protections = Vec::new();
    protections.push(match abi {
        0 => "Landlock: none (file and network rules and self-protection do not exist)".into(),
        a if a < 4 => format!("Landlock ABI {a}: files yes; TCP ports no; signal/abstract-socket scopes no (seccomp signal guard instead)"),
        a if a < 6 => format!("Landlock ABI {a}: files and TCP ports; scopes no (seccomp signal guard instead)"),
        a => format!("Landlock ABI {a}: files, TCP ports, signal and abstract-socket scopes"),
    });
    protections.push(if cap_sys_admin {
        "daemon sockets: hidden from root trees (mount namespace) where the tree has CAP_SYS_ADMIN".into()
    } else {
        "daemon sockets: this process lacks CAP_SYS_ADMIN; root trees here likely too: NOT hidden (non-root trees: the sockets' modes)".into()
    });
    let tree_access = probe_tree_access();
    let yama = read("/proc/sys/kernel/yama/ptrace_scope").and_then(|s| s.trim().parse().ok());
    protections.push(match tree_access.reach() {
        Reach::Any if cap_sys_ptrace => {
            "trees: every tree can be read and watched (CAP_SYS_PTRACE)".into()
        }
        Reach::Any => "trees: every tree can be read and watched without CAP_SYS_PTRACE \
                       (another uid's tree with its own credentials)"
            .into(),
        r => format!("trees: {}", reach_remedy(r, yama).unwrap_or_default()),
    });
    Report {
        gvisor,
        kernel: version.trim().to_string(),
        seccomp_user_notif: notify,
        wait_killable_recv: killable,
        sync_wake_up: sync,
        seccomp_trace_ptrace: trace,
        landlock_abi: kernel_abi,
        fanotify_permission: probe_fanotify(),
        yama_ptrace_scope: yama,
        cap_sys_admin,
        cap_sys_ptrace,
        no_new_privs,
        tree_access,
        pidfd_getfd: probe_pidfd_getfd(),
        backend,
        exec_backend: exec_backend.ok(),
        protections,
        limits: limits(),
    }
}

/// Whether trees can get cgroups with their limits here (`cgroup::assess`).
fn limits() -> Probe {
    match crate::cgroup::assess() {
        Ok(at) => Probe {
            available: true,
            detail: Some(at),
        },
        Err(why) => Probe::no(why),
    }
}

/// The report for people.
pub fn human(r: &Report) -> String {
    let p = |x: &Probe| match (&x.available, &x.detail) {
        (true, _) => "yes".to_string(),
        (false, Some(d)) => format!("no ({d})"),
        (false, None) => "no".to_string(),
    };
    let mut s = String::new();
    s += &format!("kernel:                       {}\n", r.kernel);
    s += &format!(
        "gVisor:                       {}\n",
        if r.gvisor { "yes" } else { "no" }
    );
    s += &format!(
        "seccomp user-notify:          {}\n",
        p(&r.seccomp_user_notif)
    );
    s += &format!(
        "  WAIT_KILLABLE_RECV:         {}\n",
        p(&r.wait_killable_recv)
    );
    s += &format!("  SYNC_WAKE_UP:               {}\n", p(&r.sync_wake_up));
    s += &format!(
        "SECCOMP_RET_TRACE + ptrace:   {}\n",
        p(&r.seccomp_trace_ptrace)
    );
    s += &format!("Landlock ABI (kernel):        {}\n", r.landlock_abi);
    s += &format!(
        "fanotify permission events:   {}\n",
        p(&r.fanotify_permission)
    );
    s += &format!(
        "Yama ptrace_scope:            {}\n",
        r.yama_ptrace_scope
            .map_or_else(|| "no Yama".into(), |v| v.to_string())
    );
    s += &format!(
        "server capabilities:          CAP_SYS_ADMIN {}, CAP_SYS_PTRACE {}; no_new_privs {}\n",
        r.cap_sys_admin, r.cap_sys_ptrace, r.no_new_privs
    );
    s += &format!(
        "read a child / another tree: {} / {}\n",
        p(&r.tree_access.descendants),
        p(&r.tree_access.others)
    );
    s += &format!("take a tree's socket (egress): {}\n", p(&r.pidfd_getfd));
    s += &format!(
        "limits per session (cgroups): {}\n",
        match (&r.limits.available, &r.limits.detail) {
            (true, Some(at)) => format!("yes ({at})"),
            _ => p(&r.limits),
        }
    );
    s += &format!("a wrap-init here gets:        {}\n", r.backend);
    for prot in &r.protections {
        s += &format!("  - {prot}\n");
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_machine_offers_user_notify_and_tracing() {
        let r = detect(None, BackendChoice::Auto);
        if std::env::var("CI").as_deref() == Ok("true") {
            assert!(r.seccomp_user_notif.available, "{r:?}");
            assert!(r.seccomp_trace_ptrace.available, "{r:?}");
            assert!(!r.gvisor);
            assert!(r.landlock_abi >= 6);
        }
        let text = human(&r);
        assert!(text.contains("seccomp user-notify:"), "{text}");
        let json = serde_json::to_value(&r).unwrap();
        assert!(json["seccomp_user_notif"]["available"].is_boolean());
        if r.seccomp_user_notif.available {
            assert_eq!(r.exec_backend, Some(ExecBackend::Notify));
            assert_eq!(json["exec_backend"], "notify");
            let forced = detect(None, BackendChoice::Ptrace);
            assert_eq!(forced.exec_backend, Some(ExecBackend::Ptrace), "{forced:?}");
            assert!(forced.backend.starts_with("ptrace"), "{}", forced.backend);
        }
    }

    #[test]
    fn the_backend_follows_the_choice_and_the_host() {
        let yes = Probe::yes();
        let no = Probe::no("EINVAL");
        use BackendChoice::{Auto, Notify, Ptrace};
        let host = |notify: &'static Probe, trace: &'static Probe| {
            move |k: ExecBackend| match k {
                ExecBackend::Notify => notify,
                ExecBackend::Ptrace => trace,
            }
        };
        let (yes, no): (&'static Probe, &'static Probe) =
            (Box::leak(Box::new(yes)), Box::leak(Box::new(no)));
        assert_eq!(
            choose_backend(Auto, host(yes, yes)),
            Ok(ExecBackend::Notify)
        );
        assert_eq!(choose_backend(Auto, host(no, yes)), Ok(ExecBackend::Ptrace));
        let none = choose_backend(Auto, host(no, no)).unwrap_err().to_string();
        assert_eq!(
            none,
            "this host can supervise no exec: no seccomp user notification (EINVAL) and no \
             SECCOMP_RET_TRACE + ptrace (EINVAL)"
        );
        assert_eq!(
            choose_backend(Ptrace, host(yes, yes)),
            Ok(ExecBackend::Ptrace)
        );
        assert_eq!(
            choose_backend(Notify, host(no, yes))
                .unwrap_err()
                .to_string(),
            "execve.backend is notify, but this kernel has no seccomp user notification \
             (EINVAL); use auto or ptrace"
        );
        assert!(choose_backend(Ptrace, host(yes, no)).is_err());
    }

    #[test]
    fn a_cap_lowers_what_trees_get() {
        let r = detect(Some(2), BackendChoice::Auto);
        assert!(r.protections[0].contains("ABI 2"), "{:?}", r.protections);
    }
}
