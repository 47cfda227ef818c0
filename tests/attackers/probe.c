/* The program the race tests exec. Installed as `okay` (allowed unless its
 * first argument contains SECRET), `curl` (denied), and as `tool` in a
 * directory `allowed/` and one `denied/` (denied by path). If it runs as
 * `curl`, from a `denied/` directory, or with SECRET in argv[1], a forbidden
 * program ran: it appends a line saying what to $RACE_LOG. Static, so an
 * exec costs little. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int main(int argc, char **argv) {
    char exe[4096];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n < 0) return 2;
    exe[n] = 0;
    const char *base = strrchr(exe, '/');
    base = base ? base + 1 : exe;
    const char *arg = argc > 1 ? argv[1] : "";
    if (strcmp(base, "curl") == 0 || strstr(exe, "/denied/") || strstr(arg, "SECRET")) {
        const char *log = getenv("RACE_LOG");
        int fd = log ? open(log, O_WRONLY | O_APPEND | O_CREAT, 0666) : -1;
        if (fd >= 0) {
            char line[4300];
            int len = snprintf(line, sizeof line, "ran %s arg=%s\n", exe, arg);
            if (write(fd, line, len) < 0) return 3;
            close(fd);
        }
        return 42;
    }
    return 0;
}
