//! Server configuration: YAML, every key optional, defaults embedded.
//!
//! A config that cannot be read or parsed is an error at start-up (the server
//! does not run on a guess). Unknown keys are errors too: a misspelt limit
//! must not silently fall back to a default. At server start,
//! [`Config::check_own_locations`] also refuses agentsh's own files (state,
//! audit log, config, policies, binaries) in a world-writable directory such
//! as `/tmp`: protecting them there would take create rights on that
//! directory away from every supervised tree.

mod error;
pub mod secrets;

use crate::vocab::parse_duration;
pub use error::{ConfigError, EgressAddrError, Invalid, SharedLocation};
use serde::Deserialize;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

/// The shipped defaults, embedded so `agentsh server` runs with no files.
pub const EMBEDDED_CONFIG: &str = include_str!("../../etc/agentsh/config.yaml");

/// Documentation of every key, shown by `agentsh server --help`.
pub const CONFIG_HELP: &str = "\
CONFIG KEYS (YAML; all optional; defaults shown):
  server.socket                    /run/agentsh/api.sock  the API's Unix socket (SOCK_SEQPACKET);
                                                     shims call wrap-init here, the CLI talks here.
                                                     Its directory (the run directory: notify
                                                     sockets, the `active` marker) must be
                                                     root-owned and not writable by others
  server.http.addr                 \"\"                an extra TCP listener for operators, e.g.
                                                     127.0.0.1:18080; every route but /healthz
                                                     needs the operator token. Empty: none
  server.http.wrap_init            false             also serve wrap-init on TCP (peers identified
                                                     through /proc); for shim.conf server=http://
  policy                           agent-default     policy name under policies_dir (falls back to
                                                     the embedded shipped policy), or a YAML path
  policies_dir                     /etc/agentsh/policies
  state_dir                        /var/lib/agentsh  the operator token (approval.token)
  audit.jsonl                      /var/log/agentsh/audit.jsonl   append-only JSON Lines audit log
  audit.memory_events_per_session  10000             events per session kept for the API
  audit.on_failure                 continue          continue | refuse: with `refuse`, an exec whose
                                                     event cannot be written to audit.jsonl is
                                                     denied (rule audit_unavailable)
  audit.otlp.endpoint              \"\"                also export every event as an OpenTelemetry
                                                     log record over OTLP/HTTP to this receiver,
                                                     e.g. http://127.0.0.1:4318 (/v1/logs added
                                                     when no path is given); http:// only (a
                                                     local collector forwards over TLS). Empty: off
  wrapper_binary                   \"\"                agentsh-unixwrap path; empty = next to agentsh
  workspace                        \"\"                the agent's workspace, ${WORKSPACE} in file_rules;
                                                     empty: rules naming it are skipped (and logged)
  landlock.compat                  best_effort       best_effort | required: with `required`, a command
                                                     does not run unless the kernel enforces every
                                                     Landlock right asked for
  landlock.max_abi                 0                 the highest Landlock ABI agentsh uses; 0: the
                                                     kernel's. A cap reproduces an older kernel (2:
                                                     E2B's 6.1: no TCP rules, no signal scoping, so
                                                     the seccomp signal guard asks the supervisor)
  egress.stub                      127.0.0.153:53    where the DNS stub of `egress.dns: stub` listens
                                                     (UDP and TCP); a tree's /etc/resolv.conf names
                                                     it (any other resolver is sent to it)
  egress.resolvers                 []                the upstreams the stub asks, [\"IP:PORT\", ...];
                                                     empty: the nameservers of /etc/resolv.conf
  egress.compat                    best_effort       where the policy's egress cannot be enforced
                                                     (pidfd_getfd refused: gVisor, Docker's default
                                                     profile): best_effort runs the tree and refuses
                                                     what cannot be judged; required does not start
                                                     it (126); allow_unjudged runs what cannot be
                                                     judged as made, audited (fail open: your choice)
  egress.ca                        /etc/agentsh/ca.pem  agentsh's CA certificate (made at first need,
                                                     its key in <state_dir>/ca.key, root-only), for
                                                     egress rules with http:; ca-bundle.pem beside
                                                     it holds the system's roots and it
  egress.ca_key                    \"\"                where the CA's key is kept; empty: <state_dir>/ca.key.
                                                     Its directory is never readable by a tree
  egress.upstream_roots            []                PEM files also trusted for upstream servers'
                                                     certificates (besides the system's store)
  secrets                          {}                {NAME: {file: PATH} | {env: VAR}}: values an
                                                     egress rule's http.inject adds to allowed
                                                     requests as ${secret:NAME}; a file must be the
                                                     server user's own, mode 600; trees never see
                                                     them
  execve.backend                   auto              auto | notify | ptrace: how execs reach the
                                                     supervisor. auto: seccomp user-notify where
                                                     the kernel has it, else ptrace (gVisor,
                                                     restrictive seccomp profiles)
  execve.race_guard                verify            verify | freeze: an exec whose caller shares its
                                                     memory with running tasks (threads, a vfork
                                                     parent's threads) is watched and its new image
                                                     checked against what was judged before its first
                                                     instruction (killed if it differs); freeze also
                                                     stops every such task while the exec is read
                                                     and runs (no racing write reaches the kernel;
                                                     about 60 µs more per such exec)
  execve.watch                     shared            shared | every: which allowed execs are watched
                                                     to their new image on the notify backend.
                                                     shared: those race_guard names, and those whose
                                                     lookups the tree can change. every: all of
                                                     them, so a process that shares the caller's
                                                     memory from outside its lineage (a vfork child
                                                     whose vfork parent died) cannot change what
                                                     runs either (about 130 µs more per exec here)
  execve.max_argc                  1000              argv entries read per exec
  execve.max_argv_bytes            65536             argv bytes read per exec
  execve.on_truncated              deny              deny | evaluate: what an exec whose argv
                                                     exceeds the limits gets
  execve.approval_timeout          10s               how long an exec under a `decision: approve`
                                                     rule waits for an operator: \"10s\", \"500ms\",
                                                     \"2m\" or a number of seconds
  execve.approval_timeout_action   deny              deny | allow: what an unanswered approval gets
  sessions                         {}                sessions besides `default`, made at start, each
                                                     {ID: {policy, workspace, env: {deny, allow,
                                                     inject}, limits: {pids, memory, cpu, wall,
                                                     compat}}}: its own policy (default: the
                                                     top-level one), ${WORKSPACE} (an existing
                                                     directory), env rules (the policy's env
                                                     applies too) and limits per tree (cgroup v2;
                                                     over the policy's limits:). A shell joins one
                                                     by shim.conf session= or AGENTSH_SESSION=ID
  execve.explain                   stderr            stderr | off: a refused exec's caller gets one line
                                                     on its stderr (\"agentsh: curl denied (rule R):
                                                     message\"), when it takes it without waiting;
                                                     so do refused network calls and DNS names
The embedded defaults are printed by `agentsh server --print-config`.";

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    pub server: ServerSection,
    pub policy: String,
    pub policies_dir: PathBuf,
    pub state_dir: PathBuf,
    pub audit: AuditSection,
    pub wrapper_binary: String,
    pub execve: ExecveSection,
    pub workspace: String,
    pub landlock: LandlockSection,
    pub egress: EgressSection,
    /// Sessions besides `default` (whose policy and workspace are the
    /// top-level ones), made at start.
    pub sessions: std::collections::BTreeMap<String, SessionSection>,
    /// Values added to requests `http:` rules allow (`${secret:NAME}`).
    pub secrets: std::collections::BTreeMap<String, secrets::SecretSource>,
}

/// `sessions.<id>`: one task's policy, workspace and environment rules.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct SessionSection {
    /// A shipped name, a name under `policies_dir`, or a path (default: the
    /// top-level `policy`).
    #[serde(default)]
    pub policy: Option<String>,
    /// What `${WORKSPACE}` (and `${SESSION_ROOT}`) mean for this session:
    /// an existing directory (default: none, rules naming it are skipped).
    #[serde(default)]
    pub workspace: Option<String>,
    /// Removed, kept and set in the environment of the session's shells,
    /// besides the policy's own `env:` (both apply).
    #[serde(default)]
    pub env: Option<agentsh_proto::env::EnvDoc>,
    /// What each of its trees may use (processes, memory, CPU, wall time),
    /// over its policy's `limits:` key by key (`vocab::limits`).
    #[serde(default)]
    pub limits: Option<crate::vocab::LimitsDoc>,
}

/// `egress.*`: the DNS stub and how much of a policy's `egress` must hold.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct EgressSection {
    /// Where the DNS stub listens (UDP and TCP), `IP:PORT`.
    pub stub: String,
    /// The upstreams the stub asks, `IP:PORT` (empty: the nameservers of
    /// the server's `/etc/resolv.conf`, except the stub).
    pub resolvers: Vec<String>,
    pub compat: EgressCompat,
    /// Where agentsh's CA certificate is published (`ca-bundle.pem`
    /// beside it: the system's roots and it); its key is
    /// `<state_dir>/ca.key`.
    pub ca: PathBuf,
    /// Where the CA's key is kept (empty: `<state_dir>/ca.key`); its
    /// directory is never a tree's to read.
    pub ca_key: String,
    /// PEM files whose certificates the proxy also trusts for upstreams,
    /// besides the system's store.
    pub upstream_roots: Vec<PathBuf>,
}

/// `egress.compat`: what a tree gets where its policy's egress cannot be
/// enforced on this host.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EgressCompat {
    /// It runs; every call egress would judge is refused (EACCES,
    /// audited), and wrap-init lists `egress` under `not_enforced`.
    #[default]
    BestEffort,
    /// It does not start (exit 126).
    Required,
    /// It runs, and a call egress cannot judge here runs as the tree made
    /// it, its destination audited from the caller's memory (`rule:
    /// allow_unjudged`). The one fail-open choice: an operator's, said at
    /// start and in every such event.
    AllowUnjudged,
}

impl EgressCompat {
    pub fn as_str(self) -> &'static str {
        match self {
            EgressCompat::BestEffort => "best_effort",
            EgressCompat::Required => "required",
            EgressCompat::AllowUnjudged => "allow_unjudged",
        }
    }
}

/// The nameservers `resolv_conf` names, except `stub` (port 53).
pub fn nameservers(resolv_conf: &str, stub: SocketAddr) -> Vec<SocketAddr> {
    resolv_conf
        .lines()
        .filter_map(|l| {
            let mut w = l.split_whitespace();
            (w.next() == Some("nameserver")).then(|| w.next()).flatten()
        })
        .filter_map(|ip| ip.split('%').next()?.parse::<std::net::IpAddr>().ok())
        .map(|ip| SocketAddr::new(ip, 53))
        .filter(|a| *a != stub)
        .collect()
}

impl Default for EgressSection {
    fn default() -> Self {
        EgressSection {
            stub: "127.0.0.153:53".into(),
            resolvers: Vec::new(),
            compat: EgressCompat::BestEffort,
            ca: "/etc/agentsh/ca.pem".into(),
            ca_key: String::new(),
            upstream_roots: Vec::new(),
        }
    }
}

impl EgressSection {
    /// `stub` as an address.
    pub fn stub_addr(&self) -> Result<SocketAddr, EgressAddrError> {
        self.stub
            .parse()
            .map_err(|_| EgressAddrError::Stub(self.stub.clone()))
    }

    /// `resolvers` as addresses; an empty list: `resolv_conf`'s nameservers
    /// other than the stub.
    pub fn upstream(&self, resolv_conf: &str) -> Result<Vec<SocketAddr>, EgressAddrError> {
        let stub = self.stub_addr()?;
        if self.resolvers.is_empty() {
            return Ok(nameservers(resolv_conf, stub));
        }
        self.resolvers
            .iter()
            .map(|r| {
                let a: SocketAddr = r
                    .parse()
                    .map_err(|_| EgressAddrError::Resolver(r.clone()))?;
                if a == stub {
                    return Err(EgressAddrError::ResolverIsStub(r.clone()));
                }
                Ok(a)
            })
            .collect()
    }
}

/// How much Landlock enforcement a command needs before it may run.
#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LandlockSection {
    pub compat: agentsh_proto::LandlockCompat,
    /// The highest Landlock ABI agentsh uses (0: the kernel's).
    pub max_abi: u32,
}

impl Default for LandlockSection {
    fn default() -> Self {
        LandlockSection {
            compat: agentsh_proto::LandlockCompat::BestEffort,
            max_abi: 0,
        }
    }
}

impl LandlockSection {
    /// `max_abi` as a cap (`None`: no cap).
    pub fn cap(&self) -> Option<i64> {
        (self.max_abi > 0).then_some(i64::from(self.max_abi))
    }

    /// The Landlock ABI agentsh uses: the running kernel's, capped.
    pub fn effective_abi(&self) -> i64 {
        agentsh_proto::wire::effective_landlock_abi(
            agentsh_proto::wire::kernel_landlock_abi(),
            self.cap(),
        )
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ServerSection {
    /// The API's Unix SOCK_SEQPACKET socket; its directory is the run directory.
    pub socket: PathBuf,
    pub http: HttpSection,
}

impl Default for ServerSection {
    fn default() -> Self {
        ServerSection {
            socket: agentsh_proto::shimconf::DEFAULT_SOCKET.into(),
            http: HttpSection::default(),
        }
    }
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct HttpSection {
    /// Empty: no TCP listener.
    pub addr: String,
    /// Serve wrap-init on TCP too (off: only on the Unix socket).
    pub wrap_init: bool,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AuditSection {
    pub jsonl: PathBuf,
    pub memory_events_per_session: usize,
    pub on_failure: AuditOnFailure,
    pub otlp: OtlpSection,
}

/// `audit.otlp`: events exported as OpenTelemetry logs (see `otlp`).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct OtlpSection {
    /// `http://host:port[/path]` of an OTLP/HTTP receiver; empty: off.
    pub endpoint: String,
}

/// What an exec gets when its audit event cannot be written to the file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AuditOnFailure {
    /// It runs; the failure is said on stderr and counted.
    #[default]
    Continue,
    /// It is denied (`audit_unavailable`): an unaudited exec is worse
    /// than a refused one.
    Refuse,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OnTruncated {
    /// Deny any exec whose argv could not be read whole.
    Deny,
    /// Judge the exec on the part that was read (audited as truncated).
    Evaluate,
}

/// What an approval nobody answered in time gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TimeoutAction {
    Deny,
    Allow,
}

/// `execve.backend`: how a tree's execs reach the supervisor.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BackendChoice {
    /// notify where the kernel has seccomp user-notify, else ptrace.
    Auto,
    Notify,
    Ptrace,
}

impl BackendChoice {
    /// The one backend chosen (`None`: `auto`, the first the host offers).
    pub fn only(self) -> Option<agentsh_proto::ExecBackend> {
        match self {
            BackendChoice::Auto => None,
            BackendChoice::Notify => Some(agentsh_proto::ExecBackend::Notify),
            BackendChoice::Ptrace => Some(agentsh_proto::ExecBackend::Ptrace),
        }
    }
}

/// `execve.race_guard`: what makes an exec hold when other tasks share the
/// caller's memory (see `docs/security-model.md`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RaceGuard {
    /// Watch the exec and check the new image (file and argv) at
    /// `PTRACE_EVENT_EXEC`, before its first instruction.
    Verify,
    /// The same, and stop every task sharing the memory while the exec is
    /// read and runs.
    Freeze,
}

/// `execve.watch`: which allowed execs the notify backend watches to their
/// new image (see `docs/security-model.md`, "Command rules: what holds").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ExecWatch {
    /// Those whose caller shares its memory with tasks it can find (its
    /// threads, its vfork parents and their threads), and those whose
    /// lookups the tree can change.
    Shared,
    /// Every one (the ptrace backend checks every exec anyway).
    Every,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ExecveSection {
    pub backend: BackendChoice,
    pub race_guard: RaceGuard,
    pub watch: ExecWatch,
    pub max_argc: usize,
    pub max_argv_bytes: usize,
    pub on_truncated: OnTruncated,
    #[serde(deserialize_with = "deserialize_duration")]
    pub approval_timeout: std::time::Duration,
    pub approval_timeout_action: TimeoutAction,
    pub explain: Explain,
}

/// `execve.explain`: whether a refused exec's caller is told why.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Explain {
    /// One line on the caller's stderr, where it takes it without waiting.
    Stderr,
    Off,
}

fn deserialize_duration<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<std::time::Duration, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Raw {
        Number(f64),
        Text(String),
    }
    let bad = || {
        serde::de::Error::custom(
            "expected a duration such as \"10s\", \"500ms\", \"2m\" or a number of seconds",
        )
    };
    match Raw::deserialize(d)? {
        Raw::Number(n) => std::time::Duration::try_from_secs_f64(n).map_err(|_| bad()),
        Raw::Text(t) => parse_duration(&t).ok_or_else(bad),
    }
}

/// Line and column (1-based) of `value` (plain or quoted) on a line after
/// the line `after` (a top-level key), if it is there.
fn value_position(text: &str, after: &str, value: &str) -> Option<(usize, usize)> {
    let start = text.lines().position(|l| l.trim_end() == after)?;
    let spellings = [
        format!("\"{value}\""),
        format!("'{value}'"),
        value.to_string(),
    ];
    text.lines().enumerate().skip(start + 1).find_map(|(i, l)| {
        spellings
            .iter()
            .find_map(|s| l.find(s.as_str()))
            .map(|byte| (i + 1, l[..byte].chars().count() + 1))
    })
}

/// The CA key's file name in `state_dir` (the proxy writes it there; the
/// config says where it is).
pub const CA_KEY_FILE: &str = "ca.key";

impl Config {
    /// Where agentsh's CA key is (`egress.ca_key`, else in `state_dir`).
    pub fn ca_key_path(&self) -> PathBuf {
        if self.egress.ca_key.is_empty() {
            self.state_dir.join(CA_KEY_FILE)
        } else {
            PathBuf::from(&self.egress.ca_key)
        }
    }
}

impl Default for Config {
    fn default() -> Self {
        Config {
            server: ServerSection::default(),
            policy: "agent-default".into(),
            policies_dir: "/etc/agentsh/policies".into(),
            state_dir: "/var/lib/agentsh".into(),
            audit: AuditSection::default(),
            wrapper_binary: String::new(),
            execve: ExecveSection::default(),
            workspace: String::new(),
            landlock: LandlockSection::default(),
            egress: EgressSection::default(),
            sessions: std::collections::BTreeMap::new(),
            secrets: std::collections::BTreeMap::new(),
        }
    }
}

impl Default for AuditSection {
    fn default() -> Self {
        AuditSection {
            jsonl: "/var/log/agentsh/audit.jsonl".into(),
            memory_events_per_session: 10_000,
            on_failure: AuditOnFailure::Continue,
            otlp: OtlpSection::default(),
        }
    }
}

impl Default for ExecveSection {
    fn default() -> Self {
        ExecveSection {
            backend: BackendChoice::Auto,
            race_guard: RaceGuard::Verify,
            watch: ExecWatch::Shared,
            max_argc: 1000,
            max_argv_bytes: 65536,
            on_truncated: OnTruncated::Deny,
            approval_timeout: std::time::Duration::from_secs(10),
            approval_timeout_action: TimeoutAction::Deny,
            explain: Explain::Stderr,
        }
    }
}

impl Config {
    /// Parses config text; `origin` names it in errors.
    pub fn from_yaml(text: &str, origin: &str) -> Result<Config, ConfigError> {
        let cfg: Config = if text.trim().is_empty() {
            Config::default()
        } else {
            serde_yaml_ng::from_str(text).map_err(|source| ConfigError::Parse {
                origin: origin.to_string(),
                source,
            })?
        };
        cfg.validate().map_err(|source| ConfigError::Invalid {
            origin: origin.to_string(),
            source,
        })?;
        // A session's env rules, checked here so the error has its place
        // in the file (the rest of a session is checked as it is made).
        for (id, section) in &cfg.sessions {
            if let Some(Err(e)) = section.env.clone().map(agentsh_proto::env::EnvDoc::compile) {
                let place = value_position(text, "sessions:", &e.value)
                    .map_or_else(String::new, |(l, c)| format!("{l}:{c}: "));
                return Err(ConfigError::SessionEnv {
                    origin: origin.to_string(),
                    place,
                    id: id.clone(),
                    message: e.message,
                });
            }
        }
        Ok(cfg)
    }

    /// Loads `path`, or the embedded defaults when `path` is `None`.
    pub fn load(path: Option<&Path>) -> Result<Config, ConfigError> {
        match path {
            None => Config::from_yaml(EMBEDDED_CONFIG, "embedded defaults"),
            Some(p) => {
                let text = std::fs::read_to_string(p).map_err(|source| ConfigError::Read {
                    path: p.to_path_buf(),
                    source,
                })?;
                Config::from_yaml(&text, &p.display().to_string())
            }
        }
    }

    fn validate(&self) -> Result<(), Invalid> {
        let http = &self.server.http;
        if !http.addr.is_empty() && http.addr.parse::<SocketAddr>().is_err() {
            return Err(Invalid::HttpAddr(http.addr.clone()));
        }
        if http.wrap_init && http.addr.is_empty() {
            return Err(Invalid::WrapInitWithoutAddr);
        }
        let sock = self.server.socket.to_string_lossy();
        if agentsh_proto::shimconf::Server::parse(&format!("unix:{sock}")).is_none()
            || self
                .server
                .socket
                .parent()
                .is_none_or(|p| p == Path::new("/"))
        {
            return Err(Invalid::Socket(sock.into_owned()));
        }
        if self.execve.max_argc == 0 || self.execve.max_argv_bytes == 0 {
            return Err(Invalid::ArgvLimits);
        }
        if self.execve.approval_timeout.is_zero()
            || self.execve.approval_timeout > std::time::Duration::from_secs(86_400)
        {
            return Err(Invalid::ApprovalTimeout);
        }
        if self.landlock.max_abi > 64 {
            return Err(Invalid::LandlockAbi(self.landlock.max_abi));
        }
        self.egress.stub_addr()?;
        self.egress.upstream("")?;
        if self.policy.trim().is_empty() {
            return Err(Invalid::NoPolicy);
        }
        if !(self.workspace.is_empty() || self.workspace.starts_with('/')) {
            return Err(Invalid::Workspace(self.workspace.clone()));
        }
        for id in self.sessions.keys() {
            if id == "default" {
                return Err(Invalid::DefaultSession);
            }
            if !agentsh_proto::shimconf::valid_session_id(id) {
                return Err(Invalid::SessionId(id.clone()));
            }
            if id == agentsh_proto::shimconf::REHEARSAL_SESSION {
                return Err(Invalid::ReservedSession(id.clone()));
            }
        }
        Ok(())
    }

    /// Refuses agentsh's own files in a directory every supervised tree must
    /// be able to write (any world-writable directory: `/tmp`, `/var/tmp`,
    /// `/dev/shm`, ...). Trees never write beneath agentsh's files, and
    /// Landlock can only grant a right on a whole subtree: to keep a tree out
    /// of `/tmp/x` it must withhold create and delete on `/tmp` itself, so
    /// `cp a /tmp/b` would fail in every tree. (Anyone on the machine can
    /// also create or squat paths in such a directory before the server.)
    /// Checked on the filesystem the server sees, before it writes anything.
    ///
    /// # Errors
    /// Which setting, where it is, why, and what to use instead.
    pub fn check_own_locations(&self, config_file: Option<&Path>) -> Result<(), SharedLocation> {
        let exe = std::env::current_exe().ok();
        let wrapper = self.wrapper_binary_path();
        let mut own: Vec<(&'static str, &Path, &'static str)> = vec![
            ("state_dir", &self.state_dir, "/var/lib/agentsh"),
            (
                "audit.jsonl",
                &self.audit.jsonl,
                "/var/log/agentsh/audit.jsonl",
            ),
            ("policies_dir", &self.policies_dir, "/etc/agentsh/policies"),
            // Checked again at start (root-owned, not writable by others);
            // here for the message about shared directories.
            (
                "server.socket",
                &self.server.socket,
                "/run/agentsh/api.sock",
            ),
            (
                "wrapper_binary",
                &wrapper,
                "/usr/bin/agentsh-unixwrap (install agentsh there)",
            ),
        ];
        if let Some(c) = config_file {
            own.push(("the config file", c, "/etc/agentsh/config.yaml"));
        }
        if let Some(e) = exe.as_deref() {
            own.push((
                "the agentsh binary",
                e,
                "/usr/bin/agentsh (install agentsh there)",
            ));
        }
        for (key, path, instead) in own {
            if let Some(shared) = shared_ancestor(&real_path(path), &world_writable_dir) {
                return Err(SharedLocation {
                    key,
                    path: path.to_path_buf(),
                    shared,
                    instead,
                });
            }
        }
        Ok(())
    }

    /// The unixwrap path handed to shims.
    pub fn wrapper_binary_path(&self) -> PathBuf {
        if !self.wrapper_binary.is_empty() {
            return PathBuf::from(&self.wrapper_binary);
        }
        std::env::current_exe()
            .ok()
            .and_then(|p| p.parent().map(|d| d.join("agentsh-unixwrap")))
            .unwrap_or_else(|| PathBuf::from("/usr/bin/agentsh-unixwrap"))
    }

    /// The directory of the API socket: notify sockets, the `active` marker.
    pub fn run_dir(&self) -> PathBuf {
        self.server
            .socket
            .parent()
            .map_or_else(|| PathBuf::from("/run/agentsh"), Path::to_path_buf)
    }

    /// The TCP listener's port, if there is one.
    pub fn tcp_port(&self) -> Option<u16> {
        self.server
            .http
            .addr
            .parse::<SocketAddr>()
            .ok()
            .map(|a| a.port())
    }
}

/// `p` with its longest existing prefix canonicalized (symlinks followed),
/// the rest as written: the path the server will create.
fn real_path(p: &Path) -> PathBuf {
    let mut rest = Vec::new();
    let mut at = p;
    loop {
        if let Ok(c) = at.canonicalize() {
            return rest.iter().rev().fold(c, |acc, part| acc.join(part));
        }
        match (at.parent(), at.file_name()) {
            (Some(parent), Some(name)) => {
                rest.push(name.to_os_string());
                at = parent;
            }
            _ => return p.to_path_buf(),
        }
    }
}

/// A directory anyone may create entries in (mode o+w).
fn world_writable_dir(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p).is_ok_and(|m| m.is_dir() && m.permissions().mode() & 0o002 != 0)
}

/// The outermost directory at or above `p` that `shared` says every tree
/// writes, if any.
fn shared_ancestor(p: &Path, shared: &dyn Fn(&Path) -> bool) -> Option<PathBuf> {
    let mut ancestors: Vec<&Path> = p.ancestors().collect();
    ancestors.reverse();
    ancestors
        .into_iter()
        .find(|a| shared(a))
        .map(Path::to_path_buf)
}

#[cfg(test)]
#[path = "config_tests.rs"]
mod tests;
