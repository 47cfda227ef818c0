//! The identity index itself: the digests of the programs the policy names,
//! the cache of executed files' digests, and the watch that indexes
//! programs installed later (the folder's doc says how and why).
//!
//! Failure modes: see the folder's doc; a file that cannot be read or
//! hashed is not recognised, and the reason is logged.

use super::error::IndexError;
use super::files::{hash, hash_all, locate, named_paths, sha256_hex, split, Candidate, MAX_HASHED};
use crate::tracee::{FileKey, FileMeta};
use std::collections::{HashMap, HashSet, VecDeque};
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::{Mutex, MutexGuard, PoisonError, RwLock};

/// How many (file key → digest) entries the cache keeps.
const CACHE_ENTRIES: usize = 4096;
/// How many programs (distinct files) the index holds.
pub const MAX_PROGRAMS: usize = 4096;
/// How many bytes start-up hashes before the server is ready.
pub const START_BYTES: u64 = 2 << 30;
/// How many directories are watched for programs that appear later.
pub const MAX_WATCHES: usize = 256;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The programs indexed so far.
#[derive(Default)]
struct Table {
    /// digest → the programs (paths) with that content.
    by_digest: HashMap<String, Vec<String>>,
    /// Sizes of the indexed programs (sorted): a file of another size is no copy.
    sizes: Vec<u64>,
    /// canonical path → the key and digest it was hashed at, and its names.
    files: HashMap<String, (FileKey, String, Vec<String>)>,
}

impl Table {
    /// Records `canon` (named `names`) with `digest`. An earlier digest of
    /// the same file stays: copies of its old content are still that program.
    ///
    /// # Errors
    /// The index is full ([`MAX_PROGRAMS`]).
    fn insert(
        &mut self,
        canon: &str,
        names: &[String],
        key: FileKey,
        digest: &str,
    ) -> Result<(), IndexError> {
        if !self.files.contains_key(canon) && self.files.len() >= MAX_PROGRAMS {
            return Err(IndexError::Full {
                path: canon.to_string(),
                max: MAX_PROGRAMS,
            });
        }
        let entry = self
            .files
            .entry(canon.to_string())
            .or_insert_with(|| (key, digest.to_string(), Vec::new()));
        entry.0 = key;
        entry.1 = digest.to_string();
        for n in names {
            if !entry.2.contains(n) {
                entry.2.push(n.clone());
            }
        }
        let listed = self.by_digest.entry(digest.to_string()).or_default();
        for n in &entry.2 {
            if !listed.contains(n) {
                listed.push(n.clone());
            }
        }
        if let Err(at) = self.sizes.binary_search(&key.2) {
            self.sizes.insert(at, key.2);
        }
        Ok(())
    }

    /// `canon` is indexed at `key` under every one of `names`.
    fn has(&self, canon: &str, key: FileKey, names: &[String]) -> bool {
        self.files
            .get(canon)
            .is_some_and(|(k, _, n)| *k == key && names.iter().all(|x| n.contains(x)))
    }

    /// Named paths indexed.
    fn programs(&self) -> usize {
        self.files.values().map(|(_, _, n)| n.len()).sum()
    }
}

/// What is watched in each directory: a file created there (a symlink or a
/// hard link is complete when created), moved in (`dpkg`, `install`, `mv`),
/// or closed after writing (`cp`); and the directory itself going away.
const WATCHED: u32 = libc::IN_CREATE
    | libc::IN_MOVED_TO
    | libc::IN_CLOSE_WRITE
    | libc::IN_DELETE_SELF
    | libc::IN_MOVE_SELF
    | libc::IN_ONLYDIR;

/// The watched directories and what their files stand for.
struct Watching {
    /// watch descriptor → canonical directory.
    dirs: HashMap<i32, String>,
    /// canonical directories watched.
    watched: HashSet<String>,
    /// canonical directory → file name → the paths the rules name it by.
    names: HashMap<String, HashMap<String, Vec<String>>>,
    /// Said once that [`MAX_WATCHES`] was reached.
    full_said: bool,
}

impl Watching {
    /// Watches `dir` (canonical) unless it is already; logs what fails.
    fn add(&mut self, inotify: &crate::inotify::Inotify, dir: &str, why: &str) {
        if self.watched.contains(dir) {
            return;
        }
        if self.watched.len() >= MAX_WATCHES {
            if !self.full_said {
                tracing::warn!(
                    "identity index: {MAX_WATCHES} directories watched already; {dir} ({why}) is \
                     not watched: a program installed there later is indexed only when the \
                     server restarts"
                );
                self.full_said = true;
            }
            return;
        }
        match inotify.add(dir, WATCHED) {
            Ok(wd) => {
                self.dirs.insert(wd, dir.to_string());
                self.watched.insert(dir.to_string());
            }
            Err(e) => tracing::warn!(
                "identity index: cannot watch {dir} ({why}): {e}; a program installed there \
                 later is indexed only when the server restarts"
            ),
        }
    }
}

/// What is queued: programs seen but not hashed yet, and the watches.
#[derive(Default)]
struct Queue {
    pending: Vec<Candidate>,
    /// `None`: nothing is watched (none asked, or the watch failed).
    watching: Option<Watching>,
}

impl Queue {
    /// Adds `c`, merging it with a queued entry of the same file.
    fn push(&mut self, c: Candidate) {
        match self.pending.iter_mut().find(|p| p.canon == c.canon) {
            Some(p) => {
                p.key = c.key;
                for n in c.names {
                    if !p.names.contains(&n) {
                        p.names.push(n);
                    }
                }
            }
            None => self.pending.push(c),
        }
    }
}

/// What start-up did, for the log.
#[derive(Debug, Clone, Default)]
pub struct Built {
    /// Programs (named paths) indexed.
    pub programs: usize,
    /// Distinct files hashed.
    pub files: usize,
    pub bytes: u64,
    pub threads: usize,
    /// Directories watched for programs installed later.
    pub watched: usize,
    /// Files left for the watcher thread ([`START_BYTES`] reached).
    pub deferred: usize,
}

/// Every program the policy names, by content.
pub struct IdentityIndex {
    /// Every path the rules name (looked at again after an overflow).
    named: Vec<String>,
    /// The policy names digests (`sha256:…`): every executed file is hashed.
    digests_named: bool,
    table: RwLock<Table>,
    /// Lock order: `queue` before `table`, never the other way.
    queue: Mutex<Queue>,
    inotify: Option<crate::inotify::Inotify>,
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
    /// every rule's `commands:` entries), on up to four threads; with `watch`, first watches the directories they are looked
    /// for in (so nothing installed meanwhile is missed). What is not
    /// hashed within [`START_BYTES`] is queued for
    /// [`IdentityIndex::watch_in_background`].
    pub fn start(commands: &[String], watch: bool) -> (IdentityIndex, Built) {
        let (named, digests_named) = named_paths(commands);
        let mut index = IdentityIndex {
            named,
            digests_named,
            table: RwLock::new(Table::default()),
            queue: Mutex::new(Queue::default()),
            inotify: None,
            cache: Mutex::new((HashMap::new(), VecDeque::new())),
        };
        if watch && !index.named.is_empty() {
            index.watch_directories();
        }
        let found = index.locate_all();
        let mut built = Built::default();
        let (mut now, mut later) = (Vec::new(), Vec::new());
        for c in found {
            if built.bytes + c.size() <= START_BYTES {
                built.bytes += c.size();
                now.push(c);
            } else {
                later.push(c);
            }
        }
        if !later.is_empty() {
            tracing::warn!(
                files = later.len(),
                "identity index: start-up hashes at most {} MiB; these are hashed after the \
                 server is ready (an exec of a file of one's size hashes it first): {}",
                START_BYTES >> 20,
                later
                    .iter()
                    .map(|c| c.canon.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            );
        }
        built.deferred = later.len();
        let (results, threads) = hash_all(&now);
        built.threads = threads;
        {
            let mut t = index.table.write().unwrap_or_else(PoisonError::into_inner);
            for (c, r) in now.iter().zip(results) {
                let outcome = r.and_then(|(key, d)| t.insert(&c.canon, &c.names, key, &d));
                match outcome {
                    Ok(()) => built.files += 1,
                    Err(e) => tracing::warn!(
                        "identity index: {} ({}) is not indexed: {e}",
                        c.canon,
                        c.names.join(", ")
                    ),
                }
            }
            built.programs = t.programs();
        }
        let q = index
            .queue
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner);
        for c in later {
            q.push(c);
        }
        built.watched = q.watching.as_ref().map_or(0, |w| w.watched.len());
        (index, built)
    }

    /// Sets up the inotify instance and watches the directories of every
    /// named path (each once, by canonical path). Logs what cannot be watched.
    fn watch_directories(&mut self) {
        let inotify = match crate::inotify::Inotify::new() {
            Ok(i) => i,
            Err(e) => {
                tracing::warn!(
                    "identity index: cannot watch for programs installed later (inotify: {e}); \
                     a program the policy names that is installed after the server started is \
                     indexed only when it restarts"
                );
                return;
            }
        };
        let mut w = Watching {
            dirs: HashMap::new(),
            watched: HashSet::new(),
            names: HashMap::new(),
            full_said: false,
        };
        let mut canon_of: HashMap<&str, Option<String>> = HashMap::new();
        for p in &self.named {
            let Some((dir, name)) = split(p) else {
                continue;
            };
            let canon = canon_of
                .entry(dir)
                .or_insert_with(|| match std::fs::canonicalize(dir) {
                    Ok(c) => Some(c.to_string_lossy().into_owned()),
                    // A directory that does not exist (where another
                    // distribution puts its loader) is no news at every
                    // start.
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                        tracing::debug!(
                            "identity index: {dir} is not watched: it does not exist (a program \
                             installed there later is indexed when the server restarts)"
                        );
                        None
                    }
                    Err(e) => {
                        tracing::info!(
                            "identity index: {dir} is not watched ({e}): a program installed \
                             there later is indexed only when the server restarts"
                        );
                        None
                    }
                });
            let Some(canon) = canon.clone() else {
                continue;
            };
            w.add(
                &inotify,
                &canon,
                "where the policy's programs are looked for",
            );
            let names = w
                .names
                .entry(canon)
                .or_default()
                .entry(name.to_string())
                .or_default();
            if !names.contains(p) {
                names.push(p.clone());
            }
        }
        let q = self.queue.get_mut().unwrap_or_else(PoisonError::into_inner);
        q.watching = Some(w);
        self.inotify = Some(inotify);
    }

    /// Every named program there is now, one entry per file.
    fn locate_all(&self) -> Vec<Candidate> {
        let mut found: Vec<Candidate> = Vec::new();
        let mut at: HashMap<String, usize> = HashMap::new();
        for p in &self.named {
            match locate(p) {
                Ok(Some((canon, key))) => match at.get(&canon) {
                    Some(&i) => found[i].names.push(p.clone()),
                    None => {
                        at.insert(canon.clone(), found.len());
                        found.push(Candidate {
                            canon,
                            names: vec![p.clone()],
                            key,
                        });
                    }
                },
                Ok(None) => {}
                Err(e) => tracing::warn!("identity index: {p} is not indexed: {e}"),
            }
        }
        found
    }

    /// Whether anything is left for [`IdentityIndex::watch_in_background`].
    pub fn has_background_work(&self) -> bool {
        let q = lock(&self.queue);
        q.watching.is_some() || !q.pending.is_empty()
    }

    /// Starts the watcher thread: it hashes what start-up left and every
    /// named program that appears later, for the life of the server.
    ///
    /// # Errors
    /// The thread cannot be started (then nothing that appears later is
    /// indexed; the caller logs it).
    pub fn watch_in_background(&'static self) -> Result<(), IndexError> {
        std::thread::Builder::new()
            .name("agentsh-index-watch".into())
            .spawn(move || self.watch_forever())
            .map(drop)
            .map_err(IndexError::Watcher)
    }

    fn watch_forever(&self) {
        loop {
            loop {
                let next = {
                    let mut q = lock(&self.queue);
                    self.drain(&mut q);
                    q.pending.first().cloned()
                };
                match next {
                    Some(c) => self.index(&c),
                    None => break,
                }
            }
            let (Some(inotify), true) = (&self.inotify, lock(&self.queue).watching.is_some())
            else {
                return;
            };
            if let Err(e) = inotify.wait() {
                tracing::warn!(
                    "identity index: stopped watching for programs installed later (poll: {e}); \
                     they are indexed only when the server restarts"
                );
                lock(&self.queue).watching = None;
                return;
            }
        }
    }

    /// Reads the events queued now (never waits) and queues the programs
    /// they name; wakes the watcher thread when it queued any (it may be
    /// another thread than the watcher that read them).
    fn drain(&self, q: &mut Queue) {
        let (Some(inotify), Some(_)) = (&self.inotify, &q.watching) else {
            return;
        };
        let before = q.pending.len();
        let events = match inotify.read() {
            Ok(e) => e,
            Err(e) => {
                tracing::warn!(
                    "identity index: stopped watching for programs installed later (read: {e}); \
                     they are indexed only when the server restarts"
                );
                q.watching = None;
                return;
            }
        };
        if events.is_empty() {
            return;
        }
        let mut rescan = false;
        let mut seen: Vec<(String, Vec<String>)> = Vec::new();
        {
            let t = self.table.read().unwrap_or_else(PoisonError::into_inner);
            let Some(w) = q.watching.as_mut() else {
                return;
            };
            for ev in events {
                if ev.overflowed() {
                    tracing::warn!(
                        "identity index: the inotify queue overflowed; every program the \
                         policy names is looked at again"
                    );
                    rescan = true;
                    continue;
                }
                if let Some(found) = named_by(w, &t, &ev) {
                    seen.push(found);
                }
            }
        }
        if rescan {
            seen.extend(self.named.iter().map(|p| (p.clone(), vec![p.clone()])));
        }
        for (path, names) in seen {
            self.queue_path(q, &path, names);
        }
        if q.pending.len() != before {
            inotify.kick();
        }
    }

    /// Queues the program at `path` (named `names`) unless it is indexed as
    /// it is; watches the directory it resolves to (a named symlink's
    /// target can be replaced there).
    fn queue_path(&self, q: &mut Queue, path: &str, names: Vec<String>) {
        let (canon, key) = match locate(path) {
            Ok(Some(found)) => found,
            Ok(None) => {
                tracing::debug!(
                    "identity index: {path} holds no program to index (gone, not a regular \
                     file, empty, or a multi-call binary)"
                );
                return;
            }
            Err(e) => {
                tracing::warn!("identity index: {path} is not indexed: {e}");
                return;
            }
        };
        if let (Some(inotify), Some(w)) = (&self.inotify, q.watching.as_mut()) {
            if let Some((dir, _)) = split(&canon) {
                w.add(inotify, dir, &format!("where {path} leads"));
            }
        }
        {
            let mut t = self.table.write().unwrap_or_else(PoisonError::into_inner);
            if let Some((k, d, _)) = t.files.get(&canon).cloned() {
                if k == key {
                    if !t.has(&canon, key, &names) {
                        // Another name for a file indexed as it is.
                        if let Err(e) = t.insert(&canon, &names, key, &d) {
                            tracing::warn!("identity index: {e}");
                        }
                    }
                    return;
                }
            }
        }
        q.push(Candidate { canon, names, key });
    }

    /// Hashes `c` and records it; unqueues it.
    fn index(&self, c: &Candidate) {
        let r = hash(c).and_then(|(key, d)| {
            self.table
                .write()
                .unwrap_or_else(PoisonError::into_inner)
                .insert(&c.canon, &c.names, key, &d)
        });
        match r {
            Ok(()) => tracing::info!(
                "identity index: {} ({}) indexed after the server started: copies of it are \
                 judged as it",
                c.canon,
                c.names.join(", ")
            ),
            Err(e) => tracing::warn!(
                "identity index: {} ({}) is not indexed: {e}",
                c.canon,
                c.names.join(", ")
            ),
        }
        lock(&self.queue)
            .pending
            .retain(|p| !(p.canon == c.canon && p.key == c.key));
    }

    /// Brings the index up to every event queued before this exec; hashes
    /// a queued program whose size is `size` (it could be what runs).
    fn catch_up(&self, size: u64) {
        let due: Vec<Candidate> = {
            let mut q = lock(&self.queue);
            self.drain(&mut q);
            q.pending
                .iter()
                .filter(|c| c.size() == size)
                .cloned()
                .collect()
        };
        for c in &due {
            self.index(c);
        }
    }

    /// How many programs (named paths) are indexed.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.table
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .programs()
    }

    /// What the file open at `fd` (an `O_PATH` fd is fine) is; `meta` is
    /// its `fstat`, taken when it was opened.
    pub fn recognise(&self, fd: &OwnedFd, meta: &FileMeta) -> Recognised {
        let size = meta.size;
        if !meta.is_regular() || size > MAX_HASHED {
            return Recognised::default();
        }
        self.catch_up(size);
        if !self.digests_named
            && self
                .table
                .read()
                .unwrap_or_else(PoisonError::into_inner)
                .sizes
                .binary_search(&size)
                .is_err()
        {
            return Recognised::default();
        }
        let path = format!("/proc/self/fd/{}", fd.as_raw_fd());
        let key = meta.key();
        let cached = lock(&self.cache).0.get(&key).cloned();
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
                let mut c = lock(&self.cache);
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
        let mut copy_of = self
            .table
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .by_digest
            .get(&digest)
            .cloned()
            .unwrap_or_default();
        if self.digests_named {
            copy_of.push(format!("sha256:{digest}"));
        }
        Recognised {
            sha256: Some(digest),
            copy_of,
        }
    }
}

/// The program an inotify event names, with the names the policy gives it;
/// `None` when it names none (or says a watch is gone, which is noted in
/// `w` and the log).
fn named_by(
    w: &mut Watching,
    t: &Table,
    ev: &crate::inotify::Event,
) -> Option<(String, Vec<String>)> {
    if ev.name.is_empty() {
        if ev.watch_gone() {
            if let Some(dir) = w.dirs.remove(&ev.wd) {
                w.watched.remove(&dir);
                tracing::warn!(
                    "identity index: no longer watching {dir} (removed, moved or \
                     unmounted): a program installed there later is indexed only \
                     when the server restarts"
                );
            }
        }
        return None;
    }
    let dir = w.dirs.get(&ev.wd)?;
    let path = if dir == "/" {
        format!("/{}", ev.name)
    } else {
        format!("{dir}/{}", ev.name)
    };
    let mut names = w
        .names
        .get(dir)
        .and_then(|m| m.get(&ev.name))
        .cloned()
        .unwrap_or_default();
    if let Some((_, _, known)) = t.files.get(&path) {
        for n in known {
            if !names.contains(n) {
                names.push(n.clone());
            }
        }
    }
    // A file just created empty (`cp`, `open(O_CREAT)`) is left
    // alone (`locate` skips empty files): its close comes as an
    // event of its own. One created whole (a hard link,
    // `O_TMPFILE` linked in) is taken now.
    if names.is_empty() {
        return None;
    }
    Some((path, names))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tracee::fd_meta;

    fn scratch(tag: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("agentsh-ident-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    fn fd(p: &std::path::Path) -> OwnedFd {
        std::fs::File::open(p).unwrap().into()
    }

    fn meta(f: &OwnedFd) -> FileMeta {
        fd_meta(f.as_raw_fd()).unwrap()
    }

    #[test]
    fn a_copy_is_recognised_and_a_stranger_is_not() {
        let dir = scratch("copy");
        let orig = dir.join("orig");
        let copy = dir.join("copy");
        let other = dir.join("other");
        std::fs::write(&orig, b"#!/bin/true\nprogram bytes").unwrap();
        std::fs::write(&copy, b"#!/bin/true\nprogram bytes").unwrap();
        std::fs::write(&other, b"#!/bin/true\nprogram bytez").unwrap();
        let (idx, built) =
            IdentityIndex::start(&[orig.display().to_string(), "curl*".into()], false);
        assert_eq!((idx.len(), built.files), (1, 1));
        let copy = fd(&copy);
        let r = idx.recognise(&copy, &meta(&copy));
        assert_eq!(r.copy_of, vec![orig.display().to_string()]);
        // Same size, other content: hashed, not recognised.
        let other_fd = fd(&other);
        let r = idx.recognise(&other_fd, &meta(&other_fd));
        assert!(r.copy_of.is_empty() && r.sha256.is_some());
        // A digest rule recognises content wherever it is.
        let d = sha256_hex(&mut std::fs::File::open(&other).unwrap()).unwrap();
        let (idx, _) = IdentityIndex::start(&[format!("sha256:{d}")], false);
        let r = idx.recognise(&other_fd, &meta(&other_fd));
        assert_eq!(r.copy_of, vec![format!("sha256:{d}")]);
        std::fs::remove_dir_all(&dir).ok();
    }

    #[test]
    fn one_file_under_two_names_is_hashed_once_and_known_by_both() {
        let dir = scratch("canon");
        std::fs::create_dir_all(dir.join("real")).unwrap();
        std::os::unix::fs::symlink("real", dir.join("alias")).unwrap();
        std::fs::write(dir.join("real/tool"), b"tool bytes").unwrap();
        let names = [
            dir.join("real/tool").display().to_string(),
            dir.join("alias/tool").display().to_string(),
        ];
        let (idx, built) = IdentityIndex::start(&names, false);
        assert_eq!(built.files, 1, "{built:?}");
        let copy = dir.join("copy");
        std::fs::write(&copy, b"tool bytes").unwrap();
        let c = fd(&copy);
        let mut got = idx.recognise(&c, &meta(&c)).copy_of;
        got.sort();
        let mut want = names.to_vec();
        want.sort();
        assert_eq!(got, want);
        std::fs::remove_dir_all(&dir).ok();
    }

    /// An empty file is no program; a multi-call binary named by an
    /// applet's link (`wget` -> busybox) is not indexed as that applet (every
    /// applet would be judged as `wget`), but under its own name it is: a
    /// copy is then judged as busybox, which picks its applet by argv[0].
    #[test]
    fn empty_files_and_multi_call_applet_links_are_not_indexed() {
        let dir = scratch("skip");
        std::fs::write(dir.join("empty"), b"").unwrap();
        std::fs::write(dir.join("busybox"), b"applets").unwrap();
        std::os::unix::fs::symlink(dir.join("busybox"), dir.join("wget")).unwrap();
        let (idx, _) = IdentityIndex::start(
            &[
                dir.join("empty").display().to_string(),
                dir.join("wget").display().to_string(),
            ],
            false,
        );
        assert_eq!(idx.len(), 0);
        let own = dir.join("busybox").display().to_string();
        let (idx, _) = IdentityIndex::start(
            &[dir.join("wget").display().to_string(), own.clone()],
            false,
        );
        assert_eq!(idx.len(), 1);
        let copy = dir.join("bb");
        std::fs::write(&copy, b"applets").unwrap();
        let c = fd(&copy);
        assert_eq!(idx.recognise(&c, &meta(&c)).copy_of, vec![own]);
        std::fs::remove_dir_all(&dir).ok();
    }

    /// Installed after start (written, moved in, linked): known to the very
    /// next exec, without the watcher thread (the exec reads the events).
    #[test]
    fn a_program_that_appears_later_is_known_to_the_next_exec() {
        let dir = scratch("later");
        let bin = dir.join("bin");
        std::fs::create_dir_all(&bin).unwrap();
        let named = |n: &str| bin.join(n).display().to_string();
        let names = ["written", "moved", "linked", "hardlinked"].map(named);
        let (idx, built) = IdentityIndex::start(&names, true);
        assert_eq!((idx.len(), built.watched), (0, 1), "{built:?}");
        let cases: [(&str, &[u8]); 4] = [
            ("written", b"written program"),
            ("moved", b"moved-in program"),
            ("linked", b"symlinked program"),
            ("hardlinked", b"hard-linked program"),
        ];
        // written in place (cp), renamed into place (dpkg), a symlink to a
        // file in another directory (update-alternatives), a hard link
        // (created whole: no write follows).
        std::fs::write(bin.join("written"), cases[0].1).unwrap();
        std::fs::write(dir.join("moved.tmp"), cases[1].1).unwrap();
        std::fs::rename(dir.join("moved.tmp"), bin.join("moved")).unwrap();
        std::fs::create_dir_all(dir.join("opt")).unwrap();
        std::fs::write(dir.join("opt/linked-1.0"), cases[2].1).unwrap();
        std::os::unix::fs::symlink(dir.join("opt/linked-1.0"), bin.join("linked")).unwrap();
        std::fs::write(dir.join("hard.tmp"), cases[3].1).unwrap();
        std::fs::hard_link(dir.join("hard.tmp"), bin.join("hardlinked")).unwrap();
        for (name, content) in cases {
            let copy = dir.join(format!("copy-of-{name}"));
            std::fs::write(&copy, content).unwrap();
            let c = fd(&copy);
            assert_eq!(
                idx.recognise(&c, &meta(&c)).copy_of,
                vec![named(name)],
                "{name}"
            );
        }
        // The symlink's target is watched now: a new version of it is
        // indexed as the named program too.
        std::fs::write(dir.join("opt/linked-1.0.new"), b"symlinked program v2").unwrap();
        std::fs::rename(dir.join("opt/linked-1.0.new"), dir.join("opt/linked-1.0")).unwrap();
        let copy = dir.join("copy-of-linked-v2");
        std::fs::write(&copy, b"symlinked program v2").unwrap();
        let c = fd(&copy);
        assert_eq!(idx.recognise(&c, &meta(&c)).copy_of, vec![named("linked")]);
        // A file no rule names is not indexed.
        std::fs::write(bin.join("unnamed"), b"unnamed program").unwrap();
        let copy = dir.join("copy-of-unnamed");
        std::fs::write(&copy, b"unnamed program").unwrap();
        let c = fd(&copy);
        assert!(idx.recognise(&c, &meta(&c)).copy_of.is_empty());
        assert_eq!(idx.len(), 4);
        std::fs::remove_dir_all(&dir).ok();
    }

    /// The watcher thread indexes what appears with no exec to ask for it,
    /// and what an exec's read of the events queued but did not hash.
    #[test]
    fn the_watcher_thread_indexes_what_appears() {
        let dir = scratch("watcher");
        let named = dir.join("tool").display().to_string();
        let (idx, _) = IdentityIndex::start(std::slice::from_ref(&named), true);
        let idx: &'static IdentityIndex = Box::leak(Box::new(idx));
        std::fs::write(dir.join("other-size"), b"x").unwrap();
        std::fs::write(dir.join("tool"), b"tool appears later").unwrap();
        // An exec of a file of another size reads the event, hashes nothing.
        let o = fd(&dir.join("other-size"));
        assert!(idx.recognise(&o, &meta(&o)).copy_of.is_empty());
        assert_eq!(idx.len(), 0);
        idx.watch_in_background().unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while idx.len() == 0 {
            assert!(std::time::Instant::now() < deadline, "not indexed in 30 s");
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        std::fs::write(dir.join("tool"), b"tool, version two").unwrap();
        while idx.table.read().unwrap().by_digest.len() < 2 {
            assert!(
                std::time::Instant::now() < deadline,
                "v2 not indexed in 30 s"
            );
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        std::fs::remove_dir_all(&dir).ok();
    }
}
