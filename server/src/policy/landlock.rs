//! From `file_rules` and `network_rules` to the Landlock ruleset unixwrap applies.
//!
//! Landlock is an allow-list: a handled right is denied everywhere except
//! beneath a path a rule grants it on, and a grant always covers the whole
//! subtree. So the compiler works per operation, by its kind
//! ([`super::semantics`]):
//!
//! * an operation is *handled* when any file rule names it; `write`, `create`
//!   and `delete` are always handled, and `read` when agentsh has state to
//!   hide (self-protection, below). An operation nothing handles is not
//!   restricted;
//! * an allow-list operation (an `allow` names it) is granted beneath each
//!   `allow` path; a handled operation no `allow` names (deny-only, or named
//!   by no rule at all) is granted on `/`. Every `deny` path *strictly
//!   beneath* a grant is carved out of it: the grant is replaced by grants on
//!   the grant's children, recursively, minus the denied path. The carved
//!   directories themselves get nothing (their own entries can then not be
//!   created, removed or renamed), and an entry created in them later is not
//!   covered. An allow beneath a deny is more specific and wins; at the same
//!   path, deny wins;
//! * paths are literal, or end in `/**` (the same thing for Landlock); other
//!   globs are refused when the policy is loaded;
//! * `${WORKSPACE}` comes from the server config, `${HOME}` from the caller
//!   uid's passwd entry, `${TMPDIR}` is `/tmp` (the environment of the tree is
//!   not trusted). An `allow` path whose variable has no value is skipped
//!   (that only removes access); a `deny` path whose variable has no value
//!   leaves its operation granted nowhere (skipping it would add access).
//!   Both are reported.
//!
//! Self-protection, whatever the policy says (threat: a tree, root included,
//! that turns enforcement off for the next command): no write, create or
//! delete beneath [`SelfProtection::no_write`] — the shim and real shells,
//! the system binaries and libraries the shim and unixwrap load before any
//! filter exists, `/etc` (`ld.so.preload`, `shim.conf`), agentsh's binaries,
//! policies, state and audit. Those are denials no allow can override. TCP
//! connect to the API port is removed from every allow-list, but Landlock
//! cannot deny one port while allowing all others (short of listing the
//! 65,534 others, which the loader refuses as too costly per shell): a policy
//! that leaves connect open (no connect rule, or `ports: any` allowed) leaves
//! the API port reachable, and the compiled summary says so
//! (`api_port_reachable`). When an explicit `allow` grant (not `/`) has to
//! be split around a protected path, a warning names it.
//! Signals and abstract unix sockets are always scoped to the tree, and any
//! Landlock domain already stops ptrace of processes outside it.
//!
//! Failure modes: none at compile time; what cannot be expressed is left out
//! in the stricter direction and listed in [`CompiledLandlock::warnings`]: a
//! carve that cannot list a directory (or would grant more than
//! [`MAX_CARVE_CHILDREN`] entries one by one) grants nothing there (also in
//! [`CompiledLandlock::carve_failures`], which `agentsh policy check`
//! reports), and a `deny` whose variable has no value for this tree makes its
//! operation granted nowhere rather than everywhere.
//!
//! Rooms: `protect` (what no policy can open), `paths` (rule paths to
//! paths, the filesystem view), `operations` (grants and denies per
//! operation), `carve` (grants minus denies, as path rules), `ruleset` (the
//! compiled ruleset and its summary), `session` (per wrap-init, cached).

mod carve;
mod operations;
mod paths;
mod protect;
mod ruleset;
mod session;

pub use super::semantics::landlock_base;
pub(crate) use super::stamp::SETTLE;
pub use carve::{CarveFailure, MAX_CARVE_CHILDREN, MAX_FS_RULES};
pub use operations::{ExecPlaces, RULE_EXEC_SOURCES};
pub use paths::{FsView, HostFs, SessionVars};
pub use protect::{SelfProtection, KERNEL_NO_WRITE, OWN_OOM_SCORE_ADJ, SYSTEM_NO_WRITE};
pub use ruleset::{cap_abi, compile, tcp_ports, CompiledLandlock, LandlockSummary};
pub use session::{home_of, Carves, SessionLandlock, CACHED_UIDS};

#[cfg(test)]
#[path = "landlock_tests.rs"]
mod tests;
