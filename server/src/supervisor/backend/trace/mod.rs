//! The ptrace backend: for hosts without seccomp user notification (gVisor,
//! which Modal runs; container platforms whose seccomp profile refuses
//! `NEW_LISTENER`).
//!
//! The tree's filter answers `execve`/`execveat` (and, without Landlock's
//! signal scope, the signal guard's calls) with `SECCOMP_RET_TRACE`. Before
//! unixwrap runs anything, the server seizes it ([`attach`]: `PTRACE_SEIZE`
//! with `TRACESECCOMP | TRACEEXEC | TRACEFORK | TRACEVFORK | TRACECLONE |
//! EXITKILL`), so the shell it becomes, and every task that shell starts at
//! any depth, is a tracee of one thread of the server, the tracer. ptrace
//! belongs to a thread: every request and every wait here is made by that
//! thread, which serves every ptrace tree ([`Tracer`]). Its loop is
//! `tracer_loop`; this file holds what other threads call ([`attach`],
//! [`answer`], [`still_held`]) and the [`TraceStop`] `exec` answers
//! through; `regs` reads and writes a tracee's registers.
//!
//! At each seccomp stop the tracer reads the registers and hands the exec to
//! the backend-neutral path (`exec::handle`) with a [`TraceStop`]: deny is
//! the syscall skipped with `-EACCES` (exactly what the caller sees under
//! notify), allow is `PTRACE_CONT`. Every allowed exec is checked at
//! `PTRACE_EVENT_EXEC`, before the new image runs one instruction: its file
//! (device, inode) and argv must be what was judged, or it is killed there
//! and `exec_mismatch` is audited. So no freeze is needed: whatever another
//! thread rewrites after the read, or whatever file a swapped symlink names,
//! only gets the exec killed. An exec held for an operator stays in its
//! seccomp stop (the rest of the tree runs on); the approval waiter's answer
//! reaches the tracer through [`answer`].
//!
//! Signals and job control pass through: a signal-delivery stop is resumed
//! with its signal, a group-stop with `PTRACE_LISTEN` (the task stays stopped
//! until SIGCONT, as without agentsh), every other stop with `PTRACE_CONT`.
//!
//! If the server dies, `PTRACE_O_EXITKILL` kills every tracee: the tree dies.
//! This is the fail-closed choice: a tracee detached in its seccomp stop
//! would run the exec it was stopped in, judged or not (the kernel rechecks
//! the filter after a trace stop, and `SECCOMP_RET_TRACE` then allows).
//!
//! Failure modes: a tracee whose registers cannot be read is killed (it is
//! stopped in a syscall nobody can judge); an exec whose facts cannot be read
//! is denied by `exec`; a `PTRACE_EVENT_EXEC` with nothing judged to compare
//! against is killed and audited (`unverified_exec`); a seize that fails
//! refuses the handoff (unixwrap then refuses to run).

mod doorbell;
mod events;
mod freeze;
mod gate;
mod memfds;
mod pinning;
mod queue;
mod regs;
mod stop;
mod stopclock;
mod stops;
mod tracer;
mod tracer_loop;
mod vforks;

pub use queue::TraceError;
pub use tracer::Trace;
