//! The one place backends are registered ([`ALL`], in the order
//! `execve.backend: auto` prefers them). A new backend is a folder beside
//! `notify` and `trace` implementing `interface::Backend`, its wire facts in
//! `agentsh_proto::ExecBackend`, and a line here; nothing else matches on
//! backends.
//!
//! Failure modes: none; a list.

use super::interface::Backend;
use agentsh_proto::ExecBackend;

/// Every backend, in the order `execve.backend: auto` prefers them.
pub static ALL: [&dyn Backend; 2] = [&super::notify::Notify, &super::trace::Trace];

/// The backend of `kind`.
pub fn of(kind: ExecBackend) -> &'static dyn Backend {
    ALL.iter()
        .copied()
        .find(|b| b.kind() == kind)
        .expect("every ExecBackend is registered (a test checks)")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_wire_backend_is_registered_once() {
        for kind in ExecBackend::ALL {
            assert_eq!(
                ALL.iter().filter(|b| b.kind() == kind).count(),
                1,
                "{kind:?}"
            );
            assert_eq!(of(kind).kind(), kind);
        }
        assert_eq!(ALL.len(), ExecBackend::ALL.len());
    }

    /// The fact the start log and wrap-init read is the filter's rule: the
    /// path calls go to a tracer, where there is no Landlock
    /// (`filter::Filters::traces_files`).
    #[test]
    fn only_a_tracing_backend_judges_files_without_landlock() {
        for b in ALL {
            let f = b.facts();
            assert_eq!(
                f.judges_files_without_landlock,
                f.kind.trap() == agentsh_proto::wire::Trap::Tracer,
                "{:?}",
                f.kind
            );
        }
    }
}
