//! Code loaded by hand (issue 21, class 4): a program that writes machine
//! code into memory and jumps to it never calls execve. `exec_memory: deny`
//! refuses the ways memory a program wrote becomes code: anonymous
//! executable mappings, writable-and-executable ones, `mprotect` to
//! executable, memfds, `personality(READ_IMPLIES_EXEC)` (which makes a
//! readable mapping executable with no `PROT_EXEC` in any register). The attack, with python's ctypes (an installed
//! interpreter: under `exec_sources: {writable: deny}` nothing the tree
//! compiles runs): without the switch the code runs and returns 42; with it
//! every route fails, as root and as nobody, under notify and ptrace, while
//! ordinary programs still run.

// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

use agentsh_tests::sandbox::{Sandbox, AGENT_DEFAULT, NOBODY};
use agentsh_tests::server::require_root;

/// `mov eax, 42; ret` (x86_64) or `mov w0, #42; ret` (aarch64).
fn code() -> &'static str {
    if cfg!(target_arch = "aarch64") {
        r"\x40\x05\x80\x52\xc0\x03\x5f\xd6"
    } else {
        r"\xb8\x2a\x00\x00\x00\xc3"
    }
}

/// Each route to executable memory, in its own try: prints `ROUTE ran 42`
/// when the code ran, `ROUTE refused ERRNO` when the kernel said no.
fn script() -> String {
    format!(
        r#"
import ctypes, mmap, os
code = b"{code}"
libc = ctypes.CDLL(None, use_errno=True)
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
RW, RX = mmap.PROT_READ | mmap.PROT_WRITE, mmap.PROT_READ | mmap.PROT_EXEC
ANON = mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS
def run(addr):
    return ctypes.CFUNCTYPE(ctypes.c_int)(addr)()
def rwx():
    p = libc.mmap(None, 4096, RW | mmap.PROT_EXEC, ANON, -1, 0)
    if p in (None, ctypes.c_void_p(-1).value): return ctypes.get_errno()
    ctypes.memmove(p, code, len(code)); return run(p)
def write_then_mprotect():
    p = libc.mmap(None, 4096, RW, ANON, -1, 0)
    ctypes.memmove(p, code, len(code))
    if libc.mprotect(ctypes.c_void_p(p), 4096, RX) != 0: return ctypes.get_errno()
    return run(p)
def memfd():
    try: fd = os.memfd_create("x")
    except OSError as e: return e.errno
    os.write(fd, code + b"\0" * (4096 - len(code)))
    p = libc.mmap(None, 4096, RX, mmap.MAP_PRIVATE, fd, 0)
    if p in (None, ctypes.c_void_p(-1).value): return ctypes.get_errno()
    return run(p)
def read_implies_exec():
    if libc.personality(0x0400000) == -1: return ctypes.get_errno()
    p = libc.mmap(None, 4096, RW, ANON, -1, 0)
    ctypes.memmove(p, code, len(code)); return run(p)
for name, f in [("rwx", rwx), ("mprotect", write_then_mprotect), ("memfd", memfd),
                ("personality", read_implies_exec)]:
    r = f()
    print(name, "ran" if r == 42 else "refused", r)
"#,
        code = code()
    )
}

fn routes(policy: &str, uid: Option<u32>, config: &str) -> String {
    let mut s = Sandbox::with_config(policy, uid, config);
    let f = s.sh(&format!("python3 -c '{}'", script().replace('\'', "'\\''")));
    assert_eq!(f.code, Some(0), "{f:?}");
    // Ordinary programs still run under the switch.
    let ok = s.sh("ls / >/dev/null && python3 -c 'print(6*7)' && sh -c 'echo fine'");
    assert!(
        ok.stdout.contains("42") && ok.stdout.contains("fine"),
        "{ok:?}"
    );
    f.stdout
}

fn with_switch() -> String {
    format!("{AGENT_DEFAULT}\nexec_memory: deny\n")
}

#[test]
fn without_the_switch_hand_loaded_code_runs() {
    if !require_root("without_the_switch_hand_loaded_code_runs") {
        return;
    }
    let out = routes(AGENT_DEFAULT, None, "");
    for route in ["rwx", "mprotect", "memfd", "personality"] {
        assert!(out.contains(&format!("{route} ran 42")), "{out}");
    }
}

#[test]
fn exec_memory_deny_refuses_every_route_as_root_and_as_nobody() {
    if !require_root("exec_memory_deny_refuses_every_route_as_root_and_as_nobody") {
        return;
    }
    for (uid, config) in [
        (None, ""),
        (Some(NOBODY), ""),
        (None, "execve:\n  backend: ptrace\n"),
        (Some(NOBODY), "landlock:\n  max_abi: 2\n"),
    ] {
        let out = routes(&with_switch(), uid, config);
        for route in ["rwx", "mprotect", "memfd", "personality"] {
            assert!(
                out.contains(&format!("{route} refused {}", libc::EACCES)),
                "({uid:?}, {config:?}) {out}"
            );
        }
    }
}
