//! End-to-end: execs under a `decision: approve` rule wait for an operator,
//! on the real kernel, with the test process playing the shim (see
//! `agentsh_tests::relay`) and the operator (the `agentsh approvals` CLI).

// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

use agentsh_tests::relay::{spawn_wrapped, WrapOptions, Wrapped};
use agentsh_tests::server::{bin, require_root, TempDir, TestServer, TCP};
use serde_json::Value;
use std::io::BufRead;
use std::path::PathBuf;
use std::process::{Command, Output};
use std::sync::mpsc::{self, Receiver};
use std::time::{Duration, Instant};

const POLICY: &str = r#"
name: approvals-e2e
default: allow
command_rules:
  - name: approve-pip-install
    commands: [pip]
    args_patterns: ["^install( |$)"]
    decision: approve
    message: package installs need an operator
"#;

/// A server with the approve policy, and a directory holding a fake `pip`
/// (a copy of `true`). PATH is that directory alone, so a denied `pip` is not
/// retried on a real pip elsewhere; the scripts name other tools by path.
struct Fixture {
    srv: TestServer,
    tmp: TempDir,
    opts: WrapOptions,
}

fn start(approval_timeout: &str) -> Fixture {
    // With the operator's TCP listener too: the in-tree attacks below go
    // through it (a tree cannot even open the Unix socket).
    let srv = TestServer::start(
        POLICY,
        &format!("{TCP}execve:\n  approval_timeout: {approval_timeout}\n"),
    );
    let tmp = TempDir::new("approvals");
    let b = tmp.path().join("bin");
    std::fs::create_dir_all(&b).unwrap();
    std::fs::copy("/bin/true", b.join("pip")).unwrap();
    let opts = WrapOptions {
        env: vec![("PATH".into(), b.display().to_string())],
        ..Default::default()
    };
    Fixture { srv, tmp, opts }
}

impl Fixture {
    fn token_file(&self) -> PathBuf {
        self.srv.dir.path().join("state").join("approval.token")
    }

    fn spawn(&self, session: &str, script: &str) -> Wrapped {
        spawn_wrapped(
            &self.srv.url,
            session,
            &["/bin/sh", "-c", script],
            &self.opts,
        )
    }

    /// `GET /api/v1/approvals`.
    fn pending(&self) -> Vec<Value> {
        self.srv
            .get_json("/api/v1/approvals")
            .as_array()
            .cloned()
            .expect("approvals JSON array")
    }

    /// Waits for the first pending request.
    fn wait_pending(&self) -> Value {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Some(r) = self.pending().into_iter().next() {
                return r;
            }
            assert!(
                Instant::now() < deadline,
                "no approval request: {}",
                self.srv.log()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Runs `agentsh approvals <args> --server URL --token-file PATH`.
    fn cli(&self, args: &[&str]) -> Output {
        let out = Command::new(bin("agentsh"))
            .arg("approvals")
            .args(args)
            .arg("--server")
            .arg(&self.srv.url)
            .arg("--token-file")
            .arg(self.token_file())
            .output()
            .expect("run agentsh approvals");
        out
    }

    /// The final exec event of approval `id`.
    fn approval_event(&self, session: &str, id: &str) -> Value {
        let ev = self
            .srv
            .wait_exec_event(session, Duration::from_secs(60), |e| e["approval_id"] == id);
        ev.unwrap_or_else(|| panic!("no event for {id}: {:#?}", self.srv.exec_events(session)))
    }
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Streams the command's stdout lines while it runs.
fn stdout_lines(w: &mut Wrapped) -> Receiver<String> {
    let out = w.child.stdout.take().expect("piped stdout");
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(out).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    rx
}

/// Waits for a line starting with `prefix`; returns it.
fn wait_line(rx: &Receiver<String>, prefix: &str, timeout: Duration) -> String {
    let deadline = Instant::now() + timeout;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(l) if l.starts_with(prefix) => return l,
            Ok(_) => {}
            Err(e) => panic!("no line starting with {prefix:?}: {e}"),
        }
    }
}

fn pip_events(f: &Fixture, session: &str) -> Vec<Value> {
    f.srv
        .exec_events(session)
        .into_iter()
        .filter(|e| e["filename"].as_str().is_some_and(|p| p.ends_with("/pip")))
        .collect()
}

#[test]
fn pip_install_approved_via_cli_runs_and_is_audited() {
    if !require_root("pip_install_approved_via_cli_runs_and_is_audited") {
        return;
    }
    let f = start("10s");
    let w = f.spawn("ok", "pip install x; echo rc=$?");
    let req = f.wait_pending();
    assert_eq!(req["session_id"], "ok");
    assert_eq!(req["argv"], serde_json::json!(["pip", "install", "x"]));
    assert_eq!(req["rule"], "approve-pip-install");
    assert_eq!(req["depth"], 1);
    assert!(req["filename"].as_str().unwrap().ends_with("/pip"));
    assert!(req["waiting_since"].as_str().unwrap() < req["expires_at"].as_str().unwrap());
    let id = req["id"].as_str().unwrap().to_string();
    // The operator's list shows it.
    let list = f.cli(&["list"]);
    assert!(text(&list.stdout).contains(&id), "{}", text(&list.stdout));

    let t = Instant::now();
    let out = f.cli(&["approve", &id, "--reason", "needed for the build"]);
    assert!(out.status.success(), "approve: {}", text(&out.stderr));
    let (relay, out) = w.wait();
    assert!(relay.is_ok());
    eprintln!("approve -> command finished: {:?}", t.elapsed());
    assert!(
        text(&out.stdout).contains("rc=0"),
        "stdout: {}",
        text(&out.stdout)
    );

    let ev = f.approval_event("ok", &id);
    assert_eq!(ev["decision"], "approve");
    assert_eq!(ev["approval_outcome"], "approved");
    assert_eq!(ev["effective_action"], "allow");
    assert_eq!(ev["reason"], "needed for the build");
    assert!(ev["approver"].as_str().unwrap().contains("uid 0"), "{ev}");
    assert_eq!(pip_events(&f, "ok").len(), 1, "one event per outcome");
    assert!(f.pending().is_empty());
}

#[test]
fn pip_install_denied_via_cli_fails_with_eacces() {
    if !require_root("pip_install_denied_via_cli_fails_with_eacces") {
        return;
    }
    let f = start("10s");
    let w = f.spawn("no", "pip install x; echo rc=$?");
    let id = f.wait_pending()["id"].as_str().unwrap().to_string();
    let out = f.cli(&["deny", &id, "--reason", "not today"]);
    assert!(out.status.success(), "deny: {}", text(&out.stderr));
    // A second decision on the same request is refused.
    let again = f.cli(&["approve", &id]);
    assert!(!again.status.success());
    let (_, out) = w.wait();
    assert!(
        text(&out.stdout).contains("rc=126"),
        "stdout: {}",
        text(&out.stdout)
    );
    assert!(
        text(&out.stderr).contains("Permission denied"),
        "{}",
        text(&out.stderr)
    );
    let ev = f.approval_event("no", &id);
    assert_eq!(ev["approval_outcome"], "denied");
    assert_eq!(ev["effective_action"], "deny");
    assert_eq!(ev["reason"], "not today");
    assert_eq!(pip_events(&f, "no").len(), 1);
}

#[test]
fn unanswered_pip_install_is_denied_at_the_timeout() {
    if !require_root("unanswered_pip_install_is_denied_at_the_timeout") {
        return;
    }
    let f = start("1s");
    let t = Instant::now();
    let w = f.spawn("late", "pip install x; echo rc=$?");
    let id = f.wait_pending()["id"].as_str().unwrap().to_string();
    let (_, out) = w.wait();
    let took = t.elapsed();
    eprintln!("timeout 1s: command finished after {took:?}");
    assert!(
        text(&out.stdout).contains("rc=126"),
        "stdout: {}",
        text(&out.stdout)
    );
    // Not before the timeout; and it did end (a generous bound: a loaded
    // machine is slow, a hung approval is never answered).
    assert!(took >= Duration::from_secs(1), "{took:?}");
    assert!(took < Duration::from_secs(60), "{took:?}");
    let ev = f.approval_event("late", &id);
    assert_eq!(ev["approval_outcome"], "timeout");
    assert_eq!(ev["approver"], "timeout");
    assert_eq!(ev["effective_action"], "deny");
    assert!(f.pending().is_empty());
}

#[test]
fn a_path_retry_of_a_refused_exec_is_not_a_second_request() {
    if !require_root("a_path_retry_of_a_refused_exec_is_not_a_second_request") {
        return;
    }
    // PATH names the directory twice (as /usr/bin and /bin do): after the
    // timeout's EACCES the shell tries the same pip through the second entry.
    // That is the same attempt: refused like the first at once, audited as a
    // retry of the same request, and no second request is opened.
    let f = start("1s");
    let bin = f.tmp.path().join("bin");
    let alias = f.tmp.path().join("alias");
    std::os::unix::fs::symlink(&bin, &alias).unwrap();
    let opts = WrapOptions {
        env: vec![(
            "PATH".into(),
            format!("{}:{}", bin.display(), alias.display()),
        )],
        ..Default::default()
    };
    let w = spawn_wrapped(
        &f.srv.url,
        "retry",
        &["/bin/sh", "-c", "pip install x; echo rc=$?"],
        &opts,
    );
    let id = f.wait_pending()["id"].as_str().unwrap().to_string();
    let (_, out) = w.wait();
    assert!(
        text(&out.stdout).contains("rc=126"),
        "stdout: {} stderr: {}",
        text(&out.stdout),
        text(&out.stderr)
    );
    let pips: Vec<Value> = f
        .srv
        .exec_events("retry")
        .into_iter()
        .filter(|e| e["argv"][0] == "pip")
        .collect();
    assert_eq!(pips.len(), 2, "{pips:#?}");
    for e in &pips {
        assert_eq!(e["approval_id"], id.as_str(), "one request: {e}");
        assert_eq!(e["approval_outcome"], "timeout", "{e}");
        assert_eq!(e["effective_action"], "deny", "{e}");
    }
    assert!(pips[0]["attempt"].as_u64().is_some(), "{pips:#?}");
    assert_eq!(pips[0]["attempt"], pips[1]["attempt"], "{pips:#?}");
    assert_eq!(pips[0].get("retry"), None, "{pips:#?}");
    assert_eq!(pips[1]["retry"], true, "{pips:#?}");
    assert!(
        pips[1]["filename"]
            .as_str()
            .is_some_and(|p| p.starts_with(&alias.display().to_string())),
        "{pips:#?}"
    );
    assert!(f.pending().is_empty());
}

#[test]
fn tree_keeps_running_execs_while_an_approval_waits() {
    if !require_root("tree_keeps_running_execs_while_an_approval_waits") {
        return;
    }
    let f = start("10s");
    let t = Instant::now();
    let mut w = f.spawn(
        "busy",
        "pip install x & p=$!; for i in $(/usr/bin/seq 200); do /bin/true; done; \
         echo loop-done; wait $p; echo pip-rc=$?",
    );
    let lines = stdout_lines(&mut w);
    wait_line(&lines, "loop-done", Duration::from_secs(20));
    eprintln!("200 execs while pip waited: {:?}", t.elapsed());
    // pip is still waiting: nobody answered, and the timeout is far.
    let pending = f.pending();
    assert_eq!(pending.len(), 1, "{pending:#?}");
    let id = pending[0]["id"].as_str().unwrap().to_string();
    let trues = f
        .srv
        .exec_events("busy")
        .iter()
        .filter(|e| e["filename"] == "/bin/true")
        .count();
    assert_eq!(trues, 200);
    assert!(pip_events(&f, "busy").is_empty(), "pip not decided yet");

    let out = f.cli(&["approve", &id]);
    assert!(out.status.success(), "approve: {}", text(&out.stderr));
    assert_eq!(
        wait_line(&lines, "pip-rc=", Duration::from_secs(60)),
        "pip-rc=0"
    );
    let _ = w.wait();
    assert_eq!(
        f.approval_event("busy", &id)["approval_outcome"],
        "approved"
    );
}

#[test]
fn killed_tracee_cancels_its_approval() {
    if !require_root("killed_tracee_cancels_its_approval") {
        return;
    }
    let f = start("10s");
    let w = f.spawn("kill", "pip install x; echo after=$?");
    let req = f.wait_pending();
    let id = req["id"].as_str().unwrap().to_string();
    let pid = req["pid"].as_i64().unwrap() as i32;
    // SAFETY: kill has no memory preconditions; pid is the waiting pip process.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGKILL) }, 0);
    let t = Instant::now();
    while !f.pending().is_empty() {
        assert!(t.elapsed() < Duration::from_secs(60), "still listed");
        std::thread::sleep(Duration::from_millis(20));
    }
    eprintln!("killed tracee left the list after {:?}", t.elapsed());
    let (_, out) = w.wait();
    assert!(
        text(&out.stdout).contains("after=137"),
        "stdout: {}",
        text(&out.stdout)
    );
    let ev = f.approval_event("kill", &id);
    assert_eq!(ev["approval_outcome"], "cancelled");
    assert_eq!(ev["effective_action"], "deny");
    // Too late to decide now.
    assert!(!f.cli(&["approve", &id]).status.success());
}

/// The in-tree attack over the operator's TCP listener: list the pending
/// requests (with the token from the file, or else a leaked copy), then POST
/// an approval of the id the test hands over in `id_file` (a tree cannot
/// list it any more) with the token from the file, and with the leaked copy.
fn attack_script(url: &str, token_file: &str, id_file: &str) -> String {
    format!(
        r#"
tok=$(/bin/cat {token_file} 2>/dev/null); [ -n "$tok" ] || tok=$LEAKED_TOKEN
echo list=$(/usr/bin/curl -s -o /dev/null -w '%{{http_code}}' -H "Authorization: Bearer $tok" {url}/api/v1/approvals)
n=0; while [ ! -s {id_file} ] && [ $n -lt 400 ]; do /bin/sleep 0.05; n=$((n+1)); done
id=$(/bin/cat {id_file})
echo id=$id
post() {{ /usr/bin/curl -s -o /dev/null -w '%{{http_code}}' -X POST -H "Authorization: Bearer $1" \
  -d '{{"decision":"approve","reason":"self"}}' {url}/api/v1/approvals/$id; }}
echo from-file=$(post "$(/bin/cat {token_file} 2>/dev/null)")
echo leaked=$(post "$LEAKED_TOKEN")
"#
    )
}

/// Hands the pending request's id to the attack (as an operator would see it).
fn hand_over_id(f: &Fixture, id_file: &std::path::Path) -> String {
    use std::os::unix::fs::PermissionsExt;
    let id = f.wait_pending()["id"].as_str().unwrap().to_string();
    let tmp = id_file.with_extension("tmp");
    std::fs::write(&tmp, &id).unwrap();
    // Readable by the attack, which may run as nobody.
    std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o644)).unwrap();
    std::fs::rename(&tmp, id_file).unwrap();
    id
}

fn leaked_token_opts(f: &Fixture) -> WrapOptions {
    let mut opts = f.opts.clone();
    let token = std::fs::read_to_string(f.token_file()).expect("token file");
    opts.env
        .push(("LEAKED_TOKEN".into(), token.trim().to_string()));
    opts
}

#[test]
fn tree_running_as_root_cannot_approve_its_own_request() {
    if !require_root("tree_running_as_root_cannot_approve_its_own_request") {
        return;
    }
    let f = start("10s");
    let tmp = TempDir::new("orphan");
    let orphan_out = tmp.path().join("code");
    let tcp = format!("http://{}", f.srv.addr);
    let id_file = tmp.path().join("id");
    let attack = attack_script(
        &tcp,
        &f.token_file().display().to_string(),
        &id_file.display().to_string(),
    );
    // Also from a daemonized curl whose parent exited (reparented out of the
    // tree's process lineage, still under its seccomp filter).
    let script = format!(
        "pip install x & p=$!\n{attack}\n\
         ( /usr/bin/curl -s -o /dev/null -w '%{{http_code}}' -X POST -H \"Authorization: Bearer $LEAKED_TOKEN\" \
           -d '{{\"decision\":\"approve\"}}' {url}/api/v1/approvals/$id > {out} & )\n\
         n=0; while [ ! -s {out} ] && [ $n -lt 400 ]; do /bin/sleep 0.05; n=$((n+1)); done\n\
         echo orphan=$(/bin/cat {out})\necho ready\nwait $p; echo pip-rc=$?\n",
        url = tcp,
        out = orphan_out.display(),
    );
    let mut w = spawn_wrapped(
        &f.srv.url,
        "root",
        &["/bin/sh", "-c", &script],
        &leaked_token_opts(&f),
    );
    let lines = stdout_lines(&mut w);
    // Not even a list: no route serves a process of a supervised tree.
    assert_eq!(
        wait_line(&lines, "list=", Duration::from_secs(60)),
        "list=403"
    );
    let handed = hand_over_id(&f, &id_file);
    let id = wait_line(&lines, "id=", Duration::from_secs(60))[3..].to_string();
    assert_eq!(id, handed);
    // As root the tree can read the token file (unless Landlock hides it);
    // the server still refuses a decision from a process of a supervised tree.
    let from_file = wait_line(&lines, "from-file=", Duration::from_secs(60));
    assert!(
        from_file == "from-file=403" || from_file == "from-file=401",
        "{from_file}"
    );
    assert_eq!(
        wait_line(&lines, "leaked=", Duration::from_secs(60)),
        "leaked=403"
    );
    assert_eq!(
        wait_line(&lines, "orphan=", Duration::from_secs(60)),
        "orphan=403"
    );
    wait_line(&lines, "ready", Duration::from_secs(60));
    let pending = f.pending();
    assert_eq!(pending.len(), 1);
    assert_eq!(pending[0]["id"], id, "the request stays pending");
    assert!(f.srv.log().contains("supervised tree refused"));

    let out = f.cli(&["deny", &id]);
    assert!(out.status.success(), "deny: {}", text(&out.stderr));
    assert_eq!(
        wait_line(&lines, "pip-rc=", Duration::from_secs(60)),
        "pip-rc=126"
    );
    let _ = w.wait();
    let ev = f.approval_event("root", &id);
    assert_eq!(ev["approval_outcome"], "denied");
    assert!(!ev["approver"].as_str().unwrap().contains("in-tree"));
}

#[test]
fn tree_running_as_unprivileged_user_cannot_approve_its_own_request() {
    if !require_root("tree_running_as_unprivileged_user_cannot_approve_its_own_request") {
        return;
    }
    let f = start("10s");
    let tcp = format!("http://{}", f.srv.addr);
    let id_dir = TempDir::new("approval-id");
    std::fs::set_permissions(
        id_dir.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let id_file = id_dir.path().join("id");
    let attack = attack_script(
        &tcp,
        &f.token_file().display().to_string(),
        &id_file.display().to_string(),
    );
    let attack_file = f.srv.dir.path().join("attack.sh");
    std::fs::write(&attack_file, attack).unwrap();
    // The tree starts as root (the relay hands over as root), then drops to
    // nobody for the attack, as an agent's unprivileged user would run.
    let script = format!(
        "pip install x & p=$!\n\
         /usr/bin/setpriv --reuid=65534 --regid=65534 --clear-groups /bin/sh {}\n\
         echo ready\nwait $p; echo pip-rc=$?\n",
        attack_file.display()
    );
    std::fs::set_permissions(
        &attack_file,
        std::os::unix::fs::PermissionsExt::from_mode(0o644),
    )
    .unwrap();
    let mut w = spawn_wrapped(
        &f.srv.url,
        "nobody",
        &["/bin/sh", "-c", &script],
        &leaked_token_opts(&f),
    );
    let lines = stdout_lines(&mut w);
    assert_eq!(
        wait_line(&lines, "list=", Duration::from_secs(60)),
        "list=403"
    );
    let handed = hand_over_id(&f, &id_file);
    let id = wait_line(&lines, "id=", Duration::from_secs(60))[3..].to_string();
    assert_eq!(id, handed);
    // The token file is root-only: no token, 401.
    assert_eq!(
        wait_line(&lines, "from-file=", Duration::from_secs(60)),
        "from-file=401"
    );
    assert_eq!(
        wait_line(&lines, "leaked=", Duration::from_secs(60)),
        "leaked=403"
    );
    wait_line(&lines, "ready", Duration::from_secs(60));
    let pending = f.pending();
    assert_eq!(pending.len(), 1);
    assert_eq!(pending[0]["id"], id, "the request stays pending");

    let out = f.cli(&["deny", &id]);
    assert!(out.status.success(), "deny: {}", text(&out.stderr));
    assert_eq!(
        wait_line(&lines, "pip-rc=", Duration::from_secs(60)),
        "pip-rc=126"
    );
    let _ = w.wait();
}

#[test]
fn watch_prints_each_new_request() {
    if !require_root("watch_prints_each_new_request") {
        return;
    }
    let f = start("10s");
    let mut watch = Command::new(bin("agentsh"))
        .args(["approvals", "watch", "--server", &f.srv.url])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("spawn watch");
    let out = watch.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for l in std::io::BufReader::new(out).lines().map_while(Result::ok) {
            let _ = tx.send(l);
        }
    });
    let w = f.spawn("watch", "pip install x; echo rc=$?");
    let line = wait_line(&rx, "ap-", Duration::from_secs(60));
    assert!(line.contains("pip install x"), "{line}");
    let _ = watch.kill();
    let _ = watch.wait();
    let id = line.split_whitespace().next().unwrap().to_string();
    assert!(f.cli(&["deny", &id]).status.success());
    let (_, out) = w.wait();
    assert!(text(&out.stdout).contains("rc=126"));
}

/// Egress `approve` (issue 22): a connect or send to a destination the
/// policy says `approve` for waits for the operator exactly like an exec:
/// approved, the supervisor makes the call for the tree (and the
/// destination is allowed for the rest of the tree); denied, EACCES; not
/// answered in time, `approval_timeout_action`. One `connect` event each.
#[test]
fn connects_wait_for_an_operator_like_execs() {
    if !require_root("connects_wait_for_an_operator_like_execs") {
        return;
    }
    let policy =
        "name: approvals-egress\ndefault: allow\negress:\n  default: approve\n  dns: host\n";
    let srv = TestServer::start(policy, &format!("{TCP}execve:\n  approval_timeout: 3s\n"));
    let f = Fixture {
        srv,
        tmp: TempDir::new("approvals"),
        opts: WrapOptions::default(),
    };
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let sink = std::net::UdpSocket::bind("127.0.0.2:0").unwrap();
    let uport = sink.local_addr().unwrap().port();
    let py = [
        "import socket".to_string(),
        "def tcp(ip):".into(),
        "  try:".into(),
        format!("    socket.create_connection((ip, {port}), timeout=60).close(); return 'ok'"),
        "  except OSError as e: return str(e.errno)".into(),
        "print('first', tcp('127.0.0.1'))".into(),
        "print('second', tcp('127.0.0.1'))".into(),
        "try:".into(),
        format!("  socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b'x', ('127.0.0.2', {uport})); print('udp ok')"),
        "except OSError as e: print('udp', e.errno)".into(),
        "print('late', tcp('127.0.0.3'))".into(),
    ]
    .join("\n");
    let script = format!("/usr/bin/python3 -u -c \"{py}\"");
    let mut w = f.spawn("egress", &script);
    let lines = stdout_lines(&mut w);

    // The first connect waits; the operator sees where it goes.
    let req = f.wait_pending();
    assert_eq!(req["kind"], "connect", "{req}");
    assert_eq!(req["destination"]["ip"], "127.0.0.1");
    assert_eq!(req["destination"]["port"], port);
    assert_eq!(req["destination"]["protocol"], "tcp");
    assert_eq!(req["rule"], "default");
    let id = req["id"].as_str().unwrap().to_string();
    let list = f.cli(&["list"]);
    assert!(
        text(&list.stdout).contains(&format!("connect 127.0.0.1:{port}/tcp")),
        "{}",
        text(&list.stdout)
    );
    let out = f.cli(&["approve", &id, "--reason", "the test server"]);
    assert!(out.status.success(), "approve: {}", text(&out.stderr));
    assert_eq!(
        wait_line(&lines, "first", Duration::from_secs(60)),
        "first ok"
    );
    // Approved once: the same destination again needs no operator.
    assert_eq!(
        wait_line(&lines, "second", Duration::from_secs(60)),
        "second ok"
    );

    // The datagram waits too; denied, it fails with EACCES and is not sent.
    let req = f.wait_pending();
    assert_eq!(req["destination"]["protocol"], "udp", "{req}");
    let udp_id = req["id"].as_str().unwrap().to_string();
    let out = f.cli(&["deny", &udp_id]);
    assert!(out.status.success(), "deny: {}", text(&out.stderr));
    assert_eq!(
        wait_line(&lines, "udp", Duration::from_secs(60)),
        format!("udp {}", libc::EACCES)
    );
    // Nobody answers the last one: denied at the timeout.
    assert_eq!(
        wait_line(&lines, "late", Duration::from_secs(60)),
        format!("late {}", libc::EACCES)
    );
    let (relay, _) = w.wait();
    assert!(relay.is_ok());
    sink.set_nonblocking(true).unwrap();
    let mut buf = [0u8; 16];
    assert!(
        sink.recv_from(&mut buf).is_err(),
        "the denied datagram arrived"
    );

    let events: Vec<Value> = f
        .srv
        .events("egress")
        .into_iter()
        .filter(|e| e["type"] == "connect")
        .collect();
    let of = |ip: &str| -> Vec<&Value> { events.iter().filter(|e| e["ip"] == ip).collect() };
    let first = of("127.0.0.1");
    assert_eq!(
        first.len(),
        1,
        "one event for the approved destination: {events:?}"
    );
    assert_eq!(first[0]["decision"], "approve");
    assert_eq!(first[0]["approval_outcome"], "approved");
    assert_eq!(first[0]["effective_action"], "allow");
    assert_eq!(first[0]["approval_id"], id.as_str());
    assert_eq!(first[0]["reason"], "the test server");
    let udp = of("127.0.0.2");
    assert_eq!(udp.len(), 1, "{events:?}");
    assert_eq!(udp[0]["approval_outcome"], "denied");
    assert_eq!(udp[0]["effective_action"], "deny");
    let late = of("127.0.0.3");
    assert_eq!(late.len(), 1, "{events:?}");
    assert_eq!(late[0]["approval_outcome"], "timeout");
    assert_eq!(late[0]["effective_action"], "deny");
    assert!(f.pending().is_empty());
    drop(listener);
}
