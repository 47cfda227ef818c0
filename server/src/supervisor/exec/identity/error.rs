//! Why a program is not indexed, or an index not built: one error for the
//! identity index's rooms (each is logged with the program it concerns, or
//! stops the server or the session that needed the index).
//!
//! Failure modes: none; a type.

use super::files::MAX_HASHED;
use super::index::MAX_PROGRAMS;
use super::registry::MAX_INDEXES;
use std::io;

/// Why a program is not indexed, or an index not built.
#[derive(Debug, thiserror::Error)]
pub enum IndexError {
    #[error(
        "the index is full ({MAX_PROGRAMS} programs): {0} is not indexed, and copies of it are \
         judged by their own name"
    )]
    Full(String),
    #[error("cannot start the identity index's watcher thread: {0}")]
    Watcher(io::Error),
    #[error("cannot resolve it: {0}")]
    Resolve(io::Error),
    #[error("cannot stat {path}: {error}")]
    Stat { path: String, error: io::Error },
    #[error(
        "{0} is larger than {max} MiB, the most an index or an exec hashes",
        max = MAX_HASHED >> 20
    )]
    TooLarge(String),
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
        "policy {0:?}: the server already has {MAX_INDEXES} policies naming different programs; \
         restart it with fewer distinct policies"
    )]
    TooManyIndexes(String),
}
