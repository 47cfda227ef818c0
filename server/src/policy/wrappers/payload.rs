//! What a wrapper will run, or why its arguments could not be parsed: the
//! answer every wrapper's parser gives.
//!
//! Failure modes: none here; an [`Unparsable`] is the caller's to turn into
//! a fail-closed verdict.

use std::collections::VecDeque;

/// What a wrapper will run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Unwrapped {
    /// Nothing: it only reports or acts on other processes (`nice`, `ionice -p 42`).
    NoPayload,
    Payload {
        /// The program as the wrapper will look it up (a path or a bare name).
        program: String,
        /// Its argv, argv[0] first.
        argv: Vec<String>,
    },
}

/// Why a wrapper's arguments could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Unparsable(pub String);

/// The payload from the operands left after options.
pub(super) fn payload(operands: VecDeque<String>) -> Unwrapped {
    let argv: Vec<String> = operands.into();
    match argv.first() {
        Some(program) => Unwrapped::Payload {
            program: program.clone(),
            argv,
        },
        None => Unwrapped::NoPayload,
    }
}
