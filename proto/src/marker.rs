//! "Is this process already supervised by agentsh?"
//!
//! The agentsh seccomp filter answers one syscall pattern that no kernel
//! defines — `prctl(MARKER_PRCTL_OPTION, MARKER_PRCTL_ARG, 0, 0, 0)` — with the
//! distinctive errno [`MARKER_ERRNO`]. A kernel without our filter answers
//! EINVAL. The answer comes from the kernel's filter chain: the environment
//! cannot forge it, and a process outside an agentsh tree that installs a
//! look-alike filter gains nothing (it could run the real shell anyway).
//!
//! `Seccomp_filters: 0` in `/proc/self/status` is only the fast negative:
//! container runtimes (Docker, Kubernetes RuntimeDefault) install a filter of
//! their own, so a count above zero says nothing about agentsh.

/// A prctl option no kernel defines ("AGSH").
pub const MARKER_PRCTL_OPTION: u64 = 0x4147_5348;
/// The second argument the filter also matches ("MARK").
pub const MARKER_PRCTL_ARG: u64 = 0x4d41_524b;
/// The errno the agentsh filter answers the marker with (no real errno is this large).
pub const MARKER_ERRNO: i32 = 3_377;

/// Number of seccomp filters attached to the calling thread, from
/// `/proc/self/status`. `None` if the file or the field cannot be read.
pub fn seccomp_filter_count() -> Option<u32> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    parse_filter_count(&status)
}

fn parse_filter_count(status: &str) -> Option<u32> {
    status
        .lines()
        .find_map(|l| l.strip_prefix("Seccomp_filters:"))
        .and_then(|v| v.trim().parse().ok())
}

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

/// The full test: the filter count is the fast "no"; otherwise the marker decides.
/// If `/proc` cannot be read, the marker alone decides.
pub fn already_supervised() -> bool {
    match seccomp_filter_count() {
        Some(0) => false,
        _ => agentsh_filter_present(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_filter_count() {
        let s = "Name:\tsh\nSeccomp:\t2\nSeccomp_filters:\t3\nSpeculation_Store_Bypass:\tx\n";
        assert_eq!(parse_filter_count(s), Some(3));
        assert_eq!(parse_filter_count("Name:\tsh\n"), None);
    }

    #[test]
    fn unfiltered_test_process_is_not_supervised() {
        // The test runner itself carries no agentsh filter.
        assert!(!agentsh_filter_present());
    }
}
