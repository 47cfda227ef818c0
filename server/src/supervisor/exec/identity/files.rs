//! Finding and hashing the programs the policy names: the paths the rules
//! name them by, where each path leads (its canonical file, hashed once
//! however many names lead to it), and SHA-256 digests, on several threads
//! at start.
//!
//! Failure modes: a path that leads nowhere is no program (`Ok(None)`); one
//! that leads to a file that cannot be resolved, read or hashed, or is larger
//! than [`MAX_HASHED`], is an error naming the file and the reason, which the
//! index logs.

use super::error::IndexError;
use crate::policy::wrappers::is_multi_call_name;
use crate::tracee::{fd_meta, FileKey};
use sha2::{Digest, Sha256};
use std::collections::HashSet;
use std::io::Read;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, PoisonError};

/// Where a bare program name is looked for, in order.
pub const SYSTEM_PATH: &[&str] = &[
    "/usr/local/sbin",
    "/usr/local/bin",
    "/usr/sbin",
    "/usr/bin",
    "/sbin",
    "/bin",
];

/// Files larger than this are not hashed (a multi-gigabyte binary would
/// stall the tree); documented.
pub const MAX_HASHED: u64 = 512 << 20;
/// How many threads hash at start (fewer on a machine with fewer cores).
const START_THREADS: usize = 4;

/// A binary whose applets share one file, reached under `named` (the path a
/// rule or `policy::wrappers::always_indexed` names): indexing it under one
/// applet's name would judge every applet as that one. Under its own name
/// (`busybox`) it is indexed: a copy is then judged as busybox, which picks
/// the applet by argv[0] as busybox does.
pub(super) fn is_multi_call(named: &str, canon: &str, nlink: u64) -> bool {
    let base = |p: &str| p.rsplit('/').next().unwrap_or(p).to_string();
    let (named, canon) = (base(named), base(canon));
    if is_multi_call_name(&canon) {
        return !is_multi_call_name(&named);
    }
    nlink > 32
}

/// The SHA-256 of a file, hex.
///
/// # Errors
/// The file cannot be read.
pub fn sha256_hex(file: &mut impl Read) -> std::io::Result<String> {
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 1 << 16];
    loop {
        let n = file.read(&mut buf)?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
    }
    Ok(crate::hex::hex(&h.finalize()))
}

/// Every path the rules name a program by, in the rules' order (a bare name
/// on each [`SYSTEM_PATH`] directory, an absolute path as is), and whether
/// they name digests.
pub(super) fn named_paths(commands: &[String]) -> (Vec<String>, bool) {
    let mut paths = Vec::new();
    let mut seen = HashSet::new();
    let mut digests_named = false;
    for c in commands {
        if c.starts_with("sha256:") {
            digests_named = true;
            continue;
        }
        if c.contains(['*', '?', '[']) || c.is_empty() {
            continue; // globs are not expanded
        }
        let candidates: Vec<String> = if c.starts_with('/') {
            vec![c.clone()]
        } else {
            SYSTEM_PATH.iter().map(|d| format!("{d}/{c}")).collect()
        };
        for p in candidates {
            if seen.insert(p.clone()) {
                paths.push(p);
            }
        }
    }
    (paths, digests_named)
}

/// `(directory, file name)` of an absolute path.
pub(super) fn split(path: &str) -> Option<(&str, &str)> {
    let (dir, name) = path.rsplit_once('/')?;
    (!name.is_empty()).then_some((if dir.is_empty() { "/" } else { dir }, name))
}

pub(super) fn key_of(m: &std::fs::Metadata) -> FileKey {
    (
        m.dev(),
        m.ino(),
        m.size(),
        (m.mtime(), m.mtime_nsec()),
        (m.ctime(), m.ctime_nsec()),
    )
}

/// A named program found on disk, not hashed yet.
#[derive(Debug, Clone)]
pub(super) struct Candidate {
    /// Its canonical path (symlinks resolved): one file is hashed once.
    pub canon: String,
    /// The paths the rules name it by (`/usr/bin/curl` and `/bin/curl`).
    pub names: Vec<String>,
    /// Its key when it was found.
    pub key: FileKey,
}

impl Candidate {
    pub fn size(&self) -> u64 {
        self.key.2
    }
}

/// Where `path` leads: `Ok(None)` when there is no program to index there
/// (nothing, not a regular file, empty, or a multi-call binary).
///
/// # Errors
/// What makes a program that is there impossible to index.
pub(super) fn locate(path: &str) -> Result<Option<(String, FileKey)>, IndexError> {
    let canon = match std::fs::canonicalize(path) {
        Ok(c) => c.to_string_lossy().into_owned(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(IndexError::Resolve(e)),
    };
    let m = match std::fs::metadata(&canon) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(error) => return Err(IndexError::Stat { path: canon, error }),
    };
    if !m.is_file() || m.size() == 0 || is_multi_call(path, &canon, m.nlink()) {
        return Ok(None);
    }
    if m.size() > MAX_HASHED {
        return Err(IndexError::TooLarge {
            path: canon,
            max_mib: MAX_HASHED >> 20,
        });
    }
    Ok(Some((canon, key_of(&m))))
}

/// A file's key and digest as it was hashed, or why it was not.
pub(super) type Hashed = Result<(FileKey, String), IndexError>;

/// The key and digest of `c`'s file as it is now. Opened `O_PATH` first
/// (no side effect, never blocks) and read only once `fstat` says it is a
/// regular file: a name in a directory others can write may have become a
/// FIFO or a device since it was located.
pub(super) fn hash(c: &Candidate) -> Hashed {
    let path = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_PATH | libc::O_NOFOLLOW)
        .open(&c.canon)
        .map_err(IndexError::Open)?;
    let meta = fd_meta(path.as_raw_fd()).map_err(IndexError::StatOpened)?;
    if !meta.is_regular() || meta.size == 0 || meta.size > MAX_HASHED {
        return Err(IndexError::NotRegular);
    }
    let mut f = std::fs::File::open(format!("/proc/self/fd/{}", path.as_raw_fd()))
        .map_err(IndexError::Open)?;
    let digest = sha256_hex(&mut f).map_err(IndexError::Read)?;
    Ok((meta.key(), digest))
}

/// Hashes `cands` on up to [`START_THREADS`] threads (this one included),
/// largest first; returns the results in `cands`' order and how many
/// threads hashed.
pub(super) fn hash_all(cands: &[Candidate]) -> (Vec<Hashed>, usize) {
    let mut order: Vec<usize> = (0..cands.len()).collect();
    order.sort_by_key(|&i| std::cmp::Reverse(cands[i].size()));
    let results: Vec<Mutex<Option<Hashed>>> = cands.iter().map(|_| Mutex::new(None)).collect();
    let next = AtomicUsize::new(0);
    let work = || loop {
        let n = next.fetch_add(1, Ordering::Relaxed);
        let Some(&i) = order.get(n) else {
            break;
        };
        *results[i].lock().unwrap_or_else(PoisonError::into_inner) = Some(hash(&cands[i]));
    };
    let want = std::thread::available_parallelism()
        .map_or(1, std::num::NonZeroUsize::get)
        .min(START_THREADS)
        .min(cands.len())
        .max(1);
    let mut threads = 1;
    std::thread::scope(|s| {
        for n in 1..want {
            match std::thread::Builder::new()
                .name(format!("agentsh-index-{n}"))
                .spawn_scoped(s, work)
            {
                Ok(_) => threads += 1,
                Err(e) => {
                    tracing::debug!("identity index: hashing on fewer threads: {e}");
                    break;
                }
            }
        }
        work();
    });
    let results = results
        .into_iter()
        .map(|m| {
            m.into_inner()
                .unwrap_or_else(PoisonError::into_inner)
                .unwrap_or(Err(IndexError::NotHashed))
        })
        .collect();
    (results, threads)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sha256_of_known_inputs() {
        assert_eq!(
            sha256_hex(&mut &b""[..]).unwrap(),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
        assert_eq!(
            sha256_hex(&mut &b"abc"[..]).unwrap(),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }

    #[test]
    fn named_paths_put_bare_names_on_the_system_path_and_skip_globs() {
        let (p, digests) = named_paths(&[
            "curl".into(),
            "/opt/x/bin/tool".into(),
            "nc.*".into(),
            "/usr/**".into(),
            "sha256:00".into(),
            "curl".into(),
        ]);
        assert!(digests);
        assert_eq!(p.len(), SYSTEM_PATH.len() + 1);
        assert_eq!(p[0], "/usr/local/sbin/curl");
        assert_eq!(p.last().map(String::as_str), Some("/opt/x/bin/tool"));
    }
}
