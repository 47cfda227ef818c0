//! What the tracer does with each event a tracee reports: which tree a new
//! task belongs to (fork, vfork and clone events; a task that stops before
//! its parent's event is claimed through `/proc`), the syscall-exit stop of
//! a call run with others held, group-stops and signals passed through, and
//! a task gone.
//!
//! Why here and not in the loop: the loop waits and answers requests; the
//! bookkeeping of who is traced, and of the threads held for another's
//! call (`freeze`) or for the names gate (`gate`), is one concern that every
//! event goes through.
//!
//! Failure modes: a tracee that cannot be resumed is gone (logged); a task
//! whose tree cannot be found waits unclaimed until its parent's event names
//! it; a task that is never claimed stays stopped, never runs untraced.

use super::regs;
use super::tracer_loop::{Loop, Tracee};
use crate::tracee::ProcStatus;

const EVENT_FORK: i32 = 1;
const EVENT_VFORK: i32 = 2;
const EVENT_CLONE: i32 = 3;
const EVENT_EXEC: i32 = 4;
const EVENT_SECCOMP: i32 = 7;
const EVENT_STOP: i32 = 128;

impl Loop {
    /// One wait status of tracee `tid`, handled as its kind says.
    pub(super) fn event(&mut self, tid: u32, status: i32) {
        tracing::trace!(
            tid,
            stopped = libc::WIFSTOPPED(status),
            signal = libc::WSTOPSIG(status),
            event = (status >> 16) & 0xffff,
            "tracer event"
        );
        if !libc::WIFSTOPPED(status) {
            self.gone(tid);
            return;
        }
        // Seen stopped: a walk it was let into without an exit stop is over.
        if self.gate.observed(tid) {
            self.unpark_later = true;
        }
        if !self.tracees.contains_key(&tid) && !self.claim(tid) {
            // Its parent's fork event names it; until then it waits here.
            self.unclaimed.insert(tid, status);
            return;
        }
        let signal = libc::WSTOPSIG(status);
        if signal == libc::SIGTRAP | 0x80 {
            return self.syscall_stop(tid);
        }
        let resumed = match (status >> 16) & 0xffff {
            EVENT_SECCOMP => {
                // From here: the claim and the walk-gate above are the
                // tracer's time a stop too, but a few map lookups.
                let started = self.clock.now();
                self.seccomp_stop(tid, status);
                self.clock.add(started);
                Ok(())
            }
            EVENT_EXEC => {
                let started = self.clock.now();
                self.exec_stop(tid);
                let r = regs::cont(tid, 0);
                self.clock
                    .add_event(started, super::stopclock::Kind::ExecEvent);
                r
            }
            EVENT_FORK | EVENT_VFORK | EVENT_CLONE => {
                let started = self.clock.now();
                if let Ok(child) = regs::event_msg(tid) {
                    let event = (status >> 16) & 0xffff;
                    let thread = event == EVENT_CLONE && clones_thread(tid);
                    // A child claimed and gone before this event shares nothing.
                    if !self.gone_unadopted.contains(&(child as u32)) {
                        self.related(event, child as u32, tid);
                    }
                    self.adopt(child as u32, tid, thread);
                }
                let r = regs::cont(tid, 0);
                self.clock
                    .add_event(started, super::stopclock::Kind::ForkEvent);
                r
            }
            EVENT_STOP => match signal {
                // A group-stop: stay stopped, but tell us when it ends.
                libc::SIGSTOP | libc::SIGTSTP | libc::SIGTTIN | libc::SIGTTOU => regs::listen(tid),
                _ => regs::cont(tid, 0),
            },
            // A signal on its way: deliver it.
            0 => regs::cont(tid, signal),
            _ => regs::cont(tid, 0),
        };
        if let Err(e) = resumed {
            tracing::debug!(tid, "tracee not resumed (gone?): {e}");
        }
    }

    /// A syscall stop (`SIGTRAP | 0x80`): of the pinned region's mmap, or
    /// of a call run with others held.
    fn syscall_stop(&mut self, tid: u32) {
        if self.pins.borrow().is_mapping(tid) {
            // The pinned region's mmap, made from the call's stop.
            self.pins.borrow_mut().mapping_stop(tid);
            return;
        }
        if self.freezer.entering(tid) {
            // gVisor: the entry of the call resumed from its seccomp
            // stop; it runs now, the others still held.
            if let Err(e) = regs::syscall(tid) {
                tracing::debug!(tid, "tracee not resumed (gone?): {e}");
            }
            return;
        }
        // The syscall-exit stop of a call run with others held: what its
        // family asked for first, its pinned arguments put back, then the
        // others go.
        self.after_call(tid);
        self.pins.borrow_mut().put_back(tid);
        self.let_go(tid);
        self.gate.done(tid);
        if let Err(e) = regs::cont(tid, 0) {
            tracing::debug!(tid, "tracee not resumed (gone?): {e}");
        }
        self.unpark();
    }

    /// A task that stopped before its parent's fork event: its tree is its
    /// thread group's or its parent's, if either is a tracee. A new process
    /// may be a vfork child sharing its parent's memory: taken so until the
    /// parent's event says (`vforks`).
    fn claim(&mut self, tid: u32) -> bool {
        let Ok(status) = ProcStatus::read(tid) else {
            return false;
        };
        let tgid = status.number("Tgid").unwrap_or(tid);
        let ppid = status.number("PPid");
        // A new process's own id may still name a task that is gone (its
        // exit unseen, its number reused): only its parent says its tree.
        // A new thread's process is a tracee already.
        let own = (tgid != tid).then_some(tgid);
        let root = [own, ppid]
            .into_iter()
            .flatten()
            .find_map(|p| self.tracees.get(&p).map(|t| t.root));
        match root {
            Some(root) => {
                // A new process may be a vfork child sharing its parent's
                // memory: taken so until the parent's event says.
                if let Some(parent) = ppid.filter(|p| tgid == tid && self.tracees.contains_key(p)) {
                    self.vforks.maybe(tid, parent);
                }
                self.add(tid, root, tgid, false);
                true
            }
            None => false,
        }
    }

    /// Thread `parent` started `child` (`event`: a fork, vfork or clone):
    /// whether they share memory from now on (a vfork child, until it
    /// execs or exits).
    fn related(&mut self, event: i32, child: u32, parent: u32) {
        if event != EVENT_VFORK {
            self.vforks.apart(child);
            return;
        }
        let process = self.tracees.get(&parent).map_or(parent, |t| t.tgid);
        self.vforks.vforked(child, parent, process);
    }

    /// `child` was started by tracee `parent` (a fork, vfork or clone
    /// event; `thread`: a thread of the parent's process).
    fn adopt(&mut self, child: u32, parent: u32, thread: bool) {
        let Some((root, tgid)) = self.tracees.get(&parent).map(|t| (t.root, t.tgid)) else {
            return;
        };
        if !thread {
            self.pins.borrow_mut().inherit(tgid, child);
        }
        let tgid = if thread { tgid } else { child };
        // Claimed already at its first stop (the same tree and process), or
        // an entry left by a task that is gone and whose number the child
        // reuses: replaced, nothing of it kept.
        match self.tracees.get_mut(&child) {
            Some(t) if t.root == root && t.tgid == tgid && !t.adopted => t.adopted = true,
            // Claimed, and gone already: nothing to add.
            _ if self.gone_unadopted.remove(&child) => {}
            _ => self.add(child, root, tgid, true),
        }
        if let Some(status) = self.unclaimed.remove(&child) {
            self.event(child, status);
        }
    }

    /// `tid` is a new task of tree `root`, in process `tgid`: whatever an
    /// entry of that number said before is gone (a task whose exit was not
    /// seen), counted out of its tree.
    fn add(&mut self, tid: u32, root: u32, tgid: u32, adopted: bool) {
        self.gone_unadopted.remove(&tid);
        let stale = self.tracees.insert(
            tid,
            Tracee {
                root,
                tgid,
                expect: None,
                adopted,
            },
        );
        if let Some(stale) = stale {
            tracing::debug!(
                tid,
                stale_root = stale.root,
                "a task's number reused: its old entry dropped"
            );
            self.left(stale.root);
        }
        if let Some(t) = self.trees.get_mut(&root) {
            t.members += 1;
        }
    }

    /// A task of tree `root` is gone: the tree is finished with its last.
    fn left(&mut self, root: u32) {
        let Some(tree) = self.trees.get_mut(&root) else {
            return;
        };
        tree.members = tree.members.saturating_sub(1);
        if tree.members == 0 {
            if let Some(tree) = self.trees.remove(&root) {
                tracing::info!(session = %tree.tree.session_id, root_pid = root, "tree finished");
                // Before the tree is said finished (`wrap` then ends).
                self.clock.report(self.trees.is_empty());
                tree.trees.finished(root);
            }
        }
    }

    /// At `caller`'s syscall-exit stop: what its family asked to run then
    /// (`Stop::proceed_then`), with the call's return value.
    fn after_call(&mut self, caller: u32) {
        let Some(after) = self.freezer.take_after(caller) else {
            return;
        };
        let returned = match regs::Regs::get(caller) {
            Ok(r) => r.returned(),
            Err(e) => {
                tracing::debug!(
                    caller,
                    "registers unreadable at a syscall exit (gone?): {e}"
                );
                return;
            }
        };
        if let Some(v) = after(returned) {
            if let Err(e) = regs::set_returned(caller, v) {
                tracing::debug!(caller, "return value not set (gone?): {e}");
            }
        }
    }

    /// Lets go the threads `caller` held stopped: each stop they came to is
    /// handled now, as it would have been.
    pub(super) fn let_go(&mut self, caller: u32) {
        for (t, status) in self.freezer.release(caller) {
            if self.tracees.contains_key(&t) {
                self.event(t, status);
            }
        }
    }

    /// The path calls the names gate lets in now, handled as they would
    /// have been when they came; then the walks a waiting change needs
    /// stopped are asked to stop.
    pub(super) fn unpark(&mut self) {
        if self.unparking {
            return; // the outer call goes on with the queue
        }
        self.unparking = true;
        while let Some((t, status)) = self.gate.next() {
            if self.tracees.contains_key(&t) {
                self.replaying = Some(t);
                self.event(t, status);
                self.replaying = None;
            }
        }
        self.unparking = false;
        self.interrupt_walkers();
    }

    /// Interrupts the threads let into walks without an exit stop that a
    /// waiting change needs seen stopped (`gate`); one that is gone is
    /// observed at once.
    pub(super) fn interrupt_walkers(&mut self) {
        for t in self.gate.walks_to_interrupt() {
            if regs::interrupt(t).is_err() && self.gate.observed(t) {
                self.unpark_later = true;
            }
        }
    }

    /// `tid` exited, was killed, or (the former id of a thread that exec'd)
    /// vanished.
    pub(super) fn gone(&mut self, tid: u32) {
        self.let_go(tid);
        self.pins.borrow_mut().gone(tid);
        self.mems.borrow_mut().forget(tid);
        crate::tracee::forget_mem(tid);
        self.vforks.apart(tid);
        // Out of the gate, whatever it was there: the loop lets in what
        // waited for it.
        self.gate.done(tid);
        self.unpark_later = true;
        self.held.remove(&tid);
        self.unclaimed.remove(&tid);
        if let Some(t) = self.tracees.remove(&tid) {
            if !t.adopted {
                self.gone_unadopted.insert(tid);
            }
            self.left(t.root);
        }
    }
}

/// Whether tracee `tid`, stopped at its clone event, made a thread
/// (`CLONE_THREAD` in `clone`'s flags; `clone3` is refused by the filter).
/// Unreadable registers: not a thread (its own process, frozen alone).
fn clones_thread(tid: u32) -> bool {
    const CLONE_THREAD: u64 = 0x0001_0000;
    regs::Regs::get(tid).is_ok_and(|r| r.args()[0] & CLONE_THREAD != 0)
}

#[cfg(test)]
mod tests {
    use super::super::tracer_loop::{Loop, TraceTree, Tracee};
    use crate::supervisor::state::TreeState;
    use crate::supervisor::testkit::Bench;
    use std::os::fd::{FromRawFd, OwnedFd};
    use std::sync::Arc;

    /// A loop whose tree 1 holds this test's process and whose tree 2 is
    /// another; no ptrace request is made.
    fn a_loop() -> Loop {
        let bench = || Bench::new("name: t\ndefault: allow\n", |_| {});
        let (_tx, rx) = std::sync::mpsc::channel();
        // SAFETY: eventfd returns a fresh fd nothing else owns.
        let wake = unsafe { OwnedFd::from_raw_fd(libc::eventfd(0, libc::EFD_CLOEXEC)) };
        let mut l = Loop::new(Arc::new(bench().into_parts().0), rx, wake);
        for root in [1, 2] {
            l.trees.insert(
                root,
                TraceTree {
                    tree: bench().into_parts().1,
                    st: TreeState::new(std::process::id()),
                    trees: Arc::new(crate::trees::Trees::new()),
                    members: 1,
                },
            );
        }
        let me = std::process::id();
        l.tracees.insert(
            me,
            Tracee {
                root: 1,
                tgid: me,
                expect: None,
                adopted: true,
            },
        );
        l
    }

    #[test]
    fn a_new_process_is_its_parents_tree_whatever_its_number_meant_before() {
        let mut l = a_loop();
        let me = std::process::id();
        let mut child = std::process::Command::new("sleep")
            .arg("5")
            .spawn()
            .unwrap();
        let c = child.id();
        // Its number was a task of tree 2 whose exit was never seen.
        l.tracees.insert(
            c,
            Tracee {
                root: 2,
                tgid: c,
                expect: None,
                adopted: true,
            },
        );
        l.trees.get_mut(&2).unwrap().members += 1;
        // Its first stop comes before our fork event: claimed by its parent.
        assert!(l.claim(c));
        assert_eq!(l.tracees[&c].root, 1, "claimed into the stale entry's tree");
        assert_eq!(l.trees[&2].members, 1, "the stale entry still counted");
        // It is gone before our fork event: that event adds nothing.
        l.gone(c);
        l.adopt(c, me, false);
        assert!(!l.tracees.contains_key(&c), "an entry for a task gone");
        assert_eq!(l.trees[&1].members, 1);
        // A later task of that number, by its parent's event, is added.
        l.adopt(c, me, false);
        assert_eq!(l.tracees[&c].root, 1);
        let _ = child.kill();
        let _ = child.wait();
    }
}
