//! `agentsh-container --profile PROFILE [--descendants-only] [--cgroup DIR] -- CMD [ARGS...]`:
//! runs CMD the way a container runtime starts a container's process, so the
//! tests can put agentsh where the SDKs run it.
//!
//! Profiles:
//! * `docker-default`: Docker's (and podman's) default container. As runc
//!   does, the seccomp filter is loaded while we still hold every capability
//!   (so without no_new_privs), then the capability sets (bounding,
//!   permitted, effective, inheritable, ambient) are cut to Docker's default
//!   set. The filter answers EPERM for the calls Docker's default profile
//!   gates on `CAP_SYS_PTRACE` that a process without it could otherwise make
//!   and that agentsh uses or could: `kcmp`, `pidfd_getfd`,
//!   `process_madvise`; and `unshare`, which the profile gates on
//!   `CAP_SYS_ADMIN` and the kernel does not (a user namespace needs no
//!   capability). The other calls it gates on `CAP_SYS_ADMIN` (`setns`,
//!   `mount`, `bpf`, ...) are not added: without the capability the kernel
//!   refuses them anyway, with the same EPERM. Only the native ABI is
//!   filtered (the emulation runs native programs).
//! * `no-sys-admin`: every capability but `CAP_SYS_ADMIN`, no filter.
//! * `no-supervision`: a platform whose seccomp profile leaves agentsh no
//!   way in: `seccomp(2)` with `SECCOMP_FILTER_FLAG_NEW_LISTENER` fails with
//!   EINVAL (as gVisor's does) and `ptrace(2)` with EPERM (so no
//!   `SECCOMP_RET_TRACE` tracer either); every capability is kept.
//!
//! `--descendants-only` emulates a host whose Yama `ptrace_scope` is 1
//! (Ubuntu's and Debian's default; this project's test machines run kernels
//! without Yama, and cannot load BPF LSM programs to add it): CMD and what it
//! starts may ptrace only processes started under CMD. It puts CMD in a
//! Landlock domain of its own (its ruleset handles only `EXECUTE` and grants it
//! on `/`, so nothing else changes), and Landlock lets a process reach by
//! ptrace — attach, `process_vm_readv`, `/proc/<pid>/mem`, and also the read
//! mode (`/proc/<pid>/cwd`) that Yama leaves alone — only processes in its
//! domain or one nested in it. Two differences from Yama, both stricter or
//! equal for what the tests check: a process started under CMD and orphaned
//! stays reachable (it keeps the domain; Yama would refuse it once its
//! parents are gone: agentsh's reaper keeps such orphans below the server,
//! so the tests do not depend on it), and `CAP_SYS_PTRACE` does not lift the
//! rule (the profiles here never grant it).
//!
//! `--cgroup DIR` first moves this process into the cgroup v2 directory DIR.
//!
//! Failure modes: any step that fails prints why and exits 125, before CMD
//! runs.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;

/// Docker's default capability set (moby `oci/caps/defaults.go`).
pub const DOCKER_DEFAULT_CAPS: &[(u32, &str)] = &[
    (0, "chown"),
    (1, "dac_override"),
    (3, "fowner"),
    (4, "fsetid"),
    (5, "kill"),
    (6, "setgid"),
    (7, "setuid"),
    (8, "setpcap"),
    (10, "net_bind_service"),
    (13, "net_raw"),
    (18, "sys_chroot"),
    (27, "mknod"),
    (29, "audit_write"),
    (31, "setfcap"),
];

const CAP_SYS_ADMIN: u32 = 21;

fn die(msg: &str) -> ! {
    eprintln!("agentsh-container: {msg}");
    std::process::exit(125);
}

fn last_error() -> String {
    std::io::Error::last_os_error().to_string()
}

/// The calls Docker's default profile refuses without `CAP_SYS_PTRACE`,
/// and `unshare`, which it allows only with `CAP_SYS_ADMIN` (the kernel
/// would let anyone make a user namespace with it).
fn refused_calls() -> [libc::c_long; 4] {
    [
        libc::SYS_kcmp,
        libc::SYS_pidfd_getfd,
        libc::SYS_process_madvise,
        libc::SYS_unshare,
    ]
}

#[cfg(target_arch = "x86_64")]
const NATIVE_ARCH: u32 = 0xC000_003E;
#[cfg(target_arch = "aarch64")]
const NATIVE_ARCH: u32 = 0xC000_00B7;

fn stmt(code: u32, k: u32) -> libc::sock_filter {
    libc::sock_filter {
        code: code as u16,
        jt: 0,
        jf: 0,
        k,
    }
}

fn jeq(k: u32, jt: u8, jf: u8) -> libc::sock_filter {
    libc::sock_filter {
        code: (libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K) as u16,
        jt,
        jf,
        k,
    }
}

/// Loads the filter: EPERM for [`refused_calls`] on the native ABI.
fn load_docker_filter() {
    let calls = refused_calls();
    let n = calls.len() as u8;
    let mut prog = vec![
        // arch: anything but the native ABI is allowed as is.
        stmt(libc::BPF_LD | libc::BPF_W | libc::BPF_ABS, 4),
        jeq(NATIVE_ARCH, 0, n + 1),
        stmt(libc::BPF_LD | libc::BPF_W | libc::BPF_ABS, 0),
    ];
    for (i, &nr) in calls.iter().enumerate() {
        // Match: jump to the EPERM return after the remaining checks.
        let to_errno = n - i as u8;
        prog.push(jeq(nr as u32, to_errno, 0));
    }
    prog.push(stmt(libc::BPF_RET | libc::BPF_K, libc::SECCOMP_RET_ALLOW));
    prog.push(stmt(
        libc::BPF_RET | libc::BPF_K,
        libc::SECCOMP_RET_ERRNO | libc::EPERM as u32,
    ));
    // We hold CAP_SYS_ADMIN, so no no_new_privs is needed (runc's order).
    load_filter(&mut prog, false);
}

/// Loads `prog` as a seccomp filter, after setting no_new_privs if `nnp`
/// (as an unprivileged caller must). Exits the process if it cannot.
fn load_filter(prog: &mut [libc::sock_filter], nnp: bool) {
    let fprog = libc::sock_fprog {
        len: prog.len() as u16,
        filter: prog.as_mut_ptr(),
    };
    // SAFETY: prctl with integers; `fprog` points at `prog`, a valid
    // program that outlives the call.
    let rc = unsafe {
        if nnp {
            libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0);
        }
        libc::syscall(
            libc::SYS_seccomp,
            libc::SECCOMP_SET_MODE_FILTER,
            0,
            &fprog as *const libc::sock_fprog,
        )
    };
    if rc != 0 {
        die(&format!("cannot load the seccomp filter: {}", last_error()));
    }
}

/// Loads the `no-supervision` filter (native ABI): `ptrace` EPERM,
/// `seccomp` with the NEW_LISTENER flag EINVAL. Sets no_new_privs first
/// (as an unprivileged caller must), which changes nothing agentsh checks.
fn load_no_supervision_filter() {
    const NEW_LISTENER: u32 = 1 << 3;
    let mut prog = vec![
        stmt(libc::BPF_LD | libc::BPF_W | libc::BPF_ABS, 4),
        // Jumps count from the next instruction: 7 and 9 allow, 8 is
        // EINVAL, 10 EPERM.
        jeq(NATIVE_ARCH, 0, 5),
        stmt(libc::BPF_LD | libc::BPF_W | libc::BPF_ABS, 0),
        jeq(libc::SYS_ptrace as u32, 6, 0),
        jeq(libc::SYS_seccomp as u32, 0, 2),
        // args[1] (flags), its low word.
        stmt(libc::BPF_LD | libc::BPF_W | libc::BPF_ABS, 24),
        libc::sock_filter {
            code: (libc::BPF_JMP | libc::BPF_JSET | libc::BPF_K) as u16,
            jt: 1,
            jf: 0,
            k: NEW_LISTENER,
        },
        stmt(libc::BPF_RET | libc::BPF_K, libc::SECCOMP_RET_ALLOW),
        stmt(
            libc::BPF_RET | libc::BPF_K,
            libc::SECCOMP_RET_ERRNO | libc::EINVAL as u32,
        ),
        stmt(libc::BPF_RET | libc::BPF_K, libc::SECCOMP_RET_ALLOW),
        stmt(
            libc::BPF_RET | libc::BPF_K,
            libc::SECCOMP_RET_ERRNO | libc::EPERM as u32,
        ),
    ];
    load_filter(&mut prog, true);
}

/// This process's permitted capabilities (a root session may lack some).
fn permitted_now() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("CapPrm:"))
                .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        })
        .unwrap_or_else(|| die("cannot read CapPrm from /proc/self/status"))
}

/// Cuts every capability set to `keep` (a bit mask; only what we hold).
fn keep_caps(keep: u64) {
    let keep = keep & permitted_now();
    for cap in 0..64u32 {
        if keep & (1 << cap) == 0 {
            // SAFETY: prctl with integers; EINVAL past the last capability.
            let rc = unsafe { libc::prctl(libc::PR_CAPBSET_DROP, cap as libc::c_ulong, 0, 0, 0) };
            if rc != 0 && std::io::Error::last_os_error().raw_os_error() != Some(libc::EINVAL) {
                die(&format!("PR_CAPBSET_DROP {cap}: {}", last_error()));
            }
        }
    }
    // SAFETY: prctl with integers.
    unsafe {
        libc::prctl(
            libc::PR_CAP_AMBIENT,
            libc::PR_CAP_AMBIENT_CLEAR_ALL,
            0,
            0,
            0,
        )
    };
    #[repr(C)]
    struct Header {
        version: u32,
        pid: i32,
    }
    #[repr(C)]
    #[derive(Clone, Copy)]
    struct Data {
        effective: u32,
        permitted: u32,
        inheritable: u32,
    }
    const VERSION_3: u32 = 0x2008_0522;
    let mut h = Header {
        version: VERSION_3,
        pid: 0,
    };
    let d = [
        Data {
            effective: keep as u32,
            permitted: keep as u32,
            inheritable: 0,
        },
        Data {
            effective: (keep >> 32) as u32,
            permitted: (keep >> 32) as u32,
            inheritable: 0,
        },
    ];
    // SAFETY: capset reads a header and two data structs we own.
    if unsafe { libc::syscall(libc::SYS_capset, &mut h as *mut Header, d.as_ptr()) } != 0 {
        die(&format!("capset: {}", last_error()));
    }
}

/// Puts this process in a Landlock domain that restricts nothing but ptrace
/// reach (see the module doc). Done while we still hold CAP_SYS_ADMIN, so
/// without no_new_privs.
fn descendants_only() {
    #[repr(C)]
    struct RulesetAttr {
        handled_access_fs: u64,
    }
    #[repr(C, packed)]
    struct PathBeneath {
        allowed_access: u64,
        parent_fd: i32,
    }
    const EXECUTE: u64 = 1;
    const RULE_PATH_BENEATH: libc::c_int = 1;
    let attr = RulesetAttr {
        handled_access_fs: EXECUTE,
    };
    // SAFETY: landlock_create_ruleset reads `attr` of the size given.
    let ruleset = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            &attr as *const RulesetAttr,
            std::mem::size_of::<RulesetAttr>(),
            0u32,
        )
    } as i32;
    if ruleset < 0 {
        die(&format!("landlock_create_ruleset: {}", last_error()));
    }
    let root = CString::new("/").unwrap_or_else(|_| die("CString"));
    // SAFETY: open of a NUL-terminated path.
    let root_fd = unsafe { libc::open(root.as_ptr(), libc::O_PATH | libc::O_CLOEXEC) };
    if root_fd < 0 {
        die(&format!("open /: {}", last_error()));
    }
    let rule = PathBeneath {
        allowed_access: EXECUTE,
        parent_fd: root_fd,
    };
    // SAFETY: landlock_add_rule reads the rule struct we own.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_landlock_add_rule,
            ruleset,
            RULE_PATH_BENEATH,
            &rule as *const PathBeneath,
            0u32,
        )
    };
    if rc != 0 {
        die(&format!("landlock_add_rule: {}", last_error()));
    }
    // SAFETY: restricts this thread (the only one) with the ruleset fd.
    if unsafe { libc::syscall(libc::SYS_landlock_restrict_self, ruleset, 0u32) } != 0 {
        die(&format!("landlock_restrict_self: {}", last_error()));
    }
    // SAFETY: closing fds we own.
    unsafe {
        libc::close(root_fd);
        libc::close(ruleset);
    }
}

fn join_cgroup(dir: &str) {
    let procs = format!("{dir}/cgroup.procs");
    if let Err(e) = std::fs::write(&procs, std::process::id().to_string()) {
        die(&format!("cannot join {procs}: {e}"));
    }
}

fn main() {
    let args: Vec<std::ffi::OsString> = std::env::args_os().skip(1).collect();
    let mut profile = None;
    let mut cgroup = None;
    let mut scope = false;
    let mut i = 0;
    while i < args.len() {
        match args[i].to_str() {
            Some("--profile") => {
                profile = args.get(i + 1).and_then(|a| a.to_str()).map(String::from);
                i += 2;
            }
            Some("--descendants-only") => {
                scope = true;
                i += 1;
            }
            Some("--cgroup") => {
                cgroup = args.get(i + 1).and_then(|a| a.to_str()).map(String::from);
                i += 2;
            }
            Some("--") => {
                i += 1;
                break;
            }
            _ => die("usage: agentsh-container --profile docker-default|no-sys-admin|no-supervision [--descendants-only] [--cgroup DIR] -- CMD [ARGS...]"),
        }
    }
    let command = &args[i..];
    if command.is_empty() {
        die("no command given");
    }
    if let Some(dir) = &cgroup {
        join_cgroup(dir);
    }
    if scope {
        descendants_only();
    }
    match profile.as_deref() {
        Some("docker-default") => {
            load_docker_filter();
            keep_caps(DOCKER_DEFAULT_CAPS.iter().fold(0, |m, (c, _)| m | 1 << c));
        }
        Some("no-sys-admin") => keep_caps(!(1u64 << CAP_SYS_ADMIN)),
        Some("no-supervision") => load_no_supervision_filter(),
        other => die(&format!("unknown profile {other:?}")),
    }
    let argv: Vec<CString> = command
        .iter()
        .map(|a| CString::new(a.as_bytes()).unwrap_or_else(|_| die("NUL in an argument")))
        .collect();
    let mut ptrs: Vec<*const libc::c_char> = argv.iter().map(|a| a.as_ptr()).collect();
    ptrs.push(std::ptr::null());
    // SAFETY: a NULL-terminated argv of valid C strings that outlive the call.
    unsafe { libc::execvp(ptrs[0], ptrs.as_ptr()) };
    die(&format!(
        "cannot run {}: {}",
        command[0].to_string_lossy(),
        last_error()
    ));
}
