//! One caught exec, as the dispatch hands it to the exec family: the
//! calling thread, which exec syscall, and its arguments.
//!
//! Failure modes: none; a type.

use agentsh_proto::execabi::{ExecArgs, ExecSyscall};

/// One caught exec.
pub struct ExecRequest {
    /// The calling thread.
    pub tid: u32,
    pub call: &'static ExecSyscall,
    pub args: ExecArgs,
}
