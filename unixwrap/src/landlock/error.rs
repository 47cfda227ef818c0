//! Why Landlock was not applied as the config asks: one error type for
//! every step (the ABI check before install, building the ruleset,
//! enforcing it), each variant saying what failed on what.
//!
//! Failure modes: none of its own; each variant is a refusal to run (the
//! caller's `Refusal::Landlock`), never a downgrade to running without the
//! ruleset.

use super::report::Report;

/// Why Landlock was not applied as the config asks.
#[derive(Debug)]
pub enum LandlockError {
    /// `compat: required`, and the kernel (or the cap) offers less than the
    /// ruleset needs; found before anything was installed.
    AbiTooLow {
        /// The ABI the ruleset needs.
        need: i64,
        /// What the kernel offers (0: none).
        offers: i64,
    },
    /// The landlock crate refused a step of building or enforcing the ruleset.
    Ruleset {
        /// The step, in words.
        step: String,
        /// The crate's error.
        source: landlock::RulesetError,
    },
    /// `/` could not be opened for the reparenting rule.
    Root(landlock::PathFdError),
    /// The ruleset fd could not be duplicated.
    Clone(std::io::Error),
    /// `compat: required`, and the kernel enforced less than all of it.
    NotFullyEnforced(Report),
}

impl std::fmt::Display for LandlockError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LandlockError::AbiTooLow { need, offers } => write!(
                f,
                "landlock.compat is required and the ruleset needs Landlock ABI {need}, \
                 but this kernel offers {}",
                if *offers == 0 {
                    "none".to_string()
                } else {
                    format!("ABI {offers}")
                }
            ),
            LandlockError::Ruleset { step, source } => write!(f, "landlock {step}: {source}"),
            LandlockError::Root(e) => write!(f, "landlock: opening /: {e}"),
            LandlockError::Clone(e) => write!(f, "landlock: cloning the ruleset fd: {e}"),
            LandlockError::NotFullyEnforced(r) => {
                write!(f, "landlock is required but only {} ({r})", r.status.name())
            }
        }
    }
}

/// The error of a ruleset step, named in words.
pub(crate) fn ruleset_err(
    step: impl Into<String>,
) -> impl FnOnce(landlock::RulesetError) -> LandlockError {
    let step = step.into();
    move |source| LandlockError::Ruleset { step, source }
}
