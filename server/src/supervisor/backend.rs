//! The two backends that catch a tree's supervised syscalls: seccomp user
//! notification (`notify`) and, where the kernel has none (gVisor), ptrace
//! with `SECCOMP_RET_TRACE` (`trace`). Each turns what it caught into a
//! `dispatch::Caught` and an `ExecStop`; everything after that is shared.
//!
//! Failure modes: each backend's own (see its module).

pub mod notify;
pub mod trace;
