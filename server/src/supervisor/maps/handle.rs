//! One executable mapping, from its stop to its answer: for `mmap`, the
//! fd's file is read through `/proc/<tid>/fd/<fd>` with the fd table held
//! still; for `mprotect` to executable, what is mapped in the range is
//! read from the caller's maps with every task sharing its memory held
//! still (`fdhold`); judged, answered; a refusal is audited (`file` event,
//! `syscall: mmap`/`mprotect`, `right: execute`).
//!
//! Failure modes: a file or maps that cannot be read or classified, or a
//! task that cannot be held, is refused (EACCES) and audited with the
//! reason; a negative fd is the kernel's to answer (EBADF), and a range
//! with a hole in it is answered ENOMEM, as the kernel would.
//!
//! What it asks the kernel and `/proc` (the fd's name, `stat` and file, the
//! caller's maps) goes through the context's `tracee::host::Host`, and the
//! hold through its `stops::TaskStops`: the unit tests (`maps::tests`) drive
//! [`handle`] with their recording doubles and check each branch above,
//! its answer and its event, without root.

use super::elf::{self, Kind};
use crate::audit::{EventBody, FileEvent};
use crate::policy::Decision;
use crate::supervisor::context::SupervisorContext;
use crate::supervisor::fdhold::{FdHoldError, Scope};
use crate::supervisor::seam::{Caught, Stop};
use crate::supervisor::tasks::Tasks;
use crate::supervisor::tree::Tree;
use crate::tracee::host::Host;
use crate::vocab::{Builtin, Refusal};
use agentsh_proto::mapabi::{MapKind, MapSyscall, ADDR_ARG, FD_ARG, LEN_ARG};
use std::collections::HashMap;
use std::os::unix::fs::MetadataExt;

/// What the family keeps of a tree between calls: what each file it mapped
/// is, by identity and change time (a program and its libraries are
/// mapped again at every exec).
#[derive(Debug, Default)]
pub struct MapsState {
    kinds: HashMap<FileKey, Kind>,
    /// The files each thread was told are refused as code.
    told: crate::explain::Told<String>,
}

/// Kept kinds before the cache starts over.
const MAX_KINDS: usize = 4096;

/// A file as it was when classified: another file, or the same changed,
/// is another key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct FileKey {
    dev: u64,
    ino: u64,
    size: u64,
    mtime: (i64, i64),
    ctime: (i64, i64),
}

/// The answer to one call.
enum Verdict {
    Allow,
    /// Part of an `mprotect` range is mapped by nothing (the kernel's
    /// ENOMEM).
    Unmapped,
    Refuse(Refused),
}

/// Why a mapping is refused: the rule, the file, and the reason.
struct Refused {
    rule: &'static str,
    path: Option<String>,
    why: String,
}

/// Judges `call` (caught as `c`): a file mapped executable.
pub fn handle(
    ctx: &SupervisorContext,
    tree: &Tree,
    tasks: &mut Tasks,
    st: &mut MapsState,
    call: &'static MapSyscall,
    c: &Caught,
    stop: &dyn Stop,
) {
    let fd = c.args[FD_ARG] as u32 as i32;
    let (scope, what) = match call.kind {
        MapKind::Mmap if fd < 0 => {
            let _ = stop.proceed();
            return;
        }
        MapKind::Mmap => (Scope::Fds, format!("fd {fd}")),
        MapKind::Mprotect => (
            Scope::Memory,
            format!("{:#x}+{:#x}", c.args[ADDR_ARG], c.args[LEN_ARG]),
        ),
    };
    let mut refused = None;
    let host = &*ctx.host;
    let mut decide = || {
        let verdict = match call.kind {
            MapKind::Mmap => judge(host, tree, st, c.tid, fd),
            MapKind::Mprotect => judge_range(host, tree, c.tid, c.args[ADDR_ARG], c.args[LEN_ARG]),
        };
        match verdict {
            Verdict::Allow => stop.proceed(),
            Verdict::Unmapped => stop.refuse(libc::ENOMEM),
            Verdict::Refuse(r) => {
                // Told before the answer: the caller may be gone right after.
                tell(ctx, st, call, c, &what, &r);
                refused = Some(r);
                stop.refuse(libc::EACCES)
            }
        }
    };
    match ctx.stops.hold_still(stop, tasks, c.tid, scope, &mut decide) {
        Ok(_) => {}
        Err(FdHoldError::Gone) => {
            let _ = stop.answer(-i64::from(libc::ESRCH));
        }
        Err(e) => {
            let r = Refused {
                rule: Refusal::MemoryNotFrozen.rule(),
                path: None,
                why: format!(
                    "{} of {what} executable: {e}, and another task could change what it names \
                     meanwhile",
                    call.name
                ),
            };
            tell(ctx, st, call, c, &what, &r);
            refused = Some(r);
            let _ = stop.refuse(libc::EACCES);
        }
    }
    if let Some(r) = refused {
        report(ctx, tree, call, c, what, r);
    }
}

/// Tells the caller why its mapping is refused (once per thread and file),
/// before the refusal is answered.
fn tell(
    ctx: &SupervisorContext,
    st: &mut MapsState,
    call: &MapSyscall,
    c: &Caught,
    what: &str,
    r: &Refused,
) {
    let path = r.path.clone().unwrap_or_else(|| what.to_string());
    if ctx.limits.explain == crate::config::Explain::Stderr && st.told.first(c.tid, path.clone()) {
        let line = crate::explain::refused_file(call.name, &path, Some("execute"), r.rule, &r.why);
        crate::explain::tell(c.tid, &line);
    }
}

/// A refused mapping, audited.
fn report(
    ctx: &SupervisorContext,
    tree: &Tree,
    call: &MapSyscall,
    c: &Caught,
    what: String,
    r: Refused,
) {
    tracing::debug!(tid = c.tid, call = call.name, "{}", r.why);
    ctx.audit.record(
        &tree.session_id,
        EventBody::File(FileEvent {
            pid: c.tid,
            syscall: call.name.to_string(),
            path: r.path.clone().unwrap_or(what),
            path2: None,
            resolved: r.path,
            right: Some("execute".into()),
            decision: Decision::Deny,
            rule: r.rule.to_string(),
            reason: r.why,
        }),
    );
}

fn refuse(rule: &'static str, path: &str, why: String) -> Verdict {
    Verdict::Refuse(Refused {
        rule,
        path: Some(path.to_string()),
        why,
    })
}

fn unreadable(why: String) -> Verdict {
    Verdict::Refuse(Refused {
        rule: Refusal::Unreadable.rule(),
        path: None,
        why,
    })
}

/// Under `exec_sources: {writable: deny}`: why the file named `name` (as
/// the kernel names it) is code the tree wrote, if it is: beneath a place
/// it can write, a memfd, or no file at all.
fn tree_written(tree: &Tree, name: &str) -> Option<Verdict> {
    if tree.exec_places.denied.is_empty() {
        return None;
    }
    let path = name.strip_suffix(" (deleted)").unwrap_or(name);
    let rule = Builtin::ExecSources.rule();
    if path.starts_with("/memfd:") || !path.starts_with('/') {
        return Some(refuse(
            rule,
            path,
            format!(
                "{path} is memory the tree could write, not an installed file, and the policy \
                 maps nothing it wrote as code (exec_sources: writable: deny)"
            ),
        ));
    }
    tree.exec_places.refuses(path).then(|| {
        refuse(
            rule,
            path,
            format!(
                "{path} is in a place the tree can write, and the policy maps nothing from \
                 there as code (exec_sources: writable: deny)"
            ),
        )
    })
}

/// The file at `fd` of thread `tid`, mapped executable.
fn judge(host: &dyn Host, tree: &Tree, st: &mut MapsState, tid: u32, fd: i32) -> Verdict {
    let name = match host.fd_name(tid, fd) {
        Ok(p) => p.to_string_lossy().into_owned(),
        Err(e) => return unreadable(format!("the file at fd {fd} cannot be named: {e}")),
    };
    if let Some(v) = tree_written(tree, &name) {
        return v;
    }
    if !tree.rules().policy.exec_memory_denied() {
        return Verdict::Allow;
    }
    let path = name.strip_suffix(" (deleted)").unwrap_or(&name);
    let meta = match host.fd_meta(tid, fd) {
        Ok(m) => m,
        Err(e) => return unreadable(format!("the file at fd {fd} cannot be read: {e}")),
    };
    let rule = Builtin::ExecMemory.rule();
    if !meta.is_file() {
        return refuse(
            rule,
            path,
            format!(
                "{path} is not a regular file, and under exec_memory: deny only files are \
                 mapped as code"
            ),
        );
    }
    let key = FileKey {
        dev: meta.dev(),
        ino: meta.ino(),
        size: meta.size(),
        mtime: (meta.mtime(), meta.mtime_nsec()),
        ctime: (meta.ctime(), meta.ctime_nsec()),
    };
    let kind = match st.kinds.get(&key) {
        Some(k) => *k,
        None => {
            // Non-blocking: the fd table is held, so this is the fd's file.
            let f = match host.fd_open(tid, fd) {
                Ok(f) => f,
                Err(e) => return unreadable(format!("the file at fd {fd} cannot be opened: {e}")),
            };
            let k = elf::kind(&f);
            if st.kinds.len() >= MAX_KINDS {
                st.kinds.clear();
            }
            st.kinds.insert(key, k);
            k
        }
    };
    match kind {
        Kind::Other => Verdict::Allow,
        Kind::Program => refuse(
            rule,
            path,
            format!(
                "{path} is a program image: under exec_memory: deny a program runs only \
                 through exec, where it is judged, never mapped by hand"
            ),
        ),
        Kind::Malformed => refuse(
            rule,
            path,
            format!(
                "{path} says it is ELF but its headers cannot be read, so whether it is a \
                 program cannot be told (exec_memory: deny)"
            ),
        ),
    }
}

/// What thread `tid` has mapped at `addr..addr+len`, made executable
/// (only under `exec_sources: {writable: deny}` without `exec_memory:
/// deny`, which refuses it in the filter): anonymous memory is
/// `exec_memory`'s to judge; a file mapping is judged as `mmap` judges it.
fn judge_range(host: &dyn Host, tree: &Tree, tid: u32, addr: u64, len: u64) -> Verdict {
    const PAGE: u64 = 4096;
    let Some(end) = addr
        .checked_add(len)
        .and_then(|e| e.checked_add(PAGE - 1))
        .map(|e| e & !(PAGE - 1))
    else {
        return Verdict::Unmapped;
    };
    let mut maps = match host.maps(tid) {
        Ok(m) => m,
        Err(e) => return unreadable(format!("the caller's maps cannot be read: {e}")),
    };
    let mut at = addr & !(PAGE - 1);
    while at < end {
        let v = match maps.find(at) {
            Ok(v) if v.start <= at => v,
            Ok(_) => return Verdict::Unmapped,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Verdict::Unmapped,
            Err(e) => return unreadable(format!("the caller's maps cannot be read: {e}")),
        };
        if v.inode != 0 {
            if let Some(refused) = tree_written(tree, &v.name) {
                return refused;
            }
        }
        at = v.end;
    }
    Verdict::Allow
}
