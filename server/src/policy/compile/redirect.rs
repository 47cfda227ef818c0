//! A command rule's `redirect_to.program`, checked on this machine when the
//! policy loads: the program a redirect runs must be one no tree can change.
//!
//! Failure modes: a path that is not clean and absolute, a wrapper, a file
//! that is missing, not regular, not executable, a `#!` script, or that
//! someone other than root could replace: the error says which and what
//! to redirect to instead.

use crate::policy::pattern::ProgramName;
use crate::policy::wrappers::Wrapper;
use std::os::unix::fs::{FileExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// Why a redirect's target cannot be the program run instead.
#[derive(Debug, thiserror::Error)]
pub(super) enum RedirectError {
    #[error("redirect_to.program {0:?} is not a clean absolute path")]
    NotClean(String),
    /// A redirect runs one program with the caller's argv, nothing it names.
    #[error(
        "redirect_to.program {0:?} is a wrapper (it runs what its arguments name): redirect to \
         the program itself"
    )]
    Wrapper(String),
    #[error("redirect_to.program {program:?}: {source}")]
    Unreadable {
        program: String,
        source: std::io::Error,
    },
    #[error(
        "redirect_to.program {0:?} is not a regular file (a symlink is not accepted: name its \
         target)"
    )]
    NotRegularFile(String),
    #[error(
        "redirect_to.program {program:?} must be owned by root and writable by nobody else \
         (owner {owner}, mode {mode:o})"
    )]
    NotRootOnly {
        program: String,
        owner: u32,
        mode: u32,
    },
    #[error("redirect_to.program {0:?} is not executable")]
    NotExecutable(String),
    #[error(
        "redirect_to.program {0:?} is a #! script: its interpreter would run and could not be \
         checked; redirect to a binary"
    )]
    Script(String),
    #[error("{}: {source}", .dir.display())]
    DirUnreadable {
        dir: PathBuf,
        source: std::io::Error,
    },
    #[error(
        "redirect_to.program {program:?} is in {}, which someone other than root can write \
         (owner {owner}, mode {mode:o}): a tree could replace the program",
        .dir.display()
    )]
    DirNotRootOnly {
        program: String,
        dir: PathBuf,
        owner: u32,
        mode: u32,
    },
}

/// `redirect_to.program` checked: an absolute, clean path to a regular,
/// executable file owned by root, in directories only root can write (no
/// tree can change what runs), and not a wrapper (a redirect runs one
/// program with the caller's argv, nothing it names). Reads the file's
/// metadata: a policy naming a target that is not there does not load.
pub(super) fn redirect_target(program: &str) -> Result<String, RedirectError> {
    let owned = || program.to_string();
    let clean = program.starts_with('/')
        && !program.ends_with('/')
        && !program
            .split('/')
            .skip(1)
            .any(|c| c.is_empty() || c == "." || c == "..");
    if !clean {
        return Err(RedirectError::NotClean(owned()));
    }
    if Wrapper::of(&ProgramName::exec(program)).is_some() {
        return Err(RedirectError::Wrapper(owned()));
    }
    let m = std::fs::symlink_metadata(program).map_err(|source| RedirectError::Unreadable {
        program: owned(),
        source,
    })?;
    if !m.file_type().is_file() {
        return Err(RedirectError::NotRegularFile(owned()));
    }
    if m.uid() != 0 || m.permissions().mode() & 0o022 != 0 {
        return Err(RedirectError::NotRootOnly {
            program: owned(),
            owner: m.uid(),
            mode: m.permissions().mode() & 0o7777,
        });
    }
    if m.permissions().mode() & 0o111 == 0 {
        return Err(RedirectError::NotExecutable(owned()));
    }
    let mut head = [0u8; 2];
    let script = std::fs::File::open(program)
        .and_then(|f| f.read_at(&mut head, 0))
        .is_ok_and(|n| n == 2 && &head == b"#!");
    if script {
        return Err(RedirectError::Script(owned()));
    }
    let mut dir = Path::new(program).parent();
    while let Some(d) = dir {
        let dm = std::fs::metadata(d).map_err(|source| RedirectError::DirUnreadable {
            dir: d.to_path_buf(),
            source,
        })?;
        if dm.uid() != 0 || dm.permissions().mode() & 0o022 != 0 {
            return Err(RedirectError::DirNotRootOnly {
                program: owned(),
                dir: d.to_path_buf(),
                owner: dm.uid(),
                mode: dm.permissions().mode() & 0o7777,
            });
        }
        dir = d.parent();
    }
    Ok(owned())
}
