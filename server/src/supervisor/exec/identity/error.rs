//! Why a program is not indexed, or an index not built: one error for the
//! identity index's rooms (each is logged with the program it concerns, or
//! stops the server or the session that needed the index).
//!
//! Failure modes: none; a type.

use std::io;

/// Why a program is not indexed, or an index not built.
#[derive(Debug, thiserror::Error)]
pub enum IndexError {
    #[error(
        "the index is full ({max} programs): {path} is not indexed, and copies of it are judged \
         by their own name"
    )]
    Full { path: String, max: usize },
    #[error("cannot start the identity index's watcher thread: {0}")]
    Watcher(io::Error),
    #[error("cannot resolve it: {0}")]
    Resolve(io::Error),
    #[error("cannot stat {path}: {error}")]
    Stat { path: String, error: io::Error },
    #[error("{path} is larger than {max_mib} MiB, the most an index or an exec hashes")]
    TooLarge { path: String, max_mib: u64 },
    #[error("cannot open it: {0}")]
    Open(io::Error),
    #[error("cannot stat it: {0}")]
    StatOpened(io::Error),
    #[error("it is no longer a regular file of a size the index takes")]
    NotRegular,
    #[error("cannot read it: {0}")]
    Read(io::Error),
    #[error("not hashed (a hashing thread failed)")]
    NotHashed,
    #[error(
        "building the identity index failed (see the panic above); the server does not start \
         without it"
    )]
    Panicked,
    #[error(
        "policy {policy:?}: the server already has {max} policies naming different programs; \
         restart it with fewer distinct policies"
    )]
    TooManyIndexes { policy: String, max: usize },
}
