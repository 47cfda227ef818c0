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
//! that cannot run counts as "no user namespace".

use crate::handoff::Caller;
use crate::policy::credential_files::{self, Fallback};
use crate::policy::Policy;

/// What wrap-init does about the stores, for unixwrap, Landlock and the event.
pub(super) struct CredentialPlan {
    /// The stores unixwrap covers (empty unless a namespace can be made).
    pub paths: Vec<String>,
    /// unixwrap may make a user namespace for the covers.
    pub user_namespace: bool,
    /// The ruleset denies `read` beneath the stores in the caller's home.
    pub carve: bool,
    /// The event's `credential_files`.
    pub summary: crate::audit::CredentialFilesSummary,
}

/// The plan for `caller` under `policy`; `None` when it hides nothing.
/// `tracer_keeps_files`: no Landlock here (gVisor) and the tracer keeps
/// the file rules; no tree can then have a mount namespace shown to be its
/// own (gVisor shows no namespace identity: unixwrap would refuse every
/// shell), so the fallback applies to all, kept by the tracer.
pub(super) fn plan(
    policy: &Policy,
    caller: Caller,
    tracer_keeps_files: bool,
) -> Option<CredentialPlan> {
    let no_namespaces =
        tracer_keeps_files.then_some("no Landlock here (gVisor?): the tracer keeps the file rules");
    let doc = policy.credential_files();
    if doc.hide.is_empty() {
        return None;
    }
    let home = std::fs::read_to_string("/etc/passwd")
        .ok()
        .and_then(|t| crate::policy::landlock::home_of(caller.uid, &t));
    let admin = no_namespaces.is_none() && caller_has_admin(caller);
    // Root without CAP_SYS_ADMIN gets no user namespace: inside one its
    // capabilities would no longer reach the host's network or ids (no
    // port below 1024, no chown to another user, apt's drop to _apt).
    let userns = if let Some(why) = no_namespaces {
        Err(why.to_string())
    } else if caller.uid == 0 {
        Err("root without CAP_SYS_ADMIN".to_string())
    } else {
        user_namespace_mounts()
    };
    let mechanism = match (admin, &userns) {
        (true, _) => Some("mount namespace".to_string()),
        (false, Ok(())) => Some("user namespace".to_string()),
        (false, Err(_)) => None,
    };
    if let Some(mechanism) = mechanism {
        let paths = credential_files::existing_cached(&doc.hide, home.as_deref());
        return Some(CredentialPlan {
            summary: crate::audit::CredentialFilesSummary {
                hidden: paths.clone(),
                mechanism,
            },
            paths,
            user_namespace: userns.is_ok(),
            carve: false,
        });
    }
    let why = userns.err().unwrap_or_default();
    let (carve, mechanism) = match doc.fallback {
        Fallback::Carve => (
            true,
            format!(
                "landlock: read denied beneath them (no mount namespace: {why}); a file the \
                 same command creates directly in a home holding one is unreadable to it"
            ),
        ),
        Fallback::Readable => {
            tracing::warn!(
                uid = caller.uid,
                "credential stores stay READABLE to this tree: no mount namespace ({why}) and \
                 the policy's credential_files.fallback is readable"
            );
            (
                false,
                format!(
                    "NOT HIDDEN (credential_files.fallback: readable; no mount namespace: {why})"
                ),
            )
        }
    };
    let hidden = if carve {
        credential_files::existing_cached(&doc.hide, home.as_deref())
    } else {
        Vec::new()
    };
    Some(CredentialPlan {
        paths: Vec::new(),
        user_namespace: false,
        carve,
        summary: crate::audit::CredentialFilesSummary { hidden, mechanism },
    })
}

/// Whether the ruleset takes the Landlock fallback.
pub(super) fn carves(plan: Option<&CredentialPlan>) -> bool {
    plan.is_some_and(|c| c.carve)
}

/// The plan's part of the tree's config: the stores unixwrap covers, and
/// whether it may make a user namespace for them.
pub(super) fn apply(plan: Option<&CredentialPlan>, config: &mut agentsh_proto::SeccompConfig) {
    if let Some(c) = plan {
        config.credential_files = c.paths.clone();
        config.user_namespace = c.user_namespace;
    }
}

/// Whether the caller (the shim, which execs unixwrap) has CAP_SYS_ADMIN.
fn caller_has_admin(caller: Caller) -> bool {
    const CAP_SYS_ADMIN: u32 = 21;
    caller
        .pid
        .and_then(|pid| crate::tracee::ProcStatus::read(pid).ok()?.mask("CapEff"))
        .is_some_and(|c| c & (1 << CAP_SYS_ADMIN) != 0)
}

/// Whether an ordinary process here can make a user namespace and mount
/// in it (probed once, in a child: as `nobody` when the server is root, as
/// the server's own uid otherwise), or why not.
pub fn user_namespace_mounts() -> Result<(), String> {
    static PROBE: std::sync::OnceLock<Result<(), String>> = std::sync::OnceLock::new();
    PROBE.get_or_init(probe_user_namespace).clone()
}

/// [`user_namespace_mounts`]'s probe. Everything the child needs is made
/// before the fork; the child makes raw syscalls only.
fn probe_user_namespace() -> Result<(), String> {
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
        Ok(c) if c < 128 => Err(format!(
            "a user namespace with a mount in it: {}",
            std::io::Error::from_raw_os_error(c)
        )),
        Ok(c) => Err(format!(
            "the user-namespace probe died (signal {})",
            c - 128
        )),
        Err(e) => Err(format!("cannot run the user-namespace probe: {e}")),
    }
}
