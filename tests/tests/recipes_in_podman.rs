//! Issue 62: the cookbook's later recipes (one session per task, egress at
//! layer 7 with a token the agent never holds) run as written on a
//! `shim_install=on` image in real podman, under gVisor's `runsc` (Modal)
//! and under runc with podman's default profile (Daytona, Tensorlake,
//! Runloop's entrypoint form).
//!
//! The image is the Modal image recipe with the L7 image lines placed where
//! the cookbook places them (before the line that writes shim.conf), a
//! `config.yaml` made of the `sessions-config` and `l7-config` recipes, and
//! the container started by the `l7-start-on` start command as written,
//! with the token as the start command's environment only. Every command is
//! then sent as an SDK sends it (`podman exec CTR sh -c ...`, beside the
//! server, never below it). The TLS upstream is a stand-in on the host's
//! loopback (both containers use the host's network).
//!
//! The entrypoint form (Daytona, Tensorlake, Runloop): the image's
//! `ENTRYPOINT` and `CMD` as the recipe writes them (`podman import
//! --change`), the tests' SDK daemon stand-in at the `CMD`'s path, so the
//! daemon runs below `agentsh entrypoint` in a runc container with
//! podman's default capabilities and seccomp profile, and spawns each
//! command in its SDK's style.

// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

use agentsh_tests::http_upstream::HttpUpstream;
use agentsh_tests::podman::{runtimes_here, text, Container, Image, Runtime, Start};
use agentsh_tests::recipes::{dockerfile_array, dockerfile_runs, recipe};
use agentsh_tests::rootfs::{SdkDaemon, BOOKWORM_CURL, BOOKWORM_MINBASE};
use agentsh_tests::sdk::{self, Spawn};
use agentsh_tests::server::{bin, TempDir};
use std::net::Ipv4Addr;

const TOKEN: &str = "recipe-token-in-podman-91d4";

/// The L7 policy the cookbook points to (GETs of `/repos/**` allowed, the
/// `gh` secret injected, everything else refused), for the upstream at `ip`.
fn l7_policy(ip: Ipv4Addr) -> String {
    format!(
        "name: l7\ndefault: allow\negress:\n  default: deny\n  dns: host\n  rules:\n    - name: api\n      cidrs: [{ip}/32]\n      decision: allow\n      http:\n        default: deny\n        rules:\n          - {{name: read, methods: [GET], paths: [\"/repos/**\"], decision: allow}}\n        inject:\n          headers: {{Authorization: \"Bearer ${{secret:gh}}\"}}\n"
    )
}

/// The start command of recipe `l7-start-on` as the runtime's argv: the
/// real shell, `-c`, the script between the quotes.
fn start_argv() -> Vec<String> {
    let line = recipe("l7-start-on");
    let line = line.trim();
    let script = line
        .strip_prefix("/bin/sh.real -c '")
        .and_then(|s| s.strip_suffix('\''))
        .unwrap_or_else(|| panic!("l7-start-on is not `/bin/sh.real -c '...'`: {line}"));
    assert!(!script.contains('\''), "a quote inside the script: {line}");
    vec!["/bin/sh.real".into(), "-c".into(), script.into()]
}

/// The image: the L7 image lines, the sessions recipe's workspace, then the
/// Modal recipe's lines (the shim installed, `shim_install=on` written).
fn image(tmp: &TempDir, up: &HttpUpstream) -> Image {
    let config = tmp.path().join("config.yaml");
    std::fs::write(
        &config,
        format!(
            "{}{}policy: l7\negress:\n  upstream_roots: [/etc/agentsh/upstream-ca.pem]\n",
            recipe("sessions-config"),
            recipe("l7-config"),
        ),
    )
    .unwrap();
    let policy = tmp.path().join("l7.yaml");
    std::fs::write(&policy, l7_policy(up.ip)).unwrap();
    let mut runs: Vec<String> = recipe("l7-image")
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(str::to_string)
        .collect();
    runs.extend(dockerfile_runs("sessions-image"));
    runs.extend(dockerfile_runs("modal-image"));
    Image::build_on(
        &BOOKWORM_CURL,
        "recipes",
        &runs,
        &[
            (config.as_path(), "/etc/agentsh/config.yaml"),
            (policy.as_path(), "/etc/agentsh/policies/l7.yaml"),
            (up.ca.as_path(), "/etc/agentsh/upstream-ca.pem"),
        ],
    )
}

/// The sessions and L7 recipes, in one container under `runtime`.
fn recipes_hold(runtime: Runtime, ip: Ipv4Addr) {
    let tmp = TempDir::new("recipes-podman");
    let up = HttpUpstream::start(&tmp.path().join("up"), ip, "api.recipe.test", true);
    let image = image(&tmp, &up);
    let argv = start_argv();
    let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
    let opts = Start {
        env: vec![("GH_TOKEN".into(), TOKEN.into())],
        host_network: true,
    };
    let ctr = Container::start_with(&image, runtime, &opts, &argv);
    let ready = ctr.exec(None, &["agentsh", "ready", "--timeout", "120"]);
    assert!(
        ready.status.success(),
        "{runtime:?}: agentsh ready: {}\nserver log:\n{}",
        text(&ready),
        ctr.logs()
    );

    // L7, from a root tree of the default session: the token injected,
    // a DELETE refused with the rule, the token's file unreadable.
    let url = format!("https://api.recipe.test:{}", up.port);
    let resolve = format!("--resolve api.recipe.test:{}:{ip}", up.port);
    let o = ctr.sh(
        None,
        &format!(
            "curl -sS {resolve} {url}/repos/a; echo; \
             curl -sS -X DELETE {resolve} -w ' %{{http_code}}' {url}/repos/a; echo; \
             cat /etc/agentsh/secrets/gh; echo cat=$?; \
             curl -sS {resolve} {url}/repos/echo/headers; echo"
        ),
    );
    let out = String::from_utf8_lossy(&o.stdout).to_string();
    let err = String::from_utf8_lossy(&o.stderr).to_string();
    let log = || ctr.logs();
    assert!(
        out.contains("\"saw_authorization\": true"),
        "{runtime:?}: {}\n{}",
        text(&o),
        log()
    );
    assert!(
        out.contains("denied (rule default, egress rule api)") && out.contains(" 403\n"),
        "{runtime:?}: {}",
        text(&o)
    );
    assert!(
        out.contains("cat=1"),
        "{runtime:?}: a root tree read the token's file: {}",
        text(&o)
    );
    assert!(!out.contains(TOKEN) && !err.contains(TOKEN), "{}", text(&o));
    // An upstream that echoes the request's headers hands back no token.
    assert!(
        out.contains(&format!("Bearer {}", "*".repeat(TOKEN.len()))),
        "{runtime:?}: the echo is not there, overwritten: {}",
        text(&o)
    );
    let reached = up.requests();
    assert!(
        reached
            .iter()
            .any(|r| r["path"] == "/repos/a" && r["authorization"] == format!("Bearer {TOKEN}")),
        "{runtime:?}: {reached:?}"
    );
    assert!(
        !reached.iter().any(|r| r["method"] == "DELETE"),
        "{reached:?}"
    );

    // One session per task, chosen per command as the SDKs set it, as root
    // and as an ordinary user: agent-strict refuses curl, `*_TOKEN` is gone,
    // the injected index URL set, its own workspace writable.
    for user in [None, Some(1000)] {
        let o = ctr.exec_env(
            user,
            &[
                ("AGENTSH_SESSION", "task-42"),
                ("DEPLOY_TOKEN", "sk-live-9"),
            ],
            &[
                "sh",
                "-c",
                "echo \"[$DEPLOY_TOKEN][$PIP_INDEX_URL][${AGENTSH_SESSION-}]\"; \
                 curl --version >/dev/null || echo \"curl refused $?\"",
            ],
        );
        let out = String::from_utf8_lossy(&o.stdout).to_string();
        assert!(
            out.contains("[][https://pypi.internal/simple][]") && out.contains("curl refused 126"),
            "{runtime:?} {user:?}: {}\n{}",
            text(&o),
            log()
        );
        // The default session (no variable) is the config's `policy: l7`:
        // curl runs there.
        let o = ctr.exec_env(
            user,
            &[("DEPLOY_TOKEN", "sk-live-9")],
            &[
                "sh",
                "-c",
                "echo \"[$DEPLOY_TOKEN]\"; curl --version >/dev/null && echo curl ran",
            ],
        );
        let out = String::from_utf8_lossy(&o.stdout).to_string();
        assert!(
            out.contains("[sk-live-9]") && out.contains("curl ran"),
            "{runtime:?} {user:?}: {}",
            text(&o)
        );
    }
    let o = ctr.exec_env(
        None,
        &[("AGENTSH_SESSION", "task-42")],
        &[
            "sh",
            "-c",
            "echo x > /workspace/task-42/mine && echo own; echo x > /etc/planted || echo refused",
        ],
    );
    assert_eq!(
        String::from_utf8_lossy(&o.stdout),
        "own\nrefused\n",
        "{runtime:?}: {}",
        text(&o)
    );
    let o = ctr.exec_env(
        None,
        &[("AGENTSH_SESSION", "task-99")],
        &["sh", "-c", "echo ran"],
    );
    assert_eq!(o.status.code(), Some(126), "{runtime:?}: {}", text(&o));
    assert!(!String::from_utf8_lossy(&o.stdout).contains("ran"));
}

#[test]
fn sessions_and_l7_recipes_hold_as_written_in_gvisor() {
    if !runtimes_here("sessions_and_l7_recipes_hold_as_written_in_gvisor") {
        return;
    }
    recipes_hold(Runtime::Runsc, Ipv4Addr::new(127, 0, 0, 5));
}

#[test]
fn sessions_and_l7_recipes_hold_as_written_in_runc() {
    if !runtimes_here("sessions_and_l7_recipes_hold_as_written_in_runc") {
        return;
    }
    recipes_hold(Runtime::Runc, Ipv4Addr::new(127, 0, 0, 6));
}

/// The entrypoint recipe `name` in real podman under runc: the image's
/// shim lines (`shim install --bash --programs sdk`, `shim_install=on`),
/// its `ENTRYPOINT` and `CMD` as written, the daemon stand-in at the
/// `CMD`'s path. Each command the daemon spawns (`style`) is supervised,
/// with the daemon as root and as an ordinary user (the `CMD` run by
/// `setpriv`): a nested `su` is refused with its reason, and the command's
/// shell is filtered by agentsh.
fn entrypoint_recipe_in_runc(name: &str, style: fn(&str) -> Spawn) {
    let entrypoint = dockerfile_array(name, "ENTRYPOINT");
    let cmd = dockerfile_array(name, "CMD");
    assert_eq!(cmd.len(), 1, "{name}: CMD is the SDK daemon: {cmd:?}");
    let json = |v: &[String]| serde_json::to_string(v).unwrap();
    let daemon = bin("sdk-supervisor");
    let image = Image::build_changed(
        &BOOKWORM_MINBASE,
        name,
        &dockerfile_runs("modal-image"),
        &[(daemon.as_path(), cmd[0].as_str())],
        &[
            format!("ENTRYPOINT {}", json(&entrypoint)),
            format!("CMD {}", json(&cmd)),
        ],
    );
    for user in [None, Some(1000u32)] {
        // An ordinary user's daemon: the image's CMD run by setpriv as that
        // user, below the same ENTRYPOINT.
        let cmd_as: Vec<String> = match user {
            Some(u) => [
                "/usr/bin/setpriv".to_string(),
                format!("--reuid={u}"),
                format!("--regid={u}"),
                "--clear-groups".into(),
                "--".into(),
                cmd[0].clone(),
            ]
            .to_vec(),
            None => Vec::new(),
        };
        let (run, ctr) = Container::attached(&image, Runtime::Runc, &cmd_as);
        // The daemon's `ready` line comes once the entrypoint has started
        // it, which is after the server is up.
        let mut d = SdkDaemon::start(run);
        let o = d.run(&style(
            "id -u; grep ^Seccomp: /proc/$$/status; su -c true root; echo su=$?",
        ));
        let want_uid = user.unwrap_or(0).to_string();
        assert!(
            o.stdout.starts_with(&format!("{want_uid}\n")) && o.stdout.contains("su=126"),
            "{name} {user:?}: {o:?}\n{}",
            ctr.logs()
        );
        assert!(
            o.stdout
                .lines()
                .any(|l| l.starts_with("Seccomp:") && !l.ends_with('0')),
            "{name} {user:?}: not filtered: {o:?}"
        );
        assert!(
            o.stderr
                .contains("agentsh: su denied (rule deny-privilege-escalation)"),
            "{name} {user:?}: the refusal is not explained: {o:?}"
        );
    }
}

#[test]
fn daytona_recipe_as_written_in_runc_supervises_its_daemons_shells() {
    if !runtimes_here("daytona_recipe_as_written_in_runc_supervises_its_daemons_shells") {
        return;
    }
    entrypoint_recipe_in_runc("daytona-entrypoint", sdk::daytona_stdin);
}

#[test]
fn tensorlake_recipe_as_written_in_runc_supervises_its_daemons_shells() {
    if !runtimes_here("tensorlake_recipe_as_written_in_runc_supervises_its_daemons_shells") {
        return;
    }
    entrypoint_recipe_in_runc("tensorlake-entrypoint", sdk::tensorlake);
}
