//! The config's embedded defaults (the file `agentsh server --print-config`
//! prints) and the help text that names every key.
//!
//! Why embedded: a server started without `--config` runs on the same
//! defaults a written file would start from, and the help cannot drift from
//! the binary that prints it.
//!
//! Failure modes: none at run time; the embedded file is parsed by a unit
//! test (`embedded_defaults_parse`).

/// The shipped defaults, embedded so `agentsh server` runs with no files.
pub const EMBEDDED_CONFIG: &str = include_str!("../../../etc/agentsh/config.yaml");

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
  execve.max_argc                  131072            argv entries read per exec
  execve.max_argv_bytes            2097152           argv bytes read per exec (the kernel's
                                                     limit on a default stack: find -exec +,
                                                     xargs and long compiler lines fit)
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
