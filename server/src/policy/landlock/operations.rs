//! What the file rules, `exec_sources` and agentsh's own protection ask, per
//! operation, before carving: the paths each operation is granted beneath
//! ([`Grant`]) and denied beneath ([`Deny`]), which operations the ruleset
//! handles, and the `exec_sources` places the supervisor checks too.
//!
//! Failure modes: none; fail closed. An `allow` path whose variable has no
//! value is skipped (that only removes access); a `deny` path that names
//! nothing resolvable leaves its operation granted nowhere (skipping it
//! would add access). Both are reported in the warnings.

use super::paths::{at_or_beneath, expand, resolve, FsView, SessionVars};
use super::protect::{SelfProtection, KERNEL_NO_WRITE, OWN_OOM_SCORE_ADJ};
use crate::policy::loaded::Policy;
use crate::policy::schema::{Decision, FileOperation, FileRule};
use crate::policy::semantics::{self, FileOpKind};
use agentsh_proto::FsAccess;
use std::collections::{BTreeMap, BTreeSet};

/// The rule name the audit and `policy check` show for `exec_sources`.
pub const RULE_EXEC_SOURCES: &str = crate::vocab::Builtin::ExecSources.rule();

/// The operations that modify the filesystem: always handled.
const MODIFY: [FsAccess; 3] = [FsAccess::Write, FsAccess::Create, FsAccess::Delete];

fn access_of(op: FileOperation) -> FsAccess {
    match op {
        FileOperation::Read => FsAccess::Read,
        FileOperation::Write => FsAccess::Write,
        FileOperation::Create => FsAccess::Create,
        FileOperation::Delete => FsAccess::Delete,
        FileOperation::Execute => FsAccess::Execute,
    }
}

/// A path an operation is granted beneath, and the file rule that granted
/// it (`None`: the operation is open there because no allow restricts it).
pub(super) struct Grant {
    pub(super) path: String,
    pub(super) rule: Option<String>,
}

pub(super) struct Deny {
    pub(super) path: String,
    /// Self-protection: no allow overrides it, however specific.
    pub(super) protected: bool,
    /// The file rule that denied it (`None` for self-protection).
    pub(super) rule: Option<String>,
}

/// What the file rules ask, per operation, before carving.
pub(super) struct FileOperations {
    /// The operations the ruleset handles.
    pub handled: BTreeSet<FsAccess>,
    pub grants: BTreeMap<FsAccess, Vec<Grant>>,
    pub denies: BTreeMap<FsAccess, Vec<Deny>>,
    /// `exec_sources` places that can also be mounted `noexec`.
    pub noexec: Vec<String>,
    /// `exec_sources`: where nothing runs, and the exceptions.
    pub exec_places: ExecPlaces,
}

/// Where a tree's `exec_sources: {writable: deny}` keeps programs from (the
/// places it can write, canonical) and the `except` paths beneath them: the
/// supervisor checks them too, so the promise holds where Landlock does not
/// (gVisor) and a refusal is audited with its rule, not only `EACCES`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ExecPlaces {
    pub denied: Vec<String>,
    pub except: Vec<String>,
}

impl ExecPlaces {
    /// Whether a program at `path` (canonical) may not run.
    pub fn refuses(&self, path: &str) -> bool {
        self.denied.iter().any(|d| at_or_beneath(path, d))
            && !self.except.iter().any(|e| at_or_beneath(path, e))
    }
}

/// Operations with a deny that names nothing resolvable, and why: granted
/// nowhere.
type Unresolved = BTreeMap<FsAccess, String>;

/// The policy's file rules and agentsh's self-protection as grants and
/// denies per operation. Fail closed: an operation with a deny that names
/// nothing resolvable is granted nowhere. The steps fill the same maps in
/// this order (the rules, `exec_sources`, the default grant on `/`, the
/// self-protection), and the fail-closed removal comes after all of them.
pub(super) fn file_operations(
    policy: &Policy,
    vars: &SessionVars,
    protect: &SelfProtection,
    fs: &dyn FsView,
    warnings: &mut Vec<String>,
) -> FileOperations {
    let always = always_denied(protect);
    let mut ops = FileOperations {
        handled: always.iter().map(|(op, _)| *op).collect(),
        grants: BTreeMap::new(),
        denies: BTreeMap::new(),
        noexec: Vec::new(),
        exec_places: ExecPlaces::default(),
    };
    let unresolved = ops.add_rules(policy, vars, fs, warnings);
    ops.add_exec_sources(policy, vars, fs, warnings);
    ops.grant_root_where_no_allow(policy);
    ops.add_protection(&always);
    ops.fail_closed(&unresolved, warnings);
    ops
}

/// What no tree may do whatever the policy says: write, create or delete
/// beneath `no_write`, read beneath `no_read` (when there is any).
fn always_denied(protect: &SelfProtection) -> Vec<(FsAccess, &[String])> {
    let mut always: Vec<(FsAccess, &[String])> = MODIFY
        .iter()
        .map(|op| (*op, protect.no_write.as_slice()))
        .collect();
    if !protect.no_read.is_empty() {
        always.push((FsAccess::Read, protect.no_read.as_slice()));
    }
    always
}

impl FileOperations {
    /// The policy's file rules, path by path, as grants and denies. An
    /// allow that names no path is skipped with a warning; the operations
    /// of a deny that names none are returned.
    fn add_rules(
        &mut self,
        policy: &Policy,
        vars: &SessionVars,
        fs: &dyn FsView,
        warnings: &mut Vec<String>,
    ) -> Unresolved {
        let mut unresolved = Unresolved::new();
        for rule in policy.file_rules() {
            let ops: Vec<FsAccess> = rule.operations.iter().map(|o| access_of(*o)).collect();
            self.handled.extend(ops.iter().copied());
            for pattern in &rule.paths {
                let why = match expand(pattern, vars) {
                    Ok(Some(p)) => {
                        self.place(rule, &ops, &resolve(&p, fs));
                        continue;
                    }
                    Ok(None) => format!("{pattern}: its variable has no value"),
                    Err(e) => e.to_string(),
                };
                if rule.decision == Decision::Allow {
                    // Skipping a grant only removes access.
                    warnings.push(format!(
                        "file rule {:?}: {why}; skipped (set `workspace` in the config if it \
                         names ${{WORKSPACE}})",
                        rule.name
                    ));
                } else {
                    for op in &ops {
                        unresolved
                            .entry(*op)
                            .or_insert_with(|| format!("file rule {:?}: {why}", rule.name));
                    }
                }
            }
        }
        unresolved
    }

    /// One path of `rule`, a grant or a deny for each of its operations.
    fn place(&mut self, rule: &FileRule, ops: &[FsAccess], path: &str) {
        for op in ops {
            match rule.decision {
                Decision::Allow => self.grants.entry(*op).or_default().push(Grant {
                    path: path.to_string(),
                    rule: Some(rule.name.clone()),
                }),
                // Only allow and deny pass the compiler for file rules.
                Decision::Deny | Decision::Approve | Decision::Audit | Decision::Redirect => {
                    self.denies.entry(*op).or_default().push(Deny {
                        path: path.to_string(),
                        protected: false,
                        rule: Some(rule.name.clone()),
                    });
                }
            }
        }
    }

    /// `exec_sources: {writable: deny}`: execute is handled, and denied
    /// beneath every path the policy's own rules grant write or create on
    /// (the places the tree can put a file), so nothing the tree wrote runs,
    /// modified copies included; `except` paths are granted execute again
    /// (more specific, they win). A deny at the same path as an execute
    /// grant wins, as for any file rule.
    fn add_exec_sources(
        &mut self,
        policy: &Policy,
        vars: &SessionVars,
        fs: &dyn FsView,
        warnings: &mut Vec<String>,
    ) {
        let sources = policy.exec_sources();
        if !sources.writable_denied() {
            return;
        }
        self.handled.insert(FsAccess::Execute);
        let writable: BTreeSet<String> = [FsAccess::Write, FsAccess::Create]
            .iter()
            .flat_map(|op| self.grants.get(op).into_iter().flatten())
            .filter(|g| g.rule.is_some())
            .map(|g| g.path.clone())
            .collect();
        let d = self.denies.entry(FsAccess::Execute).or_default();
        for path in &writable {
            d.push(Deny {
                path: path.clone(),
                protected: false,
                rule: Some(RULE_EXEC_SOURCES.into()),
            });
        }
        let mut excepted = Vec::new();
        for pattern in &sources.except {
            match expand(pattern, vars) {
                Ok(Some(p)) => {
                    let path = resolve(&p, fs);
                    excepted.push(path.clone());
                    self.grants
                        .entry(FsAccess::Execute)
                        .or_default()
                        .push(Grant {
                            path,
                            rule: Some(format!("{RULE_EXEC_SOURCES}.except")),
                        });
                }
                // Skipping an exception only removes access.
                Ok(None) => warnings.push(format!(
                    "exec_sources.except: {pattern}: its variable has no value; skipped"
                )),
                Err(e) => warnings.push(format!("exec_sources.except: {e}; skipped")),
            }
        }
        self.exec_places = ExecPlaces {
            denied: writable.iter().cloned().collect(),
            except: excepted.clone(),
        };
        self.noexec = writable
            .into_iter()
            .filter(|w| !excepted.iter().any(|e| at_or_beneath(e, w)))
            .collect();
    }

    /// An operation no allow names stays allowed on `/`, minus what is
    /// denied.
    fn grant_root_where_no_allow(&mut self, policy: &Policy) {
        for op in semantics::FILE_OPERATIONS {
            let a = access_of(op);
            if self.handled.contains(&a)
                && semantics::file_op_kind(policy.file_rules(), op) != FileOpKind::AllowList
            {
                self.grants.entry(a).or_default().push(Grant {
                    path: "/".into(),
                    rule: None,
                });
            }
        }
    }

    /// agentsh's own protection: the root's `oom_score_adj` writable, the
    /// kernel's file systems not, and `always` denied with no allow able to
    /// override it.
    fn add_protection(&mut self, always: &[(FsAccess, &[String])]) {
        self.grants.entry(FsAccess::Write).or_default().push(Grant {
            path: OWN_OOM_SCORE_ADJ.into(),
            rule: None,
        });
        for op in MODIFY {
            let d = self.denies.entry(op).or_default();
            for p in KERNEL_NO_WRITE {
                d.push(Deny {
                    path: (*p).to_string(),
                    protected: false,
                    rule: None,
                });
            }
        }
        for (op, protected) in always {
            let d = self.denies.entry(*op).or_default();
            for p in *protected {
                d.push(Deny {
                    path: p.clone(),
                    protected: true,
                    rule: None,
                });
            }
        }
    }

    /// A deny that cannot be placed must not become "allowed everywhere":
    /// its operation loses every grant.
    fn fail_closed(&mut self, unresolved: &Unresolved, warnings: &mut Vec<String>) {
        for (op, why) in unresolved {
            self.grants.remove(op);
            warnings.push(format!(
                "{why}, so it cannot be denied: {op:?} is granted nowhere rather than everywhere"
            ));
        }
    }
}
