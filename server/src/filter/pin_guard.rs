//! The filter's side of the pinned region (`tracee::pin`): under the ptrace
//! backend, wherever the tracer copies what it judged into the caller's
//! region, every call that could make the region writable, remove it or map
//! something over it goes to the tracer when its range may reach the
//! region, and the tracer refuses the ones that do.
//!
//! "May reach" on register arguments: the address's upper 32 bits are the
//! region's window or the one below it, or the length is 4 GiB or more
//! (`pin::WINDOWS`, `pin::LONG`); nothing else can reach it. `shmat` with
//! `SHM_REMAP` anywhere goes too (a segment's size is not an argument).
//!
//! Disjoint from the executable-memory rules (`exec_memory`), as libseccomp
//! needs: a class of `mmap`/`mprotect`/`shmat` those rules already refuse
//! or send to the tracer (whose `maps` stops the tracer checks against the
//! region as well) gets no rule here.
//!
//! Failure modes: none here (rules are only collected).

use super::rules::{trap, Conditional};
use super::spec::{FilterSpec, TRACE_DATA_PIN};
use super::table::Cmp;
use crate::tracee::pin;
use libseccomp::ScmpCompareOp;

const HIGH: u64 = 0xffff_ffff_0000_0000;
const PROT_EXEC: u64 = libc::PROT_EXEC as u64;
const PROT_WRITE: u64 = libc::PROT_WRITE as u64;
const MAP_ANONYMOUS: u64 = libc::MAP_ANONYMOUS as u64;
const SHM_EXEC: u64 = 0o100_000;
const SHM_REMAP: u64 = 0o40_000;

/// Whether `spec`'s tree has its judged bytes pinned: the tracer judges its
/// path calls or its destinations.
pub(super) fn pins(spec: &FilterSpec) -> bool {
    spec.backend.trap() == agentsh_proto::wire::Trap::Tracer
        && (spec.trace_files || spec.net.egress)
}

/// The rules (see the module doc).
pub(super) fn pin_guard_rules(spec: &FilterSpec, rules: &mut Conditional) {
    let action = trap(spec.backend, TRACE_DATA_PIN);
    for (name, conds) in classes(spec) {
        for w in pin::WINDOWS {
            let mut c = conds.clone();
            c.push(window(0, w));
            rules.add(name, action, c, format!("pinned region: {name} near it"));
        }
        rules.add_op(
            name,
            action,
            conds,
            (1, ScmpCompareOp::GreaterEqual, pin::LONG),
            format!("pinned region: {name} of 4 GiB or more"),
        );
    }
    mremap_rules(spec, rules);
    shmat_rules(spec, rules);
}

/// Argument `arg`'s upper 32 bits are `w`.
fn window(arg: u32, w: u64) -> Cmp {
    Cmp {
        arg,
        mask: HIGH,
        value: w << 32,
    }
}

/// `(prot & mask) == value`.
fn prot(mask: u64, value: u64) -> Cmp {
    Cmp {
        arg: 2,
        mask,
        value,
    }
}

/// `(flags & MAP_ANONYMOUS) == value`.
fn anonymous(value: u64) -> Cmp {
    Cmp {
        arg: 3,
        mask: MAP_ANONYMOUS,
        value,
    }
}

/// The calls of (address, length) and, per call, the classes of its other
/// arguments no other rule takes.
fn classes(spec: &FilterSpec) -> Vec<(&'static str, Vec<Cmp>)> {
    let mut classes: Vec<(&str, Vec<Cmp>)> = vec![("mmap", vec![prot(PROT_EXEC, 0)])];
    // mmap: (EXEC, WRITE, ANON); exec_memory refuses EXEC+WRITE and
    // EXEC+ANON, the maps trap takes EXEC without WRITE or ANON.
    if !spec.refuse_exec_memory {
        classes.push((
            "mmap",
            vec![prot(PROT_EXEC | PROT_WRITE, PROT_EXEC | PROT_WRITE)],
        ));
        classes.push((
            "mmap",
            vec![
                prot(PROT_EXEC | PROT_WRITE, PROT_EXEC),
                anonymous(MAP_ANONYMOUS),
            ],
        ));
    }
    if !spec.judge_exec_maps {
        classes.push((
            "mmap",
            vec![prot(PROT_EXEC | PROT_WRITE, PROT_EXEC), anonymous(0)],
        ));
    }
    // mprotect to executable: refused or sent to the tracer by the others
    // when either is on.
    for name in ["mprotect", "pkey_mprotect"] {
        classes.push((name, vec![prot(PROT_EXEC, 0)]));
        if !(spec.refuse_exec_memory || spec.judge_exec_maps) {
            classes.push((name, vec![prot(PROT_EXEC, PROT_EXEC)]));
        }
    }
    for name in ["munmap", "madvise", "remap_file_pages"] {
        classes.push((name, Vec::new()));
    }
    classes
}

/// mremap: the old range (grown in place too) or a fixed new place.
fn mremap_rules(spec: &FilterSpec, rules: &mut Conditional) {
    let action = trap(spec.backend, TRACE_DATA_PIN);
    for w in pin::WINDOWS {
        for arg in [0, 4] {
            rules.add(
                "mremap",
                action,
                vec![window(arg, w)],
                "pinned region: mremap near it".into(),
            );
        }
    }
    for arg in [1, 2] {
        rules.add_op(
            "mremap",
            action,
            Vec::new(),
            (arg, ScmpCompareOp::GreaterEqual, pin::LONG),
            "pinned region: mremap of 4 GiB or more".into(),
        );
    }
}

/// shmat: near it, or SHM_REMAP anywhere; SHM_EXEC is exec_memory's.
fn shmat_rules(spec: &FilterSpec, rules: &mut Conditional) {
    let action = trap(spec.backend, TRACE_DATA_PIN);
    let flags = |value: u64| Cmp {
        arg: 2,
        mask: SHM_EXEC | SHM_REMAP,
        value,
    };
    let mut shm = vec![0];
    if !spec.refuse_exec_memory {
        shm.push(SHM_EXEC);
    }
    for exec in shm {
        for w in pin::WINDOWS {
            rules.add(
                "shmat",
                action,
                vec![window(1, w), flags(exec)],
                "pinned region: shmat near it".into(),
            );
        }
        rules.add(
            "shmat",
            action,
            vec![flags(exec | SHM_REMAP)],
            "pinned region: shmat with SHM_REMAP".into(),
        );
    }
}
