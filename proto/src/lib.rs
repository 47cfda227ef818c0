//! Wire types and small shared mechanisms of agentsh.
//!
//! Everything the three binaries (`agentsh-shell-shim`, `agentsh-unixwrap`,
//! `agentsh`) must agree on lives here and only here: the wrap-init request and
//! response, the seccomp/Landlock configuration handed to unixwrap, the framing
//! of the notify-fd handoff, the environment variable names, the "already
//! supervised" marker and the `shim.conf` format.
//!
//! The crate stays dependency-light (serde, serde_json, libc) because the shim
//! links it and the shim runs for every shell in the container.

#![warn(missing_docs)]

pub mod active;
pub mod bpf;
pub mod env;
pub mod execabi;
pub mod exit;
pub mod fileabi;
pub mod handoff;
pub mod hint;
pub mod http;
pub mod install;
pub mod mapabi;
pub mod marker;
pub mod netabi;
pub mod notif;
pub mod rootabi;
pub mod seqpacket;
pub mod shimconf;
pub mod sigabi;
pub mod wire;

pub use wire::{
    ExecBackend, FsAccess, FsRule, LandlockCompat, LandlockConfig, SeccompConfig, WrapInitRequest,
    WrapInitResponse,
};
