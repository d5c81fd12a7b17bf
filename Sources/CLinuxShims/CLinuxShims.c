#define _GNU_SOURCE
#include "CLinuxShims.h"
#include <malloc.h>
#include <spawn.h>
#include <errno.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/syscall.h>
#include <time.h>
#include <sys/signalfd.h>
#include <unistd.h>
#include <sys/prctl.h>
#include <sys/ioctl.h>
#include <sys/socket.h>

int countdownd_peer_uid(int fd, uint32_t *uid) {
    struct ucred credentials;
    socklen_t length = sizeof credentials;
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &credentials, &length) != 0) {
        return -1;
    }
    *uid = (uint32_t)credentials.uid;
    return 0;
}

void countdownd_close(int fd) {
    int saved = errno;
    (void)close(fd);
    errno = saved;
}

int countdownd_spawn_close_from(posix_spawn_file_actions_t *actions, int from) {
    return posix_spawn_file_actions_addclosefrom_np(actions, from);
}

int countdownd_set_timer_slack(unsigned long nanoseconds) {
    return prctl(PR_SET_TIMERSLACK, nanoseconds, 0, 0, 0);
}

int countdownd_set_thread_name(const char *name) {
    return prctl(PR_SET_NAME, (unsigned long)name, 0, 0, 0);
}

int countdownd_unix_stream_socket(int nonblocking) {
    return socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | (nonblocking ? SOCK_NONBLOCK : 0), 0);
}

int countdownd_accept(int fd) {
    return accept4(fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
}

int countdownd_terminal_columns(int fd) {
    struct winsize size;
    if (ioctl(fd, TIOCGWINSZ, &size) != 0) {
        return 0;
    }
    return size.ws_col;
}

int countdownd_terminal_rows(int fd) {
    struct winsize size;
    if (ioctl(fd, TIOCGWINSZ, &size) != 0) {
        return 0;
    }
    return size.ws_row;
}

int countdownd_epoll_create(void) {
    return epoll_create1(EPOLL_CLOEXEC);
}

int countdownd_epoll_control(int epoll_fd, int operation, int fd, uint32_t events, uint64_t token) {
    struct epoll_event event = {.events = events, .data.u64 = token};
    return epoll_ctl(epoll_fd, operation, fd, &event);
}

int countdownd_epoll_wait(int epoll_fd, uint64_t *tokens, uint32_t *events, int capacity, int timeout_ms) {
    struct epoll_event ready[COUNTDOWND_POLL_BATCH_MAX];
    if (capacity > COUNTDOWND_POLL_BATCH_MAX) capacity = COUNTDOWND_POLL_BATCH_MAX;
    int count = epoll_wait(epoll_fd, ready, capacity, timeout_ms);
    for (int i = 0; i < count; i++) {
        tokens[i] = ready[i].data.u64;
        events[i] = ready[i].events;
    }
    return count;
}

int countdownd_epoll_wait_nanoseconds(int epoll_fd, uint64_t *tokens, uint32_t *events, int capacity, int64_t timeout_ns) {
#ifdef SYS_epoll_pwait2
    struct epoll_event ready[COUNTDOWND_POLL_BATCH_MAX];
    if (capacity > COUNTDOWND_POLL_BATCH_MAX) capacity = COUNTDOWND_POLL_BATCH_MAX;
    struct timespec timeout = {.tv_sec = timeout_ns / 1000000000, .tv_nsec = timeout_ns % 1000000000};
    int count = (int)syscall(SYS_epoll_pwait2, epoll_fd, ready, capacity, timeout_ns < 0 ? NULL : &timeout, NULL, (size_t)0);
    // A seccomp filter may answer EPERM for a system call it does not know: the same as absent.
    if (count < 0 && errno == EPERM) errno = ENOSYS;
    for (int i = 0; i < count; i++) {
        tokens[i] = ready[i].data.u64;
        events[i] = ready[i].events;
    }
    return count;
#else
    (void)epoll_fd; (void)tokens; (void)events; (void)capacity; (void)timeout_ns;
    errno = ENOSYS;
    return -1;
#endif
}

int countdownd_set_mmap_threshold(int bytes) {
    return mallopt(M_MMAP_THRESHOLD, bytes);
}

int countdownd_release_free_memory(void) {
    return malloc_trim(0);
}

static void termination_set(sigset_t *set) {
    sigemptyset(set);
    sigaddset(set, SIGTERM);
    sigaddset(set, SIGINT);
}

int countdownd_block_termination_signals(void) {
    sigset_t set;
    termination_set(&set);
    int result = pthread_sigmask(SIG_BLOCK, &set, NULL);
    if (result != 0) {
        errno = result;
        return -1;
    }
    return 0;
}

int countdownd_termination_signalfd(void) {
    sigset_t set;
    termination_set(&set);
    return signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC);
}

int countdownd_read_signal(int fd) {
    struct signalfd_siginfo info;
    ssize_t count = read(fd, &info, sizeof info);
    if (count == (ssize_t)sizeof info) {
        return (int)info.ssi_signo;
    }
    if (count < 0 && errno == EAGAIN) {
        return 0;
    }
    if (count >= 0) {
        errno = EIO;  /* A short read from a signalfd does not happen; say so if it does. */
    }
    return -1;
}

// CRC-32C with the processor's own instruction (SSE 4.2's crc32 on x86-64), checked once at
// run time: Debian's amd64 baseline does not promise it. Other architectures use the tables
// (ARMv8's CRC extension would serve too; not built, as it could not be tested here).
#include <stddef.h>
#include <string.h>
#if defined(__x86_64__)
__attribute__((target("sse4.2")))
static uint32_t crc32c_instruction(uint32_t crc, const uint8_t *bytes, size_t count) {
    while (count >= 8) {
        uint64_t word;
        memcpy(&word, bytes, 8);
        crc = (uint32_t)__builtin_ia32_crc32di(crc, word);
        bytes += 8;
        count -= 8;
    }
    while (count > 0) {
        crc = __builtin_ia32_crc32qi(crc, *bytes);
        bytes += 1;
        count -= 1;
    }
    return crc;
}

static int crc32c_instruction_available(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("sse4.2");
}
#endif

int countdownd_crc32c_has_instruction(void) {
#if defined(__x86_64__)
    return crc32c_instruction_available();
#else
    return 0;
#endif
}

uint32_t countdownd_crc32c_update(uint32_t crc, const void *bytes, size_t count) {
#if defined(__x86_64__)
    return crc32c_instruction(crc, (const uint8_t *)bytes, count);
#else
    (void)bytes;
    (void)count;
    return crc;  // Never called: countdownd_crc32c_has_instruction() says 0 here.
#endif
}
