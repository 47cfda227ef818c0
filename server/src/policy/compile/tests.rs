//! Tests of `compile`.

use super::document::{check_policy_name, is_syscall_name, stem_of_origin};
use super::files::check_file_path;
use super::DepthRange;

#[test]
fn file_paths() {
    let cases: &[(&str, Result<(), &str>)] = &[
        ("/", Ok(())),
        ("/**", Ok(())),
        ("/usr/**", Ok(())),
        ("${WORKSPACE}", Ok(())),
        ("${WORKSPACE}/**", Ok(())),
        ("${HOME}/.cache/**", Ok(())),
        ("${TMPDIR}", Ok(())),
        ("relative/x", Err("not absolute")),
        ("${NOPE}/x", Err("unknown variable")),
        ("${WORKSPACE", Err("unterminated")),
        ("${WORKSPACE}x", Err("must follow")),
        ("/a/${HOME}", Err("only start")),
        ("/a/[b", Err("invalid glob")),
        ("/home/*/x", Err("only a literal path")),
        ("${HOME}/*.key", Err("only a literal path")),
    ];
    for (path, want) in cases {
        match (check_file_path(path), want) {
            (Ok(()), Ok(())) => {}
            (Err(e), Err(frag)) => assert!(e.to_string().contains(frag), "{path}: {e}"),
            (got, want) => panic!("{path}: got {got:?}, want {want:?}"),
        }
    }
}

#[test]
fn names() {
    assert_eq!(stem_of_origin("embedded:agent-default"), "agent-default");
    assert_eq!(stem_of_origin("/etc/agentsh/policies/mine.yaml"), "mine");
    assert_eq!(stem_of_origin("x"), "x");
    assert!(check_policy_name("agent-default").is_ok());
    assert!(check_policy_name("a/b").is_err());
    assert!(check_policy_name("..").is_err());
    assert!(check_policy_name("").is_err());
    assert!(is_syscall_name("keyctl"));
    assert!(is_syscall_name("_sysctl"));
    assert!(!is_syscall_name("Keyctl"));
    assert!(!is_syscall_name("1x"));
    assert!(!is_syscall_name(""));
}

#[test]
fn depth_ranges() {
    type Probes = &'static [(u32, bool)];
    let cases: &[(DepthRange, Probes, &str)] = &[
        (DepthRange::ANY, &[(0, true), (9, true)], "any depth"),
        (
            DepthRange { min: 0, max: 0 },
            &[(0, true), (1, false)],
            "direct",
        ),
        (
            DepthRange {
                min: 1,
                max: u32::MAX,
            },
            &[(0, false), (1, true), (50, true)],
            "nested",
        ),
        (
            DepthRange { min: 2, max: 5 },
            &[(1, false), (2, true), (5, true), (6, false)],
            "depth 2..=5",
        ),
        (
            DepthRange {
                min: 3,
                max: u32::MAX,
            },
            &[(2, false), (3, true)],
            "depth >= 3",
        ),
    ];
    for (range, probes, text) in cases {
        assert_eq!(range.describe(), *text);
        for (depth, want) in *probes {
            assert_eq!(range.contains(*depth), *want, "{range:?} {depth}");
        }
    }
}
