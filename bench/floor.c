// floor: the best a single thread can do. Sleeps with clock_nanosleep(CLOCK_MONOTONIC,
// TIMER_ABSTIME) to each of N sorted deadlines spread uniformly over 1-5 s, and records how late
// it woke for each.
//
//   floor N SEED OUT     (writes one lateness in nanoseconds per line to OUT)
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static int compare(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

static int64_t now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000000000LL + t.tv_nsec;
}

int main(int argc, char **argv) {
    if (argc != 4) { fprintf(stderr, "usage: floor N SEED OUT\n"); return 2; }
    long n = atol(argv[1]);
    srand48(atol(argv[2]));
    int64_t *deadlines = malloc(sizeof(int64_t) * (size_t)n), *late = malloc(sizeof(int64_t) * (size_t)n);
    int64_t start = now_ns();
    for (long i = 0; i < n; i++) deadlines[i] = start + 1000000000LL + (int64_t)(drand48() * 4e9);
    qsort(deadlines, (size_t)n, sizeof(int64_t), compare);
    for (long i = 0; i < n; i++) {
        struct timespec t = {.tv_sec = deadlines[i] / 1000000000LL, .tv_nsec = deadlines[i] % 1000000000LL};
        while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &t, NULL) != 0) {}
        late[i] = now_ns() - deadlines[i];
    }
    FILE *out = fopen(argv[3], "w");
    for (long i = 0; i < n; i++) fprintf(out, "%lld\n", (long long)late[i]);
    fclose(out);
    return 0;
}
