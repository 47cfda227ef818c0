//! Tests of `landlock`.

use super::paths::{at_or_beneath, join};
use super::*;
use crate::policy::loaded::Policy;
use agentsh_proto::{FsAccess, LandlockCompat};
use std::collections::BTreeMap;
use std::collections::HashMap;
use std::path::Path;

/// A fake tree: directory → non-symlink children; symlinks → targets.
struct FakeFs {
    dirs: HashMap<String, Vec<String>>,
    links: HashMap<String, String>,
}

impl FakeFs {
    fn new(dirs: &[(&str, &[&str])], links: &[(&str, &str)]) -> FakeFs {
        FakeFs {
            dirs: dirs
                .iter()
                .map(|(d, c)| {
                    (
                        d.to_string(),
                        c.iter().map(|n| join(d, n)).collect::<Vec<_>>(),
                    )
                })
                .collect(),
            links: links
                .iter()
                .map(|(a, b)| (a.to_string(), b.to_string()))
                .collect(),
        }
    }
}

impl FsView for FakeFs {
    fn canonical(&self, path: &str) -> Option<String> {
        for (link, target) in &self.links {
            if at_or_beneath(path, link) {
                return Some(format!("{target}{}", &path[link.len()..]));
            }
        }
        Some(path.to_string())
    }
    fn children(&self, dir: &str) -> Option<Vec<String>> {
        self.dirs.get(dir).cloned()
    }
}

fn fake() -> FakeFs {
    FakeFs::new(
        &[
            ("/", &["etc", "usr", "tmp", "var", "home", "proc", "dev"]),
            ("/usr", &["bin", "lib", "local", "share"]),
            ("/usr/local", &["bin", "lib", "sbin"]),
            ("/var", &["lib", "log", "tmp", "cache"]),
            ("/var/lib", &["agentsh", "apt"]),
            ("/var/log", &["agentsh", "syslog"]),
            ("/dev", &["null", "shm", "pts"]),
            ("/home", &["u"]),
            ("/home/u", &[".ssh", "notes", "proj"]),
            ("/home/u/proj", &["README", "secret.txt", "src"]),
        ],
        &[("/bin", "/usr/bin"), ("/lib", "/usr/lib")],
    )
}

fn protect(fs: &dyn FsView) -> SelfProtection {
    SelfProtection::new(
        &[Path::new("/var/lib/agentsh"), Path::new("/var/log/agentsh")],
        &[Path::new("/var/lib/agentsh")],
        Some(18080),
        fs,
    )
}

fn vars() -> SessionVars {
    SessionVars {
        workspace: Some("/home/u/proj".into()),
        home: Some("/home/u".into()),
        tmpdir: "/tmp".into(),
    }
}

fn pol(yaml: &str) -> Policy {
    Policy::from_yaml(yaml, "t.yaml").unwrap_or_else(|e| panic!("{e}"))
}

fn rules_of(c: &CompiledLandlock) -> BTreeMap<String, Vec<FsAccess>> {
    c.config
        .fs_rules
        .iter()
        .map(|r| (r.path.clone(), r.access.clone()))
        .collect()
}

/// Some rule at `path` or above it grants `a`.
fn has(c: &CompiledLandlock, path: &str, a: FsAccess) -> bool {
    c.config
        .fs_rules
        .iter()
        .any(|r| at_or_beneath(path, &r.path) && r.access.contains(&a))
}

#[test]
fn the_cached_ruleset_follows_every_change_of_what_it_was_built_from() {
    // A workspace holding a directory agentsh protects: the workspace is
    // carved, i.e. its other entries are granted one by one, so adding an
    // entry must change the ruleset. Beside the test binary, not in /tmp:
    // /tmp is an ancestor, and other tests keep changing it.
    let exe = std::env::current_exe().unwrap();
    let base = exe
        .parent()
        .unwrap()
        .join(format!("llcache-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&base);
    let ws = base.join("ws");
    for d in ["a", "own"] {
        std::fs::create_dir_all(ws.join(d)).unwrap();
    }
    let own = ws.join("own");
    let policy = std::sync::Arc::new(pol(
            "default: allow\nfile_rules:\n  - name: ws\n    paths: [\"${WORKSPACE}/**\", \"${HOME}/**\"]\n    operations: [read, write, create, delete]\n    decision: allow\n",
        ));
    let sl = SessionLandlock {
        mounted: None,
        policy,
        workspace: Some(ws.display().to_string()),
        protect: SelfProtection::new(&[own.as_path()], &[], None, &HostFs),
        compat: LandlockCompat::BestEffort,
        cache: Default::default(),
    };
    let cached = |sl: &SessionLandlock| sl.is_cached(0);
    // Compiles until the result is kept (its directories have settled).
    let settle = |sl: &SessionLandlock, uid: u32| {
        for _ in 0..50 {
            let c = sl.compile(uid);
            if sl.is_cached(uid) {
                return c;
            }
            std::thread::sleep(SETTLE);
        }
        panic!("the ruleset was never kept");
    };
    let a = ws.join("a").display().to_string();
    let b = ws.join("b").display().to_string();
    let first = sl.compile(0);
    // Just created: not trusted yet.
    assert!(!cached(&sl));
    assert!(has(&first, &a, FsAccess::Write), "{:?}", rules_of(&first));
    assert!(!has(&first, &own.display().to_string(), FsAccess::Write));
    assert_eq!(settle(&sl, 0), first);
    assert_eq!(sl.compile(0), first);
    assert!(cached(&sl));
    // A new entry in the carved workspace: compiled afresh, and granted.
    std::fs::create_dir(ws.join("b")).unwrap();
    let second = sl.compile(0);
    assert!(has(&second, &b, FsAccess::Write), "{:?}", rules_of(&second));
    assert!(!has(&first, &b, FsAccess::Write));
    // Another uid (another home) is never served the cached one.
    let home0 = home_of(
        0,
        &std::fs::read_to_string("/etc/passwd").unwrap_or_default(),
    );
    if let Some(h) = home0 {
        assert_eq!(settle(&sl, 0), second);
        assert!(has(&second, &h, FsAccess::Write));
        let other = sl.compile(4_000_017);
        assert!(!has(&other, &h, FsAccess::Write), "{:?}", rules_of(&other));
        // Each uid keeps its own: the other's does not push root's out.
        assert_eq!(settle(&sl, 4_000_017), other);
        assert!(sl.is_cached(0) && sl.is_cached(4_000_017));
        assert_eq!(sl.compile(0), second);
    }
    std::fs::remove_dir_all(&base).unwrap();
}

#[test]
fn no_file_rules_still_protects_agentsh_and_system_files() {
    let fs = fake();
    let c = compile(
        &pol("default: allow\n"),
        &vars(),
        &protect(&fs),
        LandlockCompat::BestEffort,
        &fs,
    );
    assert_eq!(
        c.config.handled_fs,
        vec![
            FsAccess::Read,
            FsAccess::Write,
            FsAccess::Create,
            FsAccess::Delete
        ]
    );
    let r = rules_of(&c);
    assert!(has(&c, "/var/lib/apt", FsAccess::Read));
    assert!(has(&c, "/etc", FsAccess::Read));
    assert!(!has(&c, "/var/lib/agentsh", FsAccess::Read), "{r:?}");
    assert!(has(&c, "/var/lib/agentsh", FsAccess::List), "{r:?}");
    for open in [
        "/tmp",
        "/home",
        "/proc",
        "/usr/local/lib",
        "/var/cache",
        "/var/lib/apt",
    ] {
        assert!(r.contains_key(open), "{open} must stay writable: {r:?}");
    }
    for shut in [
        "/",
        "/etc",
        "/usr",
        "/usr/bin",
        "/usr/lib",
        "/var",
        "/var/lib",
        "/var/lib/agentsh",
        "/var/log/agentsh",
        "/usr/local/bin",
        "/usr/local/sbin",
    ] {
        assert!(
            !has(&c, shut, FsAccess::Write),
            "{shut} must not be writable: {r:?}"
        );
    }
    assert!(c.config.scope_signals && c.config.scope_abstract_unix);
    assert!(c.summary.api_port_reachable);
    assert_eq!(c.config.tcp_connect_ports, None);
}

#[test]
fn an_allow_cannot_reopen_protected_paths() {
    let fs = fake();
    let c = compile(
        &pol(
            "default: allow\nfile_rules:\n  - {name: all, paths: [\"/**\", /etc/agentsh, /bin], operations: [write, create, delete, read], decision: allow}\n",
        ),
        &vars(),
        &protect(&fs),
        LandlockCompat::BestEffort,
        &fs,
    );
    let r = rules_of(&c);
    // `/` loses read (the state dir is beneath it) and the modifying rights.
    assert_eq!(r.get("/"), Some(&vec![FsAccess::List]), "{r:?}");
    assert!(has(&c, "/usr/bin", FsAccess::Read), "{r:?}");
    assert!(!has(&c, "/etc/agentsh", FsAccess::Write), "{r:?}");
    assert!(has(&c, "/etc/agentsh", FsAccess::Read), "{r:?}");
    assert!(!has(&c, "/usr/bin", FsAccess::Write), "{r:?}");
    assert!(has(&c, "/tmp", FsAccess::Write));
}

#[test]
fn deny_beneath_allow_is_carved_and_allow_beneath_deny_wins() {
    let fs = fake();
    let c = compile(
        &pol(r#"default: allow
file_rules:
  - {name: run, paths: ["/**"], operations: [execute], decision: allow}
  - {name: no-run-scratch, paths: [/tmp/**, /var/tmp, /dev/shm], operations: [execute], decision: deny}
  - {name: ws, paths: ["${WORKSPACE}/**", "${TMPDIR}/ok/**"], operations: [execute, write], decision: allow}
"#),
        &vars(),
        &protect(&fs),
        LandlockCompat::BestEffort,
        &fs,
    );
    let r = rules_of(&c);
    assert!(!has(&c, "/", FsAccess::Execute), "{r:?}");
    for yes in [
        "/usr",
        "/etc",
        "/home",
        "/var/lib",
        "/var/cache",
        "/dev/null",
        "/tmp/ok",
    ] {
        assert!(has(&c, yes, FsAccess::Execute), "{yes}: {r:?}");
    }
    for no in ["/tmp", "/var/tmp", "/dev/shm", "/var", "/dev"] {
        assert!(!has(&c, no, FsAccess::Execute), "{no}: {r:?}");
    }
    assert!(has(&c, "/home/u/proj", FsAccess::Write));
    // write is named by the policy: only what it grants.
    assert!(!has(&c, "/home", FsAccess::Write), "{r:?}");
    assert_eq!(
        c.config.handled_fs,
        vec![
            FsAccess::Read,
            FsAccess::Write,
            FsAccess::Create,
            FsAccess::Delete,
            FsAccess::Execute
        ]
    );
}

#[test]
fn unset_workspace_skips_its_rules_and_says_so() {
    let fs = fake();
    let v = SessionVars {
        workspace: None,
        ..vars()
    };
    let c = compile(
        &pol("default: allow\nfile_rules:\n  - {name: ws, paths: [\"${WORKSPACE}/**\"], operations: [write], decision: allow}\n"),
        &v,
        &protect(&fs),
        LandlockCompat::Required,
        &fs,
    );
    // Only the tree root's own oom_score_adj, which every tree may write.
    assert!(!c
        .config
        .fs_rules
        .iter()
        .any(|r| r.access.contains(&FsAccess::Write) && r.path != OWN_OOM_SCORE_ADJ));
    assert!(
        c.warnings.iter().any(|w| w.contains("WORKSPACE")),
        "{:?}",
        c.warnings
    );
    assert_eq!(c.config.compat, LandlockCompat::Required);
}

#[test]
fn symlinked_grants_are_judged_by_their_target() {
    let fs = fake();
    let c = compile(
        &pol("default: allow\nfile_rules:\n  - {name: b, paths: [/bin/**, /lib], operations: [write], decision: allow}\n"),
        &vars(),
        &protect(&fs),
        LandlockCompat::BestEffort,
        &fs,
    );
    assert!(
        !c.config
            .fs_rules
            .iter()
            .any(|r| r.access.contains(&FsAccess::Write) && r.path != OWN_OOM_SCORE_ADJ),
        "{:?}",
        c.config.fs_rules
    );
}

#[test]
fn tcp_allow_lists_drop_the_api_port() {
    let fs = fake();
    let c = compile(
        &pol(
            "default: allow\nnetwork_rules:\n  - {name: a, ports: [443, 18080], direction: connect, decision: allow}\n  - {name: b, ports: any, direction: bind, decision: deny}\n",
        ),
        &vars(),
        &protect(&fs),
        LandlockCompat::BestEffort,
        &fs,
    );
    assert_eq!(c.config.tcp_connect_ports, Some(vec![443]));
    assert_eq!(c.config.tcp_bind_ports, Some(vec![]));
    assert!(!c.summary.api_port_reachable);
}

/// What one compiled ruleset must grant (`true`) or withhold.
type Expect = (&'static str, FsAccess, bool);

fn check(what: &str, c: &CompiledLandlock, expect: &[Expect]) {
    for (path, access, granted) in expect {
        assert_eq!(
            has(c, path, *access),
            *granted,
            "{what}: {access:?} on {path}: {:?}",
            rules_of(c)
        );
    }
}

#[test]
fn deny_only_operations_stay_allowed_everywhere_but_the_denied_paths() {
    use FsAccess::*;
    let fs = fake();
    #[rustfmt::skip]
    let cases: Vec<(&str, &str, Vec<Expect>)> = vec![
        ("deny-only read: everything else readable, the state still not",
         "- {name: s, paths: [/home/u/proj/secret.txt], operations: [read], decision: deny}",
         vec![("/home/u/proj/secret.txt", Read, false), ("/home/u/proj/README", Read, true),
              ("/home/u/proj/src", Read, true), ("/home/u/notes", Read, true),
              ("/usr/bin", Read, true), ("/etc", Read, true), ("/var/lib/apt", Read, true),
              ("/var/lib/agentsh", Read, false), ("/", Read, false),
              ("/home/u/proj", Read, false),
              // Writes keep their default: open but for protected paths.
              ("/home/u/proj/secret.txt", Write, true), ("/etc", Write, false)]),
        ("deny-only write: other files writable, protected paths still not",
         "- {name: s, paths: [/home/u/proj/secret.txt], operations: [write], decision: deny}",
         vec![("/home/u/proj/secret.txt", Write, false), ("/home/u/proj/README", Write, true),
              ("/tmp", Write, true), ("/home/u/notes", Write, true),
              ("/etc", Write, false), ("/usr/bin", Write, false),
              ("/var/lib/agentsh", Write, false),
              ("/home/u/proj", Create, true), ("/home/u/proj/secret.txt", Read, true)]),
        ("deny-only create: nothing new beneath /tmp, elsewhere as before",
         "- {name: s, paths: [/tmp/**], operations: [create], decision: deny}",
         vec![("/tmp", Create, false), ("/home", Create, true), ("/var/cache", Create, true),
              ("/", Create, false), ("/etc", Create, false), ("/tmp", Write, true),
              ("/tmp", Delete, true)]),
        ("deny-only delete: a directory's contents kept, its parent split",
         "- {name: s, paths: [/home/u/.ssh/**], operations: [delete], decision: deny}",
         vec![("/home/u/.ssh", Delete, false), ("/home/u/proj", Delete, true),
              ("/home/u", Delete, false), ("/tmp", Delete, true), ("/home/u/.ssh", Write, true)]),
        ("deny-only execute: handled, open everywhere but the denied paths",
         "- {name: s, paths: [/tmp/**, /dev/shm], operations: [execute], decision: deny}",
         vec![("/tmp", Execute, false), ("/dev/shm", Execute, false),
              ("/usr/bin", Execute, true), ("/home/u/proj", Execute, true),
              ("/dev/null", Execute, true), ("/var/tmp", Execute, true)]),
        ("allow + deny for one operation: an allow-list minus the deny",
         "- {name: a, paths: [\"/home/u/proj/**\"], operations: [write], decision: allow}\n\
          - {name: d, paths: [/home/u/proj/secret.txt], operations: [write], decision: deny}",
         vec![("/home/u/proj/README", Write, true), ("/home/u/proj/secret.txt", Write, false),
              ("/tmp", Write, false), ("/home/u/notes", Write, false),
              ("/tmp", Create, true)]),
        ("an allow-list for one operation, deny-only for another",
         "- {name: a, paths: [\"/home/u/proj/**\"], operations: [write], decision: allow}\n\
          - {name: d, paths: [/home/u/proj/secret.txt], operations: [read], decision: deny}",
         vec![("/home/u/proj/README", Write, true), ("/tmp", Write, false),
              ("/home/u/proj/secret.txt", Read, false), ("/tmp", Read, true),
              ("/home/u/proj/README", Read, true)]),
        ("allow everything, deny a tree, allow an exception beneath it",
         "- {name: a, paths: [\"/**\"], operations: [read], decision: allow}\n\
          - {name: d, paths: [\"/home/u/proj/**\"], operations: [read], decision: deny}\n\
          - {name: e, paths: [/home/u/proj/README], operations: [read], decision: allow}",
         vec![("/home/u/proj/README", Read, true), ("/home/u/proj/secret.txt", Read, false),
              ("/home/u/proj/src", Read, false), ("/usr", Read, true),
              ("/var/lib/agentsh", Read, false)]),
        ("deny-only beside self-protection: both carved out of /var/lib",
         "- {name: s, paths: [/var/lib/apt], operations: [read, write], decision: deny}",
         vec![("/var/lib/apt", Read, false), ("/var/lib/agentsh", Read, false),
              ("/var/cache", Read, true), ("/var/log/syslog", Read, true),
              ("/var/lib/apt", Write, false), ("/var/lib/agentsh", Write, false),
              ("/var/cache", Write, true), ("/var/log/agentsh", Write, false)]),
        ("an allow cannot reopen a protected path; deny-only beside it",
         "- {name: a, paths: [\"/var/lib/agentsh/**\", \"/etc/**\"], operations: [read, write], decision: allow}\n\
          - {name: d, paths: [/home/u/notes], operations: [delete], decision: deny}",
         vec![("/var/lib/agentsh", Read, false), ("/etc", Read, true), ("/usr", Read, false),
              ("/var/lib/agentsh", Write, false), ("/etc", Write, false),
              ("/home/u/proj", Delete, true), ("/home/u", Delete, false),
              ("/var/lib/agentsh", Delete, false), ("/etc", Delete, false)]),
    ];
    for (what, rules, expect) in cases {
        let c = compile(
            &pol(&format!("default: allow\nfile_rules:\n{rules}\n")),
            &vars(),
            &protect(&fs),
            LandlockCompat::BestEffort,
            &fs,
        );
        check(what, &c, &expect);
        assert!(
            c.carve_failures.is_empty(),
            "{what}: {:?}",
            c.carve_failures
        );
    }
}

#[test]
fn split_directories_keep_only_a_listing_for_read() {
    let fs = fake();
    let c = compile(
        &pol("default: allow\nfile_rules:\n- {name: s, paths: [/home/u/proj/secret.txt], operations: [read], decision: deny}\n"),
        &vars(),
        &protect(&fs),
        LandlockCompat::BestEffort,
        &fs,
    );
    let r = rules_of(&c);
    for split in ["/", "/home", "/home/u", "/home/u/proj"] {
        let a = r.get(split).cloned().unwrap_or_default();
        assert!(
            a.contains(&FsAccess::List) && !a.contains(&FsAccess::Read),
            "{split}: {r:?}"
        );
    }
    assert!(c.config.handled_fs.contains(&FsAccess::Read));
    assert!(!c.config.handled_fs.contains(&FsAccess::Execute));
}

#[test]
fn a_deny_whose_variable_is_unset_grants_its_operation_nowhere() {
    let fs = fake();
    let v = SessionVars {
        workspace: None,
        ..vars()
    };
    let c = compile(
        &pol("default: allow\nfile_rules:\n- {name: s, paths: [\"${WORKSPACE}/.env\"], operations: [read], decision: deny}\n"),
        &v,
        &protect(&fs),
        LandlockCompat::BestEffort,
        &fs,
    );
    assert!(
        !c.config
            .fs_rules
            .iter()
            .any(|r| r.access.contains(&FsAccess::Read)),
        "{:?}",
        rules_of(&c)
    );
    assert!(c.config.handled_fs.contains(&FsAccess::Read));
    assert!(
        c.warnings.iter().any(|w| w.contains("granted nowhere")),
        "{:?}",
        c.warnings
    );
    // Writes are untouched by it.
    assert!(has(&c, "/tmp", FsAccess::Write));
}

#[test]
fn a_denied_path_in_a_directory_too_big_to_carve_is_reported() {
    let mut fs = fake();
    let many: Vec<String> = (0..300).map(|i| format!("/usr/share/f{i}")).collect();
    fs.dirs.insert("/usr/share".into(), many);
    let c = compile(
        &pol("default: allow\nfile_rules:\n- {name: no-f7, paths: [/usr/share/f7], operations: [read], decision: deny}\n- {name: no-curl, paths: [/usr/bin/curl], operations: [execute], decision: deny}\n"),
        &vars(),
        &protect(&fs),
        LandlockCompat::BestEffort,
        &fs,
    );
    let f = &c.carve_failures;
    assert_eq!(f.len(), 2, "{f:?}");
    assert_eq!(
        (f[0].access, f[0].dir.as_str(), f[0].entries),
        (FsAccess::Read, "/usr/share", Some(300))
    );
    assert_eq!(
        f[0].denied_by_policy,
        vec![("/usr/share/f7".into(), "no-f7".into())]
    );
    // /usr/bin cannot be listed (the fake does not know it).
    assert_eq!(
        (f[1].access, f[1].dir.as_str(), f[1].entries),
        (FsAccess::Execute, "/usr/bin", None)
    );
    // Stricter, never looser: nothing granted beneath them.
    assert!(!has(&c, "/usr/share/f8", FsAccess::Read));
    assert!(!has(&c, "/usr/bin/ls", FsAccess::Execute));
    assert!(has(&c, "/usr/lib", FsAccess::Execute));
}

#[test]
fn an_allow_split_around_agentshs_files_is_named_in_a_warning() {
    let fs = fake();
    let own = SelfProtection::new(&[Path::new("/home/u/proj/src")], &[], None, &fs);
    let c = compile(
        &pol("default: allow\nfile_rules:\n- {name: ws, paths: [\"${WORKSPACE}/**\"], operations: [create], decision: allow}\n"),
        &vars(),
        &own,
        LandlockCompat::BestEffort,
        &fs,
    );
    assert!(has(&c, "/home/u/proj/README", FsAccess::Create));
    assert!(!has(&c, "/home/u/proj", FsAccess::Create));
    assert!(
        c.warnings
            .iter()
            .any(|w| w.contains("file rule \"ws\"") && w.contains("split around /home/u/proj/src")),
        "{:?}",
        c.warnings
    );
    // The implicit grant on / is split too, and that is no news.
    let c = compile(
        &pol("default: allow\n"),
        &vars(),
        &own,
        LandlockCompat::BestEffort,
        &fs,
    );
    assert!(
        c.warnings.iter().all(|w| !w.contains("split around")),
        "{:?}",
        c.warnings
    );
}

#[test]
fn landlock_bases() {
    assert_eq!(landlock_base("/**"), Ok("/"));
    assert_eq!(landlock_base("/usr/**"), Ok("/usr"));
    assert_eq!(landlock_base("${WORKSPACE}/**"), Ok("${WORKSPACE}"));
    assert_eq!(landlock_base("/dev/null"), Ok("/dev/null"));
    assert!(landlock_base("/home/*/x").is_err());
    assert!(landlock_base("/tmp/*.sh").is_err());
    assert!(landlock_base("/a/**/b").is_err());
}

#[test]
fn home_from_passwd() {
    let p = "root:x:0:0:root:/root:/bin/bash\nuser:x:1000:1000::/home/user:/bin/sh\nbad:x:7\n";
    assert_eq!(home_of(0, p).as_deref(), Some("/root"));
    assert_eq!(home_of(1000, p).as_deref(), Some("/home/user"));
    assert_eq!(home_of(7, p), None);
    assert_eq!(home_of(5, p), None);
}

#[test]
fn shipped_policies_protect_agentsh_and_keep_agent_work_open() {
    let fs = fake();
    for (name, text) in crate::policy::SHIPPED {
        let p = Policy::from_yaml(text, name).unwrap_or_else(|e| panic!("{e}"));
        let c = compile(&p, &vars(), &protect(&fs), LandlockCompat::BestEffort, &fs);
        let r = rules_of(&c);
        for shut in [
            "/etc",
            "/usr/bin",
            "/var/lib/agentsh",
            "/var/log/agentsh",
            "/",
        ] {
            assert!(!has(&c, shut, FsAccess::Write), "{name}: {shut} writable");
        }
        for open in ["/home/u/proj", "/tmp"] {
            assert!(has(&c, open, FsAccess::Write), "{name}: {open}: {r:?}");
        }
        if let Some(ports) = &c.config.tcp_connect_ports {
            assert!(!ports.contains(&18080), "{name}");
        }
    }
}

/// Whatever the policy, nothing under /proc or /sys is granted write but the
/// tree root's own oom_score_adj: a deny-only policy's grant on `/` is carved
/// around them, an explicit allow beneath them still holds.
#[test]
fn proc_and_sys_are_never_writable_but_the_roots_oom_score_adj() {
    let fs = fake();
    let deny_only = compile(
        &pol("default: allow\nfile_rules:\n  - {name: no-etc, paths: [/etc/**], operations: [write], decision: deny}\n"),
        &vars(),
        &protect(&fs),
        LandlockCompat::BestEffort,
        &fs,
    );
    let writable: Vec<&str> = deny_only
        .config
        .fs_rules
        .iter()
        .filter(|r| r.access.contains(&FsAccess::Write))
        .map(|r| r.path.as_str())
        .collect();
    assert!(writable.contains(&"/tmp"), "{writable:?}");
    for p in &writable {
        assert!(
            !(p.starts_with("/proc") || p.starts_with("/sys")) || *p == OWN_OOM_SCORE_ADJ,
            "{p} is writable: {writable:?}"
        );
    }
    assert!(writable.contains(&OWN_OOM_SCORE_ADJ), "{writable:?}");
}

/// `exec_sources: {writable: deny}`: nothing runs beneath a place the tree
/// can write or create in, even where an execute rule grants it at the same
/// path (the workspace of agent-strict); `except` is more specific and runs;
/// everything else keeps execute.
#[test]
fn exec_sources_deny_carves_execute_out_of_every_writable_place() {
    let fs = fake();
    let c = compile(
        &pol("default: allow\n\
              exec_sources: {writable: deny, except: [\"${WORKSPACE}/src/**\"]}\n\
              file_rules:\n\
              - {name: run, paths: [\"/\", \"/**\"], operations: [read, execute], decision: allow}\n\
              - {name: ws, paths: [\"${WORKSPACE}\", \"${WORKSPACE}/**\"], operations: [write, create, delete, execute], decision: allow}\n\
              - {name: scratch, paths: [/tmp/**, /dev/shm/**], operations: [write, create], decision: allow}\n"),
        &vars(),
        &protect(&fs),
        LandlockCompat::BestEffort,
        &fs,
    );
    for (path, runs) in [
        ("/home/u/proj/README", false),
        ("/home/u/proj", false),
        ("/tmp/x", false),
        ("/dev/shm/x", false),
        ("/home/u/proj/src/main", true),
        ("/usr/bin/true", true),
        ("/home/u/notes", true),
    ] {
        assert_eq!(
            has(&c, path, FsAccess::Execute),
            runs,
            "{path}: {:?}",
            rules_of(&c)
        );
    }
    assert!(c.config.handled_fs.contains(&FsAccess::Execute));
    // The supervisor's own check says the same.
    for (path, refused) in [
        ("/home/u/proj/README", true),
        ("/tmp/x", true),
        ("/home/u/proj/src/main", false),
        ("/usr/bin/true", false),
    ] {
        assert_eq!(c.exec_places.refuses(path), refused, "{path}");
    }
    // Mounted noexec where it can be: not the workspace, which has an
    // exception beneath it (a mount flag covers the whole subtree).
    assert!(
        c.config.noexec_mounts.contains(&"/tmp".to_string()),
        "{:?}",
        c.config.noexec_mounts
    );
    assert!(!c.config.noexec_mounts.contains(&"/home/u/proj".to_string()));
    // Without it, the workspace runs what it writes.
    let open = compile(
        &pol("default: allow\n\
              file_rules:\n\
              - {name: run, paths: [\"/\", \"/**\"], operations: [read, execute], decision: allow}\n\
              - {name: ws, paths: [\"${WORKSPACE}\", \"${WORKSPACE}/**\"], operations: [write, create, delete, execute], decision: allow}\n"),
        &vars(),
        &protect(&fs),
        LandlockCompat::BestEffort,
        &fs,
    );
    assert!(has(&open, "/home/u/proj/README", FsAccess::Execute));
    assert!(open.config.noexec_mounts.is_empty() && open.exec_places.denied.is_empty());
}

#[test]
fn exec_sources_deny_needs_the_writable_places_listed() {
    let err = Policy::from_yaml(
        "default: allow\nexec_sources: {writable: deny}\nfile_rules:\n- {name: s, paths: [/etc/**], operations: [write], decision: deny}\n",
        "t.yaml",
    )
    .err()
    .map(|e| e.to_string())
    .unwrap_or_default();
    assert!(
        err.contains("needs the places the tree can write listed"),
        "{err}"
    );
    let err = Policy::from_yaml(
        "default: allow\nexec_sources: {writable: approve}\n",
        "t.yaml",
    )
    .err()
    .map(|e| e.to_string())
    .unwrap_or_default();
    assert!(err.contains("use allow or deny"), "{err}");
    let err = Policy::from_yaml(
        "default: allow\nexec_sources: {writable: deny, except: [relative/x]}\nfile_rules:\n- {name: w, paths: [/tmp/**], operations: [write, create], decision: allow}\n",
        "t.yaml",
    )
    .err()
    .map(|e| e.to_string())
    .unwrap_or_default();
    assert!(err.contains("exec_sources.except"), "{err}");
}
