//! What the ruleset asks of the kernel, from the config alone: the rights
//! and scopes it handles once `landlock.max_abi` is applied, and under
//! `compat: required` whether this kernel can enforce them at all.
//!
//! `max_abi` (the operator's `landlock.max_abi`) makes unixwrap behave as on
//! a kernel that stops at that ABI: rights and scopes of later ABIs are not
//! asked for (Refer needs 2, Truncate 3, TCP 4, IoctlDev 5, scopes 6), the
//! `required` check compares against the capped ABI, and the report names the
//! cap.
//!
//! Failure modes: [`precheck`] refuses, before anything is installed, a
//! `required` ruleset the kernel (or the cap) cannot enforce. The plan itself
//! is pure and cannot fail.

use agentsh_proto::{FsAccess, LandlockCompat, LandlockConfig};
use landlock::{Access, AccessFs, AccessNet, BitFlags, Scope, ABI};

use super::error::LandlockError;
use super::rights::{handled_rights, union};

/// The landlock crate's ABI for a number (above the crate's newest: its newest).
pub(crate) fn abi_of(n: i64) -> ABI {
    match n {
        i64::MIN..=0 => ABI::Unsupported,
        1 => ABI::V1,
        2 => ABI::V2,
        3 => ABI::V3,
        4 => ABI::V4,
        5 => ABI::V5,
        6 => ABI::V6,
        7 => ABI::V7,
        8 => ABI::V8,
        _ => ABI::V9,
    }
}

/// Under `compat: required`, checked *before* the seccomp filter is loaded,
/// so a kernel that cannot enforce the ruleset is a refusal "before anything
/// was installed" (auto falls through, on refuses) rather than after.
///
/// # Errors
/// [`LandlockError::AbiTooLow`]: what the kernel lacks.
pub fn precheck(cfg: &LandlockConfig, kernel_abi: i64) -> Result<(), LandlockError> {
    if cfg.compat != LandlockCompat::Required {
        return Ok(());
    }
    let need = cfg.required_abi();
    if kernel_abi < need {
        return Err(LandlockError::AbiTooLow {
            need,
            offers: kernel_abi,
        });
    }
    Ok(())
}

/// What the ruleset handles once the ABI cap is applied. Pure: what is asked
/// of the kernel follows from the config alone.
#[derive(Debug, PartialEq)]
pub(crate) struct Plan {
    pub(crate) handled_fs: BitFlags<AccessFs>,
    /// Refer handled and granted on `/` (fs rights handled, creation not).
    pub(crate) refer_everywhere: bool,
    pub(crate) handled_net: BitFlags<AccessNet>,
    pub(crate) scopes: BitFlags<Scope>,
}

impl Plan {
    pub(crate) fn of(cfg: &LandlockConfig) -> Plan {
        // What the (possibly capped) ABI offers; a kernel below the cap still
        // decides for itself through the compatibility level.
        let cap = cfg.max_abi.filter(|c| *c > 0).map(abi_of);
        let fs_offered = cap.map_or(BitFlags::all(), AccessFs::from_all);
        let mut handled_fs = union(&cfg.handled_fs, handled_rights) & fs_offered;
        // See the module doc: keep reparenting allowed when creation is not handled.
        let refer_everywhere =
            !handled_fs.is_empty() && !cfg.handled_fs.contains(&FsAccess::Create);
        if refer_everywhere {
            handled_fs |= BitFlags::from(AccessFs::Refer) & fs_offered;
        }
        let net_offered = cap.map_or(true, |a| !AccessNet::from_all(a).is_empty());
        let mut handled_net: BitFlags<AccessNet> = BitFlags::empty();
        if cfg.tcp_connect_ports.is_some() && net_offered {
            handled_net |= AccessNet::ConnectTcp;
        }
        if cfg.tcp_bind_ports.is_some() && net_offered {
            handled_net |= AccessNet::BindTcp;
        }
        let scopes_offered = cap.map_or(true, |a| !Scope::from_all(a).is_empty());
        let mut scopes: BitFlags<Scope> = BitFlags::empty();
        if cfg.scope_signals && scopes_offered {
            scopes |= Scope::Signal;
        }
        if cfg.scope_abstract_unix && scopes_offered {
            scopes |= Scope::AbstractUnixSocket;
        }
        Plan {
            handled_fs,
            refer_everywhere,
            handled_net,
            scopes,
        }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.handled_fs.is_empty() && self.handled_net.is_empty() && self.scopes.is_empty()
    }

    /// Ports of a direction that is not handled (an ABI capped below 4) add nothing.
    pub(crate) fn ports(&self, p: Option<&Vec<u16>>, right: AccessNet) -> Vec<u16> {
        if self.handled_net.contains(right) {
            p.cloned().unwrap_or_default()
        } else {
            Vec::new()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::landlock::kernel_abi;
    use crate::landlock::tests::cfg;

    #[test]
    fn required_ruleset_on_an_older_kernel_is_refused_before_install() {
        let c = cfg(LandlockCompat::Required);
        assert_eq!(c.required_abi(), 6);
        assert!(precheck(&c, 0)
            .unwrap_err()
            .to_string()
            .contains("offers none"));
        assert!(matches!(
            precheck(&c, 4),
            Err(LandlockError::AbiTooLow { need: 6, offers: 4 })
        ));
        assert!(precheck(&c, 4)
            .unwrap_err()
            .to_string()
            .contains("needs Landlock ABI 6"));
        assert!(precheck(&c, 6).is_ok());
        // best_effort never refuses up front.
        assert!(precheck(&cfg(LandlockCompat::BestEffort), 0).is_ok());
    }

    #[test]
    fn a_cap_is_a_kernel_that_stops_there() {
        let mut c = cfg(LandlockCompat::Required);
        c.max_abi = Some(2);
        assert!(precheck(&c, c.effective_abi(7))
            .unwrap_err()
            .to_string()
            .contains("offers ABI 2"));
        assert_eq!(abi_of(2), ABI::V2);
        assert!(AccessNet::from_all(abi_of(2)).is_empty());
        assert!(Scope::from_all(abi_of(5)).is_empty());
        assert!(!Scope::from_all(abi_of(6)).is_empty());
    }

    #[test]
    fn the_plan_asks_only_what_the_capped_abi_offers() {
        let mut c = cfg(LandlockCompat::BestEffort);
        let full = Plan::of(&c);
        assert!(
            full.refer_everywhere,
            "creation is not handled: reparenting stays allowed"
        );
        assert!(full
            .handled_fs
            .contains(AccessFs::Truncate | AccessFs::Refer));
        assert_eq!(full.handled_net, BitFlags::from(AccessNet::ConnectTcp));
        assert_eq!(full.scopes, BitFlags::from(Scope::Signal));
        assert_eq!(
            full.ports(c.tcp_connect_ports.as_ref(), AccessNet::ConnectTcp),
            [443]
        );
        c.max_abi = Some(2);
        let two = Plan::of(&c);
        assert!(
            !two.handled_fs.contains(AccessFs::Truncate),
            "Truncate needs ABI 3"
        );
        assert!(two.handled_fs.contains(AccessFs::Refer));
        assert!(two.handled_net.is_empty() && two.scopes.is_empty());
        assert!(two
            .ports(c.tcp_connect_ports.as_ref(), AccessNet::ConnectTcp)
            .is_empty());
        c.max_abi = Some(1);
        assert!(!Plan::of(&c).handled_fs.contains(AccessFs::Refer));
        c.handled_fs = vec![FsAccess::Read, FsAccess::Create];
        c.max_abi = None;
        assert!(
            !Plan::of(&c).refer_everywhere,
            "creation handled: Refer rides with create"
        );
        let nothing = LandlockConfig {
            handled_fs: vec![],
            tcp_connect_ports: None,
            scope_signals: false,
            ..cfg(LandlockCompat::BestEffort)
        };
        assert!(Plan::of(&nothing).is_empty());
    }

    #[test]
    fn this_kernel_reports_its_abi() {
        // Landlock is expected on the test machines (ABI 7 on the reference kernel).
        if std::env::var("CI").as_deref() == Ok("true") {
            assert!(kernel_abi() >= 6, "abi {}", kernel_abi());
        }
    }
}
