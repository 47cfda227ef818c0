//! One route for every syscall a tree's filter hands to the supervisor,
//! whichever backend caught it: the notify loop (`notify.rs`) and the
//! tracer (`trace/tracer_loop.rs`) each turn what they caught into a
//! [`Caught`] and a [`Stop`] to answer through, and call [`dispatch`].
//! A new class of supervised syscall is one handler module and one arm here.
//!
//! Classes: execs (`execve`, `execveat`) to `exec::handle`; the signal
//! calls the filter traps below Landlock ABI 6 to `signals::handle`; the
//! network calls that name a destination (policy `egress`) to
//! `egress::handle`; the path calls the filter traps where no Landlock
//! keeps the file rules to `files::handle`; the files mapped executable
//! where the policy judges them to `maps::handle`; vfork-class clones
//! (notify backend) to `nested_vfork::handle`;
//! anything else is refused as `unexpected_syscall` and audited: the filter
//! traps nothing this module does not route, so one means a filter and a
//! supervisor that disagree, and refusing is the closed answer.
//!
//! Failure modes: none of its own; each handler answers and audits.

use super::context::SupervisorContext;
use super::exec::ExecRequest;
use super::seam::{Caught, Stop, Verification};
use super::state::TreeState;
use super::tree::Tree;
use super::{egress, exec, files, maps, signals};
use crate::audit::{Action, EventBody, ExecEvent, ExecSubject};
use crate::policy::Decision;
use crate::vocab::Refusal;
use agentsh_proto::execabi;

/// Routes `c` to its handler, which answers it through `stop` and audits.
pub fn dispatch(
    ctx: &SupervisorContext,
    tree: &Tree,
    st: &mut TreeState,
    c: &Caught,
    stop: &dyn Stop,
) {
    if tree.doomed.load(std::sync::atomic::Ordering::SeqCst) {
        // Its session's trees are being killed (`agentsh session end
        // --force`): a process the lineage walk missed (it left the tree's
        // lineage) ends at its first supervised call. The caller is stopped
        // in this call, so its id is its own.
        // SAFETY: kill has no memory effects.
        unsafe { libc::kill(c.tid as i32, libc::SIGKILL) };
        let _ = stop.refuse(libc::EPERM);
        return;
    }
    st.exec.take_approved(&mut st.tasks);
    if super::nested_vfork::classify(c.arch, c.nr) {
        return super::nested_vfork::handle(ctx, tree, &mut st.tasks, c, stop);
    }
    if let Some(call) = execabi::classify(c.arch, c.nr) {
        let req = ExecRequest {
            tid: c.tid,
            call,
            args: call.args(&c.args),
            instead: None,
        };
        return exec::handle(ctx, tree, &mut st.tasks, &mut st.exec, &req, stop);
    }
    if let Some(call) = signals::classify(c.arch, c.nr) {
        return signals::handle(ctx, &tree.session_id, &st.signals, call, c, stop);
    }
    if let Some((call, width)) = agentsh_proto::netabi::classify(c.arch, c.nr) {
        return egress::handle(
            ctx,
            tree,
            &mut st.tasks,
            &mut st.egress,
            call,
            width,
            c,
            stop,
        );
    }
    if let Some(call) = files::classify(c.arch, c.nr) {
        return files::handle(ctx, tree, &mut st.files, call, c, stop);
    }
    if let Some(call) = maps::classify(c.arch, c.nr) {
        return maps::handle(ctx, tree, &mut st.tasks, &mut st.maps, call, c, stop);
    }
    if agentsh_proto::rootabi::is_chroot(c.arch, c.nr) {
        return chroot(tree, st, c, stop);
    }
    // A call that changes a file, of an ABI the files family does not
    // read, sent to be explained: Landlock decides it.
    if tree
        .file_rules()
        .is_some_and(files::FileRules::explain_only)
        && agentsh_proto::fileabi::explained_change_elsewhere(c.arch, c.nr)
    {
        let _ = stop.proceed();
        return;
    }
    ctx.audit.record(
        &tree.session_id,
        EventBody::Execve(ExecEvent::new(
            ExecSubject {
                pid: c.tid,
                ..ExecSubject::default()
            },
            Decision::Deny,
            Refusal::UnexpectedSyscall.rule(),
            Action::Deny,
            Some(format!("unexpected syscall {} on arch {:#x}", c.nr, c.arch)),
        )),
    );
    let _ = stop.refuse(libc::EACCES);
}

/// A `chroot`: the tree's kept root is given up before the answer, so
/// before any root changes; every later exec of the tree reads its caller's
/// own root. The call itself is the kernel's to allow.
fn chroot(tree: &Tree, st: &mut TreeState, c: &Caught, stop: &dyn Stop) {
    if st.tasks.root.kept() {
        tracing::debug!(tid = c.tid, session = %tree.session_id, "chroot: the tree's execs now read each caller's root");
    }
    st.tasks.root.chroot_seen();
    let _ = stop.proceed();
}

/// A verifying backend's `PTRACE_EVENT_EXEC` of process `pid` in `tree`:
/// the new image must be what was judged (`expect`, `None`: nothing judged
/// it). Whether it may run; if not, its event is written and the caller
/// kills it before its first instruction.
pub fn exec_completed(
    ctx: &SupervisorContext,
    tree: &Tree,
    pid: u32,
    expect: Option<Verification>,
) -> bool {
    exec::completed(&ctx.audit, &tree.session_id, pid, expect)
}
