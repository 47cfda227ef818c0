//! The identity indexes the server keeps: one per distinct set of programs
//! the sessions' policies name (sessions with the same programs share one),
//! each built once, on its own thread at start ([`prepare`]) or when an
//! operator creates a session ([`index_for`]), and kept for the server's
//! life.
//!
//! Failure modes: more than [`MAX_INDEXES`] distinct indexes is an error
//! (the session or the server does not start); a build thread that panicked
//! is an error at [`Preparing::wait`].

use super::error::IndexError;
use super::index::IdentityIndex;
use crate::policy::Policy;
use std::sync::Arc;

/// The identity indexes built so far, each with the command entries it
/// indexes: sessions whose policies name the same programs share one. Each
/// is kept for the server's life (its watcher thread holds it), so there
/// are at most [`MAX_INDEXES`].
static INDEXES: std::sync::Mutex<Vec<(Vec<String>, &'static IdentityIndex)>> =
    std::sync::Mutex::new(Vec::new());

/// The most distinct identity indexes (distinct sets of named programs
/// among the sessions' policies) a server builds.
pub const MAX_INDEXES: usize = 32;

/// Start-up work the first exec must not pay for, under way on its own
/// thread: the identity indexes of the policies sessions start with
/// (hashing every program they name) and the report of what ptrace allows.
/// The server waits for it ([`Preparing::wait`]) before it answers
/// `/healthz`.
pub struct Preparing(Result<std::thread::JoinHandle<Result<(), IndexError>>, Vec<Arc<Policy>>>);

/// Starts [`Preparing`] for `policies`.
pub fn prepare(policies: Vec<Arc<Policy>>) -> Preparing {
    let copy = policies.clone();
    Preparing(
        std::thread::Builder::new()
            .name("agentsh-index".into())
            .spawn(move || prepare_now(&copy))
            .map_err(|e| {
                tracing::debug!("start-up work on the main thread (no thread: {e})");
                policies
            }),
    )
}

impl Preparing {
    /// Waits until the identity indexes are built and watched.
    ///
    /// # Errors
    /// The thread building them panicked (its message is in the log
    /// above), or there are more than [`MAX_INDEXES`].
    pub fn wait(self) -> Result<(), IndexError> {
        match self.0 {
            Ok(h) => h.join().map_err(|_| IndexError::Panicked)?,
            Err(policies) => prepare_now(&policies),
        }
    }
}

fn prepare_now(policies: &[Arc<Policy>]) -> Result<(), IndexError> {
    for p in policies {
        index_for(p)?;
    }
    Ok(())
}

/// The identity index of the programs `policy` names: the one already
/// built for the same entries, or one built now (blocking: hashing every
/// program named; at start, or when an operator creates a session).
///
/// # Errors
/// [`MAX_INDEXES`] distinct indexes exist already.
pub fn index_for(policy: &Policy) -> Result<&'static IdentityIndex, IndexError> {
    let mut commands = policy.command_entries();
    commands.sort();
    commands.dedup();
    let mut built = INDEXES
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some((_, index)) = built.iter().find(|(c, _)| *c == commands) {
        return Ok(index);
    }
    if built.len() >= MAX_INDEXES {
        return Err(IndexError::TooManyIndexes {
            policy: policy.name().to_string(),
            max: MAX_INDEXES,
        });
    }
    let t = std::time::Instant::now();
    let (index, stats) = IdentityIndex::start(&commands, true);
    tracing::info!(
        policy = policy.name(),
        programs = stats.programs,
        files = stats.files,
        mib = format!("{:.1}", stats.bytes as f64 / f64::from(1u32 << 20)),
        threads = stats.threads,
        ms = t.elapsed().as_millis() as u64,
        watched_dirs = stats.watched,
        deferred = stats.deferred,
        "identity index built: copies of these programs are judged as them"
    );
    // Kept for the server's life: the watcher thread holds it.
    let index: &'static IdentityIndex = Box::leak(Box::new(index));
    if index.has_background_work() {
        if let Err(e) = index.watch_in_background() {
            tracing::warn!(
                "{e}: a program the policy names that is installed after the index was built is \
                 indexed only when the server restarts"
            );
        }
    }
    built.push((commands, index));
    Ok(index)
}
