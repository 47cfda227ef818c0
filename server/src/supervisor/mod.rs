//! The supervisor: rules on every call a tree's filter hands over (execs,
//! the network calls that name a destination, the signal calls Landlock
//! cannot scope, and the path calls where the kernel has no Landlock),
//! whichever backend caught it.
//!
//! The folder is the architecture:
//!
//! * the core: what every tree's supervisor shares (`context`), a tree and
//!   its terms (`tree`), what the tree's thread keeps between calls
//!   (`state`, one part per family over the tasks every family may stop:
//!   `tasks`), the seam (`seam`: how a call is caught and answered, now or
//!   later, and how one is held for an operator; `http_proxy`: how a
//!   connect reaches agentsh's HTTP proxy, which implements it), and the
//!   one dispatch (`dispatch`) that hands each caught call to its family;
//! * the mechanisms the families share: stopping a tree's tasks (`ptrace`,
//!   `sharing`: every task sharing the caller's memory), the `/proc` files
//!   kept open between calls (`procfiles`), where the time goes (`phases`),
//!   one attempt however many PATH entries (`retry`), which memory may hold
//!   a call's strings (`vma`), an fd table held still through one call
//!   (`fdhold`), and what is asked of the kernel to stop or hold tasks
//!   behind one trait (`stops`, with `tracee::host` its reading half: both
//!   have recording doubles, so the families' refusals are unit-tested
//!   without root, with `testkit`'s bench); (telling the caller why it was
//!   refused is `crate::explain`, below the supervisor: the DNS stub and the
//!   proxy tell callers too);
//! * the families, one folder or file each, each given only its own state:
//!   `exec` (gather the facts, ask the pure policy, hold, answer, audit,
//!   watch the exec through; `exec::identity` recognises copies of the
//!   programs the policy names), `egress` (judge each destination, make the
//!   call on the tree's behalf), `signals` (the signal guard's
//!   user-notify half), `files` (the file rules, where no Landlock keeps
//!   them: the ptrace backend in gVisor) and `maps` (files mapped
//!   executable, where the policy judges them);
//! * the backends (`backend`): `notify` (one seccomp user-notify fd per
//!   tree, a thread each) and `trace` (`SECCOMP_RET_TRACE` stops of every
//!   task of every tree, on one tracer thread: gVisor, restrictive seccomp
//!   profiles). A backend catches a call and answers it; it knows the seam
//!   and the dispatch, never a family.
//!
//! Fail-closed: any fact that cannot be read, decided or frozen is answered
//! EACCES (never CONTINUE) and audited with the reason (`vocab::Refusal`).
//! If the server dies, the kernel fails every later trapped syscall of the
//! tree with ENOSYS, and detaches every task the supervisor had stopped.

pub mod backend;
mod context;
mod dispatch;
mod egress;
mod exec;
mod fdhold;
mod files;
mod http_proxy;
mod maps;
mod nested_vfork;
mod phases;
mod procfiles;
mod ptrace;
pub mod retry;
mod seam;
mod sharing;
pub mod shimhops;
mod signals;
mod state;
mod stops;
mod tasks;
#[cfg(test)]
mod testkit;
mod tree;
mod vma;

pub use context::SupervisorContext;
pub use exec::identity::{index_for, prepare, sha256_hex, IndexError, Preparing, MAX_INDEXES};
pub use exec::mechanism_rules;
pub use files::FileRules;
pub use http_proxy::{Booking, HttpProxy, ProxyDown, ProxyOnDemand};
pub use seam::{
    Deferred, Held, HeldDestination, Hold, HoldKind, HoldRequest, Holder, Settled, Stop,
    Verification, Waiting,
};
pub use stops::RealStops;
pub use tree::{LiveRules, ReadOnly, Tree, TreeFiles, TreeRules, TreeTerms};
