// lister: sends one LIST and reads the whole reply as fast as it can.
//
//   lister SOCKET
//
// Prints "<COUNTDOWN lines> <seconds>" once the final OK (or ERR) line arrived.
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
    if (argc != 2) { fprintf(stderr, "usage: lister SOCKET\n"); return 2; }
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    strncpy(a.sun_path, argv[1], sizeof a.sun_path - 1);
    if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0) { perror("connect"); return 2; }
    double started = now();
    if (write(fd, "LIST\n", 5) != 5) { perror("write"); return 2; }
    long lines = 0;
    int greeted = 0, line_start = 1;
    for (;;) {
        ssize_t n = read(fd, buffer, sizeof buffer);
        if (n <= 0) { fprintf(stderr, "lister: connection closed after %ld lines\n", lines); return 2; }
        for (ssize_t i = 0; i < n; i++) {
            if (line_start) {
                // The greeting comes first; then COUNTDOWN lines until OK or ERR.
                if (!greeted) {
                    greeted = 1;
                } else if (buffer[i] == 'O' || buffer[i] == 'E') {
                    printf("%ld %.6f\n", lines, now() - started);
                    return 0;
                } else {
                    lines++;
                }
            }
            line_start = buffer[i] == '\n';
        }
    }
}
