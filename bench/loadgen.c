// loadgen: START throughput, shaped like redis-benchmark: one thread, an epoll loop over CLIENTS
// connections, each sending DEPTH requests at a time and waiting for their DEPTH replies.
//
//   loadgen SOCKET CLIENTS TOTAL DEPTH PREFIX [redis]
//
// With `redis`, the same requests go to Redis as inline commands (`SET key 1 PX 60000`, no
// greeting, `-` for an error): one client for both servers, so the comparison measures the
// servers and not two different clients sharing the two cores with them.
//
// Prints "<requests per second> <errors>".
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

struct client {
    int fd;
    long sent, wanted;  // requests sent; replies still to read (the greeting counts as one)
    size_t have;
    char in[1 << 16];
};

static const char *prefix;
static long per_client, depth, errors;
static int redis_mode;

static void send_batch(struct client *c, long id) {
    char out[64 * 64];
    size_t len = 0;
    long batch = per_client - c->sent < depth ? per_client - c->sent : depth;
    for (long i = 0; i < batch; i++, c->sent++)
        len += (size_t)snprintf(out + len, sizeof out - len, redis_mode ? "SET %s%ld-%ld 1 PX 60000\r\n" : "START %s%ld-%ld 60\n",
                                prefix, id, c->sent);
    if (write(c->fd, out, len) != (ssize_t)len) { perror("write"); exit(2); }
    c->wanted = batch;
}

int main(int argc, char **argv) {
    if (argc != 6 && argc != 7) { fprintf(stderr, "usage: loadgen SOCKET CLIENTS TOTAL DEPTH PREFIX [redis]\n"); return 2; }
    long clients = atol(argv[2]), total = atol(argv[3]);
    depth = atol(argv[4]);
    prefix = argv[5];
    redis_mode = argc == 7 && strcmp(argv[6], "redis") == 0;
    per_client = total / clients;
    struct client *all = calloc((size_t)clients, sizeof *all);
    int epoll = epoll_create1(0);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    long active = clients;
    for (long i = 0; i < clients; i++) {
        struct client *c = &all[i];
        c->fd = socket(AF_UNIX, SOCK_STREAM, 0);
        struct sockaddr_un a = {.sun_family = AF_UNIX};
        strncpy(a.sun_path, argv[1], sizeof a.sun_path - 1);
        if (connect(c->fd, (struct sockaddr *)&a, sizeof a) != 0) { perror("connect"); return 2; }
        struct epoll_event event = {.events = EPOLLIN, .data.u64 = (uint64_t)i};
        epoll_ctl(epoll, EPOLL_CTL_ADD, c->fd, &event);
        if (redis_mode) send_batch(c, i); else c->wanted = 1;
    }
    struct epoll_event ready[64];
    while (active > 0) {
        int n = epoll_wait(epoll, ready, 64, -1);
        for (int k = 0; k < n; k++) {
            long id = (long)ready[k].data.u64;
            struct client *c = &all[id];
            ssize_t got = read(c->fd, c->in + c->have, sizeof c->in - c->have);
            if (got <= 0) { fprintf(stderr, "loadgen: connection closed\n"); return 2; }
            c->have += (size_t)got;
            char *line = c->in, *end = c->in + c->have, *nl;
            while (c->wanted > 0 && (nl = memchr(line, '\n', (size_t)(end - line))) != NULL) {
                if (strncmp(line, "ERR", 3) == 0 || line[0] == '-') errors++;
                line = nl + 1;
                c->wanted--;
            }
            c->have = (size_t)(end - line);
            memmove(c->in, line, c->have);
            if (c->wanted == 0) {
                if (c->sent < per_client) {
                    send_batch(c, id);
                } else {
                    epoll_ctl(epoll, EPOLL_CTL_DEL, c->fd, NULL);
                    close(c->fd);
                    active--;
                }
            }
        }
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double seconds = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
    printf("%.0f %ld\n", (double)(per_client * clients) / seconds, errors);
    return 0;
}
