//! Code loaded by hand (issue 21, class 4): a program that writes machine
//! code into memory and jumps to it never calls execve. `exec_memory: deny`
//! refuses the ways memory a program wrote becomes code: anonymous
//! executable mappings, writable-and-executable ones, `mprotect` to
//! executable, memfds, `personality(READ_IMPLIES_EXEC)` (which makes a
//! readable mapping executable with no `PROT_EXEC` in any register). The attack, with python's ctypes (an installed
//! interpreter: under `exec_sources: {writable: deny}` nothing the tree
//! compiles runs): without the switch the code runs and returns 42; with it
//! every route fails, as root and as nobody, under notify and ptrace, while
//! ordinary programs still run. Round three (issue 40): a program image
//! mapped by hand from a root-owned file (the loader and the program, no
//! exec), i386's `old_mmap` entered with `int 0x80`, and, under
//! `exec_sources: {writable: deny}`, a library the tree wrote mapped by an
//! installed program (also by a thread while another swaps the fd).

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
def lib_path():
    for line in open("/proc/self/maps"):
        if "/libc.so" in line or "/libc-" in line: return line.split()[-1]
def map_rx(path):
    fd = os.open(path, os.O_RDONLY)
    p = libc.mmap(None, 4096, RX, mmap.MAP_PRIVATE, fd, 0)
    os.close(fd)
    if p in (None, ctypes.c_void_p(-1).value): return None, ctypes.get_errno()
    return p, 0
def proc_mem():
    p, err = map_rx(lib_path())
    if p is None: return err
    try:
        with open("/proc/self/mem", "r+b", buffering=0) as m:
            m.seek(p); m.write(code)
    except OSError as e: return e.errno
    return run(p)
def hand_mapped_program():
    p, err = map_rx(os.path.realpath("/bin/true"))
    return 42 if p is not None else err
def written_library():
    import shutil, tempfile
    d = tempfile.mkdtemp(dir=os.environ.get("WRITABLE", "/tmp"))
    dst = os.path.join(d, "lib.so")
    shutil.copyfile(lib_path(), dst)
    p, err = map_rx(dst)
    return 42 if p is not None else err
def written_mprotect():
    import shutil, tempfile
    d = tempfile.mkdtemp(dir=os.environ.get("WRITABLE", "/tmp"))
    dst = os.path.join(d, "lib.so")
    shutil.copyfile(lib_path(), dst)
    fd = os.open(dst, os.O_RDONLY)
    p = libc.mmap(None, 4096, mmap.PROT_READ, mmap.MAP_PRIVATE, fd, 0)
    os.close(fd)
    if libc.mprotect(ctypes.c_void_p(p), 4096, RX) != 0: return ctypes.get_errno()
    return 42
lp, lerr = map_rx(lib_path())
print("library", "mapped" if lp is not None else "refused", lerr)
for name, f in [("rwx", rwx), ("mprotect", write_then_mprotect), ("memfd", memfd),
                ("personality", read_implies_exec), ("proc_mem", proc_mem),
                ("hand_mapped", hand_mapped_program), ("written_library", written_library),
                ("written_mprotect", written_mprotect)]:
    r = f()
    print(name, "ran" if r == 42 else "refused", r)
"#,
        code = code()
    )
}

fn routes(policy: &str, uid: Option<u32>, config: &str) -> String {
    let mut s = Sandbox::with_config(policy, uid, config);
    let f = s.sh(&format!(
        "WRITABLE=/srv/ws python3 -c '{}'",
        script().replace('\'', "'\\''")
    ));
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
    for uid in [None, Some(NOBODY)] {
        let out = routes(AGENT_DEFAULT, uid, "");
        for route in [
            "rwx",
            "mprotect",
            "memfd",
            "personality",
            "hand_mapped",
            "written_library",
            "written_mprotect",
        ] {
            assert!(out.contains(&format!("{route} ran 42")), "{uid:?}: {out}");
        }
        // Landlock keeps /proc/self/mem from being opened for writing.
        assert!(
            out.contains(&format!("proc_mem refused {}", libc::EACCES)),
            "{out}"
        );
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
        // Libraries still map (every dynamic program maps its own).
        assert!(out.contains("library mapped 0"), "{out}");
        for route in [
            "rwx",
            "mprotect",
            "memfd",
            "personality",
            "proc_mem",
            "hand_mapped",
            "written_mprotect",
        ] {
            assert!(
                out.contains(&format!("{route} refused {}", libc::EACCES)),
                "({uid:?}, {config:?}) {out}"
            );
        }
    }
}

/// i386's `mmap` (90, `old_mmap`) takes its six arguments in a struct, so no
/// register rule sees its protection: a 64-bit program that enters it with
/// `int 0x80` gets writable, executable memory. The tree compiles the
/// program itself (`exec_memory` is about memory; the workspace runs what
/// the agent builds under agent-default).
const OLD_MMAP_C: &str = r#"
#include <stdio.h>
#include <string.h>
#include <stdint.h>
#include <sys/mman.h>
int main(void) {
    uint32_t *a = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_32BIT, -1, 0);
    if (a == MAP_FAILED) { perror("mmap"); return 1; }
    a[0] = 0; a[1] = 4096; a[2] = PROT_READ | PROT_WRITE | PROT_EXEC;
    a[3] = MAP_PRIVATE | MAP_ANONYMOUS; a[4] = (uint32_t)-1; a[5] = 0;
    long ret;
    __asm__ volatile ("int $0x80" : "=a"(ret) : "a"(90), "b"((uint32_t)(uintptr_t)a), "c"(0), "d"(0), "S"(0), "D"(0) : "memory");
    if (ret < 0 && ret > -4096) { printf("old_mmap refused %ld\n", -ret); return 0; }
    unsigned char *p = (unsigned char *)(uintptr_t)(uint32_t)ret;
    unsigned char code[] = {0xb8, 0x2a, 0, 0, 0, 0xc3};
    memcpy(p, code, sizeof code);
    printf("old_mmap ran %d\n", ((int (*)(void))p)());
    return 0;
}
"#;

fn old_mmap(policy: &str, uid: Option<u32>, config: &str) -> String {
    let mut s = Sandbox::with_config(policy, uid, config);
    let f = s.sh(&format!(
        "cd /srv/ws && cat > om.c <<'EOF'\n{OLD_MMAP_C}\nEOF\ncc -o om om.c && ./om"
    ));
    assert_eq!(f.code, Some(0), "{f:?}");
    f.stdout
}

#[test]
fn the_i386_old_mmap_is_refused_under_the_switch() {
    if !require_root("the_i386_old_mmap_is_refused_under_the_switch") {
        return;
    }
    if !cfg!(target_arch = "x86_64") {
        return;
    }
    let out = old_mmap(AGENT_DEFAULT, None, "");
    assert!(out.contains("old_mmap ran 42"), "without the switch: {out}");
    for (uid, config) in [
        (None, ""),
        (Some(NOBODY), ""),
        (None, "execve:\n  backend: ptrace\n"),
    ] {
        let out = old_mmap(&with_switch(), uid, config);
        assert!(
            out.contains(&format!("old_mmap refused {}", libc::EACCES)),
            "({uid:?}, {config:?}) {out}"
        );
    }
}

fn writable_denied() -> String {
    format!("{AGENT_DEFAULT}\nexec_sources:\n  writable: deny\n")
}

#[test]
fn under_writable_deny_no_library_the_tree_wrote_is_mapped_as_code() {
    if !require_root("under_writable_deny_no_library_the_tree_wrote_is_mapped_as_code") {
        return;
    }
    for (uid, config) in [
        (Some(NOBODY), ""),
        (None, ""),
        (Some(NOBODY), "execve:\n  backend: ptrace\n"),
        (Some(NOBODY), "landlock:\n  max_abi: 2\n"),
    ] {
        let out = routes(&writable_denied(), uid, config);
        assert!(out.contains("library mapped 0"), "{out}");
        // Mapped executable at once, mapped readable then made executable,
        // or written into a memfd: code the tree wrote.
        for route in ["written_library", "written_mprotect", "memfd"] {
            assert!(
                out.contains(&format!("{route} refused {}", libc::EACCES)),
                "({uid:?}, {config:?}) {route}: {out}"
            );
        }
        // exec_memory is not on: a program image still maps, and anonymous
        // memory still becomes code (a JIT's).
        for route in ["hand_mapped", "rwx", "mprotect"] {
            assert!(out.contains(&format!("{route} ran 42")), "{route}: {out}");
        }
    }
    // The refusal is audited with its rule and the file.
    let mut s = Sandbox::new(&writable_denied(), Some(NOBODY));
    let f = s.sh(
        "cp \"$(ls /usr/lib/*/libm.so.6 | head -1)\" /srv/ws/libx.so \
          && python3 -c 'import ctypes; ctypes.CDLL(\"/srv/ws/libx.so\")'; echo RC=$?",
    );
    assert!(f.stdout.contains("RC=1"), "{f:?}");
    let refused = s
        .events()
        .into_iter()
        .find(|e| e["type"] == "file" && e["syscall"] == "mmap" && e["rule"] == "exec_sources");
    let refused = refused.unwrap_or_else(|| panic!("no mmap event: {:?}", s.events()));
    assert_eq!(refused["resolved"], "/srv/ws/libx.so", "{refused}");
    assert_eq!(refused["right"], "execute", "{refused}");
}

/// A thread maps a library the tree cannot write, in a loop, while another
/// swaps a library the tree wrote in at the same fd number: the file judged
/// must be the file mapped, or the written one would run.
const SWAP_RACE: &str = r#"
import ctypes, mmap, os, threading
libc = ctypes.CDLL(None, use_errno=True)
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
good = [l.split()[-1] for l in open("/proc/self/maps") if "/libc.so" in l][0]
g = os.open(good, os.O_RDONLY)
b = os.open("/srv/ws/libw.so", os.O_RDONLY)
n = os.dup(g)
stop = False
def swap():
    while not stop:
        os.dup2(b, n); os.dup2(g, n)
t = threading.Thread(target=swap); t.start()
ok = bad = 0
for _ in range(3000):
    p = libc.mmap(None, 4096, mmap.PROT_READ | mmap.PROT_EXEC, mmap.MAP_PRIVATE, n, 0)
    if p in (None, ctypes.c_void_p(-1).value):
        continue
    start = "%x-" % p
    for l in open("/proc/self/maps"):
        if l.startswith(start):
            if "libw.so" in l: bad += 1
            else: ok += 1
    libc.munmap(p, 4096)
stop = True; t.join()
print("ok", ok, "bad", bad)
"#;

/// A thread makes a page executable, in a loop, while another maps a
/// library the tree wrote and one it cannot write over that page in turn.
const REMAP_RACE: &str = r#"
import ctypes, mmap, os, threading
libc = ctypes.CDLL(None, use_errno=True)
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
good = [l.split()[-1] for l in open("/proc/self/maps") if "/libc.so" in l][0]
g = os.open(good, os.O_RDONLY)
b = os.open("/srv/ws/libw.so", os.O_RDONLY)
p = libc.mmap(None, 4096, mmap.PROT_READ, mmap.MAP_PRIVATE, g, 0)
FIXED = mmap.MAP_PRIVATE | 0x10
stop = False
def swap():
    while not stop:
        libc.mmap(p, 4096, mmap.PROT_READ, FIXED, b, 0)
        libc.mmap(p, 4096, mmap.PROT_READ, FIXED, g, 0)
t = threading.Thread(target=swap); t.start()
ok = bad = 0
start = "%x-" % p
for _ in range(3000):
    if libc.mprotect(p, 4096, mmap.PROT_READ | mmap.PROT_EXEC) != 0:
        continue
    for l in open("/proc/self/maps"):
        if l.startswith(start) and "x" in l.split()[1]:
            if "libw.so" in l: bad += 1
            else: ok += 1
stop = True; t.join()
print("ok", ok, "bad", bad)
"#;

#[test]
fn a_thread_swapping_the_fd_never_gets_a_written_library_mapped() {
    if !require_root("a_thread_swapping_the_fd_never_gets_a_written_library_mapped") {
        return;
    }
    for config in ["", "execve:\n  backend: ptrace\n"] {
        for race in [SWAP_RACE, REMAP_RACE] {
            let mut s = Sandbox::with_config(&writable_denied(), Some(NOBODY), config);
            let f = s.sh(&format!(
                "cp \"$(ls /usr/lib/*/libm.so.6 | head -1)\" /srv/ws/libw.so && python3 -c '{}'",
                race.replace('\'', "'\\''")
            ));
            let line = f
                .stdout
                .lines()
                .find(|l| l.starts_with("ok "))
                .unwrap_or("");
            let n: Vec<u64> = line
                .split_whitespace()
                .filter_map(|w| w.parse().ok())
                .collect();
            assert_eq!(n.len(), 2, "{config:?}: {f:?}");
            assert_eq!(n[1], 0, "{config:?}: the written library was mapped: {f:?}");
            assert!(n[0] > 0, "{config:?}: nothing was mapped at all: {f:?}");
        }
    }
}

/// A library the tree compiled, loaded by installed programs through the
/// loader's own doors: its constructor must not run under `exec_sources:
/// {writable: deny}` (it does without).
#[test]
fn a_library_the_tree_compiled_is_not_loaded_under_writable_deny() {
    if !require_root("a_library_the_tree_compiled_is_not_loaded_under_writable_deny") {
        return;
    }
    let build = "printf '#include <unistd.h>\\n__attribute__((constructor)) static void f(void) \
                 { write(2, \"preload-ran\\\\n\", 12); }\\n' > /srv/ws/p.c && \
                 cc -shared -fPIC -o /srv/ws/libp.so /srv/ws/p.c && echo BUILT";
    let doors = [
        ("LD_PRELOAD", "LD_PRELOAD=/srv/ws/libp.so /bin/true"),
        ("LD_AUDIT", "LD_AUDIT=/srv/ws/libp.so /bin/true"),
        (
            "ctypes",
            "python3 -c 'import ctypes; ctypes.CDLL(\"/srv/ws/libp.so\")'",
        ),
    ];
    let mut control = Sandbox::new(AGENT_DEFAULT, Some(NOBODY));
    assert!(control.sh(build).stdout.contains("BUILT"));
    for (door, cmd) in doors {
        let f = control.sh(cmd);
        assert!(
            f.stderr.contains("preload-ran"),
            "{door} without the switch: {f:?}"
        );
    }
    for (uid, config) in [
        (Some(NOBODY), ""),
        (None, ""),
        (Some(NOBODY), "execve:\n  backend: ptrace\n"),
    ] {
        let mut s = Sandbox::with_config(&writable_denied(), uid, config);
        assert!(
            s.sh(build).stdout.contains("BUILT"),
            "({uid:?}, {config:?})"
        );
        for (door, cmd) in doors {
            let f = s.sh(cmd);
            assert!(
                !f.stderr.contains("preload-ran"),
                "({uid:?}, {config:?}) {door}: {f:?}"
            );
            // Said on the caller's stderr, with the rule (issue 41).
            assert!(
                f.stderr.contains(
                    "agentsh: mmap of /srv/ws/libp.so (execute right) denied (rule exec_sources)"
                ),
                "({uid:?}, {config:?}) {door}: {f:?}"
            );
        }
    }
}
