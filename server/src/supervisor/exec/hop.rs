//! The shim's hop skipped: a supervised tree that execs a shell or a
//! program the shim stands in for (`shimhops`) would run the shim, which
//! only execs the real one in its place (inside a tree it reads no config
//! and calls no server). Under a verifying backend that can pin (ptrace,
//! gVisor) each exec costs milliseconds of stops, so the supervisor makes
//! that exec itself: it judges the real one as the shim's own exec would be
//! judged (gathered and decided on its path, the caller's argv), writes its
//! path where only the supervisor writes (`Stop::pin`) and points the
//! call at it. The kernel reads the bytes judged; the backend checks the
//! new image is the real file with the caller's argv at
//! `PTRACE_EVENT_EXEC`, before its first instruction, and kills anything
//! else. Both execs are audited, as with the hop: the shim's (allowed,
//! its message naming the path run in its place) and the real one's.
//!
//! Where it is not done (the exec takes the shim's hop, judged there): a
//! backend without pinning (user-notify, 32-bit calls, a region that could
//! not be mapped); the exec names an open file or refuses symlinks
//! (`execveat` flags); the file the caller named is not a shim here (its
//! identity); the shim is exec'd as the admin shell; the real one cannot be
//! gathered, is a shim itself, or is not the program's `NAME.real` (the shim
//! would refuse); the shim's own exec was not allowed.
//!
//! What this does not watch: nothing new: the real program is judged as
//! any exec, and what runs is verified as any exec under that backend.

use super::gather::{gather, Gather, Gathered};
use super::judge::{decide, Judged};
use super::request::ExecRequest;
use super::state::ExecTree;
use crate::audit::{Action, EventBody, ExecEvent};
use crate::policy::Decision;
use crate::supervisor::context::SupervisorContext;
use crate::supervisor::seam::{Pinning, Stop};
use crate::supervisor::shimhops::HopTo;
use crate::supervisor::tree::Tree;
use agentsh_proto::execabi::ExecKind;

/// What came of looking for the shim's hop.
pub(super) enum Hop {
    /// Not skipped: the exec as the caller made it.
    Kept,
    /// The backend made room for the copy first: the call comes back.
    Again,
    /// Skipped: the real one's facts and decision, its path pinned, the
    /// shim's exec audited.
    Skipped(Box<(u32, Box<Gathered>, Judged)>),
}

/// Skips the hop of an allowed exec `g` (judged `j`) of a shim where it
/// can (module doc). `verified`: the backend checks every exec.
pub(super) fn skip(
    ctx: &SupervisorContext,
    tree: &Tree,
    st: &mut ExecTree<'_>,
    req: &ExecRequest,
    stop: &dyn Stop,
    g: &Gathered,
    j: &Judged,
) -> Hop {
    let Some((path, to)) = real_of(ctx, req, g, j) else {
        return Hop::Kept;
    };

    let mut bytes = path.clone().into_bytes();
    let again = ExecRequest {
        tid: req.tid,
        call: req.call,
        args: req.args,
        instead: Some(bytes.clone()),
    };
    let mut none = None;
    let (pid, g2) = match gather(ctx, tree.rules().index, st, &again, &mut none, true) {
        Gather::Ready(pid, g2) => (pid, g2),
        // The shim says what is wrong (the real one missing, say).
        Gather::Answer(_) | Gather::Refused { .. } => return Hop::Kept,
    };
    let (shim, real) = (g.target.identity(), g2.target.identity());
    let as_the_shim_would = match to {
        HopTo::Program(_) => g2.target.canonical() == format!("{}.real", g.target.canonical()),
        HopTo::Shell => real != shim,
    };
    if !as_the_shim_would || ctx.hops.is_shim(real) {
        return Hop::Kept;
    }
    let j2 = decide(ctx, tree, st, pid, &g2);
    match stop.pinning() {
        Pinning::Ready => {}
        Pinning::Unavailable => return Hop::Kept,
        Pinning::Again => return Hop::Again,
    }
    bytes.push(0);
    let arg = match req.call.kind {
        ExecKind::Execve => 0,
        ExecKind::Execveat => 1,
    };
    if let Err(e) = stop.pin(&[(arg, &bytes)]) {
        tracing::debug!(pid, "the real path not pinned (gone?): {e}");
        return Hop::Kept;
    }
    let event = ExecEvent::new(
        j.subject.clone(),
        j.verdict.decision,
        j.verdict.rule.clone(),
        Action::Allow,
        Some(format!(
            "the shim's exec of {path} made in its place (the next event)"
        )),
    )
    .in_attempt(j.attempt, false);
    ctx.audit.record(&tree.session_id, EventBody::Execve(event));
    Hop::Skipped(Box::new((pid, g2, j2)))
}

/// The path the shim `g` would exec, and what kind of shim it is; `None`
/// where the hop is kept (module doc).
fn real_of(
    ctx: &SupervisorContext,
    req: &ExecRequest,
    g: &Gathered,
    j: &Judged,
) -> Option<(String, HopTo)> {
    let allowed = matches!(j.verdict.decision, Decision::Allow | Decision::Audit);
    let plain = req.args.flags & (libc::AT_EMPTY_PATH | libc::AT_SYMLINK_NOFOLLOW) == 0;
    if !allowed || !plain || !g.chain.is_empty() || !g.payloads.is_empty() {
        return None;
    }
    let to = ctx.hops.of(g.target.identity())?;
    let argv0 = g.argv.args.first().map_or("", String::as_str);
    Some((to.path(argv0.as_bytes())?, to))
}
