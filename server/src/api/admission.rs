//! wrap-init's admission, the security checks that come before anything is
//! made for a shell, in this order: who asks ([`caller_of`], from the
//! transport, never the body), whether this server can supervise that
//! shell ([`gate`]: ready, and able to read the caller's process), and the
//! session it gets ([`admit`]: the rehearsal's only for the rehearsal's
//! process; otherwise one that exists and has not ended).
//!
//! Failure modes: each refusal is a [`Failure`] (403 for who asks, 503 for
//! a server that cannot supervise the shell, 404/410 for the session) whose
//! text the shim prints, with a hint where `docs/troubleshooting.md` has a
//! section; refusals that an operator should see are also logged.

use super::answer::{fail, Failure};
use super::peer::Peer;
use super::state::Api;
use crate::handoff::Caller;
use crate::session::Session;
use std::sync::Arc;

/// Who the wrap-init is for, from the transport (never from the body).
pub(super) async fn caller_of(api: &Arc<Api>, peer: &Peer) -> Result<Caller, Failure> {
    match *peer {
        Peer::Local(c) => Ok(Caller {
            uid: c.uid,
            pid: Some(c.pid),
        }),
        Peer::Tcp(addr) => {
            if !api.config.server.http.wrap_init {
                return Err(fail(
                    403,
                    format!(
                        "wrap-init is served on the Unix socket {} (server.http.wrap_init is off)",
                        api.config.server.socket.display()
                    ),
                ));
            }
            let port = api.config.tcp_port().unwrap_or(0);
            let approvals = api.approvals.clone();
            let who = tokio::task::spawn_blocking(move || approvals.identify(addr, port))
                .await
                .map_err(|_| fail(500, "peer identification failed"))?;
            use crate::approval::Requester;
            match who {
                Requester::Operator { uid, pid, .. } => Ok(Caller {
                    uid,
                    pid: Some(pid),
                }),
                Requester::InTree { why, .. } => {
                    tracing::warn!("wrap-init from inside a supervised tree refused: {why}");
                    Err(fail(403, "wrap-init cannot come from a supervised tree"))
                }
                Requester::Remote(a) => Err(fail(
                    403,
                    format!("wrap-init must come from a local process, not {a}"),
                )),
                Requester::Unknown(why) => Err(fail(
                    403,
                    format!("the requesting process cannot be identified ({why})"),
                )),
            }
        }
    }
}

/// Refuses a shell this server cannot supervise: it is not ready, or it can
/// read only its descendants and the shell is not one (see
/// `readiness`). The shim prints the reason in its refusal.
fn gate(api: &Api, caller: Caller, rehearsal: bool) -> Result<(), Failure> {
    use crate::readiness::{descends_from_us, Readiness};
    const HINT: &str = agentsh_proto::hint::SERVER_CANNOT_READ;
    match api.gate.get() {
        Readiness::Ready => {}
        // Only the rehearsal shell starts while the server is starting.
        Readiness::Starting(_) if rehearsal => {}
        Readiness::Starting(why) => {
            return Err(fail(503, format!("the agentsh server is starting: {why}")));
        }
        Readiness::Unable(why) => {
            return Err(
                fail(503, format!("agentsh cannot supervise shells here: {why}")).with_hint(HINT),
            );
        }
    }
    // The lineage walk reads every ancestor's stat: only where it decides
    // (descendants only) or says why a shell cannot be read.
    let below = || caller.pid.is_some_and(descends_from_us);
    if api.gate.descendants_only && api.gate.seizes_root && !below() {
        // The root names the server its ptracer before it asks to be
        // seized (`PR_SET_PTRACER`); the seize, at the handoff, decides:
        // refused, the handoff is refused and the shell exits 126.
        return Ok(());
    }
    if api.gate.descendants_only && !below() {
        let pid = caller.pid.map_or_else(|| "?".into(), |p| p.to_string());
        tracing::warn!(
            pid,
            "wrap-init refused: the shell does not descend from the server"
        );
        return Err(fail(
            503,
            format!(
                "this shell (pid {pid}) was not started below the agentsh server, which can \
                 supervise only processes it started: {}",
                api.gate.remedy
            ),
        )
        .with_hint(HINT));
    }
    // The check that decides, whatever the host's rules: this shell's own
    // process can be read and traced now (the tree starts as this process).
    if let Some(pid) = caller.pid {
        if let Err(e) = crate::tracee::access::can_attach(pid) {
            let what_to_do = if below() {
                "even processes the server started cannot be read here: give the container \
                 CAP_SYS_PTRACE (`docker run --cap-add SYS_PTRACE`)"
                    .to_string()
            } else if api.gate.remedy.is_empty() {
                "give the server CAP_SYS_PTRACE, or run the SDK's daemon under `agentsh \
                 entrypoint -- DAEMON` (the server is then an ancestor of every shell)"
                    .to_string()
            } else {
                api.gate.remedy.clone()
            };
            tracing::warn!(pid, "wrap-init refused: the shell cannot be read: {e}");
            return Err(fail(
                503,
                format!(
                    "the agentsh server cannot read this shell's process (pid {pid}: {e}), so it \
                     could not judge its execs: {what_to_do}"
                ),
            )
            .with_hint(HINT));
        }
    }
    Ok(())
}

/// The session a wrap-init gets, checked in this order: the rehearsal's
/// session only for the rehearsal's process (`daemon::rehearsal`; to any
/// other it does not exist), the server's readiness ([`gate`]), then the
/// session named exists and has not ended.
pub(super) fn admit(api: &Api, sid: &str, caller: Caller) -> Result<Arc<Session>, Failure> {
    use agentsh_proto::shimconf::REHEARSAL_SESSION;
    let rehearsal = match sid {
        REHEARSAL_SESSION => api.gate.rehearsal.session_for(caller.pid),
        _ => None,
    };
    gate(api, caller, rehearsal.is_some())?;
    let Some(session) = rehearsal.or_else(|| match sid {
        REHEARSAL_SESSION => None,
        _ => api.sessions.get(sid),
    }) else {
        // A mistyped session= must not start a session nobody watches.
        tracing::warn!("wrap-init refused: session {sid:?} does not exist");
        return Err(fail(
            404,
            format!(
                "session {sid:?} does not exist on this server: use session=default in \
                 /etc/agentsh/shim.conf (or no AGENTSH_SESSION), or have the operator create it \
                 first (`agentsh session create {sid} --policy POLICY`)"
            ),
        )
        .with_hint(agentsh_proto::hint::SESSION_NOT_OPEN));
    };
    if session.is_ended() {
        tracing::warn!("wrap-init refused: session {sid:?} has ended");
        return Err(fail(
            410,
            format!(
                "session {sid:?} has ended (agentsh session end): it starts no more shells; \
                 create a new session for a new task"
            ),
        )
        .with_hint(agentsh_proto::hint::SESSION_NOT_OPEN));
    }
    Ok(session)
}
