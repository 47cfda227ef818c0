//! The `#!` interpreters the kernel will start for a script: a file's first
//! line (read through our own fd, remembered under the file's cheap key),
//! and the chain of interpreters that are scripts themselves, each resolved
//! like an exec in the caller's view.
//!
//! Failure modes: [`shebang`] answers `None` for a file it cannot read as
//! for one that is not a script; a chain deeper than the kernel follows, or
//! an interpreter that exists but cannot be resolved, is a [`ChainError`].

use super::file::FileKey;
use super::resolve::{resolve_in, ExecTarget, ResolveError, View, AT_FDCWD};
use std::collections::{HashMap, VecDeque};
use std::io;
use std::os::fd::AsRawFd;

/// The interpreter line of a `#!` script: `[interpreter, optional argument]`.
///
/// The kernel runs the interpreter itself, without another `execve` the
/// supervisor could see, so the caller judges it here. Reads the first 256
/// bytes (the kernel's limit) through our own fd on the file; `None` if it
/// is not a script or cannot be read. Only a regular file of at least two
/// bytes can be a script: anything else is not opened (a FIFO would block
/// the open, a device would see it), and the kernel refuses to exec it.
///
/// What a file's first line says is remembered under its cheap key
/// ([`FileMeta::key`]: device, inode, size, mtime, ctime), like the identity
/// index's digests: any write changes ctime, so a changed file is read
/// again. The key is taken when the file is opened, before it is read: a
/// write in between is remembered under the old key, which no later look-up
/// of the changed file has. (A file the tree can write may change after any
/// read; such an exec is watched, see `supervisor::exec`.)
///
/// [`FileMeta::key`]: super::file::FileMeta::key
pub fn shebang(target: &ExecTarget) -> Option<Vec<String>> {
    if !target.meta.is_regular() || target.meta.size < 2 {
        return None;
    }
    let key = target.meta.key();
    if let Some(line) = SHEBANGS.lookup(&key) {
        return line;
    }
    let line = read_shebang(target)?;
    SHEBANGS.remember(key, line.clone());
    line
}

/// Reads the first line; `None`: unreadable, `Some(None)`: not a script.
fn read_shebang(target: &ExecTarget) -> Option<FirstLine> {
    use std::io::Read;
    let mut f = std::fs::File::open(format!("/proc/self/fd/{}", target.file.as_raw_fd())).ok()?;
    let mut buf = [0u8; 256];
    let mut n = 0;
    while n < buf.len() {
        match f.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(_) => return None,
        }
    }
    Some(parse_shebang(&buf[..n]))
}

/// How many files' first lines [`shebang`] remembers.
const SHEBANG_ENTRIES: usize = 2048;

/// A first line read, or `None`: not a script.
type FirstLine = Option<Vec<String>>;

/// The first lines [`shebang`] read, by file key; the oldest forgotten first.
struct Shebangs(std::sync::Mutex<(HashMap<FileKey, FirstLine>, VecDeque<FileKey>)>);

static SHEBANGS: std::sync::LazyLock<Shebangs> =
    std::sync::LazyLock::new(|| Shebangs(std::sync::Mutex::new(Default::default())));

impl Shebangs {
    fn lookup(&self, key: &FileKey) -> Option<FirstLine> {
        let c = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        c.0.get(key).cloned()
    }

    fn remember(&self, key: FileKey, line: FirstLine) {
        let mut c = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if c.0.insert(key, line).is_none() {
            c.1.push_back(key);
            if c.1.len() > SHEBANG_ENTRIES {
                if let Some(old) = c.1.pop_front() {
                    c.0.remove(&old);
                }
            }
        }
    }
}

/// How deep the kernel follows `#!` interpreters that are scripts themselves
/// (`BINPRM_MAX_RECURSION`): one more fails the exec with ELOOP.
pub const MAX_INTERPRETER_DEPTH: usize = 4;

/// One `#!` interpreter the kernel will start.
#[derive(Debug)]
pub struct ChainLink {
    /// The path on the `#!` line.
    pub path: String,
    /// The argv the kernel builds for it.
    pub argv: Vec<String>,
    /// The file, resolved like an exec in the caller's view; `None` when it
    /// does not exist (the exec then fails with ENOENT).
    pub target: Option<ExecTarget>,
}

/// Why an interpreter chain cannot be followed.
#[derive(Debug)]
pub enum ChainError {
    /// Deeper than the kernel follows: the exec fails with ELOOP anyway.
    TooDeep,
    Unresolvable(String, io::Error),
}

/// The `#!` interpreters the kernel will start for `target`, outermost
/// first, each resolved like an exec in `view`, with the argv the kernel
/// builds: `[interpreter, optional argument, file name, args...]` where the
/// file name is `script_name` (the name the kernel was given) for the first
/// level and the previous interpreter's path after that.
///
/// # Errors
/// A chain deeper than [`MAX_INTERPRETER_DEPTH`], or an interpreter that
/// exists but cannot be resolved.
pub fn interpreter_chain(
    view: &View,
    target: &ExecTarget,
    script_name: &str,
    argv: &[String],
) -> Result<Vec<ChainLink>, ChainError> {
    let mut chain: Vec<ChainLink> = Vec::new();
    let mut name = script_name.to_string();
    let mut args: Vec<String> = argv.to_vec();
    loop {
        let current = match chain.last() {
            None => Some(target),
            Some(l) => l.target.as_ref(),
        };
        let Some(current) = current else {
            return Ok(chain);
        };
        let Some(line) = shebang(current) else {
            return Ok(chain);
        };
        if chain.len() == MAX_INTERPRETER_DEPTH {
            return Err(ChainError::TooDeep);
        }
        let interp = line[0].clone();
        let mut new_args = line.clone();
        new_args.push(name.clone());
        new_args.extend(args.iter().skip(1).cloned());
        let t = match resolve_in(view, AT_FDCWD, interp.as_bytes(), false) {
            Ok(t) => Some(t),
            Err(ResolveError::Missing(_)) => None,
            Err(ResolveError::Other(e)) => return Err(ChainError::Unresolvable(interp, e)),
        };
        name = interp.clone();
        args = new_args.clone();
        chain.push(ChainLink {
            path: interp,
            argv: new_args,
            target: t,
        });
    }
}

fn parse_shebang(head: &[u8]) -> Option<Vec<String>> {
    let rest = head.strip_prefix(b"#!")?;
    let line = rest.split(|b| *b == b'\n').next()?;
    let line = String::from_utf8_lossy(line);
    let line = line.trim_matches(|c| c == ' ' || c == '\t' || c == '\r');
    let (interp, arg) = match line.split_once([' ', '\t']) {
        Some((i, a)) => (i, a.trim_matches([' ', '\t'])),
        None => (line, ""),
    };
    if interp.is_empty() {
        return None;
    }
    let mut v = vec![interp.to_string()];
    if !arg.is_empty() {
        v.push(arg.to_string());
    }
    Some(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shebang_lines() {
        let v = |s: &[&str]| {
            Some(
                s.iter()
                    .map(std::string::ToString::to_string)
                    .collect::<Vec<_>>(),
            )
        };
        assert_eq!(parse_shebang(b"#!/bin/sh\necho"), v(&["/bin/sh"]));
        assert_eq!(
            parse_shebang(b"#! /usr/bin/env  python3 \n"),
            v(&["/usr/bin/env", "python3"])
        );
        assert_eq!(
            parse_shebang(b"#!/usr/bin/su -c x\r\n"),
            v(&["/usr/bin/su", "-c x"])
        );
        assert_eq!(parse_shebang(b"\x7fELF"), None);
        assert_eq!(parse_shebang(b"#!\n"), None);
    }
}
