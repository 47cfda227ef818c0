//! `agentsh detect`: what this host offers agentsh, probed for real.
//!
//! Every answer comes from trying the thing in a short-lived child process
//! (loading a filter with a listener, tracing a seccomp stop, creating a
//! fanotify group) or from the kernel's own files, never from version
//! numbers: gVisor, restrictive seccomp profiles and capped capabilities all
//! look like ordinary Linux from `uname`. The server logs the same report at
//! start and serves it at `GET /api/v1/status`.
//!
//! Failure modes: a probe that cannot run (fork fails, a child dies) reports
//! the capability as absent with the reason; nothing here changes the host.
//!
//! The rooms: `report` (the report's types, and what to do about a reach
//! short of every tree), `host` (the whole report probed), `syscalls` (the
//! probes of single system calls, in a throwaway child), `trace` (the ptrace
//! backend's trap), `tree_access` (which processes the server can read),
//! `choose` (the backend a choice comes to here), `human` (the report for
//! people).

mod choose;
mod host;
mod human;
mod report;
mod syscalls;
mod trace;
mod tree_access;

pub use choose::{choose_backend, NoBackend};
pub use host::detect;
pub use human::human;
pub use report::{reach_remedy, Probe, Reach, Report, TreeAccess};
pub(crate) use syscalls::in_child;
