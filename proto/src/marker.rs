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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unfiltered_test_process_is_not_supervised() {
        // The test runner itself carries no agentsh filter.
        assert!(!agentsh_filter_present());
    }
}
