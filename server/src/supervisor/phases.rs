//! Where the supervisor's time per exec goes, for the benchmarks and for
//! profiling: with the supervisor's trace level on
//! (`AGENTSH_LOG=info,agentsh::supervisor=trace`), each step of an exec
//! records when it ended, and the `exec answered` trace line carries
//! `phases=` (microseconds per step, in order). Off, which is the default,
//! a step costs one flag check.
//!
//! Failure modes: none; the record is per thread (a tree's thread handles
//! one exec at a time) and cleared at the start of each exec.

use std::cell::{Cell, RefCell};
use std::fmt::Write;
use std::time::Instant;

thread_local! {
    static ON: Cell<bool> = const { Cell::new(false) };
    static MARKS: RefCell<Vec<(&'static str, Instant)>> = const { RefCell::new(Vec::new()) };
}

/// Starts the record of one exec (when tracing is on).
pub fn begin() {
    let on = tracing::enabled!(tracing::Level::TRACE);
    ON.with(|o| o.set(on));
    if on {
        MARKS.with(|m| {
            let mut m = m.borrow_mut();
            m.clear();
            m.push(("start", Instant::now()));
        });
    }
}

/// Records that step `name` ended now.
pub fn mark(name: &'static str) {
    if ON.with(Cell::get) {
        MARKS.with(|m| m.borrow_mut().push((name, Instant::now())));
    }
}

/// `name=µs` for each step since [`begin`].
pub fn text() -> String {
    MARKS.with(|m| {
        let m = m.borrow();
        let mut s = String::new();
        for w in m.windows(2) {
            let _ = write!(
                s,
                "{}={} ",
                w[1].0,
                w[1].1.duration_since(w[0].1).as_micros()
            );
        }
        s.pop();
        s
    })
}
