#define _GNU_SOURCE
#include "CLinuxShims.h"
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

int countdownd_set_timer_slack(unsigned long nanoseconds) {
    return prctl(PR_SET_TIMERSLACK, nanoseconds, 0, 0, 0);
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
