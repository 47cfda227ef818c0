//! The threads of a process of the sharing set, and the children of one of
//! its threads, read from `/proc` (or, for the caller's own few threads,
//! guessed and checked with `tgkill(pid, tid, 0)`).
//!
//! Why: the caller's process is new at almost every exec, so its task
//! directory is read, not kept; a threaded caller usually has its threads at
//! the ids right after its own, which a signal 0 confirms without a
//! directory read.
//!
//! Failure modes: a process that is gone has no threads and no children (an
//! empty list); a thread missed here shows in the thread count read again
//! after the freeze, and is stopped in the next round.

use crate::supervisor::procfiles::ProcFiles;

/// The threads of the caller's own process (`stat` already read): its tid
/// alone when it is the only one. Otherwise the ids right after the
/// process's are tried first (a thread usually takes the next free id when
/// it is created, and most threaded callers are young): `tgkill(pid, t, 0)`
/// succeeds only for a thread of `pid` (signal 0 sends nothing), and once as
/// many are found as the thread count says, that is all of them (the count
/// is read again after the freeze; a thread missed shows there). Else the
/// task directory is read. The caller's process is new at almost every exec:
/// it is read, not kept.
pub(super) fn own_threads(pid: u32, tid: u32, num_threads: u32) -> Vec<u32> {
    if num_threads <= 1 {
        return vec![tid];
    }
    let want = num_threads as usize;
    if want <= GUESS_THREADS {
        let mut found = vec![tid];
        let candidates =
            std::iter::once(pid).chain(pid.saturating_add(1)..=pid.saturating_add(GUESS_SPAN));
        for t in candidates {
            if found.len() == want {
                break;
            }
            if !found.contains(&t) && in_thread_group(pid, t) {
                found.push(t);
            }
        }
        if found.len() == want {
            return found;
        }
    }
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .map(|d| {
            d.flatten()
                .filter_map(|e| e.file_name().to_str()?.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

/// Thread counts up to which [`own_threads`] tries ids before reading the
/// task directory, and how many ids after the process's it tries.
const GUESS_THREADS: usize = 4;
const GUESS_SPAN: u32 = 8;

/// `tgkill(pid, tid, 0)`: is `tid` a thread of `pid`?
fn in_thread_group(pid: u32, tid: u32) -> bool {
    // SAFETY: tgkill takes three integers; signal 0 sends nothing.
    unsafe {
        libc::syscall(
            libc::SYS_tgkill,
            pid as libc::c_long,
            tid as libc::c_long,
            0 as libc::c_long,
        ) == 0
    }
}

/// The threads of another process of the set (kept open in `files`).
pub(super) fn threads_of(pid: u32, files: &mut ProcFiles) -> Vec<u32> {
    match files.stat(pid) {
        Ok(s) if s.num_threads <= 1 => vec![pid],
        Ok(_) => files.threads(pid).unwrap_or_default(),
        Err(_) => Vec::new(), // gone: its threads are gone too
    }
}

/// The children of thread `tid` of `pid`, read once: a thread other than
/// the leader is not kept open (its id could be another thread's later).
pub(super) fn children_once(pid: u32, tid: u32) -> Vec<u32> {
    use std::io::Read;
    let mut text = String::new();
    let _ = std::fs::File::open(format!("/proc/{pid}/task/{tid}/children"))
        .and_then(|mut f| f.read_to_string(&mut text));
    text.split_ascii_whitespace()
        .filter_map(|c| c.parse().ok())
        .collect()
}
