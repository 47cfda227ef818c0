/* The per-call costs of agentsh-bench's gVisor step: times N calls of one
 * kind in a loop and prints the mean in nanoseconds ("ns_per_op N").
 *
 *   oploop open N PATH    open(PATH, O_RDONLY) + close: a read open
 *   oploop create N DIR   open(DIR/f, O_CREAT|O_WRONLY|O_TRUNC) + close
 *   oploop exec N PROG    fork + execv(PROG) + wait
 *
 * Exits non-zero if any call failed (a supervised side that refused it). */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static long long now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: oploop open|create|exec N ARG\n");
        return 2;
    }
    long n = atol(argv[2]);
    char path[4096];
    if (strcmp(argv[1], "create") == 0)
        snprintf(path, sizeof path, "%s/f", argv[3]);
    else
        snprintf(path, sizeof path, "%s", argv[3]);
    long long t0 = now_ns();
    for (long i = 0; i < n; i++) {
        if (strcmp(argv[1], "exec") == 0) {
            pid_t p = fork();
            if (p == 0) {
                char *args[] = {path, NULL};
                execv(path, args);
                _exit(127);
            }
            int st;
            if (p < 0 || waitpid(p, &st, 0) != p || !WIFEXITED(st) || WEXITSTATUS(st) != 0)
                return 1;
            continue;
        }
        int flags = strcmp(argv[1], "create") == 0 ? O_CREAT | O_WRONLY | O_TRUNC : O_RDONLY;
        int fd = open(path, flags, 0644);
        if (fd < 0) {
            perror(path);
            return 1;
        }
        close(fd);
    }
    printf("ns_per_op %lld\n", (now_ns() - t0) / (n > 0 ? n : 1));
    return 0;
}
