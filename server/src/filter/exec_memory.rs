//! The filter's rules on executable memory: the policy's `exec_memory: deny`
//! refused on register arguments, and the executable mappings of files sent
//! to the supervisor's `maps` family where the policy judges them.
//!
//! Why on registers: memory a program writes itself never becomes code,
//! whatever file it came from, so no supervisor round trip is needed to
//! refuse it; a file mapped executable is judged by the file behind its fd,
//! which only the supervisor can read.
//!
//! Failure modes: none here (rules are only collected); what libseccomp
//! refuses of them is a `FilterError::Build` when they are added
//! (`context::add_rules`). The two sets are disjoint: a call refused here is
//! never also sent to the supervisor.

use super::rules::{trap, Conditional};
use super::spec::{FilterSpec, TRACE_DATA_MAP};
use super::table::Cmp;
use libseccomp::ScmpAction;

/// A file mapped executable (`mmap`/`mmap2` with `PROT_EXEC`, neither
/// `PROT_WRITE` nor `MAP_ANONYMOUS`: the `exec_memory` rules refuse those)
/// goes to the supervisor, which judges the file behind the fd (its `maps`
/// family), and so does `mprotect`/`pkey_mprotect` to executable where
/// `exec_memory` does not refuse it. The rules are disjoint from the
/// `exec_memory` ones.
pub(super) fn exec_map_rules(spec: &FilterSpec, rules: &mut Conditional) {
    const PROT_EXEC: u64 = libc::PROT_EXEC as u64;
    const PROT_WRITE: u64 = libc::PROT_WRITE as u64;
    const MAP_ANONYMOUS: u64 = libc::MAP_ANONYMOUS as u64;
    for name in ["mmap", "mmap2"] {
        rules.add(
            name,
            trap(spec.backend, TRACE_DATA_MAP),
            vec![
                Cmp {
                    arg: agentsh_proto::mapabi::PROT_ARG as u32,
                    mask: PROT_EXEC | PROT_WRITE,
                    value: PROT_EXEC,
                },
                Cmp {
                    arg: agentsh_proto::mapabi::FLAGS_ARG as u32,
                    mask: MAP_ANONYMOUS,
                    value: 0,
                },
            ],
            format!("exec maps: {name} of a file, executable, judged by the supervisor"),
        );
    }
    // What is mapped already, made executable: under `exec_memory: deny`
    // the rules above refuse every such call; otherwise the supervisor
    // judges what lies in the range (a library the tree wrote, mapped
    // readable first, is still a library the tree wrote).
    if !spec.refuse_exec_memory {
        for name in ["mprotect", "pkey_mprotect"] {
            rules.add(
                name,
                trap(spec.backend, TRACE_DATA_MAP),
                vec![Cmp {
                    arg: agentsh_proto::mapabi::PROT_ARG as u32,
                    mask: PROT_EXEC,
                    value: PROT_EXEC,
                }],
                format!("exec maps: {name} to executable, judged by the supervisor"),
            );
        }
    }
}

/// The policy's `exec_memory: deny`, on register arguments (EACCES, as a
/// refused `execmem` is): memory a program writes itself never becomes code.
/// `mmap`/`mmap2` of executable anonymous memory, or of a mapping both
/// writable and executable; `mprotect`/`pkey_mprotect` to executable (a
/// file's code is mapped executable by `mmap`, never changed to it); `shmat`
/// with `SHM_EXEC`; `memfd_create` (a memfd is the file a program writes and
/// maps executable); `personality` adding `READ_IMPLIES_EXEC` (readable
/// then means executable). A file the tree wrote, mapped executable from a
/// read-only fd, is not caught here (see docs/security-model.md).
pub(super) fn exec_memory_rules(rules: &mut Conditional) {
    const PROT_EXEC: u64 = libc::PROT_EXEC as u64;
    const PROT_WRITE: u64 = libc::PROT_WRITE as u64;
    const MAP_ANONYMOUS: u64 = libc::MAP_ANONYMOUS as u64;
    const SHM_EXEC: u64 = 0o100000;
    let eacces = ScmpAction::Errno(libc::EACCES);
    for name in ["mmap", "mmap2"] {
        rules.add(
            name,
            eacces,
            vec![
                Cmp {
                    arg: 2,
                    mask: PROT_EXEC,
                    value: PROT_EXEC,
                },
                Cmp {
                    arg: 3,
                    mask: MAP_ANONYMOUS,
                    value: MAP_ANONYMOUS,
                },
            ],
            format!("exec_memory: {name} of executable anonymous memory"),
        );
        rules.add(
            name,
            eacces,
            vec![Cmp {
                arg: 2,
                mask: PROT_EXEC | PROT_WRITE,
                value: PROT_EXEC | PROT_WRITE,
            }],
            format!("exec_memory: {name} writable and executable"),
        );
    }
    for name in ["mprotect", "pkey_mprotect"] {
        rules.add(
            name,
            eacces,
            vec![Cmp {
                arg: 2,
                mask: PROT_EXEC,
                value: PROT_EXEC,
            }],
            format!("exec_memory: {name} to executable"),
        );
    }
    rules.add(
        "shmat",
        eacces,
        vec![Cmp {
            arg: 2,
            mask: SHM_EXEC,
            value: SHM_EXEC,
        }],
        "exec_memory: shmat with SHM_EXEC".into(),
    );
    // READ_IMPLIES_EXEC makes every readable mapping executable, though no
    // register the rules above read says PROT_EXEC. The kernel reads the
    // low 32 bits, and 0xffffffff only asks: refused is the bit with any
    // other of those clear, one rule per other bit (libseccomp takes one
    // comparison per argument and rule).
    const READ_IMPLIES_EXEC: u64 = 0x0040_0000;
    for other in (0..32)
        .map(|b| 1u64 << b)
        .filter(|b| *b != READ_IMPLIES_EXEC)
    {
        rules.add(
            "personality",
            eacces,
            vec![Cmp {
                arg: 0,
                mask: READ_IMPLIES_EXEC | other,
                value: READ_IMPLIES_EXEC,
            }],
            format!("exec_memory: personality(READ_IMPLIES_EXEC), bit {other:#x} clear"),
        );
    }
}
