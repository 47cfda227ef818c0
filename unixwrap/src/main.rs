//! `agentsh-unixwrap`: the thin entry point over [`agentsh_unixwrap::run`].
//!
//! `#![no_main]` on purpose: Rust's start-up code sets SIGPIPE to SIG_IGN (which
//! survives execve, so `yes | head -1` in the user's shell would never end) and
//! reopens closed standard fds on /dev/null (which changes the fds the user's
//! command sees). Neither may happen in a process that ends by exec'ing the
//! user's command, so the C `main` is ours and std's runtime set-up never runs.
//!
//! Failure modes: none of its own; every outcome is decided by `run`, which
//! either execs the command or returns the exit status (126 refuse, 127 not found).

#![no_main]

use std::ffi::{c_char, c_int, CStr, OsString};
use std::os::unix::ffi::OsStringExt;

/// The C entry point.
///
/// # Safety
/// Called only by the C runtime, with `argc` valid string pointers in `argv`.
#[no_mangle]
pub unsafe extern "C" fn main(argc: c_int, argv: *const *const c_char) -> c_int {
    let count = usize::try_from(argc).unwrap_or(0);
    let mut args: Vec<OsString> = Vec::with_capacity(count);
    for i in 0..count {
        // SAFETY: the C runtime passes `argc` valid pointers in `argv`.
        let p = unsafe { *argv.add(i) };
        if p.is_null() {
            break;
        }
        // SAFETY: each argv entry is a NUL-terminated string that lives as long
        // as the process.
        let s = unsafe { CStr::from_ptr(p) };
        args.push(OsString::from_vec(s.to_bytes().to_vec()));
    }
    agentsh_unixwrap::run(args)
}
