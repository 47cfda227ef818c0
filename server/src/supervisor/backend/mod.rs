//! The two backends that catch a tree's supervised syscalls: seccomp user
//! notification (`notify`) and, where the kernel has none (gVisor), ptrace
//! with `SECCOMP_RET_TRACE` (`trace`). Each turns what it caught into a
//! `seam::Caught` and a `seam::Stop`; everything after that is shared.
//! What a backend is to the rest of the server, and where backends are
//! registered: `registry`.
//!
//! Failure modes: each backend's own (see its module).

mod interface;
pub mod notify;
mod registry;
pub mod trace;

pub use interface::{Backend, Facts, Supervising, TakeOverError};
pub use registry::{of, ALL};
