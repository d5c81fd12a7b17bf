// floorserver: the bare C server countdownd is measured against (issue 40). It speaks just enough
// of countdownd's protocol for the lateness runs (the greeting, `START name <n>ms`, `SUBSCRIBE`)
// and follows countdownd's rules for the event path, with nothing else:
//
//   - one `timerfd` on CLOCK_BOOTTIME, armed with an absolute instant for the earliest due event,
//     and never sooner than 400 µs after it last fired (countdownd's `minimumWakeInterval`);
//   - on each wake-up, every due event: a `tick` at each whole second remaining (aligned to the
//     deadline) and a `done` at it, formatted as countdownd's lines (`EVENT <seq> tick <name>
//     <remaining_ms> <total_ms>`), all of them in one write to the subscriber;
//   - one journal write per wake-up that finished something: a frame (countdownd's 20-byte header,
//     CRC-32C over it) holding a 110-byte record per `done`, about the size of countdownd's; and
//     one per batch of STARTs read, a record per `started`.
//
// So a wake-up costs `epoll_wait`, the timer's `read`, the subscriber's `write`, the journal's
// `pwrite` and the re-arm (`timerfd_settime`): five system calls. No durability beyond the OS's
// page cache (countdownd's default `--durability process`), no limits, no replay, no statistics.
//
//   floorserver SOCKET JOURNAL DEADLINES
//
// On SIGTERM it writes "<name> <deadline_boot_ns>" per countdown to DEADLINES and exits.
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#define MIN_WAKE_INTERVAL_NS 400000LL
#define RECORD_SIZE 110
#define NAME_MAX_LEN 63

static void die(const char *what) { perror(what); exit(2); }

static int64_t now_ns(clockid_t clock) {
    struct timespec t;
    clock_gettime(clock, &t);
    return (int64_t)t.tv_sec * 1000000000LL + t.tv_nsec;
}

// CRC-32C with SSE 4.2's instruction, as countdownd's journal where the processor has it.
__attribute__((target("sse4.2")))
static uint32_t crc32c(uint32_t crc, const uint8_t *bytes, size_t count) {
    crc = ~crc;
    while (count >= 8) {
        uint64_t word;
        memcpy(&word, bytes, 8);
        crc = (uint32_t)__builtin_ia32_crc32di(crc, word);
        bytes += 8;
        count -= 8;
    }
    while (count--) crc = __builtin_ia32_crc32qi(crc, *bytes++);
    return ~crc;
}

// Countdowns, and a binary min-heap of their next events.
typedef struct {
    char name[NAME_MAX_LEN + 1];
    uint8_t name_len;
    int64_t total_ms, deadline_ns, next_remaining_ms;
} countdown;

typedef struct { int64_t at; uint32_t index; } due;

static countdown *countdowns;
static size_t countdown_count, countdown_capacity;
static due *heap;
static size_t heap_count, heap_capacity;

static void heap_push(int64_t at, uint32_t index) {
    if (heap_count == heap_capacity) {
        heap_capacity = heap_capacity ? heap_capacity * 2 : 1024;
        heap = realloc(heap, heap_capacity * sizeof *heap);
        if (!heap) die("realloc");
    }
    size_t i = heap_count++;
    while (i > 0 && heap[(i - 1) / 2].at > at) { heap[i] = heap[(i - 1) / 2]; i = (i - 1) / 2; }
    heap[i] = (due){at, index};
}

static due heap_pop(void) {
    due top = heap[0], last = heap[--heap_count];
    size_t i = 0;
    for (;;) {
        size_t child = 2 * i + 1;
        if (child >= heap_count) break;
        if (child + 1 < heap_count && heap[child + 1].at < heap[child].at) child++;
        if (heap[child].at >= last.at) break;
        heap[i] = heap[child];
        i = child;
    }
    if (heap_count) heap[i] = last;
    return top;
}

// The next event of a countdown with `remaining_ms` left now: the whole second below it, or 0.
static int64_t next_remaining(int64_t remaining_ms) { return remaining_ms <= 0 ? -1 : ((remaining_ms - 1) / 1000) * 1000; }

// Growable byte buffers: a connection's input and output, and the journal's frame.
typedef struct { char *bytes; size_t count, capacity; } buffer;

static void reserve(buffer *b, size_t more) {
    if (b->count + more <= b->capacity) return;
    while (b->count + more > b->capacity) b->capacity = b->capacity ? b->capacity * 2 : 65536;
    b->bytes = realloc(b->bytes, b->capacity);
    if (!b->bytes) die("realloc");
}

static void append(buffer *b, const char *bytes, size_t count) {
    reserve(b, count);
    memcpy(b->bytes + b->count, bytes, count);
    b->count += count;
}

typedef struct { int fd; int subscribed; int want_out; buffer in, out; } connection;

static int epoll_fd, journal_fd;
static connection *subscriber;
static uint64_t seq, frame_index;
static int64_t journal_offset;
static buffer frame;

// A record the size of countdownd's event record for `c`, appended to the pending frame.
static void journal_record(const countdown *c, uint8_t kind) {
    uint8_t record[RECORD_SIZE] = {4};
    memcpy(record + 1, &seq, 8);
    record[9] = kind;
    memcpy(record + 12, &c->total_ms, 8);
    memcpy(record + 20, &c->deadline_ns, 8);
    record[60] = c->name_len;
    memcpy(record + 61, c->name, c->name_len < 40 ? c->name_len : 40);
    if (frame.count == 0) reserve(&frame, 20), frame.count = 20;
    append(&frame, (const char *)record, sizeof record);
}

// One write of the pending frame: header (magic, length, CRC-32C over index and payload, index).
static void journal_flush(void) {
    if (frame.count <= 20) return;
    uint32_t length = (uint32_t)(frame.count - 20);
    memcpy(frame.bytes, "CDJ\2", 4);
    memcpy(frame.bytes + 4, &length, 4);
    memcpy(frame.bytes + 12, &frame_index, 8);
    uint32_t crc = crc32c(0, (const uint8_t *)frame.bytes + 12, frame.count - 12);
    memcpy(frame.bytes + 8, &crc, 4);
    ssize_t written = pwrite(journal_fd, frame.bytes, frame.count, journal_offset);
    if (written != (ssize_t)frame.count) die("pwrite journal");
    journal_offset += written;
    frame_index++;
    frame.count = 0;
}

static void watch(connection *c) {
    struct epoll_event e = {.events = EPOLLIN | (c->want_out ? EPOLLOUT : 0), .data.ptr = c};
    if (epoll_ctl(epoll_fd, EPOLL_CTL_MOD, c->fd, &e) != 0) die("epoll_ctl");
}

// Writes what it can of a connection's output; the rest waits for EPOLLOUT.
static void flush(connection *c) {
    size_t sent = 0;
    while (sent < c->out.count) {
        ssize_t n = write(c->fd, c->out.bytes + sent, c->out.count - sent);
        if (n > 0) { sent += (size_t)n; continue; }
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && errno == EAGAIN) break;
        die("write");
    }
    memmove(c->out.bytes, c->out.bytes + sent, c->out.count - sent);
    c->out.count -= sent;
    int want = c->out.count > 0;
    if (want != c->want_out) { c->want_out = want; watch(c); }
}

static void event_line(const char *kind, const countdown *c, int64_t remaining_ms) {
    if (!subscriber) return;
    reserve(&subscriber->out, 160);
    subscriber->out.count += (size_t)sprintf(subscriber->out.bytes + subscriber->out.count, "EVENT %llu %s %s %lld %lld\n",
                                             (unsigned long long)seq, kind, c->name, (long long)remaining_ms, (long long)c->total_ms);
}

static void start(connection *client, const char *name, size_t name_len, int64_t total_ms) {
    if (countdown_count == countdown_capacity) {
        countdown_capacity = countdown_capacity ? countdown_capacity * 2 : 1024;
        countdowns = realloc(countdowns, countdown_capacity * sizeof *countdowns);
        if (!countdowns) die("realloc");
    }
    uint32_t index = (uint32_t)countdown_count++;
    countdown *c = &countdowns[index];
    memcpy(c->name, name, name_len);
    c->name[name_len] = 0;
    c->name_len = (uint8_t)name_len;
    c->total_ms = total_ms;
    c->deadline_ns = now_ns(CLOCK_BOOTTIME) + total_ms * 1000000LL;
    c->next_remaining_ms = next_remaining(total_ms);
    heap_push(c->deadline_ns - c->next_remaining_ms * 1000000LL, index);
    seq++;
    journal_record(c, 1);
    char reply[160];
    int64_t deadline_unix_ms = now_ns(CLOCK_REALTIME) / 1000000 + total_ms;
    int n = snprintf(reply, sizeof reply, "OK %s running %lld %lld %lld 0\n", c->name, (long long)total_ms, (long long)total_ms, (long long)deadline_unix_ms);
    append(&client->out, reply, (size_t)n);
    event_line("started", c, total_ms);
}

// Serves the complete lines in a connection's input.
static void serve(connection *c) {
    char *line = c->in.bytes, *end = c->in.bytes + c->in.count, *nl;
    while ((nl = memchr(line, '\n', (size_t)(end - line))) != NULL) {
        *nl = 0;
        char name[NAME_MAX_LEN + 1];
        long long ms;
        if (strcmp(line, "SUBSCRIBE") == 0) {
            subscriber = c;
            c->subscribed = 1;
            char reply[64];
            int n = snprintf(reply, sizeof reply, "OK subscribed all seq %llu\n", (unsigned long long)seq);
            append(&c->out, reply, (size_t)n);
        } else if (sscanf(line, "START %63s %lldms", name, &ms) == 2 && ms > 0) {
            start(c, name, strlen(name), ms);
        } else {
            append(&c->out, "ERR bad-request floorserver knows only START and SUBSCRIBE\n", 59);
        }
        line = nl + 1;
    }
    c->in.count = (size_t)(end - line);
    memmove(c->in.bytes, line, c->in.count);
}

static int timer_fd;
static int64_t last_fired = INT64_MIN / 2, armed_for = -1;

static void arm(void) {
    int64_t at = heap_count ? heap[0].at : -1;
    if (at >= 0 && at < last_fired + MIN_WAKE_INTERVAL_NS) at = last_fired + MIN_WAKE_INTERVAL_NS;
    if (at == armed_for) return;
    struct itimerspec spec = {0};
    if (at >= 0) { spec.it_value.tv_sec = at / 1000000000LL; spec.it_value.tv_nsec = at % 1000000000LL; }
    if (timerfd_settime(timer_fd, TFD_TIMER_ABSTIME, &spec, NULL) != 0) die("timerfd_settime");
    armed_for = at;
}

static void wake(void) {
    uint64_t expirations;
    // EAGAIN: re-armed since the poll saw it; nothing to clear.
    if (read(timer_fd, &expirations, sizeof expirations) < 0 && errno != EAGAIN) die("read timerfd");
    armed_for = -1;
    int64_t now = now_ns(CLOCK_BOOTTIME);
    last_fired = now;
    while (heap_count && heap[0].at <= now) {
        due d = heap_pop();
        countdown *c = &countdowns[d.index];
        int64_t remaining = c->next_remaining_ms;
        if (remaining == 0) {
            seq++;
            journal_record(c, 2);
            event_line("done", c, 0);
        } else {
            event_line("tick", c, remaining);
            c->next_remaining_ms = next_remaining(remaining);
            heap_push(c->deadline_ns - c->next_remaining_ms * 1000000LL, d.index);
        }
    }
    journal_flush();
    if (subscriber && subscriber->out.count) flush(subscriber);
}

static void write_deadlines(const char *path) {
    FILE *f = fopen(path, "w");
    if (!f) die(path);
    for (size_t i = 0; i < countdown_count; i++) fprintf(f, "%s %lld\n", countdowns[i].name, (long long)countdowns[i].deadline_ns);
    if (fclose(f) != 0) die(path);
}

int main(int argc, char **argv) {
    if (argc != 4) { fprintf(stderr, "usage: floorserver SOCKET JOURNAL DEADLINES\n"); return 2; }
    int listener = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    strncpy(a.sun_path, argv[1], sizeof a.sun_path - 1);
    unlink(argv[1]);  // Ignored on purpose: a leftover socket file, if any.
    if (listener < 0 || bind(listener, (struct sockaddr *)&a, sizeof a) != 0 || listen(listener, 128) != 0) die("listen");
    journal_fd = open(argv[2], O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (journal_fd < 0) die(argv[2]);
    timer_fd = timerfd_create(CLOCK_BOOTTIME, TFD_NONBLOCK | TFD_CLOEXEC);
    sigset_t signals;
    sigemptyset(&signals);
    sigaddset(&signals, SIGTERM);
    sigaddset(&signals, SIGINT);
    if (sigprocmask(SIG_BLOCK, &signals, NULL) != 0) die("sigprocmask");
    int signal_fd = signalfd(-1, &signals, SFD_CLOEXEC);
    epoll_fd = epoll_create1(EPOLL_CLOEXEC);
    if (timer_fd < 0 || signal_fd < 0 || epoll_fd < 0) die("setup");
    static connection listener_tag, timer_tag, signal_tag;
    struct epoll_event e = {.events = EPOLLIN};
    e.data.ptr = &listener_tag;
    if (epoll_ctl(epoll_fd, EPOLL_CTL_ADD, listener, &e) != 0) die("epoll_ctl");
    e.data.ptr = &timer_tag;
    if (epoll_ctl(epoll_fd, EPOLL_CTL_ADD, timer_fd, &e) != 0) die("epoll_ctl");
    e.data.ptr = &signal_tag;
    if (epoll_ctl(epoll_fd, EPOLL_CTL_ADD, signal_fd, &e) != 0) die("epoll_ctl");
    printf("READY\n");
    fflush(stdout);

    struct epoll_event events[64];
    for (;;) {
        int count = epoll_wait(epoll_fd, events, 64, -1);
        if (count < 0) { if (errno == EINTR) continue; die("epoll_wait"); }
        // The timer first, as countdownd serves it first in its batch.
        for (int i = 0; i < count; i++)
            if (events[i].data.ptr == &timer_tag) wake();
        for (int i = 0; i < count; i++) {
            connection *c = events[i].data.ptr;
            if (c == &timer_tag) continue;
            if (c == &signal_tag) { write_deadlines(argv[3]); return 0; }
            if (c == &listener_tag) {
                int fd;
                while ((fd = accept4(listener, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC)) >= 0) {
                    connection *client = calloc(1, sizeof *client);
                    if (!client) die("calloc");
                    client->fd = fd;
                    struct epoll_event ce = {.events = EPOLLIN, .data.ptr = client};
                    if (epoll_ctl(epoll_fd, EPOLL_CTL_ADD, fd, &ce) != 0) die("epoll_ctl");
                    append(&client->out, "HELLO countdownd 1 0.1.0\n", 25);
                    flush(client);
                }
                continue;
            }
            if (events[i].events & EPOLLOUT) flush(c);
            if (!(events[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR))) continue;
            reserve(&c->in, 65536);
            ssize_t n = read(c->fd, c->in.bytes + c->in.count, c->in.capacity - c->in.count);
            if (n < 0 && (errno == EAGAIN || errno == EINTR)) continue;
            if (n <= 0) {
                if (subscriber == c) subscriber = NULL;
                if (epoll_ctl(epoll_fd, EPOLL_CTL_DEL, c->fd, NULL) != 0) die("epoll_ctl");
                close(c->fd);  // Ignored on purpose: the peer is gone either way.
                free(c->in.bytes);
                free(c->out.bytes);
                free(c);
                // A descriptor appears once in a batch, so nothing later in it names the freed one.
                continue;
            }
            c->in.count += (size_t)n;
            serve(c);
            journal_flush();
            flush(c);
            if (subscriber && subscriber != c && subscriber->out.count) flush(subscriber);
        }
        arm();
    }
}
