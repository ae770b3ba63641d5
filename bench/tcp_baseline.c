/* tcp_baseline.c - the plain-TCP yardstick for bench/wire_throughput: the least a data plane can
 * cost.
 *
 * For each size S it measures, over one TCP connection on 127.0.0.1 with TCP_NODELAY:
 *   push       client sends S bytes, server answers 8 bytes
 *   pull       client sends 8 bytes, server answers S bytes
 *   push-pull  client sends S bytes, server answers S bytes
 * and prints one line per size and pattern: "S pattern seconds seconds ...", every round
 * trip it timed. Each pattern runs for about --seconds (at least 3 and at most MAX_ROUNDS
 * round trips). Both sockets keep the kernel's buffer sizing unless --sndbuf asks for a
 * send buffer of BYTES on each (to compare with the one psflow's transport asks for).
 *
 * usage: tcp_baseline [--seconds T] [--sndbuf BYTES] SIZE...
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "psflow/clock.h"

enum { MAX_ROUNDS = 100000 };

static int read_all(int fd, uint8_t *p, size_t n) {
    while (n) {
        ssize_t k = read(fd, p, n);
        if (k <= 0)
            return -1;
        p += k;
        n -= (size_t)k;
    }
    return 0;
}

static int write_all(int fd, const uint8_t *p, size_t n) {
    while (n) {
        ssize_t k = write(fd, p, n);
        if (k <= 0)
            return -1;
        p += k;
        n -= (size_t)k;
    }
    return 0;
}

typedef struct server_arg {
    int listen_fd;
    size_t max;
    int sndbuf; /* 0: the kernel's sizing */
} server_arg;

static void tune(int fd, int sndbuf) {
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (sndbuf > 0)
        setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof sndbuf);
}

/* Serves requests "u64 request bytes, u64 reply bytes" followed by the request body. */
static void *server(void *arg) {
    server_arg *a = arg;
    int fd = accept(a->listen_fd, NULL, NULL);
    tune(fd, a->sndbuf);
    uint8_t *buf = malloc(a->max + 16);
    uint64_t hdr[2];
    while (read_all(fd, (uint8_t *)hdr, sizeof hdr) == 0 && read_all(fd, buf, hdr[0]) == 0 &&
           write_all(fd, buf, hdr[1]) == 0)
        ;
    free(buf);
    close(fd);
    return NULL;
}

int main(int argc, char **argv) {
    double seconds = 1.0;
    int sndbuf = 0, bad = 0;
    size_t sizes[16], n_sizes = 0, max = 8;
    for (int i = 1; i < argc && !bad; i++) {
        if (!strcmp(argv[i], "--seconds") && i + 1 < argc)
            seconds = atof(argv[++i]);
        else if (!strcmp(argv[i], "--sndbuf") && i + 1 < argc)
            sndbuf = atoi(argv[++i]);
        else if (argv[i][0] != '-' && n_sizes < 16 &&
                 (sizes[n_sizes] = strtoull(argv[i], NULL, 10)))
            n_sizes++;
        else
            bad = 1; /* an unknown option, a size of 0 or not a number, or too many sizes */
    }
    if (bad || !n_sizes || sndbuf < 0) {
        fprintf(stderr, "usage: tcp_baseline [--seconds T] [--sndbuf BYTES] SIZE...\n");
        return 64;
    }
    for (size_t i = 0; i < n_sizes; i++)
        max = sizes[i] > max ? sizes[i] : max;
    int ls = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(0x7f000001)};
    socklen_t len = sizeof addr;
    if (bind(ls, (struct sockaddr *)&addr, sizeof addr) || listen(ls, 1) ||
        getsockname(ls, (struct sockaddr *)&addr, &len)) {
        perror("tcp_baseline");
        return 71;
    }
    server_arg sa = {ls, max, sndbuf};
    pthread_t th;
    pthread_create(&th, NULL, server, &sa);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (connect(fd, (struct sockaddr *)&addr, sizeof addr)) {
        perror("tcp_baseline");
        return 71;
    }
    tune(fd, sndbuf);
    uint8_t *buf = calloc(1, max + 16);
    for (size_t s = 0; s < n_sizes; s++) {
        const char *names[] = {"push", "pull", "push-pull"};
        uint64_t shapes[3][2] = {{sizes[s], 8}, {8, sizes[s]}, {sizes[s], sizes[s]}};
        for (int p = 0; p < 3; p++) {
            double start = pf_clock_now();
            int rounds = 0;
            printf("%zu %s", sizes[s], names[p]);
            while (rounds < 3 || (pf_clock_now() - start < seconds && rounds < MAX_ROUNDS)) {
                double t0 = pf_clock_now();
                if (write_all(fd, (uint8_t *)shapes[p], 16) || write_all(fd, buf, shapes[p][0]) ||
                    read_all(fd, buf, shapes[p][1])) {
                    perror("tcp_baseline");
                    return 71;
                }
                printf(" %.9f", pf_clock_now() - t0);
                rounds++;
            }
            printf("\n");
        }
    }
    fflush(stdout);
    shutdown(fd, SHUT_RDWR);
    close(fd);
    pthread_join(th, NULL);
    close(ls);
    free(buf);
    return 0;
}
