//! The filter's rules before libseccomp takes them: one rule, the
//! unconditional and the conditional sets, where a trap goes, and the
//! register comparisons the guards write. Pure data.

use super::table::Cmp;
use agentsh_proto::ExecBackend;
use libseccomp::{ScmpAction, ScmpCompareOp};
use std::collections::BTreeMap;

pub(super) const LOW32: u64 = 0xffff_ffff;

/// One rule before it is handed to libseccomp.
pub(super) struct Rule {
    pub(super) action: ScmpAction,
    pub(super) conds: Vec<Cmp>,
    /// Comparisons other than masked equality (argument, operator).
    pub(super) ops: Vec<(u32, ScmpCompareOp, u64)>,
    pub(super) what: String,
}

pub(super) fn low32(v: i64) -> u64 {
    u64::from(v as u32)
}

pub(super) fn eq32(arg: u32, v: i64) -> Cmp {
    Cmp {
        arg,
        mask: LOW32,
        value: low32(v),
    }
}

/// Where the supervisor's traps go: the notify fd, or the tracer (with
/// `data` saying which trap it is).
pub(super) fn trap(backend: ExecBackend, data: u16) -> ScmpAction {
    match backend.trap() {
        agentsh_proto::wire::Trap::UserNotif => ScmpAction::Notify,
        agentsh_proto::wire::Trap::Tracer => ScmpAction::Trace(data),
    }
}

/// Unconditional actions, by syscall: the first one set for a syscall stays.
#[derive(Default, Clone)]
pub(super) struct Unconditional(pub(super) BTreeMap<String, (ScmpAction, String)>);

impl Unconditional {
    pub(super) fn set(&mut self, name: &str, action: ScmpAction, what: String) {
        self.0.entry(name.to_string()).or_insert((action, what));
    }
}

/// Conditional rules, by syscall, in the order they are added.
#[derive(Default)]
pub(super) struct Conditional(pub(super) Vec<(String, Rule)>);

impl Conditional {
    pub(super) fn add(&mut self, name: &str, action: ScmpAction, conds: Vec<Cmp>, what: String) {
        self.0.push((
            name.to_string(),
            Rule {
                action,
                conds,
                ops: Vec::new(),
                what,
            },
        ));
    }

    /// A rule with an ordering comparison (`op` on argument `arg`) besides
    /// the masked equalities `conds`.
    pub(super) fn add_op(
        &mut self,
        name: &str,
        action: ScmpAction,
        conds: Vec<Cmp>,
        op: (u32, ScmpCompareOp, u64),
        what: String,
    ) {
        self.0.push((
            name.to_string(),
            Rule {
                action,
                conds,
                ops: vec![op],
                what,
            },
        ));
    }
}
