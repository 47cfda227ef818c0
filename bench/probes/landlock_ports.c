/*
 * What a Landlock TCP connect allow-list of N ports costs a new shell: the
 * figure behind refusing deny-only port rules (docs/benchmarks.md, "Deny-only
 * TCP port rules"). Not part of the benchmark harness; build and run by hand:
 *
 *   cc -O2 -o /tmp/landlock_ports bench/probes/landlock_ports.c
 *   /tmp/landlock_ports 20 101; /tmp/landlock_ports 65534 31
 *
 * Per repetition, a fork whose child does what unixwrap would do (create a
 * ruleset handling TCP connect, add one rule per port, restrict itself) and
 * exits, timed from fork to reap; then the same with the ruleset built once
 * in the parent and only restrict_self in the child (what passing a prebuilt
 * ruleset fd would leave). Prints medians. Needs Landlock ABI >= 4.
 */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* Declared here: older kernel headers lack the network parts. */
struct ruleset_attr { uint64_t handled_access_fs, handled_access_net, scoped; };
struct net_port_attr { uint64_t allowed_access; uint64_t port; } __attribute__((packed));
#define ACCESS_NET_CONNECT_TCP 2ULL
#define RULE_NET_PORT 2

static double now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

static int ruleset(int nports) {
  struct ruleset_attr a = {0, ACCESS_NET_CONNECT_TCP, 0};
  int fd = syscall(SYS_landlock_create_ruleset, &a, sizeof a, 0);
  if (fd < 0) { perror("landlock_create_ruleset"); exit(2); }
  for (int p = 1, n = 0; n < nports && p < 65536; p++) {
    if (p == 9) continue; /* "every port but 9" */
    struct net_port_attr r = {ACCESS_NET_CONNECT_TCP, (uint64_t)p};
    if (syscall(SYS_landlock_add_rule, fd, RULE_NET_PORT, &r, 0)) { perror("landlock_add_rule"); exit(2); }
    n++;
  }
  return fd;
}

static int restrict_self(int fd) {
  prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0);
  return syscall(SYS_landlock_restrict_self, fd, 0) ? 1 : 0;
}

static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static double median_ms(int nports, int reps, int prebuilt_fd) {
  double *t = calloc(reps, sizeof *t);
  for (int i = 0; i < reps; i++) {
    double t0 = now_ms();
    pid_t pid = fork();
    if (pid == 0) _exit(restrict_self(prebuilt_fd >= 0 ? prebuilt_fd : ruleset(nports)));
    int st;
    waitpid(pid, &st, 0);
    t[i] = now_ms() - t0;
    if (!WIFEXITED(st) || WEXITSTATUS(st)) { fprintf(stderr, "child failed\n"); exit(2); }
  }
  qsort(t, reps, sizeof *t, cmp);
  double m = t[reps / 2];
  free(t);
  return m;
}

int main(int argc, char **argv) {
  if (argc != 3) { fprintf(stderr, "usage: %s NPORTS REPS\n", argv[0]); return 2; }
  int n = atoi(argv[1]), reps = atoi(argv[2]);
  printf("ports=%d built per shell: median %.3f ms\n", n, median_ms(n, reps, -1));
  int fd = ruleset(n);
  printf("ports=%d prebuilt, restrict_self only: median %.3f ms\n", n, median_ms(n, reps, fd));
  return 0;
}
