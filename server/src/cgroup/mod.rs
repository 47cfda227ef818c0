//! Limits per session (processes, memory, CPU, wall time), through cgroup
//! v2: each tree whose session has `limits:` gets a cgroup of its own,
//! made at its wrap-init beneath the server's, with the limits written and
//! the shell's first process (the shim, before anything of the command
//! runs) moved into it; everything the tree starts is born there.
//!
//! Where: the server's own cgroup, found from `/proc/self/cgroup` (`0::`)
//! and the cgroup2 mount in `/proc/self/mountinfo` (a container's
//! namespaced `/sys/fs/cgroup` too). It must offer the controllers the
//! limits need (`cgroup.controllers`) and be the server's to write: root on
//! a host, or a delegated cgroup (systemd's `Delegate=yes`, a container
//! with a writable cgroup). The first tree with limits enables the
//! controllers for the cgroup's children (`cgroup.subtree_control`); a
//! cgroup that holds processes cannot do that (the kernel's "no internal
//! processes" rule), so the server first moves itself into a leaf of its
//! own, `agentsh-server`. A cgroup that still holds other processes (an
//! SDK daemon beside the server) is said, not rearranged, except where it
//! is the root of the server's cgroup namespace and not the host's root
//! cgroup: a container's own cgroup, whose processes are the container's
//! (`agentsh entrypoint` and the SDK daemon beside the server); they are
//! moved into a leaf, `agentsh-others`, as an init system's scope would be.
//! The answer is kept: one try per server.
//!
//! Why the tree cannot undo it: its filter refuses `clone3` (so no
//! `CLONE_INTO_CGROUP`), `mount`, and its Landlock ruleset gives no write
//! to `/sys`; the attack tests try each (tests/tests/limits.rs).
//!
//! Failure modes: no cgroup v2, the controllers elsewhere (a cgroup v1
//! host, as this project's own CI machine is), a cgroup not writable or
//! shared: [`Cgroups::delegation`] says which and why (a [`CgroupError`]);
//! a session whose limits are `required` then refuses its shells with that
//! reason (`api::wrap_init`), `best_effort` runs them unlimited and says so.
//!
//! Rooms: `probe` (where the cgroup is, what it offers), `delegation`
//! (the server's cgroup made one whose children can be limited, and
//! `assess`), `tree` (one tree's cgroup), `error` (what stands in the
//! way); the `limits:` document is `vocab::limits`.

mod delegation;
mod error;
mod probe;
pub mod tree;

pub use delegation::{assess, Cgroups, Delegation};
pub use error::CgroupError;
pub use probe::{probe, Probe, CONTROLLERS};
pub use tree::TreeCgroup;
