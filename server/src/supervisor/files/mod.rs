//! The files family: where the kernel has no Landlock (gVisor) and the
//! tracer supervises the tree, the filter sends the path calls here
//! (`agentsh_proto::fileabi`: `open*`, `creat`, `truncate`, `unlink*`,
//! `rmdir`, `rename*`, `link*`, `symlink*`, `mkdir*`, `mknod*`, `chmod*`,
//! `chown*`, `utime*`, `*xattr`), and the tree's file rules (the ruleset
//! unixwrap would give Landlock, agentsh's own files carved out of every
//! grant) are kept by judging each: `rules` (the ruleset, with Landlock's
//! meaning), `judge` (what each call needs of it; pure), `handle` (one
//! call: its caller held still, its paths read and walked in its view,
//! judged, answered, a refusal audited).
//!
//! What it does not watch: calls on fds (`write`, `ftruncate`, `fchmod`)
//! act on files opened through it; the race with the tree's other
//! processes changing the names walked is closed by the tracer, which
//! holds back every call that changes names while a walked call runs
//! (`backend::trace`).
//!
//! Failure modes: see `handle`.

mod handle;
mod judge;
mod rules;

pub use handle::{handle, FilesState};

pub use rules::FileRules;

/// The path calls the filter sends here, and which call a stop is.
pub use agentsh_proto::fileabi::classify;
