//! The backend-neutral exec path: from a caught exec to its answer.
//!
//! A backend (`notify` today, ptrace later) hands over the calling thread's
//! id, the syscall and its register arguments, and a [`Stop`] to answer
//! through. Here, in order:
//!
//! 1. who: the thread's stat (kept open: a freeze reads it again) and
//!    thread group;
//! 2. the path (read together with the argv array, one `process_vm_readv`),
//!    resolved in the thread's own view: a path that names nothing is
//!    answered with the kernel's own errno (no decision: a failing errno is
//!    safe whatever was read);
//! 3. the race guard: who else shares the caller's memory (`sharing`); if
//!    anyone, they are stopped before anything is read for the decision, and
//!    the path is read again (`gather::read_path_again`);
//! 4. argv (mostly from the pages already read), and where the strings live
//!    (`vma`: no shared mappings);
//! 5. the notification is still the same waiting thread (`still_waiting`);
//! 6. depth, then the pure decision (`policy::judge`);
//! 7. approve: hand to `approval` (the tasks stopped are released first);
//!    otherwise audit, then answer;
//! 8. after CONTINUE with stopped tasks: watch the caller (seized with
//!    `PTRACE_O_TRACEEXEC` and a pending interrupt) until its exec completed
//!    (`PTRACE_EVENT_EXEC`: the new image has not run an instruction) or
//!    failed (it stops on its way back to user space), then release everyone.
//!
//! Steps 1–4, with the facts step 6 judges (the `#!` interpreters, whether
//! the lookups are stable, what the identity index recognises), are
//! `gather`; the rest is here.
//!
//! A backend that checks every exec it lets through at `PTRACE_EVENT_EXEC`
//! itself (ptrace: it traces every task anyway) says so
//! ([`Stop::verifies_every_exec`]): then steps 3, 4's mapping check and 8
//! are skipped, since whatever another task changes after the read, the new
//! image is checked against what was judged before its first instruction
//! ([`Stop::expect`] receives it), and the audit says `memory: verified`.
//!
//! This runs for every exec, so it counts system calls: the parents' `/proc`
//! files are kept open between execs (`procfiles`), this exec's are closed
//! after the answer, and `phases` says where the time goes.
//!
//! What steps 1–4 and 8 ask the kernel and `/proc` goes through the
//! context's `tracee::host::Host` (the caller's stat, view, resolutions,
//! `#!` chain, maps) and `stops::TaskStops` (who shares the memory, the
//! freeze, the watch's seize); the strings are read from the caller's
//! memory. The unit tests (`tests`) drive [`handle`] with their recording
//! doubles, without root: one per fail-closed branch below, each checking
//! the answer and the event.
//!
//! Failure modes: anything that cannot be read, resolved or frozen is a deny
//! (EACCES) audited with the rule `unreadable`, `unresolvable`,
//! `memory_not_frozen` or `shared_memory` and the reason.

mod depth;
mod gather;
mod handle;
mod held;
mod hop;
#[cfg(test)]
mod hop_tests;
pub mod identity;
mod judge;
mod recognise;
mod redirect;
mod request;
mod state;
#[cfg(test)]
mod tests;
mod undecidable;
mod verify;
mod watch;

pub use handle::handle;
pub use judge::mechanism_rules;
pub use request::ExecRequest;
pub use state::ExecState;
pub use watch::completed;
