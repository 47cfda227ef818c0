//! When a directory last changed, to tell whether an answer computed from
//! its entries still holds (the Landlock ruleset cache, the daemon-socket
//! cache).
//!
//! Failure modes: a directory that cannot be stat'ed has no stamp (`None`),
//! which never equals a stamp it had: the answer is computed again.

/// What a directory looked like: any entry added, removed, renamed or
/// replaced, or a mount on it, changes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Stamp {
    dev: u64,
    ino: u64,
    pub(crate) ctime: (i64, i64),
    mtime: (i64, i64),
}

/// A directory changed this recently might have changed during a compile
/// that read it: such a result is not kept.
pub(crate) const SETTLE: std::time::Duration = std::time::Duration::from_millis(100);

pub(crate) fn stamp(dir: &str) -> Option<Stamp> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(dir).ok()?;
    Some(Stamp {
        dev: m.dev(),
        ino: m.ino(),
        ctime: (m.ctime(), m.ctime_nsec()),
        mtime: (m.mtime(), m.mtime_nsec()),
    })
}

/// The first of `deps` whose stamp is not the one kept: what made a kept
/// answer stale (`None`: all still hold).
pub(crate) fn changed(deps: &[(String, Option<Stamp>)]) -> Option<&str> {
    deps.iter()
        .find(|(d, st)| stamp(d) != *st)
        .map(|(d, _)| d.as_str())
}
