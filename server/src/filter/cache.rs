//! [`Filters`]: the server's filter compiler, with the policy's part of
//! every spec, a cache of compiled programs, and templates (a program
//! compiled once per shape of spec, whose daemon ids are patched in).
//! Compiling with libseccomp costs about a millisecond; a cached or
//! patched program costs nothing.
//!
//! Failure modes: a spec that cannot be compiled is a [`FilterError`]; a
//! shape whose program depends on the values in more than the patched
//! places has no template, and each spec of it is compiled in full.

use super::build;
use super::compiled::{compile, compiled, CompiledFilter};
use super::error::FilterError;
use super::spec::{FilterSpec, NetFilter, ProcessId};
use agentsh_proto::ExecBackend;
use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};

/// How many compiled programs the cache keeps (it is emptied when full).
const CACHE_ENTRIES: usize = 64;

/// Placeholder ids above the kernel's largest pid (`PID_MAX_LIMIT`, 2^22):
/// no process has them.
const HIGH: [u32; 4] = [0x3ffe_1001, 0x3ffe_3003, 0x3ffe_2002, 0x3ffe_4004];

/// A program compiled once for a shape of spec (which protected ids there
/// are, and on which side of the server's own ids the daemon's fall:
/// libseccomp orders a syscall's comparisons by value), with the daemon's
/// pid and process group as placeholders, and where they sit. Compiling a
/// filter with libseccomp costs about a millisecond, on the first shell of
/// every new SDK daemon; patching constants costs nothing. A template is used
/// only if compiling the shape with two different placeholder pairs of the
/// same side gives the same program but for those constants, at the same
/// places, and the placeholders appear nowhere else: then within that side
/// the values decide nothing else in the program. Anything else falls back
/// to compiling in full.
#[derive(Debug)]
pub(super) struct Template {
    program: Vec<libc::sock_filter>,
    pid_at: Vec<usize>,
    neg_pgid_at: Vec<usize>,
}

/// Which protected ids a tree's spec has besides the server's, and on which
/// side of the server's the daemon's fall: the template key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(super) struct Shape {
    /// The daemon's process group is protected too (it is not the server's).
    daemon_pgid: bool,
    refuse_kill_own_group: bool,
    pub(super) pid_above: bool,
    pub(super) pgid_above: bool,
}

impl Shape {
    /// The key: without the daemon's group among the protected ones, the
    /// side its group falls on decides nothing and is not part of it.
    fn new(
        daemon_pgid: bool,
        refuse_kill_own_group: bool,
        pid_above: bool,
        pgid_above: bool,
    ) -> Shape {
        Shape {
            daemon_pgid,
            refuse_kill_own_group,
            pid_above,
            pgid_above: daemon_pgid && pgid_above,
        }
    }
}

fn low32(v: i64) -> u32 {
    v as u32
}

impl Template {
    /// Builds the template of `shape`, or `None` when the program depends
    /// on the values (the cache then compiles each spec in full).
    fn build(f: &Filters, server: ProcessId, shape: Shape) -> Option<Template> {
        let spec = |pid: u32, pgid: u32| {
            let mut s = FilterSpec::for_tree(server, None, None, f.effective_landlock_abi);
            s.protected_pids.insert(pid);
            if shape.daemon_pgid {
                s.protected_pgids.insert(pgid);
            }
            s.refuse_kill_own_group = shape.refuse_kill_own_group;
            f.server_parts(&mut s);
            s
        };
        // Two placeholders on the daemon's side of `own`.
        let side = |above: bool, own: u32, high: [u32; 2]| -> Option<[u32; 2]> {
            if above {
                Some(high)
            } else {
                let a = own.checked_sub(1).filter(|v| *v >= 2)?;
                let b = own.checked_sub(2).filter(|v| *v >= 2)?;
                Some([a, b])
            }
        };
        let pids = side(shape.pid_above, server.pid, [HIGH[0], HIGH[1]])?;
        // Without the daemon's group in the spec its side decides nothing.
        let pgids = if shape.daemon_pgid {
            side(shape.pgid_above, server.pgid, [HIGH[2], HIGH[3]])?
        } else {
            [HIGH[2], HIGH[3]]
        };
        let a = build::program(&spec(pids[0], pgids[0])).ok()?;
        let b = build::program(&spec(pids[1], pgids[1])).ok()?;
        if a.len() != b.len() {
            return None;
        }
        let neg = |g: u32| low32(-i64::from(g));
        let placed = [pids[0], pids[1], neg(pgids[0]), neg(pgids[1])];
        let (mut pid_at, mut neg_pgid_at) = (Vec::new(), Vec::new());
        for (i, (x, y)) in a.iter().zip(&b).enumerate() {
            if (x.code, x.jt, x.jf) != (y.code, y.jt, y.jf) {
                return None;
            }
            if (x.k, y.k) == (pids[0], pids[1]) {
                pid_at.push(i);
            } else if shape.daemon_pgid && (x.k, y.k) == (neg(pgids[0]), neg(pgids[1])) {
                neg_pgid_at.push(i);
            } else if x.k != y.k || placed.contains(&x.k) {
                // A placeholder where it was not put, or a value that moved:
                // patching would not give the compiled program.
                return None;
            }
        }
        if pid_at.is_empty() || shape.daemon_pgid == neg_pgid_at.is_empty() {
            return None;
        }
        Some(Template {
            program: a,
            pid_at,
            neg_pgid_at,
        })
    }

    fn patch(&self, pid: u32, pgid: u32) -> Vec<libc::sock_filter> {
        let mut p = self.program.clone();
        for &i in &self.pid_at {
            p[i].k = pid;
        }
        for &i in &self.neg_pgid_at {
            p[i].k = low32(-i64::from(pgid));
        }
        p
    }
}

/// The server's filter compiler: the policy's blocklist, the effective
/// Landlock ABI, and a cache of compiled programs.
pub struct Filters {
    blocked: BTreeSet<String>,
    refuse_exec_memory: bool,
    judge_exec_maps: bool,
    reads_unjudged: bool,
    net: NetFilter,
    effective_landlock_abi: i64,
    backend: ExecBackend,
    cache: Mutex<HashMap<FilterSpec, Arc<CompiledFilter>>>,
    /// Per shape: its template, or `None` when it cannot have one.
    templates: Mutex<HashMap<Shape, Option<Arc<Template>>>>,
}

impl Filters {
    /// Checks the policy's names by compiling once.
    ///
    /// # Errors
    /// The policy's blocklist cannot be compiled.
    pub fn new(
        policy_blocked: &[String],
        refuse_exec_memory: bool,
        judge_exec_maps: bool,
        reads_unjudged: bool,
        net: NetFilter,
        effective_landlock_abi: i64,
        backend: ExecBackend,
    ) -> Result<Filters, FilterError> {
        let f = Filters {
            blocked: policy_blocked.iter().cloned().collect(),
            refuse_exec_memory,
            judge_exec_maps,
            reads_unjudged,
            net,
            effective_landlock_abi,
            backend,
            cache: Mutex::new(HashMap::new()),
            templates: Mutex::new(HashMap::new()),
        };
        f.compile(FilterSpec::for_tree(
            ProcessId::current(),
            None,
            None,
            effective_landlock_abi,
        ))?;
        // The usual shapes are ready before the first shell, which then
        // costs what later ones cost: a daemon started after the server (its
        // command, or a later one) in a group of its own or the server's.
        // Whether the tree's own group is protected (the shell is in the
        // daemon's group, or the SDK gave it one of its own) is known only
        // at its wrap-init: both are ready.
        let server = ProcessId::current();
        for daemon_pgid in [false, true] {
            for refuse_kill_own_group in [true, false] {
                f.template(
                    server,
                    Shape::new(daemon_pgid, refuse_kill_own_group, true, true),
                );
            }
        }
        Ok(f)
    }

    /// The template of `shape` (built on first use).
    fn template(&self, server: ProcessId, shape: Shape) -> Option<Arc<Template>> {
        if let Some(t) = self.lock_templates().get(&shape) {
            return t.clone();
        }
        let t = Template::build(self, server, shape).map(Arc::new);
        if t.is_none() {
            tracing::debug!(
                ?shape,
                "no filter template for this shape: each spec compiled in full"
            );
        }
        self.lock_templates().insert(shape, t.clone());
        t
    }

    pub(super) fn lock_templates(
        &self,
    ) -> std::sync::MutexGuard<'_, HashMap<Shape, Option<Arc<Template>>>> {
        self.templates
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The Landlock ABI agentsh uses (the kernel's, capped by `landlock.max_abi`).
    pub fn effective_landlock_abi(&self) -> i64 {
        self.effective_landlock_abi
    }

    /// Where this server's trees' traps go.
    pub fn backend(&self) -> ExecBackend {
        self.backend
    }

    /// The trees' path calls go to the tracer: a tracing backend, and no
    /// Landlock to keep the file rules.
    pub fn traces_files(&self) -> bool {
        self.backend.trap() == agentsh_proto::wire::Trap::Tracer && self.effective_landlock_abi == 0
    }

    /// The trees' calls that change files go to the supervisor to be
    /// explained where Landlock refuses them: the notify backend on a
    /// kernel with Landlock (see `FilterSpec::explain_writes`).
    pub fn explains_writes(&self) -> bool {
        self.backend.trap() == agentsh_proto::wire::Trap::UserNotif
            && self.effective_landlock_abi > 0
    }

    /// The parts of every spec that are the server's, not the tree's: the
    /// policy's blocklist and switches, the backend, and whether the path
    /// calls go to the tracer. One place, so a template is built from the
    /// same parts the spec it stands for has (a template built without the
    /// path-call traps once gave SDK daemons' trees under gVisor none).
    fn server_parts(&self, spec: &mut FilterSpec) {
        spec.blocked = self.blocked.clone();
        spec.refuse_exec_memory = self.refuse_exec_memory;
        spec.judge_exec_maps = self.judge_exec_maps;
        spec.backend = self.backend;
        spec.net = self.net.clone();
        spec.trace_files = self.traces_files();
        spec.skip_read_opens = spec.trace_files && self.reads_unjudged;
        spec.explain_writes = self.explains_writes();
        spec.x32 = super::spec::kernel_runs_x32();
    }

    /// The program for `spec` plus the policy's blocklist, from the cache when
    /// it was compiled before.
    ///
    /// # Errors
    /// See [`compile`].
    pub fn compile(&self, spec: FilterSpec) -> Result<Arc<CompiledFilter>, FilterError> {
        self.compile_from(spec, None)
    }

    /// [`Filters::compile`]; with `template` (its daemon's pid and group),
    /// from the template instead of libseccomp when one fits.
    fn compile_from(
        &self,
        mut spec: FilterSpec,
        template: Option<(&Template, ProcessId)>,
    ) -> Result<Arc<CompiledFilter>, FilterError> {
        self.server_parts(&mut spec);
        if let Some(c) = self.lock().get(&spec) {
            return Ok(c.clone());
        }
        // Compiled outside the lock: two wrap-inits may both compile a new
        // spec, and the second result simply replaces the first.
        let c = Arc::new(match template {
            Some((t, daemon)) => compiled(&spec, t.patch(daemon.pid, daemon.pgid)),
            None => compile(&spec)?,
        });
        let mut cache = self.lock();
        if cache.len() >= CACHE_ENTRIES {
            cache.clear();
        }
        cache.insert(spec, c.clone());
        Ok(c)
    }

    /// [`FilterSpec::for_tree`] for this server, compiled.
    ///
    /// # Errors
    /// See [`compile`].
    /// The keepers the daemon registered (`keepers`) are protected too,
    /// but never the tree's own `root`; with any, the program is compiled
    /// in full (and cached as any other).
    pub fn for_tree(
        &self,
        daemon: Option<ProcessId>,
        tree_pgid: Option<u32>,
        root: Option<u32>,
    ) -> Result<Arc<CompiledFilter>, FilterError> {
        let server = ProcessId::current();
        let mut spec = FilterSpec::for_tree(server, daemon, tree_pgid, self.effective_landlock_abi);
        let keepers = super::keepers::keepers_but(root);
        // Templates cover a daemon of its own (not the server), in a group
        // of its own or the server's, and no keeper.
        let template = daemon
            .filter(|_| keepers.is_empty())
            .filter(|d| d.pid > 1 && d.pid != server.pid && server.pgid > 1 && d.pgid > 1)
            .and_then(|d| {
                let shape = Shape::new(
                    d.pgid != server.pgid,
                    spec.refuse_kill_own_group,
                    d.pid > server.pid,
                    d.pgid > server.pgid,
                );
                self.template(server, shape).map(|t| (t, d))
            });
        spec.protected_pids.extend(keepers);
        self.compile_from(spec, template.as_ref().map(|(t, d)| (t.as_ref(), *d)))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<FilterSpec, Arc<CompiledFilter>>> {
        self.cache
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}
