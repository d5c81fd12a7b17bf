// bystander: a client that only wants its PING answered, while someone else loads the daemon.
// Sends PING, waits for the reply, records how long it took, sleeps INTERVAL_US, and again,
// until SIGTERM or SIGINT; then writes one latency in nanoseconds per line to OUT.
//
//   bystander SOCKET INTERVAL_US OUT [fresh]
//
// Writes "READY\n" on stdout once connected (greeting read). With `fresh`, every probe is a new
// client: connect, greeting, PING, reply, close; OUT then has "OFFSET LATENCY" per line, both in
// nanoseconds (the offset from the start; latency -1 for a probe that failed).
#define _GNU_SOURCE
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

static volatile sig_atomic_t stopping;
static void stop(int signal_number) { (void)signal_number; stopping = 1; }

static int64_t now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000000000LL + t.tv_nsec;
}

// Reads one line (up to a newline); returns 0 at end of input or on error.
static int read_line(int fd) {
    char c;
    for (;;) {
        ssize_t n = read(fd, &c, 1);
        if (n <= 0) return 0;
        if (c == '\n') return 1;
    }
}

// One fresh client: connect, greeting, PING, reply. Returns 1 on success.
static int probe_fresh(const char *path) {
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    if (fd < 0) return 0;
    struct timeval limit = {.tv_sec = 10};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof limit);
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    strncpy(a.sun_path, path, sizeof a.sun_path - 1);
    int ok = connect(fd, (struct sockaddr *)&a, sizeof a) == 0 && read_line(fd) && write(fd, "PING\n", 5) == 5 && read_line(fd);
    close(fd);
    return ok;
}

int main(int argc, char **argv) {
    if (argc != 4 && !(argc == 5 && strcmp(argv[4], "fresh") == 0)) {
        fprintf(stderr, "usage: bystander SOCKET INTERVAL_US OUT [fresh]\n");
        return 2;
    }
    long interval_us = atol(argv[2]);
    int fresh = argc == 5;
    struct sigaction action = {.sa_handler = stop};
    sigaction(SIGTERM, &action, NULL);
    sigaction(SIGINT, &action, NULL);
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    strncpy(a.sun_path, argv[1], sizeof a.sun_path - 1);
    if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0) { perror("connect"); return 2; }
    if (!read_line(fd)) { fprintf(stderr, "bystander: no greeting\n"); return 2; }
    if (fresh) close(fd);
    printf("READY\n");
    fflush(stdout);
    size_t capacity = 1 << 16, count = 0;
    int64_t *latencies = malloc(capacity * sizeof *latencies), *offsets = malloc(capacity * sizeof *offsets);
    int64_t start = now_ns();
    while (!stopping) {
        int64_t sent = now_ns();
        int ok;
        if (fresh) {
            ok = probe_fresh(argv[1]);
        } else {
            ok = write(fd, "PING\n", 5) == 5 && read_line(fd);
            if (!ok) break;
        }
        if (count == capacity) {
            capacity *= 2;
            latencies = realloc(latencies, capacity * sizeof *latencies);
            offsets = realloc(offsets, capacity * sizeof *offsets);
        }
        offsets[count] = sent - start;
        latencies[count++] = ok ? now_ns() - sent : -1;
        struct timespec pause = {.tv_sec = interval_us / 1000000, .tv_nsec = (interval_us % 1000000) * 1000};
        nanosleep(&pause, NULL);
    }
    FILE *out = fopen(argv[3], "w");
    if (!out) { perror(argv[3]); return 2; }
    for (size_t i = 0; i < count; i++) {
        if (fresh) fprintf(out, "%lld %lld\n", (long long)offsets[i], (long long)latencies[i]);
        else fprintf(out, "%lld\n", (long long)latencies[i]);
    }
    fclose(out);
    return 0;
}
