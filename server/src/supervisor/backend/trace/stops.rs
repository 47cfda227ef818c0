//! A seccomp stop dispatched to its family, and a new image checked at
//! `PTRACE_EVENT_EXEC`: the two stops where the tracer hands a decision to
//! the supervisor, and what follows each (threads held or let go, the
//! names gate, a stop left held for an operator, what an exec must run).
//!
//! Why together: both end in the supervisor's one dispatch (`dispatch`,
//! `exec_completed`), and both kill the tracee when nothing can judge it.
//!
//! Failure modes: a tracee whose registers cannot be read at a seccomp stop
//! is killed (a syscall nobody can judge must not go on); a new image that
//! is not what was judged, or whose tree is gone, is killed before its first
//! instruction.

use super::gate;
use super::regs;
use super::stop::TraceStop;
use super::tracer_loop::Loop;
use crate::supervisor::dispatch::{dispatch, exec_completed};
use crate::supervisor::seam::{Caught, Verification};
use crate::tracee::pin;
use std::cell::{Cell, RefCell};

impl Loop {
    /// A seccomp stop of `tid`: its registers read, the names gate asked,
    /// then the call dispatched to its family.
    pub(super) fn seccomp_stop(&mut self, tid: u32, status: i32) {
        let Some(root) = self.tracees.get(&tid).map(|t| t.root) else {
            return;
        };
        self.pins.borrow_mut().forget(tid);
        let Some(regs) = regs_or_kill(tid) else {
            return;
        };
        let (arch, nr) = self.clock.labelled(regs.arch_nr());
        if self.pin_guard(tid, root, &regs, nr) {
            return;
        }
        // A path call waits while names it would walk may change.
        let call = agentsh_proto::fileabi::classify(arch, nr);
        let walks = call.map(|c| gate::kind_of(c.op));
        if let (Some(kind), Some(c)) = (walks, call) {
            if !self.gate.admits(kind, self.replaying == Some(tid)) {
                self.gate.park(tid, status, kind);
                self.interrupt_walkers();
                return;
            }
            if kind == gate::Kind::Changes && gate::moves_directories(c, regs.args()) {
                // Directories' names may change now: none walked before
                // is taken as it was (no walk runs beside a change).
                crate::tracee::walk::forget_dirs();
            }
        }
        let Some(tt) = self.trees.get_mut(&root) else {
            return;
        };
        let (held, unclaimed, gate) = (&self.held, &self.unclaimed, &self.gate);
        let stopped = |t: u32| held.contains_key(&t) || unclaimed.contains_key(&t) || gate.parks(t);
        let tgid = self.tracees.get(&tid).map_or(tid, |t| t.tgid);
        let tracees = &self.tracees;
        let vforks = &self.vforks;
        // Its process's other threads, and those of every process sharing
        // its memory through vfork but the ones asleep in vfork: every one
        // is a tracee (each clone is followed); those not yet claimed are
        // stopped already.
        let siblings = || -> Vec<u32> {
            let (processes, waiting) = vforks.sharers(tgid);
            tracees
                .iter()
                .filter(|(&t, x)| processes.contains(&x.tgid) && t != tid && !waiting.contains(&t))
                .map(|(&t, _)| t)
                .collect()
        };
        let stop = TraceStop {
            tid,
            answered: Cell::new(false),
            expect: RefCell::new(None),
            starttime: Cell::new(0),
            freezer: &self.freezer,
            stopped: &stopped,
            siblings: &siblings,
            to_exit: walks == Some(gate::Kind::Changes),
            proceeded: Cell::new(false),
            tgid,
            regs,
            pins: &self.pins,
            pin_at: Cell::new(None),
            mems: &self.mems,
        };
        let caught = Caught {
            tid,
            tgid: Some(tgid),
            arch,
            nr,
            args: regs.args(),
        };
        dispatch(&self.ctx, &tt.tree, &mut tt.st, &caught, &stop);
        let answer = Answered {
            answered: stop.answered.get(),
            starttime: stop.starttime.get(),
            proceeded: stop.proceeded.get(),
            expect: stop.expect.take(),
        };
        drop(stop);
        self.after_dispatch(tid, walks, answer);
    }

    /// The pinned region's guard (`tracee::pin`): a native memory call that
    /// would change, remove or replace the region is refused (EPERM),
    /// explained and audited, whatever trap sent it; one the guard's own
    /// rules sent that does not goes on. Whether the stop was answered.
    fn pin_guard(&mut self, tid: u32, root: u32, r: &regs::Regs, nr: i32) -> bool {
        if r.native() && !pin::is_memory_call(nr) {
            return false;
        }
        let native = r.native()
            && regs::kernel_arch(tid)
                .is_none_or(|a| a == agentsh_proto::execabi::AUDIT_ARCH_X86_64);
        if native {
            if let Some(name) = pin::touches(nr, &r.args()) {
                self.pin_refused(tid, root, name, r.args()[0]);
                if let Err(e) =
                    regs::skip_syscall(tid, libc::EPERM).and_then(|()| regs::cont(tid, 0))
                {
                    tracing::debug!(tid, "tracee not resumed (gone?): {e}");
                }
                return true;
            }
        }
        let guards =
            regs::event_msg(tid).is_ok_and(|d| d == u64::from(crate::filter::TRACE_DATA_PIN));
        if guards {
            if let Err(e) = regs::cont(tid, 0) {
                tracing::debug!(tid, "tracee not resumed (gone?): {e}");
            }
        }
        guards
    }

    /// A memory call refused by the guard: told to the caller, audited.
    fn pin_refused(&self, tid: u32, root: u32, name: &str, addr: u64) {
        let Some(tt) = self.trees.get(&root) else {
            return;
        };
        let rule = crate::vocab::Refusal::PinnedRegion.rule();
        let why = format!(
            "the range reaches {:#x}-{:#x}, where agentsh keeps the copies of what it judged: no \
             task of the tree may change it",
            pin::BASE,
            pin::BASE + pin::SIZE
        );
        let at = format!("{addr:#x}");
        if self.ctx.limits.explain == crate::config::Explain::Stderr {
            crate::explain::tell(
                tid,
                &crate::explain::refused_file(name, &at, None, rule, &why),
            );
        }
        tracing::warn!(tid, call = name, "{why}");
        self.ctx.audit.record(
            &tt.tree.session_id,
            crate::audit::EventBody::File(crate::audit::FileEvent {
                pid: tid,
                syscall: name.to_string(),
                path: at,
                path2: None,
                resolved: None,
                right: None,
                decision: crate::policy::Decision::Deny,
                rule: rule.to_string(),
                reason: why,
            }),
        );
    }

    /// What follows a dispatched stop: the threads held for it, the names
    /// gate, a stop left for an operator, what an exec must turn out to be.
    fn after_dispatch(&mut self, tid: u32, walks: Option<gate::Kind>, a: Answered) {
        let Answered {
            answered,
            starttime,
            proceeded,
            expect,
        } = a;
        // Held for a call that did not go on (refused, answered, deferred):
        // the others go now; for one that did, at its syscall-exit stop.
        if !self.freezer.running(tid) {
            self.let_go(tid);
            if proceeded && walks == Some(gate::Kind::Walks) {
                // One thread, let run with one stop: unobserved until seen.
                self.gate.unobserved(tid);
            }
        } else if let Some(kind) = walks {
            self.gate.running(tid, kind);
        }
        // Whatever the class: a stop its handler did not answer stays
        // stopped, held until an answer comes through the queue.
        if !answered {
            self.held.insert(tid, starttime);
        }
        if let Some(v) = expect {
            if let Some(t) = self.tracees.get_mut(&tid) {
                t.expect = Some(v);
            }
        }
    }

    /// `PTRACE_EVENT_EXEC` of process `pid`: the new image has not run an
    /// instruction. It must be what was judged, or it dies here.
    pub(super) fn exec_stop(&mut self, pid: u32) {
        // The thread that exec'd, by its id before the exec.
        let former = regs::event_msg(pid).map_or(pid, |m| m as u32);
        // A new image has memory of its own: a vfork child shares no more,
        // and it has no pinned region yet.
        self.vforks.apart(pid);
        self.pins.borrow_mut().exec(pid);
        self.mems.borrow_mut().forget(pid);
        crate::tracee::forget_mem(pid);
        let expect = if former == pid {
            self.tracees.get_mut(&pid).and_then(|t| t.expect.take())
        } else {
            // The former id vanishes without an exit report.
            let e = self.tracees.get_mut(&former).and_then(|t| t.expect.take());
            self.gone(former);
            if let Some(t) = self.tracees.get_mut(&pid) {
                t.expect = None;
            }
            e
        };
        let Some(root) = self.tracees.get(&pid).map(|t| t.root) else {
            return;
        };
        let Some(tt) = self.trees.get(&root) else {
            // Its tree is gone: nothing judged it, and nothing may run.
            kill(pid);
            return;
        };
        if !exec_completed(&self.ctx, &tt.tree, pid, expect) {
            kill(pid);
        }
    }
}

/// How a dispatched stop was answered (read off its [`TraceStop`]).
struct Answered {
    answered: bool,
    starttime: u64,
    proceeded: bool,
    expect: Option<Verification>,
}

/// A tracee's registers at its seccomp stop; unreadable, it is stopped in
/// a syscall nobody can judge, which must not go on: killed.
fn regs_or_kill(tid: u32) -> Option<regs::Regs> {
    match regs::Regs::get(tid) {
        Ok(r) => Some(r),
        Err(e) => {
            tracing::warn!(
                tid,
                "registers unreadable at a seccomp stop ({e}); killing it"
            );
            kill(tid);
            let _ = regs::cont(tid, 0);
            None
        }
    }
}

/// SIGKILL to a stopped tracee: it dies as soon as it is resumed.
fn kill(tid: u32) {
    // SAFETY: tkill takes two integers; no memory is passed.
    unsafe { libc::syscall(libc::SYS_tkill, tid as libc::c_long, libc::SIGKILL) };
}
