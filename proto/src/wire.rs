//! The wrap-init exchange and the configuration unixwrap applies.
//!
//! JSON field names are snake_case, as in the original agentsh API.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// `POST /api/v1/sessions/{id}/wrap-init` request body, sent by the shim.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WrapInitRequest {
    /// The shell the shim is about to run (e.g. `/bin/sh`).
    pub agent_command: String,
    /// Its arguments after argv[0].
    #[serde(default)]
    pub agent_args: Vec<String>,
    /// The uid the notify socket must accept a connection from.
    pub caller_uid: u32,
    /// The names (never the values) of the shell's environment, so the
    /// wrap-init event can say which the policy's `env:` removes.
    #[serde(default)]
    pub env_names: Vec<String>,
    /// The names (never the values) of those whose value holds a URL with
    /// a password (`env::url_with_password`): `deny_url_passwords` removes
    /// them, and the event says so.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub env_url_passwords: Vec<String>,
    /// The caller hands the notify fd in itself (the shim, which takes
    /// unixwrap's steps in place) and takes the tree's Landlock ruleset,
    /// built ahead by the server, with the ACK.
    #[serde(default)]
    pub ruleset_ahead: bool,
}

/// `wrap-init` response: everything the shim needs to start unixwrap.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WrapInitResponse {
    /// Absolute path of `agentsh-unixwrap`. Empty means "no kernel install".
    pub wrapper_binary: String,
    /// Unix socket the shim (or the relay helper) hands the notify fd to.
    /// Empty means "no kernel install".
    pub notify_socket: String,
    /// What unixwrap installs. Sent once: where `agentsh-unixwrap` is exec'd,
    /// the shim serializes it into `AGENTSH_SECCOMP_CONFIG` itself.
    pub seccomp_config: SeccompConfig,
    /// Extra environment for unixwrap only (it strips every `AGENTSH_*` before exec).
    #[serde(default)]
    pub wrapper_env: BTreeMap<String, String>,
}

/// The filter and Landlock ruleset unixwrap installs before exec'ing the shell.
///
/// Version 2: the server compiles the seccomp program and ships it in
/// [`SeccompConfig::filter`] (format: [`crate::bpf`]); unixwrap loads exactly
/// that program and builds nothing itself.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SeccompConfig {
    /// Format version; unixwrap refuses a version it does not know.
    pub version: u32,
    /// The BPF program, base64 of native-endian `struct sock_filter`s
    /// ([`crate::bpf::encode_program`]). Empty is refused by unixwrap.
    #[serde(default)]
    pub filter: String,
    /// Ask for SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV (Linux >= 5.19) so a
    /// signal does not re-issue a notification the server already holds.
    #[serde(default = "default_true")]
    pub wait_killable: bool,
    /// Seconds unixwrap waits for the relay's ACK before refusing to run.
    #[serde(default = "default_ack_timeout")]
    pub ack_timeout_secs: u32,
    /// Landlock ruleset; `None` means unixwrap applies no Landlock.
    #[serde(default)]
    pub landlock: Option<LandlockConfig>,
    /// Absolute, canonical paths of privileged daemons' sockets (and
    /// directories of them) unixwrap hides from the tree in a private mount
    /// namespace before the filter is loaded, where it can (CAP_SYS_ADMIN).
    #[serde(default)]
    pub daemon_sockets: Vec<String>,
    /// Absolute, canonical paths of credential stores (the policy's
    /// `credential_files`) unixwrap covers in the tree's mount namespace,
    /// as it covers daemon sockets.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub credential_files: Vec<String>,
    /// Absolute, canonical paths kept read-only (the policy's
    /// `read_only_files`): each bound read-only onto itself in the same
    /// mount namespace.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub read_only_files: Vec<String>,
    /// A tree without CAP_SYS_ADMIN gets a user namespace of its own (its
    /// ids mapped to themselves) to mount those covers in: the server found
    /// that this host lets an ordinary process make one.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub user_namespace: bool,
    /// How the tree's execs reach the server: a user-notify fd handed up
    /// (`notify`), or ptrace stops at `SECCOMP_RET_TRACE` (`ptrace`: the
    /// server seizes unixwrap before it runs anything).
    #[serde(default)]
    pub backend: ExecBackend,
    /// The server's pid, for a backend that seizes the tree's root: unixwrap
    /// names it its ptracer (`prctl(PR_SET_PTRACER)`) before it asks to be
    /// seized, so a server without `CAP_SYS_PTRACE` can trace a shell it
    /// did not start where Yama (real, or gVisor's) allows only
    /// descendants. `None`: nothing to name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tracer_pid: Option<u32>,
    /// The policy's `env:` rules for the command's environment (`None`:
    /// inherited as is, minus agentsh's own variables).
    #[serde(default)]
    pub env: Option<crate::env::EnvRules>,
}

/// The way a tree's execs reach the server (`execve.backend`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ExecBackend {
    /// Seccomp user notification: the filter answers `USER_NOTIF`, the
    /// notify fd goes to the server.
    #[default]
    Notify,
    /// ptrace: the filter answers `SECCOMP_RET_TRACE`, the server is the
    /// tracer of every task of the tree (gVisor, restrictive seccomp profiles).
    Ptrace,
}

/// How a tree's filter hands a trapped syscall over: the kernel mechanism
/// a backend is built on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Trap {
    /// `SECCOMP_RET_USER_NOTIF`: the syscall waits on a notify fd, which
    /// the wrapper hands to the server.
    UserNotif,
    /// `SECCOMP_RET_TRACE`: the syscall stops for the task's tracer, which
    /// the server becomes by seizing the wrapper.
    Tracer,
}

/// What the shim and unixwrap need to know of a backend, in one place
/// (the server's side of each is a `supervisor::backend::Backend`).
impl ExecBackend {
    /// Every backend, in the order `execve.backend: auto` prefers them.
    pub const ALL: [ExecBackend; 2] = [ExecBackend::Notify, ExecBackend::Ptrace];

    /// The name in configs, events and logs.
    pub fn name(self) -> &'static str {
        match self {
            ExecBackend::Notify => "notify",
            ExecBackend::Ptrace => "ptrace",
        }
    }

    /// The kernel mechanism its filter traps with.
    pub fn trap(self) -> Trap {
        match self {
            ExecBackend::Notify => Trap::UserNotif,
            ExecBackend::Ptrace => Trap::Tracer,
        }
    }
}

/// Current [`SeccompConfig::version`].
pub const SECCOMP_CONFIG_VERSION: u32 = 2;

fn default_true() -> bool {
    true
}

fn default_ack_timeout() -> u32 {
    10
}

impl Default for SeccompConfig {
    /// No filter (unixwrap refuses it until the server puts one in), the
    /// default flags and ACK deadline, no Landlock.
    fn default() -> Self {
        SeccompConfig {
            version: SECCOMP_CONFIG_VERSION,
            filter: String::new(),
            wait_killable: true,
            ack_timeout_secs: default_ack_timeout(),
            landlock: None,
            daemon_sockets: Vec::new(),
            credential_files: Vec::new(),
            read_only_files: Vec::new(),
            user_namespace: false,
            backend: ExecBackend::Notify,
            tracer_pid: None,
            env: None,
        }
    }
}

/// What to do when the kernel cannot enforce all of a [`LandlockConfig`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LandlockCompat {
    /// Enforce what the kernel supports; report what was enforced.
    BestEffort,
    /// Refuse to run unless everything is enforced.
    Required,
}

/// Filesystem access rights, named after Landlock's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FsAccess {
    /// Read files and list directories.
    Read,
    /// Write to and truncate files.
    Write,
    /// Create files, directories, symlinks, FIFOs, sockets (never devices).
    Create,
    /// Remove files and directories.
    Delete,
    /// Execute files.
    Execute,
    /// Directory listings only (Landlock's ReadDir); `read` includes it. The
    /// server grants it on a directory whose files it must keep unreadable
    /// (its own state), so `ls /` keeps working.
    List,
}

/// Access allowed beneath one path.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FsRule {
    /// Absolute path; the rule covers it and everything beneath.
    pub path: String,
    /// What is allowed there.
    pub access: Vec<FsAccess>,
}

/// The Landlock part of the configuration.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LandlockConfig {
    /// What to do when the kernel cannot enforce all of it.
    pub compat: LandlockCompat,
    /// Filesystem rights the ruleset handles; anything handled and not
    /// granted by a rule is denied.
    #[serde(default)]
    pub handled_fs: Vec<FsAccess>,
    /// The grants, one per path.
    #[serde(default)]
    pub fs_rules: Vec<FsRule>,
    /// TCP ports the tree may connect to; `None` leaves TCP connect unhandled.
    #[serde(default)]
    pub tcp_connect_ports: Option<Vec<u16>>,
    /// TCP ports the tree may bind; `None` leaves TCP bind unhandled.
    #[serde(default)]
    pub tcp_bind_ports: Option<Vec<u16>>,
    /// Scope signals to the tree (ABI >= 6).
    #[serde(default)]
    pub scope_signals: bool,
    /// Scope abstract unix sockets to the tree (ABI >= 6).
    #[serde(default)]
    pub scope_abstract_unix: bool,
    /// The highest Landlock ABI unixwrap may use (the operator's
    /// `landlock.max_abi`); `None`: the kernel's. Rights and scopes of a later
    /// ABI are not asked for, exactly as on a kernel that stops there.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_abi: Option<i64>,
    /// Directories the policy keeps from running what the tree writes there
    /// (`exec_sources: {writable: deny}`): where unixwrap has a private mount
    /// namespace, it also mounts them `noexec`, which also stops
    /// `mmap(PROT_EXEC)` of their files (Landlock sees only `execve`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub noexec_mounts: Vec<String>,
}

impl LandlockConfig {
    /// The lowest Landlock ABI that enforces all of this ruleset (ABI history:
    /// 1 base fs rights, 2 Refer, 3 Truncate, 4 TCP, 6 scopes). Refer is
    /// handled whenever any filesystem right is (unixwrap keeps reparenting
    /// possible), so any fs right needs ABI 2; write needs Truncate.
    pub fn required_abi(&self) -> i64 {
        let mut abi = 0;
        if !self.handled_fs.is_empty() {
            abi = 2;
            if self.handled_fs.contains(&FsAccess::Write) {
                abi = 3;
            }
        }
        if self.tcp_connect_ports.is_some() || self.tcp_bind_ports.is_some() {
            abi = abi.max(4);
        }
        if self.scope_signals || self.scope_abstract_unix {
            abi = abi.max(6);
        }
        abi
    }
}

impl LandlockConfig {
    /// The ABI unixwrap uses on a kernel offering `kernel_abi`: the kernel's,
    /// capped by [`LandlockConfig::max_abi`].
    pub fn effective_abi(&self, kernel_abi: i64) -> i64 {
        effective_landlock_abi(kernel_abi, self.max_abi)
    }
}

/// `kernel_abi` capped by `max_abi` (`None` or 0: no cap).
pub fn effective_landlock_abi(kernel_abi: i64, max_abi: Option<i64>) -> i64 {
    match max_abi {
        Some(cap) if cap > 0 => kernel_abi.min(cap),
        _ => kernel_abi,
    }
}

/// The Landlock ABI the running kernel offers (0: Landlock unavailable).
/// The server and the trees share the kernel, so both sides can ask.
pub fn kernel_landlock_abi() -> i64 {
    // SAFETY: LANDLOCK_CREATE_RULESET_VERSION with a NULL attr and size 0 only
    // returns the ABI version (or -1 with EOPNOTSUPP/ENOSYS); nothing is created.
    let v = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<libc::c_void>(),
            0usize,
            1u32, // LANDLOCK_CREATE_RULESET_VERSION
        )
    };
    v.max(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wrap_init_response_is_snake_case_json() {
        let r = WrapInitResponse {
            wrapper_binary: "/usr/bin/agentsh-unixwrap".into(),
            notify_socket: "/run/agentsh/n.sock".into(),
            seccomp_config: SeccompConfig {
                filter: "AAAAAAAAAAA=".into(),
                ..SeccompConfig::default()
            },
            wrapper_env: BTreeMap::new(),
        };
        let v: serde_json::Value = serde_json::to_value(&r).unwrap();
        assert!(v.get("wrapper_binary").is_some());
        assert!(v.get("notify_socket").is_some());
        assert_eq!(v["seccomp_config"]["version"], 2);
        assert!(v["seccomp_config"]["filter"].is_string());
        let back: WrapInitResponse = serde_json::from_value(v).unwrap();
        assert_eq!(back, r);
    }

    #[test]
    fn seccomp_config_defaults_fill_missing_fields() {
        let c: SeccompConfig = serde_json::from_str(r#"{"version":2}"#).unwrap();
        assert!(c.wait_killable);
        assert_eq!(c.ack_timeout_secs, 10);
        assert!(c.landlock.is_none());
        assert!(c.filter.is_empty());
    }

    #[test]
    fn the_landlock_cap_only_lowers_the_abi() {
        assert_eq!(effective_landlock_abi(7, None), 7);
        assert_eq!(effective_landlock_abi(7, Some(0)), 7);
        assert_eq!(effective_landlock_abi(7, Some(2)), 2);
        assert_eq!(effective_landlock_abi(4, Some(6)), 4);
        assert_eq!(effective_landlock_abi(0, Some(2)), 0);
    }
}
