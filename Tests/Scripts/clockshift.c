// clockshift: an LD_PRELOAD library that moves one process's wall clock (CLOCK_REALTIME, as
// clock_gettime, gettimeofday and time read it) by COUNTDOWND_TEST_CLOCK_SHIFT_MS milliseconds,
// and leaves every other clock alone: a host whose clock is off, for the cluster tests, with
// nobody's real clock touched. (libfaketime, the usual tool, loses a Swift program's
// arguments.) Built by the test that uses it: cc -shared -fPIC -o clockshift.so clockshift.c -ldl
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdlib.h>
#include <sys/time.h>
#include <time.h>

// Read once as the library loads, before any thread of the process starts.
static long long shift;

__attribute__((constructor)) static void read_shift(void) {
    const char *text = getenv("COUNTDOWND_TEST_CLOCK_SHIFT_MS");
    shift = text ? atoll(text) * 1000000LL : 0;
}

static long long shift_ns(void) { return shift; }

int clock_gettime(clockid_t clock, struct timespec *out) {
    static int (*real)(clockid_t, struct timespec *);
    if (!real) real = (int (*)(clockid_t, struct timespec *))dlsym(RTLD_NEXT, "clock_gettime");
    int result = real(clock, out);
    if (result == 0 && out && (clock == CLOCK_REALTIME || clock == CLOCK_REALTIME_COARSE)) {
        long long ns = (long long)out->tv_sec * 1000000000LL + out->tv_nsec + shift_ns();
        out->tv_sec = (time_t)(ns / 1000000000LL);
        out->tv_nsec = (long)(ns % 1000000000LL);
        if (out->tv_nsec < 0) {  // Before 1970 only: C division truncates toward zero.
            out->tv_nsec += 1000000000L;
            out->tv_sec -= 1;
        }
    }
    return result;
}

int gettimeofday(struct timeval *out, void *zone) {
    (void)zone;
    struct timespec now;
    int result = clock_gettime(CLOCK_REALTIME, &now);
    if (result == 0 && out) {
        out->tv_sec = now.tv_sec;
        out->tv_usec = now.tv_nsec / 1000;
    }
    return result;
}

time_t time(time_t *out) {
    struct timespec now;
    if (clock_gettime(CLOCK_REALTIME, &now) != 0) return (time_t)-1;
    if (out) *out = now.tv_sec;
    return now.tv_sec;
}
