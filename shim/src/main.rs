//! The `agentsh-shell-shim` binary: a thin C `main` over [`agentsh_shell_shim::run`].
//!
//! `#![no_main]` so that Rust's runtime start-up (`lang_start`) never runs: it
//! sets SIGPIPE to SIG_IGN, and SIG_IGN survives execve — the user's shell
//! would inherit it and `yes | head -1` would never end. With a C `main` the
//! shell gets exactly the dispositions the SDK gave us.
#![no_main]

use std::ffi::{c_char, c_int, CStr};

/// # Safety
/// Called by the C runtime with `argc` valid C strings in `argv`.
#[no_mangle]
pub unsafe extern "C" fn main(argc: c_int, argv: *const *const c_char) -> c_int {
    let mut args: Vec<&CStr> = Vec::with_capacity(argc.max(0) as usize);
    for i in 0..argc.max(0) as usize {
        // SAFETY: the C runtime guarantees argv[0..argc] are valid C strings.
        let p = unsafe { *argv.add(i) };
        if p.is_null() {
            break;
        }
        // SAFETY: as above; they live for the whole process.
        args.push(unsafe { CStr::from_ptr(p) });
    }
    agentsh_shell_shim::run(&args)
}
