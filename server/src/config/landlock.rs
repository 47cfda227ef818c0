//! `landlock.*`: how much Landlock enforcement a command needs before it
//! may run, and the highest ABI agentsh uses (a cap for testing what an
//! older kernel gets).
//!
//! Failure modes: none here; a cap above 64 is refused at load (`load`).

use serde::Deserialize;

/// How much Landlock enforcement a command needs before it may run.
#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LandlockSection {
    pub compat: agentsh_proto::LandlockCompat,
    /// The highest Landlock ABI agentsh uses (0: the kernel's).
    pub max_abi: u32,
}

impl Default for LandlockSection {
    fn default() -> Self {
        LandlockSection {
            compat: agentsh_proto::LandlockCompat::BestEffort,
            max_abi: 0,
        }
    }
}

impl LandlockSection {
    /// `max_abi` as a cap (`None`: no cap).
    pub fn cap(&self) -> Option<i64> {
        (self.max_abi > 0).then_some(i64::from(self.max_abi))
    }

    /// The Landlock ABI agentsh uses: the running kernel's, capped.
    pub fn effective_abi(&self) -> i64 {
        agentsh_proto::wire::effective_landlock_abi(
            agentsh_proto::wire::kernel_landlock_abi(),
            self.cap(),
        )
    }
}
