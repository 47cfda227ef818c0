//! The exec backend a configured choice (`execve.backend`) comes to on this
//! host: the first registered backend the choice allows and the host offers,
//! in preference order (`supervisor::backend::ALL`).
//!
//! Why pure: the probes are taken once ([`super::report::Report::probe_of`]),
//! and the choice is decided from them again wherever it is needed (the
//! daemon at start, the report), testable with made-up probes.
//!
//! Failure modes: [`NoBackend`], saying the backend chosen and why the host
//! lacks it, or why no backend at all can work here; the server then refuses
//! to start rather than run trees unsupervised.

use super::report::Probe;
use crate::config::BackendChoice;
use crate::supervisor::backend;
use agentsh_proto::ExecBackend;

/// The exec backend `choice` (`execve.backend`) comes to on a host whose
/// probe for each backend is `probe`: the first registered backend the
/// choice allows and the host offers (`supervisor::backend::ALL`, in
/// preference order).
///
/// # Errors
/// The choice cannot work here (an explicit backend the host does not
/// offer, or `auto` with none).
pub fn choose_backend<'a>(
    choice: BackendChoice,
    probe: impl Fn(ExecBackend) -> &'a Probe,
) -> Result<ExecBackend, NoBackend> {
    let why = |p: &Probe| p.detail.clone().unwrap_or_else(|| "unavailable".into());
    let allowed = || {
        backend::ALL
            .iter()
            .filter(move |b| choice.only().is_none_or(|k| k == b.kind()))
    };
    if let Some(b) = allowed().find(|b| probe(b.kind()).available) {
        return Ok(b.kind());
    }
    Err(match choice.only() {
        Some(kind) => {
            let others: Vec<&str> = backend::ALL
                .iter()
                .filter(|b| b.kind() != kind)
                .map(|b| b.kind().name())
                .collect();
            NoBackend::Chosen {
                name: kind.name(),
                why: backend::of(kind).unavailable(&why(probe(kind))),
                others: others.join(" or "),
            }
        }
        None => NoBackend::None(
            allowed()
                .map(|b| format!("no {} ({})", b.facts().needs, why(probe(b.kind()))))
                .collect::<Vec<_>>()
                .join(" and "),
        ),
    })
}

/// Why no exec backend can run here.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NoBackend {
    #[error("execve.backend is {name}, but {why}; use auto or {others}")]
    Chosen {
        name: &'static str,
        why: String,
        others: String,
    },
    #[error("this host can supervise no exec: {0}")]
    None(String),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_backend_follows_the_choice_and_the_host() {
        let yes = Probe::yes();
        let no = Probe::no("EINVAL");
        use BackendChoice::{Auto, Notify, Ptrace};
        let host = |notify: &'static Probe, trace: &'static Probe| {
            move |k: ExecBackend| match k {
                ExecBackend::Notify => notify,
                ExecBackend::Ptrace => trace,
            }
        };
        let (yes, no): (&'static Probe, &'static Probe) =
            (Box::leak(Box::new(yes)), Box::leak(Box::new(no)));
        assert_eq!(
            choose_backend(Auto, host(yes, yes)),
            Ok(ExecBackend::Notify)
        );
        assert_eq!(choose_backend(Auto, host(no, yes)), Ok(ExecBackend::Ptrace));
        let none = choose_backend(Auto, host(no, no)).unwrap_err().to_string();
        assert_eq!(
            none,
            "this host can supervise no exec: no seccomp user notification (EINVAL) and no \
             SECCOMP_RET_TRACE + ptrace (EINVAL)"
        );
        assert_eq!(
            choose_backend(Ptrace, host(yes, yes)),
            Ok(ExecBackend::Ptrace)
        );
        assert_eq!(
            choose_backend(Notify, host(no, yes))
                .unwrap_err()
                .to_string(),
            "execve.backend is notify, but this kernel has no seccomp user notification \
             (EINVAL); use auto or ptrace"
        );
        assert!(choose_backend(Ptrace, host(yes, no)).is_err());
    }
}
