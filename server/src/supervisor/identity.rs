//! Programs recognised by what they are: a byte-identical copy, hardlink or
//! rename of a program a command rule names is judged as that program.
//!
//! At the first tree, every program a command rule names is located (a bare
//! name on the usual system `PATH` directories, an absolute path as is; globs
//! are not expanded) and hashed (SHA-256): the index maps each digest to the
//! programs with that content. Rules may also name content directly with a
//! `sha256:<hex>` entry in `commands`. At an exec, the file is looked up by a
//! cheap key (device, inode, size, mtime, ctime) in a bounded cache, and
//! hashed only on a miss, and only when its size is the size of an indexed
//! program or the policy names digests. A match adds the original's path and
//! `sha256:<hex>` to what the policy judges (`ExecFacts::copy_of`), the
//! stricter verdict standing.
//!
//! What this does not catch: a program changed by one byte (a different
//! digest). That is bounded by Landlock, which decides where a tree may
//! execute files from and write them. Multi-call binaries (`busybox`,
//! `toybox`, or a file with more than 32 hard links, as busybox installs
//! itself) are not indexed: every applet has the same content, so a rule on
//! one applet would catch them all; the wrapper logic judges their applets.
//!
//! Failure modes: a file that cannot be read or hashed is not recognised (the
//! exec is judged by name, as before) and the reason is logged; a program the
//! policy names that does not exist here is simply not in the index.

use crate::tracee::FileMeta;
use sha2::{Digest, Sha256};
use std::collections::{HashMap, VecDeque};
use std::io::Read;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::MetadataExt;
use std::sync::Mutex;

/// Where a bare program name is looked for, in order.
pub const SYSTEM_PATH: &[&str] = &[
    "/usr/local/sbin",
    "/usr/local/bin",
    "/usr/sbin",
    "/usr/bin",
    "/sbin",
    "/bin",
];

/// How many (file key → digest) entries the cache keeps.
const CACHE_ENTRIES: usize = 4096;
/// Files larger than this are not hashed at exec (a multi-gigabyte binary
/// would stall the tree); documented.
const MAX_HASHED: u64 = 512 << 20;

/// The cheap key of a file: it changes whenever the content may have.
type FileKey = (u64, u64, u64, i64, i64, i64, i64);

/// A binary whose applets share one file: indexing it under one applet's
/// name would judge every applet as that one.
fn is_multi_call(canon: &str, m: &std::fs::Metadata) -> bool {
    let base = canon.rsplit('/').next().unwrap_or(canon);
    base.starts_with("busybox") || base.starts_with("toybox") || m.nlink() > 32
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
    Ok(h.finalize().iter().map(|b| format!("{b:02x}")).collect())
}

/// Every program the policy names, by content.
pub struct IdentityIndex {
    /// digest → the programs (paths) with that content.
    by_digest: HashMap<String, Vec<String>>,
    /// Sizes of the indexed programs: a file of another size is no copy.
    sizes: Vec<u64>,
    /// The policy names digests (`sha256:…`): every executed file is hashed.
    digests_named: bool,
    cache: Mutex<(HashMap<FileKey, String>, VecDeque<FileKey>)>,
}

/// What the index says about one file.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Recognised {
    /// The file's SHA-256, when it was computed.
    pub sha256: Option<String>,
    /// The programs it is a copy of, and `sha256:<hex>`, for the policy.
    pub copy_of: Vec<String>,
}

impl IdentityIndex {
    /// Locates and hashes every program named in `commands` (the text of
    /// every rule's `commands:` entries).
    pub fn build(commands: &[String]) -> IdentityIndex {
        let mut by_digest: HashMap<String, Vec<String>> = HashMap::new();
        let mut sizes = Vec::new();
        let mut digests_named = false;
        let mut seen = std::collections::BTreeSet::new();
        for c in commands {
            if c.starts_with("sha256:") {
                digests_named = true;
                continue;
            }
            if c.contains(['*', '?', '[']) {
                continue; // globs are not expanded
            }
            let candidates: Vec<String> = if c.starts_with('/') {
                vec![c.clone()]
            } else {
                SYSTEM_PATH.iter().map(|d| format!("{d}/{c}")).collect()
            };
            for p in candidates {
                let Ok(canon) = std::fs::canonicalize(&p) else {
                    continue;
                };
                let canon = canon.to_string_lossy().into_owned();
                if !seen.insert((p.clone(), canon.clone())) {
                    continue;
                }
                let Ok(mut f) = std::fs::File::open(&canon) else {
                    continue;
                };
                let Ok(m) = f.metadata() else { continue };
                if !m.is_file() || is_multi_call(&canon, &m) {
                    continue;
                }
                match sha256_hex(&mut f) {
                    Ok(d) => {
                        let names = by_digest.entry(d).or_default();
                        if !names.contains(&p) {
                            names.push(p);
                        }
                        sizes.push(m.size());
                    }
                    Err(e) => tracing::warn!("cannot hash {canon} for the identity index: {e}"),
                }
            }
        }
        sizes.sort_unstable();
        sizes.dedup();
        IdentityIndex {
            by_digest,
            sizes,
            digests_named,
            cache: Mutex::new((HashMap::new(), VecDeque::new())),
        }
    }

    /// How many programs are indexed.
    pub fn len(&self) -> usize {
        self.by_digest.values().map(Vec::len).sum()
    }

    /// What the file open at `fd` (an `O_PATH` fd is fine) is; `meta` is
    /// its `fstat`, taken when it was opened.
    pub fn recognise(&self, fd: &OwnedFd, meta: &FileMeta) -> Recognised {
        let size = meta.size;
        if !meta.is_regular() || size > MAX_HASHED {
            return Recognised::default();
        }
        if !self.digests_named && self.sizes.binary_search(&size).is_err() {
            return Recognised::default();
        }
        let path = format!("/proc/self/fd/{}", fd.as_raw_fd());
        let key: FileKey = (
            meta.dev,
            meta.ino,
            size,
            meta.mtime.0,
            meta.mtime.1,
            meta.ctime.0,
            meta.ctime.1,
        );
        let cached = {
            let c = self
                .cache
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            c.0.get(&key).cloned()
        };
        let digest = match cached {
            Some(d) => d,
            None => {
                let d = match std::fs::File::open(&path).and_then(|mut f| sha256_hex(&mut f)) {
                    Ok(d) => d,
                    Err(e) => {
                        tracing::debug!("cannot hash an executed file: {e}");
                        return Recognised::default();
                    }
                };
                let mut c = self
                    .cache
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                if c.1.len() >= CACHE_ENTRIES {
                    if let Some(old) = c.1.pop_front() {
                        c.0.remove(&old);
                    }
                }
                c.0.insert(key, d.clone());
                c.1.push_back(key);
                d
            }
        };
        let mut copy_of = self.by_digest.get(&digest).cloned().unwrap_or_default();
        if self.digests_named {
            copy_of.push(format!("sha256:{digest}"));
        }
        Recognised {
            sha256: Some(digest),
            copy_of,
        }
    }
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
    fn a_copy_is_recognised_and_a_stranger_is_not() {
        let dir = std::env::temp_dir().join(format!("agentsh-ident-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let orig = dir.join("orig");
        let copy = dir.join("copy");
        let other = dir.join("other");
        std::fs::write(&orig, b"#!/bin/true\nprogram bytes").unwrap();
        std::fs::write(&copy, b"#!/bin/true\nprogram bytes").unwrap();
        std::fs::write(&other, b"#!/bin/true\nprogram bytez").unwrap();
        let idx = IdentityIndex::build(&[orig.display().to_string(), "curl*".into()]);
        assert_eq!(idx.len(), 1);
        let fd = |p: &std::path::Path| -> OwnedFd { std::fs::File::open(p).unwrap().into() };
        let meta = |f: &OwnedFd| crate::tracee::fd_meta(f.as_raw_fd()).unwrap();
        let copy = fd(&copy);
        let r = idx.recognise(&copy, &meta(&copy));
        assert_eq!(r.copy_of, vec![orig.display().to_string()]);
        // Same size, other content: hashed, not recognised.
        let other_fd = fd(&other);
        let r = idx.recognise(&other_fd, &meta(&other_fd));
        assert!(r.copy_of.is_empty() && r.sha256.is_some());
        // A digest rule recognises content wherever it is.
        let d = sha256_hex(&mut std::fs::File::open(&other).unwrap()).unwrap();
        let idx = IdentityIndex::build(&[format!("sha256:{d}")]);
        let r = idx.recognise(&other_fd, &meta(&other_fd));
        assert_eq!(r.copy_of, vec![format!("sha256:{d}")]);
        std::fs::remove_dir_all(&dir).ok();
    }
}
