//! A tree's Landlock ruleset built ahead, by the server, while the shim
//! loads its filter; the shim only enforces it.
//!
//! Building the ruleset (about 80 path rules, each opened and added) was the
//! largest step of the shim's own work. The server builds it instead, on a
//! thread of its own, from the same config it answered wrap-init with, and
//! sends the ruleset fd with its ACK; the shim enforces it with
//! `landlock_restrict_self` and closes it before anything of the tree runs.
//!
//! When it is the same ruleset: rules hold inodes, not names, so a ruleset
//! built by another process names the same files exactly when that process
//! resolves the paths as the tree would: the same mount namespace and the
//! same root ([`same_view`], checked by the server for the caller), and
//! `/proc/self` naming the tree's root (its pid is given). The shim's masks
//! come after and change no inode a rule holds (binds of the same directory,
//! `/dev/null` over sockets; a cover over a credential store hides what a
//! rule on the store itself would reach, which only removes access). A
//! ruleset is built ahead only when this kernel enforces everything the plan
//! handles ([`build`] says `None` otherwise), so the restriction is "fully
//! enforced" by construction and `compat: required` holds; anywhere else the
//! shim builds its own, as before.
//!
//! Failure modes: [`build`] returns the ruleset error (the server logs it and
//! sends its ACK without a ruleset: the shim builds its own); [`restrict`]
//! refuses an fd that is not a Landlock ruleset, and returns the kernel's
//! error (the caller then builds its own ruleset).

use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd};

use agentsh_proto::LandlockConfig;
use landlock::{Access, AccessFs, AccessNet, Scope};

use crate::landlock::{abi_of, handled, kernel_abi, LandlockError, Plan};
use crate::log::Log;

/// A ruleset built ahead, not yet enforced.
#[derive(Debug)]
pub struct Built {
    pub fd: OwnedFd,
    /// Path rules added and skipped (a path that does not exist, say).
    pub added: usize,
    pub skipped: usize,
}

/// Builds `cfg`'s ruleset for the tree whose root is `tree_pid`, or `None`
/// when this kernel would not enforce all of what it handles (or it handles
/// nothing): the tree then builds its own. The caller checked
/// [`same_view`].
///
/// # Errors
/// A step of building the ruleset failed.
pub fn build(cfg: &LandlockConfig, tree_pid: u32) -> Result<Option<Built>, LandlockError> {
    let plan = Plan::of(cfg);
    if plan.is_empty() || !fully_enforced(&plan, kernel_abi()) {
        return Ok(None);
    }
    // no_new_privs is the tree's to set (or not, with CAP_SYS_ADMIN): the
    // flag only tells the crate's own restrict, which is never called here.
    let (created, added, skipped) =
        crate::landlock::build(cfg, &plan, false, &Log::none(), tree_pid)?;
    let fd: Option<OwnedFd> = created.into();
    Ok(fd.map(|fd| Built { fd, added, skipped }))
}

/// Whether a kernel of Landlock ABI `abi` enforces every right and scope
/// the plan handles (what the crate would report as fully enforced).
fn fully_enforced(plan: &Plan, abi: i64) -> bool {
    let abi = abi_of(abi);
    plan.handled_fs & !AccessFs::from_all(abi) == landlock::BitFlags::empty()
        && plan.handled_net & !AccessNet::from_all(abi) == landlock::BitFlags::empty()
        && plan.scopes & !Scope::from_all(abi) == landlock::BitFlags::empty()
}

/// The log line for a tree restricted with a ruleset built ahead.
pub fn report_line(cfg: &LandlockConfig) -> String {
    format!(
        "landlock: the server's ruleset: abi={} status=fully_enforced {}",
        kernel_abi(),
        handled(cfg, &Plan::of(cfg)),
    )
}

/// Enforces the ruleset `fd` on this thread (`landlock_restrict_self`);
/// no_new_privs must already be set, or CAP_SYS_ADMIN held.
///
/// # Errors
/// `fd` is not a Landlock ruleset (`/proc/self/fd` says what it is), or the
/// kernel refused.
pub fn restrict(fd: BorrowedFd<'_>) -> std::io::Result<()> {
    let link = std::fs::read_link(format!("/proc/self/fd/{}", fd.as_raw_fd()))?;
    if link.as_os_str() != "anon_inode:[landlock-ruleset]" {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("the fd sent is {}, not a Landlock ruleset", link.display()),
        ));
    }
    // SAFETY: landlock_restrict_self takes an fd and flags, no memory.
    let rc = unsafe { libc::syscall(libc::SYS_landlock_restrict_self, fd.as_raw_fd(), 0u32) };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Whether process `pid` resolves paths as this one does: the same mount
/// namespace and the same root directory (their identities in `/proc`).
/// Anything unreadable is "no".
pub fn same_view(pid: u32) -> bool {
    use std::os::unix::fs::MetadataExt;
    let id = |p: String| std::fs::metadata(p).ok().map(|m| (m.dev(), m.ino()));
    let same = |a: String, b: &str| {
        let (x, y) = (id(a), id(b.to_string()));
        x.is_some() && x == y
    };
    same(format!("/proc/{pid}/ns/mnt"), "/proc/self/ns/mnt")
        && same(format!("/proc/{pid}/root"), "/proc/self/root")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;

    #[test]
    fn a_kernel_below_what_the_plan_handles_builds_nothing_ahead() {
        let cfg = crate::landlock::tests::cfg(agentsh_proto::LandlockCompat::Required);
        let plan = Plan::of(&cfg);
        // Signal scoping needs ABI 6, TCP rules 4, truncation 3.
        assert!(fully_enforced(&plan, 7));
        assert!(fully_enforced(&plan, 6));
        assert!(!fully_enforced(&plan, 5));
        assert!(!fully_enforced(&plan, 2));
        assert!(!fully_enforced(&plan, 0));
    }

    /// Built here for a child process (the tree's root stands for it), then
    /// enforced on a thread of this one: what the rules name is readable,
    /// the rest is not, and `/proc/self` names the child's entry, not ours.
    #[test]
    fn a_ruleset_built_ahead_enforces_its_rules_with_proc_self_the_trees() {
        use agentsh_proto::{FsAccess, FsRule};
        let mut child = std::process::Command::new("/bin/sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let tree = child.id();
        let rule = |path: &str| FsRule {
            path: path.into(),
            access: vec![FsAccess::Read],
        };
        let mut cfg = crate::landlock::tests::cfg(agentsh_proto::LandlockCompat::BestEffort);
        cfg.handled_fs = vec![FsAccess::Read];
        cfg.tcp_connect_ports = None;
        cfg.scope_signals = false;
        cfg.fs_rules = ["/usr", "/proc/self/status", "/nonexistent-x"]
            .into_iter()
            .map(rule)
            .collect();
        let built = build(&cfg, tree)
            .unwrap()
            .expect("this kernel enforces reads");
        assert_eq!((built.added, built.skipped), (2, 1), "{built:?}");
        let seen = std::thread::spawn(move || {
            // SAFETY: prctl with integer arguments; this thread only.
            let nnp = unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) };
            assert_eq!(nnp, 0);
            restrict(built.fd.as_fd()).unwrap();
            let can = |p: String| std::fs::read(&p).is_ok();
            (
                can("/usr/bin/env".into()),
                can("/etc/hostname".into()),
                can(format!("/proc/{tree}/status")),
                can(format!("/proc/{}/status", std::process::id())),
            )
        })
        .join()
        .unwrap();
        let _ = child.kill();
        let _ = child.wait();
        assert_eq!(
            seen,
            (true, false, true, false),
            "usr, etc, the tree's, ours"
        );
    }

    #[test]
    fn only_a_landlock_ruleset_is_enforced() {
        let f = std::fs::File::open("/proc/self/stat").unwrap();
        let e = restrict(std::os::fd::AsFd::as_fd(&f)).unwrap_err();
        assert!(e.to_string().contains("not a Landlock ruleset"), "{e}");
    }

    #[test]
    fn this_process_shares_its_own_view() {
        assert!(same_view(std::process::id()));
        assert!(!same_view(u32::MAX));
    }
}
