#ifndef COUNTDOWND_CLINUXSHIMS_H
#define COUNTDOWND_CLINUXSHIMS_H
#include <stdint.h>
#include <sys/timerfd.h>

/// The uid of the peer of a connected Unix socket (SO_PEERCRED). Returns 0 on success, -1 with errno.
int countdownd_peer_uid(int fd, uint32_t *uid);

/// Sets this thread's timer slack in nanoseconds (PR_SET_TIMERSLACK). Returns 0 on success.
int countdownd_set_timer_slack(unsigned long nanoseconds);



/// A new AF_UNIX stream socket with SOCK_CLOEXEC, and SOCK_NONBLOCK when `nonblocking` is set.
int countdownd_unix_stream_socket(int nonblocking);

/// accept4 with SOCK_NONBLOCK | SOCK_CLOEXEC.
int countdownd_accept(int fd);
/// The width of the terminal on `fd` in columns, or 0 when it is not a terminal.
int countdownd_terminal_columns(int fd);
#endif
