//! Harness for the end-to-end tests of agentsh on the real kernel.
//!
//! `server` starts a real `agentsh server` on a temporary config and reads its
//! audit trail; `relay` plays the shim's role without the shim (socketpair,
//! unixwrap, fd relay); `ns` builds private mount namespaces with the shim over
//! `/bin/sh`; `sdk` emulates how each sandbox SDK spawns commands; `sandbox`
//! puts them together with a workspace, as root or as an ordinary user;
//! `rootfs` builds (and caches) a debootstrapped Debian root and runs commands
//! chrooted in it, for the package install tests; `vm` boots Debian's 6.1
//! kernel in a QEMU virtual machine over this machine's root (cgroup v2) and
//! runs a script in it.

pub mod attackers;
pub mod dns;
pub mod http_upstream;
pub mod ns;
pub mod podman;
pub mod recipes;
pub mod relay;
pub mod rootfs;
pub mod sandbox;
pub mod sdk;
pub mod server;
pub mod vm;
