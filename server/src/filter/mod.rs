//! The seccomp filter every supervised tree gets, compiled by the server.
//!
//! The server turns a [`FilterSpec`] into a classic BPF program with
//! libseccomp and ships it to unixwrap inside the wrap-init answer
//! (`SeccompConfig::filter`, see `agentsh_proto::bpf` for the wire format);
//! unixwrap loads it as is with `seccomp(2)`. So unixwrap links no libseccomp
//! and loads nothing its caller chose, and the work is done once per distinct
//! spec: [`Filters`] caches the result (specs differ between trees only in a
//! few pids).
//!
//! What the program does (default ALLOW):
//! * `execve`, `execveat` → USER_NOTIF (ptrace backend: `SECCOMP_RET_TRACE`
//!   with [`TRACE_DATA_EXEC`]): the server rules on every exec;
//! * the marker `prctl` → its distinctive errno (`agentsh_proto::marker`);
//! * `seccomp(SET_MODE_FILTER, NEW_LISTENER)` → EPERM: no second supervisor;
//! * the base rules of [`table::BASE_RULES`] and the policy's
//!   `syscalls.block` (EPERM whatever the arguments);
//! * the signal guard: signals, pidfds and SIGIO ownership aimed at the
//!   protected processes (the server, the SDK daemon) and their process
//!   groups fail with EPERM, on register arguments. Where Landlock cannot
//!   scope signals (effective ABI < 6) the calls whose target a register cannot
//!   name (`kill` of any thread id, `tkill`, `rt_sigqueueinfo`,
//!   `pidfd_send_signal`, `pidfd_open(PIDFD_THREAD)`) go to USER_NOTIF (ptrace
//!   backend: `SECCOMP_RET_TRACE` with [`TRACE_DATA_SIGNAL`]) and the
//!   supervisor judges them (`supervisor::signals`);
//! * on x86_64 the i386 and x32 ABIs carry the same rules; any other
//!   architecture is KILL_PROCESS.
//!
//! Failure modes: an unknown or reserved name in the policy's blocklist, or a
//! libseccomp failure, is a [`FilterError`]; the server checks the policy's
//! names when it starts (it refuses to start rather than run trees with a
//! filter it cannot build), and a wrap-init whose filter cannot be built is
//! answered 500 (the shim then refuses or falls through, never runs a tree
//! with a weaker filter).
//!
//! The rooms: `spec` (what a tree's program depends on), `table` (the base
//! rules), `rules` (the rules collected before libseccomp sees them), `build`
//! (a spec to BPF: the filter's own rules and the order of the steps), the
//! rules of each concern (`exec_memory`, `file_calls`, `net`, `guards`),
//! `context` (the rules handed to libseccomp, the program exported),
//! `compiled` (the program as shipped, and what the audit records of it),
//! `cache` ([`Filters`]: the server's compiler and its cache and templates),
//! `error` (why a filter cannot be built).

mod build;
mod cache;
mod compiled;
mod context;
mod error;
mod exec_memory;
mod file_calls;
mod guards;
mod keepers;
mod net;
mod pin_guard;
mod rules;
mod spec;
pub mod table;

pub use agentsh_proto::ExecBackend;
pub use cache::Filters;
pub use compiled::{compile, CompiledFilter, FilterSummary};
pub use error::FilterError;
pub use keepers::{keep, keepers_but, unkeep};
pub use spec::{
    FilterSpec, NetFilter, ProcessId, SignalGuard, TRACE_DATA_EXEC, TRACE_DATA_NET, TRACE_DATA_PIN,
    TRACE_DATA_SIGNAL,
};
pub use table::{Answer, BaseRule, Cmp, When, BASE_RULES, RESERVED};

#[cfg(test)]
mod tests;
