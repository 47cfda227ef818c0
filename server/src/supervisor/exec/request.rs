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
    /// The path to judge instead of the one in the caller's memory: the
    /// one the supervisor writes where only it writes, for the kernel to
    /// read (`hop`). `None`: the caller's.
    pub instead: Option<Vec<u8>>,
}
