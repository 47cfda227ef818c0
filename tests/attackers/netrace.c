/* The egress family's prober and attacker, for trees judged in place (the
 * ptrace backend: gVisor).
 *
 *   netrace connect IP PORT
 *       one TCP connect; prints "connect 0" or "connect ERRNO".
 *   netrace race OK_PORTS SECONDS [vfork]
 *       listens on 127.0.0.1 at the first port of OK_PORTS (a comma list:
 *       the first that is free) and at a port the kernel picks (BAD); one
 *       thread rewrites a sockaddr's port between OK and BAD in a loop while
 *       the main thread (or, with "vfork", a vfork child of it, which shares
 *       the memory) connects to that sockaddr in a loop. A connect whose
 *       peer is BAD is a win ("WON"). At the end:
 *       "ok N refused M won W" (N connects reached OK, M were refused).
 *   netrace self OK_PORTS
 *       listens on 0.0.0.0 at the first free port of OK_PORTS and connects
 *       to it through this machine's first non-loopback IPv4 address (a
 *       destination agent-default leaves to an operator); prints
 *       "target IP:PORT", then "connect 0" or "connect ERRNO".
 *   netrace dns RESOLVER NAME [send|unbound]
 *       one DNS query for NAME (type A) to RESOLVER (IP, port 53) over UDP:
 *       connect then send (default), sendto from a bound socket ("send"),
 *       or sendto from an unbound one ("unbound"). Prints "dns rcode R" (or
 *       "dns ERRNO-NAME ERRNO"), and "sockaddr kept" if the resolver's
 *       sockaddr still names RESOLVER afterwards ("sockaddr changed" if
 *       not).
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

static int connect_once(const char *ip, int port) {
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(port)};
    if (inet_pton(AF_INET, ip, &sa.sin_addr) != 1) {
        fprintf(stderr, "bad address %s\n", ip);
        return 2;
    }
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) {
        printf("socket %d\n", errno);
        return 1;
    }
    int rc = connect(fd, (struct sockaddr *)&sa, sizeof sa);
    printf("connect %d\n", rc == 0 ? 0 : errno);
    return 0;
}

/* The sockaddr the race rewrites; the two ports it flips between. */
static struct sockaddr_in target;
static volatile uint16_t ports[2];
static atomic_int stop;

static void *flipper(void *arg) {
    (void)arg;
    volatile uint16_t *port = (volatile uint16_t *)&target.sin_port;
    unsigned i = 0;
    while (!atomic_load(&stop)) {
        *port = ports[i++ & 1];
    }
    return NULL;
}

static int listen_at(int port) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(port)};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (bind(fd, (struct sockaddr *)&sa, sizeof sa) != 0 || listen(fd, 512) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

static int port_of(int fd) {
    struct sockaddr_in sa;
    socklen_t len = sizeof sa;
    getsockname(fd, (struct sockaddr *)&sa, &len);
    return ntohs(sa.sin_port);
}

static void drain(int fd) {
    int c;
    while ((c = accept(fd, NULL, NULL)) >= 0)
        close(c);
}

/* One connect to `target` made by a vfork child (sharing this memory):
 * the child's result is left in *rc. */
static int vfork_connect(int fd) {
    volatile int rc = -1, err = 0;
    pid_t pid = vfork();
    if (pid == 0) {
        long r = syscall(SYS_connect, fd, &target, sizeof target);
        rc = r == 0 ? 0 : -1;
        err = r == 0 ? 0 : errno;
        _exit(0);
    }
    if (pid < 0)
        return -1;
    waitpid(pid, NULL, 0);
    errno = err;
    return rc;
}

static int race(const char *ok_list, double seconds, int use_vfork) {
    int ok_fd = -1, ok_port = 0;
    char *list = strdup(ok_list), *save = NULL;
    for (char *p = strtok_r(list, ",", &save); p && ok_fd < 0; p = strtok_r(NULL, ",", &save)) {
        ok_port = atoi(p);
        ok_fd = listen_at(ok_port);
    }
    int bad_fd = listen_at(0);
    if (ok_fd < 0 || bad_fd < 0) {
        printf("no listener (ok %d bad %d)\n", ok_fd, bad_fd);
        return 1;
    }
    int bad_port = port_of(bad_fd);
    printf("ports ok %d bad %d\n", ok_port, bad_port);
    fflush(stdout);
    target.sin_family = AF_INET;
    target.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ports[0] = htons(ok_port);
    ports[1] = htons(bad_port);
    target.sin_port = ports[0];
    pthread_t t;
    pthread_create(&t, NULL, flipper, NULL);
    long ok = 0, refused = 0, won = 0, other = 0;
    double end = now() + seconds;
    while (now() < end) {
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        if (fd < 0)
            break;
        int rc = use_vfork ? vfork_connect(fd)
                           : connect(fd, (struct sockaddr *)&target, sizeof target);
        if (rc == 0) {
            struct sockaddr_in peer;
            socklen_t len = sizeof peer;
            getpeername(fd, (struct sockaddr *)&peer, &len);
            if (ntohs(peer.sin_port) == bad_port) {
                if (won++ < 3)
                    printf("WON: connected to the denied port %d\n", bad_port);
            } else {
                ok++;
            }
        } else if (errno == EACCES) {
            refused++;
        } else {
            other++;
        }
        close(fd);
        drain(ok_fd);
        drain(bad_fd);
    }
    atomic_store(&stop, 1);
    pthread_join(t, NULL);
    printf("ok %ld refused %ld won %ld other %ld\n", ok, refused, won, other);
    return 0;
}

static int self_connect(const char *ok_list) {
    int fd = -1, port = 0;
    char *list = strdup(ok_list), *save = NULL;
    for (char *p = strtok_r(list, ",", &save); p && fd < 0; p = strtok_r(NULL, ",", &save)) {
        port = atoi(p);
        fd = socket(AF_INET, SOCK_STREAM, 0);
        int one = 1;
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        struct sockaddr_in any = {.sin_family = AF_INET, .sin_port = htons(port)};
        if (bind(fd, (struct sockaddr *)&any, sizeof any) != 0 || listen(fd, 8) != 0) {
            close(fd);
            fd = -1;
        }
    }
    struct ifaddrs *ifs, *i;
    struct sockaddr_in to = {0};
    if (fd < 0 || getifaddrs(&ifs) != 0) {
        printf("no listener or no interfaces\n");
        return 1;
    }
    for (i = ifs; i; i = i->ifa_next) {
        if (i->ifa_addr && i->ifa_addr->sa_family == AF_INET) {
            struct sockaddr_in *a = (struct sockaddr_in *)i->ifa_addr;
            if ((ntohl(a->sin_addr.s_addr) >> 24) != 127) {
                to = *a;
                break;
            }
        }
    }
    if (to.sin_family != AF_INET) {
        printf("no non-loopback address\n");
        return 1;
    }
    to.sin_port = htons(port);
    char ip[32];
    inet_ntop(AF_INET, &to.sin_addr, ip, sizeof ip);
    printf("target %s:%d\n", ip, port);
    int c = socket(AF_INET, SOCK_STREAM, 0);
    int rc = connect(c, (struct sockaddr *)&to, sizeof to);
    printf("connect %d\n", rc == 0 ? 0 : errno);
    return 0;
}

/* A DNS query for `name`, type A, class IN, id 0x4242. */
static int query(const char *name, unsigned char *q) {
    unsigned char h[12] = {0x42, 0x42, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0};
    memcpy(q, h, 12);
    int n = 12;
    const char *p = name;
    while (*p) {
        const char *dot = strchr(p, '.');
        int len = dot ? (int)(dot - p) : (int)strlen(p);
        q[n++] = (unsigned char)len;
        memcpy(q + n, p, len);
        n += len;
        p += len + (dot ? 1 : 0);
    }
    q[n++] = 0;
    q[n++] = 0, q[n++] = 1, q[n++] = 0, q[n++] = 1;
    return n;
}

static int dns(const char *resolver, const char *name, const char *how) {
    struct sockaddr_in ns = {.sin_family = AF_INET, .sin_port = htons(53)};
    if (inet_pton(AF_INET, resolver, &ns.sin_addr) != 1) {
        fprintf(stderr, "bad address %s\n", resolver);
        return 2;
    }
    struct sockaddr_in named = ns;
    unsigned char q[512], r[512];
    int n = query(name, q);
    int fd = socket(AF_INET, SOCK_DGRAM, 0);
    struct timeval tv = {3, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    long sent;
    if (strcmp(how, "connect") == 0) {
        if (connect(fd, (struct sockaddr *)&ns, sizeof ns) != 0) {
            printf("dns connect %d\n", errno);
            goto kept;
        }
        sent = send(fd, q, n, 0);
    } else {
        if (strcmp(how, "send") == 0) {
            struct sockaddr_in any = {.sin_family = AF_INET};
            bind(fd, (struct sockaddr *)&any, sizeof any);
        }
        sent = sendto(fd, q, n, 0, (struct sockaddr *)&ns, sizeof ns);
    }
    if (sent < 0) {
        printf("dns send %d\n", errno);
        goto kept;
    }
    long got = recv(fd, r, sizeof r, 0);
    if (got < 4) {
        printf("dns recv %d\n", got < 0 ? errno : 0);
        goto kept;
    }
    printf("dns rcode %d\n", r[3] & 0x0f);
kept:
    printf("sockaddr %s\n", memcmp(&ns, &named, sizeof ns) == 0 ? "kept" : "changed");
    return 0;
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc >= 4 && strcmp(argv[1], "connect") == 0)
        return connect_once(argv[2], atoi(argv[3]));
    if (argc >= 4 && strcmp(argv[1], "race") == 0)
        return race(argv[2], atof(argv[3]), argc >= 5 && strcmp(argv[4], "vfork") == 0);
    if (argc >= 3 && strcmp(argv[1], "self") == 0)
        return self_connect(argv[2]);
    if (argc >= 4 && strcmp(argv[1], "dns") == 0)
        return dns(argv[2], argv[3], argc >= 5 ? argv[4] : "connect");
    fprintf(stderr,
            "usage: netrace connect IP PORT | race OK_PORTS SECONDS [vfork] | "
            "self OK_PORTS | dns RESOLVER NAME [send|unbound]\n");
    return 2;
}
