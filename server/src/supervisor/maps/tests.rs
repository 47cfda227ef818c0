//! The maps family's fail-closed branches (`handle`'s module doc), each
//! driven through the real [`handle`] with the recording doubles
//! (`supervisor::testkit`), without root: each test asserts the answer
//! (continue, EACCES, ENOMEM, ESRCH) and the event written, or that none
//! was.

use super::{handle, MapsState};
use crate::supervisor::seam::Caught;
use crate::supervisor::stops::recording::{Answer, Asked};
use crate::supervisor::testkit::{own_tid, Answered, Bench, RecordingStop};
use crate::tracee::recording::{Question, Scripted};
use agentsh_proto::mapabi::{MapKind, MapSyscall, ADDR_ARG, FD_ARG, LEN_ARG, MAP_SYSCALLS};
use std::os::fd::AsRawFd;

const ALLOW_ALL: &str = "name: unit\ndefault: allow\n";
const NO_EXEC_MEMORY: &str = "name: unit\ndefault: allow\nexec_memory: deny\n";
const PAGE: u64 = 4096;

/// This machine's native `mmap` or `mprotect`.
fn call(kind: MapKind) -> &'static MapSyscall {
    let arch = agentsh_proto::execabi::EXEC_SYSCALLS
        .iter()
        .find(|s| s.abi == agentsh_proto::execabi::filter_abis()[0])
        .expect("the native ABI")
        .arch;
    MAP_SYSCALLS
        .iter()
        .find(|m| m.arch == arch && m.kind == kind && !m.name.ends_with('2'))
        .expect("the native call")
}

/// The call `kind` of this thread with `args`, handled.
fn map(b: &mut Bench, kind: MapKind, args: [u64; 6]) -> RecordingStop {
    let c = call(kind);
    let caught = Caught {
        tid: own_tid(),
        tgid: None,
        arch: c.arch,
        nr: c.nr,
        args,
    };
    let stop = RecordingStop::new(false);
    let mut st = MapsState::default();
    handle(&b.ctx, &b.tree, &mut b.tasks, &mut st, c, &caught, &stop);
    stop
}

/// `mmap` of this thread's fd `fd`, executable.
fn mmap(b: &mut Bench, fd: i32) -> RecordingStop {
    let mut args = [0; 6];
    args[FD_ARG] = fd as u32 as u64;
    args[LEN_ARG] = PAGE;
    map(b, MapKind::Mmap, args)
}

/// `mprotect` of `addr..addr+len` to executable.
fn mprotect(b: &mut Bench, addr: u64, len: u64) -> RecordingStop {
    let mut args = [0; 6];
    args[ADDR_ARG] = addr;
    args[LEN_ARG] = len;
    map(b, MapKind::Mprotect, args)
}

/// A file in the bench's directory holding `bytes`, open.
fn file(b: &Bench, name: &str, bytes: &[u8]) -> std::fs::File {
    let p = b.dir().join(name);
    std::fs::write(&p, bytes).unwrap();
    std::fs::File::open(p).unwrap()
}

/// Answered EACCES, with one `file` event of `syscall`, refused by `rule`
/// because `why`.
fn assert_refused(b: &Bench, stop: &RecordingStop, syscall: &str, rule: &str, why: &str) {
    assert_eq!(stop.answers(), [Answered::Refused(libc::EACCES)]);
    let e = b.event();
    assert_eq!(e["type"], "file", "{e}");
    assert_eq!(e["syscall"], syscall, "{e}");
    assert_eq!(e["right"], "execute", "{e}");
    assert_eq!(e["rule"], rule, "{e}");
    assert_eq!(e["decision"], "deny", "{e}");
    let reason = e["reason"].as_str().unwrap_or_default();
    assert!(reason.contains(why), "{why:?} not in {reason:?}");
}

#[test]
fn a_file_every_question_answers_is_mapped() {
    // The control: a plain file under exec_memory: deny is mapped, so each
    // refusal below fails if its branch stopped refusing.
    let mut b = Bench::new(NO_EXEC_MEMORY, |_| {});
    let f = file(&b, "data", b"not a program");
    let stop = mmap(&mut b, f.as_raw_fd());
    assert_eq!(stop.answers(), [Answered::Proceeded], "{:?}", b.events());
    assert!(b.events().is_empty());
    let asked = [Question::FdName, Question::FdMeta, Question::FdOpen];
    assert_eq!(b.host.calls(), asked);
    assert_eq!(b.stops.calls(), [Asked::HoldStill]);
}

#[test]
fn a_negative_fd_is_left_to_the_kernel() {
    let mut b = Bench::new(NO_EXEC_MEMORY, |_| {});
    let stop = mmap(&mut b, -1);
    assert_eq!(stop.answers(), [Answered::Proceeded]);
    assert!(b.events().is_empty());
    assert!(b.host.calls().is_empty() && b.stops.calls().is_empty());
}

#[test]
fn a_file_that_cannot_be_named_is_refused_unreadable() {
    let mut b = Bench::new(ALLOW_ALL, |_| {});
    b.host
        .script(Question::FdName, Scripted::Fails(libc::EBADF));
    let stop = mmap(&mut b, 0);
    assert_refused(
        &b,
        &stop,
        "mmap",
        "unreadable",
        "the file at fd 0 cannot be named",
    );
}

#[test]
fn a_file_that_cannot_be_read_is_refused_unreadable() {
    let mut b = Bench::new(NO_EXEC_MEMORY, |_| {});
    let f = file(&b, "lib", b"x");
    b.host.script(Question::FdMeta, Scripted::Fails(libc::EIO));
    let stop = mmap(&mut b, f.as_raw_fd());
    assert_refused(&b, &stop, "mmap", "unreadable", "cannot be read");
}

#[test]
fn a_file_that_cannot_be_opened_is_refused_unreadable() {
    let mut b = Bench::new(NO_EXEC_MEMORY, |_| {});
    let f = file(&b, "lib", b"x");
    b.host
        .script(Question::FdOpen, Scripted::Fails(libc::EACCES));
    let stop = mmap(&mut b, f.as_raw_fd());
    assert_refused(&b, &stop, "mmap", "unreadable", "cannot be opened");
}

#[test]
fn a_file_that_cannot_be_classified_is_refused_exec_memory() {
    let mut b = Bench::new(NO_EXEC_MEMORY, |_| {});
    let f = file(&b, "odd", b"\x7fELF\x02");
    let stop = mmap(&mut b, f.as_raw_fd());
    assert_refused(
        &b,
        &stop,
        "mmap",
        "exec_memory",
        "its headers cannot be read",
    );
}

#[test]
fn a_caller_whose_fd_table_cannot_be_held_is_refused_memory_not_frozen() {
    let mut b = Bench::new(ALLOW_ALL, |_| {});
    b.stops
        .script(Asked::HoldStill, Answer::Fails(libc::EACCES));
    let stop = mmap(&mut b, 0);
    assert_refused(
        &b,
        &stop,
        "mmap",
        "memory_not_frozen",
        "threads are unreadable",
    );
    assert!(b.host.calls().is_empty(), "nothing judged unheld");
}

#[test]
fn a_caller_gone_before_its_hold_is_answered_esrch_unaudited() {
    let mut b = Bench::new(ALLOW_ALL, |_| {});
    b.stops.script(Asked::HoldStill, Answer::Gone);
    let stop = mmap(&mut b, 0);
    assert_eq!(stop.answers(), [Answered::Value(-i64::from(libc::ESRCH))]);
    assert!(b.events().is_empty());
}

/// Three pages of this process, the middle one unmapped (dropped: gone).
struct Holed(u64);

impl Holed {
    fn new() -> Holed {
        // SAFETY: a fresh anonymous mapping, no memory of ours named.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                3 * PAGE as usize,
                libc::PROT_NONE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert_ne!(p, libc::MAP_FAILED);
        // SAFETY: the middle page of the mapping just made.
        let hole = unsafe { libc::munmap(p.cast::<u8>().add(PAGE as usize).cast(), PAGE as usize) };
        assert_eq!(hole, 0);
        Holed(p as u64)
    }
}

impl Drop for Holed {
    fn drop(&mut self) {
        // SAFETY: the pages `new` mapped (unmapping the hole is harmless).
        unsafe { libc::munmap(self.0 as *mut libc::c_void, 3 * PAGE as usize) };
    }
}

#[test]
fn a_range_the_caller_has_mapped_is_let_through() {
    let mut b = Bench::new(ALLOW_ALL, |_| {});
    let h = Holed::new();
    let stop = mprotect(&mut b, h.0, PAGE);
    assert_eq!(stop.answers(), [Answered::Proceeded], "{:?}", b.events());
    assert_eq!(b.host.calls(), [Question::Maps]);
}

#[test]
fn a_range_with_a_hole_is_answered_enomem_unaudited() {
    let mut b = Bench::new(ALLOW_ALL, |_| {});
    let h = Holed::new();
    let stop = mprotect(&mut b, h.0, 3 * PAGE);
    assert_eq!(stop.answers(), [Answered::Refused(libc::ENOMEM)]);
    assert!(b.events().is_empty());
}

#[test]
fn maps_that_cannot_be_read_are_refused_unreadable() {
    let mut b = Bench::new(ALLOW_ALL, |_| {});
    let h = Holed::new();
    b.host.script(Question::Maps, Scripted::Fails(libc::EACCES));
    let stop = mprotect(&mut b, h.0, PAGE);
    assert_refused(
        &b,
        &stop,
        "mprotect",
        "unreadable",
        "the caller's maps cannot be read",
    );
}

#[test]
fn maps_that_fail_midway_are_refused_unreadable() {
    let mut b = Bench::new(ALLOW_ALL, |_| {});
    let h = Holed::new();
    b.host.script(Question::Maps, Scripted::Unreadable);
    let stop = mprotect(&mut b, h.0, PAGE);
    assert_refused(
        &b,
        &stop,
        "mprotect",
        "unreadable",
        "the caller's maps cannot be read",
    );
}
