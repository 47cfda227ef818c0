//! What the families' unit tests drive their real handlers with, without
//! root and without a tracee: a context whose kernel and `/proc` are the
//! recording doubles (`tracee::recording`, `stops::recording`; the HTTP
//! proxy: `http_proxy::recording`), a tree of
//! the test's own process with a policy given as text, an audit log in a
//! directory of its own (read back as JSON), a recording [`Stop`], and the
//! exec strings laid out in the test's own memory (the double answers the
//! other questions about the test's process for real).
//!
//! Failure modes: a fixture that cannot be made panics (a test bug, or a
//! machine without `/proc`).

use super::context::SupervisorContext;
use super::exec::identity::IdentityIndex;
use super::http_proxy::recording::RecordingProxy;
use super::seam::{Held, Hold, Holder, Stop, Verification};
use super::stops::recording::RecordingStops;
use super::tasks::Tasks;
use super::tree::{LiveRules, Tree, TreeRules, TreeTerms};
use crate::audit::AuditLog;
use crate::config::Config;
use crate::tracee::recording::RecordingHost;
use std::cell::RefCell;
use std::ffi::CString;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

/// The session of every test tree.
pub const SESSION: &str = "s-unit";

/// The calling thread's id.
pub fn own_tid() -> u32 {
    // SAFETY: gettid takes nothing and cannot fail.
    (unsafe { libc::gettid() }) as u32
}

/// One unit test's supervisor: context, tree and tasks, with the doubles
/// it answers through.
pub struct Bench {
    pub ctx: SupervisorContext,
    pub tree: Tree,
    pub tasks: Tasks,
    pub host: Arc<RecordingHost>,
    pub stops: Arc<RecordingStops>,
    dir: PathBuf,
}

/// Where no test holds a call for an operator.
struct NoOperator;

impl Hold for NoOperator {
    fn hold(self: Arc<Self>, _held: Box<dyn Held>) {
        panic!("a unit test held a call for an operator");
    }
}

/// One empty identity index for every test (it indexes nothing).
fn index() -> &'static IdentityIndex {
    static INDEX: OnceLock<IdentityIndex> = OnceLock::new();
    INDEX.get_or_init(|| IdentityIndex::start(&[], false).0)
}

impl Bench {
    /// A bench judging by `policy` (YAML), the server configured as by
    /// default but for `edit`, nothing explained on the test's stderr.
    pub fn new(policy: &str, edit: impl FnOnce(&mut Config)) -> Bench {
        static N: AtomicU64 = AtomicU64::new(0);
        let dir = std::env::temp_dir().join(format!(
            "agentsh-bench-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir).expect("a scratch directory");
        let audit = AuditLog::open(&dir.join("audit.jsonl"), 100).expect("an audit log");
        Bench::with_audit(policy, edit, audit, dir)
    }

    /// As [`Bench::new`], with the audit log given (one that fails, say).
    pub fn with_audit(
        policy: &str,
        edit: impl FnOnce(&mut Config),
        audit: AuditLog,
        dir: PathBuf,
    ) -> Bench {
        let mut config = Config::default();
        config.execve.explain = crate::config::Explain::Off;
        edit(&mut config);
        let parse = || Arc::new(crate::policy::Policy::from_yaml(policy, "unit.yaml").unwrap());
        let host = Arc::new(RecordingHost::new());
        let stops = Arc::new(RecordingStops::new());
        let ctx = SupervisorContext {
            limits: config.execve.clone(),
            audit: Arc::new(audit),
            approvals: Arc::new(NoOperator),
            audit_on_failure: config.audit.on_failure,
            dns: OnceLock::new(),
            egress_compat: config.egress.compat,
            proxy: Box::new(Arc::new(RecordingProxy::default())),
            host: host.clone(),
            stops: stops.clone(),
            hops: crate::supervisor::shimhops::ShimHops::none(),
        };
        let pid = std::process::id();
        let terms = TreeTerms {
            exec_places: Default::default(),
            rules: LiveRules::new(Arc::new(TreeRules {
                policy: parse(),
                index: index(),
            })),
            started_with: parse(),
            doomed: Arc::default(),
            files: None,
        };
        Bench {
            ctx,
            tree: Tree::new(SESSION.into(), pid, terms),
            tasks: Tasks::new(pid),
            host,
            stops,
            dir,
        }
    }

    /// A scratch directory of this bench's own.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Every event written to the JSONL file, in order.
    pub fn events(&self) -> Vec<serde_json::Value> {
        let text = std::fs::read_to_string(self.dir.join("audit.jsonl")).unwrap_or_default();
        text.lines()
            .map(|l| serde_json::from_str(l).expect("a JSON line"))
            .collect()
    }

    /// The one event written; fails unless there is exactly one.
    pub fn event(&self) -> serde_json::Value {
        let mut e = self.events();
        assert_eq!(e.len(), 1, "one event, not {e:?}");
        e.remove(0)
    }
}

impl Bench {
    /// The context and the tree alone, for a test that owns them (the
    /// tracer's loop); the scratch directory is removed now.
    pub fn into_parts(self) -> (SupervisorContext, Tree) {
        let me = std::mem::ManuallyDrop::new(self);
        let _ = std::fs::remove_dir_all(&me.dir);
        // SAFETY: `me` is never dropped nor used again: each of the two
        // fields is moved out once; the others are leaked (a test's).
        unsafe { (std::ptr::read(&me.ctx), std::ptr::read(&me.tree)) }
    }
}

impl Drop for Bench {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// How a [`RecordingStop`] was answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answered {
    Proceeded,
    Refused(i32),
    Value(i64),
}

/// A [`Stop`] that records its answers (and what a verifying backend was
/// told to expect); it holds nothing for later.
#[derive(Default)]
pub struct RecordingStop {
    /// Plays a backend that checks every exec itself (ptrace).
    pub verifies: bool,
    answers: RefCell<Vec<Answered>>,
    pub expected: RefCell<Vec<Verification>>,
    /// Plays a backend that pins a call's bytes (ptrace with its region).
    pub pins: bool,
    /// What was pinned: each argument and its bytes.
    pub pinned: RefCell<Vec<(usize, Vec<u8>)>>,
    /// Where set, the session's events this log holds are counted at each
    /// CONTINUE (what was written before the answer).
    pub audit: Option<Arc<AuditLog>>,
    /// Those counts, in order.
    pub events_at_proceed: RefCell<Vec<usize>>,
}

impl RecordingStop {
    pub fn new(verifies: bool) -> RecordingStop {
        RecordingStop {
            verifies,
            ..RecordingStop::default()
        }
    }

    /// The answers given, in order.
    pub fn answers(&self) -> Vec<Answered> {
        self.answers.borrow().clone()
    }
}

impl Stop for RecordingStop {
    fn still_waiting(&self) -> bool {
        true
    }
    fn proceed(&self) -> io::Result<()> {
        if let Some(audit) = &self.audit {
            let n = audit.events_as_kept(SESSION, 0).len();
            self.events_at_proceed.borrow_mut().push(n);
        }
        self.answers.borrow_mut().push(Answered::Proceeded);
        Ok(())
    }
    fn refuse(&self, errno: i32) -> io::Result<()> {
        self.answers.borrow_mut().push(Answered::Refused(errno));
        Ok(())
    }
    fn answer(&self, val: i64) -> io::Result<()> {
        self.answers.borrow_mut().push(Answered::Value(val));
        Ok(())
    }
    fn verifies_every_exec(&self) -> bool {
        self.verifies
    }
    fn expect(&self, what: Verification) {
        self.expected.borrow_mut().push(what);
    }
    fn defer(&self) -> Holder {
        panic!("a unit test deferred a call")
    }
    fn pinning(&self) -> crate::supervisor::seam::Pinning {
        if self.pins {
            crate::supervisor::seam::Pinning::Ready
        } else {
            crate::supervisor::seam::Pinning::Unavailable
        }
    }
    fn pin(&self, copies: &[(usize, &[u8])]) -> io::Result<()> {
        let mut p = self.pinned.borrow_mut();
        p.extend(copies.iter().map(|(a, b)| (*a, b.to_vec())));
        Ok(())
    }
}

/// An exec's strings as the kernel finds them in the caller's memory:
/// here, the test's own.
pub struct ExecStrings {
    path: CString,
    args: Vec<CString>,
    ptrs: Vec<u64>,
}

impl ExecStrings {
    /// `path`, and `argv` (NULL-terminated).
    pub fn new(path: &str, argv: &[&str]) -> ExecStrings {
        let args: Vec<CString> = argv.iter().map(|a| CString::new(*a).unwrap()).collect();
        let mut ptrs: Vec<u64> = args.iter().map(|a| a.as_ptr() as u64).collect();
        ptrs.push(0);
        ExecStrings {
            path: CString::new(path).unwrap(),
            args,
            ptrs,
        }
    }

    /// The strings' argv array.
    pub fn argv_addr(&self) -> u64 {
        debug_assert_eq!(self.ptrs.len(), self.args.len() + 1);
        self.ptrs.as_ptr() as u64
    }

    /// The path's address.
    pub fn path_addr(&self) -> u64 {
        self.path.as_ptr() as u64
    }
}
