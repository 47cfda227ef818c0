/* How runtimes spawn, for the supervisor-time figures of agentsh-bench:
 *
 *   spawner threaded N PROG  N times: fork a child that starts a second
 *                            thread, then execs PROG from the first (an exec
 *                            from a multi-threaded process)
 *   spawner vfork N PROG     a process with a second (idle) thread, as Go,
 *                            Java, Node and Python have, vforks N children
 *                            that exec PROG (posix_spawn, os/exec)
 *
 * Every exec is supervised; the memory it is read from is shared, so the
 * supervisor stops the other tasks first. Exits non-zero if any spawn failed. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

static void *idle(void *unused) {
    (void)unused;
    for (;;) pause();
    return NULL;
}

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: spawner threaded|vfork N PROG\n");
        return 2;
    }
    long n = atol(argv[2]);
    char *prog = argv[3];
    char *args[] = {prog, NULL};
    int vfork_mode = strcmp(argv[1], "vfork") == 0;
    pthread_t th;
    if (vfork_mode && pthread_create(&th, NULL, idle, NULL)) return 3;
    long failed = 0;
    for (long i = 0; i < n; i++) {
        pid_t pid = vfork_mode ? vfork() : fork();
        if (pid == 0) {
            if (!vfork_mode && pthread_create(&th, NULL, idle, NULL)) _exit(3);
            execve(prog, args, environ);
            _exit(127);
        }
        int st;
        if (pid < 0 || waitpid(pid, &st, 0) < 0 || !WIFEXITED(st) || WEXITSTATUS(st)) failed++;
    }
    if (failed) fprintf(stderr, "spawner: %ld of %ld spawns failed\n", failed, n);
    return failed ? 1 : 0;
}
