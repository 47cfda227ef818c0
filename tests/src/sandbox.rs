//! A sandbox the way an agent sees one: an agentsh server, a private mount
//! namespace with the shim over `/bin/sh` and `/bin/bash`, a workspace, and
//! an SDK-style daemon (a sibling of the server) that spawns the agent's
//! commands, as root or as an ordinary user.
//!
//! The workspace is `/srv/ws` on a tmpfs mounted over `/srv` inside the
//! namespace only (a checkout under `/srv` keeps its binaries reachable:
//! [`Namespace::mount_scratch`]); the server runs inside the namespace as well
//! (as in a container, it sees the files of the trees it writes rulesets for).
//! The server's files live under `/run/agentsh-tests`, not `/tmp`: the server
//! refuses to keep its state or audit log in a directory every tree must be
//! able to write.

use crate::ns::Namespace;
use crate::sdk::{Finished, Spawn, Supervisor};
use crate::server::{TestServer, TCP};
use serde_json::Value;
use std::path::Path;
use std::time::Duration;

/// The agent's workspace inside the namespace (the server's `workspace`).
pub const WORKSPACE: &str = "/srv/ws";
/// Where test servers keep their files.
pub const SERVER_BASE: &str = "/run/agentsh-tests";
/// The unprivileged user commands run as when asked (nobody).
pub const NOBODY: u32 = 65534;

/// The shipped policies, as the server embeds them.
pub const AGENT_DEFAULT: &str = include_str!("../../etc/agentsh/policies/agent-default.yaml");
pub const AGENT_STRICT: &str = include_str!("../../etc/agentsh/policies/agent-strict.yaml");
pub const AGENT_OBSERVE: &str = include_str!("../../etc/agentsh/policies/agent-observe.yaml");

/// agent-observe without its `egress: {default: allow}`, for a test that
/// writes its own `egress` section after it.
pub fn agent_observe_without_egress() -> String {
    let shipped = "\negress:\n  default: allow\n";
    assert!(
        AGENT_OBSERVE.ends_with(shipped),
        "agent-observe's egress section changed"
    );
    AGENT_OBSERVE[..AGENT_OBSERVE.len() - shipped.len() + 1].to_string()
}

/// agent-default without its `socket_families` and `egress` (its last
/// section), for a test that writes its own after it.
pub fn agent_default_without_egress() -> String {
    let at = AGENT_DEFAULT
        .find("\nsocket_families: [unix, inet, inet6, netlink]\negress:\n")
        .expect("agent-default's egress section changed");
    let mut p = AGENT_DEFAULT[..at + 1].to_string();
    assert!(
        !p.contains("\negress:"),
        "agent-default's egress is its last section"
    );
    p.push('\n');
    p
}

pub struct Sandbox {
    pub sup: Supervisor,
    pub ns: Namespace,
    pub srv: TestServer,
    /// `None`: commands run as root.
    pub uid: Option<u32>,
}

impl Sandbox {
    /// Server with `policy_yaml` and `workspace: /srv/ws`, shim installed in
    /// `on` mode, daemon running as `uid` (root when `None`).
    pub fn new(policy_yaml: &str, uid: Option<u32>) -> Sandbox {
        Sandbox::with_config(policy_yaml, uid, "")
    }

    /// Like [`Sandbox::new`], with `extra_config` appended to the server's
    /// config (YAML top-level keys, e.g. `landlock: {max_abi: 2}`).
    pub fn with_config(policy_yaml: &str, uid: Option<u32>, extra_config: &str) -> Sandbox {
        Sandbox::with_dirs(policy_yaml, uid, extra_config, &[])
    }

    /// Like [`Sandbox::with_config`], with `dirs` (under `/srv`, owned by
    /// `uid`) made before the server starts (sessions' workspaces).
    pub fn with_dirs(
        policy_yaml: &str,
        uid: Option<u32>,
        extra_config: &str,
        dirs: &[&str],
    ) -> Sandbox {
        Sandbox::with_setup(policy_yaml, uid, extra_config, |ns| {
            for d in dirs {
                let p = ns.path(d);
                std::fs::create_dir_all(&p).expect("create a directory before the server");
                if let Some(uid) = uid {
                    std::os::unix::fs::chown(&p, Some(uid), Some(uid)).expect("chown it");
                }
            }
        })
    }

    /// Like [`Sandbox::with_config`], with `setup` run on the namespace
    /// (its scratch `/srv` mounted) before the server starts: files a
    /// policy names must exist when it loads.
    pub fn with_setup(
        policy_yaml: &str,
        uid: Option<u32>,
        extra_config: &str,
        setup: impl FnOnce(&Namespace),
    ) -> Sandbox {
        Sandbox::with_overlays(policy_yaml, uid, extra_config, &[], setup)
    }

    /// Like [`Sandbox::with_setup`], with `overlays` (e.g. `/root`,
    /// `/home`) overlaid in the namespace too, so `setup` may write there.
    pub fn with_overlays(
        policy_yaml: &str,
        uid: Option<u32>,
        extra_config: &str,
        overlays: &[&str],
        setup: impl FnOnce(&Namespace),
    ) -> Sandbox {
        let ns = Namespace::with_overlays(overlays);
        ns.mount_scratch("/srv", WORKSPACE);
        setup(&ns);
        // The server runs in the namespace too, as it would in the same
        // container: it compiles each tree's ruleset from what it sees.
        let srv = TestServer::start_with(
            Path::new(SERVER_BASE),
            policy_yaml,
            // The TCP listener too, so escape attempts can aim at a port.
            &format!("{TCP}workspace: {WORKSPACE}\n{extra_config}"),
            |program| ns.command(program),
        );
        ns.install_shim(true);
        ns.configure(&srv.url, "on");
        let ws = ns.path(WORKSPACE);
        std::fs::create_dir_all(&ws).expect("create the workspace");
        if let Some(uid) = uid {
            std::os::unix::fs::chown(&ws, Some(uid), Some(uid)).expect("chown the workspace");
        }
        let sup = Supervisor::start_as(&ns, false, uid);
        Sandbox { sup, ns, srv, uid }
    }

    /// Runs `script` the way Tensorlake does (`sh -c`), 120 s at most.
    pub fn sh(&mut self, script: &str) -> Finished {
        self.spawn(&Spawn::argv(&["/bin/sh", "-c", script]))
    }

    pub fn spawn(&mut self, s: &Spawn) -> Finished {
        self.spawn_for(s, Duration::from_secs(120))
    }

    /// Like [`Sandbox::spawn`], waiting up to `limit` (toolchains at work).
    pub fn spawn_for(&mut self, s: &Spawn, limit: Duration) -> Finished {
        let r = self.sup.spawn(s);
        self.sup.wait(r, limit)
    }

    /// Every event of the session so far.
    pub fn events(&self) -> Vec<Value> {
        self.srv.events("default")
    }

    /// The highest event id so far (events after it belong to what runs next).
    pub fn mark(&self) -> u64 {
        self.events()
            .iter()
            .filter_map(|e| e["id"].as_u64())
            .max()
            .unwrap_or(0)
    }

    /// Exec events after `mark`.
    pub fn execs_since(&self, mark: u64) -> Vec<Value> {
        self.events()
            .into_iter()
            .filter(|e| e["type"] == "execve" && e["id"].as_u64().is_some_and(|i| i > mark))
            .collect()
    }

    /// The Landlock summary of the latest wrap-init (what the tree was given).
    pub fn ruleset(&self) -> Value {
        self.events()
            .into_iter()
            .rev()
            .find(|e| e["type"] == "wrap_init")
            .map_or(Value::Null, |e| e["landlock"].clone())
    }

    /// A path inside the namespace, reached from outside it.
    pub fn host_path(&self, p: &str) -> std::path::PathBuf {
        self.ns.path(p)
    }

    /// Runs `argv` inside the namespace as root, outside any tree (setup).
    pub fn setup(&self, argv: &[&str]) {
        let out = self.ns.run(argv, &[]);
        assert!(
            out.status.success(),
            "setup {argv:?}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// A loopback TCP listener on a free port that accepts in the background.
pub struct Listener {
    pub port: u16,
}

impl Listener {
    pub fn start() -> Listener {
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind a loopback port");
        let port = l.local_addr().expect("local addr").port();
        std::thread::spawn(move || {
            for s in l.incoming() {
                drop(s);
            }
        });
        Listener { port }
    }
}
