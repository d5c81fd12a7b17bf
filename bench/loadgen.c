// loadgen: START throughput against countdownd, like redis-benchmark: CLIENTS connections, each
// sending DEPTH requests at a time and waiting for their DEPTH replies.
//
//   loadgen SOCKET CLIENTS TOTAL DEPTH PREFIX
//
// Prints "<requests per second> <errors>".
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

static const char *socket_path, *prefix;
static long per_client, depth;
static long errors_total;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

static void *client(void *arg) {
    long id = (long)arg, errors = 0;
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    strncpy(a.sun_path, socket_path, sizeof a.sun_path - 1);
    if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0) { perror("connect"); exit(2); }
    static __thread char in[1 << 20];
    char out[64 * 64];
    size_t have = 0;
    long lines_wanted = 1;  // the greeting
    for (long sent = 0; sent < per_client || lines_wanted > 0;) {
        if (lines_wanted == 0) {
            size_t len = 0;
            long batch = per_client - sent < depth ? per_client - sent : depth;
            for (long i = 0; i < batch; i++, sent++)
                len += (size_t)snprintf(out + len, sizeof out - len, "START %s%ld-%ld 60\n", prefix, id, sent);
            if (write(fd, out, len) != (ssize_t)len) { perror("write"); exit(2); }
            lines_wanted = batch;
        }
        ssize_t n = read(fd, in + have, sizeof in - have);
        if (n <= 0) { fprintf(stderr, "loadgen: connection closed\n"); exit(2); }
        have += (size_t)n;
        char *line = in, *end = in + have, *nl;
        while (lines_wanted > 0 && (nl = memchr(line, '\n', (size_t)(end - line))) != NULL) {
            if (strncmp(line, "ERR", 3) == 0) errors++;
            line = nl + 1;
            lines_wanted--;
        }
        have = (size_t)(end - line);
        memmove(in, line, have);
    }
    close(fd);
    pthread_mutex_lock(&lock);
    errors_total += errors;
    pthread_mutex_unlock(&lock);
    return NULL;
}

int main(int argc, char **argv) {
    if (argc != 6) { fprintf(stderr, "usage: loadgen SOCKET CLIENTS TOTAL DEPTH PREFIX\n"); return 2; }
    socket_path = argv[1];
    long clients = atol(argv[2]), total = atol(argv[3]);
    depth = atol(argv[4]);
    prefix = argv[5];
    per_client = total / clients;
    pthread_t threads[64];
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (long i = 0; i < clients; i++) pthread_create(&threads[i], NULL, client, (void *)i);
    for (long i = 0; i < clients; i++) pthread_join(threads[i], NULL);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double seconds = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
    printf("%.0f %ld\n", (double)(per_client * clients) / seconds, errors_total);
    return 0;
}
