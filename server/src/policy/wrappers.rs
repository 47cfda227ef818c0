//! Wrappers: programs that run another program named in their arguments
//! (`env`, `nice`, `timeout`, the dynamic loader, ...). The policy judges the
//! payload as well as the wrapper, so `env curl` cannot slip past a rule on
//! `curl`; for the dynamic loader this is the only check there is, because
//! `ld.so PROG` maps PROG without an execve of its own.
//!
//! Each wrapper's options are parsed the way the real tool parses them
//! (GNU getopt with `+`: options stop at the first operand; short options
//! cluster; `--` ends options; long options only spelt in full). An option
//! we do not know is an error, not a guess: guessing whether it takes an
//! argument could make us judge the wrong word as the payload. The caller
//! turns that error into a fail-closed verdict.
//!
//! The rooms: `kind` (which wrapper a program is, and what it runs),
//! `tools` (the getopt-parsed tools: `env`, `nice`, `timeout`, ...),
//! `multi_call` (busybox, toybox), `loader` (the dynamic loader), `getopt`
//! (the option parser they share), `payload` (what a wrapper runs, or why
//! that cannot be told).

mod getopt;
mod kind;
mod loader;
mod multi_call;
mod payload;
mod tools;

pub(crate) use kind::{always_indexed, names_a_loader, unwrap, Wrapper};
pub(crate) use multi_call::{is_multi_call_name, multi_call_with};
pub(crate) use payload::{Unparsable, Unwrapped};

#[cfg(test)]
#[path = "wrappers_tests.rs"]
mod tests;
