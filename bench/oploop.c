/* The per-call costs of agentsh-bench's gVisor step: times N calls of one
 * kind in a loop and prints the mean in nanoseconds ("ns_per_op N").
 *
 *   oploop open N PATH    open(PATH, O_RDONLY) + close: a read open
 *   oploop create N DIR   open(DIR/f, O_CREAT|O_WRONLY|O_TRUNC) + close
 *   oploop exec N PROG    fork + execv(PROG) + wait
 *   oploop connect N PORTS  TCP connect to a listener of its own on
 *                         127.0.0.1 (the first of the comma-separated PORTS
 *                         it can bind) + accept + close both
 *
 * Exits non-zero if any call failed (a supervised side that refused it). */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
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

/* A listener on 127.0.0.1, the first port of PORTS it can bind; its
 * address in *sa. -1 if none. */
static int listener(const char *ports, struct sockaddr_in *sa) {
    char buf[256];
    snprintf(buf, sizeof buf, "%s", ports);
    for (char *p = strtok(buf, ","); p; p = strtok(NULL, ",")) {
        int l = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        int one = 1;
        setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        memset(sa, 0, sizeof *sa);
        sa->sin_family = AF_INET;
        sa->sin_port = htons((unsigned short)atoi(p));
        sa->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        if (bind(l, (struct sockaddr *)sa, sizeof *sa) == 0 && listen(l, 16) == 0)
            return l;
        close(l);
    }
    return -1;
}

static int connects(long n, const char *ports) {
    struct sockaddr_in sa;
    int l = listener(ports, &sa);
    if (l < 0) {
        fprintf(stderr, "no port of %s to listen on\n", ports);
        return 1;
    }
    long long t0 = now_ns();
    for (long i = 0; i < n; i++) {
        int c = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (c < 0 || connect(c, (struct sockaddr *)&sa, sizeof sa) != 0) {
            perror("connect");
            return 1;
        }
        int a = accept(l, NULL, NULL);
        if (a < 0) {
            perror("accept");
            return 1;
        }
        close(a);
        close(c);
    }
    printf("ns_per_op %lld\n", (now_ns() - t0) / (n > 0 ? n : 1));
    return 0;
}

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: oploop open|create|exec|connect N ARG\n");
        return 2;
    }
    long n = atol(argv[2]);
    if (strcmp(argv[1], "connect") == 0)
        return connects(n, argv[3]);
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
