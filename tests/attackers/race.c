/* Attackers of the exec supervisor, one mode per attack. Each prints one
 * summary line "attempts=N denied=D ok=O other=X" and exits 0; the test reads
 * $RACE_LOG to see whether a forbidden program ever ran.
 *
 *   race thread  N ALLOWED DENIED  a sibling thread flips the path and argv
 *   race vfork   N ALLOWED DENIED  a vfork child execs while another thread of
 *                                  its parent flips the buffers
 *   race shm     N ALLOWED DENIED  path and argv strings in a MAP_SHARED memfd
 *                                  that another process flips
 *   race fdtable ALLOWED DENIED    a thread with its own fd table puts a memfd
 *                                  copy of DENIED where the leader has ALLOWED
 *   race cwd     DIR_A DIR_B NAME  a thread with its own cwd execs NAME
 *                                  (allowed in DIR_A, the leader's cwd)
 *   race hold    ALLOWED FLAG      vfork + flipper thread once; the parent
 *                                  writes FLAG when it is running again
 *   race spawn   PATH big|plain    vfork + a running thread, the child execs
 *                                  PATH (with a 200 KiB argument: E2BIG)
 *   race symlink N DIR ALLOWED DENIED  another process flips DIR/link between
 *                                  ALLOWED and DENIED (rename over it); the
 *                                  caller execs DIR/link
 *   race spawners N ALLOWED        not an attack: 8 threads each posix_spawn
 *                                  ALLOWED N times, then N Go-style raw
 *                                  clone(CLONE_VM|CLONE_VFORK) spawns
 *   race approve ALLOWED GO DONE   a threaded child execs ALLOWED with argv
 *                                  "benign"; once GO exists its other thread
 *                                  rewrites the argument and creates DONE
 *   race procmem N ALLOWED DENIED  the parent rewrites the child's private
 *                                  path string through /proc/<child>/mem
 *                                  while the child execs it
 *   race fdflip N ALLOWED DENIED   a sibling sharing the fd table flips the
 *                                  file behind execveat(100, "", AT_EMPTY_PATH)
 *                                  (a thread; a CLONE_FILES process first)
 *   race dirflip N ALLOWED DENIED  a sibling sharing the fd table flips the
 *                                  dirfd of execveat(100, NAME, 0) between
 *                                  ALLOWED's and DENIED's directories
 *   race cwdflip N ALLOWED DENIED  a sibling sharing the fs context fchdirs
 *                                  between the two directories while the
 *                                  caller execs ./NAME
 *   race orphan N ALLOWED DENIED  the caller's memory shared with a process
 *                                  outside its lineage: it vforks A, A vforks B,
 *                                  B kills A (so the caller runs again, and B
 *                                  is reparented away) and flips the buffers
 *                                  while the caller execs ALLOWED
 *   race aio N DIR ALLOWED DENIED  the caller's own Linux AIO read (O_DIRECT,
 *                                  of a file in DIR)
 *                                  of DENIED's path lands in its path buffer
 *                                  as it execs ALLOWED
 * For dirflip and cwdflip, ALLOWED and DENIED must have the same basename.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <spawn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

static char *path;  /* the path buffer being flipped */
static char *arg;   /* argv[1] being flipped */
static const char *A, *D;
static size_t la, ld;

static void *flipper(void *unused) {
    (void)unused;
    for (unsigned long i = 0;; i++) {
        memcpy(path, D, ld + 1);
        memcpy(arg, "SECRET", 7);
        memcpy(path, A, la + 1);
        memcpy(arg, "benign", 7);
        /* Flip millions of times a second, but let the others run on a
         * small machine (the race is about the window, not starving it). */
        if ((i & 0xfff) == 0) sched_yield();
    }
    return NULL;
}

struct tally { long attempts, denied, ok, missing, killed, other; };

static void count(struct tally *t, int status) {
    t->attempts++;
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0) t->ok++;
    else if (WIFEXITED(status) && WEXITSTATUS(status) == 13) t->denied++;
    else if (WIFEXITED(status) && WEXITSTATUS(status) == 12) t->missing++;
    else if (WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) t->killed++;
    else t->other++;
}

static void report(struct tally *t) {
    printf("attempts=%ld denied=%ld ok=%ld missing=%ld killed=%ld other=%ld\n", t->attempts,
           t->denied, t->ok, t->missing, t->killed, t->other);
}

static void child_exec(void) {
    char *argv[] = {path, arg, NULL};
    execve(path, argv, environ);
    _exit(errno == EACCES ? 13 : errno == ENOENT || errno == ENOTDIR ? 12 : 14);
}

static void setup(char *p, char *a, const char *allowed, const char *denied) {
    path = p; arg = a; A = allowed; D = denied; la = strlen(A); ld = strlen(D);
    memcpy(path, A, la + 1);
    memcpy(arg, "benign", 7);
}

static int thread_mode(long n, const char *allowed, const char *denied) {
    static char p[512], a[64];
    setup(p, a, allowed, denied);
    struct tally t = {0};
    for (long i = 0; i < n; i++) {
        pid_t pid = fork();
        if (pid < 0) { perror("fork"); return 1; }
        if (pid == 0) {
            pthread_t th;
            if (pthread_create(&th, NULL, flipper, NULL)) _exit(15);
            for (volatile int k = 0; k < 200; k++) {} /* let it start */
            child_exec();
        }
        int st;
        waitpid(pid, &st, 0);
        count(&t, st);
    }
    report(&t);
    return 0;
}

/* Not an attack: the common case, a single-threaded fork + exec. */
static int plain_mode(long n, const char *allowed) {
    static char p[512], a[64];
    setup(p, a, allowed, allowed);
    struct tally t = {0};
    for (long i = 0; i < n; i++) {
        pid_t pid = fork();
        if (pid == 0) child_exec();
        int st;
        waitpid(pid, &st, 0);
        count(&t, st);
    }
    report(&t);
    return 0;
}

static int vfork_mode(long n, const char *allowed, const char *denied) {
    static char p[512], a[64];
    setup(p, a, allowed, denied);
    pthread_t th;
    if (pthread_create(&th, NULL, flipper, NULL)) return 1;
    struct tally t = {0};
    for (long i = 0; i < n; i++) {
        pid_t pid = vfork();
        if (pid < 0) { perror("vfork"); return 1; }
        if (pid == 0) child_exec();
        int st;
        waitpid(pid, &st, 0);
        count(&t, st);
    }
    report(&t);
    return 0;
}

static int shm_mode(long n, const char *allowed, const char *denied) {
    int fd = memfd_create("race", 0);
    if (fd < 0 || ftruncate(fd, 4096)) return 1;
    char *m = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (m == MAP_FAILED) return 1;
    setup(m, m + 1024, allowed, denied);
    pid_t writer = fork();
    if (writer == 0) { flipper(NULL); _exit(0); }
    struct tally t = {0};
    for (long i = 0; i < n; i++) {
        pid_t pid = fork();
        if (pid == 0) child_exec();
        int st;
        waitpid(pid, &st, 0);
        count(&t, st);
    }
    kill(writer, SIGKILL);
    waitpid(writer, NULL, 0);
    report(&t);
    return 0;
}

/* fdtable and cwd: the exec happens on a thread with its own view. */
static const char *g_allowed, *g_denied, *g_name;
static int result = -1;

static void *fd_thread(void *unused) {
    (void)unused;
    if (syscall(SYS_unshare, CLONE_FILES)) { result = 20; return NULL; }
    int src = open(g_denied, O_RDONLY);
    int mfd = memfd_create("copy", MFD_CLOEXEC);
    char buf[65536];
    ssize_t r;
    while ((r = read(src, buf, sizeof buf)) > 0)
        if (write(mfd, buf, r) != r) { result = 21; return NULL; }
    if (dup2(mfd, 100) != 100) { result = 22; return NULL; }
    char *argv[] = {"copy", "x", NULL};
    syscall(SYS_execveat, 100, "", argv, environ, AT_EMPTY_PATH);
    result = errno == EACCES ? 13 : 14;
    return NULL;
}

static int fdtable_mode(const char *allowed, const char *denied) {
    g_allowed = allowed; g_denied = denied;
    int fd = open(allowed, O_RDONLY);
    if (fd < 0 || dup2(fd, 100) != 100) return 1;
    pthread_t th;
    pthread_create(&th, NULL, fd_thread, NULL);
    pthread_join(th, NULL);
    printf("result=%d\n", result);
    return 0;
}

static void *cwd_thread(void *unused) {
    (void)unused;
    if (syscall(SYS_unshare, CLONE_FS)) { result = 20; return NULL; }
    if (chdir(g_denied)) { result = 21; return NULL; }
    char *argv[] = {(char *)g_name, "x", NULL};
    execve(g_name, argv, environ);
    result = errno == EACCES ? 13 : 14;
    return NULL;
}

static int cwd_mode(const char *dir_a, const char *dir_b, const char *name) {
    g_denied = dir_b; g_name = name;
    if (chdir(dir_a)) return 1;
    pthread_t th;
    pthread_create(&th, NULL, cwd_thread, NULL);
    pthread_join(th, NULL);
    printf("result=%d\n", result);
    return 0;
}

/* One vfork'd exec while a thread flips; the parent then says it runs. */
static void *spinner(void *unused);

static int hold_mode(const char *allowed, const char *flag) {
    static char p[512], a[64];
    setup(p, a, allowed, allowed);
    /* Opened now, written once the parent runs again: a file opened for
     * writing after the server died would fail (ENOSYS, no supervisor). */
    int fd = open(flag, O_WRONLY | O_CREAT | O_TRUNC, 0666);
    pthread_t th;
    if (pthread_create(&th, NULL, spinner, NULL)) return 1;
    pid_t pid = vfork();
    if (pid == 0) child_exec();
    int st;
    waitpid(pid, &st, 0);
    dprintf(fd, "parent-runs child-status=%d\n", st);
    close(fd);
    printf("child-status=%d\n", st);
    return 0;
}

static int symlink_mode(long n, const char *dir, const char *allowed, const char *denied) {
    static char p[512], a[64], link[512], t1[512], t2[512];
    snprintf(link, sizeof link, "%s/link", dir);
    snprintf(t1, sizeof t1, "%s/.t1", dir);
    snprintf(t2, sizeof t2, "%s/.t2", dir);
    setup(p, a, link, link);
    unlink(t1);
    unlink(t2);
    if (symlink(allowed, t1) || rename(t1, link)) { perror("symlink"); return 1; }
    pid_t flipper_pid = fork();
    if (flipper_pid == 0) {
        for (;;) {
            if (symlink(denied, t2) == 0) rename(t2, link);
            if (symlink(allowed, t1) == 0) rename(t1, link);
        }
    }
    struct tally t = {0};
    for (long i = 0; i < n; i++) {
        pid_t pid = fork();
        if (pid == 0) child_exec();
        int st;
        waitpid(pid, &st, 0);
        count(&t, st);
    }
    kill(flipper_pid, SIGKILL);
    waitpid(flipper_pid, NULL, 0);
    report(&t);
    return 0;
}

static const char *go_flag, *done_flag;
static void *rewriter(void *unused) {
    (void)unused;
    while (access(go_flag, F_OK) != 0) usleep(1000);
    memcpy(arg, "SECRET", 7);
    int fd = open(done_flag, O_WRONLY | O_CREAT, 0666);
    if (write(fd, "1", 1) != 1) { /* the test then waits in vain */ }
    close(fd);
    return NULL;
}

static int approve_mode(const char *allowed, const char *go, const char *done) {
    static char p[512], a[64];
    setup(p, a, allowed, allowed);
    go_flag = go;
    done_flag = done;
    pid_t pid = fork();
    if (pid == 0) {
        pthread_t th;
        if (pthread_create(&th, NULL, rewriter, NULL)) _exit(15);
        child_exec();
    }
    int st;
    waitpid(pid, &st, 0);
    printf("child-status=%d signal=%d\n", WIFEXITED(st) ? WEXITSTATUS(st) : -1,
           WIFSIGNALED(st) ? WTERMSIG(st) : 0);
    return 0;
}

static long spawn_n;
static const char *spawn_target;
static volatile long spawn_failed, spawn_ok;
static pthread_mutex_t spawn_lock = PTHREAD_MUTEX_INITIALIZER;

static void *spawn_thread(void *unused) {
    (void)unused;
    for (long i = 0; i < spawn_n; i++) {
        pid_t pid;
        char *argv[] = {(char *)spawn_target, "benign", NULL};
        int rc = posix_spawn(&pid, spawn_target, NULL, NULL, argv, environ);
        int st = -1;
        if (rc == 0) waitpid(pid, &st, 0);
        pthread_mutex_lock(&spawn_lock);
        if (rc == 0 && WIFEXITED(st) && WEXITSTATUS(st) == 0) spawn_ok++;
        else spawn_failed++;
        pthread_mutex_unlock(&spawn_lock);
    }
    return NULL;
}

static int go_child(void *target) {
    char *argv[] = {(char *)target, "benign", NULL};
    execve((char *)target, argv, environ);
    _exit(127);
}

static int spawners_mode(long n, const char *target) {
    spawn_n = n;
    spawn_target = target;
    pthread_t th[8];
    for (int i = 0; i < 8; i++) pthread_create(&th[i], NULL, spawn_thread, NULL);
    for (int i = 0; i < 8; i++) pthread_join(th[i], NULL);
    /* Go's os/exec: clone(CLONE_VM|CLONE_VFORK|SIGCHLD) on a fresh stack. */
    static char stack[64 * 1024];
    long go_ok = 0, go_failed = 0;
    for (long i = 0; i < n; i++) {
        pid_t pid = clone(go_child, stack + sizeof stack, CLONE_VM | CLONE_VFORK | SIGCHLD,
                          (void *)target);
        int st = -1;
        if (pid > 0) waitpid(pid, &st, 0);
        if (pid > 0 && WIFEXITED(st) && WEXITSTATUS(st) == 0) go_ok++;
        else go_failed++;
    }
    printf("posix_spawn ok=%ld failed=%ld go ok=%ld failed=%ld\n", spawn_ok, spawn_failed, go_ok,
           go_failed);
    return 0;
}

static volatile long spin;
static void *spinner(void *unused) {
    (void)unused;
    for (;;) spin++;
    return NULL;
}

/* The exec outcomes a freeze must survive: success, ENOEXEC, E2BIG... */
static int spawn_mode(const char *target, const char *kind) {
    pthread_t th;
    if (pthread_create(&th, NULL, spinner, NULL)) return 1;
    static char big[200 * 1024];
    memset(big, 'x', sizeof big - 1);
    char *argv[] = {(char *)target, strcmp(kind, "big") ? "plain" : big, NULL};
    pid_t pid = vfork();
    if (pid == 0) {
        execve(target, argv, environ);
        _exit(errno == E2BIG ? 17 : errno == ENOEXEC ? 18 : errno == EACCES ? 13 : 14);
    }
    int st;
    waitpid(pid, &st, 0);
    printf("child-exit=%d\n", WIFEXITED(st) ? WEXITSTATUS(st) : -1);
    return 0;
}


/* procmem: the parent writes the child's memory through /proc/<pid>/mem. */
static int procmem_mode(long n, const char *allowed, const char *denied) {
    static char p[512], a[64];
    setup(p, a, allowed, denied);
    struct tally t = {0};
    long refused = 0;
    for (long i = 0; i < n; i++) {
        int go[2];
        if (pipe(go)) return 1;
        pid_t pid = fork();
        if (pid == 0) {
            char c;
            close(go[1]);
            if (read(go[0], &c, 1) != 1) _exit(16);
            child_exec();
        }
        close(go[0]);
        char mem[64];
        snprintf(mem, sizeof mem, "/proc/%d/mem", pid);
        int fd = open(mem, O_RDWR);
        if (fd < 0) refused++;
        if (write(go[1], "x", 1) != 1) return 1;
        close(go[1]);
        if (fd >= 0) {
            for (int k = 0; k < 2000; k++) {
                if (pwrite(fd, D, ld + 1, (off_t)(uintptr_t)path) < 0) break;
                if (pwrite(fd, A, la + 1, (off_t)(uintptr_t)path) < 0) break;
            }
            close(fd);
        }
        int st;
        waitpid(pid, &st, 0);
        count(&t, st);
    }
    printf("mem-refused=%ld\n", refused);
    report(&t);
    return 0;
}

/* fdflip, dirflip, cwdflip: a thread (sharing fd table and fs context with
 * the caller, and its memory) flips fd 100 or the cwd. A CLONE_FILES or
 * CLONE_FS sibling that does not share the memory is tried first: the base
 * filter refuses it. */
static int flip_a, flip_b;
static volatile int flip_cwd;
static void *fd_flipper(void *unused) {
    (void)unused;
    for (unsigned long i = 0;; i++) {
        if (flip_cwd) {
            if (fchdir(flip_b)) return NULL;
            if (fchdir(flip_a)) return NULL;
        } else {
            dup2(flip_b, 100);
            dup2(flip_a, 100);
        }
        if ((i & 0xfff) == 0) sched_yield();
    }
    return NULL;
}

static char *dir_of(const char *p) {
    static char d[2][512];
    static int k;
    char *out = d[k++ & 1];
    snprintf(out, 512, "%s", p);
    char *slash = strrchr(out, '/');
    if (slash) *slash = 0;
    return out;
}

static int flip_mode(const char *mode, long n, const char *allowed, const char *denied) {
    const char *name = strrchr(allowed, '/') ? strrchr(allowed, '/') + 1 : allowed;
    int dirs = strcmp(mode, "fdflip") != 0;
    flip_cwd = strcmp(mode, "cwdflip") == 0;
    /* A sibling sharing the table (or fs) but not the memory: refused. */
    long sib = syscall(SYS_clone, (flip_cwd ? CLONE_FS : CLONE_FILES) | SIGCHLD, 0, 0, 0, 0);
    if (sib == 0) _exit(0);
    if (sib > 0) waitpid((pid_t)sib, NULL, 0);
    printf("sibling=%s\n", sib < 0 && errno == EPERM ? "refused" : "created");
    struct tally t = {0};
    for (long i = 0; i < n; i++) {
        pid_t pid = fork();
        if (pid == 0) {
            int flags = dirs ? O_RDONLY | O_DIRECTORY : O_RDONLY;
            flip_a = open(dirs ? dir_of(allowed) : allowed, flags);
            flip_b = open(dirs ? dir_of(denied) : denied, flags);
            if (flip_a < 0 || flip_b < 0 || dup2(flip_a, 100) != 100) _exit(17);
            if (flip_cwd && fchdir(flip_a)) _exit(17);
            pthread_t th;
            if (pthread_create(&th, NULL, fd_flipper, NULL)) _exit(15);
            for (volatile int k = 0; k < 200; k++) {}
            char rel[512];
            snprintf(rel, sizeof rel, "./%s", name);
            char *argv[] = {(char *)name, "benign", NULL};
            if (flip_cwd)
                execve(rel, argv, environ);
            else
                syscall(SYS_execveat, 100, dirs ? name : "", argv, environ,
                        dirs ? 0 : AT_EMPTY_PATH);
            _exit(errno == EACCES ? 13 : errno == ENOENT || errno == ENOTDIR ? 12 : 14);
        }
        int st;
        waitpid(pid, &st, 0);
        count(&t, st);
    }
    report(&t);
    return 0;
}

/* aio: the caller's own asynchronous O_DIRECT read lands in its path. */
struct iocb_ {
    unsigned long long data;
    unsigned key, rw_flags;
    unsigned short opcode;
    short prio;
    unsigned fd;
    unsigned long long buf, nbytes;
    long long offset;
    unsigned long long reserved2;
    unsigned flags, resfd;
};

static int aio_mode(long n, const char *allowed, const char *denied, const char *dir) {
    char file[600];
    snprintf(file, sizeof file, "%s/.aio-path", dir);
    /* The denied path, padded to one 4096-byte block for O_DIRECT. */
    static char block[4096] __attribute__((aligned(4096)));
    memset(block, 0, sizeof block);
    snprintf(block, sizeof block, "%s", denied);
    int w = open(file, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (w < 0 || write(w, block, sizeof block) != (ssize_t)sizeof block) { perror("aio file"); return 1; }
    close(w);
    struct tally t = {0};
    long unsupported = 0;
    for (long i = 0; i < n; i++) {
        pid_t pid = fork();
        if (pid == 0) {
            static char buf[4096] __attribute__((aligned(4096)));
            snprintf(buf, sizeof buf, "%s", allowed);
            int fd = open(file, O_RDONLY | O_DIRECT);
            unsigned long ctx = 0;
            if (fd < 0 || syscall(SYS_io_setup, 1, &ctx)) _exit(18);
            struct iocb_ cb = {0};
            cb.opcode = 0; /* IOCB_CMD_PREAD */
            cb.fd = fd;
            cb.buf = (unsigned long long)(uintptr_t)buf;
            cb.nbytes = sizeof buf;
            struct iocb_ *cbs[1] = {&cb};
            if (syscall(SYS_io_submit, ctx, 1, cbs) != 1) _exit(18);
            char *argv[] = {buf, "benign", NULL};
            execve(buf, argv, environ);
            _exit(errno == EACCES ? 13 : errno == ENOENT || errno == ENOTDIR ? 12 : 14);
        }
        int st;
        waitpid(pid, &st, 0);
        if (WIFEXITED(st) && WEXITSTATUS(st) == 18) { unsupported++; continue; }
        count(&t, st);
    }
    printf("aio-unsupported=%ld\n", unsupported);
    report(&t);
    return 0;
}

/* orphan: U (a fresh fork per attempt) vforks A with clone(CLONE_VM |
 * CLONE_VFORK) on a stack of its own, A does the same for B, and B kills A:
 * A's death ends U's vfork wait, so U runs again, and B (reparented to the
 * nearest subreaper) still shares U's memory. U waits until B flips, then
 * execs the buffers B flips. */
static volatile pid_t orphan_a;
static volatile int orphan_flipping;
static char orphan_stack_a[65536] __attribute__((aligned(16)));
static char orphan_stack_b[65536] __attribute__((aligned(16)));

static int orphan_b(void *unused) {
    (void)unused;
    kill(orphan_a, SIGKILL);
    orphan_flipping = 1;
    /* About a millisecond of flipping: longer than U's exec takes. Not
     * flipper's loop: its yields lose this race (U then runs unflipped). */
    for (unsigned long i = 0; i < 1000000; i++) {
        memcpy(path, D, ld + 1);
        memcpy(arg, "SECRET", 7);
        memcpy(path, A, la + 1);
        memcpy(arg, "benign", 7);
    }
    syscall(SYS_exit_group, 0);
    return 0;
}

static int orphan_a_fn(void *unused) {
    (void)unused;
    orphan_a = (pid_t)syscall(SYS_getpid);
    /* Refused (a vfork child may not vfork, under agentsh): U goes on
     * unflipped, its exec the allowed one. */
    if (clone(orphan_b, orphan_stack_b + sizeof orphan_stack_b, CLONE_VM | CLONE_VFORK | SIGCHLD, NULL) < 0)
        orphan_flipping = 1;
    syscall(SYS_exit_group, 0);
    return 0;
}

static int orphan_mode(long n, const char *allowed, const char *denied) {
    static char p[512], a[64];
    setup(p, a, allowed, denied);
    struct tally t = {0};
    for (long i = 0; i < n; i++) {
        pid_t u = fork();
        if (u < 0) { perror("fork"); return 1; }
        if (u == 0) {
            orphan_flipping = 0;
            pid_t ap = clone(orphan_a_fn, orphan_stack_a + sizeof orphan_stack_a,
                             CLONE_VM | CLONE_VFORK | SIGCHLD, NULL);
            if (ap < 0) _exit(15);
            while (!orphan_flipping) {}
            child_exec();
        }
        int st;
        waitpid(u, &st, 0);
        count(&t, st);
    }
    report(&t);
    return 0;
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IONBF, 0);
    if (argc >= 5 && !strcmp(argv[1], "thread")) return thread_mode(atol(argv[2]), argv[3], argv[4]);
    if (argc >= 4 && !strcmp(argv[1], "plain")) return plain_mode(atol(argv[2]), argv[3]);
    if (argc >= 5 && !strcmp(argv[1], "vfork")) return vfork_mode(atol(argv[2]), argv[3], argv[4]);
    if (argc >= 5 && !strcmp(argv[1], "shm")) return shm_mode(atol(argv[2]), argv[3], argv[4]);
    if (argc >= 4 && !strcmp(argv[1], "fdtable")) return fdtable_mode(argv[2], argv[3]);
    if (argc >= 5 && !strcmp(argv[1], "cwd")) return cwd_mode(argv[2], argv[3], argv[4]);
    if (argc >= 4 && !strcmp(argv[1], "hold")) return hold_mode(argv[2], argv[3]);
    if (argc >= 4 && !strcmp(argv[1], "spawn")) return spawn_mode(argv[2], argv[3]);
    if (argc >= 6 && !strcmp(argv[1], "symlink")) return symlink_mode(atol(argv[2]), argv[3], argv[4], argv[5]);
    if (argc >= 5 && !strcmp(argv[1], "approve")) return approve_mode(argv[2], argv[3], argv[4]);
    if (argc >= 4 && !strcmp(argv[1], "spawners")) return spawners_mode(atol(argv[2]), argv[3]);
    if (argc >= 5 && !strcmp(argv[1], "orphan")) return orphan_mode(atol(argv[2]), argv[3], argv[4]);
    if (argc >= 5 && !strcmp(argv[1], "procmem")) return procmem_mode(atol(argv[2]), argv[3], argv[4]);
    if (argc >= 5 && (!strcmp(argv[1], "fdflip") || !strcmp(argv[1], "dirflip") || !strcmp(argv[1], "cwdflip")))
        return flip_mode(argv[1], atol(argv[2]), argv[3], argv[4]);
    if (argc >= 6 && !strcmp(argv[1], "aio")) return aio_mode(atol(argv[2]), argv[4], argv[5], argv[3]);
    fprintf(stderr, "usage: see the comment at the top of race.c\n");
    return 2;
}
