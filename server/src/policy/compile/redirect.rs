//! A command rule's `redirect_to.program`, checked on this machine when the
//! policy loads: the program a redirect runs must be one no tree can change.
//!
//! Failure modes: a path that is not clean and absolute, a wrapper, a file
//! that is missing, not regular, not executable, a `#!` script, or that
//! someone other than root could replace: the error says which and what
//! to redirect to instead.

/// `redirect_to.program` checked: an absolute, clean path to a regular,
/// executable file owned by root, in directories only root can write (no
/// tree can change what runs), and not a wrapper (a redirect runs one
/// program with the caller's argv, nothing it names). Reads the file's
/// metadata: a policy naming a target that is not there does not load.
pub(super) fn redirect_target(program: &str) -> Result<String, String> {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let clean = program.starts_with('/')
        && !program.ends_with('/')
        && !program
            .split('/')
            .skip(1)
            .any(|c| c.is_empty() || c == "." || c == "..");
    if !clean {
        return Err(format!(
            "redirect_to.program {program:?} is not a clean absolute path"
        ));
    }
    let name = crate::policy::pattern::ProgramName::exec(program);
    if crate::policy::wrappers::Wrapper::of(&name).is_some() {
        return Err(format!(
            "redirect_to.program {program:?} is a wrapper (it runs what its arguments name): \
             redirect to the program itself"
        ));
    }
    let m = std::fs::symlink_metadata(program)
        .map_err(|e| format!("redirect_to.program {program:?}: {e}"))?;
    if !m.file_type().is_file() {
        return Err(format!(
            "redirect_to.program {program:?} is not a regular file (a symlink is not accepted: \
             name its target)"
        ));
    }
    if m.uid() != 0 || m.permissions().mode() & 0o022 != 0 {
        return Err(format!(
            "redirect_to.program {program:?} must be owned by root and writable by nobody else \
             (owner {}, mode {:o})",
            m.uid(),
            m.permissions().mode() & 0o7777
        ));
    }
    if m.permissions().mode() & 0o111 == 0 {
        return Err(format!("redirect_to.program {program:?} is not executable"));
    }
    let mut head = [0u8; 2];
    let script = std::fs::File::open(program)
        .and_then(|f| std::os::unix::fs::FileExt::read_at(&f, &mut head, 0))
        .is_ok_and(|n| n == 2 && &head == b"#!");
    if script {
        return Err(format!(
            "redirect_to.program {program:?} is a #! script: its interpreter would run and \
             could not be checked; redirect to a binary"
        ));
    }
    let mut dir = std::path::Path::new(program).parent();
    while let Some(d) = dir {
        let dm = std::fs::metadata(d).map_err(|e| format!("{}: {e}", d.display()))?;
        if dm.uid() != 0 || dm.permissions().mode() & 0o022 != 0 {
            return Err(format!(
                "redirect_to.program {program:?} is in {}, which someone other than root can \
                 write (owner {}, mode {:o}): a tree could replace the program",
                d.display(),
                dm.uid(),
                dm.permissions().mode() & 0o7777
            ));
        }
        dir = d.parent();
    }
    Ok(program.to_string())
}
