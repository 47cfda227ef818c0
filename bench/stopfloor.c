/* The floor of the ptrace backend (bench step 11): a tracer that stops a
 * tree on the same calls agentsh's filter sends to its tracer where there
 * is no Landlock (every path call; `open`/`openat` unless `O_PATH`, or, with
 * `-w`, only those that may change the file; `utimensat`/`futimesat` with a
 * path) and on every fork, clone and exec event, and judges nothing: each
 * stop is resumed at once. What a job costs under it is what the stops
 * themselves cost in this kernel (gVisor's ptrace), with no tracer work.
 *
 *   stopfloor [-w] PROGRAM [ARG...]
 *
 * Prints "stops N" (seccomp stops) on stderr at the end; exits as the
 * program did. x86_64 only (the bench runs there). */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/ptrace.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#define NR offsetof(struct seccomp_data, nr)
#define ARCH offsetof(struct seccomp_data, arch)
#define ARG_LO(i) (offsetof(struct seccomp_data, args) + 8 * (i))
#define ARG_HI(i) (offsetof(struct seccomp_data, args) + 8 * (i) + 4)

static const int ALWAYS[] = {
    SYS_creat,     SYS_chmod,      SYS_fchmodat,  452 /* fchmodat2 */,
    SYS_chown,     SYS_lchown,     SYS_fchownat,  SYS_link,
    SYS_linkat,    SYS_setxattr,   SYS_lsetxattr, SYS_removexattr,
    SYS_lremovexattr, SYS_mkdir,   SYS_mkdirat,   SYS_mknod,
    SYS_mknodat,   SYS_rename,     SYS_renameat,  SYS_renameat2,
    SYS_rmdir,     SYS_symlink,    SYS_symlinkat, SYS_truncate,
    SYS_unlink,    SYS_unlinkat,   SYS_utime,     SYS_utimes,
    437 /* openat2 */, SYS_execve, SYS_execveat, SYS_connect,
};

static struct sock_filter prog[256];
static int len;

static void put(struct sock_filter f) { prog[len++] = f; }

/* Jumps are patched: `jt`/`jf` of 254/255 mean TRACE/ALLOW. */
#define TO_TRACE 254
#define TO_ALLOW 255

static void build(int writes_only) {
    put((struct sock_filter)BPF_STMT(BPF_LD | BPF_W | BPF_ABS, ARCH));
    put((struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AUDIT_ARCH_X86_64, 1, 0));
    put((struct sock_filter)BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW));
    put((struct sock_filter)BPF_STMT(BPF_LD | BPF_W | BPF_ABS, NR));
    for (size_t i = 0; i < sizeof ALWAYS / sizeof *ALWAYS; i++)
        put((struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, ALWAYS[i], TO_TRACE, 0));
    /* open (flags arg 1), openat (flags arg 2) */
    unsigned want = writes_only ? (O_WRONLY | O_RDWR | O_CREAT | O_TRUNC) : 0;
    int opens[2][2] = {{SYS_open, 1}, {SYS_openat, 2}};
    for (int k = 0; k < 2; k++) {
        put((struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, opens[k][0], 0, 3));
        put((struct sock_filter)BPF_STMT(BPF_LD | BPF_W | BPF_ABS, ARG_LO(opens[k][1])));
        put((struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JSET | BPF_K, O_PATH, TO_ALLOW, 0));
        if (writes_only)
            put((struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JSET | BPF_K, want, TO_TRACE, TO_ALLOW));
        else
            put((struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JA, 0, 0, 0) /* patched: to TRACE */);
    }
    /* utimensat, futimesat: a path (arg 1 not NULL) */
    int times[2] = {SYS_utimensat, SYS_futimesat};
    for (int k = 0; k < 2; k++) {
        put((struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, times[k], 0, 4));
        put((struct sock_filter)BPF_STMT(BPF_LD | BPF_W | BPF_ABS, ARG_LO(1)));
        put((struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, 0, 0, TO_TRACE));
        put((struct sock_filter)BPF_STMT(BPF_LD | BPF_W | BPF_ABS, ARG_HI(1)));
        put((struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, 0, TO_ALLOW, TO_TRACE));
    }
    put((struct sock_filter)BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW));
    int allow = len;
    put((struct sock_filter)BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW));
    int trace = len;
    put((struct sock_filter)BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_TRACE));
    /* Patch the symbolic targets into relative jumps. */
    for (int i = 0; i < allow; i++) {
        struct sock_filter *f = &prog[i];
        if (BPF_CLASS(f->code) != BPF_JMP)
            continue;
        if (BPF_OP(f->code) == BPF_JA) {
            f->k = trace - i - 1;
            continue;
        }
        if (f->jt == TO_TRACE) f->jt = trace - i - 1;
        else if (f->jt == TO_ALLOW) f->jt = allow - i - 1;
        if (f->jf == TO_TRACE) f->jf = trace - i - 1;
        else if (f->jf == TO_ALLOW) f->jf = allow - i - 1;
    }
}

int main(int argc, char **argv) {
    int writes_only = 0, a = 1;
    if (a < argc && strcmp(argv[a], "-w") == 0) {
        writes_only = 1;
        a++;
    }
    if (a >= argc) {
        fprintf(stderr, "usage: stopfloor [-w] PROGRAM [ARG...]\n");
        return 2;
    }
    build(writes_only);
    pid_t child = fork();
    if (child < 0) {
        perror("fork");
        return 1;
    }
    if (child == 0) {
        if (ptrace(PTRACE_TRACEME, 0, 0, 0) != 0) {
            perror("PTRACE_TRACEME");
            _exit(126);
        }
        raise(SIGSTOP);
        struct sock_fprog fp = {.len = (unsigned short)len, .filter = prog};
        if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 ||
            prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &fp) != 0) {
            perror("seccomp");
            _exit(126);
        }
        execvp(argv[a], argv + a);
        perror(argv[a]);
        _exit(127);
    }
    int st;
    if (waitpid(child, &st, 0) != child || !WIFSTOPPED(st)) {
        fprintf(stderr, "stopfloor: the child did not stop\n");
        return 1;
    }
    long opts = PTRACE_O_TRACESECCOMP | PTRACE_O_TRACEFORK | PTRACE_O_TRACEVFORK |
                PTRACE_O_TRACECLONE | PTRACE_O_TRACEEXEC | PTRACE_O_EXITKILL;
    if (ptrace(PTRACE_SETOPTIONS, child, 0, opts) != 0) {
        perror("PTRACE_SETOPTIONS");
        return 1;
    }
    ptrace(PTRACE_CONT, child, 0, 0);
    unsigned long stops = 0;
    int code = 1;
    for (;;) {
        pid_t p = waitpid(-1, &st, __WALL);
        if (p < 0) {
            if (errno == EINTR)
                continue;
            break; /* ECHILD: every tracee is gone */
        }
        if (WIFEXITED(st) || WIFSIGNALED(st)) {
            if (p == child)
                code = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
            continue;
        }
        if (!WIFSTOPPED(st))
            continue;
        int sig = WSTOPSIG(st), event = st >> 16, deliver = 0;
        if (sig == SIGTRAP && event == PTRACE_EVENT_SECCOMP)
            stops++;
        else if (sig == SIGTRAP && event != 0)
            ; /* fork, clone, exec events */
        else if (sig == (SIGTRAP | 0x80))
            ;
        else if (event == PTRACE_EVENT_STOP || (sig == SIGSTOP && event == 0))
            deliver = 0; /* a new child's first stop */
        else
            deliver = sig;
        ptrace(PTRACE_CONT, p, 0, deliver);
    }
    fprintf(stderr, "stops %lu\n", stops);
    return code;
}
