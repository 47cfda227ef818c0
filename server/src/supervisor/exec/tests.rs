//! The exec family's fail-closed branches, each driven through the real
//! [`handle`] with the recording doubles (`supervisor::testkit`), without
//! root: each test asserts the answer (EACCES, or the kernel's errno) and
//! the event written (its rule and reason), or that none was written.

use super::handle::handle;
use super::request::ExecRequest;
use super::state::ExecState;
use crate::config::RaceGuard;
use crate::supervisor::stops::recording::{Answer, Asked};
use crate::supervisor::testkit::{own_tid, Answered, Bench, ExecStrings, RecordingStop};
use crate::tracee::recording::{Question, Scripted};
use agentsh_proto::execabi::{self, ExecArgs, ExecKind, ExecSyscall};

/// Everything allowed: a refusal below is the mechanism's, not a rule's.
const ALLOW_ALL: &str = "name: unit\ndefault: allow\n";

/// The dynamic loader of this machine's ABI.
#[cfg(target_arch = "x86_64")]
const LOADER: &str = "/lib64/ld-linux-x86-64.so.2";
#[cfg(target_arch = "aarch64")]
const LOADER: &str = "/lib/ld-linux-aarch64.so.1";

fn execve() -> &'static ExecSyscall {
    let native = execabi::filter_abis()[0];
    execabi::EXEC_SYSCALLS
        .iter()
        .find(|s| s.abi == native && s.kind == ExecKind::Execve)
        .expect("the native execve")
}

/// The exec of the strings at `path` and `argv` in this thread, handled.
fn exec_at(b: &mut Bench, path: u64, argv: u64, stop: &RecordingStop) {
    let req = ExecRequest {
        tid: own_tid(),
        call: execve(),
        args: ExecArgs {
            dirfd: libc::AT_FDCWD,
            path,
            argv,
            flags: 0,
            ptr_size: std::mem::size_of::<usize>(),
        },
        instead: None,
    };
    let mut state = ExecState::default();
    handle(&b.ctx, &b.tree, &mut b.tasks, &mut state, &req, stop);
}

fn exec(b: &mut Bench, s: &ExecStrings, stop: &RecordingStop) {
    exec_at(b, s.path_addr(), s.argv_addr(), stop);
}

/// `/bin/true`, as a shell runs it.
fn true_() -> ExecStrings {
    ExecStrings::new("/bin/true", &["true"])
}

/// Answered EACCES, with one `execve` event denied by `rule` whose reason
/// says `why`.
fn assert_refused(b: &Bench, stop: &RecordingStop, rule: &str, why: &str) {
    assert_eq!(stop.answers(), [Answered::Refused(libc::EACCES)]);
    let e = b.event();
    assert_eq!(e["type"], "execve", "{e}");
    assert_eq!(e["rule"], rule, "{e}");
    assert_eq!(e["effective_action"], "deny", "{e}");
    let reason = e["message"].as_str().unwrap_or_default();
    assert!(reason.contains(why), "{why:?} not in {reason:?}");
}

#[test]
fn an_exec_every_question_answers_runs() {
    // The control: with every answer real, the exec proceeds, so each test
    // below fails if its branch stopped refusing.
    let mut b = Bench::new(ALLOW_ALL, |_| {});
    let stop = RecordingStop::new(true);
    exec(&mut b, &true_(), &stop);
    assert_eq!(stop.answers(), [Answered::Proceeded]);
    assert_eq!(
        stop.expected.borrow().len(),
        1,
        "the backend told what runs"
    );
    let e = b.event();
    assert_eq!(
        (e["rule"].as_str(), e["decision"].as_str()),
        (Some("default"), Some("allow"))
    );
}

#[test]
fn an_unwatched_exec_every_question_answers_runs() {
    // The control of the user-notify path: sharing asked, maps read.
    let mut b = Bench::new(ALLOW_ALL, |_| {});
    let stop = RecordingStop::new(false);
    exec(&mut b, &true_(), &stop);
    assert_eq!(stop.answers(), [Answered::Proceeded], "{:?}", b.events());
    assert!(b.stops.calls().contains(&Asked::Sharing));
    assert!(b.host.calls().contains(&Question::Maps));
}

#[test]
fn a_caller_whose_stat_cannot_be_opened_is_refused_unaudited() {
    // Gone: nothing to audit, and nothing runs.
    let mut b = Bench::new(ALLOW_ALL, |_| {});
    b.host
        .script(Question::StatFile, Scripted::Fails(libc::ENOENT));
    let stop = RecordingStop::new(false);
    exec(&mut b, &true_(), &stop);
    assert_eq!(stop.answers(), [Answered::Refused(libc::EACCES)]);
    assert!(b.events().is_empty());
    assert_eq!(b.host.calls(), [Question::StatFile]);
}

#[test]
fn a_caller_whose_stat_cannot_be_read_is_refused_unaudited() {
    let mut b = Bench::new(ALLOW_ALL, |_| {});
    b.host.script(Question::StatFile, Scripted::Unreadable);
    let stop = RecordingStop::new(false);
    exec(&mut b, &true_(), &stop);
    assert_eq!(stop.answers(), [Answered::Refused(libc::EACCES)]);
    assert!(b.events().is_empty());
}

#[test]
fn a_null_path_is_refused_unreadable() {
    let mut b = Bench::new(ALLOW_ALL, |_| {});
    let s = true_();
    let stop = RecordingStop::new(false);
    exec_at(&mut b, 0, s.argv_addr(), &stop);
    assert_refused(&b, &stop, "unreadable", "exec path pointer is NULL");
}

#[test]
fn a_path_that_cannot_be_read_is_refused_unreadable() {
    let mut b = Bench::new(ALLOW_ALL, |_| {});
    let s = true_();
    let stop = RecordingStop::new(false);
    // The first page is never mapped: EFAULT, as for a tracee's bad pointer.
    exec_at(&mut b, 16, s.argv_addr(), &stop);
    assert_refused(&b, &stop, "unreadable", "exec path cannot be read");
}

#[test]
fn a_path_longer_than_path_max_is_refused_unreadable() {
    let mut b = Bench::new(ALLOW_ALL, |_| {});
    let long = format!("/{}", "a".repeat(libc::PATH_MAX as usize + 10));
    let s = ExecStrings::new(&long, &["a"]);
    let stop = RecordingStop::new(false);
    exec(&mut b, &s, &stop);
    assert_refused(&b, &stop, "unreadable", "exec path longer than PATH_MAX");
}

#[test]
fn a_view_that_cannot_be_opened_is_refused_unresolvable() {
    let mut b = Bench::new(ALLOW_ALL, |_| {});
    b.host.script(Question::View, Scripted::Fails(libc::EACCES));
    let stop = RecordingStop::new(false);
    exec(&mut b, &true_(), &stop);
    assert_refused(
        &b,
        &stop,
        "unresolvable",
        "cannot be resolved in the calling thread's view",
    );
}

#[test]
fn a_path_that_cannot_be_resolved_is_refused_unresolvable() {
    let mut b = Bench::new(ALLOW_ALL, |_| {});
    b.host.script(Question::Resolve, Scripted::Fails(libc::EIO));
    let stop = RecordingStop::new(false);
    exec(&mut b, &true_(), &stop);
    assert_refused(
        &b,
        &stop,
        "unresolvable",
        "\"/bin/true\" cannot be resolved",
    );
}

#[test]
fn a_path_that_names_nothing_gets_the_kernels_errno_unaudited() {
    let mut b = Bench::new(ALLOW_ALL, |_| {});
    b.host
        .script(Question::Resolve, Scripted::Missing(libc::ENOENT));
    let stop = RecordingStop::new(false);
    exec(&mut b, &true_(), &stop);
    assert_eq!(stop.answers(), [Answered::Refused(libc::ENOENT)]);
    assert!(b.events().is_empty());
}

#[test]
fn sharers_that_cannot_be_found_are_refused_memory_not_frozen() {
    let mut b = Bench::new(ALLOW_ALL, |_| {});
    b.stops.script(Asked::Sharing, Answer::Fails(libc::ENOSYS));
    let stop = RecordingStop::new(false);
    exec(&mut b, &true_(), &stop);
    assert_refused(&b, &stop, "memory_not_frozen", "kcmp");
}

#[test]
fn sharers_that_cannot_be_stopped_are_refused_memory_not_frozen() {
    let mut b = Bench::new(ALLOW_ALL, |c| c.execve.race_guard = RaceGuard::Freeze);
    b.stops.script(Asked::Sharing, Answer::Shared);
    b.stops.script(Asked::Freeze, Answer::Fails(libc::EPERM));
    let stop = RecordingStop::new(false);
    exec(&mut b, &true_(), &stop);
    assert_refused(&b, &stop, "memory_not_frozen", "PTRACE_SEIZE");
    assert_eq!(b.stops.calls(), [Asked::Sharing, Asked::Freeze]);
}

#[test]
fn sharers_whose_exec_cannot_be_watched_are_refused_unverifiable() {
    // `race_guard: verify`: nothing is stopped, the exec is watched instead.
    let mut b = Bench::new(ALLOW_ALL, |c| c.execve.race_guard = RaceGuard::Verify);
    b.stops.script(Asked::Sharing, Answer::Shared);
    let stop = RecordingStop::new(false);
    exec(&mut b, &true_(), &stop);
    assert_refused(&b, &stop, "unverifiable", "cannot watch the exec of thread");
    assert_eq!(b.stops.calls(), [Asked::Sharing, Asked::ArmWatch]);
}

#[test]
fn an_argv_that_cannot_be_read_is_refused_unreadable() {
    let mut b = Bench::new(ALLOW_ALL, |_| {});
    let s = true_();
    let stop = RecordingStop::new(false);
    exec_at(&mut b, s.path_addr(), 16, &stop);
    assert_refused(&b, &stop, "unreadable", "argv cannot be read");
}

#[test]
fn maps_that_cannot_be_opened_are_refused_unreadable() {
    let mut b = Bench::new(ALLOW_ALL, |_| {});
    b.host.script(Question::Maps, Scripted::Fails(libc::EACCES));
    let stop = RecordingStop::new(false);
    exec(&mut b, &true_(), &stop);
    assert_refused(&b, &stop, "unreadable", "memory map cannot be read");
}

#[test]
fn maps_that_cannot_be_read_are_refused_unreadable() {
    let mut b = Bench::new(ALLOW_ALL, |_| {});
    b.host.script(Question::Maps, Scripted::Unreadable);
    let stop = RecordingStop::new(false);
    exec(&mut b, &true_(), &stop);
    assert_refused(&b, &stop, "unreadable", "the exec's path at");
}

/// One page of shared memory holding `text` (unmapped when dropped).
struct SharedPage(*mut libc::c_void);

impl SharedPage {
    fn with(text: &[u8]) -> SharedPage {
        // SAFETY: a fresh anonymous mapping; no memory of ours is named.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                4096,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert_ne!(p, libc::MAP_FAILED);
        assert!(text.len() < 4096);
        // SAFETY: the page is ours, writable, and longer than `text`.
        unsafe { std::ptr::copy_nonoverlapping(text.as_ptr(), p.cast::<u8>(), text.len()) };
        SharedPage(p)
    }
}

impl Drop for SharedPage {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `with`, used no more.
        unsafe { libc::munmap(self.0, 4096) };
    }
}

#[test]
fn a_path_in_shared_memory_is_refused_shared_memory() {
    let mut b = Bench::new(ALLOW_ALL, |_| {});
    let page = SharedPage::with(b"/bin/true\0");
    let s = true_();
    let stop = RecordingStop::new(false);
    exec_at(&mut b, page.0 as u64, s.argv_addr(), &stop);
    assert_refused(&b, &stop, "shared_memory", "the exec's path lies in");
}

#[test]
fn interpreters_nested_too_deep_are_refused_interpreter_chain() {
    let mut b = Bench::new(ALLOW_ALL, |_| {});
    b.host.script(Question::Interpreters, Scripted::TooDeep);
    let stop = RecordingStop::new(false);
    exec(&mut b, &true_(), &stop);
    assert_refused(
        &b,
        &stop,
        "interpreter_chain",
        "nested deeper than the kernel follows",
    );
}

#[test]
fn an_interpreter_that_cannot_be_resolved_is_refused_unresolvable() {
    let mut b = Bench::new(ALLOW_ALL, |_| {});
    b.host
        .script(Question::Interpreters, Scripted::Fails(libc::EIO));
    let stop = RecordingStop::new(false);
    exec(&mut b, &true_(), &stop);
    assert_refused(&b, &stop, "unresolvable", "#! interpreter");
}

/// The loader run with `argv` (its own name first).
fn loader(argv: &[&str]) -> ExecStrings {
    ExecStrings::new(LOADER, argv)
}

#[test]
fn loaders_nested_too_deep_are_refused_loader_payload() {
    let mut b = Bench::new(ALLOW_ALL, |_| {});
    let stop = RecordingStop::new(true);
    let s = loader(&[LOADER, LOADER, LOADER, LOADER, LOADER, LOADER, "/bin/true"]);
    exec(&mut b, &s, &stop);
    assert_refused(
        &b,
        &stop,
        "loader_payload",
        "dynamic loaders nested deeper than",
    );
}

#[test]
fn a_loader_payload_the_tree_can_change_is_refused_loader_payload() {
    let mut b = Bench::new(ALLOW_ALL, |_| {});
    let prog = b.dir().join("prog");
    std::fs::write(&prog, b"#!/bin/sh\n").unwrap();
    let prog = prog.to_str().unwrap().to_string();
    let stop = RecordingStop::new(true);
    exec(&mut b, &loader(&[LOADER, &prog]), &stop);
    assert_refused(
        &b,
        &stop,
        "loader_payload",
        "the tree can change what that is",
    );
}

#[test]
fn a_fileless_loader_payload_is_refused_fileless_exec() {
    let mut b = Bench::new(ALLOW_ALL, |_| {});
    // The loader itself resolves; its payload is a memfd.
    b.host.script(Question::Resolve, Scripted::Real);
    b.host.script(Question::Resolve, Scripted::Anonymous);
    let stop = RecordingStop::new(true);
    exec(&mut b, &loader(&[LOADER, "/bin/true"]), &stop);
    assert_refused(&b, &stop, "fileless_exec", "a memfd or deleted file");
}

#[test]
fn a_loader_payload_that_cannot_be_resolved_is_refused_unresolvable() {
    let mut b = Bench::new(ALLOW_ALL, |_| {});
    b.host.script(Question::Resolve, Scripted::Real);
    b.host.script(Question::Resolve, Scripted::Fails(libc::EIO));
    let stop = RecordingStop::new(true);
    exec(&mut b, &loader(&[LOADER, "/bin/true"]), &stop);
    assert_refused(&b, &stop, "unresolvable", "the dynamic loader's program");
}

#[test]
fn an_exec_with_no_identity_to_check_is_refused_unverifiable() {
    // A verifying backend, and a script whose interpreter names no file.
    let mut b = Bench::new(ALLOW_ALL, |_| {});
    b.host
        .script(Question::Interpreters, Scripted::NoInterpreterFile);
    let stop = RecordingStop::new(true);
    exec(&mut b, &true_(), &stop);
    assert_refused(
        &b,
        &stop,
        "unverifiable",
        "identity of the file to run cannot be read",
    );
    assert!(
        stop.expected.borrow().is_empty(),
        "nothing expected of a refusal"
    );
}

#[test]
fn an_exec_whose_watch_cannot_be_armed_is_refused_unverifiable() {
    let mut b = Bench::new(ALLOW_ALL, |c| {
        c.execve.watch = crate::config::ExecWatch::Every;
    });
    b.stops.script(Asked::ArmWatch, Answer::Fails(libc::EPERM));
    let stop = RecordingStop::new(false);
    exec(&mut b, &true_(), &stop);
    assert_refused(&b, &stop, "unverifiable", "cannot watch the exec of thread");
    assert!(b.stops.calls().contains(&Asked::ArmWatch));
}

#[test]
fn an_allowed_execs_event_follows_the_answer_under_continue_and_precedes_it_under_refuse() {
    // `continue` (the default): the event is written right after CONTINUE,
    // before the handler returns (so before the tree's next notification).
    let mut b = Bench::new(ALLOW_ALL, |_| {});
    let mut stop = RecordingStop::new(false);
    stop.audit = Some(b.ctx.audit.clone());
    exec(&mut b, &true_(), &stop);
    assert_eq!(stop.answers(), [Answered::Proceeded]);
    assert_eq!(
        *stop.events_at_proceed.borrow(),
        [0],
        "written before the answer"
    );
    assert_eq!(kept(&b).len(), 1, "written once the handler returned");
    // `refuse`: nothing runs before its event is in the file.
    let mut b = Bench::new(ALLOW_ALL, |c| {
        c.audit.on_failure = crate::config::AuditOnFailure::Refuse;
    });
    let mut stop = RecordingStop::new(false);
    stop.audit = Some(b.ctx.audit.clone());
    exec(&mut b, &true_(), &stop);
    assert_eq!(stop.answers(), [Answered::Proceeded]);
    assert_eq!(*stop.events_at_proceed.borrow(), [1]);
    assert_eq!(kept(&b).len(), 1);
}

/// A bench whose audit file takes no write, under `audit.on_failure: refuse`.
fn unauditable() -> Bench {
    let dir = std::env::temp_dir().join(format!("agentsh-unaudited-{}", own_tid()));
    std::fs::create_dir_all(&dir).unwrap();
    let audit = crate::audit::AuditLog::unwritable_for_tests(100);
    Bench::with_audit(
        ALLOW_ALL,
        |c| c.audit.on_failure = crate::config::AuditOnFailure::Refuse,
        audit,
        dir,
    )
}

/// The events the log kept in memory (its file takes none).
fn kept(b: &Bench) -> Vec<crate::audit::Event> {
    b.ctx.audit.events(crate::supervisor::testkit::SESSION, 0)
}

#[test]
fn an_exec_whose_event_cannot_be_written_is_refused() {
    let mut b = unauditable();
    let stop = RecordingStop::new(false);
    exec(&mut b, &true_(), &stop);
    assert_eq!(stop.answers(), [Answered::Refused(libc::EACCES)]);
    assert!(!b.ctx.audit.healthy());
    assert_eq!(kept(&b).len(), 1);
}

#[test]
fn an_exec_after_the_log_failed_is_refused_audit_unavailable() {
    let mut b = unauditable();
    // A verifying backend lets the first through (it is already expected);
    // the log has failed by the second.
    let first = RecordingStop::new(true);
    exec(&mut b, &true_(), &first);
    assert_eq!(first.answers(), [Answered::Proceeded]);
    let stop = RecordingStop::new(true);
    exec(&mut b, &true_(), &stop);
    assert_eq!(stop.answers(), [Answered::Refused(libc::EACCES)]);
    let events = kept(&b);
    let last = serde_json::to_value(&events.last().expect("its event").body).unwrap();
    assert_eq!(last["rule"], "audit_unavailable", "{last}");
    let reason = last["message"].as_str().unwrap_or_default();
    assert!(
        reason.contains("the audit log cannot be written"),
        "{reason}"
    );
}
