//! `credential_files:`: the usual credential stores kept out of a tree's
//! reach, in every home (`~/.ssh`, `~/.aws`, `~/.netrc`, ...).
//!
//! Threat: an agent (or a prompt injection steering it) that reads the keys
//! and tokens a user or an image left in a home directory, and sends them
//! out or uses them. Landlock only grants, so "everything but `~/.ssh`"
//! means carving the home, after which a file the same command creates
//! directly in the home is unreadable to it (a `git clone` in a home that
//! is the workspace fails). So each store is covered instead, in the tree's
//! own mount namespace, by unixwrap before the filter is loaded (the masks
//! `mask` already makes for daemon sockets: an empty read-only tmpfs over a
//! directory, a read-only `/dev/null` over a file): a root tree with
//! CAP_SYS_ADMIN gets a private mount namespace, an ordinary user's tree a
//! user namespace of its own (its uid and gid mapped to themselves; it
//! holds no capability once its command runs). Where neither can be had
//! (root without CAP_SYS_ADMIN, as in Docker's default container: inside a
//! user namespace root's capabilities would stop reaching the host's ports
//! and ids; an ordinary user where the kernel, a seccomp profile or
//! AppArmor refuses user namespaces), `fallback` says
//! what happens: `carve` (the default) denies `read` beneath each store
//! (in every home) with Landlock, with the cost above; `readable` leaves
//! them readable, which the server logs and the wrap-init event says.
//!
//! `~/X` is X in every home: root's, each directory in `/home`, the
//! caller's own (from `/etc/passwd`) and the server's `$HOME` (under
//! `agentsh wrap`: the developer's). Only stores that exist when the tree
//! starts are covered (one the tree creates is its own).
//!
//! Failure modes: an entry that is not `~/...` or absolute, or holds `..`,
//! a glob or a control character, is refused when the policy is loaded.

use serde::{Deserialize, Serialize};

/// What happens where no mount namespace can be had (see the module doc).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Fallback {
    /// Landlock denies `read` beneath each store in the caller's home.
    #[default]
    Carve,
    /// The stores stay readable (logged, and said in the wrap-init event).
    Readable,
}

/// The section as written.
#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct CredentialFilesDoc {
    /// `~/X` (X in every home) or an absolute path.
    #[serde(default)]
    pub hide: Vec<String>,
    /// Where no mount namespace can be had (default `carve`).
    #[serde(default)]
    pub fallback: Fallback,
}

/// `read_only_files:`: files and directories kept read-only in every tree
/// (the places a tree would plant code that runs later, outside it: shell
/// startup files, git hooks), covered by a read-only bind of themselves in
/// the tree's mount namespace, as `hide` covers credential stores. Entries
/// as `hide`'s, or `${WORKSPACE}/X`.
#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct ReadOnlyFilesDoc {
    #[serde(default)]
    pub paths: Vec<String>,
    /// Where no mount namespace can be had (default `carve`: Landlock
    /// denies write, create and delete beneath them; `writable`: left as
    /// they are, logged).
    #[serde(default)]
    pub fallback: ReadOnlyFallback,
}

/// [`ReadOnlyFilesDoc::fallback`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ReadOnlyFallback {
    #[default]
    Carve,
    Writable,
}

/// The entries with `${WORKSPACE}` replaced by `workspace`; those naming
/// it are left out where there is none.
pub fn in_workspace(entries: &[String], workspace: Option<&str>) -> Vec<String> {
    entries
        .iter()
        .filter_map(|e| match e.strip_prefix("${WORKSPACE}") {
            Some(rest) => workspace.map(|w| format!("{}{rest}", w.trim_end_matches('/'))),
            None => Some(e.clone()),
        })
        .collect()
}

/// Why an entry of `hide` (or, `workspace`: `${WORKSPACE}/X` accepted
/// too, of `read_only_files.paths`) is refused, or `None`.
pub fn entry_error(p: &str, workspace: bool) -> Option<&'static str> {
    let rest = if let Some(r) = p.strip_prefix("~/") {
        r
    } else if let Some(r) = p.strip_prefix("${WORKSPACE}/").filter(|_| workspace) {
        r
    } else if let Some(r) = p.strip_prefix('/') {
        r
    } else {
        return Some("must start with ~/ (in every home) or / (an absolute path)");
    };
    if rest.is_empty() {
        return Some("names a whole home or /, not a store in it");
    }
    if p.chars().any(char::is_control) {
        return Some("holds a control character");
    }
    if rest.contains(['*', '?', '[', '{', '$']) {
        return Some("globs are not accepted: name each store");
    }
    if rest.split('/').any(|c| c == ".." || c == ".") {
        return Some("holds . or .. components");
    }
    None
}

/// The homes `~/` stands for: `/root`, each directory in `/home`, the
/// caller's own home `caller_home`, and the server's own `$HOME` (under
/// `agentsh wrap`, the developer's, as their shell set it).
pub fn homes(caller_home: Option<&str>) -> Vec<String> {
    let mut v = vec!["/root".to_string()];
    if let Ok(rd) = std::fs::read_dir("/home") {
        let mut listed: Vec<String> = rd
            .filter_map(Result::ok)
            .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
            .map(|e| format!("/home/{}", e.file_name().to_string_lossy()))
            .collect();
        listed.sort();
        v.extend(listed);
    }
    let own = std::env::var("HOME").ok();
    for h in [caller_home, own.as_deref()].into_iter().flatten() {
        let h = h.trim_end_matches('/');
        if h.starts_with('/') && !v.iter().any(|x| x == h) {
            v.push(h.to_string());
        }
    }
    v
}

/// [`existing`] for `hide` in [`homes`] of `caller_home`, reused while
/// nothing it was read from changed: `/home`, and the directory each store
/// would be in (a store added, removed or replaced changes its directory's
/// ctime). A result read while one of them had just changed is not kept.
/// One stat per directory instead of a lookup per store and home (about a
/// hundred calls per wrap-init).
pub fn existing_cached(hide: &[String], caller_home: Option<&str>) -> Vec<String> {
    use crate::policy::stamp::{stamp, Stamp, SETTLE};
    type Deps = Vec<(String, Option<Stamp>)>;
    struct Kept {
        hide: Vec<String>,
        caller_home: Option<String>,
        deps: Deps,
        found: Vec<String>,
    }
    // A few lists are asked for (the stores to hide, the files kept
    // read-only), each with the callers' homes: one kept result per pair.
    static KEPT: std::sync::Mutex<Vec<Kept>> = std::sync::Mutex::new(Vec::new());
    let mut kept = KEPT
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let at = kept
        .iter()
        .position(|k| k.hide == hide && k.caller_home.as_deref() == caller_home);
    if let Some(i) = at {
        if kept[i].deps.iter().all(|(d, st)| stamp(d) == *st) {
            return kept[i].found.clone();
        }
        kept.remove(i);
    }
    let started = std::time::SystemTime::now();
    let homes = homes(caller_home);
    let mut dirs: Vec<String> = vec!["/home".to_string()];
    for c in candidates(hide, &homes) {
        if let Some(parent) = std::path::Path::new(&c).parent() {
            let parent = parent.to_string_lossy().into_owned();
            if !dirs.contains(&parent) {
                dirs.push(parent);
            }
        }
    }
    let deps: Deps = dirs
        .into_iter()
        .map(|d| {
            let st = stamp(&d);
            (d, st)
        })
        .collect();
    let found = existing(hide, &homes);
    let settled = deps.iter().all(|(_, st)| {
        st.is_none_or(|s| {
            let changed = std::time::UNIX_EPOCH
                + std::time::Duration::new(s.ctime.0.max(0) as u64, s.ctime.1.max(0) as u32);
            changed + SETTLE < started
        })
    });
    if settled {
        if kept.len() >= 8 {
            kept.remove(0);
        }
        kept.push(Kept {
            hide: hide.to_vec(),
            caller_home: caller_home.map(str::to_string),
            deps,
            found: found.clone(),
        });
    }
    found
}

/// Each entry of `hide` that exists now, in each of `homes`, canonical
/// (a store that is a symlink is covered where it leads), without repeats.
/// A store that cannot be looked at (a home the server may not enter) is
/// left out: nothing of it can be listed, hence nothing to cover.
pub fn existing(hide: &[String], homes: &[String]) -> Vec<String> {
    existing_in(hide, homes, |p| {
        std::fs::canonicalize(p)
            .ok()
            .map(|c| c.to_string_lossy().into_owned())
    })
}

/// [`existing`], with `canonical` (`None`: does not exist) as the view.
pub fn existing_in(
    hide: &[String],
    homes: &[String],
    canonical: impl Fn(&str) -> Option<String>,
) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for c in candidates(hide, homes) {
        let Some(canon) = canonical(&c) else {
            continue;
        };
        // A store whose canonical path is `/` or a home itself (a symlink
        // to `..`) would hide everything: not a store.
        if canon == "/" || homes.contains(&canon) {
            continue;
        }
        if !out.contains(&canon) {
            out.push(canon);
        }
    }
    out
}

/// Each entry of `hide` in each of `homes` (absolute entries as they are).
pub fn candidates(hide: &[String], homes: &[String]) -> Vec<String> {
    let mut out = Vec::new();
    for entry in hide {
        match entry.strip_prefix("~/") {
            Some(rel) => out.extend(homes.iter().map(|h| format!("{h}/{rel}"))),
            None => out.push(entry.clone()),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_are_stores_in_homes_or_absolute() {
        assert_eq!(entry_error("~/.ssh", false), None);
        assert_eq!(entry_error("~/.config/gcloud", false), None);
        assert_eq!(entry_error("/etc/app/token", false), None);
        assert!(entry_error("${WORKSPACE}/.git/hooks", false).is_some());
        assert_eq!(entry_error("${WORKSPACE}/.git/hooks", true), None);
        assert_eq!(
            in_workspace(
                &["${WORKSPACE}/.git/config".into(), "~/.bashrc".into()],
                Some("/w/")
            ),
            vec!["/w/.git/config", "~/.bashrc"]
        );
        assert_eq!(
            in_workspace(&["${WORKSPACE}/.git".into()], None),
            Vec::<String>::new()
        );
        for bad in [
            ".ssh",
            "~",
            "~/",
            "/",
            "~/../x",
            "~/.ssh/*",
            "~/a/./b",
            "~root/.ssh",
        ] {
            assert!(entry_error(bad, false).is_some(), "{bad} accepted");
        }
    }

    #[test]
    fn existing_stores_are_found_in_every_home_and_a_link_to_a_home_is_not_one() {
        let d = std::env::temp_dir().join(format!("agentsh-cred-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        let base = d.to_str().unwrap();
        let (a, b) = (format!("{base}/a"), format!("{base}/b"));
        std::fs::create_dir_all(format!("{a}/.ssh")).unwrap();
        std::fs::create_dir_all(&b).unwrap();
        std::fs::write(format!("{b}/.netrc"), "machine x").unwrap();
        std::os::unix::fs::symlink(&a, format!("{b}/.aws")).unwrap();
        let hide: Vec<String> = ["~/.ssh", "~/.netrc", "~/.aws", "~/.kube"]
            .map(String::from)
            .to_vec();
        let found = existing(&hide, &[a.clone(), b.clone()]);
        assert_eq!(found, vec![format!("{a}/.ssh"), format!("{b}/.netrc")]);
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn candidates_are_each_store_in_each_home() {
        let c = candidates(
            &["~/.ssh".into(), "/etc/tok".into()],
            &["/root".into(), "/home/a".into()],
        );
        assert_eq!(c, vec!["/root/.ssh", "/home/a/.ssh", "/etc/tok"]);
    }
}
