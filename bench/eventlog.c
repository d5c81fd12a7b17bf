// eventlog: a fast subscriber for the benchmark. Records, for every event of interest, the
// CLOCK_BOOTTIME and CLOCK_REALTIME at which it was read, so lateness can be computed exactly.
//
//   eventlog countdownd SOCKET OUT EXPECTED_DONE TIMEOUT_S [REQUEST]
//   eventlog redis      SOCKET OUT EXPECTED_EXPIRED TIMEOUT_S
//
// Writes "READY\n" on stdout once subscribed, then one line per event to OUT:
//   <boot_ns> <real_ns> <kind> <name> <remaining_ms>
// and exits once EXPECTED done/expired events arrived, after TIMEOUT_S, or at SIGTERM. REQUEST replaces
// countdownd's plain SUBSCRIBE (`SUBSCRIBE EVENTS done`: no ticks asked for, so none are made).
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

// SIGTERM ends the wait early, with what was read written out.
static volatile sig_atomic_t stopping;
static void stop(int signal_number) { (void)signal_number; stopping = 1; }

static int64_t now_ns(clockid_t clock) {
    struct timespec t;
    clock_gettime(clock, &t);
    return (int64_t)t.tv_sec * 1000000000LL + t.tv_nsec;
}

static int connect_unix(const char *path) {
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    strncpy(a.sun_path, path, sizeof a.sun_path - 1);
    if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0) { perror("connect"); exit(2); }
    return fd;
}

int main(int argc, char **argv) {
    if (argc != 6 && argc != 7) { fprintf(stderr, "usage: eventlog countdownd|redis SOCKET OUT EXPECTED TIMEOUT_S [REQUEST]\n"); return 2; }
    int redis = strcmp(argv[1], "redis") == 0;
    int fd = connect_unix(argv[2]);
    FILE *out = fopen(argv[3], "w");
    static char outbuf[1 << 20];
    setvbuf(out, outbuf, _IOFBF, sizeof outbuf);
    long expected = atol(argv[4]);
    int64_t give_up = now_ns(CLOCK_MONOTONIC) + (int64_t)atol(argv[5]) * 1000000000LL;
    char request[256];
    snprintf(request, sizeof request, "%s\n", argc == 7 ? argv[6] : "SUBSCRIBE");
    const char *subscribe = redis ? "SUBSCRIBE __keyevent@0__:expired\r\n" : request;
    if (write(fd, subscribe, strlen(subscribe)) < 0) { perror("write"); return 2; }

    static char buf[1 << 22];
    size_t have = 0;
    long finished = 0;
    int subscribed = 0, next_is_key = 0, skip_length = 0;
    struct sigaction on_term = {.sa_handler = stop};  // no SA_RESTART: poll returns EINTR
    sigaction(SIGTERM, &on_term, NULL);
    while (finished < expected && !stopping) {
        int64_t left_ms = (give_up - now_ns(CLOCK_MONOTONIC)) / 1000000;
        if (left_ms <= 0) break;
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, (int)left_ms) <= 0) continue;
        ssize_t n = read(fd, buf + have, sizeof buf - have);
        if (n <= 0) break;
        int64_t boot = now_ns(CLOCK_BOOTTIME), real = now_ns(CLOCK_REALTIME);
        have += (size_t)n;
        char *line = buf, *end = buf + have, *nl;
        while ((nl = memchr(line, '\n', (size_t)(end - line))) != NULL) {
            *nl = 0;
            if (nl > line && nl[-1] == '\r') nl[-1] = 0;
            if (redis) {
                if (!subscribed && strcmp(line, "subscribe") == 0) { subscribed = 1; printf("READY\n"); fflush(stdout); }
                else if (skip_length) { skip_length = 0; next_is_key = 1; }
                else if (next_is_key) { fprintf(out, "%lld %lld expired %s 0\n", (long long)boot, (long long)real, line); next_is_key = 0; finished++; }
                else if (strcmp(line, "__keyevent@0__:expired") == 0 && subscribed) { skip_length = 1; }
            } else if (strncmp(line, "OK subscribed", 13) == 0) {
                subscribed = 1; printf("READY\n"); fflush(stdout);
            } else if (strncmp(line, "EVENT ", 6) == 0) {
                char kind[16], name[160]; long long seq, remaining, total;
                if (sscanf(line, "EVENT %lld %15s %159s %lld %lld", &seq, kind, name, &remaining, &total) == 5 &&
                    (strcmp(kind, "tick") == 0 || strcmp(kind, "done") == 0)) {
                    fprintf(out, "%lld %lld %s %s %lld\n", (long long)boot, (long long)real, kind, name, remaining);
                    if (kind[0] == 'd') finished++;
                }
            }
            line = nl + 1;
        }
        have = (size_t)(end - line);
        memmove(buf, line, have);
    }
    fclose(out);
    fprintf(stderr, "eventlog: %ld of %ld finished events\n", finished, expected);
    return finished == expected ? 0 : 1;
}
