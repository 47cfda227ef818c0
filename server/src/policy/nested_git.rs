//! Repositories nested in the workspace (a subproject, a submodule's git
//! directory): `read_only_files`' `${WORKSPACE}/.git/X` entries are found
//! again in each, since git runs code from there too. Found by a walk of
//! the workspace (at most [`NESTED_DEPTH`] deep and [`NESTED_DIRS_MAX`]
//! directories, dependencies and builds not entered), made for every
//! wrap-init: only repositories that exist when a tree starts are covered.
//!
//! The walk costs a directory read per directory (12 ms for a workspace of
//! 1,900 directories on the machine of docs/benchmarks.md), so its result
//! is kept while nothing it read changed (a kept walk: 2 to 16 µs; a walk
//! that watches: 16 to 17 ms, made again after a change): each directory it read is watched
//! with inotify (entries created, deleted or moved, the directory itself
//! moved or deleted), watched before it is read, and a kept walk is used
//! only when its queue holds no event that can change it: a directory or a
//! `.git` made, removed or renamed, a watched directory gone, an overflow.
//! What a kept walk does not answer for is read again at every call: the
//! workspace's own canonical path (a symlink that now leads elsewhere),
//! each `.git` file's `gitdir:` line (a hard link written elsewhere makes
//! no event here) and the canonical form of every git directory found.
//!
//! Failure modes: no inotify instance, a directory that cannot be watched
//! (the per-user watch limit), or more directories than the kept walks may
//! watch together (half the limit, so the identity index's watches never
//! run out because of them): the walk is made again at every call, logged
//! once. An unreadable directory is skipped, as before. A
//! mount made over a directory of the workspace by someone outside the
//! tree makes no event (a tree cannot mount: the base filter refuses it).

use crate::inotify::{Event, Inotify};
use std::path::PathBuf;

/// How deep the walk looks below the workspace, and how many directories
/// it reads at most (a tree of dependencies is not walked whole: what lies
/// past either is not covered, and the log says so).
const NESTED_DEPTH: usize = 4;
const NESTED_DIRS_MAX: usize = 5000;
/// Directories the walk does not enter (dependencies and builds).
const NESTED_SKIP: &[&str] = &[
    "node_modules",
    "target",
    ".venv",
    "venv",
    "vendor",
    "dist",
    "build",
];

/// What is watched in each directory read: what can change the walk.
const WATCHED: u32 = libc::IN_CREATE
    | libc::IN_DELETE
    | libc::IN_MOVED_FROM
    | libc::IN_MOVED_TO
    | libc::IN_DELETE_SELF
    | libc::IN_MOVE_SELF
    | libc::IN_ONLYDIR;

/// How many workspaces' walks are kept (one per workspace a session names).
const KEPT_MAX: usize = 8;

/// What one walk found: git directories, and `.git` files (read at each
/// call, see the module doc).
#[derive(Clone, Default)]
struct Walk {
    gitdirs: Vec<PathBuf>,
    git_files: Vec<PathBuf>,
}

/// A walk kept for one workspace, with the watches that answer for it.
struct Kept {
    workspace: String,
    canonical: Option<PathBuf>,
    inotify: Inotify,
    walk: Walk,
    /// The highest watch descriptor made in `inotify`.
    last_wd: i32,
    /// The directories its walk watched.
    watches: usize,
}

/// Whether event `e` of a kept walk's queue can change the walk: a
/// directory or a `.git` created, deleted or moved, a watched directory
/// gone, or events lost. A file of another name cannot.
fn changes_walk(e: &Event) -> bool {
    e.overflowed() || e.watch_gone() || e.mask & libc::IN_ISDIR != 0 || e.name == ".git"
}

/// `${WORKSPACE}/.git/X` entries of `entries`, found again in every
/// repository nested in `workspace` (see the module doc).
pub fn nested_git(entries: &[String], workspace: Option<&str>) -> Vec<String> {
    search(entries, workspace).0
}

/// [`nested_git`], and whether the walk was a kept one.
fn search(entries: &[String], workspace: Option<&str>) -> (Vec<String>, bool) {
    let Some(ws) = workspace.map(|w| w.trim_end_matches('/')) else {
        return (Vec::new(), false);
    };
    let wanted: Vec<&str> = entries
        .iter()
        .filter_map(|e| e.strip_prefix("${WORKSPACE}/.git/"))
        .collect();
    if wanted.is_empty() {
        return (Vec::new(), false);
    }
    let (walk, kept) = walk_or_kept(ws);
    let mut gitdirs = walk.gitdirs;
    for f in &walk.git_files {
        // A submodule or worktree: `gitdir: PATH`, relative to its directory.
        let text = std::fs::read_to_string(f).unwrap_or_default();
        if let (Some(g), Some(dir)) = (text.trim().strip_prefix("gitdir: "), f.parent()) {
            gitdirs.push(dir.join(g));
        }
    }
    let mut out = Vec::new();
    for g in gitdirs {
        let Ok(g) = std::fs::canonicalize(&g) else {
            continue;
        };
        for w in &wanted {
            out.push(format!("{}/{w}", g.display()));
        }
    }
    (out, kept)
}

/// The walk of `ws`: the kept one when nothing it read changed, else a new
/// one (kept when every directory it read is watched). A new walk of a
/// kept workspace watches in the same instance (a directory watched again
/// keeps its watch) until [`REBUILD_AFTER`] watches were made in it.
///
/// Long because the kept walk is looked up, answered, walked again or
/// replaced under one lock; each step is a call.
fn walk_or_kept(ws: &str) -> (Walk, bool) {
    static KEPT: std::sync::Mutex<Vec<Kept>> = std::sync::Mutex::new(Vec::new());
    static UNWATCHED_SAID: std::sync::atomic::AtomicBool =
        std::sync::atomic::AtomicBool::new(false);
    let mut kept = KEPT
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let canonical = std::fs::canonicalize(ws).ok();
    let mut again = None;
    if let Some(i) = kept.iter().position(|k| k.workspace == ws) {
        let k = kept.remove(i);
        let events = k.inotify.read();
        let same_place = k.canonical == canonical && events.is_ok();
        if same_place && events.is_ok_and(|ev| !ev.iter().any(changes_walk)) {
            let walk = k.walk.clone();
            kept.push(k);
            return (walk, true);
        }
        if same_place && k.last_wd < REBUILD_AFTER {
            again = Some(k.inotify);
        } else {
            retire(k.inotify);
        }
    }
    let ino = again.or_else(|| Inotify::new().ok());
    let held: usize = kept.iter().map(|k| k.watches).sum();
    let allowed = watch_budget().saturating_sub(held);
    let (walk, watched) = walk(ws, ino.as_ref(), allowed);
    match (ino, watched) {
        (Some(inotify), Some((last_wd, watches))) => {
            if kept.len() == KEPT_MAX {
                retire(kept.remove(0).inotify);
            }
            kept.push(Kept {
                workspace: ws.to_string(),
                canonical,
                inotify,
                walk: walk.clone(),
                last_wd,
                watches,
            });
        }
        (ino, _) => {
            if let Some(ino) = ino {
                retire(ino);
            }
            if !UNWATCHED_SAID.swap(true, std::sync::atomic::Ordering::Relaxed) {
                tracing::info!(
                    workspace = ws,
                    "read_only_files: the workspace's directories cannot all be watched \
                     (inotify: half of fs.inotify.max_user_watches for all workspaces, or \
                     max_user_instances); nested repositories are looked for by a walk at \
                     every wrap-init"
                );
            }
        }
    }
    (walk, false)
}

/// How many watches an instance may have made before a new walk gets a
/// new instance (watch descriptors count up; those of directories that
/// left the walk stay until their directory is removed).
const REBUILD_AFTER: i32 = 4 * NESTED_DIRS_MAX as i32;

/// Closes an inotify instance on a thread of its own: closing one that
/// watches thousands of directories takes milliseconds (15 ms for 1,900 on
/// the machine of docs/benchmarks.md), which no shell should wait for.
fn retire(ino: Inotify) {
    // If no thread can be made, the instance is closed here instead.
    let _ = std::thread::Builder::new()
        .name("inotify-close".into())
        .spawn(move || drop(ino));
}

/// How many watches the kept walks may hold together: half of what the
/// kernel allows the server's uid (`fs.inotify.max_user_watches`) beyond
/// what the identity index takes (256 at most), so that the index, which
/// watches where programs are installed, never finds the limit reached
/// because of them. Unreadable: none (every walk made at every call).
fn watch_budget() -> usize {
    const INDEX_WATCHES: usize = 256;
    std::fs::read_to_string("/proc/sys/fs/inotify/max_user_watches")
        .ok()
        .and_then(|t| t.trim().parse::<usize>().ok())
        .map_or(0, |m| m.saturating_sub(INDEX_WATCHES) / 2)
}

/// Walks `ws` (see the module doc), each directory watched in `inotify`
/// before it is read, at most `allowed` of them; and the highest watch
/// descriptor made with the number of directories watched, `None` when a
/// directory read was not watched (or there is no instance).
fn walk(ws: &str, inotify: Option<&Inotify>, allowed: usize) -> (Walk, Option<(i32, usize)>) {
    let mut out = Walk::default();
    let mut last_wd = inotify.map(|_| 0);
    let mut todo = vec![(PathBuf::from(ws), 0usize)];
    let mut read = 0usize;
    while let Some((dir, depth)) = todo.pop() {
        read += 1;
        if read > NESTED_DIRS_MAX {
            tracing::info!(workspace = ws, "read_only_files: more than {NESTED_DIRS_MAX} directories; nested repositories past them are not covered");
            break;
        }
        if let (Some(ino), Some(last)) = (inotify, last_wd) {
            last_wd = (read <= allowed)
                .then(|| ino.add(&dir.to_string_lossy(), WATCHED).ok())
                .flatten()
                .map(|wd| wd.max(last));
        }
        let Ok(rd) = std::fs::read_dir(&dir) else {
            continue;
        };
        for e in rd.filter_map(Result::ok) {
            let name = e.file_name();
            let Ok(t) = e.file_type() else { continue };
            let path = e.path();
            if name == ".git" {
                if t.is_dir() && depth > 0 {
                    out.gitdirs.push(path);
                } else if t.is_file() {
                    out.git_files.push(path);
                }
            } else if t.is_dir() && depth < NESTED_DEPTH && !NESTED_SKIP.iter().any(|s| name == *s)
            {
                todo.push((path, depth + 1));
            }
        }
    }
    (out, last_wd.map(|wd| (wd, read.min(NESTED_DIRS_MAX))))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn workspace(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("agentsh-nested-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(d.join("a/b")).unwrap();
        d
    }

    fn hooks(ws: &std::path::Path) -> (Vec<String>, bool) {
        search(
            &["${WORKSPACE}/.git/hooks".to_string()],
            Some(&ws.to_string_lossy()),
        )
    }

    #[test]
    fn a_repository_made_after_the_walk_was_kept_is_found_by_the_next() {
        let ws = workspace("new");
        let ws_c = std::fs::canonicalize(&ws).unwrap();
        std::fs::create_dir_all(ws.join("a/.git")).unwrap();
        let (first, _) = hooks(&ws);
        assert_eq!(first, vec![format!("{}/a/.git/hooks", ws_c.display())]);
        // Nothing changed: the kept walk, the same answer.
        assert_eq!(hooks(&ws), (first.clone(), true));
        // A file of another name cannot change it: still kept.
        std::fs::write(ws.join("a/b/notes.txt"), b"x").unwrap();
        assert_eq!(hooks(&ws), (first, true));
        // The agent's attack: a repository cloned after the first shell,
        // whose hooks the next shell must still keep read-only.
        std::fs::create_dir_all(ws.join("a/b/.git")).unwrap();
        let (next, kept) = hooks(&ws);
        assert!(!kept, "a new .git must make a new walk");
        assert!(
            next.contains(&format!("{}/a/b/.git/hooks", ws_c.display())),
            "{next:?}"
        );
        // A directory renamed holds the repository elsewhere: walked again.
        std::fs::rename(ws.join("a/b"), ws.join("a/c")).unwrap();
        let (moved, kept) = hooks(&ws);
        assert!(!kept);
        assert!(
            moved.contains(&format!("{}/a/c/.git/hooks", ws_c.display())),
            "{moved:?}"
        );
        std::fs::remove_dir_all(&ws).unwrap();
    }

    #[test]
    fn a_walk_past_its_watch_budget_is_not_kept() {
        let ws = workspace("budget");
        let ino = Inotify::new().unwrap();
        let ws_s = ws.to_string_lossy().into_owned();
        // ws, a and a/b: three directories.
        assert!(walk(&ws_s, Some(&ino), 2).1.is_none());
        assert_eq!(walk(&ws_s, Some(&ino), 3).1.map(|(_, n)| n), Some(3));
        assert!(walk(&ws_s, None, 3).1.is_none());
        std::fs::remove_dir_all(&ws).unwrap();
    }

    #[test]
    fn a_gitdir_line_rewritten_through_a_hard_link_elsewhere_is_read_again() {
        let ws = workspace("link");
        let outside = ws.with_extension("outside");
        let _ = std::fs::remove_dir_all(&outside);
        std::fs::create_dir_all(&outside).unwrap();
        for g in ["real1", "real2"] {
            std::fs::create_dir_all(ws.join(g)).unwrap();
        }
        std::fs::write(outside.join("pointer"), "gitdir: ../real1\n").unwrap();
        // `.git` in the workspace is a hard link to a file outside it: a
        // write there makes no event in the workspace's watches.
        std::fs::hard_link(outside.join("pointer"), ws.join("a/.git")).unwrap();
        let ws_c = std::fs::canonicalize(&ws).unwrap();
        let (first, _) = hooks(&ws);
        assert_eq!(first, vec![format!("{}/real1/hooks", ws_c.display())]);
        std::fs::write(outside.join("pointer"), "gitdir: ../real2\n").unwrap();
        let (then, kept) = hooks(&ws);
        assert!(kept, "no event in the workspace: the walk is kept");
        assert_eq!(then, vec![format!("{}/real2/hooks", ws_c.display())]);
        std::fs::remove_dir_all(&ws).unwrap();
        std::fs::remove_dir_all(&outside).unwrap();
    }

    #[test]
    fn a_workspace_symlink_that_now_leads_elsewhere_is_walked_again() {
        let base = workspace("sym");
        for (d, repo) in [("one", "r1"), ("two", "r2")] {
            std::fs::create_dir_all(base.join(d).join(repo).join(".git")).unwrap();
        }
        let link = base.join("ws");
        std::os::unix::fs::symlink(base.join("one"), &link).unwrap();
        let (first, _) = hooks(&link);
        assert!(first[0].ends_with("/one/r1/.git/hooks"), "{first:?}");
        std::fs::remove_file(&link).unwrap();
        std::os::unix::fs::symlink(base.join("two"), &link).unwrap();
        let (then, kept) = hooks(&link);
        assert!(!kept);
        assert!(then[0].ends_with("/two/r2/.git/hooks"), "{then:?}");
        std::fs::remove_dir_all(&base).unwrap();
    }
}
