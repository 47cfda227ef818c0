//! The cookbook's recipes in real container runtimes: podman with gVisor's
//! `runsc` (Modal's runtime: no seccomp user-notify, no Landlock, Yama's
//! `ptrace_scope` 1 emulated), with runc and podman's default capabilities
//! and seccomp profile, and privileged. The image is made from the
//! cookbook's image recipe as written, the container started with its start
//! recipe as written, and every command sent as the SDK sends it: `podman
//! exec CTR sh -c ...`, a sibling of the server, never its descendant. None
//! of these containers has `CAP_SYS_PTRACE` but the privileged one.

// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

use agentsh_tests::attackers::compile;
use agentsh_tests::podman::{runtimes_here, text, Container, Image, Runtime};
use agentsh_tests::recipes::{dockerfile_runs, one_line};
use agentsh_tests::rootfs::BOOKWORM_PROGRAMS;
use agentsh_tests::server::TempDir;
use serde_json::Value;

/// The user an ordinary SDK command runs as, besides root.
const USER: u32 = 1000;

/// The Modal recipe (image and start command as written) under `runtime`.
fn modal(runtime: Runtime) -> (Image, Container) {
    modal_with(runtime, &[])
}

/// [`modal`], with `extra` files in the image (host path, image path).
fn modal_with(runtime: Runtime, extra: &[(&std::path::Path, &str)]) -> (Image, Container) {
    let image = Image::build_with("modal", &dockerfile_runs("modal-image"), extra);
    let ctr = start_modal(&image, runtime);
    (image, ctr)
}

/// The Modal recipe's start command as written, from `image`, under
/// `runtime`; returns once `agentsh ready` says shells are supervised.
fn start_modal(image: &Image, runtime: Runtime) -> Container {
    let start = one_line("modal-start");
    let argv: Vec<&str> = start.split_whitespace().collect();
    let ctr = Container::start(image, runtime, &argv);
    // `agentsh ready`, run the way SDKs run commands, waits for the server
    // and then checks that a shell started so is supervised.
    let ready = ctr.exec(None, &["agentsh", "ready", "--timeout", "120"]);
    assert!(
        ready.status.success(),
        "agentsh ready: {}\nserver log:\n{}",
        text(&ready),
        ctr.logs()
    );
    ctr
}

/// What every recipe must give each SDK command, as root and as `user`:
/// the shell supervised (traced or filtered by agentsh), and a nested
/// program the policy denies refused with its reason on stderr (126).
fn sdk_commands_are_supervised(ctr: &Container) {
    for user in [None, Some(USER)] {
        let o = ctr.sh(
            user,
            "grep -E '^(TracerPid|Seccomp):' /proc/$$/status; id -u",
        );
        let out = String::from_utf8_lossy(&o.stdout).into_owned();
        assert!(o.status.success(), "{user:?}: {}", text(&o));
        assert!(
            out.contains(&user.unwrap_or(0).to_string()),
            "{user:?} ran as another user: {out}"
        );
        let traced = out
            .lines()
            .find_map(|l| l.strip_prefix("TracerPid:"))
            .is_some_and(|v| v.trim() != "0");
        let filtered = out
            .lines()
            .any(|l| l.starts_with("Seccomp:") && !l.contains('0'));
        assert!(traced || filtered, "{user:?}: not supervised: {out}");

        let o = ctr.sh(user, "sh -c 'su -c id root'");
        let err = String::from_utf8_lossy(&o.stderr).into_owned();
        assert_eq!(o.status.code(), Some(126), "{user:?}: {}", text(&o));
        assert!(
            err.contains("agentsh: su denied (rule deny-privilege-escalation)"),
            "{user:?}: the refusal is not explained: {err}"
        );
    }
}

#[test]
fn modal_recipe_in_gvisor_supervises_sibling_shells_without_cap_sys_ptrace() {
    if !runtimes_here("modal_recipe_in_gvisor_supervises_sibling_shells_without_cap_sys_ptrace") {
        return;
    }
    let (_image, ctr) = modal(Runtime::Runsc);
    let log = ctr.logs();
    assert!(
        log.contains("backend=ptrace") && log.contains("gvisor=true"),
        "not gVisor's ptrace backend:\n{log}"
    );
    let caps = ctr.exec(None, &["grep", "CapEff", "/proc/self/status"]);
    let eff = String::from_utf8_lossy(&caps.stdout);
    let mask = u64::from_str_radix(eff.split_whitespace().last().unwrap_or("0"), 16).unwrap();
    assert_eq!(
        mask & (1 << 19),
        0,
        "the container has CAP_SYS_PTRACE: {eff}"
    );
    sdk_commands_are_supervised(&ctr);
    the_sandbox_stays_up(&ctr);
}

#[test]
fn modal_recipe_in_runc_with_podmans_default_profile_supervises_sibling_shells() {
    if !runtimes_here("modal_recipe_in_runc_with_podmans_default_profile_supervises_sibling_shells")
    {
        return;
    }
    let (_image, ctr) = modal(Runtime::Runc);
    sdk_commands_are_supervised(&ctr);
    the_sandbox_stays_up(&ctr);
}

#[test]
fn modal_recipe_privileged_supervises_sibling_shells() {
    if !runtimes_here("modal_recipe_privileged_supervises_sibling_shells") {
        return;
    }
    let (_image, ctr) = modal(Runtime::Privileged);
    sdk_commands_are_supervised(&ctr);
}

/// Run by `python3 -c` as Modal's `sb.exec("python3", "-c", ...)` runs it:
/// how it is supervised, whether a credential reached it, a denied program
/// run without a shell, a denied destination; then exit 7.
const PYTHON_PROBE: &str = r#"
import os, socket, subprocess, sys
for l in open("/proc/self/status"):
    if l.startswith(("TracerPid:", "Seccomp:")):
        print(l.strip())
print("token=" + os.environ.get("GITHUB_TOKEN", "<removed>"))
try:
    subprocess.run(["su", "-c", "id", "root"])
    print("su=ran")
except PermissionError:
    print("su=refused")
s = socket.socket()
s.settimeout(10)
try:
    s.connect(("169.254.169.254", 80))
    print("metadata=connected")
except OSError as e:
    print("metadata=%s" % e.errno)
sys.exit(7)
"#;

/// The same from `node -e`, then exit 5.
const NODE_PROBE: &str = r#"
const fs = require("fs"), cp = require("child_process");
for (const l of fs.readFileSync("/proc/self/status", "utf8").split("\n"))
  if (l.startsWith("TracerPid:") || l.startsWith("Seccomp:")) console.log(l.trim());
console.log("token=" + (process.env.GITHUB_TOKEN ?? "<removed>"));
const r = cp.spawnSync("su", ["-c", "id", "root"]);
console.log("su=" + (r.error ? r.error.code : "ran"));
process.exit(5);
"#;

/// Traced or filtered, from a probe's `TracerPid:`/`Seccomp:` lines.
fn supervised(out: &str) -> bool {
    let traced = out
        .lines()
        .find_map(|l| l.strip_prefix("TracerPid:"))
        .is_some_and(|v| v.trim() != "0");
    let filtered = out
        .lines()
        .any(|l| l.starts_with("Seccomp:") && !l.contains('0'));
    traced || filtered
}

/// `podman exec CTR python3 -c ...` and `... node -e ...`, no shell, as
/// root and as an ordinary user: supervised, the credential removed, the
/// denied program and destination refused with their reasons, the
/// program's own exit status.
fn programs_are_supervised_without_a_shell(ctr: &Container) {
    let token = [("GITHUB_TOKEN", "ghp_not_for_the_tree")];
    for user in [None, Some(USER)] {
        let o = ctr.exec_env(user, &token, &["python3", "-c", PYTHON_PROBE]);
        let (out, err) = (
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr),
        );
        assert_eq!(
            o.status.code(),
            Some(7),
            "{user:?}: {}\n{}",
            text(&o),
            ctr.logs()
        );
        assert!(supervised(&out), "{user:?}: python3 not supervised: {out}");
        assert!(out.contains("token=<removed>"), "{user:?}: {out}");
        assert!(out.contains("su=refused"), "{user:?}: {out}");
        assert!(
            err.contains("agentsh: su denied (rule deny-privilege-escalation)"),
            "{user:?}: the refusal is not explained: {err}"
        );
        let refused = out
            .lines()
            .find_map(|l| l.strip_prefix("metadata="))
            .unwrap_or("");
        assert!(
            refused.parse::<i32>().is_ok(),
            "{user:?}: metadata reached: {out}"
        );
        assert!(
            err.contains("169.254.169.254") && err.contains("no-cloud-metadata"),
            "{user:?}: the connect refusal is not explained: {err}"
        );
        let o = ctr.exec_env(user, &token, &["node", "-e", NODE_PROBE]);
        let out = String::from_utf8_lossy(&o.stdout);
        assert_eq!(o.status.code(), Some(5), "{user:?}: {}", text(&o));
        assert!(supervised(&out), "{user:?}: node not supervised: {out}");
        assert!(out.contains("token=<removed>"), "{user:?}: {out}");
        assert!(out.contains("su=EACCES"), "{user:?}: {out}");
    }
    // Nested inside a supervised shell, python installs nothing twice.
    let before = wrap_inits(ctr);
    let o = ctr.sh(None, "python3 -c 'print(1)'; python3 -c 'print(2)'");
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(
        wrap_inits(ctr),
        before + 1,
        "a nested python called wrap-init"
    );
    // Under the tracer (gVisor) the supervisor runs the real python in the
    // shim's place; user-notify (runc) takes the shim's hop.
    let all = events(ctr);
    let traced = all
        .iter()
        .any(|e| e["type"] == "wrap_init" && e["backend"] == "ptrace");
    let skipped = all
        .iter()
        .filter(|e| {
            e["type"] == "execve"
                && e["message"]
                    .as_str()
                    .is_some_and(|m| m.contains("made in its place"))
                && e["argv"][0] == "python3"
        })
        .count();
    assert_eq!(
        skipped >= 2,
        traced,
        "nested pythons run in the shim's place: {skipped} (traced: {traced})\n{}",
        ctr.logs()
    );
    a_program_no_shim_stands_in_for_is_recorded(ctr);
    // `agentsh ready`, as the SDK runs it, names what is covered and the gap.
    let o = ctr.exec(None, &["agentsh", "ready", "--timeout", "60"]);
    let said = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success()
            && said.contains("/usr/bin/python3.11")
            && said.contains("NOT supervised: any other program"),
        "{}",
        text(&o)
    );
}

/// A program no shim stands in for, run without a shell: unsupervised,
/// and recorded as such with its argv; nothing supervised is. It lives 2 s,
/// eight of the watcher's 250 ms looks, so a loaded machine still sees it.
fn a_program_no_shim_stands_in_for_is_recorded(ctr: &Container) {
    let o = ctr.exec(
        Some(USER),
        &["perl", "-e", "select(undef, undef, undef, 2); exit 3"],
    );
    assert_eq!(o.status.code(), Some(3), "{}", text(&o));
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let ev = loop {
        let found = events(ctr).into_iter().find(|e| {
            e["type"] == "unsupervised_run" && e["argv"][0] == "perl" && e["uid"] == USER
        });
        if let Some(e) = found {
            break e;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the unlisted perl was not recorded: {:?}\n{}",
            events(ctr),
            ctr.logs()
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    };
    assert!(
        ev["reason"]
            .as_str()
            .is_some_and(|r| r.contains("--programs") && r.contains("perl")),
        "{ev}"
    );
    let wrong: Vec<Value> = events(ctr)
        .into_iter()
        .filter(|e| e["type"] == "unsupervised_run" && e["argv"][0] != "perl")
        .collect();
    assert!(wrong.is_empty(), "recorded though supervised: {wrong:#?}");
}

/// The server's audit events so far.
fn events(ctr: &Container) -> Vec<Value> {
    let ev = ctr.exec(None, &["agentsh", "events"]);
    String::from_utf8_lossy(&ev.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .collect()
}

/// How many wrap-inits the server has audited.
fn wrap_inits(ctr: &Container) -> usize {
    events(ctr)
        .iter()
        .filter(|e| e["type"] == "wrap_init")
        .count()
}

#[test]
fn modal_recipe_in_runc_supervises_python_and_node_run_without_a_shell() {
    if !runtimes_here("modal_recipe_in_runc_supervises_python_and_node_run_without_a_shell") {
        return;
    }
    let image = Image::build_on(
        &BOOKWORM_PROGRAMS,
        "modal-programs",
        &dockerfile_runs("modal-image"),
        &[],
    );
    let ctr = start_modal(&image, Runtime::Runc);
    programs_are_supervised_without_a_shell(&ctr);
}

#[test]
fn modal_recipe_in_gvisor_supervises_python_and_node_run_without_a_shell() {
    if !runtimes_here("modal_recipe_in_gvisor_supervises_python_and_node_run_without_a_shell") {
        return;
    }
    let image = Image::build_on(
        &BOOKWORM_PROGRAMS,
        "modal-programs",
        &dockerfile_runs("modal-image"),
        &[],
    );
    let ctr = start_modal(&image, Runtime::Runsc);
    programs_are_supervised_without_a_shell(&ctr);
}

/// Finds PID 1, `agentsh reaper` and the entrypoint's CMD (`sleep
/// infinity`) and `kill -9`s each; one line `kill<what>=<pid>:<status>`
/// each. The script never names the reaper whole, so it cannot find itself.
const KILL_KEEPERS: &str = r#"
a=reap; b=er; r=; c=
for p in /proc/[0-9]*; do
  n=${p#/proc/}
  cl=$(tr '\0' ' ' < "$p/cmdline" 2>/dev/null)
  case "$cl" in
    *"agentsh ${a}${b} "*) r=$n ;;
    "sleep infinity"*) c=$n ;;
  esac
done
kill -9 1; echo "kill1=1:$?"
kill -9 "$r"; echo "killreaper=$r:$?"
kill -9 "$c"; echo "killcmd=$c:$?"
"#;

/// `kill -9` of PID 1, the reaper and the entrypoint's CMD from a root
/// tree: each refused (EPERM, said), and the container still up and
/// supervising afterwards (issue 59: these deaths end the sandbox).
fn the_sandbox_stays_up(ctr: &Container) {
    let o = ctr.sh(None, KILL_KEEPERS);
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    for what in ["kill1", "killreaper", "killcmd"] {
        let line = out
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{what}=")))
            .unwrap_or_else(|| panic!("no {what} line: {}", text(&o)));
        let (pid, rc) = line.split_once(':').expect("pid:status");
        assert!(
            !pid.is_empty(),
            "{what}: the process was not found: {}",
            text(&o)
        );
        assert_ne!(
            rc,
            "0",
            "{what} succeeded: {}\nlog:\n{}",
            text(&o),
            ctr.logs()
        );
    }
    assert!(
        err.matches("not permitted").count() >= 3,
        "the refusals are not said: {err}"
    );
    let again = ctr.exec(None, &["agentsh", "ready", "--timeout", "30"]);
    assert!(
        again.status.success(),
        "the sandbox is not up after the kills: {}\nlog:\n{}",
        text(&again),
        ctr.logs()
    );
}

/// What a root (or ordinary) tree tries against agentsh's own files and the
/// file rules, each line `what=status`; every one must fail.
const TAMPER: &str = r#"
printf 'shim_install=off\n' > /etc/agentsh/shim.conf; echo "shim.conf=$?"
printf 'log_level: off\n' > /etc/agentsh/config.yaml; echo "config=$?"
cp /bin/true /usr/bin/agentsh; echo "agentsh=$?"
cp /bin/true /usr/bin/agentsh-shell-shim; echo "shim=$?"
rm -f /usr/bin/agentsh-unixwrap; echo "unixwrap=$?"
ln -sf /bin/dash /bin/sh; echo "bin-sh=$?"
mv /etc/agentsh /tmp/moved; echo "mv=$?"
ln /etc/agentsh/shim.conf /tmp/hard-$$; echo "hardlink=$?"
ln -s /etc/agentsh/shim.conf /tmp/soft-$$; printf x > /tmp/soft-$$; echo "symlink=$?"
chmod 666 /etc/agentsh/shim.conf; echo "chmod=$?"
printf '1.2.3.4 x\n' >> /etc/hosts; echo "hosts=$?"
echo fine > /tmp/own-$$ && cat /tmp/own-$$
"#;

/// The file rules hold where the tracer keeps them: every line of
/// [`TAMPER`] fails, a write to `/tmp` works, and shim.conf is unchanged.
/// `via` starts the shell: nothing (`podman exec CTR sh -c`, as Modal), or
/// a process that stays its parent (`timeout`, standing for an SDK's
/// daemon: the tree's filter then protects that daemon too).
fn own_files_hold(ctr: &Container, user: Option<u32>, shim_conf: &str, via: &[&str]) {
    let mut argv = via.to_vec();
    argv.extend(["sh", "-c", TAMPER]);
    let o = ctr.exec(user, &argv);
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    for line in out.lines().filter(|l| l.contains('=')) {
        assert!(
            !line.ends_with("=0"),
            "{user:?} {via:?}: {line} succeeded:\n{}",
            text(&o)
        );
    }
    assert_eq!(
        out.lines().filter(|l| l.contains('=')).count(),
        11,
        "{}",
        text(&o)
    );
    assert!(
        out.contains("fine"),
        "{user:?}: /tmp is not writable: {}",
        text(&o)
    );
    // Each refusal is explained on the caller's stderr (issue 41), once.
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains(
            "agentsh: openat of /etc/agentsh/shim.conf (write right) denied (rule file_rules)"
        ) || err.contains(
            "agentsh: open of /etc/agentsh/shim.conf (write right) denied (rule file_rules)"
        ),
        "{user:?} {via:?}: the refusal was not explained: {}",
        text(&o)
    );
    assert!(
        err.contains("/etc/hosts (write right) denied (rule file_rules)"),
        "{user:?} {via:?}: {}",
        text(&o)
    );
    // The region the judged paths are copied into, as root and as an
    // ordinary user: every way at it refused; a path in the program's own
    // text opens (refused as memory another process could write before).
    for user in [None, Some(USER)] {
        let o = ctr.sh(
            user,
            "d=$(mktemp -d) && filerace region /etc/agentsh/shim.conf $d 1 && \
             filerace literal /etc/agentsh/shim.conf $d 1",
        );
        let out = String::from_utf8_lossy(&o.stdout).into_owned();
        assert!(o.status.success(), "{user:?}: {}", text(&o));
        assert!(out.contains("REGION mapped"), "{user:?}: {out}");
        assert!(
            !out.contains("changed"),
            "{user:?}: the region changed:\n{out}"
        );
        let literal = out
            .lines()
            .rfind(|l| l.starts_with("opened "))
            .unwrap_or("");
        assert!(
            literal.contains(" refused 0 ") && !literal.starts_with("opened 0 "),
            "{user:?}: {out}"
        );
    }
    let now = ctr.exec(None, &["cat", "/etc/agentsh/shim.conf"]);
    assert_eq!(String::from_utf8_lossy(&now.stdout), shim_conf);
}

#[test]
fn modal_recipe_in_gvisor_keeps_agentshs_files_from_a_root_tree() {
    if !runtimes_here("modal_recipe_in_gvisor_keeps_agentshs_files_from_a_root_tree") {
        return;
    }
    let tmp = TempDir::new("rr-files");
    let race = compile("filerace", tmp.path(), true);
    let (_image, ctr) = modal_with(Runtime::Runsc, &[(&race, "/usr/local/bin/filerace")]);
    let shim_conf =
        String::from_utf8_lossy(&ctr.exec(None, &["cat", "/etc/agentsh/shim.conf"]).stdout)
            .into_owned();
    assert!(shim_conf.contains("shim_install=on"), "{shim_conf}");
    for user in [None, Some(USER)] {
        for via in [&[][..], &["timeout", "300"][..]] {
            own_files_hold(&ctr, user, &shim_conf, via);
        }
    }
    // The next shell is still supervised, refusals and all.
    sdk_commands_are_supervised(&ctr);

    // Races: a thread rewriting the path while it is judged; another
    // process swapping the name between a file and a symlink to shim.conf;
    // another process's fd and cwd links, changed by it (dup2, fchdir)
    // while judged (106 wins in 3 s before they were refused); another
    // process rewriting the path in a shared memfd (refused whole as
    // shared memory before the judged path was pinned; now the benign path
    // opens and shim.conf never does).
    for mode in ["thread", "swap", "procfd", "shared"] {
        let o = ctr.sh(
            None,
            &format!("d=$(mktemp -d) && filerace {mode} /etc/agentsh/shim.conf $d 3"),
        );
        let out = String::from_utf8_lossy(&o.stdout).into_owned();
        assert!(o.status.success(), "{mode}: {}", text(&o));
        assert!(
            !out.contains("WON"),
            "{mode}: shim.conf opened for writing:\n{out}"
        );
        let count = |what: &str| -> u64 {
            out.split_whitespace()
                .skip_while(|w| *w != what)
                .nth(1)
                .and_then(|n| n.parse().ok())
                .unwrap_or(0)
        };
        // Both sides of the race happened: writes where allowed, refusals.
        assert!(count("opened") > 0 && count("refused") > 0, "{mode}: {out}");
    }
    let now = ctr.exec(None, &["cat", "/etc/agentsh/shim.conf"]);
    assert_eq!(String::from_utf8_lossy(&now.stdout), shim_conf);

    // Each refusal is audited: the right, where it was missing, the rule.
    let ev = ctr.exec(None, &["agentsh", "events"]);
    let events: Vec<Value> = String::from_utf8_lossy(&ev.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .filter(|e: &Value| e["type"] == "file")
        .collect();
    let shim_write = events.iter().find(|e| {
        e["path"] == "/etc/agentsh/shim.conf" && e["right"] == "write" && e["rule"] == "file_rules"
    });
    assert!(
        shim_write.is_some(),
        "no audited write refusal: {events:#?}"
    );
    assert!(
        events
            .iter()
            .any(|e| e["syscall"] == "linkat" || e["syscall"] == "link"),
        "no audited hard link refusal: {events:#?}"
    );
}

/// agent-default's dev-server ports (its `network_rules` keep them open, its
/// `local-dev-servers` allows loopback TCP): the race listens on the first
/// that is free here (runsc shares the host's network).
const DEV_PORTS: &str = "5173,3000,4000,5000,8000,8888,9000";

/// `netrace race`'s last line: (reached the allowed port, refused, won).
fn race_counts(out: &str) -> (u64, u64, u64) {
    let line = out
        .lines()
        .rev()
        .find(|l| l.starts_with("ok "))
        .unwrap_or("");
    let count = |what: &str| -> u64 {
        line.split_whitespace()
            .skip_while(|w| *w != what)
            .nth(1)
            .and_then(|n| n.parse().ok())
            .unwrap_or(0)
    };
    (count("ok"), count("refused"), count("won"))
}

/// Under gVisor (no `pidfd_getfd`, no fds put into a tracee) every connect
/// the policy's egress judges is judged where it stops, the caller's
/// threads held: a destination a rule denies is refused by that rule and
/// audited as a `connect` event with it (cloud metadata: `no-cloud-metadata`;
/// a loopback port `network_rules` keep closed: `network_rules`), an allowed
/// one connects, and a thread (or a vfork child) racing the judged sockaddr
/// between an allowed and a denied port never reaches the denied one; as
/// root and as an ordinary user, the Modal recipe as written.
#[test]
fn modal_recipe_in_gvisor_judges_connects_where_they_stop() {
    if !runtimes_here("modal_recipe_in_gvisor_judges_connects_where_they_stop") {
        return;
    }
    let tmp = TempDir::new("rr-egress");
    let netrace = compile("netrace", tmp.path(), true);
    let (_image, ctr) = modal_with(Runtime::Runsc, &[(&netrace, "/usr/local/bin/netrace")]);
    // Per user, its own destinations (each is audited once per tree); the
    // metadata ports are ones network_rules keep open (else that floor is
    // what refuses).
    for (user, metadata_port, closed_port) in [(None, 80, 47), (Some(USER), 443, 48)] {
        let o = ctr.sh(
            user,
            &format!(
                "netrace connect 169.254.169.254 {metadata_port}; \
                 netrace connect 127.0.0.1 {closed_port}"
            ),
        );
        let out = String::from_utf8_lossy(&o.stdout).into_owned();
        assert_eq!(
            out.lines().collect::<Vec<_>>(),
            [
                format!("connect {}", libc::EACCES),
                format!("connect {}", libc::EACCES)
            ],
            "{user:?}: {}",
            text(&o)
        );
        for how in ["", " vfork"] {
            let o = ctr.sh(user, &format!("netrace race {DEV_PORTS} 3{how}"));
            let out = String::from_utf8_lossy(&o.stdout).into_owned();
            assert!(o.status.success(), "{user:?}{how}: {}", text(&o));
            let (ok, refused, won) = race_counts(&out);
            assert_eq!(won, 0, "{user:?}{how}: the denied port was reached:\n{out}");
            // Both sides of the race happened: the allowed port reached,
            // the denied one refused.
            assert!(ok > 0 && refused > 0, "{user:?}{how}: {out}");
        }
    }
    let ev = ctr.exec(None, &["agentsh", "events"]);
    let events: Vec<Value> = String::from_utf8_lossy(&ev.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    let connects: Vec<&Value> = events.iter().filter(|e| e["type"] == "connect").collect();
    let audited = |ip: &str, port: u16, rule: &str, decision: &str| {
        connects.iter().any(|e| {
            e["ip"] == ip
                && e["port"] == port
                && e["rule"] == rule
                && e["decision"] == decision
                && e["syscall"] == "connect"
        })
    };
    for (metadata_port, closed_port) in [(80, 47), (443, 48)] {
        assert!(
            audited(
                "169.254.169.254",
                metadata_port,
                "no-cloud-metadata",
                "deny"
            ),
            "{connects:#?}"
        );
        assert!(
            audited("127.0.0.1", closed_port, "network_rules", "deny"),
            "{connects:#?}"
        );
    }
    assert!(
        connects
            .iter()
            .any(|e| e["rule"] == "local-dev-servers" && e["decision"] == "allow"),
        "{connects:#?}"
    );
    assert!(
        !connects.iter().any(|e| e["rule"] == "egress_unenforceable"),
        "{connects:#?}"
    );
    // Said at wrap-init: egress is enforced here (nothing under
    // not_enforced names it), and so are network_rules' connect ports.
    for wi in events.iter().filter(|e| e["type"] == "wrap_init") {
        let said = wi["not_enforced"].to_string();
        assert!(
            !said.contains("egress") && !said.contains("network rules"),
            "{wi:#}"
        );
    }
}

/// The pending approval of a connect, once one waits (its id); `None` if
/// none came within a minute.
fn pending_connect(ctr: &Container) -> Option<String> {
    let end = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while std::time::Instant::now() < end {
        let o = ctr.exec(None, &["agentsh", "approvals", "list", "--json"]);
        let found = String::from_utf8_lossy(&o.stdout)
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .find(|r| r["kind"] == "connect")
            .and_then(|r| r["id"].as_str().map(str::to_string));
        if found.is_some() {
            return found;
        }
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    None
}

/// A connect agent-default leaves to an operator (an address of this
/// machine's own, not loopback) waits in its stop under gVisor; approved,
/// it runs again from its start, is judged anew in the caller's memory
/// (allowed now) and connects; denied, it fails with EACCES. As root and as
/// an ordinary user; the Modal recipe as written.
#[test]
fn modal_recipe_in_gvisor_holds_a_connect_for_an_operator() {
    if !runtimes_here("modal_recipe_in_gvisor_holds_a_connect_for_an_operator") {
        return;
    }
    let tmp = TempDir::new("rr-approve");
    let netrace = compile("netrace", tmp.path(), true);
    let (_image, ctr) = modal_with(Runtime::Runsc, &[(&netrace, "/usr/local/bin/netrace")]);
    for user in [None, Some(USER)] {
        for verb in ["approve", "deny"] {
            let out = std::thread::scope(|s| {
                let run = s.spawn(|| ctr.sh(user, &format!("netrace self {DEV_PORTS}")));
                let id = pending_connect(&ctr);
                if let Some(id) = &id {
                    let o = ctr.exec(None, &["agentsh", "approvals", verb, id]);
                    assert!(o.status.success(), "{verb}: {}", text(&o));
                }
                let o = run.join().unwrap();
                assert!(id.is_some(), "{user:?}: no connect waited: {}", text(&o));
                String::from_utf8_lossy(&o.stdout).into_owned()
            });
            let want = match verb {
                "approve" => "connect 0".to_string(),
                _ => format!("connect {}", libc::EACCES),
            };
            assert_eq!(
                out.lines().last(),
                Some(want.as_str()),
                "{user:?} {verb}: {out}"
            );
        }
    }
    let ev = ctr.exec(None, &["agentsh", "events"]);
    let outcomes: Vec<Value> = String::from_utf8_lossy(&ev.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|e| e["type"] == "connect" && e["approval_outcome"].is_string())
        .map(|e| e["approval_outcome"].clone())
        .collect();
    assert_eq!(
        outcomes,
        ["approved", "denied", "approved", "denied"].map(Value::from),
        "{ev:?}"
    );
}
