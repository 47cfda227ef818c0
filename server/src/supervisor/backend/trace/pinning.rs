//! The tracer's side of the pinned region (`tracee::pin`): which processes
//! have it mapped, the mapping made, each thread's slot, the copies
//! written and the argument registers pointed at them.
//!
//! Mapping it: the first call of a process image that needs a copy is
//! made an `mmap` of the region (`MAP_FIXED_NOREPLACE`, read-only, private,
//! anonymous) in the stop it is in; at that `mmap`'s syscall-exit stop the
//! registers of the stop are put back with the call made to run again
//! (`Regs::again_from_exit`), so the call comes back through the filter
//! and is judged with the region there. A process that has something at
//! the address already (`EEXIST`: a fork or vfork child of a process that
//! had it, or a thread of one) counts as having it when its maps show the
//! region exactly as mapped here (read-only, private, anonymous, that
//! range): the filter refuses every call that would put anything else
//! there, or make it writable. A new image has none (`exec`).
//!
//! Failure modes: a region that cannot be mapped (the address taken by
//! something else, a 32-bit call, no slot free) leaves the process without
//! it: its calls are judged with its memory held still instead (the
//! freeze, as before). A copy that cannot be written refuses the call.

use super::regs::{self, Regs};
use crate::tracee::pin;
use std::collections::HashMap;
use std::io;

/// The pinned region's state in the tracer.
#[derive(Default)]
pub(super) struct Pins {
    /// Per process (thread-group id): whether its region is mapped
    /// (absent: not asked yet in this image).
    mapped: HashMap<u32, bool>,
    /// Threads whose call was made the region's `mmap`: their process and
    /// their registers at the stop.
    mapping: HashMap<u32, (u32, Regs)>,
    /// Each thread's slot.
    slots: HashMap<u32, u32>,
    /// Slots given back.
    free: Vec<u32>,
    /// The next slot never given.
    next: u32,
    /// Threads whose call was pointed at copies: the arguments as the
    /// caller gave them, put back at the call's syscall-exit stop where the
    /// tracer takes one (a call run with others held); forgotten at the
    /// thread's next seccomp stop where it does not.
    given: HashMap<u32, Vec<(usize, u64)>>,
    /// What the tracer wrote last in each slot given, word by word from
    /// the slot's start, in the address space of the thread holding it:
    /// a word that is there already is not written again (each write is
    /// a sandbox syscall under gVisor). True because only the tracer
    /// writes the region, and forgotten whenever the memory under the slot
    /// may be another: the slot given back (its thread gone), its thread's
    /// process running a new image, a write that failed.
    written: HashMap<u32, Vec<u64>>,
    /// How many words the last [`Pins::write`] wrote.
    last_written: usize,
}

/// What [`Pins::ready`] found.
pub(super) enum Ready {
    /// The copies go to this address (the thread's slot).
    At(u64),
    /// No region here: hold the memory still instead.
    No,
    /// The call was made the region's `mmap`; it comes back.
    Mapping,
}

impl Pins {
    /// Whether `tid` (of process `tgid`), stopped at the seccomp stop of a
    /// call with `r`, can have copies pinned: its slot's address; or the
    /// region is mapped first (the call resumed as its `mmap`).
    pub(super) fn ready(&mut self, tid: u32, tgid: u32, r: &Regs) -> Ready {
        if !r.native()
            || regs::kernel_arch(tid)
                .is_some_and(|a| a != agentsh_proto::execabi::AUDIT_ARCH_X86_64)
        {
            return Ready::No;
        }
        match self.mapped.get(&tgid) {
            Some(false) => Ready::No,
            Some(true) => self
                .slot(tid)
                .map_or(Ready::No, |n| Ready::At(pin::slot_addr(n))),
            None => match self.map(tid, tgid, r) {
                Ok(()) => Ready::Mapping,
                Err(e) => {
                    tracing::debug!(tid, "the pinned region's mmap not started (gone?): {e}");
                    self.mapped.insert(tgid, false);
                    Ready::No
                }
            },
        }
    }

    /// Makes the call `tid` is stopped in an `mmap` of the region.
    fn map(&mut self, tid: u32, tgid: u32, r: &Regs) -> io::Result<()> {
        const MMAP: u64 = 9;
        let mut call = *r;
        call.make_call(
            MMAP,
            [
                pin::BASE,
                pin::SIZE,
                libc::PROT_READ as u64,
                (libc::MAP_PRIVATE
                    | libc::MAP_ANONYMOUS
                    | libc::MAP_NORESERVE
                    | libc::MAP_FIXED_NOREPLACE) as u64,
                u64::MAX,
                0,
            ],
        );
        regs::set(tid, &call)?;
        regs::syscall(tid)?;
        self.mapping.insert(tid, (tgid, *r));
        Ok(())
    }

    /// Whether `tid`'s call is the region's `mmap`.
    pub(super) fn is_mapping(&self, tid: u32) -> bool {
        self.mapping.contains_key(&tid)
    }

    /// A syscall stop of `tid` while its call is the region's `mmap`: at
    /// the entry (gVisor reports one) it runs on; at the exit the result is
    /// kept and the call it was made from runs again.
    pub(super) fn mapping_stop(&mut self, tid: u32) {
        if regs::at_syscall_entry(tid) {
            if let Err(e) = regs::syscall(tid) {
                tracing::debug!(tid, "tracee not resumed (gone?): {e}");
            }
            return;
        }
        let Some((tgid, mut saved)) = self.mapping.remove(&tid) else {
            return;
        };
        let returned = regs::Regs::get(tid).map(|r| r.returned());
        let mapped = match returned {
            Ok(v) if v == pin::BASE as i64 => true,
            Ok(v) if v == -i64::from(libc::EEXIST) => region_in_maps(tgid),
            // gVisor takes `MAP_FIXED_NOREPLACE` as a hint where the
            // address is taken (an inherited region): the mapping went
            // elsewhere (left there: read-only, unreserved), and the maps
            // say whether the region is the tracer's.
            Ok(v) if v >= 0 => {
                tracing::debug!(tid, "the region's mmap went to {v:#x}: the region taken");
                region_in_maps(tgid)
            }
            Ok(v) => {
                tracing::debug!(
                    tid,
                    "the pinned region could not be mapped: {}",
                    io::Error::from_raw_os_error(-v as i32)
                );
                false
            }
            Err(e) => {
                tracing::debug!(
                    tid,
                    "registers unreadable after the region's mmap (gone?): {e}"
                );
                return;
            }
        };
        self.mapped.insert(tgid, mapped);
        saved.again_from_exit();
        if let Err(e) = regs::set(tid, &saved).and_then(|()| regs::cont(tid, 0)) {
            tracing::debug!(
                tid,
                "tracee not resumed after the region's mmap (gone?): {e}"
            );
        }
    }

    /// `tid`'s slot, given on first use (`None`: none free).
    fn slot(&mut self, tid: u32) -> Option<u32> {
        if let Some(n) = self.slots.get(&tid) {
            return Some(*n);
        }
        let n = self.free.pop().or_else(|| {
            (self.next < pin::SLOTS).then(|| {
                self.next += 1;
                self.next - 1
            })
        })?;
        self.slots.insert(tid, n);
        Some(n)
    }

    /// `tid`'s call had its arguments `given` pointed at copies.
    pub(super) fn pointed(&mut self, tid: u32, given: Vec<(usize, u64)>) {
        self.given.insert(tid, given);
    }

    /// `tid` stopped again before any exit stop of its pinned call: its
    /// arguments stay as they are.
    pub(super) fn forget(&mut self, tid: u32) {
        self.given.remove(&tid);
    }

    /// At `tid`'s syscall-exit stop: the arguments of its pinned call put
    /// back as the caller gave them.
    pub(super) fn put_back(&mut self, tid: u32) {
        let Some(given) = self.given.remove(&tid) else {
            return;
        };
        let done = Regs::get(tid).and_then(|mut r| {
            for (i, v) in given {
                r.set_arg(i, v);
            }
            regs::set(tid, &r)
        });
        if let Err(e) = done {
            tracing::debug!(tid, "arguments not put back (gone?): {e}");
        }
    }

    /// Process `child` was started by a process of `parent`'s (a fork,
    /// vfork or a clone of a process): it has the region when the parent
    /// has it (a fork copies every mapping, and the filter refuses every
    /// call that would keep the region from a child: `MADV_DONTFORK`,
    /// `MADV_WIPEONFORK`; a vfork or `CLONE_VM` child shares it).
    pub(super) fn inherit(&mut self, parent: u32, child: u32) {
        if self.mapped.get(&parent) == Some(&true) {
            self.mapped.insert(child, true);
        }
    }

    /// Process `pid` runs a new image: no region yet (the thread that
    /// exec'd is `pid` now; every other thread of the old image is gone).
    pub(super) fn exec(&mut self, pid: u32) {
        self.mapped.remove(&pid);
        if let Some(n) = self.slots.get(&pid) {
            self.written.remove(n);
        }
    }

    /// `tid` is gone: its slot is free, and its process's state goes with
    /// the process's leader.
    pub(super) fn gone(&mut self, tid: u32) {
        self.mapping.remove(&tid);
        self.mapped.remove(&tid);
        self.given.remove(&tid);
        if let Some(n) = self.slots.remove(&tid) {
            self.written.remove(&n);
            self.free.push(n);
        }
    }

    /// Writes each `(argument, bytes)` into `tid`'s slot, word-aligned one
    /// after the other, and points the argument registers of `tid` at them
    /// (`r`: its registers at the stop, unchanged since); the arguments as
    /// they were. Only the words not there already are written.
    ///
    /// # Errors
    /// `tid` has no slot (ENOSYS), the copies do not fit it (EOVERFLOW), or
    /// a write or the registers failed (the tracee is gone).
    pub(super) fn write(
        &mut self,
        tid: u32,
        copies: &[(usize, &[u8])],
        mut r: Regs,
    ) -> io::Result<Vec<(usize, u64)>> {
        let n = *self
            .slots
            .get(&tid)
            .ok_or_else(|| io::Error::from_raw_os_error(libc::ENOSYS))?;
        let at = pin::slot_addr(n);
        let (starts, words) = slot_words(copies)?;
        // Forgotten until every write is done: a write that fails leaves
        // the slot unknown.
        let mut known = self.written.remove(&n).unwrap_or_default();
        self.last_written = 0;
        for &(off, word) in &words {
            let k = (off / 8) as usize;
            if known.get(k) == Some(&word) {
                continue;
            }
            crate::tracee::poke(tid, at + off, word as libc::c_long)?;
            self.last_written += 1;
            if known.len() <= k {
                known.resize(k + 1, u64::MAX);
            }
            known[k] = word;
        }
        let args = r.args();
        let mut given = Vec::with_capacity(copies.len());
        for ((arg, _), off) in copies.iter().zip(starts) {
            r.set_arg(*arg, at + off);
            given.push((*arg, args[*arg]));
        }
        regs::set(tid, &r)?;
        self.written.insert(n, known);
        Ok(given)
    }
}

/// Where each copy starts in a slot, and the words they make there:
/// (offset, word).
type Layout = (Vec<u64>, Vec<(u64, u64)>);

/// Where each of `copies` starts in a slot, word-aligned after the one
/// before, and the words they make there (each copy's last word padded
/// with zeros).
///
/// # Errors
/// EOVERFLOW: they do not fit a slot.
fn slot_words(copies: &[(usize, &[u8])]) -> io::Result<Layout> {
    let (mut starts, mut words) = (Vec::new(), Vec::new());
    let mut off = 0u64;
    for (_, bytes) in copies {
        let len = bytes.len() as u64;
        if off + len > pin::SLOT {
            return Err(io::Error::from_raw_os_error(libc::EOVERFLOW));
        }
        starts.push(off);
        for (i, chunk) in bytes.chunks(8).enumerate() {
            let mut w = [0u8; 8];
            w[..chunk.len()].copy_from_slice(chunk);
            words.push((off + 8 * i as u64, u64::from_ne_bytes(w)));
        }
        off += (len + 7) & !7;
    }
    Ok((starts, words))
}

/// Whether `pid`'s maps show the region exactly as the tracer maps it.
fn region_in_maps(pid: u32) -> bool {
    let maps =
        crate::tracee::with_owner(pid, || std::fs::read_to_string(format!("/proc/{pid}/maps")));
    match maps {
        Ok(text) => text.lines().any(pin::is_region_line),
        Err(e) => {
            tracing::debug!(pid, "maps unreadable: {e}");
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_live_thread_has_a_slot_of_its_own_and_a_gone_one_gives_it_back() {
        let mut p = Pins::default();
        let a = p.slot(10).expect("a slot");
        let b = p.slot(11).expect("a slot");
        assert_ne!(a, b);
        assert_eq!(p.slot(10), Some(a), "the same thread keeps its slot");
        p.gone(10);
        assert_eq!(p.slot(12), Some(a), "a gone thread's slot is given again");
        // No more than the region holds: beyond, none (the freeze instead).
        for t in 100..100 + pin::SLOTS {
            let _ = p.slot(t);
        }
        assert_eq!(p.slot(1), None);
        assert!(pin::slot_addr(pin::SLOTS - 1) + pin::SLOT <= pin::BASE + pin::SIZE);
    }

    #[test]
    fn a_child_of_a_process_with_the_region_has_it_and_one_of_a_process_without_does_not() {
        let mut p = Pins::default();
        p.mapped.insert(7, true);
        p.inherit(7, 8);
        assert_eq!(p.mapped.get(&8), Some(&true));
        p.inherit(9, 10);
        assert_eq!(p.mapped.get(&10), None, "asked at its first call");
        p.mapped.insert(11, false);
        p.inherit(11, 12);
        assert_eq!(p.mapped.get(&12), None);
    }

    #[test]
    fn a_new_image_or_a_gone_leader_has_no_region_until_it_is_mapped_again() {
        let mut p = Pins::default();
        p.mapped.insert(7, true);
        p.exec(7);
        assert!(!p.mapped.contains_key(&7));
        p.mapped.insert(8, true);
        p.pointed(9, vec![(1, 0x1000)]);
        p.gone(8);
        assert!(!p.mapped.contains_key(&8));
        p.forget(9);
        assert!(!p.given.contains_key(&9));
    }

    /// A stopped child (PTRACE_TRACEME) with the region mapped read-only
    /// where its slot 0 and 1 hold `fill`, as a process's region may after
    /// a fork copied its parent's.
    fn child_with_region(fill: u8) -> u32 {
        // SAFETY: the child only makes raw syscalls.
        let child = unsafe { libc::fork() };
        if child == 0 {
            // SAFETY: as above.
            unsafe {
                let at = libc::mmap(
                    pin::BASE as *mut libc::c_void,
                    (2 * pin::SLOT) as usize,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED_NOREPLACE,
                    -1,
                    0,
                );
                if at as u64 != pin::BASE {
                    libc::_exit(3);
                }
                std::ptr::write_bytes(at.cast::<u8>(), fill, (2 * pin::SLOT) as usize);
                libc::mprotect(at, (2 * pin::SLOT) as usize, libc::PROT_READ);
                libc::ptrace(libc::PTRACE_TRACEME, 0, 0, 0);
                libc::raise(libc::SIGSTOP);
                libc::_exit(0);
            }
        }
        let mut status = 0;
        // SAFETY: waiting for our own child.
        unsafe { libc::waitpid(child, &mut status, 0) };
        assert!(
            libc::WIFSTOPPED(status),
            "the child did not stop: {status:#x}"
        );
        child as u32
    }

    fn end(child: u32) {
        // SAFETY: our own child, then reaped.
        unsafe {
            libc::kill(child as i32, libc::SIGKILL);
            libc::waitpid(child as i32, std::ptr::null_mut(), 0);
        }
    }

    /// What `child`'s slot `n` holds, `len` bytes.
    fn slot_bytes(child: u32, n: u32, len: usize) -> Vec<u8> {
        crate::tracee::read_bytes(child, pin::slot_addr(n), len).expect("read the slot")
    }

    /// The tracer writes only the words of a copy not in the slot already,
    /// and the slot then holds exactly the copy; a slot whose memory may be
    /// another (given to a thread of another process, or its process
    /// exec'd) is written whole, whatever it held. The attack this stops:
    /// a slot taken for known where it is not, so the kernel would read
    /// bytes no one judged.
    #[test]
    fn only_words_not_there_already_are_written_and_an_unknown_slot_is_written_whole() {
        let first = b"/srv/ws/project/src/one.txt\0";
        let second = b"/srv/ws/project/src/two.txt\0";
        let a = child_with_region(b'A');
        let mut p = Pins::default();
        p.mapped.insert(a, true);
        let n = p.slot(a).expect("a slot");
        let r = Regs::get(a).expect("registers");
        p.write(a, &[(0, first)], r).expect("first copy");
        assert_eq!(slot_bytes(a, n, 32), pad(first, 32));
        assert_eq!(p.last_written, 4, "a fresh slot is written whole");
        p.write(a, &[(0, second)], r).expect("second copy");
        assert_eq!(slot_bytes(a, n, 32), pad(second, 32));
        assert_eq!(p.last_written, 1, "only the word that differs");
        p.write(a, &[(0, second)], r).expect("the same again");
        assert_eq!(p.last_written, 0);
        // Its image replaced: nothing known.
        p.exec(a);
        p.mapped.insert(a, true);
        p.write(a, &[(0, second)], r).expect("after exec");
        assert_eq!(p.last_written, 4);
        // The thread gone, its slot given to a thread of another process
        // whose slot holds other bytes: written whole.
        p.gone(a);
        end(a);
        let b = child_with_region(b'B');
        p.mapped.insert(b, true);
        assert_eq!(p.slot(b), Some(n), "the slot is given again");
        let r = Regs::get(b).expect("registers");
        p.write(b, &[(0, second)], r)
            .expect("copy in another process");
        assert_eq!(slot_bytes(b, n, 32), pad(second, 32));
        assert_eq!(p.last_written, 4);
        end(b);
    }

    /// `bytes`, then zeros up to `len` (the copy's last word is padded).
    fn pad(bytes: &[u8], len: usize) -> Vec<u8> {
        let mut v = bytes.to_vec();
        v.resize(len, 0);
        v
    }
}
