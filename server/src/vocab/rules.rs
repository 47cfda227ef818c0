//! The rule names the mechanism itself writes into events: every refusal
//! that is not a policy rule's ([`Refusal`]), the two ways a network call
//! passes without a policy rule deciding it ([`Passage`]), and the names the
//! policy engine gives decisions no rule of a policy file made
//! ([`Builtin`]; a policy may not name a rule so). One list,
//! at the bottom of the house, so the supervisor's families, the DNS stub,
//! approvals and `agentsh policy test` name them the same way; each is
//! documented where its doc says (a docs test checks every variant).
//!
//! Failure modes: none; these are names.

/// The mechanism's own refusals: the audit `rule` of a call refused (or an
/// exec killed) for what the supervisor could not establish or enforce, not
/// for what a policy rule said.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// The path, argv or a `/proc` file of the caller cannot be read.
    Unreadable,
    /// A path cannot be resolved in the caller's view (other than ENOENT).
    Unresolvable,
    /// A task sharing the caller's memory cannot be stopped.
    MemoryNotFrozen,
    /// The strings sit in memory another process could write.
    SharedMemory,
    /// `#!` interpreters nested deeper than the kernel follows.
    InterpreterChain,
    /// A dynamic loader's program the tree can change before it is opened.
    LoaderPayload,
    /// A program from memory (memfd) or a deleted file.
    FilelessExec,
    /// An exec that must be watched cannot be, or did not finish in time.
    Unverifiable,
    /// The new image is not the file or argv judged (killed before it runs).
    ExecMismatch,
    /// An exec completed that no seccomp stop judged (ptrace backend):
    /// killed before its first instruction.
    UnverifiedExec,
    /// A vfork-class clone by a process that itself shares its parent's
    /// memory (a vfork child): its child could outlive it and keep the
    /// memory, outside the lineage the race guard walks.
    NestedVfork,
    /// A syscall the filter handed over that nothing here handles.
    UnexpectedSyscall,
    /// Its event cannot be written and `audit.on_failure` is `refuse`.
    AuditUnavailable,
    /// A connect or send whose destination cannot be judged safely here.
    EgressUnenforceable,
    /// A TCP port `network_rules` closes, for a connect the supervisor makes
    /// for the tree (Landlock does not see those).
    NetworkRules,
    /// DNS under `dns: stub` while the stub is not running.
    DnsStubDown,
    /// A DNS query the stub cannot parse (answered FORMERR).
    DnsMalformed,
    /// A path call the tree's file rules refuse, kept by the tracer where
    /// the kernel has no Landlock (the ruleset names no policy rule).
    FileRules,
    /// A memory call that would change, remove or replace the region the
    /// ptrace backend copies what it judged into (`tracee::pin`).
    PinnedRegion,
    /// A change beneath a place kept read-only by a mount in the tree's
    /// namespace (`read_only_files`), explained (the kernel's `EROFS`).
    ReadOnlyFiles,
    /// An HTTP request whose path is not in normal form (`..`, an encoded
    /// `/`), refused by agentsh's proxy whatever the rules say.
    HttpPathForm,
    /// An HTTP request for a name the egress rule does not name, or not
    /// the name of its TLS connection.
    HttpHost,
    /// An allowed HTTP request whose injected credential cannot be read.
    HttpSecret,
    /// An HTTP request whose upstream cannot be reached or verified.
    HttpUpstream,
}

/// Where a refusal's rule is documented: the file, and the heading of the
/// section whose text names it as `` `rule: NAME` ``.
pub struct DocRow {
    pub file: &'static str,
    pub section: &'static str,
}

const EXEC_TABLE: DocRow = DocRow {
    file: "docs/exec-supervision.md",
    section: "## What is never a CONTINUE",
};
const EGRESS_TABLE: DocRow = DocRow {
    file: "docs/policy.md",
    section: "#### Rules the mechanism writes",
};
const FILE_TABLE: DocRow = DocRow {
    file: "docs/exec-supervision.md",
    section: "## Files under the ptrace backend",
};

impl Refusal {
    pub const ALL: [Refusal; 24] = [
        Refusal::Unreadable,
        Refusal::Unresolvable,
        Refusal::MemoryNotFrozen,
        Refusal::SharedMemory,
        Refusal::InterpreterChain,
        Refusal::LoaderPayload,
        Refusal::FilelessExec,
        Refusal::Unverifiable,
        Refusal::ExecMismatch,
        Refusal::UnverifiedExec,
        Refusal::NestedVfork,
        Refusal::UnexpectedSyscall,
        Refusal::AuditUnavailable,
        Refusal::EgressUnenforceable,
        Refusal::NetworkRules,
        Refusal::DnsStubDown,
        Refusal::DnsMalformed,
        Refusal::FileRules,
        Refusal::PinnedRegion,
        Refusal::ReadOnlyFiles,
        Refusal::HttpPathForm,
        Refusal::HttpHost,
        Refusal::HttpSecret,
        Refusal::HttpUpstream,
    ];

    /// The audit event's `rule`.
    pub const fn rule(self) -> &'static str {
        match self {
            Refusal::Unreadable => "unreadable",
            Refusal::Unresolvable => "unresolvable",
            Refusal::MemoryNotFrozen => "memory_not_frozen",
            Refusal::SharedMemory => "shared_memory",
            Refusal::InterpreterChain => "interpreter_chain",
            Refusal::LoaderPayload => "loader_payload",
            Refusal::FilelessExec => Builtin::FilelessExec.rule(),
            Refusal::Unverifiable => "unverifiable",
            Refusal::ExecMismatch => "exec_mismatch",
            Refusal::UnverifiedExec => "unverified_exec",
            Refusal::NestedVfork => "nested_vfork",
            Refusal::UnexpectedSyscall => "unexpected_syscall",
            Refusal::AuditUnavailable => "audit_unavailable",
            Refusal::EgressUnenforceable => "egress_unenforceable",
            Refusal::NetworkRules => "network_rules",
            Refusal::DnsStubDown => Passage::DnsStub.rule(),
            Refusal::DnsMalformed => "dns_malformed",
            Refusal::FileRules => "file_rules",
            Refusal::PinnedRegion => "pinned_region",
            Refusal::ReadOnlyFiles => "read_only_files",
            Refusal::HttpPathForm => "http_path_form",
            Refusal::HttpHost => "http_host",
            Refusal::HttpSecret => "http_secret",
            Refusal::HttpUpstream => "http_upstream",
        }
    }

    /// Whether it refuses an exec (an `execve` event, which `agentsh policy
    /// test` replays: a replay through a policy says nothing of these).
    pub fn of_exec(self) -> bool {
        match self {
            Refusal::Unreadable
            | Refusal::Unresolvable
            | Refusal::MemoryNotFrozen
            | Refusal::SharedMemory
            | Refusal::InterpreterChain
            | Refusal::LoaderPayload
            | Refusal::FilelessExec
            | Refusal::Unverifiable
            | Refusal::ExecMismatch
            | Refusal::UnverifiedExec
            | Refusal::NestedVfork
            | Refusal::UnexpectedSyscall
            | Refusal::AuditUnavailable => true,
            Refusal::EgressUnenforceable
            | Refusal::NetworkRules
            | Refusal::DnsStubDown
            | Refusal::DnsMalformed
            | Refusal::FileRules
            | Refusal::PinnedRegion
            | Refusal::ReadOnlyFiles
            | Refusal::HttpPathForm
            | Refusal::HttpHost
            | Refusal::HttpSecret
            | Refusal::HttpUpstream => false,
        }
    }

    /// Where it is documented.
    pub fn doc(self) -> DocRow {
        if matches!(
            self,
            Refusal::FileRules | Refusal::ReadOnlyFiles | Refusal::PinnedRegion
        ) {
            FILE_TABLE
        } else if self.of_exec() {
            EXEC_TABLE
        } else {
            EGRESS_TABLE
        }
    }
}

/// Network calls the mechanism lets pass without a policy rule deciding
/// them: each is audited under this rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Passage {
    /// A DNS query sent to agentsh's stub (`dns: stub`), which judges the
    /// name itself.
    DnsStub,
    /// `egress.compat: allow_unjudged`: a call that cannot be judged here
    /// ran as made (the operator's choice).
    AllowUnjudged,
}

impl Passage {
    pub const ALL: [Passage; 2] = [Passage::DnsStub, Passage::AllowUnjudged];

    /// The audit event's `rule`.
    pub const fn rule(self) -> &'static str {
        match self {
            Passage::DnsStub => "dns_stub",
            Passage::AllowUnjudged => "allow_unjudged",
        }
    }

    /// Where it is documented.
    pub fn doc(self) -> DocRow {
        EGRESS_TABLE
    }
}

/// The rule names the policy engine gives decisions no rule of the policy
/// file made (the policy's reserved names).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Builtin {
    /// The policy's `default` decision (and an egress `default`).
    Default,
    /// The server's own programs, let through (`agentsh` internals).
    InternalBypass,
    /// A wrapper whose payload cannot be parsed.
    UnparsableWrapper,
    /// An argv cut by `execve.max_argc` / `max_argv_bytes`.
    ExecveTruncated,
    /// A program from memory (memfd) or a deleted file, for every policy.
    FilelessExec,
    /// `exec_sources: {writable: deny}`.
    ExecSources,
    /// `exec_memory: deny`, where the supervisor refuses (a program image
    /// mapped by hand).
    ExecMemory,
}

impl Builtin {
    /// The audit event's `rule`.
    pub const fn rule(self) -> &'static str {
        match self {
            Builtin::Default => "default",
            Builtin::InternalBypass => "internal_bypass",
            Builtin::UnparsableWrapper => "unparsable_wrapper",
            Builtin::ExecveTruncated => "execve_truncated",
            Builtin::FilelessExec => "fileless_exec",
            Builtin::ExecSources => "exec_sources",
            Builtin::ExecMemory => "exec_memory",
        }
    }
}
