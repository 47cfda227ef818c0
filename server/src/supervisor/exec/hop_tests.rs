//! The shim's hop skipped (`hop`), driven through the real [`handle`] with
//! the recording doubles: a shim stand-in (a copy of `/bin/true`), its
//! `NAME.real` and the link to it in a scratch directory.

use super::handle::handle;
use super::request::ExecRequest;
use super::state::ExecState;
use crate::supervisor::shimhops::{HopTo, ShimHops};
use crate::supervisor::testkit::{own_tid, Answered, Bench, ExecStrings, RecordingStop};
use agentsh_proto::execabi::{self, ExecArgs, ExecKind};
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;

/// A shim at `<dir>/tool`, its real program `<dir>/tool.real`, and the
/// link `<dir>/programs/tool` pointing at `real` (the real one, unless a
/// test says otherwise); the bench knows the shim by its identity.
struct Shimmed {
    shim: PathBuf,
    real: PathBuf,
    link: PathBuf,
}

fn shimmed(b: &mut Bench, link_to: Option<&str>) -> Shimmed {
    let dir = b.dir().to_path_buf();
    let shim = dir.join("tool");
    let real = dir.join("tool.real");
    std::fs::copy("/bin/true", &shim).unwrap();
    std::fs::copy("/bin/true", &real).unwrap();
    std::fs::create_dir_all(dir.join("programs")).unwrap();
    let link = dir.join("programs/tool");
    let to = link_to.map_or(real.clone(), |t| dir.join(t));
    std::os::unix::fs::symlink(to, &link).unwrap();
    let manifest = dir.join("manifest");
    std::fs::write(&manifest, "program x\n").unwrap();
    let (s, l) = (shim.clone(), link.display().to_string());
    b.ctx.hops = ShimHops::with_manifest(
        Box::new(move || vec![(s.clone(), HopTo::Program(l.clone()))]),
        manifest,
    );
    Shimmed { shim, real, link }
}

fn identity(p: &std::path::Path) -> (u64, u64) {
    let m = std::fs::metadata(p).unwrap();
    (m.dev(), m.ino())
}

fn run(b: &mut Bench, s: &ExecStrings, stop: &RecordingStop) {
    let native = execabi::filter_abis()[0];
    let call = execabi::EXEC_SYSCALLS
        .iter()
        .find(|c| c.abi == native && c.kind == ExecKind::Execve)
        .unwrap();
    let req = ExecRequest {
        tid: own_tid(),
        call,
        args: ExecArgs {
            dirfd: libc::AT_FDCWD,
            path: s.path_addr(),
            argv: s.argv_addr(),
            flags: 0,
            ptr_size: std::mem::size_of::<usize>(),
        },
        instead: None,
    };
    let mut state = ExecState::default();
    handle(&b.ctx, &b.tree, &mut b.tasks, &mut state, &req, stop);
}

fn pinning_stop() -> RecordingStop {
    let mut s = RecordingStop::new(true);
    s.pins = true;
    s
}

#[test]
fn a_shims_exec_runs_the_real_program_its_path_pinned_and_verified() {
    let mut b = Bench::new("name: unit\ndefault: allow\n", |_| {});
    let t = shimmed(&mut b, None);
    let s = ExecStrings::new(t.shim.to_str().unwrap(), &["tool", "-c", "x"]);
    let stop = pinning_stop();
    run(&mut b, &s, &stop);
    assert_eq!(stop.answers(), [Answered::Proceeded]);
    let mut path = t.link.display().to_string().into_bytes();
    path.push(0);
    assert_eq!(
        *stop.pinned.borrow(),
        [(0, path)],
        "the link's path, for arg 0"
    );
    let expected = stop.expected.borrow();
    assert_eq!(expected.len(), 1);
    assert_eq!(
        expected[0].expected.file,
        identity(&t.real),
        "the real file checked"
    );
    assert_eq!(
        expected[0].expected.argv,
        ["tool", "-c", "x"],
        "the caller's argv"
    );
    let events = b.events();
    assert_eq!(events.len(), 2, "{events:?}");
    assert_eq!(
        events[0]["filename"],
        t.shim.display().to_string(),
        "{events:?}"
    );
    let said = events[0]["message"].as_str().unwrap_or_default();
    assert!(said.contains("made in its place"), "{said}");
    assert_eq!(
        events[1]["filename"],
        t.link.display().to_string(),
        "{events:?}"
    );
    assert_eq!(events[1]["effective_action"], "allow", "{events:?}");
}

#[test]
fn without_pinning_or_with_a_link_the_shim_would_refuse_the_hop_is_kept() {
    for (pins, link_to) in [
        (false, None),
        (true, Some("tool")),
        (true, Some("elsewhere")),
    ] {
        let mut b = Bench::new("name: unit\ndefault: allow\n", |_| {});
        let t = shimmed(&mut b, link_to);
        std::fs::copy("/bin/true", b.dir().join("elsewhere")).unwrap();
        let s = ExecStrings::new(t.shim.to_str().unwrap(), &["tool"]);
        let mut stop = RecordingStop::new(true);
        stop.pins = pins;
        run(&mut b, &s, &stop);
        assert_eq!(stop.answers(), [Answered::Proceeded]);
        assert!(
            stop.pinned.borrow().is_empty(),
            "{pins} {link_to:?}: nothing pinned"
        );
        let e = b.event();
        assert_eq!(e["filename"], t.shim.display().to_string(), "{e}");
        let expected = stop.expected.borrow();
        assert_eq!(
            expected[0].expected.file,
            identity(&t.shim),
            "the shim runs"
        );
    }
}

#[test]
fn a_real_program_the_policy_denies_is_refused_at_the_shims_exec() {
    // The link's path, not the shim's name: only the real one is denied.
    let tmp = std::env::temp_dir().display().to_string();
    let policy = format!(
        "name: unit\ndefault: allow\ncommand_rules:\n  - name: no-real\n    \
         commands: [\"{tmp}/agentsh-bench-*/programs/tool\"]\n    decision: deny\n"
    );
    let mut b = Bench::new(&policy, |_| {});
    let t = shimmed(&mut b, None);
    let s = ExecStrings::new(t.shim.to_str().unwrap(), &["tool"]);
    let stop = pinning_stop();
    run(&mut b, &s, &stop);
    assert_eq!(stop.answers(), [Answered::Refused(libc::EACCES)]);
    let events = b.events();
    assert_eq!(events.len(), 2, "{events:?}");
    assert_eq!(events[1]["rule"], "no-real", "{events:?}");
    assert_eq!(events[1]["effective_action"], "deny", "{events:?}");
}
