//! One path call, from its seccomp stop to its answer: the caller's other
//! threads are stopped first (`Stop::hold_still`: nothing changes its cwd
//! or its fds while it is judged, and until the kernel has used them), its
//! paths are read and walked in its view, the rules judge, and a call let
//! through runs to its end with the others still held, reading copies of
//! the strings judged where only the tracer writes (`Stop::pin`; where the
//! backend cannot, the strings must lie where no other process writes,
//! `strings_stay`). A refusal is audited (`file` event) with the right
//! missing and where.
//!
//! Failure modes: strings that cannot be read, lie in memory another
//! process could write, or paths that cannot be walked are refused
//! (EACCES) and audited with the mechanism's reason; a tree the filter
//! sends path calls for but that has no file rules is refused the same way
//! (`unexpected_syscall`).

use super::judge::{self, Flags, Named, Verdict};
use super::rules::FileRules;
use crate::audit::{EventBody, FileEvent};
use crate::policy::Decision;
use crate::supervisor::context::SupervisorContext;
use crate::supervisor::seam::{Caught, Pinning, Stop};
use crate::supervisor::tree::Tree;
use crate::tracee::walk::{self, Found, Lookup, WalkError};
use crate::vocab::Refusal;
use agentsh_proto::fileabi::{FileOp, FileSyscall};

/// What the family keeps of a tree between calls.
#[derive(Debug, Default)]
pub struct FilesState {
    /// The tree's root was found to be the server's (checked at its first
    /// path call; the filter refuses `chroot`, so it stays so).
    pub root_is_ours: bool,
    /// The paths each thread was told are refused.
    told: crate::explain::Told<String>,
}

/// A mechanism refusal: the rule, and why.
struct Undecidable(Refusal, String);

/// What was read of the call.
struct Read {
    pid: u32,
    path: Vec<u8>,
    path2: Option<Vec<u8>>,
    flags: Flags,
    /// `openat2`'s `open_how`, as many bytes as the call says (at most a
    /// page, the kernel's limit).
    how: Option<Vec<u8>>,
}

/// Judges `call` (caught as `c`) by `tree`'s file rules and answers it.
pub fn handle(
    ctx: &SupervisorContext,
    tree: &Tree,
    st: &mut FilesState,
    call: &'static FileSyscall,
    c: &Caught,
    stop: &dyn Stop,
) {
    let Some(rules) = tree.file_rules() else {
        let why = format!(
            "{} reached the supervisor, but the tree has no file rules to judge it by",
            call.name
        );
        record(
            ctx,
            tree,
            call,
            c.tid,
            None,
            Refusal::UnexpectedSyscall,
            &why,
        );
        let _ = stop.refuse(libc::EACCES);
        return;
    };
    if rules.explain_only() {
        return explain(ctx, tree, st, rules, call, c, stop);
    }
    let mut flags = register_flags(call, &c.args);
    if !judge::needs_judging(call, flags, c.args[call.path]) {
        let _ = stop.proceed();
        return;
    }
    // Copies of what is judged, where only the tracer writes (the kernel
    // reads those); else the memory is held still and checked.
    let pinned = match stop.pinning() {
        Pinning::Again => return,
        Pinning::Ready => true,
        Pinning::Unavailable => false,
    };
    if let Err(e) = stop.hold_still() {
        let why = format!("the caller's other threads cannot be stopped: {e}");
        record(ctx, tree, call, c.tid, None, Refusal::MemoryNotFrozen, &why);
        let _ = stop.refuse(libc::EACCES);
        return;
    }
    let read = match read_call(call, c, stop, &mut flags, false) {
        Ok(r) => r,
        Err(Undecidable(rule, why)) => {
            record(ctx, tree, call, c.tid, None, rule, &why);
            let _ = stop.refuse(libc::EACCES);
            return;
        }
    };
    let decided =
        root_checked(st, read.pid, c.tid).and_then(|()| decide(rules, call, c, &read, pinned));
    match decided {
        Ok(Verdict::Allow) => allowed(ctx, tree, call, c, &read, pinned, stop),
        Ok(Verdict::Kernel(errno)) => {
            let _ = stop.refuse(errno);
        }
        Ok(Verdict::Deny(d)) => refused(ctx, tree, st, call, c, &read, &d, stop),
        Err(Undecidable(rule, why)) => {
            ctx.audit.record(
                &tree.session_id,
                EventBody::File(event(call, c.tid, &read, rule, &why)),
            );
            let _ = stop.refuse(libc::EACCES);
        }
    }
}

/// An allowed call goes on, with its strings copied where only the tracer
/// writes where they can be (`pinned`); a copy that cannot be made refuses
/// it.
fn allowed(
    ctx: &SupervisorContext,
    tree: &Tree,
    call: &FileSyscall,
    c: &Caught,
    read: &Read,
    pinned: bool,
    stop: &dyn Stop,
) {
    if pinned {
        if let Err(e) = pin(stop, call, c, read) {
            let why = format!("the judged path cannot be copied for the kernel: {e}");
            ctx.audit.record(
                &tree.session_id,
                EventBody::File(event(call, c.tid, read, Refusal::Unreadable, &why)),
            );
            let _ = stop.refuse(libc::EACCES);
            return;
        }
    }
    let _ = stop.proceed();
}

/// Where Landlock keeps the rules (the notify backend): a call Landlock
/// would refuse is refused here as it would (same errno), explained to its
/// caller and audited with its path; every other call, and every one that
/// cannot be read or walked, goes on to the kernel, which decides. Nothing
/// is held still: the strings may change after they were read, and then
/// the kernel's own decision stands (a refusal unexplained, at worst).
fn explain(
    ctx: &SupervisorContext,
    tree: &Tree,
    st: &mut FilesState,
    rules: &FileRules,
    call: &'static FileSyscall,
    c: &Caught,
    stop: &dyn Stop,
) {
    let mut flags = register_flags(call, &c.args);
    if !judge::needs_judging(call, flags, c.args[call.path]) {
        let _ = stop.proceed();
        return;
    }
    let Ok(read) = read_call(call, c, stop, &mut flags, true) else {
        let _ = stop.proceed();
        return;
    };
    let decided =
        root_checked(st, read.pid, c.tid).and_then(|()| decide(rules, call, c, &read, true));
    match decided {
        Ok(Verdict::Deny(d)) => refused(ctx, tree, st, call, c, &read, &d, stop),
        _ => {
            let _ = stop.proceed();
        }
    }
}

/// A call the file rules refuse: explained to its caller (once per thread
/// and path), audited, answered.
#[allow(clippy::too_many_arguments)]
fn refused(
    ctx: &SupervisorContext,
    tree: &Tree,
    st: &mut FilesState,
    call: &FileSyscall,
    c: &Caught,
    read: &Read,
    d: &judge::Denial,
    stop: &dyn Stop,
) {
    // The name the caller gave (absolute where it gave one), and where
    // the right is missing when that is elsewhere (its directory).
    let shown = shown_path(read, &d.path);
    if ctx.limits.explain == crate::config::Explain::Stderr && st.told.first(c.tid, shown.clone()) {
        let at = (shown != d.path).then_some(d.path.as_str());
        let line = crate::explain::refused_file_in(
            call.name,
            &shown,
            d.right.map(judge::right_name),
            at,
            d.rule.rule(),
            &d.reason,
        );
        crate::explain::tell(c.tid, &line);
    }
    let ev = event(call, c.tid, read, d.rule, &d.reason);
    ctx.audit.record(
        &tree.session_id,
        EventBody::File(FileEvent {
            resolved: Some(d.path.clone()),
            right: d.right.map(|r| judge::right_name(r).to_string()),
            ..ev
        }),
    );
    tracing::debug!(tid = c.tid, call = call.name, "{}", d.reason);
    let _ = stop.refuse(d.errno);
}

/// The path a refusal names: of the call's paths as given, an absolute one
/// at or beneath where the right is missing (`at`; the second path of a
/// rename or link when that is the one), else `at` itself.
fn shown_path(read: &Read, at: &str) -> String {
    let beneath = |p: &[u8]| {
        let p = String::from_utf8_lossy(p);
        let inside = at == "/" || p == at || p.strip_prefix(at).is_some_and(|r| r.starts_with('/'));
        (p.starts_with('/') && inside).then(|| p.into_owned())
    };
    beneath(&read.path)
        .or_else(|| read.path2.as_deref().and_then(beneath))
        .unwrap_or_else(|| at.to_string())
}

/// The tree's root is the server's (its paths are walked from there):
/// checked at its first path call.
fn root_checked(st: &mut FilesState, pid: u32, tid: u32) -> Result<(), Undecidable> {
    if !st.root_is_ours {
        walk::root_is_ours(pid, tid).map_err(|why| {
            Undecidable(
                Refusal::Unresolvable,
                format!("{why}: its paths are not walked"),
            )
        })?;
        st.root_is_ours = true;
    }
    Ok(())
}

/// The paths walked, the rules applied, and (unless they are `pinned`: the
/// kernel reads copies) where the strings lie checked for a call that
/// would run.
fn decide(
    rules: &FileRules,
    call: &FileSyscall,
    c: &Caught,
    read: &Read,
    pinned: bool,
) -> Result<Verdict, Undecidable> {
    let dirfd = |i: Option<usize>| i.map_or(libc::AT_FDCWD, |i| c.args[i] as i32);
    let lookup = Lookup {
        dirfd: dirfd(call.dirfd),
        follow_last: judge::follows_first(call, read.flags),
        empty_path: judge::empty_path(call, read.flags),
        remembered: !rules.explain_only(),
        new_name_only: judge::new_name_only(call, read.flags),
    };
    let first = |lookup| -> Result<Named, Undecidable> {
        if call.op == FileOp::Symlink {
            Ok(Named::Anonymous) // its text, not a path of the call
        } else {
            named(read.pid, c.tid, &read.path, lookup)
        }
    };
    let second = match (&read.path2, call.path2) {
        (Some(p), Some((d, _))) => Some(named(
            read.pid,
            c.tid,
            p,
            Lookup {
                dirfd: dirfd(d),
                follow_last: false,
                empty_path: false,
                remembered: !rules.explain_only(),
                new_name_only: false,
            },
        )?),
        _ => None,
    };
    let judged = |first: &Named| judge::judge(rules, call, read.flags, first, second.as_ref());
    let mut verdict = judged(&first(lookup)?);
    if verdict != Verdict::Allow && lookup.new_name_only {
        // A refusal is given for what is there: the last name looked at
        // (an existing one is the kernel's EEXIST, as without agentsh).
        verdict = judged(&first(Lookup {
            new_name_only: false,
            ..lookup
        })?);
    }
    if verdict == Verdict::Allow && !rules.explain_only() && !pinned {
        strings_stay(read.pid, call, c)?;
    }
    Ok(verdict)
}

/// A path walked, as the judge needs it.
fn named(pid: u32, tid: u32, path: &[u8], how: Lookup) -> Result<Named, Undecidable> {
    match walk::walk(pid, tid, path, how) {
        Ok(Found::Exists {
            anonymous: true, ..
        }) => Ok(Named::Anonymous),
        Ok(Found::Exists { path, meta, .. }) => Ok(Named::Exists {
            path,
            dir: meta.mode & libc::S_IFMT == libc::S_IFDIR,
        }),
        Ok(absent @ Found::Absent { .. }) => Ok(Named::Absent {
            path: absent.path(),
        }),
        Err(WalkError::Kernel(e)) => Ok(Named::Kernel(e)),
        Err(WalkError::Other(why)) => Err(Undecidable(
            Refusal::Unresolvable,
            format!("{}: {why}", String::from_utf8_lossy(path)),
        )),
    }
}

/// The flags the registers hold (`openat2`'s are read with the strings).
fn register_flags(call: &FileSyscall, args: &[u64; 6]) -> Flags {
    let at = |i: Option<usize>| i.map_or(0, |i| args[i]);
    Flags {
        open: if call.how { 0 } else { at(call.flags) },
        at: at(call.at_flags),
        mode: at(call.mode),
        rename: if call.name == "renameat2" { args[4] } else { 0 },
    }
}

/// The call's strings (and `openat2`'s flags), from its memory; the
/// caller's other threads are stopped. `explaining`: Landlock decides, the
/// strings are only read to explain (no tracer's peek to try, and the
/// thread's own id stands for its process: `/proc/<tid>/` and
/// `process_vm_readv` take it, which saves reading its status, a fifth of
/// such a call's cost).
fn read_call(
    call: &FileSyscall,
    c: &Caught,
    stop: &dyn Stop,
    flags: &mut Flags,
    explaining: bool,
) -> Result<Read, Undecidable> {
    let pid = c
        .tgid
        .or_else(|| explaining.then_some(c.tid))
        .or_else(|| crate::tracee::ProcStatus::read(c.tid).ok()?.number("Tgid"))
        .ok_or_else(|| {
            Undecidable(
                Refusal::Unreadable,
                format!("/proc/{}/status: no Tgid", c.tid),
            )
        })?;
    let string = |addr: u64, what: &str| -> Result<Vec<u8>, Undecidable> {
        if addr == 0 {
            return Ok(Vec::new());
        }
        // The tracer's own peek first (the caller is stopped in its call);
        // the process's memory where it is not ours to peek.
        let max = libc::PATH_MAX as usize;
        let read = if explaining {
            crate::tracee::read_cstring(pid, addr, max)
        } else if let Some(r) = stop.read_cstring(addr, max) {
            r
        } else {
            crate::tracee::peek_cstring(c.tid, addr, max)
                .or_else(|_| crate::tracee::read_cstring(pid, addr, max))
        };
        match read {
            Ok((s, true)) => Ok(s),
            Ok((_, false)) => Err(Undecidable(
                Refusal::Unreadable,
                format!("the {what} is longer than PATH_MAX"),
            )),
            Err(e) => Err(Undecidable(
                Refusal::Unreadable,
                format!("the {what} at {addr:#x}: {e}"),
            )),
        }
    };
    let path = string(c.args[call.path], "path")?;
    let path2 = match call.path2 {
        Some((_, i)) => Some(string(c.args[i], "second path")?),
        None => None,
    };
    let mut how = None;
    if call.how {
        let at = c.args[call.flags.unwrap_or(2)];
        // As the kernel reads it: `size` bytes (arg 3), no more than a page.
        let size = (c.args[3] as usize).clamp(8, 4096);
        let bytes = crate::tracee::read_bytes(pid, at, size)
            .map_err(|e| Undecidable(Refusal::Unreadable, format!("openat2's open_how: {e}")))?;
        let mut raw = [0u8; 8];
        raw.copy_from_slice(&bytes[..8]);
        flags.open = u64::from_ne_bytes(raw);
        how = Some(bytes);
    }
    Ok(Read {
        pid,
        path,
        path2,
        flags: *flags,
        how,
    })
}

/// The judged strings (each with its NUL) and `open_how`, copied where
/// only the tracer writes, the call's arguments pointed at the copies. A
/// null pointer stays null (it means something of its own).
fn pin(stop: &dyn Stop, call: &FileSyscall, c: &Caught, read: &Read) -> std::io::Result<()> {
    let with_nul = |s: &[u8]| {
        let mut v = s.to_vec();
        v.push(0);
        v
    };
    let mut copies: Vec<(usize, Vec<u8>)> = Vec::new();
    if c.args[call.path] != 0 {
        copies.push((call.path, with_nul(&read.path)));
    }
    if let (Some((_, i)), Some(p)) = (call.path2, &read.path2) {
        if c.args[i] != 0 {
            copies.push((i, with_nul(p)));
        }
    }
    if let Some(how) = &read.how {
        let i = call.flags.unwrap_or(2);
        // More than a page is the kernel's E2BIG: not copied, not needed.
        if c.args[3] as usize == how.len() {
            copies.push((i, how.clone()));
        }
    }
    let refs: Vec<(usize, &[u8])> = copies.iter().map(|(i, b)| (*i, b.as_slice())).collect();
    stop.pin(&refs)
}

/// The strings of a call that will run must lie where no other process can
/// write them (the caller's threads are stopped; see `vma`).
fn strings_stay(pid: u32, call: &FileSyscall, c: &Caught) -> Result<(), Undecidable> {
    let mut addrs = vec![("path", c.args[call.path])];
    if let Some((_, i)) = call.path2 {
        addrs.push(("second path", c.args[i]));
    }
    if call.how {
        addrs.push(("open_how", c.args[call.flags.unwrap_or(2)]));
    }
    let mut maps = crate::tracee::maps::Maps::open(pid).map_err(|e| {
        Undecidable(
            Refusal::Unreadable,
            format!("memory map cannot be read: {e}"),
        )
    })?;
    let mut places = crate::supervisor::vma::Places::new(pid, c.tid);
    for (what, addr) in addrs {
        if addr == 0 {
            continue;
        }
        let refused = places.refusal_at(&mut maps, addr).map_err(|e| {
            Undecidable(
                Refusal::Unreadable,
                format!("the call's {what} at {addr:#x}: {e}"),
            )
        })?;
        if let Some(why) = refused {
            return Err(Undecidable(
                Refusal::SharedMemory,
                format!("the call's {what} lies in {why}"),
            ));
        }
    }
    Ok(())
}

fn event(call: &FileSyscall, tid: u32, read: &Read, rule: Refusal, why: &str) -> FileEvent {
    FileEvent {
        pid: tid,
        syscall: call.name.to_string(),
        path: String::from_utf8_lossy(&read.path).into_owned(),
        path2: read
            .path2
            .as_ref()
            .map(|p| String::from_utf8_lossy(p).into_owned()),
        resolved: None,
        right: None,
        decision: Decision::Deny,
        rule: rule.rule().to_string(),
        reason: why.to_string(),
    }
}

/// A refusal before anything was read.
fn record(
    ctx: &SupervisorContext,
    tree: &Tree,
    call: &FileSyscall,
    tid: u32,
    path: Option<String>,
    rule: Refusal,
    why: &str,
) {
    ctx.audit.record(
        &tree.session_id,
        EventBody::File(FileEvent {
            pid: tid,
            syscall: call.name.to_string(),
            path: path.unwrap_or_default(),
            path2: None,
            resolved: None,
            right: None,
            decision: Decision::Deny,
            rule: rule.rule().to_string(),
            reason: why.to_string(),
        }),
    );
}
