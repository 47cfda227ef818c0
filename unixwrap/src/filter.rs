//! The agentsh seccomp filter: built with libseccomp, loaded with the raw syscall.
//!
//! Rules (default ALLOW):
//! * `execve`, `execveat` → USER_NOTIF: the server rules on every exec in the tree.
//! * `prctl(MARKER_PRCTL_OPTION, MARKER_PRCTL_ARG, ..)` → ERRNO(MARKER_ERRNO): the
//!   "already supervised" marker (see `agentsh_proto::marker`). The option is an
//!   `int`, so only its low 32 bits are compared.
//! * `seccomp(SECCOMP_SET_MODE_FILTER, flags & NEW_LISTENER, ..)` → EPERM: nothing
//!   in the tree can start a second supervisor (or, in a nested unixwrap, trip
//!   libseccomp's "listener-less filter" bug).
//! * every name in `blocked_syscalls` → EPERM (an unknown name fails the build:
//!   fail closed rather than silently allow a syscall someone meant to block).
//! * on x86_64 the i386 and x32 ABIs carry the same rules, so `int 0x80` cannot
//!   reach an untrapped execve; any other arch is KILL_PROCESS.
//!
//! Why not `seccomp_load`: libseccomp 2.5.4 cannot set
//! `SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV`, and when a listener already exists
//! it may load a filter *without* one and hand back the old fd (every exec then
//! fails with ENOSYS). So the BPF is exported and loaded with `seccomp(2)` here,
//! with flags we choose and errors we see.
//!
//! Failure modes: [`LoadError::KernelRefused`] means nothing was installed (the
//! caller may fall back); [`LoadError::ListenerExists`] and
//! [`LoadError::Failed`] are refusals. A build error is a config error.

use std::collections::BTreeSet;
use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom};
use std::os::fd::{FromRawFd, OwnedFd};

use agentsh_proto::marker::{MARKER_ERRNO, MARKER_PRCTL_ARG, MARKER_PRCTL_OPTION};
use agentsh_proto::SeccompConfig;
use libseccomp::{
    ScmpAction, ScmpArch, ScmpArgCompare, ScmpCompareOp, ScmpFilterContext, ScmpSyscall,
};

/// Syscalls the config may not block: the filter itself depends on them.
const RESERVED: &[&str] = &["execve", "execveat", "prctl"];

/// Builds the filter and returns its BPF program.
///
/// # Errors
/// An unknown or reserved syscall name in `blocked_syscalls`, or a libseccomp
/// failure; the message says which.
pub fn build_bpf(cfg: &SeccompConfig) -> Result<Vec<libc::sock_filter>, String> {
    let e = |what: &str, err: libseccomp::error::SeccompError| format!("{what}: {err}");
    let mut ctx =
        ScmpFilterContext::new(ScmpAction::Allow).map_err(|err| e("seccomp_init", err))?;
    for arch in extra_arches() {
        ctx.add_arch(*arch)
            .map_err(|err| e(&format!("adding arch {arch:?}"), err))?;
    }
    ctx.set_act_badarch(ScmpAction::KillProcess)
        .map_err(|err| e("setting the bad-arch action", err))?;

    for name in ["execve", "execveat"] {
        let sc = ScmpSyscall::from_name(name).map_err(|err| e(name, err))?;
        ctx.add_rule(ScmpAction::Notify, sc)
            .map_err(|err| e(&format!("notify rule for {name}"), err))?;
    }

    let prctl = ScmpSyscall::from_name("prctl").map_err(|err| e("prctl", err))?;
    ctx.add_rule_conditional(
        ScmpAction::Errno(MARKER_ERRNO),
        prctl,
        &[
            ScmpArgCompare::new(
                0,
                ScmpCompareOp::MaskedEqual(0xffff_ffff),
                MARKER_PRCTL_OPTION,
            ),
            ScmpArgCompare::new(1, ScmpCompareOp::Equal, MARKER_PRCTL_ARG),
        ],
    )
    .map_err(|err| e("marker rule", err))?;

    let blocked: BTreeSet<&str> = cfg.blocked_syscalls.iter().map(String::as_str).collect();
    if let Some(r) = blocked.iter().find(|n| RESERVED.contains(n)) {
        return Err(format!(
            "blocked_syscalls: {r:?} cannot be blocked (agentsh's filter relies on it)"
        ));
    }
    // An unconditional block of `seccomp` subsumes the listener rule.
    if !blocked.contains("seccomp") {
        let seccomp = ScmpSyscall::from_name("seccomp").map_err(|err| e("seccomp", err))?;
        // c_ulong is u64 on every 64-bit target; `as` keeps 32-bit targets building.
        #[allow(clippy::unnecessary_cast)]
        let nl = libc::SECCOMP_FILTER_FLAG_NEW_LISTENER as u64;
        ctx.add_rule_conditional(
            ScmpAction::Errno(libc::EPERM),
            seccomp,
            &[
                ScmpArgCompare::new(
                    0,
                    ScmpCompareOp::Equal,
                    u64::from(libc::SECCOMP_SET_MODE_FILTER),
                ),
                ScmpArgCompare::new(1, ScmpCompareOp::MaskedEqual(nl), nl),
            ],
        )
        .map_err(|err| e("new-listener rule", err))?;
    }
    for name in &blocked {
        let sc = ScmpSyscall::from_name(name).map_err(|_| {
            format!("blocked_syscalls: unknown syscall {name:?} on this architecture")
        })?;
        ctx.add_rule(ScmpAction::Errno(libc::EPERM), sc)
            .map_err(|err| e(&format!("blocking {name}"), err))?;
    }

    export(&ctx)
}

fn extra_arches() -> &'static [ScmpArch] {
    #[cfg(target_arch = "x86_64")]
    {
        &[ScmpArch::X86, ScmpArch::X32]
    }
    #[cfg(target_arch = "aarch64")]
    {
        &[ScmpArch::Arm]
    }
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    {
        &[]
    }
}

/// Exports a libseccomp filter's BPF through a memfd (libseccomp 2.5.4 has no
/// export-to-memory). Public so tests can build filters the same way.
///
/// # Errors
/// memfd, export or read failures, named.
pub fn export(ctx: &ScmpFilterContext) -> Result<Vec<libc::sock_filter>, String> {
    // SAFETY: the name is a NUL-terminated literal; the result is checked.
    let fd = unsafe { libc::memfd_create(c"agentsh-bpf".as_ptr(), libc::MFD_CLOEXEC) };
    if fd < 0 {
        return Err(format!(
            "memfd_create for the BPF export: {}",
            io::Error::last_os_error()
        ));
    }
    // SAFETY: fd is a fresh descriptor we own.
    let mut file = File::from(unsafe { OwnedFd::from_raw_fd(fd) });
    ctx.export_bpf(&file)
        .map_err(|err| format!("exporting the BPF: {err}"))?;
    let mut raw = Vec::new();
    file.seek(SeekFrom::Start(0))
        .and_then(|_| file.read_to_end(&mut raw))
        .map_err(|err| format!("reading the exported BPF: {err}"))?;
    decode(&raw)
}

fn decode(raw: &[u8]) -> Result<Vec<libc::sock_filter>, String> {
    const INSN: usize = 8;
    if raw.is_empty() || raw.len() % INSN != 0 || raw.len() / INSN > usize::from(u16::MAX) {
        return Err(format!(
            "exported BPF has an invalid size ({} bytes)",
            raw.len()
        ));
    }
    Ok(raw
        .chunks_exact(INSN)
        .map(|c| libc::sock_filter {
            code: u16::from_ne_bytes([c[0], c[1]]),
            jt: c[2],
            jf: c[3],
            k: u32::from_ne_bytes([c[4], c[5], c[6], c[7]]),
        })
        .collect())
}

/// Does the kernel implement seccomp user notification? (gVisor: no.)
///
/// # Errors
/// The kernel's errno (ENOSYS, EINVAL, EOPNOTSUPP...).
pub fn probe_user_notif() -> io::Result<()> {
    let mut sizes = libc::seccomp_notif_sizes {
        seccomp_notif: 0,
        seccomp_notif_resp: 0,
        seccomp_data: 0,
    };
    // SAFETY: SECCOMP_GET_NOTIF_SIZES writes one seccomp_notif_sizes through a
    // valid pointer and has no other effect.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_seccomp,
            libc::SECCOMP_GET_NOTIF_SIZES,
            0,
            &mut sizes as *mut libc::seccomp_notif_sizes,
        )
    };
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// Is CAP_SYS_ADMIN in this process's effective set? (Then the filter loads
/// without no_new_privs, and setuid programs keep working in the tree.)
///
/// # Errors
/// capget's errno.
pub fn has_cap_sys_admin() -> io::Result<bool> {
    #[repr(C)]
    struct Header {
        version: u32,
        pid: i32,
    }
    #[repr(C)]
    #[derive(Clone, Copy)]
    struct Data {
        effective: u32,
        permitted: u32,
        inheritable: u32,
    }
    const LINUX_CAPABILITY_VERSION_3: u32 = 0x2008_0522;
    const CAP_SYS_ADMIN: u32 = 21;
    let mut hdr = Header {
        version: LINUX_CAPABILITY_VERSION_3,
        pid: 0,
    };
    let mut data = [Data {
        effective: 0,
        permitted: 0,
        inheritable: 0,
    }; 2];
    // SAFETY: version 3 capget writes two `Data` entries through valid pointers.
    let rc = unsafe { libc::syscall(libc::SYS_capget, &mut hdr as *mut Header, data.as_mut_ptr()) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(data[0].effective & (1 << CAP_SYS_ADMIN) != 0)
}

/// `prctl(PR_SET_NO_NEW_PRIVS, 1)`.
///
/// # Errors
/// prctl's errno.
pub fn set_no_new_privs() -> io::Result<()> {
    // SAFETY: PR_SET_NO_NEW_PRIVS only sets a process flag.
    let rc = unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) };
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// Why the filter was not loaded.
#[derive(Debug)]
pub enum LoadError {
    /// The kernel cannot do it (EINVAL for NEW_LISTENER under gVisor, EPERM,
    /// EACCES, ENOSYS, EOPNOTSUPP). Nothing was installed.
    KernelRefused(io::Error),
    /// EBUSY: a listener already exists in this thread's filter chain.
    ListenerExists,
    /// Any other error (nothing was installed either, but it is not a known
    /// kernel limitation, so it is never a reason to run unsupervised).
    Failed(io::Error),
}

/// A loaded filter: its notify fd and the flags the kernel accepted.
#[derive(Debug)]
pub struct Loaded {
    pub notify_fd: OwnedFd,
    pub flags: libc::c_ulong,
    /// Set when WAIT_KILLABLE_RECV was asked for but refused (EINVAL).
    pub wait_killable_refused: bool,
}

/// Names of the filter flags, for the log.
pub fn flag_names(flags: libc::c_ulong) -> String {
    let mut v = Vec::new();
    if flags & libc::SECCOMP_FILTER_FLAG_NEW_LISTENER != 0 {
        v.push("NEW_LISTENER");
    }
    if flags & libc::SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV != 0 {
        v.push("WAIT_KILLABLE_RECV");
    }
    v.join("|")
}

/// Loads `prog` with NEW_LISTENER (and WAIT_KILLABLE_RECV when asked, retried
/// without it on EINVAL: kernels before 5.19).
///
/// # Errors
/// See [`LoadError`]. On error nothing was installed.
pub fn load(prog: &[libc::sock_filter], wait_killable: bool) -> Result<Loaded, LoadError> {
    let base = libc::SECCOMP_FILTER_FLAG_NEW_LISTENER;
    if wait_killable {
        match seccomp_set_mode_filter(prog, base | libc::SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV) {
            Ok(fd) => {
                return Ok(Loaded {
                    notify_fd: fd,
                    flags: base | libc::SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV,
                    wait_killable_refused: false,
                })
            }
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
                let fd = seccomp_set_mode_filter(prog, base).map_err(classify)?;
                return Ok(Loaded {
                    notify_fd: fd,
                    flags: base,
                    wait_killable_refused: true,
                });
            }
            Err(e) => return Err(classify(e)),
        }
    }
    let fd = seccomp_set_mode_filter(prog, base).map_err(classify)?;
    Ok(Loaded {
        notify_fd: fd,
        flags: base,
        wait_killable_refused: false,
    })
}

fn classify(e: io::Error) -> LoadError {
    match e.raw_os_error() {
        Some(libc::EBUSY) => LoadError::ListenerExists,
        Some(libc::EINVAL | libc::EPERM | libc::EACCES | libc::ENOSYS | libc::EOPNOTSUPP) => {
            LoadError::KernelRefused(e)
        }
        _ => LoadError::Failed(e),
    }
}

fn seccomp_set_mode_filter(
    prog: &[libc::sock_filter],
    flags: libc::c_ulong,
) -> io::Result<OwnedFd> {
    let len = u16::try_from(prog.len())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "BPF program too long"))?;
    let fprog = libc::sock_fprog {
        len,
        filter: prog.as_ptr().cast_mut(),
    };
    // SAFETY: `fprog` points at `len` valid instructions that outlive the call;
    // the kernel copies the program and only reads through the pointer.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_seccomp,
            libc::SECCOMP_SET_MODE_FILTER,
            flags,
            &fprog as *const libc::sock_fprog,
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    let fd = i32::try_from(rc)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "listener fd out of range"))?;
    // SAFETY: with NEW_LISTENER the kernel returns a fresh (close-on-exec)
    // listener fd that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base_blocklist_builds() {
        let prog = build_bpf(&SeccompConfig::with_base_blocklist()).unwrap();
        assert!(prog.len() > 10);
    }

    #[test]
    fn unknown_syscall_is_an_error() {
        let mut cfg = SeccompConfig::with_base_blocklist();
        cfg.blocked_syscalls.push("no_such_syscall".into());
        let e = build_bpf(&cfg).unwrap_err();
        assert!(e.contains("no_such_syscall"), "{e}");
    }

    #[test]
    fn reserved_syscalls_cannot_be_blocked() {
        for name in RESERVED {
            let mut cfg = SeccompConfig::with_base_blocklist();
            cfg.blocked_syscalls.push((*name).into());
            assert!(build_bpf(&cfg).unwrap_err().contains("cannot be blocked"));
        }
    }

    #[test]
    fn blocking_seccomp_entirely_builds() {
        let mut cfg = SeccompConfig::with_base_blocklist();
        cfg.blocked_syscalls.push("seccomp".into());
        assert!(build_bpf(&cfg).is_ok());
    }

    #[test]
    fn flag_names_for_the_log() {
        let f =
            libc::SECCOMP_FILTER_FLAG_NEW_LISTENER | libc::SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV;
        assert_eq!(flag_names(f), "NEW_LISTENER|WAIT_KILLABLE_RECV");
    }

    #[cfg(target_arch = "x86_64")]
    #[test]
    fn x86_64_filter_also_covers_i386_and_x32() {
        const AUDIT_ARCH_X86_64: u32 = 0xC000_003E;
        const AUDIT_ARCH_I386: u32 = 0x4000_0003;
        const X32_SYSCALL_BIT: u32 = 0x4000_0000;
        const X32_EXECVE: u32 = X32_SYSCALL_BIT | 520;
        let prog = build_bpf(&SeccompConfig::with_base_blocklist()).unwrap();
        let ks: Vec<u32> = prog.iter().map(|i| i.k).collect();
        for k in [AUDIT_ARCH_X86_64, AUDIT_ARCH_I386, X32_EXECVE] {
            assert!(ks.contains(&k), "{k:#x} missing from the filter");
        }
        // i386 execve (11) is trapped: a jump on 11 leads to USER_NOTIF somewhere.
        assert!(ks.contains(&libc::SECCOMP_RET_USER_NOTIF));
        assert!(ks.contains(&libc::SECCOMP_RET_KILL_PROCESS));
    }

    #[test]
    fn decode_rejects_odd_sizes() {
        assert!(decode(&[]).is_err());
        assert!(decode(&[0; 9]).is_err());
        assert_eq!(decode(&[0; 16]).unwrap().len(), 2);
    }
}
