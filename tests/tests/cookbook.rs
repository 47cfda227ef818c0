//! The recipes of `docs/sdk-cookbook.md`, run as written: each test reads
//! its commands from the page (`agentsh_tests::recipes`) and runs them where
//! the package puts agentsh (default config, default socket), with an
//! SDK-style daemon that is not a child of the test.
//!
//! * E2B: envd runs the template's start command and then polls its ready
//!   command, both through `/bin/bash -l -c`; the ready command must succeed
//!   once the server supervises shells (it runs supervised then), and SDK
//!   commands are supervised.
//! * Tensorlake: the image's `ENTRYPOINT` with the daemon as `CMD`.
//! * Daytona: the same inside Docker's default container (emulated, see
//!   `tests/src/bin/agentsh-container.rs`), as root and as nobody.
//!
//! Modal's start command runs inside gVisor: `tests/tests/gvisor.rs`.

// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

use agentsh_tests::recipes::{agentsh_run_commands, dockerfile_array, one_line, recipe, Installed};
use agentsh_tests::sandbox::NOBODY;
use agentsh_tests::sdk::{self, Finished, Spawn, Supervisor};
use agentsh_tests::server::{bin, require_root};
use serde_json::Value;
use std::time::{Duration, Instant};

/// The shell commands an SDK sends, run as `uid` the way envd does for a
/// non-root user: it switches user, then execs the shell.
fn as_user(uid: Option<u32>, s: Spawn) -> Spawn {
    let Some(uid) = uid else { return s };
    let mut argv = vec![
        "/usr/bin/setpriv".to_string(),
        format!("--reuid={uid}"),
        format!("--regid={uid}"),
        "--clear-groups".into(),
        "--".into(),
    ];
    argv.extend(s.argv);
    Spawn { argv, ..s }
}

fn wait_for_event(env: &Installed, what: &str, pred: impl Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(e) = env.events().into_iter().find(|e| pred(e)) {
            return e;
        }
        assert!(
            Instant::now() < deadline,
            "no audit event: {what}: {:?}",
            env.events()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn denied_su(e: &Value) -> bool {
    e["decision"] == "deny" && e["filename"].as_str().unwrap_or("").ends_with("/su")
}

/// Stops what the start command started (the entrypoint forwards SIGTERM and
/// the server stops with its command), and waits until it is gone.
struct StopOnDrop(u32);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        // SAFETY: kill(2) with integers.
        unsafe { libc::kill(self.0 as i32, libc::SIGTERM) };
        let deadline = Instant::now() + Duration::from_secs(30);
        while std::path::Path::new(&format!("/proc/{}", self.0)).exists()
            && Instant::now() < deadline
        {
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

fn e2b_recipe(uid: Option<u32>) {
    let env = Installed::new();
    for argv in agentsh_run_commands("e2b-image") {
        env.run_ok(&argv);
    }
    env.ns.write_shim_conf(&recipe("e2b-shimconf"), 0o644);
    let mut envd = Supervisor::start(&env.ns, false);
    let start = envd.spawn(&Spawn::argv(&[
        "/bin/bash",
        "-l",
        "-c",
        &one_line("e2b-start"),
    ]));
    let _stop = StopOnDrop(start.pid);
    // envd polls the ready command until it exits 0.
    let ready_cmd = one_line("e2b-ready");
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let f = envd.run(&Spawn::argv(&["/bin/bash", "-l", "-c", &ready_cmd]));
        if f.code == Some(0) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the ready command never succeeded: {f:?}"
        );
    }
    // Once the server has run, the ready command runs supervised, and still
    // succeeds (it is allowed, and answers from inside the tree).
    let f = envd.run(&Spawn::argv(&["/bin/bash", "-l", "-c", &ready_cmd]));
    assert_eq!(
        f.code,
        Some(0),
        "the supervised ready command: {f:?}\n{:#?}",
        env.events()
            .iter()
            .filter(|e| e["filename"]
                .as_str()
                .is_some_and(|f| f.contains("agentsh")))
            .collect::<Vec<_>>()
    );
    wait_for_event(&env, "the supervised ready probe", |e| {
        e["rule"] == "allow-ready-probe" && e["decision"] == "allow"
    });
    // An SDK command: supervised, a nested su refused and audited.
    let r = envd.spawn(&as_user(uid, sdk::e2b("(su -c true root)")));
    let f: Finished = envd.wait(r, Duration::from_secs(60));
    assert_eq!(f.code, Some(126), "{f:?}");
    let e = wait_for_event(&env, "the nested su", denied_su);
    assert_eq!(e["depth"], 1, "{e}");
    let f = envd.run(&as_user(uid, sdk::e2b("id -u")));
    assert_eq!(f.code, Some(0), "{f:?}");
    assert_eq!(f.stdout.trim(), uid.unwrap_or(0).to_string());
}

#[test]
fn e2b_recipe_as_written_supervises_root_commands_after_its_ready_command() {
    if !require_root("e2b_recipe_as_written_supervises_root_commands_after_its_ready_command") {
        return;
    }
    e2b_recipe(None);
}

#[test]
fn e2b_recipe_as_written_supervises_user_commands_after_its_ready_command() {
    if !require_root("e2b_recipe_as_written_supervises_user_commands_after_its_ready_command") {
        return;
    }
    e2b_recipe(Some(NOBODY));
}

/// The image's `ENTRYPOINT` from recipe `name`, with the SDK-style daemon
/// (as `uid`) in place of the image's `CMD`, inside `container` (an
/// `agentsh-container` profile, or none).
fn entrypoint_recipe(
    name: &str,
    container: Option<&str>,
    uid: Option<u32>,
) -> (Installed, Supervisor) {
    let env = Installed::new();
    let shim_install = if name.starts_with("daytona") {
        vec!["agentsh", "shim", "install", "--bash"]
    } else {
        vec!["agentsh", "shim", "install"]
    };
    env.run_ok(
        &shim_install
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>(),
    );
    env.ns.write_shim_conf("shim_install=on\n", 0o644);
    let entrypoint = dockerfile_array(name, "ENTRYPOINT");
    let cmd = dockerfile_array(name, "CMD");
    assert_eq!(cmd.len(), 1, "{name}: CMD is the SDK daemon: {cmd:?}");
    let mut argv: Vec<String> = Vec::new();
    if let Some(profile) = container {
        argv.extend([
            bin("agentsh-container").display().to_string(),
            "--profile".into(),
            profile.into(),
            "--".into(),
        ]);
    }
    // The image's PATH finds `agentsh` in /usr/bin, where the package is.
    let program = if entrypoint[0].contains('/') {
        entrypoint[0].clone()
    } else {
        format!("/usr/bin/{}", entrypoint[0])
    };
    argv.push(program);
    argv.extend(entrypoint[1..].iter().cloned());
    if let Some(uid) = uid {
        argv.extend([
            "/usr/bin/setpriv".into(),
            format!("--reuid={uid}"),
            format!("--regid={uid}"),
            "--clear-groups".into(),
            "--".into(),
        ]);
    }
    argv.push(bin("sdk-supervisor").display().to_string());
    let mut c = env.ns.command(&argv[0]);
    c.args(&argv[1..]);
    let sup = Supervisor::start_command(c);
    (env, sup)
}

fn entrypoint_recipe_supervises(name: &str, container: Option<&str>, uid: Option<u32>) {
    let (env, mut sup) = entrypoint_recipe(name, container, uid);
    let f = sup.run(&sdk::tensorlake("true; su -c true root"));
    assert_eq!(f.code, Some(126), "{name} {container:?} {uid:?}: {f:?}");
    let e = wait_for_event(&env, "the nested su", denied_su);
    assert_eq!(e["depth"], 1, "{e}");
    let f = sup.run(&sdk::tensorlake("id -u; echo done"));
    assert_eq!(f.code, Some(0), "{f:?}");
    assert!(f.stdout.starts_with(&uid.unwrap_or(0).to_string()), "{f:?}");
}

#[test]
fn tensorlake_recipe_entrypoint_supervises_sh_lc() {
    if !require_root("tensorlake_recipe_entrypoint_supervises_sh_lc") {
        return;
    }
    entrypoint_recipe_supervises("tensorlake-entrypoint", None, None);
}

#[test]
fn daytona_recipe_in_dockers_default_container_supervises_root_shells() {
    if !require_root("daytona_recipe_in_dockers_default_container_supervises_root_shells") {
        return;
    }
    entrypoint_recipe_supervises("daytona-entrypoint", Some("docker-default"), None);
}

#[test]
fn daytona_recipe_in_dockers_default_container_supervises_user_shells() {
    if !require_root("daytona_recipe_in_dockers_default_container_supervises_user_shells") {
        return;
    }
    entrypoint_recipe_supervises("daytona-entrypoint", Some("docker-default"), Some(NOBODY));
}

/// docs/sdk-cookbook.md's egress-at-layer-7 recipe, as written (issue 42):
/// the image's steps make agentsh's CA and add it to the system store, the
/// config names the token's file, the start script writes the token. Then
/// a supervised `curl` that trusts only the system store reaches a TLS
/// upstream through agentsh's proxy, the token added by the server and
/// never in the tree's output; a DELETE gets a 403, never sent.
#[test]
fn l7_recipe_trusts_agentshs_ca_and_holds_the_token() {
    if !require_root("l7_recipe_trusts_agentshs_ca_and_holds_the_token") {
        return;
    }
    const TOKEN: &str = "recipe-token-7c0b-server-only";
    let ip = std::net::Ipv4Addr::new(127, 0, 0, 3);
    let (env, work, up) = l7_installed("recipe", ip);
    let path = ("PATH", "/usr/sbin:/usr/bin:/sbin:/bin");
    for line in recipe("l7-token").lines().filter(|l| !l.trim().is_empty()) {
        let o = env
            .ns
            .run(&["sh", "-c", line], &[path, ("GH_TOKEN", TOKEN)]);
        assert!(o.status.success(), "{line}: {o:?}");
    }
    env.run_ok(&["agentsh".into(), "shim".into(), "install".into()]);
    env.ns.write_shim_conf("shim_install=on\n", 0o644);
    let mut server = env
        .ns
        .command("/usr/bin/agentsh")
        .args(["server", "--config", "/etc/agentsh/config.yaml"])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let ready = env
        .ns
        .run(&["/usr/bin/agentsh", "ready", "--timeout", "60"], &[path]);
    let url = format!("https://api.recipe.test:{}", up.port);
    let script = format!(
        "curl -sS --resolve api.recipe.test:{p}:{ip} {url}/repos/a; echo; curl -sS -X DELETE --resolve api.recipe.test:{p}:{ip} -w ' %{{http_code}}' {url}/repos/a",
        p = up.port
    );
    let o = env.ns.run(&["sh", "-c", &script], &[path]);
    let _ = server.kill();
    let _ = server.wait();
    assert!(ready.status.success(), "agentsh ready: {ready:?}");
    let out = String::from_utf8_lossy(&o.stdout).to_string();
    let err = String::from_utf8_lossy(&o.stderr).to_string();
    assert!(out.contains("\"saw_authorization\": true"), "{out}{err}");
    assert!(
        out.contains("denied (rule default, egress rule api)") && out.ends_with(" 403"),
        "{out}{err}"
    );
    assert!(!out.contains(TOKEN) && !err.contains(TOKEN), "{out}{err}");
    let reached = up.requests();
    assert!(
        reached
            .iter()
            .any(|r| r["path"] == "/repos/a" && r["authorization"] == format!("Bearer {TOKEN}")),
        "{reached:?}"
    );
    assert!(
        !reached.iter().any(|r| r["method"] == "DELETE"),
        "{reached:?}"
    );
    let e = wait_for_event(&env, "the supervised GET", |e| {
        e["type"] == "http" && e["method"] == "GET" && e["status"] == 200
    });
    assert_eq!(e["rule"], "read", "{e}");
    let _ = std::fs::remove_dir_all(&work);
}

/// agentsh installed, the cookbook's `l7-image` lines run as written, and
/// [`l7_upstream_policy_and_config`]'s upstream, policy and config.
fn l7_installed(
    tag: &str,
    ip: std::net::Ipv4Addr,
) -> (
    Installed,
    std::path::PathBuf,
    agentsh_tests::http_upstream::HttpUpstream,
) {
    let env = Installed::new();
    for line in recipe("l7-image").lines().filter(|l| !l.trim().is_empty()) {
        env.run_ok(&["sh".into(), "-c".into(), line.to_string()]);
    }
    let (work, up) = l7_upstream_policy_and_config(&env, tag, ip);
    (env, work, up)
}

/// The L7 tests' shared set-up: a TLS upstream for `api.recipe.test` at
/// `ip` (its files in a fresh directory named by `tag`), a policy `l7`
/// allowing GETs of `/repos/**` there with the `gh` secret injected, and
/// `/etc/agentsh/config.yaml` made of the cookbook's `l7-config` recipe
/// naming that policy and the upstream's CA.
fn l7_upstream_policy_and_config(
    env: &Installed,
    tag: &str,
    ip: std::net::Ipv4Addr,
) -> (
    std::path::PathBuf,
    agentsh_tests::http_upstream::HttpUpstream,
) {
    let work = std::env::temp_dir().join(format!("agentsh-l7-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&work);
    let up = agentsh_tests::http_upstream::HttpUpstream::start(&work, ip, "api.recipe.test", true);
    std::fs::write(
        env.ns.path("/etc/agentsh/policies/l7.yaml"),
        format!(
            "name: l7\ndefault: allow\negress:\n  default: deny\n  dns: host\n  rules:\n    - name: api\n      cidrs: [{ip}/32]\n      decision: allow\n      http:\n        default: deny\n        rules:\n          - {{name: read, methods: [GET], paths: [\"/repos/**\"], decision: allow}}\n        inject:\n          headers: {{Authorization: \"Bearer ${{secret:gh}}\"}}\n"
        ),
    )
    .unwrap();
    std::fs::write(
        env.ns.path("/etc/agentsh/config.yaml"),
        format!(
            "{}policy: l7\negress:\n  upstream_roots: [\"{}\"]\n",
            recipe("l7-config"),
            up.ca.display()
        ),
    )
    .unwrap();
    (work, up)
}

/// Issue 62: a start command that leaves `--config` out (the cookbook's
/// `agentsh entrypoint -- ...`, a bare `agentsh server`) runs on the
/// image's `/etc/agentsh/config.yaml`, not silently on the embedded
/// defaults: a policy named only there is the one in force, `ready` finds
/// the server at the socket only that file names, and the server's log
/// says which config it read. A file in `/etc/agentsh/secrets` that no
/// config names is still hidden from a root tree.
#[test]
fn a_server_started_without_config_reads_the_images_config() {
    if !require_root("a_server_started_without_config_reads_the_images_config") {
        return;
    }
    let env = Installed::new();
    let path = ("PATH", "/usr/sbin:/usr/bin:/sbin:/bin");
    std::fs::write(
        env.ns.path("/etc/agentsh/policies/image-only.yaml"),
        "name: image-only\ndefault: allow\ncommand_rules:\n  - name: no-date-here\n    commands: [date]\n    decision: deny\n    message: the image's own policy\n",
    )
    .unwrap();
    // A socket only this file names: `ready` without --config must read it.
    std::fs::write(
        env.ns.path("/etc/agentsh/config.yaml"),
        "policy: image-only\nserver:\n  socket: /run/agentsh-image/api.sock\n",
    )
    .unwrap();
    // A secret in the place the docs give, named by no config: hidden all
    // the same.
    std::fs::create_dir_all(env.ns.path("/etc/agentsh/secrets")).unwrap();
    std::fs::write(
        env.ns.path("/etc/agentsh/secrets/unnamed"),
        "unnamed-secret-3f1\n",
    )
    .unwrap();
    env.run_ok(&["agentsh".into(), "shim".into(), "install".into()]);
    env.ns.write_shim_conf(
        "server=unix:/run/agentsh-image/api.sock\nshim_install=on\n",
        0o644,
    );
    let log = std::env::temp_dir().join(format!("agentsh-image-config-{}.log", std::process::id()));
    let mut server = env
        .ns
        .command("/usr/bin/agentsh")
        .arg("server")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let ready = env
        .ns
        .run(&["/usr/bin/agentsh", "ready", "--timeout", "60"], &[path]);
    let o = env.ns.run(&["sh", "-c", "date; echo after $?"], &[path]);
    let secret = env.ns.run(
        &["sh", "-c", "cat /etc/agentsh/secrets/unnamed; echo cat=$?"],
        &[path],
    );
    let _ = server.kill();
    let _ = server.wait();
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    let _ = std::fs::remove_file(&log);
    assert!(
        ready.status.success(),
        "agentsh ready (no --config): {ready:?}\n{text}"
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("no-date-here") || err.contains("the image's own policy"),
        "date ran or was refused by another rule: {o:?}"
    );
    assert!(
        String::from_utf8_lossy(&o.stdout).contains("after 126"),
        "{o:?}"
    );
    let read = String::from_utf8_lossy(&secret.stdout);
    assert!(
        read.contains("cat=1") && !read.contains("unnamed-secret"),
        "a root tree read a file in /etc/agentsh/secrets no config names: {secret:?}"
    );
    assert!(
        text.contains("config read") && text.contains("/etc/agentsh/config.yaml"),
        "the server's log names the config it read:\n{text}"
    );
}

/// Issue 62: the L7 recipe where the cookbook places it on a
/// `shim_install=on` image (Modal, Daytona, Tensorlake, Runloop): the image
/// lines before shim.conf is written, the token written by the start
/// command the cookbook gives (the real shell, then `agentsh entrypoint`
/// with no `--config`). The token is injected, a DELETE is a 403 naming
/// the rule, and a root tree cannot read the token's file.
#[test]
fn l7_recipe_on_a_shim_install_on_image_keeps_the_token_from_a_root_tree() {
    if !require_root("l7_recipe_on_a_shim_install_on_image_keeps_the_token_from_a_root_tree") {
        return;
    }
    const TOKEN: &str = "recipe-token-on-image-5e21";
    let ip = std::net::Ipv4Addr::new(127, 0, 0, 4);
    let (env, work, up) = l7_installed("on", ip);
    let path = ("PATH", "/usr/sbin:/usr/bin:/sbin:/bin");
    env.run_ok(&["agentsh".into(), "shim".into(), "install".into()]);
    env.ns.write_shim_conf("shim_install=on\n", 0o644);
    // The image is `on`: with no server, /bin/sh refuses.
    let before = env.ns.run(&["sh", "-c", "true"], &[path]);
    assert_eq!(before.status.code(), Some(126), "{before:?}");
    // The start command as the cookbook writes it, run the way a runtime
    // runs an argv: split by a shell that is not the shim, which then
    // execs it (the same process, as a runtime's exec of the argv).
    let start = format!("exec {}", recipe("l7-start-on").trim());
    let mut entry = env
        .ns
        .command("/bin/sh.real")
        .args(["-c", &start])
        .env("PATH", path.1)
        .env("GH_TOKEN", TOKEN)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let ready = env
        .ns
        .run(&["/usr/bin/agentsh", "ready", "--timeout", "60"], &[path]);
    let url = format!("https://api.recipe.test:{}", up.port);
    let script = format!(
        "curl -sS --resolve api.recipe.test:{p}:{ip} {url}/repos/a; echo; \
         curl -sS -X DELETE --resolve api.recipe.test:{p}:{ip} -w ' %{{http_code}}' {url}/repos/a; echo; \
         cat /etc/agentsh/secrets/gh; echo cat=$?; \
         curl -sS --resolve api.recipe.test:{p}:{ip} {url}/repos/echo/headers; echo",
        p = up.port
    );
    let o = env.ns.run(&["sh", "-c", &script], &[path]);
    let environ = std::fs::read(format!("/proc/{}/environ", entry.id())).unwrap_or_default();
    // SAFETY: a signal to the entrypoint we started (it stops its command
    // and the server).
    unsafe { libc::kill(entry.id() as i32, libc::SIGTERM) };
    let _ = entry.wait();
    assert!(ready.status.success(), "agentsh ready: {ready:?}");
    let out = String::from_utf8_lossy(&o.stdout).to_string();
    let err = String::from_utf8_lossy(&o.stderr).to_string();
    assert!(out.contains("\"saw_authorization\": true"), "{out}{err}");
    assert!(
        out.contains("denied (rule default, egress rule api)") && out.contains(" 403\n"),
        "{out}{err}"
    );
    assert!(
        out.contains("cat=1"),
        "a root tree read the token's file: {out}{err}"
    );
    assert!(!out.contains(TOKEN) && !err.contains(TOKEN), "{out}{err}");
    // Issue 61: an upstream echoing the request's headers (httpbin's
    // /headers) hands the tree no token: the proxy overwrote it.
    assert!(
        out.contains(&format!("Bearer {}", "*".repeat(TOKEN.len()))),
        "the echo is not there, overwritten: {out}{err}"
    );
    let e = wait_for_event(&env, "the overwritten echo", |e| {
        e["type"] == "http" && e["rule"] == "http_secret" && e["decision"] == "allow"
    });
    assert!(e["path"] == "/repos/echo/headers", "{e}");
    assert!(
        !String::from_utf8_lossy(&environ).contains(TOKEN),
        "the token stayed in the entrypoint's environment"
    );
    let reached = up.requests();
    assert!(
        reached
            .iter()
            .any(|r| r["path"] == "/repos/a" && r["authorization"] == format!("Bearer {TOKEN}")),
        "{reached:?}"
    );
    assert!(
        !reached.iter().any(|r| r["method"] == "DELETE"),
        "{reached:?}"
    );
    let _ = std::fs::remove_dir_all(&work);
}

/// Issue 61: a secret named `{env: VAR}` is taken out of every
/// environment agentsh's processes show: the entrypoint's (PID 1's in a
/// container, readable to a root tree), the server's and the command's
/// keep nothing of it, while the proxy still adds it to an allowed request.
#[test]
fn an_env_secret_leaves_no_trace_in_any_environment() {
    if !require_root("an_env_secret_leaves_no_trace_in_any_environment") {
        return;
    }
    const TOKEN: &str = "env-secret-token-61-b7e2";
    let ip = std::net::Ipv4Addr::new(127, 0, 0, 7);
    let (env, work, up) = l7_installed("env", ip);
    let path = ("PATH", "/usr/sbin:/usr/bin:/sbin:/bin");
    // The same config with the secret read from the environment.
    let cfg = env.ns.path("/etc/agentsh/config.yaml");
    let text = std::fs::read_to_string(&cfg).unwrap();
    let text = text.replace("gh: {file: /etc/agentsh/secrets/gh}", "gh: {env: GH_TOKEN}");
    assert!(text.contains("{env: GH_TOKEN}"), "{text}");
    std::fs::write(&cfg, text).unwrap();
    env.run_ok(&["agentsh".into(), "shim".into(), "install".into()]);
    env.ns.write_shim_conf("shim_install=on\n", 0o644);
    let mut entry = env
        .ns
        .command("/usr/bin/agentsh")
        .args(["entrypoint", "--", "sleep", "infinity"])
        .env("PATH", path.1)
        .env("GH_TOKEN", TOKEN)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let ready = env
        .ns
        .run(&["/usr/bin/agentsh", "ready", "--timeout", "60"], &[path]);
    let url = format!("https://api.recipe.test:{}", up.port);
    let o = env.ns.run(
        &[
            "sh",
            "-c",
            &format!(
                "curl -sS --resolve api.recipe.test:{p}:{ip} {url}/repos/a; echo",
                p = up.port
            ),
        ],
        &[path],
    );
    // Every process below the entrypoint, and the entrypoint itself, once
    // its command runs too (waited for, not timed).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let pids = loop {
        let pids = descendants(entry.id());
        let sleeping = pids.iter().any(|p| {
            std::fs::read_to_string(format!("/proc/{p}/comm")).is_ok_and(|c| c.trim() == "sleep")
        });
        if sleeping || std::time::Instant::now() > deadline {
            break pids;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    };
    let leaked: Vec<u32> = pids
        .iter()
        .copied()
        .filter(|p| {
            let e = std::fs::read(format!("/proc/{p}/environ")).unwrap_or_default();
            String::from_utf8_lossy(&e).contains(TOKEN)
        })
        .collect();
    // SAFETY: a signal to the entrypoint we started.
    unsafe { libc::kill(entry.id() as i32, libc::SIGTERM) };
    let _ = entry.wait();
    let reached = up.requests();
    let _ = std::fs::remove_dir_all(&work);
    assert!(ready.status.success(), "agentsh ready: {ready:?}");
    assert!(
        pids.len() >= 3,
        "the entrypoint, its server, its command: {pids:?}"
    );
    assert!(
        leaked.is_empty(),
        "the token in the environ of {leaked:?} (of {pids:?})"
    );
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.contains("\"saw_authorization\": true"),
        "the proxy no longer adds the env secret: {o:?}"
    );
    assert!(
        reached
            .iter()
            .any(|r| r["authorization"] == format!("Bearer {TOKEN}")),
        "{reached:?}"
    );
}

/// `root` and every process below it (a child is listed under the thread
/// that made it).
fn descendants(root: u32) -> Vec<u32> {
    let mut pids = vec![root];
    let mut i = 0;
    while i < pids.len() {
        let tasks = std::fs::read_dir(format!("/proc/{}/task", pids[i]))
            .map(|d| d.filter_map(Result::ok).collect::<Vec<_>>())
            .unwrap_or_default();
        for t in tasks {
            let kids = std::fs::read_to_string(t.path().join("children")).unwrap_or_default();
            pids.extend(
                kids.split_whitespace()
                    .filter_map(|p| p.parse::<u32>().ok()),
            );
        }
        i += 1;
    }
    pids
}
