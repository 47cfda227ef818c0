//! Gathering the facts of one exec in the calling thread's view: steps 1–4
//! of `exec`'s module doc (who, the path, the race guard, argv and where its
//! strings live), then what the decision needs besides: the `#!`
//! interpreters the kernel will start, whether every lookup it will repeat
//! passes only through directories the tree cannot change, and what the
//! program is beyond its name (`recognise`: the copies the identity index
//! knows, a dynamic loader's payload).
//!
//! The order of the reads is the race guard: the path is read and resolved
//! first, and read again once every task that shares the caller's memory is
//! stopped; argv and the mappings of its strings are read after that.
//!
//! Every question to the kernel and `/proc` whose failure is a refusal goes
//! through the context's `tracee::host::Host` and `stops::TaskStops`
//! (recording doubles in `exec::tests`); the strings are read from the
//! caller's memory ([`MemReader`]).
//!
//! Failure modes: anything that cannot be read, resolved or frozen is
//! [`Gather::Refused`] with its rule (`unreadable`, `unresolvable`,
//! `memory_not_frozen`, `shared_memory`, `interpreter_chain`, and
//! `recognise`'s `loader_payload` and `fileless_exec`) and the reason;
//! a caller that vanished, or a path that names nothing, is
//! [`Gather::Answer`] with the errno to answer (no decision, no event).

use super::identity::IdentityIndex;
use super::recognise::{loader_payloads, recognise, Caller};
use super::request::ExecRequest;
use super::state::ExecTree;
use super::undecidable::{undecidable, Undecidable};
use crate::audit::Memory;
use crate::config::RaceGuard;
use crate::supervisor::context::SupervisorContext;
use crate::supervisor::phases;
use crate::supervisor::procfiles::ProcFiles;
use crate::supervisor::sharing::{FreezeError, Frozen, Sharing};
use crate::supervisor::stops::TaskStops;
use crate::supervisor::vma;
use crate::tracee::host::Host;
use crate::tracee::maps;
use crate::tracee::{self, ExecTarget, MemReader, ResolveError, StatFile, View};
use crate::vocab::Refusal;
use agentsh_proto::execabi::ExecArgs;

/// The facts of one exec, once gathered.
pub(super) struct Gathered {
    pub(super) stat: tracee::ProcStat,
    pub(super) target: ExecTarget,
    pub(super) argv: tracee::Argv,
    pub(super) memory: Memory,
    /// The `#!` interpreters the kernel will start, outermost first.
    pub(super) chain: Vec<tracee::ChainLink>,
    /// Every path lookup the kernel will repeat passes only through
    /// directories the tree cannot change (`tracee::path_is_stable`).
    pub(super) stable: bool,
    /// What the identity index says about the program and each interpreter.
    pub(super) recognised: super::identity::Recognised,
    pub(super) recognised_chain: Vec<super::identity::Recognised>,
    /// When the program is a dynamic loader: the programs it will map,
    /// outermost first, each resolved as the loader will open it.
    pub(super) payloads: Vec<crate::policy::Interpreter>,
    /// Open `/proc` files, closed after the answer (each close costs
    /// microseconds the tracee need not wait for).
    _close_later: (View, StatFile, Option<maps::Maps>),
}

/// The name the kernel gives a script's interpreter (`bprm->filename`).
fn kernel_filename(args: &ExecArgs, path: &[u8]) -> String {
    let p = String::from_utf8_lossy(path).into_owned();
    if p.starts_with('/') || args.dirfd == libc::AT_FDCWD {
        p
    } else if p.is_empty() {
        format!("/dev/fd/{}", args.dirfd)
    } else {
        format!("/dev/fd/{}/{p}", args.dirfd)
    }
}

/// Whether the lookups of the program and of its interpreters can be
/// changed by the tree between the decision and the kernel's lookup, and
/// whether the tree can write the files themselves (their `#!` lines). `uid`
/// is the caller's (the owner of its `/proc` entries: root when it is not
/// dumpable, the stricter reading).
fn lookups_stable(
    view: &View,
    uid: u32,
    args: &ExecArgs,
    target: &ExecTarget,
    chain: &[tracee::ChainLink],
) -> bool {
    let root = view.root_prefix();
    let no_write = crate::policy::landlock::SYSTEM_NO_WRITE;
    let file = |t: &ExecTarget| tracee::file_is_stable(&t.meta, t.canonical(), uid, no_write);
    // execveat(fd, "", AT_EMPTY_PATH) looks nothing up: the fd is the file.
    let program = (args.flags & libc::AT_EMPTY_PATH != 0 && target.filename.is_empty())
        || tracee::path_is_stable(
            &root,
            &target.filename,
            Some(target.canonical()),
            uid,
            no_write,
        );
    program
        && file(target)
        && chain.iter().all(|l| {
            let canonical = l.target.as_ref().map(ExecTarget::canonical);
            tracee::path_is_stable(&root, &l.path, canonical, uid, no_write)
                && l.target.as_ref().is_none_or(file)
        })
}

/// The outcome of reading the path once.
enum PathRead {
    Target(Box<Resolved>),
    /// The kernel would answer this errno: no exec happens.
    Missing(i32),
}

/// A path read and resolved: its bytes, the view it was resolved in, the file.
struct Resolved {
    path: Vec<u8>,
    view: View,
    target: ExecTarget,
}

/// A reader of the caller's memory that has read, in one system call, the
/// pages the path and the argv array start in (argv[0] is usually the path
/// itself, the other strings next to it).
fn strings_reader(req: &ExecRequest, max_argc: usize) -> MemReader {
    let a = &req.args;
    let mut mem = MemReader::new(req.tid);
    mem.prefetch(&[
        (a.path, libc::PATH_MAX as usize + 1),
        (a.argv, (max_argc + 1) * a.ptr_size),
    ]);
    mem
}

fn read_path(
    host: &dyn Host,
    pid: u32,
    req: &ExecRequest,
    mem: &mut MemReader,
    root: &mut tracee::KeptRoot,
) -> Result<PathRead, Undecidable> {
    let a = &req.args;
    if a.path == 0 {
        return Err(undecidable(
            Refusal::Unreadable,
            "exec path pointer is NULL".into(),
        ));
    }
    let read = match &req.instead {
        Some(p) => Ok((p.clone(), true)),
        None => mem.cstring(a.path, libc::PATH_MAX as usize),
    };
    let path = match read {
        Ok((p, true)) => p,
        Ok((_, false)) => {
            return Err(undecidable(
                Refusal::Unreadable,
                "exec path longer than PATH_MAX".into(),
            ))
        }
        Err(e) => {
            return Err(undecidable(
                Refusal::Unreadable,
                format!("exec path cannot be read: {e}"),
            ))
        }
    };
    let unresolvable = |e: std::io::Error| {
        undecidable(
            Refusal::Unresolvable,
            format!(
                "exec path {:?} cannot be resolved in the calling thread's view: {e}",
                String::from_utf8_lossy(&path)
            ),
        )
    };
    let view = host.view(root, pid, req.tid).map_err(unresolvable)?;
    let empty_path = a.flags & libc::AT_EMPTY_PATH != 0;
    match host.resolve(&view, a.dirfd, &path, empty_path) {
        Ok(target) => Ok(PathRead::Target(Box::new(Resolved { path, view, target }))),
        Err(ResolveError::Missing(errno)) => Ok(PathRead::Missing(errno)),
        Err(ResolveError::Other(e)) => Err(unresolvable(e)),
    }
}

/// The path read again once the tasks sharing the caller's memory are
/// stopped. When it reads the same bytes, names an absolute path outside
/// `/proc` and `/dev` (no fd table, no cwd, no `/proc/self` in the lookup)
/// and the caller's root is still the directory the first resolution used,
/// a second resolution would take the same inputs: the first one stands
/// (whether the file system changed meanwhile is the stability check's and
/// the verification's question, as for any resolution). Otherwise it is
/// resolved again. A root that is not the tree's kept one, though no
/// `chroot` was seen, ends the kept root for the tree (each exec reads its
/// caller's root from then on).
fn read_path_again(
    host: &dyn Host,
    pid: u32,
    req: &ExecRequest,
    mem: &mut MemReader,
    first: Box<Resolved>,
    root: &mut tracee::KeptRoot,
) -> Result<PathRead, Undecidable> {
    let same = mem
        .cstring(req.args.path, libc::PATH_MAX as usize)
        .is_ok_and(|(p, whole)| whole && p == first.path);
    let plain = first.path.starts_with(b"/") && {
        let clean = tracee::join_clean("/", &String::from_utf8_lossy(&first.path));
        !clean.starts_with("/proc/") && !clean.starts_with("/dev/")
    };
    // Asked whenever the root is the kept one (the check that it still
    // is), else only where the first resolution could stand.
    let asked = root.kept() || (same && plain);
    let unchanged = asked && first.view.root_unchanged();
    if asked && !unchanged && root.kept() {
        tracing::warn!(
            pid,
            "the caller's root is not its tree's kept root though no chroot was seen: \
             each exec of the tree now reads its caller's root"
        );
        root.chroot_seen();
    }
    if same && plain && unchanged {
        return Ok(PathRead::Target(first));
    }
    read_path(host, pid, req, mem, root)
}

/// Every string address the kernel will read again after CONTINUE: the path,
/// the argv pointer array and each argv string. Returns the open maps (to
/// close after the answer). `mm_parent`: the caller's parent, which `kcmp`
/// said shares the caller's address space (in this exec): its kept maps
/// file answers for that address space (see `procfiles`).
fn check_mappings(
    host: &dyn Host,
    pid: u32,
    req: &ExecRequest,
    argv: &tracee::Argv,
    mm_parent: Option<u32>,
    files: &mut ProcFiles,
) -> Result<maps::Maps, Undecidable> {
    let mut maps = match mm_parent.and_then(|p| files.maps(p)) {
        Some(f) => maps::Maps::over(f),
        None => host.maps(pid).map_err(|e| {
            undecidable(
                Refusal::Unreadable,
                format!("memory map cannot be read: {e}"),
            )
        })?,
    };
    let mut places = vma::Places::new(pid, pid);
    let mut addrs = vec![("path", req.args.path)];
    if req.args.argv != 0 {
        addrs.push(("argv", req.args.argv));
        addrs.extend(argv.ptrs.iter().map(|&p| ("an argv string", p)));
    }
    for (what, addr) in addrs {
        let refused = places.refusal_at(&mut maps, addr).map_err(|e| {
            undecidable(
                Refusal::Unreadable,
                format!("the exec's {what} at {addr:#x}: {e}"),
            )
        })?;
        if let Some(why) = refused {
            return Err(undecidable(
                Refusal::SharedMemory,
                format!("the exec's {what} lies in {why}"),
            ));
        }
    }
    Ok(maps)
}

/// What gathering came to.
pub(super) enum Gather {
    /// Judge these facts of process `pid`.
    Ready(u32, Box<Gathered>),
    /// Answer this errno without a decision or an event (no such program,
    /// or the caller vanished).
    Answer(i32),
    /// Deny and audit.
    Refused {
        pid: u32,
        ppid: u32,
        filename: String,
        why: Undecidable,
    },
}

/// Steps 1–4 of `exec`'s module doc, then the facts the decision needs
/// besides (the module doc). `frozen` receives the tasks stopped, which the
/// caller releases whatever the outcome.
///
/// Long because the steps share the facts read before the freeze and the
/// order of reads is the race guard; each step is a call.
pub(super) fn gather(
    ctx: &SupervisorContext,
    index: &IdentityIndex,
    st: &mut ExecTree<'_>,
    req: &ExecRequest,
    frozen: &mut Option<Frozen>,
    verified: bool,
) -> Gather {
    st.tasks.files.begin_exec();
    let host = &*ctx.host;
    let Some((stat_file, stat, pid)) = who(host, req.tid) else {
        return Gather::Answer(libc::EACCES); // vanished: nothing to audit
    };
    phases::mark("stat");
    let fail = |filename: &str, why| Gather::Refused {
        pid,
        ppid: stat.ppid,
        filename: filename.to_string(),
        why,
    };
    let max_argc = ctx.limits.max_argc;
    let mut mem = strings_reader(req, max_argc);
    let first = match read_path(host, pid, req, &mut mem, &mut st.tasks.root) {
        Ok(PathRead::Missing(errno)) => return Gather::Answer(errno),
        Ok(PathRead::Target(r)) => r,
        Err(u) => return fail("", u),
    };
    phases::mark("path");
    // A verifying backend checks every new image: no guard here.
    let guard = (!verified).then_some(ctx.limits.race_guard);
    let sharers = Sharers {
        stops: &*ctx.stops,
        guard,
        pid,
        tid: req.tid,
    };
    let (memory, mm_parent) = match stop_sharers(&sharers, &stat, &stat_file, st, frozen) {
        Ok(m) => m,
        Err(why) => {
            return fail(
                &first.target.filename,
                undecidable(Refusal::MemoryNotFrozen, why.to_string()),
            )
        }
    };
    phases::mark("share");
    let resolved = if memory == Memory::Frozen {
        // The first read raced with tasks that were still running.
        mem = strings_reader(req, max_argc);
        let first_name = first.target.filename.clone();
        match read_path_again(host, pid, req, &mut mem, first, &mut st.tasks.root) {
            Ok(PathRead::Missing(errno)) => return Gather::Answer(errno),
            Ok(PathRead::Target(r)) => r,
            Err(u) => return fail(&first_name, u),
        }
    } else {
        first
    };
    let Resolved { path, view, target } = *resolved;
    let argv = match read_argv(ctx, req, &mut mem) {
        Ok(a) => a,
        Err(u) => return fail(&target.filename, u),
    };
    phases::mark("argv");
    // A verified exec (ptrace backend, or `race_guard: verify` with tasks
    // sharing the memory) is checked at PTRACE_EVENT_EXEC whoever writes
    // the strings: where they live no longer matters.
    let mut maps = if verified || memory == Memory::Verified {
        None
    } else {
        match check_mappings(host, pid, req, &argv, mm_parent, &mut st.tasks.files) {
            Ok(m) => Some(m),
            Err(u) => return fail(&target.filename, u),
        }
    };
    // The kernel itself may still write the caller's memory: a Linux AIO
    // read it submitted lands whenever the device completes it, after our
    // read of the path as well as before. Such an exec is watched and its
    // new image checked, as for a caller others share memory with.
    let mut memory = memory;
    if let Some(m) = maps.as_mut() {
        match maps::aio_ring(m) {
            Ok(false) => {}
            Ok(true) => memory = Memory::Verified,
            Err(e) => {
                return fail(
                    &target.filename,
                    undecidable(
                        Refusal::Unreadable,
                        format!("memory map cannot be read: {e}"),
                    ),
                )
            }
        }
    }
    phases::mark("maps");
    let chain = match interpreters(host, &view, &target, &req.args, &path, &argv) {
        Ok(c) => c,
        Err(u) => return fail(&target.filename, u),
    };
    phases::mark("chain");
    // Verified execs need no stable lookups: a swapped file is caught at
    // exec. The owner of the caller's /proc entries; unreadable: not stable.
    let stable = verified
        || stat_file
            .owner()
            .is_ok_and(|uid| lookups_stable(&view, uid, &req.args, &target, &chain));
    phases::mark("stable");
    let (recognised, recognised_chain) = recognise(index, &target, &chain);
    let caller = Caller {
        host,
        view: &view,
        stat_file: &stat_file,
    };
    let payloads = match loader_payloads(&caller, index, &target, &recognised, &argv.args, memory) {
        Ok(p) => p,
        Err(u) => return fail(&target.filename, u),
    };
    phases::mark("ident");
    Gather::Ready(
        pid,
        Box::new(Gathered {
            stat,
            target,
            argv,
            memory,
            chain,
            stable,
            recognised,
            recognised_chain,
            payloads,
            _close_later: (view, stat_file, maps),
        }),
    )
}

/// Step 1, who: the calling thread's stat and its thread group (the
/// process id). `None`: the thread vanished.
fn who(host: &dyn Host, tid: u32) -> Option<(StatFile, tracee::ProcStat, u32)> {
    // Kept open: read again after a freeze (thread count) and for the owner.
    let stat_file = host.stat_file(tid).ok()?;
    let stat = stat_file.read().ok()?;
    let pid = tracee::tgid_of(tid, &stat).ok()?;
    Some((stat_file, stat, pid))
}

/// Step 4's argv, within the configured limits, mostly from the pages
/// `mem` already read.
fn read_argv(
    ctx: &SupervisorContext,
    req: &ExecRequest,
    mem: &mut MemReader,
) -> Result<tracee::Argv, Undecidable> {
    mem.argv(
        req.args.argv,
        req.args.ptr_size,
        ctx.limits.max_argc,
        ctx.limits.max_argv_bytes,
    )
    .map_err(|e| undecidable(Refusal::Unreadable, format!("argv cannot be read: {e}")))
}

/// Whose memory step 3 asks about, under which guard (`None`: a verifying
/// backend), and what it asks through.
struct Sharers<'a> {
    stops: &'a dyn TaskStops,
    guard: Option<RaceGuard>,
    pid: u32,
    tid: u32,
}

/// Step 3, the race guard: who else shares the caller's memory; under
/// `execve.race_guard: freeze` anyone who does is stopped (`frozen` receives
/// them), under `verify` the exec is watched instead (`Memory::Verified`).
/// Returns what the audit says of the caller's memory, and the caller's parent when it shares that memory
/// (see `check_mappings`). A verifying backend checks the new image: whoever
/// writes the strings now only gets the exec killed.
///
/// # Errors
/// Why the tasks that share the memory cannot be found or stopped.
fn stop_sharers(
    s: &Sharers,
    stat: &tracee::ProcStat,
    stat_file: &StatFile,
    st: &mut ExecTree<'_>,
    frozen: &mut Option<Frozen>,
) -> Result<(Memory, Option<u32>), FreezeError> {
    let Some(guard) = s.guard else {
        return Ok((Memory::Verified, None));
    };
    let (pid, tid) = (s.pid, s.tid);
    match s.stops.sharing(pid, tid, stat, &mut st.tasks.files)? {
        Sharing::Exclusive { parent } => Ok((Memory::Exclusive, parent.then_some(stat.ppid))),
        Sharing::Shared(set) if guard == RaceGuard::Verify => {
            // Nothing is stopped: the exec is watched and the new image
            // checked before its first instruction (see `exec::handle`).
            let parent = (set.procs.get(1) == Some(&stat.ppid)).then_some(stat.ppid);
            Ok((Memory::Verified, parent))
        }
        Sharing::Shared(set) => {
            let parent = (set.procs.get(1) == Some(&stat.ppid)).then_some(stat.ppid);
            let f = s.stops.freeze(
                pid,
                tid,
                stat_file,
                set,
                &mut st.tasks.lingering,
                &mut st.tasks.files,
            )?;
            *frozen = Some(f);
            Ok((Memory::Frozen, parent))
        }
    }
}

/// The `#!` interpreters the kernel will start for `target`, each resolved
/// in `view`; the script is named as the kernel names it
/// ([`kernel_filename`]).
fn interpreters(
    host: &dyn Host,
    view: &View,
    target: &ExecTarget,
    args: &ExecArgs,
    path: &[u8],
    argv: &tracee::Argv,
) -> Result<Vec<tracee::ChainLink>, Undecidable> {
    let script_name = kernel_filename(args, path);
    host.interpreters(view, target, &script_name, &argv.args)
        .map_err(|e| match e {
            tracee::ChainError::TooDeep => undecidable(
                Refusal::InterpreterChain,
                format!(
                    "#! interpreters nested deeper than the kernel follows ({})",
                    tracee::MAX_INTERPRETER_DEPTH
                ),
            ),
            tracee::ChainError::Unresolvable(i, e) => undecidable(
                Refusal::Unresolvable,
                format!("#! interpreter {i:?} cannot be resolved in the caller's view: {e}"),
            ),
        })
}
