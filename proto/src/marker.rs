//! "Is this process already supervised by agentsh?"
//!
//! The agentsh seccomp filter answers one syscall pattern that no kernel
//! defines — `prctl(MARKER_PRCTL_OPTION, MARKER_PRCTL_ARG, 0, 0, 0)` — with the
//! distinctive errno [`MARKER_ERRNO`]. A kernel without our filter answers
//! EINVAL. The answer comes from the kernel's filter chain: the environment
//! cannot forge it, and a process outside an agentsh tree that installs a
//! look-alike filter gains nothing (it could run the real shell anyway).
//!
//! `Seccomp_filters:` in `/proc/self/status` cannot answer this: container
//! runtimes (Docker, Kubernetes RuntimeDefault) install a filter of their
//! own, so a count above zero says nothing about agentsh; and with no filter
//! at all the marker answers EINVAL just as fast.

/// A prctl option no kernel defines ("AGSH").
pub const MARKER_PRCTL_OPTION: u64 = 0x4147_5348;
/// The second argument the filter also matches ("MARK").
pub const MARKER_PRCTL_ARG: u64 = 0x4d41_524b;
/// The errno the agentsh filter answers the marker with (no real errno is this large).
pub const MARKER_ERRNO: i32 = 3_377;

/// Asks the kernel whether the agentsh filter is in this thread's chain.
pub fn agentsh_filter_present() -> bool {
    // SAFETY: prctl with an option no kernel defines has no effect; it returns
    // -1/EINVAL, or -1/MARKER_ERRNO when the agentsh filter intercepts it.
    let rc = unsafe {
        libc::prctl(
            MARKER_PRCTL_OPTION as libc::c_int,
            MARKER_PRCTL_ARG as libc::c_ulong,
            0 as libc::c_ulong,
            0 as libc::c_ulong,
            0 as libc::c_ulong,
        )
    };
    rc == -1 && std::io::Error::last_os_error().raw_os_error() == Some(MARKER_ERRNO)
}

/// A prctl option no kernel defines ("AGAD"): the admin session's marker.
pub const ADMIN_MARKER_PRCTL_OPTION: u64 = 0x4147_4144;
/// The errno the admin session's filter answers its marker with.
pub const ADMIN_MARKER_ERRNO: i32 = 3_378;

/// Whether this process descends from an admin shell (`admin-shell`, see
/// the shim): the filter [`load_admin_marker`] installs answers the admin
/// marker. Like the agentsh marker, only the kernel's filter chain can say
/// so: a tree cannot remove the agentsh filter that the shim checks first,
/// and code outside every tree could run the real shell anyway.
pub fn admin_session_present() -> bool {
    // SAFETY: as in `agentsh_filter_present`.
    let rc = unsafe {
        libc::prctl(
            ADMIN_MARKER_PRCTL_OPTION as libc::c_int,
            MARKER_PRCTL_ARG as libc::c_ulong,
            0 as libc::c_ulong,
            0 as libc::c_ulong,
            0 as libc::c_ulong,
        )
    };
    rc == -1 && std::io::Error::last_os_error().raw_os_error() == Some(ADMIN_MARKER_ERRNO)
}

/// Installs, on this process and everything it will start, a filter that
/// allows everything and answers the admin marker (so the shim runs every
/// later shell of this session as the real shell). Without CAP_SYS_ADMIN
/// the kernel wants no_new_privs for it, which is then set (the session's
/// setuid programs then do not gain privileges; root needs none).
///
/// # Errors
/// The kernel's refusal.
pub fn load_admin_marker() -> std::io::Result<()> {
    fn stmt(code: u32, k: u32) -> libc::sock_filter {
        libc::sock_filter {
            code: code as u16,
            jt: 0,
            jf: 0,
            k,
        }
    }
    fn jeq(k: u32, jt: u8, jf: u8) -> libc::sock_filter {
        libc::sock_filter {
            code: (libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K) as u16,
            jt,
            jf,
            k,
        }
    }
    // seccomp_data: nr at 0, arch at 4, args[0] at 16 (low word first on
    // little-endian). Any ABI: prctl's number differs, so each native one is
    // matched by its own number; others pass.
    // An array, not a Vec: callable between fork and exec (no allocation).
    let mut prog = [
        stmt(libc::BPF_LD | libc::BPF_W | libc::BPF_ABS, 0),
        jeq(libc::SYS_prctl as u32, 0, 4),
        stmt(libc::BPF_LD | libc::BPF_W | libc::BPF_ABS, 16),
        jeq(ADMIN_MARKER_PRCTL_OPTION as u32, 0, 2),
        stmt(libc::BPF_LD | libc::BPF_W | libc::BPF_ABS, 20),
        jeq(0, 1, 0),
        stmt(libc::BPF_RET | libc::BPF_K, libc::SECCOMP_RET_ALLOW),
        stmt(
            libc::BPF_RET | libc::BPF_K,
            libc::SECCOMP_RET_ERRNO | ADMIN_MARKER_ERRNO as u32,
        ),
    ];
    let fprog = libc::sock_fprog {
        len: prog.len() as u16,
        filter: prog.as_mut_ptr(),
    };
    let load = || {
        // SAFETY: a valid program for the duration of the call.
        unsafe {
            libc::syscall(
                libc::SYS_seccomp,
                libc::SECCOMP_SET_MODE_FILTER,
                libc::SECCOMP_FILTER_FLAG_TSYNC,
                &fprog as *const libc::sock_fprog,
            )
        }
    };
    if load() == 0 {
        return Ok(());
    }
    let e = std::io::Error::last_os_error();
    if e.raw_os_error() != Some(libc::EACCES) {
        return Err(e);
    }
    // SAFETY: PR_SET_NO_NEW_PRIVS only sets a process flag.
    if unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    if load() == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_admin_marker_is_answered_after_loading_and_not_before() {
        // In a child: the filter cannot be taken off again.
        assert!(!admin_session_present());
        // SAFETY: the child only makes raw syscalls, then _exits.
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            let ok =
                load_admin_marker().is_ok() && admin_session_present() && !agentsh_filter_present();
            // SAFETY: leaving the forked child.
            unsafe { libc::_exit(i32::from(!ok)) };
        }
        let mut st = 0;
        // SAFETY: waiting for our own child.
        unsafe { libc::waitpid(pid, &mut st, 0) };
        assert!(
            libc::WIFEXITED(st) && libc::WEXITSTATUS(st) == 0,
            "status {st}"
        );
    }

    #[test]
    fn unfiltered_test_process_is_not_supervised() {
        // The test runner itself carries no agentsh filter.
        assert!(!agentsh_filter_present());
    }
}
