//! What `agentsh detect` reports: one [`Probe`] per capability, the whole
//! [`Report`] (logged at start, served at `GET /api/v1/status`), and which
//! trees the server can read ([`TreeAccess`], [`Reach`]) with what to do
//! when it cannot read them all.
//!
//! Why a type of its own: the report is the server's one answer to "what
//! does this host offer", read by the daemon to choose a backend, by
//! readiness and by the shim's refusal; its JSON is part of the status API.
//!
//! Failure modes: none; data and words. A probe that could not run is a
//! [`Probe`] that is not available, with the reason.

use agentsh_proto::ExecBackend;
use serde::Serialize;

/// One capability: present or not, and why not.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Probe {
    pub available: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
}

impl Probe {
    pub(super) fn yes() -> Probe {
        Probe {
            available: true,
            detail: None,
        }
    }

    pub(super) fn no(why: impl Into<String>) -> Probe {
        Probe {
            available: false,
            detail: Some(why.into()),
        }
    }
}

/// The whole report.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// The kernel says it is gVisor (runsc).
    pub gvisor: bool,
    pub kernel: String,
    /// `SECCOMP_FILTER_FLAG_NEW_LISTENER` loads (user-notify).
    pub seccomp_user_notif: Probe,
    /// `SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV` (Linux 5.19).
    pub wait_killable_recv: Probe,
    /// `SECCOMP_USER_NOTIF_FD_SYNC_WAKE_UP` (Linux 6.6).
    pub sync_wake_up: Probe,
    /// `SECCOMP_RET_TRACE` seen by a tracer at `PTRACE_EVENT_SECCOMP`.
    pub seccomp_trace_ptrace: Probe,
    /// The kernel's Landlock ABI (0: none).
    pub landlock_abi: i64,
    /// `fanotify_init(FAN_CLASS_CONTENT)`: permission events (exec checks).
    pub fanotify_permission: Probe,
    /// Yama's `ptrace_scope` (absent: no Yama).
    pub yama_ptrace_scope: Option<u32>,
    /// The server's effective capabilities that matter.
    pub cap_sys_admin: bool,
    pub cap_sys_ptrace: bool,
    /// The server itself runs with no_new_privs.
    pub no_new_privs: bool,
    /// Whether the server can read processes (ptrace access, as
    /// `process_vm_readv` needs) of its own and of others.
    pub tree_access: TreeAccess,
    /// `pidfd_getfd` works here (egress takes a tree's sockets with it; a
    /// seccomp profile such as Docker's default refuses it without
    /// CAP_SYS_PTRACE).
    pub pidfd_getfd: Probe,
    /// What a wrap-init gets on this host, in words.
    pub backend: String,
    /// The exec backend a wrap-init gets (`None`: none can work here).
    pub exec_backend: Option<agentsh_proto::ExecBackend>,
    pub protections: Vec<String>,
    /// Whether trees can get cgroups with their session's `limits:`
    /// (`cgroup::assess`): where, or why not.
    pub limits: Probe,
}

impl Report {
    /// What this host offers the backend of `kind`.
    pub fn probe_of(&self, kind: ExecBackend) -> &Probe {
        match kind.trap() {
            agentsh_proto::wire::Trap::UserNotif => &self.seccomp_user_notif,
            agentsh_proto::wire::Trap::Tracer => &self.seccomp_trace_ptrace,
        }
    }
}

/// Whether ptrace access (what reading a tree's memory, its `/proc` links
/// and `PTRACE_SEIZE` need) reaches a process this one started, and one it
/// did not. Without `CAP_SYS_PTRACE`, Yama's `ptrace_scope` 1 (Ubuntu's and
/// Debian's default, host-wide, so inside every container too) allows only
/// the first; `ptrace_scope` 2 and 3 neither.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TreeAccess {
    /// A child of this process (a tree under `agentsh entrypoint`).
    pub descendants: Probe,
    /// A process this one did not start (a tree an SDK daemon started).
    pub others: Probe,
}

/// Which trees a server can supervise, from [`TreeAccess`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Reach {
    /// Every tree (as root; another uid's tree through `tracee::access`).
    Any,
    /// Only trees whose root descends from the server.
    Descendants,
    /// None: ptrace access is refused even for its own children.
    Nothing,
}

impl TreeAccess {
    pub fn reach(&self) -> Reach {
        if self.others.available {
            Reach::Any
        } else if self.descendants.available {
            Reach::Descendants
        } else {
            Reach::Nothing
        }
    }
}

/// What to do about a [`Reach`] short of [`Reach::Any`], for the log,
/// `agentsh ready` and the shim's refusal; `None` for [`Reach::Any`].
pub fn reach_remedy(reach: Reach, yama: Option<u32>) -> Option<String> {
    let yama = match yama {
        Some(s) => format!("Yama ptrace_scope {s}"),
        None => "the kernel".into(),
    };
    match reach {
        Reach::Any => None,
        Reach::Descendants => Some(format!(
            "the server lacks CAP_SYS_PTRACE and {yama} lets it read only the processes it \
             started: run the SDK's daemon under `agentsh entrypoint -- DAEMON` (the server is \
             then an ancestor of every shell), or give the container CAP_SYS_PTRACE \
             (`docker run --cap-add SYS_PTRACE`)"
        )),
        Reach::Nothing => Some(format!(
            "the server cannot read even its own children's memory (ptrace access refused by \
             {yama} or a seccomp profile): give the container CAP_SYS_PTRACE \
             (`docker run --cap-add SYS_PTRACE`), or set kernel.yama.ptrace_scope to 1 or 0 on \
             the host"
        )),
    }
}
