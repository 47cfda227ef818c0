//! The demo behind `./tests/demo.sh`: a short agent session in a sandbox the
//! way an SDK runs one, on agentsh's embedded defaults, without touching this
//! machine's `/bin/sh`.
//!
//! 1. a private mount namespace with writable overlays over /usr and /etc
//!    (the host's files never change), a workspace on a tmpfs at /srv/ws;
//! 2. `agentsh server` inside it on the embedded defaults (config and the
//!    `agent-default` policy; only the state, audit and workspace paths are
//!    set, so nothing is written to the host's /var);
//! 3. `agentsh shim install --bash` inside it: /bin/sh and /bin/bash become
//!    the shim, shim.conf says `shim_install=on`;
//! 4. an SDK-style daemon (not a child of the server) spawns the agent's
//!    commands the way E2B's envd does: `/bin/sh -c '... exec "$@"' -- /bin/bash -l -c CMD`;
//! 5. the audit trail, as `agentsh events --format table` prints it.
//!
//! The demo checks its own claims: it exits 1 if an allowed step failed or
//! a denied step was not denied (and audited).

use agentsh_tests::ns::{host_sh_fingerprint, Namespace};
use agentsh_tests::sdk::{e2b, Finished, Supervisor};
use agentsh_tests::server::{bin, server_base, TestServer};
use serde_json::Value;
use std::process::{Command, ExitCode};
use std::time::Duration;

const WORKSPACE: &str = "/srv/ws";

struct Step {
    title: &'static str,
    cmd: &'static str,
    /// What must be true of the result.
    check: fn(&Finished, &[Value]) -> Result<(), String>,
}

fn has_exec(events: &[Value], base: &str, action: &str, rule: Option<&str>) -> bool {
    events.iter().any(|e| {
        e["type"] == "execve"
            && e["filename"]
                .as_str()
                .is_some_and(|f| f.rsplit('/').next() == Some(base))
            && e["effective_action"] == action
            && rule.is_none_or(|r| e["rule"] == r)
    })
}

fn steps() -> Vec<Step> {
    vec![
        Step {
            title: "ordinary work runs (allowed)",
            cmd: "cd /srv/ws && echo \"hello from $(ps -o comm= -p $$) (pid $$)\" && git init -q demo && echo 'git init: ok' && ls",
            check: |f, ev| {
                if f.code != Some(0) || !f.stdout.contains("git init: ok") {
                    return Err("the ordinary commands did not all succeed".into());
                }
                if !has_exec(ev, "git", "allow", Some("ordinary-locations")) {
                    return Err("no audited, allowed exec of git".into());
                }
                Ok(())
            },
        },
        Step {
            title: "a program that shells out to curl for cloud credentials (denied by where it goes, not by its name)",
            cmd: "cd /srv/ws && printf '#!/bin/sh\\ncurl -sS --max-time 5 http://169.254.169.254/latest/meta-data/\\n' > fetch.sh && chmod +x fetch.sh && ./fetch.sh; echo \"fetch.sh exited $?\"",
            check: |f, ev| {
                if f.stdout.contains("fetch.sh exited 0") || !f.stdout.contains("fetch.sh exited") {
                    return Err("curl reached the metadata address".into());
                }
                if !f.stderr.contains(
                    "agentsh: connect to 169.254.169.254 port 80/tcp denied (rule no-cloud-metadata)",
                ) {
                    return Err("the refusal was not explained on curl's stderr".into());
                }
                let audited = ev.iter().any(|e| {
                    e["type"] == "connect"
                        && e["ip"] == "169.254.169.254"
                        && e["decision"] == "deny"
                        && e["rule"] == "no-cloud-metadata"
                });
                if !audited {
                    return Err("no audited refusal of the connect by no-cloud-metadata".into());
                }
                Ok(())
            },
        },
        Step {
            title: "privilege escalation (denied)",
            cmd: "su -c id root; echo \"su exited $?\"",
            check: |f, ev| {
                if !f.stdout.contains("su exited 126") {
                    return Err("su was not refused with 126".into());
                }
                if !has_exec(ev, "su", "deny", Some("deny-privilege-escalation")) {
                    return Err("no audited denial of su".into());
                }
                Ok(())
            },
        },
        Step {
            title: "a write outside the workspace (denied by Landlock, in the kernel)",
            cmd: "echo '10.0.0.1 pypi.org' >> /etc/hosts; echo \"the write exited $?\"",
            check: |f, _| {
                if !f.stdout.contains("the write exited 1") || !f.stderr.contains("Permission denied") {
                    return Err("the write to /etc/hosts was not refused".into());
                }
                Ok(())
            },
        },
        Step {
            title: "a write inside the workspace (allowed)",
            cmd: "echo 'the agent was here' > /srv/ws/notes.txt && cat /srv/ws/notes.txt",
            check: |f, _| {
                if f.code != Some(0) || !f.stdout.contains("the agent was here") {
                    return Err("the workspace write failed".into());
                }
                Ok(())
            },
        },
    ]
}

fn indent(text: &str) -> String {
    text.lines()
        .map(|l| format!("    | {l}\n"))
        .collect::<String>()
}

/// The demonstration, in the order it is narrated.
///
/// Long because it is a script: each step prints what it shows.
fn run() -> Result<(), String> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Err(
            "the demo needs root (a private mount namespace and seccomp listeners): \
                    run it with sudo"
                .into(),
        );
    }
    let host_sh = host_sh_fingerprint();
    println!("== a sandbox: private mount namespace, shim as /bin/sh and /bin/bash, workspace {WORKSPACE}");
    let ns = Namespace::new();
    // A checkout under /srv keeps its binaries reachable (see mount_scratch).
    ns.mount_scratch("/srv", WORKSPACE);
    std::fs::create_dir_all(ns.path(WORKSPACE)).map_err(|e| format!("workspace: {e}"))?;
    let srv = TestServer::start_on_default_policy(
        &server_base(),
        &format!("workspace: {WORKSPACE}\n"),
        |program| ns.command(program),
    );
    println!(
        "   agentsh server: {} (embedded config, policy agent-default)",
        srv.url
    );
    let installed = ns.install_shim(true);
    for line in installed.lines().filter(|l| !l.trim().is_empty()).take(8) {
        println!("   shim install: {line}");
    }
    ns.configure(&srv.url, "on");
    let mut sup = Supervisor::start(&ns, false);
    println!(
        "   SDK-style daemon: pid {} (not a child of the server), spawning commands as E2B's envd does",
        sup.pid
    );

    let mut failures = Vec::new();
    for (i, step) in steps().iter().enumerate() {
        println!("\n== {}. {}", i + 1, step.title);
        println!("   $ {}", step.cmd);
        // E2B runs commands as a user whose home is their own; here the
        // workspace (this machine's root profile would fill the trail).
        let r = sup.spawn(&e2b(step.cmd).env("HOME", WORKSPACE));
        let f = sup.wait(r, Duration::from_secs(30));
        print!("{}", indent(&f.stdout));
        if !f.stderr.is_empty() {
            print!("{}", indent(&format!("(stderr) {}", f.stderr.trim_end())));
        }
        let events = srv.events("default");
        match (step.check)(&f, &events) {
            Ok(()) => println!("   -> as expected"),
            Err(e) => {
                println!("   -> NOT AS EXPECTED: {e}");
                failures.push(format!("step {}: {e}", i + 1));
            }
        }
    }

    println!(
        "\n== the audit trail: agentsh events --server {} --format table",
        srv.url
    );
    let table = Command::new(bin("agentsh"))
        .args(["events", "--server", &srv.url, "--format", "table"])
        .output()
        .map_err(|e| format!("agentsh events: {e}"))?;
    print!("{}", String::from_utf8_lossy(&table.stdout));
    println!(
        "   (the write of step 4 has no exec event: the kernel refused it; each wrap_init event\n    \
         records the Landlock ruleset its tree got: agentsh events --format json)"
    );
    if !table.status.success() {
        failures.push(format!(
            "agentsh events failed: {}",
            String::from_utf8_lossy(&table.stderr)
        ));
    }
    drop(sup);
    drop(srv);
    drop(ns);
    if host_sh_fingerprint() != host_sh {
        failures.push("the host's /bin/sh changed".into());
    } else {
        println!("\n== this machine's /bin/sh and /bin/bash were not touched");
    }
    if failures.is_empty() {
        Ok(())
    } else {
        Err(failures.join("; "))
    }
}

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("agentsh-demo: {e}");
            ExitCode::FAILURE
        }
    }
}
