//! Where a piece of work's time goes, for debug and trace lines: each step
//! records when it ended, and the text is `name=µs` per step, in order.
//! Off (the caller's log level below what it is for), a step costs one flag
//! check. Used by wrap-init (`laps=` on its debug lines) and, per thread,
//! by the supervisor's `phases`.
//!
//! Failure modes: none.

use std::fmt::Write;
use std::time::Instant;

/// The steps of one piece of work so far.
pub struct Laps {
    on: bool,
    last: Instant,
    text: String,
}

impl Laps {
    /// Starts now; records nothing unless `on` (the caller asks its own
    /// log level, e.g. `tracing::enabled!(tracing::Level::DEBUG)`).
    pub fn new(on: bool) -> Laps {
        Laps {
            on,
            last: Instant::now(),
            text: String::new(),
        }
    }

    /// Records that step `name` ended now.
    pub fn lap(&mut self, name: &str) {
        if self.on {
            let now = Instant::now();
            let us = now.duration_since(self.last).as_micros();
            let _ = write!(self.text, "{name}={us} ");
            self.last = now;
        }
    }

    /// `name=µs` for each step so far (empty when off).
    pub fn text(&self) -> &str {
        self.text.trim_end()
    }
}
