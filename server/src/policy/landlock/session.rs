//! The server's side of the ruleset: compile per wrap-init for the caller's
//! uid (its home from `/etc/passwd`), and reuse the last result while every
//! directory it was built from keeps its stamp. The I/O lives here; the
//! compiler in `landlock` stays pure (an injected `FsView`).

use super::paths::{FsView, HostFs, SessionVars};
use super::protect::SelfProtection;
use super::ruleset::{compile, CompiledLandlock};
use crate::policy::loaded::Policy;
use crate::policy::stamp::{changed, stamp, Stamp, SETTLE};
use agentsh_proto::LandlockCompat;
use std::collections::BTreeSet;
use std::path::Path;

/// Everything the server needs to compile a ruleset at each wrap-init.
pub struct SessionLandlock {
    pub(super) policy: std::sync::Arc<Policy>,
    pub(super) workspace: Option<String>,
    pub(super) protect: SelfProtection,
    /// Where a tree gets a mount namespace of its own: agentsh's own files
    /// beneath a home (`agentsh wrap`'s binaries in `~/.local/bin`, its
    /// state and audit), kept by covers in it instead of by Landlock, whose
    /// carve around them would split the home (nothing could be created in
    /// `~` directly); and `protect` without them.
    pub(super) mounted: Option<(SelfProtection, OwnCovers)>,
    pub(super) compat: LandlockCompat,
    /// The last ruleset compiled for each of up to [`CACHED_UIDS`] uids,
    /// reused while nothing it was built from has changed (see
    /// [`RulesetCache`]).
    pub(super) cache: std::sync::Mutex<Vec<RulesetCache>>,
}

/// How many uids' rulesets are kept (the least recently compiled goes).
pub const CACHED_UIDS: usize = 8;

/// Where the docs keep the files `secrets:` names: never a tree's to read,
/// whatever config the server runs on.
pub const SECRETS_DIR: &str = "/etc/agentsh/secrets";

/// A compiled ruleset and the directories it was built from.
///
/// Compiling lists directories and follows symlinks (≈ 0.6 ms, on every
/// wrap-init, i.e. every new tree). What it read can only change if an entry
/// of one of those directories is added, removed, renamed or replaced, or a
/// directory's mode changes, and each of those changes the directory's ctime
/// (or, for a mount on it, its device and inode). So the result is reused
/// while every directory it depended on has the stamp it had, checked with
/// one stat each. A directory changed less than [`SETTLE`] before the compile
/// started might have changed during it: such a result is not kept.
pub(super) struct RulesetCache {
    uid: u32,
    carve: Carves,
    home: Option<String>,
    deps: Vec<(String, Option<Stamp>)>,
    result: CompiledLandlock,
}

/// [`HostFs`], noting every directory whose entries an answer depended on:
/// each ancestor of a path it canonicalized (and of the result), and each
/// directory it listed.
struct RecordingFs {
    deps: std::cell::RefCell<BTreeSet<String>>,
}

impl RecordingFs {
    fn note_ancestors(&self, path: &str) {
        let mut deps = self.deps.borrow_mut();
        let mut p = std::path::Path::new(path);
        while let Some(parent) = p.parent() {
            deps.insert(parent.to_string_lossy().into_owned());
            p = parent;
        }
    }
}

impl FsView for RecordingFs {
    fn canonical(&self, path: &str) -> Option<String> {
        self.note_ancestors(path);
        let r = HostFs.canonical(path);
        if let Some(c) = &r {
            self.note_ancestors(c);
        }
        r
    }

    fn children(&self, dir: &str) -> Option<Vec<String>> {
        self.note_ancestors(dir);
        self.deps.borrow_mut().insert(dir.to_string());
        HostFs.children(dir)
    }
}

impl SessionLandlock {
    /// From the server's config: the workspace, `landlock.compat`, and the
    /// paths agentsh protects (its binaries, config, policies, state, audit
    /// log, and the API port).
    pub fn for_server(
        policy: std::sync::Arc<Policy>,
        config: &crate::config::Config,
        config_file: Option<&Path>,
    ) -> SessionLandlock {
        let workspace = (!config.workspace.is_empty()).then(|| config.workspace.clone());
        Self::for_session(policy, workspace, config, config_file)
    }

    /// A session's: its policy and workspace, the server's own files.
    ///
    /// `/etc/agentsh/secrets` is hidden from every tree, named in a config
    /// or not.
    pub fn for_session(
        policy: std::sync::Arc<Policy>,
        workspace: Option<String>,
        config: &crate::config::Config,
        config_file: Option<&Path>,
    ) -> SessionLandlock {
        let mut own: Vec<std::path::PathBuf> = vec![
            "/etc/agentsh".into(),
            config.policies_dir.clone(),
            config.state_dir.clone(),
            // The API socket, notify sockets and the `active` marker.
            config.run_dir(),
        ];
        let parent = |p: &Path| p.parent().map(Path::to_path_buf);
        own.extend(parent(&config.audit.jsonl));
        own.extend(config_file.and_then(parent));
        own.extend(std::env::current_exe().ok().as_deref().and_then(parent));
        own.extend(parent(&config.wrapper_binary_path()));
        let own: Vec<&Path> = own.iter().map(std::path::PathBuf::as_path).collect();
        let api_port = config
            .server
            .http
            .addr
            .parse::<std::net::SocketAddr>()
            .ok()
            .map(|a| a.port());
        // The state directory (the operator token, the CA's key), the
        // directory the docs keep secrets in (whatever config the server
        // runs on: one started on other settings still hides it) and the
        // files `secrets:` names are never a tree's to read.
        let key = config.ca_key_path();
        let key_dir = key.parent().filter(|d| *d != config.state_dir.as_path());
        let mut no_read: Vec<&Path> = vec![config.state_dir.as_path(), Path::new(SECRETS_DIR)];
        no_read.extend(key_dir);
        no_read.extend(config.secrets.values().filter_map(|s| s.file.as_deref()));
        let protect = SelfProtection::new(&own, &no_read, api_port, &HostFs);
        let mut hidden: Vec<&Path> = vec![config.state_dir.as_path()];
        hidden.extend(key_dir);
        let mut own = own;
        own.extend(key_dir);
        let mounted = own_beneath_homes(&own, &hidden).map(|(rest, covers)| {
            let rest: Vec<&Path> = rest.iter().map(std::path::PathBuf::as_path).collect();
            // What a mount hides needs no Landlock carve.
            let state: Vec<&Path> = no_read
                .iter()
                .copied()
                .filter(|p| {
                    !covers
                        .hide
                        .iter()
                        .any(|h| std::fs::canonicalize(p).is_ok_and(|c| c == Path::new(h)))
                })
                .collect();
            let state = state.as_slice();
            (SelfProtection::new(&rest, state, api_port, &HostFs), covers)
        });
        SessionLandlock {
            mounted,
            policy,
            workspace,
            protect,
            compat: config.landlock.compat,
            cache: Default::default(),
        }
    }

    pub fn protection(&self) -> &SelfProtection {
        &self.protect
    }

    /// agentsh's own files beneath a home, to be covered in the tree's
    /// mount namespace where it gets one (see `mounted`).
    pub fn own_covers(&self) -> Option<&OwnCovers> {
        self.mounted.as_ref().map(|(_, c)| c)
    }

    /// The ruleset for a tree run by `uid` (its home from `/etc/passwd`).
    pub fn compile(&self, uid: u32) -> CompiledLandlock {
        self.compile_or_reuse(uid, Carves::default()).0
    }

    /// [`SessionLandlock::compile`] (`carve`: with the Landlock fallbacks
    /// of `credential_files` and `read_only_files` it names), and whether
    /// the ruleset was the one kept (`true`) or compiled now.
    pub fn compile_or_reuse(&self, uid: u32, carve: Carves) -> (CompiledLandlock, bool) {
        let home = std::fs::read_to_string("/etc/passwd")
            .ok()
            .and_then(|t| home_of(uid, &t));
        let mut cache = self
            .cache
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(i) = cache.iter().position(|c| c.uid == uid && c.carve == carve) {
            let c = &cache[i];
            let moved = changed(&c.deps);
            if c.home == home && moved.is_none() {
                return (c.result.clone(), true);
            }
            tracing::debug!(
                uid,
                ?moved,
                home_changed = c.home != home,
                "landlock ruleset compiled again"
            );
            cache.remove(i);
        }
        let started = std::time::SystemTime::now();
        let vars = SessionVars {
            workspace: self.workspace.clone(),
            home: home.clone(),
            tmpdir: "/tmp".into(),
        };
        let fs = RecordingFs {
            deps: Default::default(),
        };
        let carving;
        let policy = if carve.credentials || carve.read_only {
            carving = self.with_carves(carve, home.as_deref(), &fs);
            &carving
        } else {
            &*self.policy
        };
        let protect = match (&self.mounted, carve.own_by_mount) {
            (Some((p, _)), true) => p,
            _ => &self.protect,
        };
        let result = compile(policy, &vars, protect, self.compat, &fs);
        let deps: Vec<(String, Option<Stamp>)> = fs
            .deps
            .into_inner()
            .into_iter()
            .map(|d| {
                let st = stamp(&d);
                (d, st)
            })
            .collect();
        let settled = |st: &Option<Stamp>| {
            st.is_none_or(|s| {
                let changed = std::time::UNIX_EPOCH
                    + std::time::Duration::new(s.ctime.0.max(0) as u64, s.ctime.1.max(0) as u32);
                changed + SETTLE < started
            })
        };
        if deps.iter().all(|(_, st)| settled(st)) {
            if cache.len() >= CACHED_UIDS {
                cache.remove(0);
            }
            cache.push(RulesetCache {
                uid,
                carve,
                home,
                deps,
                result: result.clone(),
            });
        }
        (result, false)
    }
}

impl SessionLandlock {
    /// The policy with the fallbacks `carve` names as file rules: `read`
    /// denied beneath each credential store, write, create and delete
    /// beneath each read-only file, for the ones that exist (looked up
    /// through `fs`, so a new one, or a new home, changes a stamp and the
    /// next compile sees it).
    fn with_carves(&self, carve: Carves, home: Option<&str>, fs: &dyn FsView) -> Policy {
        use crate::policy::credential_files::{existing_in, homes, in_workspace};
        use crate::policy::schema::FileOperation as Op;
        let homes = homes(home);
        let found = |list: &[String]| existing_in(list, &homes, |p| fs.canonical(p));
        let mut p = (*self.policy).clone();
        if carve.credentials {
            let paths = found(&self.policy.credential_files().hide);
            p = p.with_file_rule(carve_rule("credential-files", paths, vec![Op::Read]));
        }
        if carve.read_only {
            let ro = in_workspace(
                &self.policy.read_only_files().paths,
                self.workspace.as_deref(),
            );
            let ops = vec![Op::Write, Op::Create, Op::Delete];
            p = p.with_file_rule(carve_rule("read-only-files", found(&ro), ops));
        }
        p
    }

    /// Whether `uid`'s ruleset is kept, to be reused by its next wrap-init.
    pub fn is_cached(&self, uid: u32) -> bool {
        self.cache
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .iter()
            .any(|c| c.uid == uid)
    }
}

/// A `carve` fallback as a file rule named `name`: `operations` denied
/// beneath each of `paths`.
fn carve_rule(
    name: &str,
    paths: Vec<String>,
    operations: Vec<crate::policy::schema::FileOperation>,
) -> crate::policy::schema::FileRule {
    crate::policy::schema::FileRule {
        name: name.to_string(),
        paths,
        operations,
        decision: crate::policy::schema::Decision::Deny,
    }
}

/// Which Landlock fallbacks a ruleset takes (see `credential_files`), and
/// whether agentsh's own files beneath a home are left to covers.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Carves {
    /// `read` denied beneath the credential stores.
    pub credentials: bool,
    /// write, create and delete denied beneath the read-only files.
    pub read_only: bool,
    /// agentsh's own files beneath a home are covered in the tree's mount
    /// namespace ([`OwnCovers`]), not carved out of the home by Landlock.
    pub own_by_mount: bool,
}

/// agentsh's own files beneath a home: its state (hidden) and the rest
/// (binaries, audit: kept read-only), canonical, as they exist.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OwnCovers {
    pub hide: Vec<String>,
    pub read_only: Vec<String>,
}

/// `own` and `state` split into what lies beneath a home (covered where
/// the tree has a mount namespace) and the rest; `None` when nothing does.
fn own_beneath_homes(
    own: &[&Path],
    hidden: &[&Path],
) -> Option<(Vec<std::path::PathBuf>, OwnCovers)> {
    let homes = crate::policy::credential_files::homes(None);
    let beneath = |p: &Path| homes.iter().any(|h| p.starts_with(h) && p != Path::new(h));
    let canon = |p: &Path| {
        std::fs::canonicalize(p)
            .ok()
            .map(|c| c.to_string_lossy().into_owned())
    };
    let hidden_c: Vec<String> = hidden.iter().filter_map(|p| canon(p)).collect();
    let mut covers = OwnCovers::default();
    let mut rest: Vec<std::path::PathBuf> = Vec::new();
    for p in own {
        let c = canon(p);
        match c.as_deref().filter(|c| beneath(Path::new(c))) {
            Some(c) if hidden_c.iter().any(|h| h == c) => covers.hide.push(c.to_string()),
            Some(c) => covers.read_only.push(c.to_string()),
            None => rest.push(p.to_path_buf()),
        }
    }
    (!covers.hide.is_empty() || !covers.read_only.is_empty()).then_some((rest, covers))
}

/// The home directory of `uid` in a passwd file's text.
pub fn home_of(uid: u32, passwd: &str) -> Option<String> {
    passwd.lines().find_map(|line| {
        let f: Vec<&str> = line.split(':').collect();
        (f.len() >= 7 && f[2].parse::<u32>().ok() == Some(uid) && f[5].starts_with('/'))
            .then(|| f[5].to_string())
    })
}
