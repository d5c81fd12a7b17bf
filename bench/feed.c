// feed: sends request lines from a file over a Unix socket, CHUNK lines at a time, reading one
// reply line per request before the next chunk (the way a pipelining client does). Used to start
// the countdowns (countdownd) and keys (Redis) of the lateness runs, so that the starter is as
// light as the subscriber and takes little CPU from the server being measured.
//
//   feed SOCKET FILE CHUNK GREETING(0|1) [RATE]
//
// With RATE (lines per second), chunk k is sent no sooner than k * CHUNK / RATE seconds after the
// first: requests keep arriving while the countdowns started first fall due (the mixed load).
//
// Prints "<replies> <errors>", where an error is a reply starting with "ERR" or "-".
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

static char in[1 << 20];
static size_t have;

// Reads until `wanted` reply lines have arrived; counts errors.
static void read_replies(int fd, long wanted, long *errors) {
    while (wanted > 0) {
        ssize_t n = read(fd, in + have, sizeof in - have);
        if (n <= 0) { fprintf(stderr, "feed: connection closed\n"); exit(2); }
        have += (size_t)n;
        char *line = in, *end = in + have, *nl;
        while (wanted > 0 && (nl = memchr(line, '\n', (size_t)(end - line))) != NULL) {
            if (strncmp(line, "ERR", 3) == 0 || line[0] == '-') (*errors)++;
            line = nl + 1;
            wanted--;
        }
        have = (size_t)(end - line);
        memmove(in, line, have);
    }
}

int main(int argc, char **argv) {
    if (argc != 5 && argc != 6) { fprintf(stderr, "usage: feed SOCKET FILE CHUNK GREETING [RATE]\n"); return 2; }
    long chunk = atol(argv[3]), errors = 0, replies = 0, ignored = 0;
    double rate = argc == 6 ? atof(argv[5]) : 0;
    struct timespec first;
    clock_gettime(CLOCK_MONOTONIC, &first);
    FILE *file = fopen(argv[2], "r");
    if (!file) { perror(argv[2]); return 2; }
    struct stat st;
    fstat(fileno(file), &st);
    char *text = malloc((size_t)st.st_size + 1);
    size_t size = fread(text, 1, (size_t)st.st_size, file);
    fclose(file);
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    strncpy(a.sun_path, argv[1], sizeof a.sun_path - 1);
    if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0) { perror("connect"); return 2; }
    if (atoi(argv[4])) read_replies(fd, 1, &ignored);
    size_t offset = 0;
    while (offset < size) {
        if (rate > 0) {
            double due = (double)replies / rate;
            struct timespec at = first;
            at.tv_sec += (time_t)due;
            at.tv_nsec += (long)((due - (double)(time_t)due) * 1e9);
            if (at.tv_nsec >= 1000000000L) { at.tv_sec++; at.tv_nsec -= 1000000000L; }
            clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &at, NULL);
        }
        size_t end = offset;
        long lines = 0;
        while (end < size && lines < chunk) {
            char *nl = memchr(text + end, '\n', size - end);
            end = nl ? (size_t)(nl - text) + 1 : size;
            lines++;
        }
        for (size_t sent = offset; sent < end;) {
            ssize_t n = write(fd, text + sent, end - sent);
            if (n <= 0) { perror("write"); return 2; }
            sent += (size_t)n;
        }
        read_replies(fd, lines, &errors);
        replies += lines;
        offset = end;
    }
    close(fd);
    printf("%ld %ld\n", replies, errors);
    return 0;
}
