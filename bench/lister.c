// lister: sends LIST and reads the whole reply as fast as it can, REPEAT times in a row (so that
// a bystander has time to measure something while a million are listed).
//
//   lister SOCKET [REPEAT]
//
// Prints "<COUNTDOWN lines of one LIST> <seconds per LIST>" once the last final OK arrived.
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

static char buffer[1 << 20];

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

int main(int argc, char **argv) {
    if (argc != 2 && argc != 3) { fprintf(stderr, "usage: lister SOCKET [REPEAT]\n"); return 2; }
    long repeat = argc == 3 ? atol(argv[2]) : 1, done = 0;
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    strncpy(a.sun_path, argv[1], sizeof a.sun_path - 1);
    if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0) { perror("connect"); return 2; }
    double started = now();
    if (write(fd, "LIST\n", 5) != 5) { perror("write"); return 2; }
    long lines = 0, last_lines = 0;
    int greeted = 0, line_start = 1;
    for (;;) {
        ssize_t n = read(fd, buffer, sizeof buffer);
        if (n <= 0) { fprintf(stderr, "lister: connection closed after %ld lines (%ld before)\n", lines, last_lines); return 2; }
        for (ssize_t i = 0; i < n; i++) {
            if (line_start) {
                // The greeting comes first; then COUNTDOWN lines until OK or ERR.
                if (!greeted) {
                    greeted = 1;
                } else if (buffer[i] == 'O' || buffer[i] == 'E') {
                    if (++done == repeat) {
                        printf("%ld %.6f\n", lines, (now() - started) / (double)repeat);
                        return 0;
                    }
                    last_lines = lines;
                    lines = 0;
                    if (write(fd, "LIST\n", 5) != 5) { perror("write"); return 2; }
                } else {
                    lines++;
                }
            }
            line_start = buffer[i] == '\n';
        }
    }
}
