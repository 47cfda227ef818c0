//! Where the supervisor's time per exec goes, for the benchmarks and for
//! profiling: with the supervisor's trace level on
//! (`AGENTSH_LOG=info,agentsh::supervisor=trace`), each step of an exec
//! records when it ended, and the `exec answered` trace line carries
//! `phases=` (microseconds per step, in order). Off, which is the default,
//! a step costs one flag check.
//!
//! Failure modes: none; the record is per thread (a tree's thread handles
//! one exec at a time) and cleared at the start of each exec.

use crate::laps::Laps;
use std::cell::RefCell;

thread_local! {
    static LAPS: RefCell<Option<Laps>> = const { RefCell::new(None) };
}

/// Starts the record of one exec (when tracing is on).
pub fn begin() {
    let on = tracing::enabled!(tracing::Level::TRACE);
    LAPS.with(|l| *l.borrow_mut() = Some(Laps::new(on)));
}

/// Records that step `name` ended now.
pub fn mark(name: &'static str) {
    LAPS.with(|l| {
        if let Some(laps) = l.borrow_mut().as_mut() {
            laps.lap(name);
        }
    });
}

/// `name=µs` for each step since [`begin`].
pub fn text() -> String {
    LAPS.with(|l| {
        l.borrow()
            .as_ref()
            .map(|x| x.text().to_string())
            .unwrap_or_default()
    })
}
