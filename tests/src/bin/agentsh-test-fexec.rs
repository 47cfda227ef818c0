//! Test helper: `agentsh-test-fexec PATH ARGV0 [ARGS...]` opens PATH and runs it
//! with fexecve (execveat(fd, "", AT_EMPTY_PATH) in glibc), so the exec names
//! no path at all.

use std::ffi::CString;
use std::os::fd::AsRawFd;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.len() < 2 {
        eprintln!("usage: agentsh-test-fexec PATH ARGV0 [ARGS...]");
        std::process::exit(2);
    }
    let file = match std::fs::File::open(&args[0]) {
        Ok(f) => f,
        Err(e) => {
            eprintln!("agentsh-test-fexec: {}: {e}", args[0]);
            std::process::exit(2);
        }
    };
    let cargs: Vec<CString> = args[1..]
        .iter()
        .map(|a| CString::new(a.as_str()).expect("no NUL in args"))
        .collect();
    let mut argv: Vec<*const libc::c_char> = cargs.iter().map(|c| c.as_ptr()).collect();
    argv.push(std::ptr::null());
    let envp: [*const libc::c_char; 1] = [std::ptr::null()];
    // SAFETY: argv and envp are NULL-terminated arrays of valid C strings.
    unsafe { libc::fexecve(file.as_raw_fd(), argv.as_ptr(), envp.as_ptr()) };
    let e = std::io::Error::last_os_error();
    eprintln!("agentsh-test-fexec: fexecve: {e}");
    std::process::exit(126);
}
