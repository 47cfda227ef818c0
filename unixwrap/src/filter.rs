//! Loading the agentsh seccomp filter the server compiled, with the raw syscall.
//!
//! unixwrap builds no filter: the server compiles the program (libseccomp,
//! `server/src/filter`) and ships it in `SeccompConfig::filter`
//! (`agentsh_proto::bpf`). [`program`] decodes it and checks it is plausibly
//! agentsh's (it traps to USER_NOTIF; once loaded, the caller also checks the
//! marker answers), and [`load`] installs it with
//! `seccomp(SET_MODE_FILTER, NEW_LISTENER [| WAIT_KILLABLE_RECV])`.
//!
//! Why the raw syscall and not libseccomp's `seccomp_load`: libseccomp 2.5.4
//! cannot set `SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV`, and when a listener
//! already exists it may load a filter *without* one and hand back the old fd
//! (every exec then fails with ENOSYS). Here the flags are ours and every
//! error is the kernel's own. Without libseccomp unixwrap links nothing but
//! libc, and is built static-pie: no dynamic loader runs before the filter.
//!
//! Failure modes: a missing, malformed or non-trapping program is a config
//! error (refusal); [`LoadError::KernelRefused`] means nothing was installed
//! (the caller may fall back); [`LoadError::ListenerExists`] and
//! [`LoadError::Failed`] are refusals.

use std::io;
use std::os::fd::{FromRawFd, OwnedFd};

use agentsh_proto::wire::Trap;
use agentsh_proto::SeccompConfig;

/// The program the server shipped in `cfg`, decoded and vetted.
///
/// # Errors
/// No filter, not a decodable program, or one that never answers
/// USER_NOTIF (execs would go unsupervised).
pub fn program(cfg: &SeccompConfig) -> Result<Vec<libc::sock_filter>, String> {
    if cfg.filter.is_empty() {
        return Err("the config carries no seccomp filter (the server compiles it; is the server older than this unixwrap?)".into());
    }
    let prog = agentsh_proto::bpf::decode_program(&cfg.filter)?;
    let (traps, action) = match cfg.backend.trap() {
        Trap::UserNotif => (agentsh_proto::bpf::traps_to_user_notif(&prog), "USER_NOTIF"),
        Trap::Tracer => (agentsh_proto::bpf::traps_to_tracer(&prog), "TRACE"),
    };
    if !traps {
        return Err(format!(
            "the seccomp filter never answers {action}, so execs would go unsupervised"
        ));
    }
    Ok(prog)
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

/// A loaded filter: its notify fd (none under the ptrace backend) and the
/// flags the kernel accepted.
#[derive(Debug)]
pub struct Loaded {
    pub notify_fd: Option<OwnedFd>,
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

/// Loads `prog` for `backend`: with NEW_LISTENER (and WAIT_KILLABLE_RECV
/// when asked, retried without it on EINVAL: kernels before 5.19) for
/// `notify`; with no flag for `ptrace` (the server is the tracer).
///
/// # Errors
/// See [`LoadError`]. On error nothing was installed.
pub fn load(
    prog: &[libc::sock_filter],
    wait_killable: bool,
    trap: Trap,
) -> Result<Loaded, LoadError> {
    if trap == Trap::Tracer {
        seccomp_set_mode_filter(prog, 0).map_err(classify)?;
        return Ok(Loaded {
            notify_fd: None,
            flags: 0,
            wait_killable_refused: false,
        });
    }
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

/// `seccomp(SET_MODE_FILTER, flags, prog)`; the listener fd when `flags`
/// has NEW_LISTENER, `None` otherwise.
fn seccomp_set_mode_filter(
    prog: &[libc::sock_filter],
    flags: libc::c_ulong,
) -> io::Result<Option<OwnedFd>> {
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
    if flags & libc::SECCOMP_FILTER_FLAG_NEW_LISTENER == 0 {
        return Ok(None);
    }
    let fd = i32::try_from(rc)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "listener fd out of range"))?;
    // SAFETY: with NEW_LISTENER the kernel returns a fresh (close-on-exec)
    // listener fd that nothing else owns.
    Ok(Some(unsafe { OwnedFd::from_raw_fd(fd) }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flag_names_for_the_log() {
        let f =
            libc::SECCOMP_FILTER_FLAG_NEW_LISTENER | libc::SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV;
        assert_eq!(flag_names(f), "NEW_LISTENER|WAIT_KILLABLE_RECV");
    }

    fn ret(k: u32) -> libc::sock_filter {
        libc::sock_filter {
            code: 0x06,
            jt: 0,
            jf: 0,
            k,
        }
    }

    #[test]
    fn only_a_trapping_program_is_accepted() {
        let mut cfg = SeccompConfig::default();
        assert!(program(&cfg).unwrap_err().contains("no seccomp filter"));
        cfg.filter = "%%%%".into();
        assert!(program(&cfg).unwrap_err().contains("base64"));
        cfg.filter = agentsh_proto::bpf::encode_program(&[ret(libc::SECCOMP_RET_ALLOW)]);
        assert!(program(&cfg).unwrap_err().contains("USER_NOTIF"));
        cfg.filter = agentsh_proto::bpf::encode_program(&[
            ret(libc::SECCOMP_RET_USER_NOTIF),
            ret(libc::SECCOMP_RET_ALLOW),
        ]);
        assert_eq!(program(&cfg).unwrap().len(), 2);
    }
}
