//! Reading a trapped process: its /proc entries and its memory.
//!
//! Everything here reads state the kernel keeps (ppid, thread count, start
//! time, cwd, root, fds) or the tracee's memory through `process_vm_readv`.
//! Paths are resolved in the *calling thread's* root, cwd and fd table
//! (`/proc/<pid>/task/<tid>/…`), never the thread-group leader's and never the
//! server's: a thread may have its own (`unshare(CLONE_FILES | CLONE_FS)`).
//!
//! The supervisor runs this for every exec, so it counts system calls: a
//! `/proc/<pid>/stat` can be kept open and read again ([`StatFile`]); one
//! exec's resolutions share one [`View`] (the thread's root opened and read
//! once); a resolved program is `fstat`ed once ([`ExecTarget::meta`]); the
//! exec's strings are read with as few `process_vm_readv` as their layout
//! allows ([`MemReader`]).
//!
//! Failure modes: a process that vanished gives ENOENT/ESRCH; unreadable memory
//! gives EFAULT; callers turn anything unreadable into a deny. Memory read here
//! could change after the read if another task shared it: the supervisor
//! stops every such task first (`supervisor::sharing`).
//!
//! A server without `CAP_SYS_PTRACE` reaches another uid's process only
//! with that uid's credentials: every read of a process goes through
//! `access`.
//!
//! The rooms: `access` (whose credentials an access takes), `stat` (what
//! `/proc/<pid>/stat` and `status` say), `mem` (the tracee's memory), `maps`
//! (its mappings), `file` (what `fstat` says about a resolved file),
//! `resolve` (a path in the calling thread's view), `shebang` (the `#!`
//! interpreter chain), `stable` (whether the tree can change what a lookup
//! finds), `netproc` (a caller's socket as `/proc` shows it), `pidfd` (a
//! task's fd taken through its pidfd, a signal through it), `pin` (the
//! region the ptrace backend copies what it judged into), `walk` (a path
//! call's path, component by component, for the file rules), `host` (the
//! questions above whose failure is a refusal, behind one trait, so the
//! supervisor's decisions are tested without root: `recording` is its
//! double).

pub mod access;
mod file;
pub mod host;
pub mod maps;
mod mem;
pub mod netproc;
pub mod pidfd;
pub mod pin;
#[cfg(test)]
pub mod recording;
mod resolve;
mod shebang;
mod stable;
mod stat;
pub mod walk;

pub use access::{as_owner, with_owner};
pub use file::{fd_identity, fd_meta, fd_path, FileKey, FileMeta};
pub use mem::{
    forget_mem, overwrite_bytes, peek_cstring, poke, poke_bytes, poke_words, read_argv, read_bytes,
    read_cstring, read_ptr_array, write_bytes, Argv, MemReader,
};
pub use resolve::{
    basename, join_clean, resolve_exec_target, resolve_in, task_dir, ExecTarget, KeptRoot,
    ResolveError, View,
};
pub use shebang::{interpreter_chain, shebang, ChainError, ChainLink, MAX_INTERPRETER_DEPTH};
pub use stable::{file_is_stable, is_gvisor, path_is_stable, running_images_write_protected};
pub use stat::{proc_stat, tgid_of, ProcStat, ProcStatus, StatFile};
