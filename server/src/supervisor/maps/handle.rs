//! One executable mapping of a file, from its stop to its answer: the fd's
//! file is read through `/proc/<tid>/fd/<fd>` with the fd table held still
//! (`fdhold`), judged (`judge`), answered; a refusal is audited (`file`
//! event, `syscall: mmap`, `right: execute`).
//!
//! Failure modes: a file that cannot be read or classified, or a thread
//! that cannot be held, is refused (EACCES) and audited with the reason; a
//! negative fd is the kernel's to answer (EBADF).

use super::elf::{self, Kind};
use crate::audit::{Builtin, EventBody, FileEvent, Refusal};
use crate::policy::Decision;
use crate::supervisor::context::SupervisorContext;
use crate::supervisor::fdhold::{with_fds_still, FdHoldError};
use crate::supervisor::seam::{Caught, Stop};
use crate::supervisor::tasks::Tasks;
use crate::supervisor::tree::Tree;
use agentsh_proto::mapabi::{MapSyscall, FD_ARG};
use std::collections::HashMap;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};

/// What the family keeps of a tree between calls: what each file it mapped
/// is, by identity and change time (a program and its libraries are
/// mapped again at every exec).
#[derive(Debug, Default)]
pub struct MapsState {
    kinds: HashMap<FileKey, Kind>,
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

/// Why a mapping is refused: the rule and the reason.
struct Refused {
    rule: &'static str,
    path: Option<String>,
    why: String,
}

/// Judges `call` (caught as `c`): the file at its fd, mapped executable.
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
    if fd < 0 {
        let _ = stop.proceed();
        return;
    }
    let mut refused = None;
    let decide = || match judge(tree, st, c.tid, fd) {
        Ok(()) => stop.proceed(),
        Err(r) => {
            refused = Some(r);
            stop.refuse(libc::EACCES)
        }
    };
    match with_fds_still(stop, tasks, c.tid, decide) {
        Ok(_) => {}
        Err(FdHoldError::Gone) => {
            let _ = stop.answer(-i64::from(libc::ESRCH));
        }
        Err(e) => {
            refused = Some(Refused {
                rule: Refusal::MemoryNotFrozen.rule(),
                path: None,
                why: format!(
                    "{} of fd {fd} executable from a threaded process: {e}, and one could swap \
                     another file in at that fd",
                    call.name
                ),
            });
            let _ = stop.refuse(libc::EACCES);
        }
    }
    if let Some(r) = refused {
        tracing::debug!(tid = c.tid, call = call.name, "{}", r.why);
        ctx.audit.record(
            &tree.session_id,
            EventBody::File(FileEvent {
                pid: c.tid,
                syscall: call.name.to_string(),
                path: r.path.clone().unwrap_or_else(|| format!("fd {fd}")),
                path2: None,
                resolved: r.path,
                right: Some("execute".into()),
                decision: Decision::Deny,
                rule: r.rule.to_string(),
                reason: r.why,
            }),
        );
    }
}

/// The file at `fd` of thread `tid` may be mapped executable, or why not.
fn judge(tree: &Tree, st: &mut MapsState, tid: u32, fd: i32) -> Result<(), Refused> {
    let link = format!("/proc/{tid}/fd/{fd}");
    let unreadable = |what: &str, e: std::io::Error| Refused {
        rule: Refusal::Unreadable.rule(),
        path: None,
        why: format!("the file at fd {fd} cannot be {what}: {e}"),
    };
    let path = std::fs::read_link(&link).map_err(|e| unreadable("named", e))?;
    let path = path.to_string_lossy();
    let path = path.strip_suffix(" (deleted)").unwrap_or(&path).to_string();
    if tree.exec_places.refuses(&path) {
        return Err(Refused {
            rule: Builtin::ExecSources.rule(),
            why: format!(
                "{path} is in a place the tree can write, and the policy maps nothing from \
                 there as code (exec_sources: writable: deny)"
            ),
            path: Some(path),
        });
    }
    if !tree.rules.policy.exec_memory_denied() {
        return Ok(());
    }
    let meta = std::fs::metadata(&link).map_err(|e| unreadable("read", e))?;
    if !meta.is_file() {
        return Err(Refused {
            rule: Builtin::ExecMemory.rule(),
            why: format!(
                "{path} is not a regular file, and under exec_memory: deny only files are \
                 mapped as code"
            ),
            path: Some(path),
        });
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
            let f = std::fs::OpenOptions::new()
                .read(true)
                .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC)
                .open(&link)
                .map_err(|e| unreadable("opened", e))?;
            let k = elf::kind(&f);
            if st.kinds.len() >= MAX_KINDS {
                st.kinds.clear();
            }
            st.kinds.insert(key, k);
            k
        }
    };
    match kind {
        Kind::Other => Ok(()),
        Kind::Program => Err(Refused {
            rule: Builtin::ExecMemory.rule(),
            why: format!(
                "{path} is a program image: under exec_memory: deny a program runs only \
                 through exec, where it is judged, never mapped by hand"
            ),
            path: Some(path),
        }),
        Kind::Malformed => Err(Refused {
            rule: Builtin::ExecMemory.rule(),
            why: format!(
                "{path} says it is ELF but its headers cannot be read, so whether it is a \
                 program cannot be told (exec_memory: deny)"
            ),
            path: Some(path),
        }),
    }
}
