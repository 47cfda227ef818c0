/* Attacks on the ptrace backend's hold on the tree.
 *
 *   untraced PROGRAM   clone(CLONE_UNTRACED) a child that is not
 *                      auto-attached to the tracer; it execs PROGRAM.
 *                      Prints "exec errno=E" (the exec failed) or nothing
 *                      (PROGRAM ran); exit 0.
 *   traceme PROGRAM    PTRACE_TRACEME, then exec PROGRAM: prints
 *                      "traceme errno=E"; a second tracer must be refused.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ptrace.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

static char stack[1 << 16];
static const char *prog;

static int child(void *arg) {
  (void)arg;
  char *argv[] = {(char *)prog, "from-untraced", NULL};
  syscall(SYS_execve, prog, argv, NULL);
  printf("exec errno=%d\n", errno);
  fflush(stdout);
  return 0;
}

int main(int argc, char **argv) {
  if (argc < 3) return 2;
  prog = argv[2];
  if (strcmp(argv[1], "untraced") == 0) {
    pid_t p = clone(child, stack + sizeof stack, CLONE_UNTRACED | SIGCHLD, NULL);
    if (p < 0) {
      printf("clone errno=%d\n", errno);
      return 0;
    }
    int st;
    waitpid(p, &st, 0);
    return 0;
  }
  if (strcmp(argv[1], "traceme") == 0) {
    long r = ptrace(PTRACE_TRACEME, 0, 0, 0);
    printf("traceme %s errno=%d\n", r == 0 ? "ok" : "refused", r == 0 ? 0 : errno);
    return 0;
  }
  return 2;
}
