//! Privileged daemons' sockets a tree must not reach: the built-in list,
//! the policy's `daemon_sockets: {allow, deny}`, and their resolution into
//! the canonical paths unixwrap hides (see `agentsh_unixwrap::mask`).
//!
//! Threat: a tree, root included, that asks a root daemon to start a
//! program for it (docker, containerd, systemd, the system bus, snapd,
//! libvirt, agentsh itself): that program runs outside any tree. The
//! built-in list names the usual ones; `deny` adds more; `allow` grants one
//! a workload legitimately needs (a Docker-in-sandbox image).
//!
//! Paths are absolute; a component may be `*` (one directory level, e.g.
//! `/run/user/*/bus`). Resolution follows symlinks (`/var/run` is `/run`)
//! and keeps only what exists; an `allow` removes the entry it resolves to.
//! A directory entry hides everything in it (daemons that keep their
//! sockets in a directory of their own are listed by that directory, which
//! a restart of the daemon cannot unmask).
//!
//! Daemons nobody listed are found two ways: every socket beneath `/run`
//! (a walk), and every socket the kernel's table lists as listening
//! anywhere else whose holders are not all processes of a supervised tree
//! (`unix_listeners`).
//!
//! Failure modes: a policy path that is not absolute, has `..`, or a glob
//! other than a whole `*` component is refused when the policy loads.
//! Resolution cannot fail: a path that does not exist needs no hiding; a
//! directory that cannot be listed (the walk's, or what a `*` stands for)
//! is hidden whole.

use super::unix_listeners::{self, Holders, Listener};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};

/// Sockets (and socket directories) of daemons that run programs for
/// whoever reaches them, hidden from every tree unless the policy allows one.
pub const BUILT_IN: &[&str] = &[
    "/run/docker.sock",
    "/run/docker",
    "/run/containerd",
    "/run/k3s",
    "/run/crio",
    "/run/podman",
    "/run/buildkit",
    "/run/libvirt",
    "/run/lxd",
    "/var/snap/lxd/common/lxd/unix.socket",
    "/run/snapd.socket",
    "/run/snapd-snap.socket",
    "/run/systemd/private",
    "/run/systemd/io.systemd.Manager",
    "/run/dbus/system_bus_socket",
    "/run/user/*/bus",
    "/run/user/*/systemd/private",
    "/run/user/*/docker.sock",
    "/run/user/*/podman",
];

/// Where a daemon nobody listed keeps its socket: every path-named Unix
/// socket beneath these is hidden too (a root daemon's own directory under
/// `/run`), unless it is one of [`HARMLESS`] or the policy allows it.
pub const SOCKET_ROOTS: &[&str] = &["/run"];

/// How deep [`SOCKET_ROOTS`] are searched, and how many entries at most.
const WALK_DEPTH: usize = 6;
const WALK_ENTRIES: usize = 4096;

/// Sockets of daemons that start nothing for their peers and that ordinary
/// programs use: the journal (syslog(3), stdout of services), name-service
/// caches. Reachable unless the policy denies them.
pub const HARMLESS: &[&str] = &[
    "/run/systemd/journal/socket",
    "/run/systemd/journal/stdout",
    "/run/systemd/journal/dev-log",
    "/run/systemd/journal/syslog",
    "/run/nscd/socket",
    "/run/systemd/userdb/io.systemd.Multiplexer",
    "/run/systemd/userdb/io.systemd.DynamicUser",
    "/run/systemd/userdb/io.systemd.NameServiceSwitch",
];

/// The policy's `daemon_sockets` section.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DaemonSocketsDoc {
    /// Reachable from trees after all (removed from the hidden set).
    #[serde(default)]
    pub allow: Vec<String>,
    /// Hidden besides the built-in list.
    #[serde(default)]
    pub deny: Vec<String>,
}

/// Why a policy's `daemon_sockets` path is not acceptable.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SocketPathError {
    #[error("{0:?} is not an absolute path")]
    NotAbsolute(String),
    #[error("{path:?} has a {component:?} component")]
    DotComponent { path: String, component: String },
    #[error("{0:?}: only a whole `*` component is a glob here (e.g. /run/user/*/bus)")]
    PartialGlob(String),
}

/// Whether a policy path is acceptable.
///
/// # Errors
/// Not absolute, `..`/`.` components, or a glob that is not a whole `*`.
pub fn validate(p: &str) -> Result<(), SocketPathError> {
    if !p.starts_with('/') {
        return Err(SocketPathError::NotAbsolute(p.to_string()));
    }
    for c in p.split('/').filter(|c| !c.is_empty()) {
        if c == "." || c == ".." {
            return Err(SocketPathError::DotComponent {
                path: p.to_string(),
                component: c.to_string(),
            });
        }
        if c != "*" && c.contains(['*', '?', '[', ']']) {
            return Err(SocketPathError::PartialGlob(p.to_string()));
        }
    }
    Ok(())
}

/// The filesystem as resolution needs it (injected, so tests need no disk).
pub trait SocketFs {
    /// Canonical path if it exists.
    fn canonical(&self, path: &str) -> Option<String>;
    /// Names of a directory's entries; `None` if it cannot be listed.
    fn entries(&self, dir: &str) -> Option<Vec<String>>;
    /// What `path` is, not following a symlink there.
    fn kind(&self, path: &str) -> Kind;
    /// The sockets bound to a path in the kernel's table (see
    /// `unix_listeners`). None by default (a fake filesystem has no table).
    fn listeners(&self) -> Vec<Listener> {
        Vec::new()
    }
    /// Who holds each of `inodes` (default: nobody confined).
    fn holders(&self, inodes: &BTreeSet<u64>) -> BTreeMap<u64, Holders> {
        inodes.iter().map(|i| (*i, Holders::Unconfined)).collect()
    }
}

/// A directory entry's type, as the walk needs it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Socket,
    Directory,
    Other,
}

/// The server's own view.
pub struct HostSocketFs;

impl SocketFs for HostSocketFs {
    fn canonical(&self, path: &str) -> Option<String> {
        std::fs::canonicalize(path)
            .ok()
            .map(|p| p.to_string_lossy().into_owned())
    }

    fn entries(&self, dir: &str) -> Option<Vec<String>> {
        std::fs::read_dir(dir).ok().map(|rd| {
            rd.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
    }

    fn kind(&self, path: &str) -> Kind {
        use std::os::unix::fs::FileTypeExt;
        match std::fs::symlink_metadata(path).map(|m| m.file_type()) {
            Ok(t) if t.is_socket() => Kind::Socket,
            Ok(t) if t.is_dir() => Kind::Directory,
            _ => Kind::Other,
        }
    }

    fn listeners(&self) -> Vec<Listener> {
        unix_listeners::read()
    }

    fn holders(&self, inodes: &BTreeSet<u64>) -> BTreeMap<u64, Holders> {
        unix_listeners::holders(inodes)
    }
}

/// What the walk of [`SOCKET_ROOTS`] found: the sockets, and the
/// directories it did not walk (beyond [`WALK_DEPTH`], or left when
/// [`WALK_ENTRIES`] ran out), which are hidden whole: a tree that can
/// write beneath `/run` (root) could otherwise move a daemon's socket out
/// of the walk's reach, or flood the walk until it stops short.
struct Walked {
    sockets: Vec<String>,
    unwalked: Vec<String>,
    cut: bool,
}

/// Every Unix socket beneath [`SOCKET_ROOTS`] (not through symlinks, not
/// into what `skip` already hides), canonical; at most [`WALK_ENTRIES`]
/// sockets and directories looked at (other entries cost a `lstat` each
/// and count for nothing: a flood of files does not end the walk),
/// [`WALK_DEPTH`] deep. See [`Walked`].
fn sockets_under_roots(fs: &dyn SocketFs, skip: &BTreeSet<String>) -> Walked {
    let mut w = Walked {
        sockets: Vec::new(),
        unwalked: Vec::new(),
        cut: false,
    };
    let mut seen = 0usize;
    let mut stack: Vec<(String, usize)> = SOCKET_ROOTS
        .iter()
        .filter_map(|r| fs.canonical(r))
        .map(|r| (r, 0))
        .collect();
    while let Some((dir, depth)) = stack.pop() {
        // A directory that cannot be listed is hidden whole.
        let Some(entries) = fs.entries(&dir) else {
            w.unwalked.push(dir);
            continue;
        };
        for e in entries {
            let p = format!("{}/{e}", dir.trim_end_matches('/'));
            if skip.contains(&p) {
                continue;
            }
            let kind = fs.kind(&p);
            if kind == Kind::Other {
                continue;
            }
            seen += 1;
            if seen > WALK_ENTRIES {
                // The rest of this directory, and every one not yet
                // walked, hidden whole.
                w.cut = true;
                w.unwalked.push(dir);
                w.unwalked.extend(stack.into_iter().map(|(d, _)| d));
                return w;
            }
            match kind {
                Kind::Socket => w.sockets.push(p),
                Kind::Directory if depth + 1 < WALK_DEPTH => stack.push((p, depth + 1)),
                Kind::Directory => w.unwalked.push(p),
                Kind::Other => {}
            }
        }
    }
    w
}

/// The directory every shim looks for the `active` marker in: agentsh's
/// own, hidden as the run directory is.
fn fixed_marker_dir() -> Option<&'static str> {
    std::path::Path::new(agentsh_proto::active::FIXED_MARKER)
        .parent()?
        .to_str()
}

/// Every existing path a pattern names, canonical.
fn expand(pattern: &str, fs: &dyn SocketFs) -> Vec<String> {
    let mut prefixes = vec![String::new()];
    for c in pattern.split('/').filter(|c| !c.is_empty()) {
        let mut next = Vec::new();
        for p in prefixes {
            if c == "*" {
                let dir = if p.is_empty() {
                    "/".to_string()
                } else {
                    p.clone()
                };
                match fs.entries(&dir) {
                    Some(entries) => next.extend(entries.iter().map(|e| format!("{p}/{e}"))),
                    // What `*` stands for cannot be listed: the directory
                    // itself is hidden.
                    None => next.push(p.clone()),
                }
            } else {
                next.push(format!("{p}/{c}"));
            }
        }
        prefixes = next;
    }
    prefixes
        .iter()
        .filter_map(|p| fs.canonical(if p.is_empty() { "/" } else { p }))
        .collect()
}

/// What a policy's section plus the built-in list and agentsh's own run
/// directory (and `/run/agentsh`, the fixed marker's, when the run directory
/// is elsewhere) resolve to on `fs`: canonical paths, sorted.
///
/// Besides the lists, every socket a root daemon nobody listed keeps
/// beneath [`SOCKET_ROOTS`] is hidden (but [`HARMLESS`]): a default that
/// holds for daemons nobody thought of. What the walk did not reach (too
/// deep, or left when its bound ran out) is hidden whole, and a cut walk
/// is logged. Elsewhere, every socket the kernel's table says is listening
/// (or bound for datagrams) is hidden unless only confined processes hold
/// it ([`listeners_elsewhere`]).
pub fn hidden(doc: &DaemonSocketsDoc, run_dir: Option<&str>, fs: &dyn SocketFs) -> Vec<String> {
    let mut set: BTreeSet<String> = BUILT_IN
        .iter()
        .copied()
        .chain(doc.deny.iter().map(String::as_str))
        .chain(run_dir)
        .chain(fixed_marker_dir())
        .flat_map(|p| expand(p, fs))
        .collect();
    let walked = sockets_under_roots(fs, &set);
    if walked.cut {
        tracing::warn!(
            "daemon sockets: more than {WALK_ENTRIES} sockets and directories beneath \
             {SOCKET_ROOTS:?}; the directories not walked are hidden from root trees whole: {:?}",
            walked.unwalked
        );
    }
    let harmless: BTreeSet<String> = HARMLESS.iter().flat_map(|p| expand(p, fs)).collect();
    set.extend(walked.sockets.into_iter().filter(|p| !harmless.contains(p)));
    set.extend(walked.unwalked);
    let elsewhere = listeners_elsewhere(fs, &set, &harmless);
    set.extend(elsewhere);
    for a in &doc.allow {
        for p in expand(a, fs) {
            set.remove(&p);
        }
    }
    set.into_iter().collect()
}

/// The sockets daemons listen on outside what is hidden already (a daemon
/// whose socket lives outside `/run`: `/var/lib/incus/unix.socket`), found
/// in the kernel's socket table: every one not [`HARMLESS`] whose holders
/// are not all confined processes (a tree's own listener stays reachable;
/// see `unix_listeners`).
fn listeners_elsewhere(
    fs: &dyn SocketFs,
    hidden: &BTreeSet<String>,
    harmless: &BTreeSet<String>,
) -> Vec<String> {
    let covered = |p: &str| {
        harmless.contains(p)
            || hidden
                .iter()
                .any(|h| p == h || p.starts_with(&format!("{}/", h.trim_end_matches('/'))))
    };
    let candidates: Vec<(u64, String)> = fs
        .listeners()
        .into_iter()
        .filter_map(|l| {
            let c = fs.canonical(&l.path)?;
            (!covered(&c) && fs.kind(&c) == Kind::Socket).then_some((l.inode, c))
        })
        .collect();
    if candidates.is_empty() {
        return Vec::new();
    }
    let held = fs.holders(&candidates.iter().map(|(i, _)| *i).collect());
    candidates
        .into_iter()
        .filter(|(i, _)| held.get(i) != Some(&Holders::Confined))
        .map(|(_, p)| p)
        .collect()
}

/// [`hidden`] on the server's filesystem, reused while every directory the
/// answer depended on keeps its stamp (one stat each instead of ~20 path
/// resolutions and a listing on every wrap-init). A daemon that starts
/// after a tree started is not hidden from that tree either way: the masks
/// are made when the tree starts.
#[derive(Default)]
pub struct HiddenCache {
    last: std::sync::Mutex<Option<Cached>>,
}

/// The directories an answer depended on, with their stamps, and the answer.
type Deps = Vec<(String, Option<super::stamp::Stamp>)>;
type Cached = (Deps, Vec<Listener>, Vec<String>);

/// Whether `path` (as bound) lies beneath [`SOCKET_ROOTS`] or their usual
/// alias (`/var/run` is `/run`): the walk covers it.
fn beneath_roots(path: &str) -> bool {
    SOCKET_ROOTS
        .iter()
        .flat_map(|r| [r.to_string(), format!("/var{r}")])
        .any(|r| path.starts_with(&format!("{r}/")))
}

/// [`HostSocketFs`], noting the directories its answers depended on, with
/// the socket table read once for the cache's key.
struct Recording(std::cell::RefCell<BTreeSet<String>>, Vec<Listener>);

impl Recording {
    fn note_parent(&self, p: &str) {
        if let Some(parent) = std::path::Path::new(p).parent() {
            self.0
                .borrow_mut()
                .insert(parent.to_string_lossy().into_owned());
        }
    }
}

impl SocketFs for Recording {
    fn canonical(&self, path: &str) -> Option<String> {
        self.note_parent(path);
        let c = HostSocketFs.canonical(path);
        if let Some(c) = &c {
            self.note_parent(c);
        }
        c
    }

    fn entries(&self, dir: &str) -> Option<Vec<String>> {
        self.0.borrow_mut().insert(dir.to_string());
        HostSocketFs.entries(dir)
    }

    fn kind(&self, path: &str) -> Kind {
        self.note_parent(path);
        HostSocketFs.kind(path)
    }

    fn listeners(&self) -> Vec<Listener> {
        self.1.clone()
    }

    fn holders(&self, inodes: &BTreeSet<u64>) -> BTreeMap<u64, Holders> {
        HostSocketFs.holders(inodes)
    }
}

impl HiddenCache {
    /// Whether an answer is kept, to be reused by the next wrap-init.
    pub fn is_cached(&self) -> bool {
        self.last
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .is_some()
    }

    pub fn hidden(&self, doc: &DaemonSocketsDoc, run_dir: Option<&str>) -> Vec<String> {
        self.hidden_or_reused(doc, run_dir).0
    }

    /// [`HiddenCache::hidden`], and whether the answer was the one kept
    /// (`true`) or computed now.
    pub fn hidden_or_reused(
        &self,
        doc: &DaemonSocketsDoc,
        run_dir: Option<&str>,
    ) -> (Vec<String>, bool) {
        use super::stamp::{stamp, SETTLE};
        let mut last = self
            .last
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        // The socket table changes with no directory's stamp (a daemon
        // listening outside every directory walked): part of the key, but
        // for what lies beneath the walked roots, whose stamps already
        // answer for it (sockets there come and go all the time).
        let listeners: Vec<Listener> = unix_listeners::read()
            .into_iter()
            .filter(|l| !beneath_roots(&l.path))
            .collect();
        if let Some((deps, table, result)) = last.as_ref() {
            let moved = super::stamp::changed(deps);
            if *table == listeners && moved.is_none() {
                return (result.clone(), true);
            }
            tracing::debug!(
                ?moved,
                listeners_changed = *table != listeners,
                "daemon sockets to hide looked up again"
            );
        }
        let started = std::time::SystemTime::now();
        let fs = Recording(Default::default(), listeners.clone());
        let result = hidden(doc, run_dir, &fs);
        let deps: Vec<(String, Option<super::stamp::Stamp>)> =
            fs.0.into_inner()
                .into_iter()
                .map(|d| {
                    let st = stamp(&d);
                    (d, st)
                })
                .collect();
        let settled = deps.iter().all(|(d, _)| {
            std::fs::metadata(d)
                .and_then(|m| m.modified())
                .map_or(true, |m| m + SETTLE < started)
        });
        *last = settled.then(|| (deps, listeners, result.clone()));
        (result, false)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    /// A fake tree: path -> canonical target (identity for real paths).
    struct Fake(BTreeMap<&'static str, &'static str>);

    impl SocketFs for Fake {
        fn canonical(&self, path: &str) -> Option<String> {
            self.0.get(path).map(std::string::ToString::to_string)
        }
        /// A directory named `locked` cannot be listed.
        fn entries(&self, dir: &str) -> Option<Vec<String>> {
            if dir.ends_with("/locked") {
                return None;
            }
            let prefix = format!("{}/", dir.trim_end_matches('/'));
            let mut v: Vec<String> = self
                .0
                .keys()
                .filter_map(|k| k.strip_prefix(&prefix))
                .filter(|rest| !rest.contains('/'))
                .map(String::from)
                .collect();
            v.dedup();
            Some(v)
        }
        fn kind(&self, path: &str) -> Kind {
            let prefix = format!("{}/", path.trim_end_matches('/'));
            if self.0.keys().any(|k| k.starts_with(&prefix)) {
                Kind::Directory
            } else if self.0.contains_key(path)
                && (path.ends_with(".sock") || path.ends_with("/bus") || path.ends_with("socket"))
            {
                Kind::Socket
            } else {
                Kind::Other
            }
        }
    }

    fn fake() -> Fake {
        Fake(BTreeMap::from([
            ("/run/docker.sock", "/run/docker.sock"),
            ("/var/run/docker.sock", "/run/docker.sock"),
            ("/run/containerd", "/run/containerd"),
            ("/run/user", "/run/user"),
            ("/run/user/1000", "/run/user/1000"),
            ("/run/user/1000/bus", "/run/user/1000/bus"),
            ("/run/user/0", "/run/user/0"),
            ("/run/user/0/bus", "/run/user/0/bus"),
            ("/run/agentsh", "/run/agentsh"),
            ("/srv/d/ctl.sock", "/srv/d/ctl.sock"),
        ]))
    }

    /// [`fake`] with `/run` walkable: an unlisted daemon's socket, the
    /// journal's, and a plain file.
    fn fake_run() -> Fake {
        let mut f = fake();
        for p in [
            "/run",
            "/run/mydaemon",
            "/run/mydaemon/ctl.sock",
            "/run/mydaemon/state",
            "/run/systemd",
            "/run/systemd/journal",
            "/run/systemd/journal/socket",
        ] {
            f.0.insert(p, p);
        }
        f
    }

    #[test]
    fn an_unlisted_daemons_socket_under_run_is_hidden_but_not_a_harmless_or_allowed_one() {
        let h = hidden(
            &DaemonSocketsDoc::default(),
            Some("/run/agentsh"),
            &fake_run(),
        );
        assert!(h.contains(&"/run/mydaemon/ctl.sock".to_string()), "{h:?}");
        assert!(!h.contains(&"/run/mydaemon/state".to_string()), "{h:?}");
        assert!(
            !h.iter().any(|p| p.starts_with("/run/systemd/journal")),
            "{h:?}"
        );
        // Beneath what is hidden whole (the run dir, containerd) nothing is listed twice.
        assert!(!h.iter().any(|p| p.starts_with("/run/agentsh/")), "{h:?}");
        let doc = DaemonSocketsDoc {
            allow: vec!["/run/mydaemon/ctl.sock".into()],
            deny: vec!["/run/systemd/journal/socket".into()],
        };
        let h = hidden(&doc, None, &fake_run());
        assert!(!h.contains(&"/run/mydaemon/ctl.sock".to_string()), "{h:?}");
        assert!(
            h.contains(&"/run/systemd/journal/socket".to_string()),
            "{h:?}"
        );
    }

    fn leak(s: String) -> &'static str {
        Box::leak(s.into_boxed_str())
    }

    /// A root tree can write beneath /run: a daemon's socket moved deeper
    /// than the walk goes is hidden with the directory the walk stopped at
    /// (so is a directory that cannot be listed);
    /// a flood of files does not end the walk; a flood of directories does,
    /// and then every directory not walked is hidden whole.
    #[test]
    fn what_the_walk_cannot_reach_is_hidden_whole() {
        let mut f = fake_run();
        for p in [
            "/run/a",
            "/run/a/b",
            "/run/a/b/c",
            "/run/a/b/c/d",
            "/run/a/b/c/d/e",
            "/run/a/b/c/d/e/f",
            "/run/a/b/c/d/e/f/ctl.sock",
        ] {
            f.0.insert(p, p);
        }
        f.0.insert("/run/locked", "/run/locked");
        f.0.insert("/run/locked/ctl.sock", "/run/locked/ctl.sock");
        let h = hidden(&DaemonSocketsDoc::default(), None, &f);
        assert!(h.contains(&"/run/a/b/c/d/e/f".to_string()), "{h:?}");
        // One it cannot list, too.
        assert!(h.contains(&"/run/locked".to_string()), "{h:?}");

        let mut files = fake_run();
        for i in 0..(WALK_ENTRIES + 100) {
            let p = leak(format!("/run/0flood/f{i:05}"));
            files.0.insert(p, p);
        }
        let h = hidden(&DaemonSocketsDoc::default(), None, &files);
        assert!(h.contains(&"/run/mydaemon/ctl.sock".to_string()), "{h:?}");
        assert!(!h.contains(&"/run".to_string()), "{h:?}");

        let mut dirs = fake_run();
        for i in 0..(WALK_ENTRIES + 100) {
            let d = leak(format!("/run/zflood{i:05}"));
            let x = leak(format!("/run/zflood{i:05}/x"));
            dirs.0.insert(d, d);
            dirs.0.insert(x, x);
        }
        let h = hidden(&DaemonSocketsDoc::default(), None, &dirs);
        // Cut while listing /run itself: /run is hidden whole, and with it
        // the daemon the walk never reached.
        assert!(h.contains(&"/run".to_string()), "{h:?}");
    }

    #[test]
    fn built_ins_that_exist_globs_and_the_run_dir_are_hidden() {
        let h = hidden(&DaemonSocketsDoc::default(), Some("/run/agentsh"), &fake());
        assert_eq!(
            h,
            [
                "/run/agentsh",
                "/run/containerd",
                "/run/docker.sock",
                "/run/user/0/bus",
                "/run/user/1000/bus"
            ]
        );
    }

    #[test]
    fn deny_adds_and_allow_grants_by_what_the_path_resolves_to() {
        let doc = DaemonSocketsDoc {
            allow: vec!["/var/run/docker.sock".into()],
            deny: vec!["/srv/d/ctl.sock".into(), "/srv/none.sock".into()],
        };
        let h = hidden(&doc, None, &fake());
        assert!(h.contains(&"/srv/d/ctl.sock".to_string()), "{h:?}");
        assert!(!h.contains(&"/run/docker.sock".to_string()), "{h:?}");
        assert!(!h.iter().any(|p| p == "/srv/none.sock"));
    }

    #[test]
    fn the_cache_sees_a_socket_appear() {
        let dir = std::env::temp_dir().join(format!("agentsh-ds-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let sock = dir.join("ctl.sock");
        let _ = std::fs::remove_file(&sock);
        let doc = DaemonSocketsDoc {
            deny: vec![sock.display().to_string()],
            ..Default::default()
        };
        let cache = HiddenCache::default();
        // Let the directory settle, so the first answer is kept.
        std::thread::sleep(std::time::Duration::from_millis(150));
        assert!(!cache
            .hidden(&doc, None)
            .contains(&sock.display().to_string()));
        std::fs::write(&sock, b"").unwrap();
        assert!(cache
            .hidden(&doc, None)
            .contains(&sock.display().to_string()));
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// [`fake_run`] with a socket table.
    struct WithTable(Fake, Vec<Listener>, BTreeMap<u64, Holders>);

    impl SocketFs for WithTable {
        fn canonical(&self, path: &str) -> Option<String> {
            self.0.canonical(path)
        }
        fn entries(&self, dir: &str) -> Option<Vec<String>> {
            self.0.entries(dir)
        }
        fn kind(&self, path: &str) -> Kind {
            self.0.kind(path)
        }
        fn listeners(&self) -> Vec<Listener> {
            self.1.clone()
        }
        fn holders(&self, inodes: &BTreeSet<u64>) -> BTreeMap<u64, Holders> {
            inodes
                .iter()
                .filter_map(|i| self.2.get(i).map(|h| (*i, *h)))
                .collect()
        }
    }

    #[test]
    fn a_daemon_listening_outside_run_is_hidden_but_not_a_trees_own_listener() {
        let mut f = fake_run();
        for p in [
            "/var/lib/incus",
            "/var/lib/incus/unix.socket",
            "/srv/ws",
            "/srv/ws/dev.sock",
            "/srv/held-nowhere.sock",
        ] {
            f.0.insert(p, p);
        }
        let l = |inode, path: &str| Listener {
            inode,
            path: path.into(),
        };
        let fs = WithTable(
            f,
            vec![
                l(1, "/var/lib/incus/unix.socket"),
                l(2, "/srv/ws/dev.sock"),
                // Held where nothing could look: hidden.
                l(3, "/srv/held-nowhere.sock"),
                // Under /run: the walk's already.
                l(4, "/run/mydaemon/ctl.sock"),
                // Gone from the filesystem: nothing to hide.
                l(5, "/srv/removed.sock"),
            ],
            BTreeMap::from([(1, Holders::Unconfined), (2, Holders::Confined)]),
        );
        let h = hidden(&DaemonSocketsDoc::default(), None, &fs);
        assert!(
            h.contains(&"/var/lib/incus/unix.socket".to_string()),
            "{h:?}"
        );
        assert!(h.contains(&"/srv/held-nowhere.sock".to_string()), "{h:?}");
        assert!(!h.contains(&"/srv/ws/dev.sock".to_string()), "{h:?}");
        assert!(!h.iter().any(|p| p.contains("removed")), "{h:?}");
        // And an allow grants it back.
        let doc = DaemonSocketsDoc {
            allow: vec!["/var/lib/incus/unix.socket".into()],
            ..Default::default()
        };
        let h = hidden(&doc, None, &fs);
        assert!(
            !h.contains(&"/var/lib/incus/unix.socket".to_string()),
            "{h:?}"
        );
    }

    #[test]
    fn policy_paths_are_validated() {
        assert!(validate("/run/user/*/bus").is_ok());
        assert!(validate("run/x.sock").is_err());
        assert!(validate("/run/../x").is_err());
        assert!(validate("/run/d*.sock").is_err());
    }
}
