//! Whether the server is ready to supervise, and which shells it may take.
//!
//! Ready means a shell the SDK's daemon starts can be supervised. That
//! depends on what the kernel lets the server read ([`Reach`], probed at
//! start by `detect`): every tree; only its descendants (no
//! `CAP_SYS_PTRACE` under Yama's `ptrace_scope` 1: Docker's defaults on
//! Ubuntu hosts) — then only a server that starts the daemon itself is
//! ready, and wrap-init refuses shells from elsewhere ([`descends_from_us`]);
//! or nothing. While the server rehearses a shell ([`Stage`], see
//! `daemon::rehearsal`) it is starting, and other shells' wrap-inits wait.
//!
//! The daemon sets it (at start, and once its rehearsal is over); the API
//! reads it (`/healthz`, wrap-init), so it sits below both.
//!
//! Failure modes: none of its own. A server that is not ready keeps
//! serving, so `agentsh ready`, `agentsh detect`, `/api/v1/status` and
//! every refused shell say why; `Unable` is final. A lineage that cannot
//! be read is not ours.

use crate::detect::{reach_remedy, Reach};
use crate::session::Session;
use std::sync::{Arc, Mutex, PoisonError, RwLock};

/// Whether shells can be supervised now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Readiness {
    /// Not yet: the reason (start-up work still running).
    Starting(String),
    Ready,
    /// Never, as things are: the reason and what to do.
    Unable(String),
}

/// The server's readiness, and the trees it may take.
#[derive(Debug)]
pub struct Gate {
    state: RwLock<Readiness>,
    /// Only shells descending from the server can be supervised.
    pub descendants_only: bool,
    /// The backend seizes each tree's root, which names the server its
    /// ptracer first: a shell the server did not start can be taken even
    /// where only descendants can be read (the seize decides, per shell).
    pub seizes_root: bool,
    /// The remedy to name when a shell is refused for not descending.
    pub remedy: String,
    /// The rehearsal shell's process while it runs (see `daemon::rehearsal`).
    pub rehearsal: Stage,
}

impl Gate {
    /// The gate for a server whose probes say `reach`; `has_command`: it
    /// starts the SDK's daemon itself (`agentsh server -- CMD`);
    /// `seizes_root`: its backend's trees name the server their ptracer
    /// before they are seized.
    pub fn new(reach: Reach, yama: Option<u32>, has_command: bool, seizes_root: bool) -> Gate {
        let remedy = reach_remedy(reach, yama).unwrap_or_default();
        let state = match reach {
            Reach::Any => Readiness::Ready,
            Reach::Descendants if has_command || seizes_root => Readiness::Ready,
            Reach::Descendants | Reach::Nothing => Readiness::Unable(remedy.clone()),
        };
        Gate {
            state: RwLock::new(state),
            descendants_only: reach == Reach::Descendants,
            seizes_root,
            remedy,
            rehearsal: Default::default(),
        }
    }

    pub fn get(&self) -> Readiness {
        self.state
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// Moves a starting server on (start-up work done) or marks it unable.
    pub fn set(&self, r: Readiness) {
        let mut s = self
            .state
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        // Unable is final.
        if !matches!(*s, Readiness::Unable(_)) {
            *s = r;
        }
    }
}

/// The rehearsal shell (see `daemon::rehearsal`): whether it is under way, and its
/// process and the session its shell gets once started. Other shells'
/// wrap-inits wait for its end ([`Stage::over`]) rather than be refused.
pub struct Stage {
    admitted: Mutex<Option<(u32, Arc<Session>)>>,
    /// True from [`Stage::begin`] to [`Stage::end`].
    under_way: tokio::sync::watch::Sender<bool>,
}

impl Default for Stage {
    fn default() -> Stage {
        Stage {
            admitted: Mutex::new(None),
            under_way: tokio::sync::watch::Sender::new(false),
        }
    }
}

impl std::fmt::Debug for Stage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let pid = self.lock().as_ref().map(|(p, _)| *p);
        f.debug_tuple("Stage").field(&pid).finish()
    }
}

impl Stage {
    fn lock(&self) -> std::sync::MutexGuard<'_, Option<(u32, Arc<Session>)>> {
        self.admitted.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub fn begin(&self) {
        self.under_way.send_replace(true);
    }

    /// Process `pid` is the rehearsal's: its wrap-init gets `session`.
    pub fn admit(&self, pid: u32, session: Arc<Session>) {
        *self.lock() = Some((pid, session));
    }

    pub fn end(&self) {
        *self.lock() = None;
        self.under_way.send_replace(false);
    }

    /// Returns once no rehearsal is under way (at once if none is).
    pub async fn over(&self) {
        let mut rx = self.under_way.subscribe();
        let _ = rx.wait_for(|under_way| !*under_way).await;
    }

    /// The rehearsal's session, for a wrap-init from process `pid` naming
    /// it; `None` for any other process, or when no rehearsal runs.
    pub fn session_for(&self, pid: Option<u32>) -> Option<Arc<Session>> {
        match (&*self.lock(), pid) {
            (Some((p, s)), Some(pid)) if *p == pid => Some(s.clone()),
            _ => None,
        }
    }
}

/// Whether `pid` descends from this process (its chain of parents reaches
/// us). Unreadable or too long: no.
pub fn descends_from_us(pid: u32) -> bool {
    let me = std::process::id();
    let mut p = pid;
    for _ in 0..256 {
        if p == me {
            return true;
        }
        if p <= 1 {
            return false;
        }
        p = match crate::tracee::proc_stat(p) {
            Ok(s) => s.ppid,
            Err(_) => return false,
        };
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_wrap_init_waits_for_the_rehearsal_to_end_and_only_then() {
        let stage = Arc::new(Stage::default());
        // None under way: at once.
        tokio::time::timeout(std::time::Duration::from_secs(5), stage.over())
            .await
            .expect("no rehearsal: no wait");
        stage.begin();
        let waiting = tokio::spawn({
            let stage = stage.clone();
            async move { stage.over().await }
        });
        // Still waiting after the runtime has run it as far as it goes.
        for _ in 0..100 {
            tokio::task::yield_now().await;
        }
        assert!(
            !waiting.is_finished(),
            "a wrap-init went on during the rehearsal"
        );
        assert!(stage.session_for(Some(1)).is_none());
        stage.end();
        tokio::time::timeout(std::time::Duration::from_secs(5), waiting)
            .await
            .expect("the end releases it")
            .expect("joins");
    }
}
