//! The pinned region: where the ptrace backend puts the bytes it judged
//! (a path call's paths, a connect's address) before the kernel reads them.
//!
//! Under a tracer the kernel reads a call's strings after the tracer did.
//! Holding every task that could write them still is a bet on knowing
//! every such task (threads, vfork relatives, a sibling writing a file
//! behind a private mapping). Instead the tracer copies what it judged
//! into a region of the caller's own address space that only the tracer
//! writes, and points the call's argument register at the copy: the kernel
//! reads the bytes judged, whoever else writes the caller's memory.
//!
//! The region is [`SIZE`] bytes at [`BASE`] in every traced process: mapped
//! `PROT_READ`, private and anonymous by the process itself at the tracer's
//! request (the tracer makes the call it is stopped in an `mmap` first),
//! so no task of the tree can write it (the kernel's own writes on a
//! task's behalf, `read` into it included, fail with EFAULT) and the tracer
//! can (`PTRACE_POKEDATA` writes a read-only private page, as a debugger
//! does). Every call that could make it writable, remove it or put
//! something else there (`mprotect`, `pkey_mprotect`, `munmap`, `mremap`,
//! `madvise`, `mmap`, `remap_file_pages`, `shmat`) is sent to the tracer
//! when its range may reach the region (the filter compares the upper half
//! of the address and the length: [`WINDOWS`], [`LONG`]) and refused when
//! it does ([`touches`]). Each traced thread has its own slot ([`SLOT`]
//! bytes), so two threads' calls never share a copy.
//!
//! What this does not do: the call's argument register keeps pointing at
//! the copy after the call returns (the kernel does not put it back, and a
//! second stop per call to put it back would double the call's cost under
//! gVisor). A program reading its argument register after a raw `syscall`
//! instruction finds the same bytes, read-only.
//!
//! Failure modes: none here (pure arithmetic); where the region cannot be
//! mapped the tracer holds the caller's memory still instead (`freeze`).

/// Where the region starts: 4 GiB-aligned, far below where Linux and
/// gVisor put mappings (top-down from below the stack) and above the
/// sanitizers' shadow ranges.
pub const BASE: u64 = 0x4a80_0000_0000;
/// One thread's slot: two paths of `PATH_MAX` bytes each, and room for an
/// `open_how` or a socket address.
pub const SLOT: u64 = 16 * 1024;
/// How many threads can have a slot at once (beyond: the freeze).
pub const SLOTS: u32 = 4096;
/// The region's size (64 MiB of address space; only written pages cost
/// memory).
pub const SIZE: u64 = SLOT * SLOTS as u64;

/// The upper 32 bits of the addresses a call of less than [`LONG`] bytes
/// must start at to reach the region: its own 4 GiB window, and the one
/// below.
pub const WINDOWS: [u64; 2] = [BASE >> 32, (BASE >> 32) - 1];
/// A length from which a call may reach the region from anywhere below it.
pub const LONG: u64 = 1 << 32;

/// Where slot `n` starts.
pub fn slot_addr(n: u32) -> u64 {
    BASE + u64::from(n) * SLOT
}

/// The page size the ranges are rounded to.
const PAGE: u64 = 4096;

/// Whether `[start, start + len)` (its last page counted whole, as the
/// kernel rounds lengths) meets the region.
pub fn meets(start: u64, len: u64) -> bool {
    let end = start.saturating_add(len.saturating_add(PAGE - 1) & !(PAGE - 1));
    start < BASE + SIZE && end > BASE
}

/// The memory calls the tracer checks, by their x86_64 numbers.
pub mod nr {
    pub const MMAP: i32 = 9;
    pub const MPROTECT: i32 = 10;
    pub const MUNMAP: i32 = 11;
    pub const MREMAP: i32 = 25;
    pub const MADVISE: i32 = 28;
    pub const SHMAT: i32 = 30;
    pub const REMAP_FILE_PAGES: i32 = 216;
    pub const PKEY_MPROTECT: i32 = 329;
}

/// Whether `nr` is one of the x86_64 memory calls [`touches`] judges.
pub fn is_memory_call(nr: i32) -> bool {
    matches!(
        nr,
        nr::MMAP
            | nr::MPROTECT
            | nr::PKEY_MPROTECT
            | nr::MUNMAP
            | nr::MADVISE
            | nr::REMAP_FILE_PAGES
            | nr::MREMAP
            | nr::SHMAT
    )
}

/// Whether the x86_64 call `nr` with `args` would change, remove or
/// replace any part of the region: `Some(name)` of the call if so.
pub fn touches(nr: i32, args: &[u64; 6]) -> Option<&'static str> {
    const MREMAP_FIXED: u64 = 2;
    const SHM_REMAP: u64 = 0o40_000;
    let (name, hit) = match nr {
        nr::MMAP => ("mmap", meets(args[0], args[1])),
        nr::MPROTECT => ("mprotect", meets(args[0], args[1])),
        nr::PKEY_MPROTECT => ("pkey_mprotect", meets(args[0], args[1])),
        nr::MUNMAP => ("munmap", meets(args[0], args[1])),
        nr::MADVISE => ("madvise", meets(args[0], args[1])),
        nr::REMAP_FILE_PAGES => ("remap_file_pages", meets(args[0], args[1])),
        nr::MREMAP => (
            "mremap",
            meets(args[0], args[1].max(args[2]))
                || (args[3] & MREMAP_FIXED != 0 && meets(args[4], args[2])),
        ),
        // The segment's size is not an argument: any attach in the
        // windows, and any that may replace what is mapped (SHM_REMAP).
        nr::SHMAT => (
            "shmat",
            WINDOWS.contains(&(args[1] >> 32)) || args[2] & SHM_REMAP != 0,
        ),
        _ => return None,
    };
    hit.then_some(name)
}

/// Whether a line of `/proc/<pid>/maps` is the region as the tracer maps
/// it: exactly its range, read-only, private, anonymous.
pub fn is_region_line(line: &str) -> bool {
    let mut f = line.split_whitespace();
    let range = format!("{:x}-{:x}", BASE, BASE + SIZE);
    f.next() == Some(range.as_str())
        && f.next() == Some("r--p")
        && f.next()
            .is_some_and(|o| o.trim_start_matches('0').is_empty())
        && f.next() == Some("00:00")
        && f.next() == Some("0")
        && f.next().is_none()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_that_reach_the_region_and_ranges_that_do_not() {
        assert!(meets(BASE, 1));
        assert!(meets(BASE + SIZE - 1, 1));
        assert!(!meets(BASE + SIZE, 1 << 40));
        // A length rounds up to whole pages: one byte before the region
        // covers the page before it only.
        assert!(!meets(BASE - PAGE, 1));
        assert!(meets(BASE - PAGE, PAGE + 1));
        assert!(meets(0, u64::MAX));
        assert!(!meets(0, BASE));
        // Every range that meets it starts in a window or is long.
        for (start, len) in [(BASE - 5, 6), (BASE - (1 << 32) + 8, (1 << 32) - 1)] {
            assert!(meets(start, len));
            assert!(WINDOWS.contains(&(start >> 32)) || len >= LONG);
        }
    }

    #[test]
    fn the_calls_that_would_change_the_region_are_named() {
        let a = |x: [u64; 6]| x;
        assert_eq!(
            touches(nr::MPROTECT, &a([BASE, 4096, 3, 0, 0, 0])),
            Some("mprotect")
        );
        assert_eq!(
            touches(nr::MPROTECT, &a([BASE + SIZE, 4096, 3, 0, 0, 0])),
            None
        );
        assert_eq!(
            touches(nr::MUNMAP, &a([0, u64::MAX, 0, 0, 0, 0])),
            Some("munmap")
        );
        assert_eq!(
            touches(nr::MADVISE, &a([BASE + 8192, 1, 4, 0, 0, 0])),
            Some("madvise")
        );
        // mremap: the old range grown, or a fixed new place.
        assert_eq!(
            touches(nr::MREMAP, &a([BASE - 4096, 4096, 8192, 0, 0, 0])),
            Some("mremap")
        );
        assert_eq!(
            touches(nr::MREMAP, &a([0x1000, 4096, 4096, 3, BASE, 0])),
            Some("mremap")
        );
        assert_eq!(
            touches(nr::MREMAP, &a([0x1000, 4096, 4096, 1, BASE, 0])),
            None
        );
        assert_eq!(
            touches(nr::SHMAT, &a([1, BASE + (1 << 31), 0, 0, 0, 0])),
            Some("shmat")
        );
        assert_eq!(touches(nr::SHMAT, &a([1, 0, 0, 0, 0, 0])), None);
        assert_eq!(
            touches(nr::SHMAT, &a([1, 0x1000, 0o40_000, 0, 0, 0])),
            Some("shmat")
        );
        assert_eq!(touches(0, &a([BASE, 1, 0, 0, 0, 0])), None);
    }

    #[test]
    fn only_the_region_as_mapped_counts_as_the_region() {
        let ours = format!("{:x}-{:x} r--p 00000000 00:00 0 ", BASE, BASE + SIZE);
        assert!(is_region_line(&ours));
        let shared = format!(
            "{:x}-{:x} r--s 00000000 00:01 7 /memfd:x",
            BASE,
            BASE + SIZE
        );
        assert!(!is_region_line(&shared));
        let writable = format!("{:x}-{:x} rw-p 00000000 00:00 0", BASE, BASE + SIZE);
        assert!(!is_region_line(&writable));
        let smaller = format!("{:x}-{:x} r--p 00000000 00:00 0", BASE, BASE + 4096);
        assert!(!is_region_line(&smaller));
    }
}
