#ifndef COUNTDOWND_CLINUXSHIMS_H
#define COUNTDOWND_CLINUXSHIMS_H
#include <stddef.h>
#include <stdint.h>
#include <spawn.h>
#include <sys/timerfd.h>

/// The uid of the peer of a connected Unix socket (SO_PEERCRED). Returns 0 on success, -1 with errno.
int countdownd_peer_uid(int fd, uint32_t *uid);

/// close(2) for a descriptor the caller owns and never uses again; errno is kept. Its result is
/// ignored on purpose, here once for every caller (as sd-event's safe_close): Linux releases the
/// descriptor whatever close returns, EINTR included, so a retry could close a descriptor another
/// thread has just been given; and what it can report (a delayed write error on a network file
/// system) concerns only files whose writes the caller has checked already (the journal's
/// fdatasync, the snapshot's fsync) or whose loss costs nothing (a lock file's pid note).
void countdownd_close(int fd);

/// posix_spawn_file_actions_addclosefrom_np (glibc 2.34; GNU, so not in Swift's Glibc module):
/// the spawned process gets no descriptor from `from` up, whatever its caller had open.
int countdownd_spawn_close_from(posix_spawn_file_actions_t *actions, int from);

/// Sets this thread's timer slack in nanoseconds (PR_SET_TIMERSLACK). Returns 0 on success.
int countdownd_set_timer_slack(unsigned long nanoseconds);

/// Names the calling thread (PR_SET_NAME; the kernel keeps 15 bytes), as ps, top and systemd's
/// messages show it. Returns 0 on success, -1 with errno.
int countdownd_set_thread_name(const char *name);

/// mallopt(M_MMAP_THRESHOLD, bytes): allocations of at least `bytes` are mappings of their own,
/// returned to the system when freed. Returns 1 on success (mallopt's convention).
int countdownd_set_mmap_threshold(int bytes);

/// malloc_trim(0): gives free memory at the top and in the middle of the heap back to the
/// system. Returns 1 when some was released.
int countdownd_release_free_memory(void);



/// A new AF_UNIX stream socket with SOCK_CLOEXEC, and SOCK_NONBLOCK when `nonblocking` is set.
int countdownd_unix_stream_socket(int nonblocking);

/// accept4 with SOCK_NONBLOCK | SOCK_CLOEXEC.
int countdownd_accept(int fd);
/// Readiness bits of `countdownd_epoll_wait`, the same values as epoll's.
enum {
    COUNTDOWND_POLL_IN = 0x001,
    COUNTDOWND_POLL_OUT = 0x004,
    COUNTDOWND_POLL_ERR = 0x008,
    COUNTDOWND_POLL_HUP = 0x010,
};

/// Operations of `countdownd_epoll_control`, the same values as EPOLL_CTL_*.
enum {
    COUNTDOWND_POLL_ADD = 1,
    COUNTDOWND_POLL_DELETE = 2,
    COUNTDOWND_POLL_MODIFY = 3,
};

/// epoll_create1(EPOLL_CLOEXEC). (Swift's Glibc module does not include <sys/epoll.h>, and
/// struct epoll_event is packed on x86-64; these shims keep epoll out of Swift.)
int countdownd_epoll_create(void);

/// epoll_ctl with `token` as the event's data. Returns 0 or -1 with errno.
int countdownd_epoll_control(int epoll_fd, int operation, int fd, uint32_t events, uint64_t token);

/// The most descriptors one wait reports (`EventPoller.batchCapacity`); its events are read onto
/// the stack (3 KiB) before being split into the two arrays.
enum { COUNTDOWND_POLL_BATCH_MAX = 256 };

/// epoll_wait into two plain arrays: the token and the readiness bits of each ready descriptor
/// (at most `COUNTDOWND_POLL_BATCH_MAX` of them). Returns how many are ready, or -1 with errno.
int countdownd_epoll_wait(int epoll_fd, uint64_t *tokens, uint32_t *events, int capacity, int timeout_ms);

/// The same with a timeout in nanoseconds (negative: none), through `epoll_pwait2`, whose timeout
/// is a `timespec` rather than whole milliseconds (Linux 5.11). Returns -1 with errno ENOSYS where
/// the kernel (or a seccomp filter) refuses it.
int countdownd_epoll_wait_nanoseconds(int epoll_fd, uint64_t *tokens, uint32_t *events, int capacity, int64_t timeout_ns);

/// Blocks SIGTERM and SIGINT in the calling thread (and so in every thread it creates later),
/// so that they stay pending until read from a signalfd. Returns 0, or -1 with errno.
int countdownd_block_termination_signals(void);

/// A non-blocking, close-on-exec signalfd for SIGTERM and SIGINT (block them first). Returns the
/// descriptor, or -1 with errno.
int countdownd_termination_signalfd(void);

/// Reads one signal from a signalfd: its number, 0 when none is pending (EAGAIN), or -1 with errno.
int countdownd_read_signal(int fd);

/// Whether this processor has a CRC-32C instruction that `countdownd_crc32c_update` uses
/// (SSE 4.2 on x86-64; 0 on other architectures): 1 or 0. Ask once; it does not change.
int countdownd_crc32c_has_instruction(void);

/// Continues a CRC-32C (Castagnoli) over `count` bytes with the processor's instruction: `crc`
/// is the running value, before the final inversion (start with 0xFFFFFFFF). Only where
/// `countdownd_crc32c_has_instruction()` says 1.
uint32_t countdownd_crc32c_update(uint32_t crc, const void *bytes, size_t count);

/// The width of the terminal on `fd` in columns, or 0 when it is not a terminal.
int countdownd_terminal_columns(int fd);

/// The height of the terminal on `fd` in rows, or 0 when it is not a terminal.
int countdownd_terminal_rows(int fd);
#endif
