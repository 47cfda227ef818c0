//! Why a seccomp filter cannot be built: a name the policy's
//! `syscalls.block` may not or cannot block, or libseccomp failing.
//!
//! Failure modes: this is the failure; the server refuses to start with a
//! policy whose filter cannot be built, and answers a wrap-init whose filter
//! cannot be built with 500.

/// Why a filter cannot be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FilterError {
    #[error("syscalls.block: {name:?} cannot be blocked ({why})")]
    Reserved { name: String, why: &'static str },
    #[error("syscalls.block: {0:?} is not a syscall libseccomp knows on this architecture")]
    Unknown(String),
    #[error("building the seccomp filter: {0}")]
    Build(String),
}
