//! Where a trapped call's strings live: refuse memory another process could write
//! (the exec family's path and argv, the files family's paths).
//!
//! Stopping every task that shares the caller's address space (`sharing`) is
//! not enough when the strings sit in a mapping other processes can change:
//! a `MAP_SHARED` mapping (a memfd, a shared file, SysV shm) is written by
//! whoever else maps it, and the pages of a *private* file mapping follow the
//! file until the caller writes them (so whoever can write the file can change
//! them). An exec whose path, argv pointer array or argv strings lie in such
//! a mapping is refused (EACCES, audited with the reason), unless the file is
//! the caller's own executable where the kernel refuses writes to a running
//! executable (Linux's `ETXTBSY`; gVisor lets a sibling `pwrite` it, so there
//! it is refused as any other file: `tracee::running_images_write_protected`)
//! or lies beneath the paths no tree may write
//! (`policy::landlock::SYSTEM_NO_WRITE`: libc's `"/bin/sh"` for `system()`
//! lives there). Strings on the stack, the heap or other anonymous memory,
//! the common case, cost one query per distinct mapping.
//!
//! The mapping is found by `tracee::maps` (`PROCMAP_QUERY`, or
//! `/proc/<pid>/maps` on older kernels).
//!
//! Failure modes: an address in no mapping, or maps that cannot be read, is a
//! refusal with the reason (fail closed).

use crate::tracee::maps::{Maps, Vma};

/// One call's strings checked address by address: the caller's executable
/// is read once, and only when a file mapping holds one of them (rare).
pub struct Places {
    pid: u32,
    /// The task whose owner's ids read `/proc/<pid>/exe`.
    owner: u32,
    own_exe: Option<String>,
}

impl Places {
    pub fn new(pid: u32, owner: u32) -> Places {
        Places {
            pid,
            owner,
            own_exe: None,
        }
    }

    /// Why the mapping holding `addr` may not hold a judged string
    /// ([`refusal`]), if it may not.
    ///
    /// # Errors
    /// The address is in no mapping, or the maps cannot be read.
    pub fn refusal_at(&mut self, maps: &mut Maps, addr: u64) -> std::io::Result<Option<String>> {
        let v = maps.find(addr)?;
        if v.inode != 0
            && !v.shared
            && self.own_exe.is_none()
            && crate::tracee::running_images_write_protected()
        {
            let _owner = crate::tracee::as_owner(self.owner);
            // Unreadable: no file counts as the caller's own (refused).
            self.own_exe = Some(
                std::fs::read_link(format!("/proc/{}/exe", self.pid))
                    .map(|p| p.to_string_lossy().into_owned())
                    .unwrap_or_default(),
            );
        }
        Ok(refusal(
            &v,
            self.own_exe.as_deref().unwrap_or(""),
            crate::policy::landlock::SYSTEM_NO_WRITE,
        ))
    }
}

/// Why a mapping may not hold an exec's strings, if it may not. Pure.
pub fn refusal(v: &Vma, own_exe: &str, no_write: &[&str]) -> Option<String> {
    if v.shared {
        let what = if v.name.is_empty() {
            "shared memory".to_string()
        } else {
            format!("a shared mapping of {}", v.name)
        };
        return Some(format!(
            "{what}, which another process could write after the check"
        ));
    }
    if v.inode == 0 {
        return None; // anonymous private memory: stack, heap, [vdso]...
    }
    if !own_exe.is_empty() && v.name == own_exe {
        return None;
    }
    let beneath = |dir: &str| {
        v.name
            .strip_prefix(dir)
            .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
    };
    if !v.name.ends_with(" (deleted)") && no_write.iter().any(|d| beneath(d)) {
        return None;
    }
    Some(format!(
        "a private mapping of {}, whose pages follow the file (writable by others) until copied",
        if v.name.is_empty() { "a file" } else { &v.name }
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vma(shared: bool, inode: u64, name: &str) -> Vma {
        Vma {
            start: 0x1000,
            end: 0x2000,
            shared,
            inode,
            name: name.into(),
        }
    }

    #[test]
    fn which_mappings_may_hold_exec_strings() {
        let nw = ["/usr/lib", "/usr/bin"];
        let exe = "/srv/ws/prog";
        let cases: &[(Vma, bool)] = &[
            (vma(false, 0, "[stack]"), true),
            (vma(false, 0, ""), true),
            (vma(false, 0, "[heap]"), true),
            (vma(true, 0, "/dev/zero (deleted)"), false),
            (vma(true, 77, "/memfd:x (deleted)"), false),
            (vma(true, 77, "/usr/lib/x86_64-linux-gnu/libc.so.6"), false),
            (vma(false, 77, "/usr/lib/x86_64-linux-gnu/libc.so.6"), true),
            (vma(false, 77, "/usr/libexec/x"), false),
            (vma(false, 77, "/srv/ws/prog"), true),
            (vma(false, 77, "/srv/ws/data"), false),
            (vma(false, 77, "/usr/lib/x (deleted)"), false),
        ];
        for (v, ok) in cases {
            assert_eq!(refusal(v, exe, &nw).is_none(), *ok, "{v:?}");
        }
        // No own image exempt (gVisor: a running executable can be
        // written): the program's own file is refused as any other.
        assert!(refusal(&vma(false, 77, "/srv/ws/prog"), "", &nw).is_some());
        assert!(refusal(&vma(false, 77, ""), "", &nw).is_some());
    }
}
