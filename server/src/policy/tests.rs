//! Table-driven tests of the whole engine: loading, errors with locations,
//! and evaluation (no kernel; only `resolve` touches a scratch directory).

use super::*;
use std::collections::BTreeSet;
use std::path::Path;

const TEST_POLICY: &str = r#"
name: test
default: deny
internal_bypass: ["/usr/bin/agentsh-unixwrap", "/usr/lib/agentsh/*"]
command_rules:
  - name: deny-agentsh
    commands: [agentsh]
    decision: deny
    message: no agentsh inside
  - name: deny-nested-curl
    commands: [curl, wget, "/usr/bin/nc*"]
    context: [nested]
    decision: deny
    message: network tools are not allowed in nested commands
  - name: deny-rm-rf
    commands: [rm]
    args_patterns: ["(^| )-rf( |$)", "--no-preserve-root"]
    decision: deny
  - name: approve-pip-install
    commands: ["pip*"]
    args_patterns: ["^install( |$)"]
    decision: approve
  - name: audit-deep-make
    commands: [make]
    context: {min_depth: 2, max_depth: 3}
    decision: audit
  - name: python-direct
    commands: [python3]
    context: [direct]
    decision: allow
  - name: python-elsewhere
    commands: [python3]
    decision: audit
  - name: deny-chrt
    commands: [chrt]
    decision: deny
  - name: audit-nice
    commands: [nice]
    decision: audit
  - name: deny-tmp-tool
    commands: ["/tmp/evil"]
    decision: deny
  - name: allow-installed
    commands: ["/usr/**", "/bin/**", "/lib64/**"]
    decision: allow
"#;

fn policy(text: &str) -> Policy {
    Policy::from_yaml(text, "test.yaml").unwrap_or_else(|e| panic!("{e}"))
}

fn argv(s: &str) -> Vec<String> {
    s.split_whitespace().map(str::to_string).collect()
}

struct Case {
    what: &'static str,
    filename: &'static str,
    resolved: Option<&'static str>,
    argv: Vec<String>,
    depth: u32,
    decision: Decision,
    rule: &'static str,
    judged: &'static str,
}

fn case(
    what: &'static str,
    filename: &'static str,
    args: &str,
    depth: u32,
    decision: Decision,
    rule: &'static str,
    judged: &'static str,
) -> Case {
    Case {
        what,
        filename,
        resolved: None,
        argv: argv(args),
        depth,
        decision,
        rule,
        judged,
    }
}

fn run(policy: &Policy, cases: &[Case]) {
    for c in cases {
        let facts = ProgramFacts {
            filename: c.filename,
            resolved: c.resolved,
            argv: &c.argv,
            depth: c.depth,
        };
        let v = evaluate(policy, &facts);
        assert_eq!(
            (v.decision, v.rule.as_str(), v.judged.as_str()),
            (c.decision, c.rule, c.judged),
            "{}: {v:?}",
            c.what
        );
    }
}

#[test]
fn evaluation_follows_rules_in_order() {
    use Decision::*;
    let p = policy(TEST_POLICY);
    #[rustfmt::skip]
    let mut cases = vec![
        // basenames, paths, globs, default
        case("basename match", "/usr/bin/agentsh", "agentsh events", 0, Deny, "deny-agentsh", "/usr/bin/agentsh"),
        case("basename anywhere", "/opt/x/agentsh", "agentsh", 0, Deny, "deny-agentsh", "/opt/x/agentsh"),
        case("path glob", "/usr/bin/ncat", "ncat -l", 1, Deny, "deny-nested-curl", "/usr/bin/ncat"),
        case("path glob other dir", "/opt/bin/ncat", "ncat -l", 1, Deny, "default", "/opt/bin/ncat"),
        case("path glob ** catch-all", "/usr/local/lib/x/tool", "tool", 3, Allow, "allow-installed", "/usr/local/lib/x/tool"),
        case("no rule: default", "/srv/tool", "tool", 0, Deny, "default", "/srv/tool"),
        case("exact path rule", "/tmp/evil", "evil", 0, Deny, "deny-tmp-tool", "/tmp/evil"),
        case("exact path is exact", "/tmp/evil2", "evil2", 0, Deny, "default", "/tmp/evil2"),
        case("fd link text is no path", "anon_inode:[x]", "x", 0, Deny, "default", "anon_inode:[x]"),
        // `.real`
        case(".real basename", "/bin/sh.real", "sh -c x", 0, Allow, "allow-installed", "/bin/sh.real"),
        case(".real on a rule name", "/usr/local/bin/curl.real", "curl x", 1, Deny, "deny-nested-curl", "/usr/local/bin/curl.real"),
        // context
        case("nested rule, direct exec", "/usr/bin/curl", "curl --version", 0, Allow, "allow-installed", "/usr/bin/curl"),
        case("nested rule, nested exec", "/usr/bin/curl", "curl --version", 1, Deny, "deny-nested-curl", "/usr/bin/curl"),
        case("nested rule, deep exec", "/usr/bin/wget", "wget x", 7, Deny, "deny-nested-curl", "/usr/bin/wget"),
        case("direct rule at 0", "/usr/bin/python3", "python3 x.py", 0, Allow, "python-direct", "/usr/bin/python3"),
        case("direct rule at 1 falls through", "/usr/bin/python3", "python3 x.py", 1, Audit, "python-elsewhere", "/usr/bin/python3"),
        case("below min_depth", "/usr/bin/make", "make", 1, Allow, "allow-installed", "/usr/bin/make"),
        case("at min_depth", "/usr/bin/make", "make", 2, Audit, "audit-deep-make", "/usr/bin/make"),
        case("at max_depth", "/usr/bin/make", "make", 3, Audit, "audit-deep-make", "/usr/bin/make"),
        case("above max_depth", "/usr/bin/make", "make", 4, Allow, "allow-installed", "/usr/bin/make"),
        // args_patterns
        case("args match", "/bin/rm", "rm -rf /", 1, Deny, "deny-rm-rf", "/bin/rm"),
        case("args match later", "/bin/rm", "rm x -rf", 1, Deny, "deny-rm-rf", "/bin/rm"),
        case("second pattern", "/bin/rm", "rm -r --no-preserve-root /", 1, Deny, "deny-rm-rf", "/bin/rm"),
        case("args do not match", "/bin/rm", "rm -r x", 1, Allow, "allow-installed", "/bin/rm"),
        case("argv[0] is not an arg", "/bin/rm", "-rf x", 1, Allow, "allow-installed", "/bin/rm"),
        case("empty argv", "/bin/rm", "", 1, Allow, "allow-installed", "/bin/rm"),
        case("approve returned as is", "/usr/bin/pip3", "pip3 install requests", 1, Approve, "approve-pip-install", "/usr/bin/pip3"),
        case("approve not for list", "/usr/bin/pip3", "pip3 list", 1, Allow, "allow-installed", "/usr/bin/pip3"),
        // internal bypass: absolute exec'd names only
        case("bypass exact", "/usr/bin/agentsh-unixwrap", "agentsh-unixwrap --x", 0, Allow, "internal_bypass", "/usr/bin/agentsh-unixwrap"),
        case("bypass glob", "/usr/lib/agentsh/helper", "helper", 5, Allow, "internal_bypass", "/usr/lib/agentsh/helper"),
        case("bypass before rules", "/usr/lib/agentsh/agentsh", "agentsh", 0, Allow, "internal_bypass", "/usr/lib/agentsh/agentsh"),
        case("bypass glob is one level", "/usr/lib/agentsh/x/agentsh", "agentsh", 0, Deny, "deny-agentsh", "/usr/lib/agentsh/x/agentsh"),
        case("bypass elsewhere", "/tmp/agentsh-unixwrap", "x", 0, Deny, "default", "/tmp/agentsh-unixwrap"),
    ];
    #[rustfmt::skip]
    cases.extend([
        // wrappers: the payload is judged at the exec's depth, stricter wins
        case("env curl nested", "/usr/bin/env", "env curl -s x", 1, Deny, "deny-nested-curl", "curl"),
        case("env curl direct", "/usr/bin/env", "env curl -s x", 0, Allow, "allow-installed", "/usr/bin/env"),
        case("env with options", "/usr/bin/env", "env -i -u HOME A=1 curl x", 1, Deny, "deny-nested-curl", "curl"),
        case("env nice curl", "/usr/bin/env", "env nice -n 5 curl", 1, Deny, "deny-nested-curl", "curl"),
        case("nice audits, payload allowed", "/usr/bin/nice", "nice ls", 1, Audit, "audit-nice", "/usr/bin/nice"),
        case("payload stricter than wrapper", "/usr/bin/nice", "nice curl", 1, Deny, "deny-nested-curl", "curl"),
        case("wrapper stricter than payload", "/usr/bin/env", "env nice ls", 1, Audit, "audit-nice", "nice"),
        case("payload approve beats audit", "/usr/bin/nice", "nice pip install x", 1, Approve, "approve-pip-install", "pip"),
        case("payload by path", "/usr/bin/env", "env /usr/bin/ncat -l", 1, Deny, "deny-nested-curl", "/usr/bin/ncat"),
        case("bare payload vs path rule", "/usr/bin/env", "env ncat -l", 1, Deny, "deny-nested-curl", "ncat"),
        case("bare payload vs ** catch-all", "/usr/bin/env", "env mystery", 0, Allow, "allow-installed", "/usr/bin/env"),
        case("payload args", "/usr/bin/timeout", "timeout 5 rm -rf x", 0, Deny, "deny-rm-rf", "rm"),
        case("payload depth", "/usr/bin/timeout", "timeout 5 make", 2, Audit, "audit-deep-make", "make"),
        case("payload .real", "/usr/bin/env", "env curl.real", 1, Deny, "deny-nested-curl", "curl.real"),
        case("nohup", "/usr/bin/nohup", "nohup curl", 1, Deny, "deny-nested-curl", "curl"),
        case("stdbuf", "/usr/bin/stdbuf", "stdbuf -oL curl", 1, Deny, "deny-nested-curl", "curl"),
        case("setsid", "/usr/bin/setsid", "setsid -f curl", 1, Deny, "deny-nested-curl", "curl"),
        case("ionice", "/usr/bin/ionice", "ionice -c3 curl", 1, Deny, "deny-nested-curl", "curl"),
        case("ionice -p has no payload", "/usr/bin/ionice", "ionice -c3 -p 42", 1, Allow, "allow-installed", "/usr/bin/ionice"),
        case("taskset", "/usr/bin/taskset", "taskset -c 0 curl", 1, Deny, "deny-nested-curl", "curl"),
        case("time", "/usr/bin/time", "time -v curl", 1, Deny, "deny-nested-curl", "curl"),
        case("busybox applet", "/bin/busybox", "busybox wget x", 1, Deny, "deny-nested-curl", "wget"),
        case("busybox by argv0", "/bin/busybox", "wget x", 1, Deny, "deny-nested-curl", "wget"),
        case("ld.so", "/lib64/ld-linux-x86-64.so.2", "/lib64/ld-linux-x86-64.so.2 /usr/bin/curl --version", 1, Deny, "deny-nested-curl", "/usr/bin/curl"),
        case("ld.so with options", "/lib64/ld-linux-x86-64.so.2", "ld.so --library-path /x --preload /y.so /usr/bin/curl", 1, Deny, "deny-nested-curl", "/usr/bin/curl"),
        case("ld.so direct", "/lib64/ld-linux-x86-64.so.2", "ld.so /usr/bin/curl", 0, Allow, "allow-installed", "/lib64/ld-linux-x86-64.so.2"),
        case("env ld.so curl", "/usr/bin/env", "env /lib64/ld-linux-x86-64.so.2 /usr/bin/curl", 1, Deny, "deny-nested-curl", "/usr/bin/curl"),
        case("env -S shebang", "/usr/bin/env", "env -Scurl x", 1, Deny, "deny-nested-curl", "curl"),
        case("wrapper without payload", "/usr/bin/env", "env A=1", 1, Allow, "allow-installed", "/usr/bin/env"),
        // unparsable wrappers fail closed, unless already denied
        case("unparsable env", "/usr/bin/env", "env --bogus curl", 0, Deny, "unparsable_wrapper", "/usr/bin/env"),
        case("unparsable payload wrapper", "/usr/bin/env", "env nice -x ls", 0, Deny, "unparsable_wrapper", "nice"),
        case("unparsable ld.so", "/lib64/ld-linux-x86-64.so.2", "ld.so --bogus /usr/bin/true", 0, Deny, "unparsable_wrapper", "/lib64/ld-linux-x86-64.so.2"),
        case("denied wrapper keeps its rule", "/usr/bin/chrt", "chrt -z 1 ls", 0, Deny, "deny-chrt", "/usr/bin/chrt"),
        case("denied wrapper, payload allowed", "/usr/bin/chrt", "chrt 1 ls", 0, Deny, "deny-chrt", "/usr/bin/chrt"),
    ]);
    let env_chain = format!("env {}ls", "env ".repeat(20));
    cases.push(Case {
        argv: argv(&env_chain),
        ..case(
            "endless wrapper chain",
            "/usr/bin/env",
            "",
            0,
            Deny,
            "unparsable_wrapper",
            "env",
        )
    });
    // Symlinks: both names are judged and the stricter stands.
    #[rustfmt::skip]
    cases.extend([
        Case { resolved: Some("/usr/bin/curl"), ..case("innocent link to curl", "/usr/bin/fetch", "fetch x", 1, Deny, "deny-nested-curl", "/usr/bin/curl") },
        Case { resolved: Some("/usr/bin/ls"), ..case("curl-named link to ls", "/usr/local/bin/curl", "curl", 1, Deny, "deny-nested-curl", "/usr/local/bin/curl") },
        Case { resolved: Some("/usr/bin/python3.12"), ..case("link, same result", "/usr/bin/python3", "python3", 1, Audit, "python-elsewhere", "/usr/bin/python3") },
        Case { resolved: Some("/tmp/evil"), ..case("link out of bypass", "/usr/lib/agentsh/x", "x", 0, Deny, "deny-tmp-tool", "/tmp/evil") },
        Case { resolved: Some("/usr/bin/ls"), ..case("link into an allowed place", "/srv/ls", "ls", 0, Deny, "default", "/srv/ls") },
        Case { resolved: Some("/usr/bin/env"), ..case("link to a wrapper", "/usr/local/bin/e", "e curl", 1, Deny, "deny-nested-curl", "curl") },
        Case { resolved: Some("/usr/bin/curl"), ..case("resolved equal to filename", "/usr/bin/curl", "curl", 0, Allow, "allow-installed", "/usr/bin/curl") },
    ]);
    run(&p, &cases);
}

#[test]
fn verdict_carries_the_rule_message() {
    let p = policy(TEST_POLICY);
    let args = argv("env curl x");
    let v = evaluate(
        &p,
        &ProgramFacts {
            filename: "/usr/bin/env",
            resolved: None,
            argv: &args,
            depth: 1,
        },
    );
    assert_eq!(
        v.message.as_deref(),
        Some("network tools are not allowed in nested commands")
    );
    let args = argv("env --bogus curl");
    let v = evaluate(
        &p,
        &ProgramFacts {
            filename: "/usr/bin/env",
            resolved: None,
            argv: &args,
            depth: 1,
        },
    );
    let m = v.message.expect("unparsable has a message");
    assert!(m.contains("/usr/bin/env") && m.contains("--bogus"), "{m}");
}

#[test]
fn unparsable_wrapper_decision_is_configurable() {
    use Decision::*;
    let observe = policy(
        "default: audit\nunparsable_wrapper: audit\ncommand_rules:\n  - {name: a, commands: [ls], decision: allow}\n",
    );
    let allow_default = policy("default: allow\n");
    #[rustfmt::skip]
    run(&observe, &[
        case("audit instead of deny", "/usr/bin/env", "env --bogus ls", 0, Audit, "unparsable_wrapper", "/usr/bin/env"),
        case("parsable", "/usr/bin/env", "env ls", 0, Audit, "default", "/usr/bin/env"),
    ]);
    #[rustfmt::skip]
    run(&allow_default, &[
        case("deny by default", "/usr/bin/env", "env --bogus ls", 0, Deny, "unparsable_wrapper", "/usr/bin/env"),
        case("allow default", "/usr/bin/env", "env ls", 0, Allow, "default", "/usr/bin/env"),
    ]);
}

/// The scenarios of the end-to-end suite, against the shipped agent-default.
#[test]
fn agent_default_scenarios() {
    use Decision::*;
    let p = Policy::from_yaml(shipped("agent-default").unwrap(), "embedded:agent-default")
        .unwrap_or_else(|e| panic!("{e}"));
    const LD: &str = "/lib64/ld-linux-x86-64.so.2";
    #[rustfmt::skip]
    let mut cases = vec![
        // sh -c 'ls; curl --version'
        case("the shell", "/bin/sh", "sh -c ls;curl", 0, Allow, "ordinary-locations", "/bin/sh"),
        case("the real shell", "/bin/sh.real", "sh -c ls;curl", 0, Allow, "ordinary-locations", "/bin/sh.real"),
        case("ls nested", "/usr/bin/ls", "ls", 1, Allow, "ordinary-locations", "/usr/bin/ls"),
        // Network tools are judged by where they go (egress), not by name.
        case("curl nested", "/usr/bin/curl", "curl --version", 1, Allow, "ordinary-locations", "/usr/bin/curl"),
        case("curl direct", "/usr/bin/curl", "curl --version", 0, Allow, "ordinary-locations", "/usr/bin/curl"),
        case("env su nested", "/usr/bin/env", "env su -c id", 1, Deny, "deny-privilege-escalation", "su"),
        case("ld.so su nested", LD, "/lib64/ld-linux-x86-64.so.2 /usr/bin/su -c id", 1, Deny, "deny-privilege-escalation", "/usr/bin/su"),
        case("rm -rf /", "/usr/bin/rm", "rm -rf /", 0, Deny, "deny-rm-root", "/usr/bin/rm"),
        case("rm -rf / nested", "/bin/rm", "rm -rf /", 1, Deny, "deny-rm-root", "/bin/rm"),
        case("rm -fr --no-preserve-root", "/bin/rm", "rm -fr --no-preserve-root /x", 1, Deny, "deny-rm-root", "/bin/rm"),
        case("rm -rf /* quoted", "/bin/rm", "rm -rf /*", 1, Deny, "deny-rm-root", "/bin/rm"),
        case("rm -rf /* expanded", "/bin/rm", "rm -rf /bin /boot /dev /etc", 1, Deny, "deny-rm-root", "/bin/rm"),
        case("rm -rf ~ quoted", "/bin/rm", "rm -rf ~", 1, Deny, "deny-rm-root", "/bin/rm"),
        case("rm -rf ~ expanded", "/bin/rm", "rm -rf /root", 1, Deny, "deny-rm-root", "/bin/rm"),
        case("rm -rf home", "/bin/rm", "rm -rf /home/user/", 1, Deny, "deny-rm-root", "/bin/rm"),
        case("rm -rf //", "/bin/rm", "rm -rf //", 1, Deny, "deny-rm-root", "/bin/rm"),
        case("rm in workspace", "/bin/rm", "rm -rf ./target /tmp/build /home/user/proj/dist", 1, Allow, "ordinary-locations", "/bin/rm"),
        case("rm a dotfile at /", "/bin/rm", "rm /.dockerenv", 1, Allow, "ordinary-locations", "/bin/rm"),
        case("sudo", "/usr/bin/sudo", "sudo ls", 0, Deny, "deny-privilege-escalation", "/usr/bin/sudo"),
        case("valgrind runs curl", "/usr/bin/valgrind", "valgrind --tool=none /usr/bin/curl", 1, Deny, "deny-foreign-loaders", "/usr/bin/valgrind"),
        case("a valgrind tool run directly", "/usr/libexec/valgrind/none-amd64-linux", "none-amd64-linux /usr/bin/curl", 1, Deny, "deny-foreign-loaders", "/usr/libexec/valgrind/none-amd64-linux"),
        case("qemu-user", "/usr/bin/qemu-x86_64-static", "qemu-x86_64-static /usr/bin/curl", 0, Deny, "deny-foreign-loaders", "/usr/bin/qemu-x86_64-static"),
        case("box64", "/usr/local/bin/box64", "box64 /w/curl", 1, Deny, "deny-foreign-loaders", "/usr/local/bin/box64"),
        case("FEX", "/usr/bin/FEXInterpreter", "FEXInterpreter /usr/bin/curl", 1, Deny, "deny-foreign-loaders", "/usr/bin/FEXInterpreter"),
        case("rr", "/usr/bin/rr", "rr record /usr/bin/curl", 1, Deny, "deny-foreign-loaders", "/usr/bin/rr"),
        case("busybox as a login-named applet", "/usr/bin/busybox", "-su -c id", 1, Deny, "deny-privilege-escalation", "su"),
        case("su nested", "/bin/su", "su -", 3, Deny, "deny-privilege-escalation", "/bin/su"),
        case("mount", "/usr/bin/mount", "mount -t tmpfs x /mnt", 0, Deny, "deny-kernel-admin-tools", "/usr/bin/mount"),
        case("iptables-legacy", "/usr/sbin/iptables-legacy", "iptables -F", 0, Deny, "deny-kernel-admin-tools", "/usr/sbin/iptables-legacy"),
        case("unshare", "/usr/bin/unshare", "unshare -r sh", 1, Deny, "deny-kernel-admin-tools", "/usr/bin/unshare"),
        case("agentsh", "/usr/bin/agentsh", "agentsh approvals approve x", 1, Deny, "deny-agentsh-cli", "/usr/bin/agentsh"),
        case("agentsh via env", "/usr/bin/env", "env agentsh server", 0, Deny, "deny-agentsh-cli", "agentsh"),
        // The readiness probe an SDK runs through its own shell: exactly it.
        case("agentsh ready", "/usr/bin/agentsh", "agentsh ready", 0, Allow, "allow-ready-probe", "/usr/bin/agentsh"),
        case("agentsh ready --timeout", "/usr/bin/agentsh", "agentsh ready --timeout 10", 1, Allow, "allow-ready-probe", "/usr/bin/agentsh"),
        case("agentsh ready --timeout=", "/usr/local/bin/agentsh", "agentsh ready --timeout=2.5", 1, Allow, "allow-ready-probe", "/usr/local/bin/agentsh"),
        case("agentsh ready --config", "/usr/bin/agentsh", "agentsh ready --config /x", 1, Deny, "deny-agentsh-cli", "/usr/bin/agentsh"),
        case("agentsh ready and more", "/usr/bin/agentsh", "agentsh ready --timeout 1 extra", 1, Deny, "deny-agentsh-cli", "/usr/bin/agentsh"),
        case("agentsh ready elsewhere", "/tmp/agentsh", "agentsh ready", 1, Deny, "deny-agentsh-cli", "/tmp/agentsh"),
        // (env's payload is the probe too; env's exec of it is judged again.)
        case("agentsh ready via env", "/usr/bin/env", "env agentsh ready", 0, Allow, "ordinary-locations", "/usr/bin/env"),
        case("agentsh approvals via env", "/usr/bin/env", "env agentsh approvals list", 0, Deny, "deny-agentsh-cli", "agentsh"),
        case("unixwrap bypass", "/usr/bin/agentsh-unixwrap", "agentsh-unixwrap", 0, Allow, "internal_bypass", "/usr/bin/agentsh-unixwrap"),
        case("shim bypass", "/usr/lib/agentsh/agentsh-shell-shim", "sh", 0, Allow, "internal_bypass", "/usr/lib/agentsh/agentsh-shell-shim"),
        // ordinary work
        case("git", "/usr/bin/git", "git status", 0, Allow, "ordinary-locations", "/usr/bin/git"),
        case("git-remote-https", "/usr/lib/git-core/git-remote-https", "git-remote-https origin", 2, Allow, "ordinary-locations", "/usr/lib/git-core/git-remote-https"),
        case("cargo", "/root/.cargo/bin/cargo", "cargo test", 0, Allow, "ordinary-locations", "/root/.cargo/bin/cargo"),
        case("test binary", "/workspace/target/debug/deps/app-1a2b", "app-1a2b", 2, Allow, "ordinary-locations", "/workspace/target/debug/deps/app-1a2b"),
        case("go test binary in /tmp (set GOTMPDIR)", "/tmp/go-build123/b001/pkg.test", "pkg.test", 2, Deny, "default", "/tmp/go-build123/b001/pkg.test"),
        case("dropped in /var/tmp", "/var/tmp/x", "x", 1, Deny, "default", "/var/tmp/x"),
        case("npm", "/usr/local/bin/npm", "npm install", 0, Allow, "ordinary-locations", "/usr/local/bin/npm"),
        case("venv python", "/home/user/proj/.venv/bin/python", "python -m pytest", 1, Allow, "ordinary-locations", "/home/user/proj/.venv/bin/python"),
        case("timeout pytest", "/usr/bin/timeout", "timeout 60 pytest -x", 1, Allow, "ordinary-locations", "/usr/bin/timeout"),
        case("nohup ./server", "/usr/bin/nohup", "nohup ./server", 1, Allow, "ordinary-locations", "/usr/bin/nohup"),
        // what default deny catches
        case("/dev/shm", "/dev/shm/x", "x", 1, Deny, "default", "/dev/shm/x"),
        case("/run", "/run/user/0/x", "x", 1, Deny, "default", "/run/user/0/x"),
        case("stray root file", "/x", "x", 1, Deny, "default", "/x"),
        case("fd without a path", "anon_inode:[memfd]", "x", 1, Deny, "default", "anon_inode:[memfd]"),
        case("memfd", "/memfd:payload (deleted)", "x", 1, Deny, "deny-fileless-exec", "/memfd:payload (deleted)"),
        case("deleted file", "/tmp/x (deleted)", "x", 1, Deny, "deny-fileless-exec", "/tmp/x (deleted)"),
        // unparsable
        case("env with unknown option", "/usr/bin/env", "env --frob ls", 1, Deny, "unparsable_wrapper", "/usr/bin/env"),
    ];
    #[rustfmt::skip]
    cases.extend([
        Case { resolved: Some("/usr/bin/python3.12"), ..case("self re-exec", "/proc/42/exe", "python3", 1, Allow, "ordinary-locations", "/proc/42/exe") },
        Case { resolved: Some("/memfd:x (deleted)"), ..case("fexecve of a memfd", "/proc/42/fd/3", "x", 1, Deny, "deny-fileless-exec", "/memfd:x (deleted)") },
        Case { resolved: Some("/dev/shm/x"), ..case("fexecve from shm", "/proc/42/fd/3", "x", 1, Deny, "default", "/dev/shm/x") },
        Case { resolved: Some("/usr/bin/su"), ..case("link to su", "/usr/local/bin/get", "get", 1, Deny, "deny-privilege-escalation", "/usr/bin/su") },
    ]);
    run(&p, &cases);
}

#[test]
fn agent_strict_and_observe_scenarios() {
    use Decision::*;
    let strict = Policy::from_yaml(shipped("agent-strict").unwrap(), "embedded:agent-strict")
        .unwrap_or_else(|e| panic!("{e}"));
    #[rustfmt::skip]
    run(&strict, &[
        case("curl direct", "/usr/bin/curl", "curl x", 0, Deny, "deny-network-tools", "/usr/bin/curl"),
        case("pip install", "/usr/bin/pip", "pip install requests", 1, Approve, "approve-pip-install", "/usr/bin/pip"),
        case("pip -q install", "/usr/bin/pip3", "pip3 -q install requests", 1, Approve, "approve-pip-install", "/usr/bin/pip3"),
        case("pip list", "/usr/bin/pip3", "pip3 list", 1, Allow, "installed-and-workspace-locations", "/usr/bin/pip3"),
        case("python -m pip install", "/usr/bin/python3", "python3 -m pip install x", 1, Approve, "approve-python-m-pip-install", "/usr/bin/python3"),
        case("python -m pytest", "/usr/bin/python3", "python3 -m pytest", 1, Allow, "installed-and-workspace-locations", "/usr/bin/python3"),
        case("npm i", "/usr/local/bin/npm", "npm i left-pad", 0, Approve, "approve-node-install", "/usr/local/bin/npm"),
        case("npm test", "/usr/local/bin/npm", "npm test", 0, Allow, "installed-and-workspace-locations", "/usr/local/bin/npm"),
        case("cargo install", "/root/.cargo/bin/cargo", "cargo install ripgrep", 0, Approve, "approve-cargo-install", "/root/.cargo/bin/cargo"),
        case("cargo build", "/root/.cargo/bin/cargo", "cargo build", 0, Allow, "installed-and-workspace-locations", "/root/.cargo/bin/cargo"),
        case("apt-get install", "/usr/bin/apt-get", "apt-get install -y jq", 0, Approve, "approve-system-package-install", "/usr/bin/apt-get"),
        case("env apt-get install", "/usr/bin/env", "env DEBIAN_FRONTEND=noninteractive apt-get install -y jq", 0, Approve, "approve-system-package-install", "apt-get"),
        case("exec from /tmp", "/tmp/x", "x", 1, Deny, "default", "/tmp/x"),
    ]);
    let observe = Policy::from_yaml(shipped("agent-observe").unwrap(), "embedded:agent-observe")
        .unwrap_or_else(|e| panic!("{e}"));
    #[rustfmt::skip]
    run(&observe, &[
        case("nested curl", "/usr/bin/curl", "curl x", 1, Audit, "default", "/usr/bin/curl"),
        case("rm -rf /", "/bin/rm", "rm -rf /", 0, Audit, "would-deny-rm-root", "/bin/rm"),
        case("ls", "/bin/ls", "ls", 0, Audit, "default", "/bin/ls"),
        case("unparsable", "/usr/bin/env", "env --frob ls", 0, Audit, "unparsable_wrapper", "/usr/bin/env"),
    ]);
}

#[test]
fn shipped_policies_load_and_observe_denies_nothing() {
    assert_eq!(SHIPPED.len(), 3);
    for (name, text) in SHIPPED {
        let p =
            Policy::from_yaml(text, &format!("embedded:{name}")).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(p.name(), *name);
        assert!(p.description().is_some(), "{name} has a description");
        assert!(p.summary().contains("OK"));
        // Nothing in a shipped file may bypass the agentsh CLI itself.
        assert!(
            !p.internal_bypass
                .iter()
                .any(|m| m.matches("/usr/bin/agentsh")
                    || m.matches("/usr/local/bin/agentsh")
                    || m.matches("/usr/lib/agentsh/agentsh")),
            "{name} bypasses the CLI"
        );
    }
    let observe = Policy::from_yaml(shipped("agent-observe").unwrap(), "x").unwrap();
    assert_eq!(observe.default_decision(), Decision::Audit);
    assert!(observe
        .command_rules
        .iter()
        .all(|r| r.decision != Decision::Deny));
    assert!(observe.file_rules().is_empty() && observe.network_rules().is_empty());
    assert!(observe.blocked_syscalls().is_empty());
    assert_eq!(observe.unparsable_wrapper, Decision::Audit);

    let default = Policy::from_yaml(shipped("agent-default").unwrap(), "x").unwrap();
    assert_eq!(default.default_decision(), Decision::Deny);
    // Keyrings, namespaces and the rest are base rules (filter::table):
    // nothing for a shipped policy to add.
    assert!(default.blocked_syscalls().is_empty());

    let strict = Policy::from_yaml(shipped("agent-strict").unwrap(), "x").unwrap();
    assert!(strict
        .file_rules()
        .iter()
        .any(|r| r.paths.iter().any(|p| p.starts_with("${WORKSPACE}"))));
    assert!(strict
        .network_rules()
        .iter()
        .any(|r| r.direction == NetworkDirection::Bind && r.ports == PortSet::Any));
}

#[test]
fn full_schema_parses() {
    let p = policy(
        r#"
name: full
description: every field
default: approve
unparsable_wrapper: approve
internal_bypass: ["/usr/bin/agentsh*", "/usr/lib/agentsh/*"]
command_rules:
  - name: deny-nested-curl
    commands: [curl, wget, "/usr/bin/nc*"]
    args_patterns: ["(^| )-rf( |$)"]
    context: [direct, nested]
    decision: deny
    message: "network tools are not allowed in nested commands"
  - name: single-kind
    commands: [ls]
    context: nested
    decision: audit
  - name: range-open
    commands: [ls]
    context: {min_depth: 2}
    decision: allow
file_rules:
  - name: workspace-rw
    paths: ["${WORKSPACE}", "${WORKSPACE}/**"]
    operations: [read, write, create, delete, execute]
    decision: allow
network_rules:
  - name: https-out
    ports: [443, 80]
    direction: connect
    decision: allow
  - name: no-bind
    ports: any
    direction: bind
    decision: deny
syscalls:
  block: [keyctl, add_key]
"#,
    );
    assert_eq!(p.name(), "full");
    assert_eq!(p.default_decision(), Decision::Approve);
    assert_eq!(p.command_rules.len(), 3);
    assert_eq!(p.command_rules[0].depth, compile::DepthRange::ANY);
    assert_eq!(
        p.command_rules[1].depth,
        compile::DepthRange {
            min: 1,
            max: u32::MAX
        }
    );
    assert_eq!(
        p.command_rules[2].depth,
        compile::DepthRange {
            min: 2,
            max: u32::MAX
        }
    );
    assert_eq!(
        p.file_rules(),
        [FileRule {
            name: "workspace-rw".into(),
            paths: vec!["${WORKSPACE}".into(), "${WORKSPACE}/**".into()],
            operations: vec![
                FileOperation::Read,
                FileOperation::Write,
                FileOperation::Create,
                FileOperation::Delete,
                FileOperation::Execute
            ],
            decision: Decision::Allow,
        }]
    );
    assert_eq!(p.network_rules()[0].ports, PortSet::List(vec![443, 80]));
    assert!(p.network_rules()[0].ports.contains(80));
    assert_eq!(p.network_rules()[1].ports, PortSet::Any);
    assert_eq!(p.network_rules()[1].direction, NetworkDirection::Bind);
    assert_eq!(p.blocked_syscalls(), ["keyctl", "add_key"]);

    // Minimal: only `default`; the name comes from the origin.
    let p = Policy::from_yaml("default: allow\n", "/etc/agentsh/policies/mine.yaml").unwrap();
    assert_eq!(p.name(), "mine");
    assert!(p.command_rules.is_empty() && p.file_rules().is_empty());
    let p =
        Policy::from_yaml("default: allow\ncommand_rules:\nfile_rules: []\n", "x.yaml").unwrap();
    assert!(p.command_rules.is_empty());
}

/// (policy text, line, column if checked, fragment of the message)
type ErrorCase = (&'static str, usize, Option<usize>, &'static str);

#[test]
fn errors_point_at_the_offending_line() {
    #[rustfmt::skip]
    let cases: &[ErrorCase] = &[
        // YAML syntax
        ("default: deny\ncommand_rules:\n  - name: x\n    commands: [ls\n    decision: deny\n", 5, None, "did not find expected"),
        ("default: deny\n\tname: x\n", 2, None, ""),
        ("default: deny\ncommand_rules: [\n", 3, None, ""),
        // schema: unknown fields anywhere, bad values, missing fields
        ("default: deny\ncomand_rules: []\n", 2, None, "unknown field `comand_rules`"),
        ("default: deny\ncommand_rules:\n  - name: a\n    commands: [ls]\n    decison: deny\n", 5, None, "unknown field `decison`"),
        ("default: deny\ncommand_rules:\n  - name: a\n    commands: [ls]\n    decision: maybe\n", 5, None, "unknown variant `maybe`"),
        ("default: sometimes\n", 1, None, "unknown variant `sometimes`"),
        ("name: x\n", 1, None, "missing field `default`"),
        ("default: deny\ncommand_rules:\n  - commands: [ls]\n    decision: deny\n", 3, None, "missing field `name`"),
        ("default: deny\ncommand_rules:\n  - name: a\n    commands: [ls]\n    decision: deny\n    context: [inside]\n", 6, None, "unknown variant `inside`"),
        ("default: deny\ncommand_rules:\n  - name: a\n    commands: [ls]\n    decision: deny\n    context: {min_depth: 1, max: 2}\n", 6, None, "unknown field `max`"),
        ("default: deny\nfile_rules:\n  - name: f\n    paths: [/x]\n    operations: [read, chmod]\n    decision: allow\n", 5, None, "unknown variant `chmod`"),
        ("default: deny\nnetwork_rules:\n  - name: n\n    ports: [70000]\n    direction: connect\n    decision: allow\n", 4, None, ""),
        ("default: deny\nnetwork_rules:\n  - name: n\n    ports: all\n    direction: connect\n    decision: allow\n", 4, None, "`any`"),
        ("default: deny\nnetwork_rules:\n  - name: n\n    ports: [1]\n    direction: sideways\n    decision: allow\n", 5, None, "unknown variant `sideways`"),
        ("default: deny\nsyscalls:\n  blok: [x]\n", 3, None, "unknown field `blok`"),
        // semantic: found in the text
        ("default: deny\ncommand_rules:\n  - name: a\n    commands: [ls]\n    decision: deny\n  - name: b\n    commands: [ls]\n    args_patterns: ['ok', '(unclosed']\n    decision: deny\n", 8, Some(27), "invalid regex"),
        ("default: deny\ncommand_rules:\n  - name: a\n    commands: [\"py***\"]\n    decision: deny\n", 4, Some(16), "invalid glob"),
        ("default: deny\ncommand_rules:\n  - name: a\n    commands:\n      - ls\n      - bin/ls\n    decision: deny\n", 6, Some(9), "not absolute"),
        ("default: deny\ncommand_rules:\n  - name: a\n    commands: []\n    decision: deny\n", 4, None, "commands: is empty"),
        ("default: deny\ncommand_rules:\n  - name: a\n    commands: [ls]\n    decision: deny\n  - name: a\n    commands: [ls]\n    decision: deny\n", 6, Some(11), "duplicate rule name \"a\""),
        ("default: deny\ncommand_rules:\n  - name: default\n    commands: [ls]\n    decision: deny\n", 3, None, "reserved"),
        ("default: deny\ncommand_rules:\n  - name: a\n    commands: [ls]\n    args_patterns: []\n    decision: deny\n", 5, None, "would match nothing"),
        ("default: deny\ncommand_rules:\n  - name: a\n    commands: [ls]\n    context: []\n    decision: deny\n", 5, None, "would match nothing"),
        ("default: deny\ncommand_rules:\n  - name: a\n    commands: [ls]\n    context: {min_depth: 3, max_depth: 1}\n    decision: deny\n", 5, None, "greater than"),
        ("default: deny\ninternal_bypass:\n  - /usr/bin/x\n  - usr/bin/y\n", 4, Some(5), "not an absolute path"),
        ("default: deny\nfile_rules:\n  - name: f\n    paths: [/x, '${WORKDIR}/**']\n    operations: [read]\n    decision: allow\n", 4, Some(17), "unknown variable"),
        ("default: deny\nfile_rules:\n  - name: f\n    paths: [/x]\n    operations: [read]\n    decision: audit\n", 6, Some(15), "use allow or deny"),
        ("default: deny\nfile_rules:\n  - name: f\n    paths: [/x]\n    operations: []\n    decision: allow\n", 5, None, "operations: is empty"),
        ("default: deny\nnetwork_rules:\n  - name: n\n    ports: [443, 0]\n    direction: connect\n    decision: allow\n", 4, Some(18), "port 0"),
        ("default: deny\nnetwork_rules:\n  - name: n\n    ports: []\n    direction: connect\n    decision: allow\n", 4, None, "ports: is empty"),
        ("default: deny\nsyscalls:\n  block: [keyctl, Bad-Name]\n", 3, Some(19), "not a syscall name"),
        ("default: deny\nunparsable_wrapper: allow\n", 2, None, "use audit"),
        ("name: a/b\ndefault: deny\n", 1, None, "may only use"),
    ];
    for (text, line, column, fragment) in cases {
        let err = Policy::from_yaml(text, "p.yaml").expect_err(text);
        let shown = err.to_string();
        assert_eq!(err.origin(), "p.yaml", "{shown}");
        assert_eq!(err.line(), Some(*line), "{text}\n=> {shown}");
        if let Some(column) = column {
            assert_eq!(
                err.location().map(|l| l.column),
                Some(*column),
                "{text}\n=> {shown}"
            );
        }
        assert!(shown.contains(fragment), "{text}\n=> {shown}");
        assert!(shown.starts_with(&format!("p.yaml:{line}:")), "{shown}");
        // The location is said once, at the front.
        let l = err.location().unwrap();
        let again = format!(" at line {} column {}", l.line, l.column);
        assert!(!shown.contains(&again), "{shown}");
    }
}

#[test]
fn semantic_errors_name_the_rule() {
    let err = Policy::from_yaml(
        "default: deny\ncommand_rules:\n  - name: bad-one\n    commands: [ls]\n    args_patterns: ['(']\n    decision: deny\n",
        "p.yaml",
    )
    .unwrap_err();
    match &err {
        PolicyError::Invalid { rule, message, .. } => {
            assert_eq!(rule.as_deref(), Some("bad-one"));
            assert!(
                message.contains("command_rules[0] \"bad-one\""),
                "{message}"
            );
        }
        other => panic!("{other:?}"),
    }
}

/// A scratch directory, removed on drop.
struct Scratch(std::path::PathBuf);

impl Scratch {
    fn new(tag: &str) -> Scratch {
        let dir = std::env::temp_dir().join(format!("agentsh-policy-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Scratch(dir)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[test]
fn resolve_prefers_the_directory_then_the_shipped_copy() {
    let dir = Scratch::new("resolve");
    let d = dir.0.as_path();
    std::fs::write(
        d.join("agent-default.yaml"),
        "name: overridden\ndefault: allow\n",
    )
    .unwrap();
    std::fs::write(d.join("mine.yaml"), "default: audit\n").unwrap();
    std::fs::write(d.join("broken.yaml"), "default: deny\nbogus: 1\n").unwrap();

    let p = Policy::resolve("agent-default", d).unwrap();
    assert_eq!(p.name(), "overridden");
    assert_eq!(
        p.origin(),
        d.join("agent-default.yaml").display().to_string()
    );

    let p = Policy::resolve("agent-strict", d).unwrap();
    assert_eq!(p.name(), "agent-strict");
    assert_eq!(p.origin(), "embedded:agent-strict");

    let p = Policy::resolve("mine", d).unwrap();
    assert_eq!(p.name(), "mine");
    assert_eq!(p.default_decision(), Decision::Audit);

    let path = d.join("mine.yaml");
    let p = Policy::resolve(path.to_str().unwrap(), Path::new("/nonexistent")).unwrap();
    assert_eq!(p.name(), "mine");

    let err = Policy::resolve("broken", d).unwrap_err();
    assert_eq!(err.line(), Some(2), "{err}");

    let err = Policy::resolve("nope", d).unwrap_err();
    assert!(matches!(err, PolicyError::NotFound { .. }), "{err}");
    assert!(err.to_string().contains("agent-observe"), "{err}");

    let err = Policy::resolve("..", d).unwrap_err();
    assert!(matches!(err, PolicyError::BadName { .. }), "{err}");

    let err = Policy::resolve("missing.yaml", d).unwrap_err();
    assert!(matches!(err, PolicyError::Read { .. }), "{err}");

    // check_file: the summary, or the error with its location.
    let summary = check_file(&d.join("agent-default.yaml")).unwrap();
    assert!(summary.contains("policy \"overridden\""), "{summary}");
    let err = check_file(&d.join("broken.yaml")).unwrap_err();
    assert!(err.to_string().contains("broken.yaml:2:"), "{err}");
}

#[test]
fn summary_lists_rules() {
    let s = policy(TEST_POLICY).summary();
    for needle in [
        "policy \"test\" (test.yaml): OK",
        "default: deny",
        "deny-nested-curl [curl wget /usr/bin/nc*, nested]",
        "audit-deep-make [make, depth 2..=3]",
        "deny-rm-rf [rm, 2 args pattern(s)]",
    ] {
        assert!(s.contains(needle), "{needle}\n{s}");
    }
}

#[test]
fn odd_documents_are_clear_errors() {
    let cases: &[(&str, &str)] = &[
        ("", "missing field `default`"),
        ("# only a comment\n", "missing field `default`"),
        ("- a\n- b\n", "expected struct"),
        (
            "default: deny\n---\ndefault: allow\n",
            "more than one document",
        ),
        ("default: deny\ndefault: allow\n", "duplicate"),
    ];
    for (text, fragment) in cases {
        let err = Policy::from_yaml(text, "p.yaml").expect_err(text);
        let shown = err.to_string();
        assert!(shown.starts_with("p.yaml"), "{shown}");
        assert!(shown.contains(fragment), "{text:?} => {shown}");
    }
}

#[test]
fn policy_is_shared_across_supervisor_threads() {
    fn shareable<T: Send + Sync + 'static>() {}
    shareable::<Policy>();
    shareable::<Verdict>();
}

/// Rules as YAML list items under `file_rules:`.
fn file_rules(items: &str) -> Vec<FileRule> {
    policy(&format!("default: allow\nfile_rules:\n{items}\n"))
        .file_rules()
        .to_vec()
}

#[test]
fn each_file_operation_is_open_an_allow_list_or_a_deny_list() {
    use semantics::FileOpKind::*;
    use FileOperation::*;
    #[rustfmt::skip]
    let cases: &[(&str, &[(FileOperation, semantics::FileOpKind)])] = &[
        ("- {name: d, paths: [/s], operations: [read], decision: deny}",
         &[(Read, DenyList), (Write, Open), (Execute, Open)]),
        ("- {name: a, paths: [/w/**], operations: [write], decision: allow}",
         &[(Write, AllowList), (Read, Open), (Create, Open)]),
        ("- {name: a, paths: [/w/**], operations: [write], decision: allow}\n- {name: d, paths: [/w/x], operations: [write, delete], decision: deny}",
         &[(Write, AllowList), (Delete, DenyList)]),
        // Decided from the rules as written: an allow whose variable may be
        // unset still makes an allow-list (never "everything").
        ("- {name: a, paths: [\"${WORKSPACE}/**\"], operations: [execute], decision: allow}\n- {name: d, paths: [/tmp/**], operations: [execute], decision: deny}",
         &[(Execute, AllowList)]),
        ("- {name: d, paths: [/tmp/**], operations: [create, execute], decision: deny}",
         &[(Create, DenyList), (Execute, DenyList), (Read, Open)]),
    ];
    for (items, want) in cases {
        let rules = file_rules(items);
        for (op, kind) in *want {
            assert_eq!(
                semantics::file_op_kind(&rules, *op),
                *kind,
                "{op:?} under {items}"
            );
        }
    }
}

#[test]
fn tcp_port_tables() {
    use NetworkDirection::*;
    let r = |ports: PortSet, direction, decision| NetworkRule {
        name: "r".into(),
        ports,
        direction,
        decision,
    };
    let list = |p: &[u16]| PortSet::List(p.to_vec());
    let only = |p: &[u16]| Ok(Some(p.iter().copied().collect::<BTreeSet<u16>>()));
    type Want = Result<Option<BTreeSet<u16>>, &'static str>;
    let cases: Vec<(NetworkDirection, Vec<NetworkRule>, Want)> = vec![
        // No rule: unrestricted.
        (Connect, vec![], Ok(None)),
        // A rule for bind leaves connect open.
        (
            Connect,
            vec![r(list(&[80]), Bind, Decision::Allow)],
            Ok(None),
        ),
        (
            Bind,
            vec![r(list(&[80]), Bind, Decision::Allow)],
            only(&[80]),
        ),
        (
            Connect,
            vec![r(list(&[443]), Connect, Decision::Allow)],
            only(&[443]),
        ),
        // `any` + deny closes the direction.
        (
            Connect,
            vec![r(PortSet::Any, Connect, Decision::Deny)],
            only(&[]),
        ),
        (
            Connect,
            vec![r(PortSet::Any, Connect, Decision::Allow)],
            Ok(None),
        ),
        // Once an allow names ports, an allow-list (first match per port).
        (
            Connect,
            vec![
                r(list(&[22]), Connect, Decision::Deny),
                r(list(&[22, 443]), Connect, Decision::Allow),
            ],
            only(&[443]),
        ),
        (
            Connect,
            vec![
                r(list(&[443]), Connect, Decision::Allow),
                r(PortSet::Any, Connect, Decision::Deny),
                r(list(&[80]), Connect, Decision::Allow),
            ],
            only(&[443]),
        ),
        // "Every port but these": refused, with the allow-list to write.
        (
            Connect,
            vec![r(list(&[9]), Connect, Decision::Deny)],
            Err("denies TCP connect to port 9 and no rule allows any port"),
        ),
        (
            Bind,
            vec![r(list(&[9, 25]), Bind, Decision::Deny)],
            Err("denies TCP bind to ports 9, 25"),
        ),
        (
            Connect,
            vec![
                r(list(&[22]), Connect, Decision::Deny),
                r(PortSet::Any, Connect, Decision::Allow),
            ],
            Err("allows TCP connect to every port except port 22"),
        ),
    ];
    for (dir, rules, want) in cases {
        match (semantics::tcp_ports(&rules, dir), want) {
            (Ok(got), Ok(want)) => assert_eq!(got, want, "{rules:?}"),
            (Err(e), Err(frag)) => {
                assert!(e.message.contains(frag), "{rules:?}: {}", e.message);
                assert!(
                    e.message
                        .contains("decision: allow}` (every port not listed is closed"),
                    "{}",
                    e.message
                );
            }
            (got, want) => panic!("{rules:?}: got {got:?}, want {want:?}"),
        }
    }
}

#[test]
fn rules_landlock_cannot_enforce_are_refused_with_what_to_write() {
    #[rustfmt::skip]
    let cases: &[(&str, usize, &[&str])] = &[
        // (policy after `default: allow`, line of the error, message fragments)
        ("network_rules:\n  - name: no-discard\n    ports: [9]\n    direction: connect\n    decision: deny\n",
         6, &["network_rules[0] \"no-discard\"", "no rule allows any port",
              "ports: [80, 443], direction: connect, decision: allow", "every port not listed is closed"]),
        ("network_rules:\n  - {name: no-ssh, ports: [22], direction: connect, decision: deny}\n  - {name: rest, ports: any, direction: connect, decision: allow}\n",
         4, &["network_rules[1] \"rest\"", "every port except port 22 (denied by \"no-ssh\")"]),
        ("file_rules:\n  - {name: scratch, paths: [/tmp/ok/**], operations: [write], decision: allow}\n  - {name: no-tmp, paths: [/tmp/**], operations: [write], decision: deny}\n",
         3, &["file_rules[0] \"scratch\"", "allows write only beneath paths that file rule \"no-tmp\" denies",
              "add \"/**\" to this rule's paths"]),
        ("file_rules:\n  - {name: same, paths: [/x], operations: [read], decision: allow}\n  - {name: no-x, paths: [/x/**], operations: [read], decision: deny}\n",
         3, &["file_rules[0] \"same\"", "read would be denied everywhere else"]),
        ("file_rules:\n  - name: env\n    paths: [/proc/self/environ]\n    operations: [read]\n    decision: deny\n",
         4, &["file_rules[0] \"env\"", "cannot be denied on its own", "Deny \"/proc/**\" as a whole"]),
    ];
    for (text, line, frags) in cases {
        let err = Policy::from_yaml(&format!("default: allow\n{text}"), "p.yaml").unwrap_err();
        let shown = err.to_string();
        assert_eq!(err.line(), Some(*line), "{shown}");
        for f in *frags {
            assert!(shown.contains(f), "{f}\n{shown}");
        }
    }
    // Expressible neighbours load.
    for ok in [
        "file_rules:\n  - {name: all, paths: [\"/**\"], operations: [write], decision: allow}\n  - {name: no-tmp, paths: [/tmp/**], operations: [write], decision: deny}\n  - {name: ok, paths: [/tmp/ok/**], operations: [write], decision: allow}\n",
        "file_rules:\n  - {name: none, paths: [\"/**\"], operations: [read], decision: deny}\n  - {name: ws, paths: [/w/**], operations: [read], decision: allow}\n",
        "file_rules:\n  - {name: no-proc, paths: [\"/proc/**\"], operations: [read], decision: deny}\n  - {name: own, paths: [\"/proc/self/**\"], operations: [write], decision: allow}\n",
        "file_rules:\n  - {name: d, paths: [/srv/ws/secret.txt], operations: [read], decision: deny}\n",
        "network_rules:\n  - {name: no-listen, ports: any, direction: bind, decision: deny}\n  - {name: https, ports: [443], direction: connect, decision: allow}\n  - {name: no-ssh, ports: [22], direction: connect, decision: deny}\n",
    ] {
        let text = format!("default: allow\n{ok}");
        Policy::from_yaml(&text, "p.yaml").unwrap_or_else(|e| panic!("{e}\n{text}"));
    }
}

#[test]
fn the_summary_says_what_each_file_operation_means() {
    let s = policy(
        "default: allow\nfile_rules:\n  - {name: no-secret, paths: [/srv/ws/secret.txt], operations: [read], decision: deny}\n  - {name: ws, paths: [\"${WORKSPACE}/**\"], operations: [write], decision: allow}\n  - {name: ro, paths: [\"${WORKSPACE}/.git/**\"], operations: [write], decision: deny}\n",
    )
    .summary();
    for needle in [
        "read: allowed everywhere except beneath /srv/ws/secret.txt (deny-only)",
        "write: allowed only beneath ${WORKSPACE}/**, except beneath ${WORKSPACE}/.git/**",
        "execute: not restricted by the policy",
        "create: not restricted by the policy",
    ] {
        assert!(s.contains(needle), "{needle}\n{s}");
    }
}

/// `judge`: the whole exec, table-driven: (what, facts, decision, rule, judged).
#[test]
fn judge_decides_the_whole_exec() {
    let p = policy(
        r#"
name: judge
default: allow
command_rules:
  - name: deny-curl
    commands: [curl]
    context: [nested]
    decision: deny
  - name: approve-pip
    commands: [pip]
    decision: approve
  - name: audit-make
    commands: [make]
    decision: audit
"#,
    );
    let prog = |filename: &'static str, args: &'static str| ProgramFacts {
        filename,
        resolved: None,
        argv: Box::leak(argv(args).into_boxed_slice()),
        depth: 1,
    };
    let plain = |program| ExecFacts {
        program,
        anonymous: false,
        truncated: None,
        interpreters: &[],
        copy_of: &[],
        loader_payloads: &[],
    };
    let interp = |path: &str, resolved: Option<&str>, copy_of: &[&str]| Interpreter {
        path: path.into(),
        resolved: resolved.map(str::to_string),
        argv: argv(&format!("{path} /w/s")),
        copy_of: copy_of
            .iter()
            .map(std::string::ToString::to_string)
            .collect(),
    };
    let limits = |deny| Truncation {
        deny,
        max_argc: 10,
        max_argv_bytes: 100,
    };
    let chain_curl = [
        interp("/w/inner", None, &[]),
        interp("/usr/bin/curl", None, &[]),
    ];
    let symlinked = [interp("/w/innocent", Some("/usr/bin/curl"), &[])];
    let copied = [interp("/w/fetch", None, &["/usr/bin/curl"])];
    let env_curl = [Interpreter {
        path: "/usr/bin/env".into(),
        resolved: None,
        argv: argv("/usr/bin/env curl /w/s"),
        copy_of: vec![],
    }];
    let curl_copy = ["/usr/bin/curl".to_string()];
    let pip_copy = ["/usr/bin/pip".to_string()];
    let cases: Vec<(&str, ExecFacts<'_>, Decision, &str, &str)> = vec![
        (
            "plain allow",
            plain(prog("/usr/bin/ls", "ls")),
            Decision::Allow,
            "default",
            "/usr/bin/ls",
        ),
        (
            "plain deny",
            plain(prog("/usr/bin/curl", "curl x")),
            Decision::Deny,
            "deny-curl",
            "/usr/bin/curl",
        ),
        (
            "a memfd is denied whatever the policy",
            ExecFacts {
                anonymous: true,
                ..plain(prog("/memfd:x (deleted)", "x"))
            },
            Decision::Deny,
            RULE_FILELESS_EXEC,
            "/memfd:x (deleted)",
        ),
        (
            "truncated and on_truncated deny",
            ExecFacts {
                truncated: Some(limits(true)),
                ..plain(prog("/usr/bin/ls", "ls"))
            },
            Decision::Deny,
            RULE_TRUNCATED,
            "/usr/bin/ls",
        ),
        (
            "truncated and on_truncated allow",
            ExecFacts {
                truncated: Some(limits(false)),
                ..plain(prog("/usr/bin/ls", "ls"))
            },
            Decision::Allow,
            "default",
            "/usr/bin/ls",
        ),
        (
            "a script whose interpreter's interpreter is curl",
            ExecFacts {
                interpreters: &chain_curl,
                ..plain(prog("/w/s", "s"))
            },
            Decision::Deny,
            "deny-curl",
            "/usr/bin/curl",
        ),
        (
            "a script whose interpreter is a symlink to curl",
            ExecFacts {
                interpreters: &symlinked,
                ..plain(prog("/w/s", "s"))
            },
            Decision::Deny,
            "deny-curl",
            "/usr/bin/curl",
        ),
        (
            "a script whose interpreter is a copy of curl",
            ExecFacts {
                interpreters: &copied,
                ..plain(prog("/w/s", "s"))
            },
            Decision::Deny,
            "deny-curl",
            "/usr/bin/curl",
        ),
        (
            "#!/usr/bin/env curl",
            ExecFacts {
                interpreters: &env_curl,
                ..plain(prog("/w/s", "s"))
            },
            Decision::Deny,
            "deny-curl",
            "curl",
        ),
        (
            "a renamed copy of curl",
            ExecFacts {
                copy_of: &curl_copy,
                ..plain(prog("/tmp/x", "x"))
            },
            Decision::Deny,
            "deny-curl",
            "/usr/bin/curl",
        ),
        (
            "a copy of pip needs approval",
            ExecFacts {
                copy_of: &pip_copy,
                ..plain(prog("/w/p", "p install"))
            },
            Decision::Approve,
            "approve-pip",
            "/usr/bin/pip",
        ),
        (
            "the loader's payload: a symlink to curl",
            ExecFacts {
                loader_payloads: &symlinked,
                ..plain(prog(
                    "/lib64/ld-linux-x86-64.so.2",
                    "ld-linux-x86-64.so.2 ./innocent",
                ))
            },
            Decision::Deny,
            "deny-curl",
            "/usr/bin/curl",
        ),
        (
            "the loader's payload: a renamed copy of curl",
            ExecFacts {
                loader_payloads: &copied,
                ..plain(prog("/w/myld", "myld /w/fetch"))
            },
            Decision::Deny,
            "deny-curl",
            "/usr/bin/curl",
        ),
        (
            "audit stays audit when nothing stricter",
            plain(prog("/usr/bin/make", "make -j2")),
            Decision::Audit,
            "audit-make",
            "/usr/bin/make",
        ),
    ];
    for (what, facts, decision, rule, judged) in cases {
        let v = judge(&p, &facts);
        assert_eq!(
            (v.decision, v.rule.as_str(), v.judged.as_str()),
            (decision, rule, judged),
            "{what}: {v:?}"
        );
    }
    // A copy's verdict says what it is a copy of.
    let v = judge(
        &p,
        &ExecFacts {
            copy_of: &curl_copy,
            ..plain(prog("/tmp/x", "x"))
        },
    );
    assert!(v.message.unwrap().contains("copy of /usr/bin/curl"));
}

/// `multi_call:` names more multi-call binaries: judged as the applet
/// argv[0] (or, under its own name, argv[1]) picks, by busybox's rule.
#[test]
fn a_policy_names_more_multi_call_binaries() {
    let yaml = |extra: &str| {
        format!(
            "default: allow\n{extra}command_rules:\n  - {{name: no-wget, commands: [wget], decision: deny}}\n"
        )
    };
    let with = Policy::from_yaml(&yaml("multi_call: [mybox]\n"), "t.yaml").unwrap();
    let without = Policy::from_yaml(&yaml(""), "t.yaml").unwrap();
    let run = |p: &Policy, argv: &[&str]| {
        let argv: Vec<String> = argv.iter().map(|a| (*a).to_string()).collect();
        evaluate(
            p,
            &ProgramFacts {
                filename: "/usr/local/bin/mybox",
                resolved: None,
                argv: &argv,
                depth: 1,
            },
        )
        .rule
    };
    for argv in [
        &["-wget", "-q", "x"][..],
        &["wget", "x"],
        &["mybox", "wget", "x"],
        &["/opt/mybox", "/x/wget"],
    ] {
        assert_eq!(run(&with, argv), "no-wget", "{argv:?}");
        assert_eq!(run(&without, argv), "default", "{argv:?}");
    }
    assert_eq!(run(&with, &["mybox", "ls"]), "default");
    let err = Policy::from_yaml(&yaml("multi_call: [/bin/mybox]\n"), "t.yaml")
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(err.contains("is not a file name"), "{err}");
}

/// An earlier first-match rule that matches everything a later one names,
/// at its depths, whatever the arguments, makes it unreachable: the design
/// documents' own default policy had `dev-tools` allowing pip and npm before
/// `pkg-install` could ask. A narrower earlier rule (arguments, depth, other
/// programs) shadows nothing; the shipped policies have no such rule.
#[test]
fn shadowed_rules_are_found_and_only_they() {
    let p = |rules: &[&str]| {
        let rules: String = rules.iter().map(|r| format!("  - {r}\n")).collect();
        Policy::from_yaml(&format!("default: deny\ncommand_rules:\n{rules}"), "t.yaml").unwrap()
    };
    let shadowed = p(&[
        "{name: dev-tools, commands: [pip, npm, node], decision: allow}",
        "{name: pkg-install, commands: [pip, npm], args_patterns: ['^install'], decision: approve}",
        "{name: usr, commands: [\"/usr/**\"], decision: allow}",
        "{name: usr-curl, commands: [/usr/bin/curl], decision: deny}",
    ]);
    let w = shadowed.shadowed_rules();
    assert_eq!(w.len(), 2, "{w:?}");
    assert!(
        w[0].contains("\"pkg-install\" is never reached") && w[0].contains("\"dev-tools\""),
        "{w:?}"
    );
    assert!(w[1].contains("\"usr-curl\" is never reached"), "{w:?}");
    let fine = p(&[
        "{name: pkg-install, commands: [pip], args_patterns: ['^install'], decision: approve}",
        "{name: dev-tools, commands: [pip, npm], decision: allow}",
        "{name: nested, commands: [curl], context: [nested], decision: deny}",
        "{name: any-curl, commands: [curl], decision: allow}",
        "{name: usr, commands: [\"/usr/**\"], decision: allow}",
        "{name: other, commands: [wget], decision: deny}",
    ]);
    assert!(
        fine.shadowed_rules().is_empty(),
        "{:?}",
        fine.shadowed_rules()
    );
    for name in ["agent-default", "agent-strict", "agent-observe"] {
        let policy = Policy::from_yaml(shipped(name).unwrap(), name).unwrap();
        assert!(
            policy.shadowed_rules().is_empty(),
            "{name}: {:?}",
            policy.shadowed_rules()
        );
    }
}

#[test]
fn rule_examples_are_checked_when_the_policy_loads() {
    let ok = "default: allow
command_rules:
  - name: pip-installs
    commands: [pip, pip3]
    args_patterns: ['^install\\b']
    decision: approve
    examples:
      match: [\"pip install requests\", \"/usr/bin/pip3 install -r req.txt\"]
      not_match: [\"pip list\", \"npm install x\"]
  - name: nested-curl
    commands: [/usr/bin/curl]
    context: nested
    decision: deny
    examples:
      match: [\"curl -s https://example.com\"]
";
    policy(ok);
    let err = |text: &str| Policy::from_yaml(text, "p.yaml").unwrap_err().to_string();
    // Not matched by its own rule.
    let e = err(&ok.replace("\"pip install requests\"", "\"pip download requests\""));
    assert!(
        e.contains("p.yaml:8:15:")
            && e.contains("examples.match \"pip download requests\": this rule does not match it"),
        "{e}"
    );
    // Decided by an earlier rule.
    let shadowed = ok.replace(
        "command_rules:\n",
        "command_rules:\n  - {name: all-pip, commands: [pip], decision: allow}\n",
    );
    let e = err(&shadowed);
    assert!(e.contains("decided by the earlier rule \"all-pip\""), "{e}");
    // A not_match the rule matches.
    let e = err(&ok.replace("\"pip list\"", "\"pip install x\""));
    assert!(
        e.contains("examples.not_match \"pip install x\": this rule matches it"),
        "{e}"
    );
    // Unknown keys under examples.
    let e = err(&ok.replace("not_match:", "nomatch:"));
    assert!(e.contains("nomatch"), "{e}");
}

#[test]
fn redirect_rules_name_a_root_owned_binary_and_judge_only_what_execs() {
    let rule = |target: &str| {
        format!(
            "default: allow\ncommand_rules:\n  - name: r\n    commands: [pip]\n    decision: redirect\n    redirect_to: {{program: {target}}}\n"
        )
    };
    let p = policy(&rule("/usr/bin/true"));
    assert_eq!(p.redirect_of("r"), Some("/usr/bin/true"));
    let err = |text: &str| Policy::from_yaml(text, "p.yaml").unwrap_err().to_string();
    for (target, why) in [
        ("usr/bin/true", "not a clean absolute path"),
        ("/usr/bin/../bin/true", "not a clean absolute path"),
        ("/nonexistent/x", "No such file"),
        ("/usr/bin/env", "is a wrapper"),
        ("/usr/bin", "not a regular file"),
    ] {
        let e = err(&rule(target));
        assert!(e.contains(why), "{target}: {e}");
    }
    // Not root-owned, or in a directory someone else can write.
    let dir = std::env::temp_dir().join(format!("agentsh-redirect-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let own = dir.join("prog");
    std::fs::copy("/usr/bin/true", &own).unwrap();
    let e = err(&rule(&own.to_string_lossy()));
    assert!(e.contains("which someone other than root can"), "{e}");
    // A script.
    let e = err(&rule("/usr/bin/lsb_release"));
    assert!(e.contains("#! script"), "{e}");
    // decision and redirect_to go together; nowhere else.
    let e =
        err("default: allow\ncommand_rules:\n  - {name: r, commands: [pip], decision: redirect}\n");
    assert!(e.contains("decision: redirect needs redirect_to"), "{e}");
    let e = err("default: allow\ncommand_rules:\n  - {name: r, commands: [pip], decision: deny, redirect_to: {program: /usr/bin/true}}\n");
    assert!(
        e.contains("redirect_to: only with decision: redirect"),
        "{e}"
    );
    assert!(err("default: redirect\n").contains("default: redirect"));
    let e = err("default: allow\nfile_rules:\n  - {name: f, paths: [/srv/**], operations: [read], decision: redirect}\n");
    assert!(
        e.contains("redirect is not possible for file access"),
        "{e}"
    );
    // Judged: the program itself is redirected; through a wrapper it is
    // refused (the wrapper's argv is not the program's).
    let j = |argv_: &str| {
        let a = argv(argv_);
        let f = if a[0].starts_with('/') {
            a[0].clone()
        } else {
            format!("/usr/bin/{}", a[0])
        };
        crate::policy::judge(
            &p,
            &ExecFacts {
                program: ProgramFacts {
                    filename: &f,
                    resolved: None,
                    argv: &a,
                    depth: 1,
                },
                anonymous: false,
                truncated: None,
                interpreters: &[],
                copy_of: &[],
                loader_payloads: &[],
            },
        )
    };
    assert_eq!(j("pip install x").decision, Decision::Redirect);
    let v = j("env pip install x");
    assert_eq!(v.decision, Decision::Deny, "{v:?}");
    assert!(v.message.unwrap().contains("run it directly"));
}

#[test]
fn what_the_kernel_keeps_for_a_tree_is_told_apart_from_what_a_reload_changes() {
    let parts = |text: &str| policy(text).fixed_at_start();
    let differ = |a: &str, b: &str| -> Vec<&'static str> {
        parts(a)
            .iter()
            .zip(parts(b).iter())
            .filter(|(x, y)| x.1 != y.1)
            .map(|(x, _)| x.0)
            .collect()
    };
    let base = "name: p\ndefault: allow\n";
    // Command rules are the supervisor's: nothing the kernel keeps differs.
    let commands =
        format!("{base}command_rules:\n  - name: no-id\n    commands: [id]\n    decision: deny\n");
    assert!(differ(base, &commands).is_empty());
    assert_eq!(
        differ(base, &format!("{base}syscalls:\n  block: [acct]\n")),
        ["filter"]
    );
    assert_eq!(
        differ(
            base,
            &format!(
                "{base}file_rules:\n  - name: ro\n    paths: [/srv]\n    operations: [read]\n    decision: allow\n"
            )
        ),
        ["landlock"]
    );
    // Egress that allows everything traps no connect; one that judges does.
    let open = format!("{base}egress:\n  default: allow\n");
    let judged = format!("{base}egress:\n  default: deny\n");
    assert_eq!(differ(&open, &judged), ["filter"]);
    // The hash is the text's.
    assert_ne!(policy(base).hash(), policy(&commands).hash());
    assert_eq!(policy(base).hash().len(), 64);
}

#[test]
fn tracer_reads_is_judged_unless_a_policy_says_unjudged_and_the_summary_says_what_it_costs() {
    let judged = policy("default: allow\n");
    assert!(!judged.reads_unjudged());
    assert!(!judged.summary().contains("tracer_reads"));
    let unjudged = policy("default: allow\ntracer_reads: unjudged\n");
    assert!(unjudged.reads_unjudged());
    let s = unjudged.summary();
    assert!(
        s.contains("tracer_reads: unjudged") && s.contains("read rules"),
        "{s}"
    );
    assert!(!policy("default: allow\ntracer_reads: judged\n").reads_unjudged());
    let e = Policy::from_yaml("default: allow\ntracer_reads: sometimes\n", "t.yaml")
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(e.contains("tracer_reads") || e.contains("unjudged"), "{e}");
}
