//! Tests of `wrappers`.

use super::*;
use crate::policy::pattern::ProgramName;

fn words(s: &str) -> Vec<String> {
    s.split_whitespace().map(str::to_string).collect()
}

/// Expected outcome, written compactly: `Some("prog a b")` = payload
/// with that argv, `None` = no payload, `Err(fragment)` = unparsable.
type Want = Result<Option<&'static str>, &'static str>;

fn check(wrapper: Wrapper, argv: Vec<String>, want: &Want) {
    let got = unwrap(wrapper, &argv);
    match (want, got) {
        (Ok(None), Ok(Unwrapped::NoPayload)) => {}
        (Ok(Some(p)), Ok(Unwrapped::Payload { program, argv: got })) => {
            let want_argv = words(p);
            assert_eq!(got, want_argv, "{argv:?}");
            assert_eq!(program, want_argv[0], "{argv:?}");
        }
        (Err(fragment), Err(Unparsable(why))) => {
            assert!(why.contains(fragment), "{argv:?}: {why}");
        }
        (want, got) => panic!("{argv:?}: want {want:?}, got {got:?}"),
    }
}

#[test]
fn wrappers_yield_their_payload() {
    use Wrapper::*;
    let cases: &[(Wrapper, &str, Want)] = &[
        // env
        (Env, "env curl -s x", Ok(Some("curl -s x"))),
        (Env, "env", Ok(None)),
        (Env, "env -i curl", Ok(Some("curl"))),
        (Env, "env - curl", Ok(Some("curl"))),
        (Env, "env -u HOME -i A=1 B=2 curl x", Ok(Some("curl x"))),
        (Env, "env -uHOME curl", Ok(Some("curl"))),
        (Env, "env -iu HOME curl", Ok(Some("curl"))),
        (Env, "env --unset=HOME --unset PATH curl", Ok(Some("curl"))),
        (Env, "env -C /tmp curl", Ok(Some("curl"))),
        (Env, "env --chdir=/tmp -0 -v curl", Ok(Some("curl"))),
        (
            Env,
            "env --ignore-signal --default-signal=INT curl",
            Ok(Some("curl")),
        ),
        (Env, "env -- A=1 curl", Ok(Some("curl"))),
        (Env, "env -- -i", Ok(Some("-i"))),
        (Env, "env A=1", Ok(None)),
        (Env, "env -x curl", Err("unknown option `-x`")),
        (
            Env,
            "env --frobnicate curl",
            Err("unknown option `--frobnicate`"),
        ),
        (Env, "env --unse=X curl", Err("unknown option `--unse`")),
        (Env, "env -u", Err("needs an argument")),
        (Env, "env --null=1 curl", Err("takes no argument")),
        (Env, "env nice curl", Ok(Some("nice curl"))),
        // nice
        (Nice, "nice curl", Ok(Some("curl"))),
        (Nice, "nice", Ok(None)),
        (Nice, "nice -n 5 curl", Ok(Some("curl"))),
        (Nice, "nice -n5 curl", Ok(Some("curl"))),
        (Nice, "nice -10 curl", Ok(Some("curl"))),
        (Nice, "nice --10 curl", Ok(Some("curl"))),
        (Nice, "nice -+3 -n 2 curl", Ok(Some("curl"))),
        (Nice, "nice --adjustment=3 curl", Ok(Some("curl"))),
        (Nice, "nice --adjustment 3 curl", Ok(Some("curl"))),
        (Nice, "nice -- curl", Ok(Some("curl"))),
        (Nice, "nice -x curl", Err("unknown option")),
        // ionice
        (Ionice, "ionice -c 3 curl", Ok(Some("curl"))),
        (Ionice, "ionice -c2 -n7 -t curl x", Ok(Some("curl x"))),
        (Ionice, "ionice --class idle curl", Ok(Some("curl"))),
        (Ionice, "ionice -p 42", Ok(None)),
        (Ionice, "ionice -c 3 -p 42 43", Ok(None)),
        (Ionice, "ionice --pid=42", Ok(None)),
        (Ionice, "ionice -u 1000", Ok(None)),
        (Ionice, "ionice", Ok(None)),
        (Ionice, "ionice -z curl", Err("unknown option")),
        // nohup
        (Nohup, "nohup curl x", Ok(Some("curl x"))),
        (Nohup, "nohup -- curl", Ok(Some("curl"))),
        (Nohup, "nohup -n curl", Err("unknown option")),
        // timeout
        (Timeout, "timeout 5 curl x", Ok(Some("curl x"))),
        (Timeout, "timeout -s KILL -k 1 5s curl", Ok(Some("curl"))),
        (Timeout, "timeout -sKILL 5 curl", Ok(Some("curl"))),
        (
            Timeout,
            "timeout --signal=TERM --kill-after=2 --preserve-status --foreground -v 5 curl",
            Ok(Some("curl")),
        ),
        (Timeout, "timeout 5", Ok(None)),
        (Timeout, "timeout", Ok(None)),
        (Timeout, "timeout -- 5 curl", Ok(Some("curl"))),
        (Timeout, "timeout -x 5 curl", Err("unknown option")),
        (Timeout, "timeout -s", Err("needs an argument")),
        // stdbuf
        (Stdbuf, "stdbuf -oL -e 0 curl", Ok(Some("curl"))),
        (Stdbuf, "stdbuf --output=L -i 0 curl", Ok(Some("curl"))),
        (Stdbuf, "stdbuf -x curl", Err("unknown option")),
        // setsid
        (Setsid, "setsid -f curl", Ok(Some("curl"))),
        (Setsid, "setsid -cfw curl", Ok(Some("curl"))),
        (Setsid, "setsid --wait --ctty curl", Ok(Some("curl"))),
        (Setsid, "setsid -n curl", Err("unknown option")),
        // chrt
        (Chrt, "chrt 5 curl", Ok(Some("curl"))),
        (Chrt, "chrt -f 10 curl x", Ok(Some("curl x"))),
        (Chrt, "chrt --other curl", Ok(Some("curl"))),
        (
            Chrt,
            "chrt -d -T 1000 -P 2000 -D 2000 0 curl",
            Ok(Some("curl")),
        ),
        (Chrt, "chrt -p 42", Ok(None)),
        (Chrt, "chrt -f -p 10 42", Ok(None)),
        (Chrt, "chrt -m", Ok(None)),
        (Chrt, "chrt -z 1 curl", Err("unknown option")),
        // taskset
        (Taskset, "taskset 0x3 curl", Ok(Some("curl"))),
        (Taskset, "taskset -c 0,1 curl x", Ok(Some("curl x"))),
        (Taskset, "taskset -p 42", Ok(None)),
        (Taskset, "taskset -pc 0 42", Ok(None)),
        (Taskset, "taskset 0x3", Ok(None)),
        (Taskset, "taskset -x 1 curl", Err("unknown option")),
        // time
        (Time, "time curl", Ok(Some("curl"))),
        (Time, "time -v -o /tmp/t -f %e curl", Ok(Some("curl"))),
        (Time, "time --format=%e --append curl", Ok(Some("curl"))),
        (Time, "time -Z curl", Err("unknown option")),
        // multi-call binaries
        (MultiCall, "busybox wget x", Ok(Some("wget x"))),
        (MultiCall, "wget x", Ok(Some("wget x"))),
        (MultiCall, "toybox nc", Ok(Some("nc"))),
        (MultiCall, "busybox", Ok(None)),
        (MultiCall, "busybox --list", Ok(None)),
        (MultiCall, "busybox --bogus", Err("unknown option")),
        (MultiCall, "-busybox wget x", Ok(Some("wget x"))),
        (MultiCall, "- x", Err("names no applet")),
        // dynamic loader
        (
            DynamicLoader,
            "/lib64/ld-linux-x86-64.so.2 /usr/bin/curl x",
            Ok(Some("/usr/bin/curl x")),
        ),
        (
            DynamicLoader,
            "ld.so --library-path /l --preload /p.so --inhibit-cache /usr/bin/curl",
            Ok(Some("/usr/bin/curl")),
        ),
        (
            DynamicLoader,
            "ld.so --audit a.so --inhibit-rpath x --glibc-hwcaps-mask y --verify ./curl",
            Ok(Some("./curl")),
        ),
        // A bare name is looked up in the library path the tree controls.
        (
            DynamicLoader,
            "ld.so --library-path /tmp/lib curl",
            Err("without a `/`"),
        ),
        (DynamicLoader, "ld.so --list ./a.out", Ok(Some("./a.out"))),
        (DynamicLoader, "ld.so --help", Ok(None)),
        (DynamicLoader, "ld.so", Ok(None)),
        (DynamicLoader, "ld.so --preload", Err("needs an argument")),
        (
            DynamicLoader,
            "ld.so --bogus /usr/bin/curl",
            Err("unknown option"),
        ),
        (
            DynamicLoader,
            "ld.so -- /usr/bin/curl",
            Err("unknown option"),
        ),
    ];
    for (wrapper, argv, want) in cases {
        check(*wrapper, words(argv), want);
    }
}

#[test]
fn env_split_string_is_parsed_in_place() {
    let sv = |v: &[&str]| {
        v.iter()
            .map(std::string::ToString::to_string)
            .collect::<Vec<_>>()
    };
    let cases: &[(Vec<String>, Want)] = &[
        // A shebang `#!/usr/bin/env -S python3 -u` arrives as one word.
        (
            sv(&["env", "-S python3 -u", "/w/s.py"]),
            Ok(Some("python3 -u /w/s.py")),
        ),
        (sv(&["env", "-S", "curl -s", "x"]), Ok(Some("curl -s x"))),
        (sv(&["env", "--split-string=-i A=1 curl"]), Ok(Some("curl"))),
        (sv(&["env", "-S", "-u HOME curl"]), Ok(Some("curl"))),
        (sv(&["env", "-S", "  "]), Ok(None)),
        (
            sv(&["env", "-S", "'cu''rl' \"-s\" # comment"]),
            Ok(Some("curl -s")),
        ),
        (sv(&["env", "-iS", "curl"]), Ok(Some("curl"))),
        (sv(&["env", "-S", "${X}"]), Err("variable expansion")),
        (sv(&["env", "-S", "curl \"$X\""]), Err("variable expansion")),
        (sv(&["env", "-S", "sh 'a\\b'"]), Err("escapes")),
        (sv(&["env", "-S", "cu\\rl"]), Err("escapes")),
        (sv(&["env", "-S", "'curl"]), Err("unterminated")),
        (sv(&["env", "-S", "-q curl"]), Err("unknown option `-q`")),
    ];
    for (argv, want) in cases {
        check(Wrapper::Env, argv.clone(), want);
    }
    // A word with a space from -S stays one word.
    let got = unwrap(Wrapper::Env, &sv(&["env", "-S", "sh -c 'echo hi'"])).unwrap();
    assert_eq!(
        got,
        Unwrapped::Payload {
            program: "sh".into(),
            argv: sv(&["sh", "-c", "echo hi"])
        }
    );
    // `$` is literal inside single quotes.
    let got = unwrap(Wrapper::Env, &sv(&["env", "-S", "sh -c 'echo $0' a"])).unwrap();
    assert_eq!(
        got,
        Unwrapped::Payload {
            program: "sh".into(),
            argv: sv(&["sh", "-c", "echo $0", "a"])
        }
    );
}

#[test]
fn multi_call_applet_from_argv0_path() {
    assert_eq!(
        unwrap(Wrapper::MultiCall, &words("/bin/wget x")).unwrap(),
        Unwrapped::Payload {
            program: "wget".into(),
            argv: words("/bin/wget x"),
        }
    );
}

/// busybox drops one leading `-` of argv[0] (a login shell's), then takes
/// the last path component, for its own name and for the applet's: the
/// payload is that applet, whatever argv[0] says.
#[test]
fn multi_call_applets_are_chosen_by_busyboxs_own_rule() {
    for (argv, applet) in [
        ("-wget x", "wget"),
        ("-/usr/bin/wget x", "wget"),
        ("/tmp/-wget x", "-wget"),
        ("busybox /tmp/x/wget x", "wget"),
        ("-busybox -wget", "-wget"),
    ] {
        match unwrap(Wrapper::MultiCall, &words(argv)) {
            Ok(Unwrapped::Payload { program, .. }) => assert_eq!(program, applet, "{argv}"),
            Err(Unparsable(why)) if applet == "-wget" && argv.starts_with("-busybox") => {
                assert!(why.contains("unknown option"), "{why}");
            }
            other => panic!("{argv}: {other:?}"),
        }
    }
    assert_eq!(
        Wrapper::of(&ProgramName::exec("/usr/bin/busybox.static")),
        Some(Wrapper::MultiCall)
    );
}

#[test]
fn loader_argv0_replaces_payload_argv0() {
    let argv: Vec<String> = words("ld.so --argv0 wget /bin/busybox x");
    assert_eq!(
        unwrap(Wrapper::DynamicLoader, &argv).unwrap(),
        Unwrapped::Payload {
            program: "/bin/busybox".into(),
            argv: words("wget x"),
        }
    );
}

#[test]
fn wrappers_are_recognised_by_basename() {
    let cases: &[(&str, Option<Wrapper>)] = &[
        ("/usr/bin/env", Some(Wrapper::Env)),
        ("env", Some(Wrapper::Env)),
        ("/usr/bin/env.real", Some(Wrapper::Env)),
        ("/usr/bin/nice", Some(Wrapper::Nice)),
        ("/usr/bin/ionice", Some(Wrapper::Ionice)),
        ("/usr/bin/nohup", Some(Wrapper::Nohup)),
        ("/usr/bin/timeout", Some(Wrapper::Timeout)),
        ("/usr/bin/stdbuf", Some(Wrapper::Stdbuf)),
        ("/usr/bin/setsid", Some(Wrapper::Setsid)),
        ("/usr/bin/chrt", Some(Wrapper::Chrt)),
        ("/usr/bin/taskset", Some(Wrapper::Taskset)),
        ("/usr/bin/time", Some(Wrapper::Time)),
        ("/bin/busybox", Some(Wrapper::MultiCall)),
        ("/lib64/ld-linux-x86-64.so.2", Some(Wrapper::DynamicLoader)),
        ("/lib/ld-linux-aarch64.so.1", Some(Wrapper::DynamicLoader)),
        ("/lib/ld-musl-x86_64.so.1", Some(Wrapper::DynamicLoader)),
        (
            "/lib/x86_64-linux-gnu/ld-2.31.so",
            Some(Wrapper::DynamicLoader),
        ),
        ("/lib64/ld64.so.2", Some(Wrapper::DynamicLoader)),
        ("/usr/bin/ld", None),
        ("/usr/bin/ld.gold", None),
        ("/usr/bin/envsubst", None),
        ("/usr/bin/curl", None),
    ];
    for (name, want) in cases {
        assert_eq!(Wrapper::of(&ProgramName::payload(name)), *want, "{name}");
    }
}

#[test]
fn the_identity_index_holds_only_this_architectures_loaders() {
    let x86: Vec<&str> = kind::always_indexed_on("x86_64").collect();
    let arm: Vec<&str> = kind::always_indexed_on("aarch64").collect();
    assert!(x86.contains(&"/lib64/ld-linux-x86-64.so.2"), "{x86:?}");
    // i386 programs run on an x86_64 kernel.
    assert!(x86.contains(&"/lib/ld-linux.so.2"), "{x86:?}");
    assert!(!x86.iter().any(|p| p.contains("aarch64")), "{x86:?}");
    assert!(arm.contains(&"/lib/ld-linux-aarch64.so.1"), "{arm:?}");
    assert!(
        !arm.iter()
            .any(|p| p.contains("x86") || p.ends_with("/ld-linux.so.2")),
        "{arm:?}"
    );
    // Elsewhere no loader, the multi-call binaries still.
    let other: Vec<&str> = kind::always_indexed_on("riscv64").collect();
    assert!(!other.iter().any(|p| names_a_loader(p)), "{other:?}");
    for set in [&x86, &arm, &other] {
        assert!(set.contains(&"/usr/bin/busybox"), "{set:?}");
        // Each is what the index holds it for, by its name too.
        for p in set {
            assert!(
                matches!(
                    Wrapper::of(&ProgramName::exec(p)),
                    Some(Wrapper::DynamicLoader | Wrapper::MultiCall)
                ),
                "{p}"
            );
        }
    }
    let here: Vec<&str> = always_indexed().collect();
    match std::env::consts::ARCH {
        "x86_64" => assert_eq!(here, x86),
        "aarch64" => assert_eq!(here, arm),
        _ => assert_eq!(here, other),
    }
}
