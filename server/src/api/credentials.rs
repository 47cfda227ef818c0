//! How a tree's credential stores (the policy's `credential_files`) are
//! kept from it, decided per wrap-init: covered in a mount namespace of the
//! tree's own where unixwrap can make one (CAP_SYS_ADMIN in the caller, or,
//! for an ordinary user, a user namespace this host lets an ordinary
//! process make, probed once),
//! else the policy's `fallback` (a Landlock carve of the caller's home, or
//! readable, said). See `policy::credential_files` for the threat.
//!
//! Failure modes: a caller whose capabilities cannot be read is taken to
//! have none (the stricter path: a user namespace or the fallback); a probe
//! that cannot run counts as "no user namespace". Why no namespace can be
//! had is a [`NoMountNamespace`], said in the event's `mechanism`.

use crate::handoff::Caller;
use crate::policy::credential_files::{self, Fallback, ReadOnlyFallback};
use crate::policy::Policy;
use std::sync::Arc;

/// Why a tree's unixwrap can make no mount namespace for the covers (the
/// fallbacks then apply, and the event's `mechanism` says this).
#[derive(Debug, Clone, thiserror::Error)]
pub enum NoMountNamespace {
    #[error("no Landlock here (gVisor?): the tracer keeps the file rules")]
    TracerKeepsFiles,
    /// Root in a user namespace would lose its reach on the host's
    /// network and ids ([`namespace_for`]).
    #[error("root without CAP_SYS_ADMIN")]
    RootWithoutAdmin,
    /// The probe's child could not make one, or mount in it.
    #[error("a user namespace with a mount in it: {0}")]
    UserNamespace(#[source] Arc<std::io::Error>),
    #[error("the user-namespace probe died (signal {0})")]
    ProbeDied(i32),
    #[error("cannot run the user-namespace probe: {0}")]
    ProbeNotRun(#[source] Arc<std::io::Error>),
}

/// What wrap-init does about the stores, for unixwrap, Landlock and the event.
pub(super) struct CredentialPlan {
    /// The stores unixwrap covers (empty unless a namespace can be made).
    pub paths: Vec<String>,
    /// The files unixwrap keeps read-only (the policy's `read_only_files`).
    pub read_only: Vec<String>,
    /// Those of `read_only_files` in a home that do not exist yet (their
    /// nearest existing directory, canonical, and the names below it): the
    /// supervisor refuses their creation.
    pub read_only_absent: Vec<String>,
    /// The missing directories on the way to those (same form): a tree may
    /// make them as directories, not put one in place by a symlink or a
    /// rename (which would bring the place's contents with it).
    pub read_only_absent_parents: Vec<String>,
    /// unixwrap may make a user namespace for the covers.
    pub user_namespace: bool,
    /// The ruleset takes the Landlock fallbacks.
    pub carves: Carves,
    /// The event's `credential_files`.
    pub summary: crate::audit::CredentialFilesSummary,
}

pub(super) use crate::policy::landlock::Carves;

/// The plan for `caller` under `policy`; `None` when it covers nothing.
/// `tracer_keeps_files`: no Landlock here (gVisor) and the tracer keeps
/// the file rules; no tree can then have a mount namespace shown to be its
/// own (gVisor shows no namespace identity: unixwrap would refuse every
/// shell), so the fallbacks apply to all, kept by the tracer. The
/// session's workspace is what `${WORKSPACE}` in `read_only_files` stands
/// for.
fn plan(
    setup: &crate::session::Setup,
    caller: Caller,
    cap_eff: Option<u64>,
) -> Option<CredentialPlan> {
    let policy: &Policy = &setup.policy;
    let tracer_keeps_files = setup.filters.traces_files();
    let workspace = setup.spec.workspace.as_deref().filter(|w| !w.is_empty());
    let doc = policy.credential_files();
    let ro = policy.read_only_files();
    let mut ro_paths = credential_files::in_workspace(&ro.paths, workspace);
    ro_paths.extend(crate::policy::nested_git::nested_git(&ro.paths, workspace));
    // agentsh's own files beneath a home (wrap's binaries, state, audit):
    // covered where a namespace can be had, else Landlock's as always.
    let own = setup.landlock.own_covers().cloned().unwrap_or_default();
    let own_any = !own.hide.is_empty() || !own.read_only.is_empty();
    if doc.hide.is_empty() && ro_paths.is_empty() && !own_any {
        return None;
    }
    let home = std::fs::read_to_string("/etc/passwd")
        .ok()
        .and_then(|t| crate::policy::landlock::home_of(caller.uid, &t));
    let found = |list: &[String]| {
        if list.is_empty() {
            Vec::new()
        } else {
            credential_files::existing_cached(list, home.as_deref())
        }
    };
    let (hidden, read_only) = (found(&doc.hide), found(&ro_paths));
    let userns = match namespace_for(caller, cap_eff, tracer_keeps_files) {
        Ok(mechanism) => {
            let (mut hidden, mut read_only) = (hidden, read_only);
            hidden.extend(own.hide);
            read_only.extend(own.read_only);
            let absent = absent_in_homes(&ro.paths, home.as_deref());
            return Some(CredentialPlan {
                paths: hidden.clone(),
                read_only: read_only.clone(),
                read_only_absent: absent.names,
                read_only_absent_parents: absent.parents,
                user_namespace: mechanism == USER_NAMESPACE,
                carves: Carves {
                    own_by_mount: own_any,
                    ..Carves::default()
                },
                summary: crate::audit::CredentialFilesSummary {
                    hidden,
                    read_only,
                    mechanism: mechanism.to_string(),
                },
            });
        }
        Err(why) => why,
    };
    Some(fallback(policy, caller, &userns, hidden, read_only))
}

/// What [`absent_in_homes`] found.
#[derive(Debug, Default, PartialEq, Eq)]
struct Absent {
    names: Vec<String>,
    parents: Vec<String>,
}

/// The `~/` entries of `list` that do not exist in a home that does: each
/// as its nearest existing directory (canonical, never above the home) and
/// the names below it, and the missing directories on the way (issue 61:
/// `mkdir -p ~/.local/share` then a move onto `~/.local/share/systemd`).
fn absent_in_homes(list: &[String], home: Option<&str>) -> Absent {
    let mut out = Absent::default();
    for h in credential_files::homes(home) {
        for rel in list.iter().filter_map(|e| e.strip_prefix("~/")) {
            let names: Vec<&str> = rel.split('/').collect();
            let at = |k: usize| format!("{h}/{}", names[..k].join("/"));
            if std::fs::symlink_metadata(at(names.len())).is_ok() {
                continue;
            }
            // The longest prefix that exists (0: the home itself).
            let mut k = names.len() - 1;
            while k > 0 && std::fs::symlink_metadata(at(k)).is_err() {
                k -= 1;
            }
            let base = if k == 0 { h.clone() } else { at(k) };
            let Some(base) = std::fs::canonicalize(&base)
                .ok()
                .and_then(|b| b.to_str().map(str::to_string))
            else {
                continue;
            };
            let below = |j: usize| format!("{base}/{}", names[k..j].join("/"));
            out.names.push(below(names.len()));
            out.parents.extend((k + 1..names.len()).map(below));
        }
    }
    out
}

/// The plan where no mount namespace can be had (`why`): each list's
/// `fallback`, the Landlock carve or left as it is (logged).
fn fallback(
    policy: &Policy,
    caller: Caller,
    why: &NoMountNamespace,
    hidden: Vec<String>,
    read_only: Vec<String>,
) -> CredentialPlan {
    let doc = policy.credential_files();
    let ro = policy.read_only_files();
    let carves = Carves {
        credentials: !doc.hide.is_empty() && doc.fallback == Fallback::Carve,
        read_only: !ro.paths.is_empty() && ro.fallback == ReadOnlyFallback::Carve,
        own_by_mount: false,
    };
    let mut said = Vec::new();
    if !doc.hide.is_empty() {
        said.push(if carves.credentials {
            "credential stores: landlock, read denied beneath them (a file the same command \
             creates directly in a home holding one is unreadable to it)"
        } else {
            "credential stores NOT HIDDEN (credential_files.fallback: readable)"
        });
    }
    if !ro.paths.is_empty() {
        said.push(if carves.read_only {
            "read-only files: landlock, write, create and delete denied beneath them (nothing \
             can be created or removed directly in a directory holding one)"
        } else {
            "read-only files NOT KEPT (read_only_files.fallback: writable)"
        });
    }
    let mechanism = format!("no mount namespace ({why}): {}", said.join("; "));
    if said.iter().any(|s| s.contains("NOT")) {
        tracing::warn!(uid = caller.uid, "{mechanism}");
    }
    CredentialPlan {
        paths: Vec::new(),
        read_only: Vec::new(),
        read_only_absent: Vec::new(),
        read_only_absent_parents: Vec::new(),
        user_namespace: false,
        carves,
        summary: crate::audit::CredentialFilesSummary {
            hidden: if carves.credentials {
                hidden
            } else {
                Vec::new()
            },
            read_only: if carves.read_only {
                read_only
            } else {
                Vec::new()
            },
            mechanism,
        },
    }
}

const USER_NAMESPACE: &str = "user namespace";

/// Which mount namespace the tree's unixwrap can make (`mount namespace`
/// with CAP_SYS_ADMIN; for an ordinary user, `user namespace` where the
/// host allows one), or why none.
fn namespace_for(
    caller: Caller,
    cap_eff: Option<u64>,
    tracer_keeps_files: bool,
) -> Result<&'static str, NoMountNamespace> {
    if tracer_keeps_files {
        return Err(NoMountNamespace::TracerKeepsFiles);
    }
    if has_admin(cap_eff) {
        return Ok("mount namespace");
    }
    // Root without CAP_SYS_ADMIN gets no user namespace: inside one its
    // capabilities would no longer reach the host's network or ids (no
    // port below 1024, no chown to another user, apt's drop to _apt).
    if caller.uid == 0 {
        return Err(NoMountNamespace::RootWithoutAdmin);
    }
    user_namespace_mounts().map(|()| USER_NAMESPACE)
}

/// Which Landlock fallbacks the ruleset takes.
pub(super) fn carves(plan: Option<&CredentialPlan>) -> Carves {
    plan.map(|c| c.carves).unwrap_or_default()
}

/// The plan's part of the tree's config: the stores unixwrap covers, and
/// whether it may make a user namespace for them.
pub(super) fn apply(plan: Option<&CredentialPlan>, config: &mut agentsh_proto::SeccompConfig) {
    if let Some(c) = plan {
        config.credential_files = c.paths.clone();
        config.read_only_files = c.read_only.clone();
        config.user_namespace = c.user_namespace;
    }
}

/// The caller's effective capabilities (see [`cap_eff`]) and its plan.
pub(super) fn for_caller(
    setup: &crate::session::Setup,
    caller: Caller,
) -> (Option<u64>, Option<CredentialPlan>) {
    let cap_eff = cap_eff(caller);
    (cap_eff, plan(setup, caller, cap_eff))
}

/// The caller's (the shim's, which execs unixwrap) effective capabilities,
/// read once per wrap-init for this plan and the daemon-socket masks;
/// `None`: unreadable.
fn cap_eff(caller: Caller) -> Option<u64> {
    let pid = caller.pid?;
    crate::tracee::access::effective_caps_of(pid)
        .ok()
        .or_else(|| crate::tracee::ProcStatus::read(pid).ok()?.mask("CapEff"))
}

/// Whether `cap_eff` holds CAP_SYS_ADMIN (unreadable: no).
pub(super) fn has_admin(cap_eff: Option<u64>) -> bool {
    const CAP_SYS_ADMIN: u32 = 21;
    cap_eff.is_some_and(|c| c & (1 << CAP_SYS_ADMIN) != 0)
}

/// Whether an ordinary process here can make a user namespace and mount
/// in it (probed once, in a child: as `nobody` when the server is root, as
/// the server's own uid otherwise), or why not.
pub fn user_namespace_mounts() -> Result<(), NoMountNamespace> {
    static PROBE: std::sync::OnceLock<Result<(), NoMountNamespace>> = std::sync::OnceLock::new();
    PROBE.get_or_init(probe_user_namespace).clone()
}

/// [`user_namespace_mounts`]'s probe. Everything the child needs is made
/// before the fork; the child makes raw syscalls only.
fn probe_user_namespace() -> Result<(), NoMountNamespace> {
    // SAFETY: plain id getters.
    let (euid, egid) = unsafe { (libc::geteuid(), libc::getegid()) };
    let (uid, gid) = if euid == 0 {
        (65534, 65534)
    } else {
        (euid, egid)
    };
    let uid_map = format!("{uid} {uid} 1\n");
    let gid_map = format!("{gid} {gid} 1\n");
    let paths: Vec<std::ffi::CString> = [
        "/proc/self/setgroups",
        "/proc/self/uid_map",
        "/proc/self/gid_map",
        "/dev/null",
    ]
    .iter()
    .map(|p| std::ffi::CString::new(*p).unwrap_or_default())
    .collect();
    let child = || -> i32 {
        let errno = || std::io::Error::last_os_error().raw_os_error().unwrap_or(1);
        // SAFETY: raw syscalls in a forked child, on buffers made before it.
        unsafe {
            if euid == 0
                && (libc::setgroups(0, std::ptr::null()) != 0
                    || libc::setresgid(gid, gid, gid) != 0
                    || libc::setresuid(uid, uid, uid) != 0)
            {
                return errno();
            }
            // A change of ids makes the process undumpable, and its
            // /proc/self files root's: the maps could not be written.
            if euid == 0 && libc::prctl(libc::PR_SET_DUMPABLE, 1, 0, 0, 0) != 0 {
                return errno();
            }
            if libc::unshare(libc::CLONE_NEWUSER | libc::CLONE_NEWNS) != 0 {
                return errno();
            }
            let write = |path: &std::ffi::CString, text: &str| -> bool {
                let fd = libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
                if fd < 0 {
                    return false;
                }
                let n = libc::write(fd, text.as_ptr().cast(), text.len());
                libc::close(fd);
                n == text.len() as isize
            };
            let _ = write(&paths[0], "deny");
            if !write(&paths[1], &uid_map) || !write(&paths[2], &gid_map) {
                return errno();
            }
            if libc::mount(
                paths[3].as_ptr(),
                paths[3].as_ptr(),
                std::ptr::null(),
                libc::MS_BIND,
                std::ptr::null(),
            ) != 0
            {
                return errno();
            }
        }
        0
    };
    match crate::detect::in_child(child) {
        Ok(0) => Ok(()),
        Ok(c) if c < 128 => Err(NoMountNamespace::UserNamespace(Arc::new(
            std::io::Error::from_raw_os_error(c),
        ))),
        Ok(c) => Err(NoMountNamespace::ProbeDied(c - 128)),
        Err(e) => Err(NoMountNamespace::ProbeNotRun(Arc::new(e))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CAP_SYS_ADMIN: u64 = 1 << 21;

    #[test]
    fn no_mount_namespace_where_the_tracer_keeps_the_files_or_for_root_without_admin() {
        let root = Caller {
            uid: 0,
            pid: Some(1),
        };
        let e = namespace_for(root, Some(CAP_SYS_ADMIN), true).unwrap_err();
        assert!(matches!(e, NoMountNamespace::TracerKeepsFiles), "{e:?}");
        assert_eq!(
            e.to_string(),
            "no Landlock here (gVisor?): the tracer keeps the file rules"
        );
        // Unreadable capabilities count as none: the stricter path.
        for cap_eff in [Some(0), None] {
            let e = namespace_for(root, cap_eff, false).unwrap_err();
            assert!(matches!(e, NoMountNamespace::RootWithoutAdmin), "{e:?}");
            assert_eq!(e.to_string(), "root without CAP_SYS_ADMIN");
        }
        assert_eq!(
            namespace_for(root, Some(CAP_SYS_ADMIN), false).unwrap(),
            "mount namespace"
        );
    }

    #[test]
    fn a_probe_that_fails_says_how() {
        let e = NoMountNamespace::UserNamespace(Arc::new(std::io::Error::from_raw_os_error(
            libc::EPERM,
        )));
        assert_eq!(
            e.to_string(),
            format!(
                "a user namespace with a mount in it: {}",
                std::io::Error::from_raw_os_error(libc::EPERM)
            )
        );
        assert!(std::error::Error::source(&e).is_some());
        assert_eq!(
            NoMountNamespace::ProbeDied(9).to_string(),
            "the user-namespace probe died (signal 9)"
        );
    }
}
