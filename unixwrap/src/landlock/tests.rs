//! The config the Landlock tests share (here and in `crate::ahead`).

use agentsh_proto::{FsAccess, LandlockCompat, LandlockConfig};

/// A config handling reads and writes, TCP connects to 443 and signals.
pub(crate) fn cfg(compat: LandlockCompat) -> LandlockConfig {
    LandlockConfig {
        compat,
        handled_fs: vec![FsAccess::Read, FsAccess::Write],
        fs_rules: vec![],
        tcp_connect_ports: Some(vec![443]),
        tcp_bind_ports: None,
        scope_signals: true,
        scope_abstract_unix: false,
        max_abi: None,
        noexec_mounts: vec![],
    }
}
