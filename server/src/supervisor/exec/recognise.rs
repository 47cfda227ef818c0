//! What a program is beyond the name it was exec'd by: the copies of named
//! programs the identity index recognises in it and in each `#!`
//! interpreter, and, when it is a dynamic loader (by name, target or
//! content), the program the loader will map, resolved in the caller's view
//! and judged as an exec is (`ld.so ./prog` is `./prog`).
//!
//! Failure modes: a loader's payload that exists but cannot be resolved, is
//! a memfd or deleted file, or can be changed by the tree before the loader
//! opens it, or loaders nested too deep, is an [`Undecidable`] (the exec is
//! refused, `unresolvable`, `fileless_exec` or `loader_payload`, with the
//! reason); a payload that does not exist is the loader's to fail.

use super::identity::{IdentityIndex, Recognised};
use super::undecidable::{undecidable, Undecidable};
use crate::audit::Memory;
use crate::tracee::host::Host;
use crate::tracee::{self, ExecTarget, ResolveError, StatFile, View};
use crate::vocab::Refusal;

/// Where a loader's payload is looked up: the caller's view and `/proc`
/// stat file (whose owner is the caller's uid), asked through the host.
pub(super) struct Caller<'a> {
    pub(super) host: &'a dyn Host,
    pub(super) view: &'a View,
    pub(super) stat_file: &'a StatFile,
}

/// How deep loaders run by loaders are followed (`ld.so ld.so PROG`).
const MAX_LOADER_DEPTH: usize = 4;

/// Whether any of `names` is a dynamic loader (`ld-linux-*.so*`, ...).
fn is_loader<'a>(mut names: impl Iterator<Item = &'a str>) -> bool {
    names.any(crate::policy::wrappers::names_a_loader)
}

/// When the program is a dynamic loader, by its name, its target or its
/// content (a renamed copy of `ld.so` is one): the program it will map,
/// resolved as its `open(2)` will resolve it in the caller's view (relative
/// to the cwd, symlinks followed, `/proc/self` the caller), so the policy
/// judges that file's names and content as it judges an exec's; and again
/// while that program is a loader too. Nothing when the loader has no
/// payload or its arguments cannot be parsed (the policy's name-level
/// judgement of the wrapper decides: `unparsable_wrapper`), or when the
/// payload does not exist (the loader fails).
///
/// # Errors
/// The payload exists but cannot be resolved; it is a memfd or deleted
/// file; the tree can change what the loader will open after the decision
/// (a directory on its path or the file itself is the tree's to write, or a
/// `/proc` fd link while another task shares the caller's fd table); or
/// loaders are nested deeper than [`MAX_LOADER_DEPTH`].
pub(super) fn loader_payloads(
    caller: &Caller,
    index: &IdentityIndex,
    target: &ExecTarget,
    recognised: &Recognised,
    argv: &[String],
    memory: Memory,
) -> Result<Vec<crate::policy::Interpreter>, Undecidable> {
    use crate::policy::wrappers::{unwrap, Unwrapped, Wrapper};
    let (host, view, stat_file) = (caller.host, caller.view, caller.stat_file);
    let mut names: Vec<String> = std::iter::once(target.filename.clone())
        .chain(target.resolved.clone())
        .chain(recognised.copy_of.iter().cloned())
        .collect();
    let mut args = argv.to_vec();
    let mut out = Vec::new();
    while is_loader(names.iter().map(String::as_str)) {
        if out.len() == MAX_LOADER_DEPTH {
            return Err(undecidable(
                Refusal::LoaderPayload,
                format!("dynamic loaders nested deeper than {MAX_LOADER_DEPTH}"),
            ));
        }
        let Ok(Unwrapped::Payload { program, argv }) = unwrap(Wrapper::DynamicLoader, &args) else {
            break;
        };
        let t = match host.resolve(view, libc::AT_FDCWD, program.as_bytes(), false) {
            Ok(t) => t,
            Err(ResolveError::Missing(_)) => break,
            Err(ResolveError::Other(e)) => {
                return Err(undecidable(
                    Refusal::Unresolvable,
                    format!("the dynamic loader's program {program:?} cannot be resolved in the caller's view: {e}"),
                ))
            }
        };
        if t.anonymous {
            return Err(undecidable(
                Refusal::FilelessExec,
                format!("the dynamic loader would run {program:?}, a memfd or deleted file"),
            ));
        }
        let root = view.root_prefix();
        let no_write = crate::policy::landlock::SYSTEM_NO_WRITE;
        let stable = stat_file.owner().is_ok_and(|uid| {
            tracee::path_is_stable(&root, &t.filename, Some(t.canonical()), uid, no_write)
                && tracee::file_is_stable(&t.meta, t.canonical(), uid, no_write)
        }) && !(t.filename.starts_with("/proc/") && memory != Memory::Exclusive);
        if !stable {
            return Err(undecidable(
                Refusal::LoaderPayload,
                format!(
                    "the dynamic loader would open {program:?} after the decision, and the tree \
                     can change what that is (a directory on its path, the file itself, or an fd \
                     another task shares): run the program itself"
                ),
            ));
        }
        let r = recognise_target(index, &t);
        names = std::iter::once(t.filename.clone())
            .chain(t.resolved.clone())
            .chain(r.copy_of.iter().cloned())
            .collect();
        out.push(crate::policy::Interpreter {
            path: t.filename.clone(),
            resolved: t.resolved.clone(),
            argv: argv.clone(),
            copy_of: r.copy_of,
        });
        args = argv;
    }
    Ok(out)
}

/// What the identity index says about one file (see [`recognise`]).
fn recognise_target(index: &IdentityIndex, t: &ExecTarget) -> Recognised {
    let mut r = index.recognise(&t.file, &t.meta);
    let own = t.canonical();
    r.copy_of.retain(|c| {
        *c != t.filename
            && Some(c) != t.resolved.as_ref()
            && !(c.starts_with('/') && std::fs::canonicalize(c).is_ok_and(|p| p.as_os_str() == own))
    });
    r
}

/// What the identity index says about the program and about each
/// interpreter (nothing for one that does not exist).
pub(super) fn recognise(
    index: &IdentityIndex,
    target: &ExecTarget,
    chain: &[tracee::ChainLink],
) -> (Recognised, Vec<Recognised>) {
    // A program is not "a copy of" itself, whatever name the index knows it
    // by (`/bin/x` on a usr-merged system is `/usr/bin/x`): an indexed name
    // whose canonical path is the file's own path is the file itself. A
    // hard link elsewhere has a path of its own, so it stays a copy.
    let recognise = |t: &ExecTarget| recognise_target(index, t);
    let recognised = recognise(target);
    let recognised_chain = chain
        .iter()
        .map(|l| l.target.as_ref().map(recognise).unwrap_or_default())
        .collect();
    (recognised, recognised_chain)
}
