package countdownd

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"syscall"
	"time"
	"unicode/utf8"
)

// longAgo unblocks a read or write at once when a context ends.
var longAgo = time.Unix(1, 0)

// conn is one connection, used by one goroutine at a time. Its rule: once a request is sent,
// the connection is read up to that request's final line, or closed. A context that ends in
// between closes it, so a late answer can never be read as the next request's.
type conn struct {
	nc             *net.UnixConn
	buf            []byte // read and not yet taken, partial lines included
	daemonVersion  string
	shutdownReason string
	events         []Event // events read while a reply was awaited (a subscribed connection)
	closed         bool
}

type reply struct {
	countdowns []Countdown
	stats      map[string]string
	text       string
}

func cannotConnect(path string, why string) *Error {
	return lost(fmt.Sprintf("cannot connect to countdownd at %s (%s); start it with 'systemctl --user start countdownd.socket' "+
		"(or the system's countdownd.socket), or run 'countdownd', or pass the socket path it listens on", path, why))
}

// dial connects and reads the greeting, within ctx.
func dial(ctx context.Context, path string) (*conn, error) {
	var dialer net.Dialer
	nc, err := dialer.DialContext(ctx, "unix", path)
	if err != nil {
		if ctx.Err() != nil {
			return nil, &CallError{Op: "connect", Err: ctx.Err()}
		}
		why := err.Error()
		var syscallErr *os.SyscallError
		if errors.As(err, &syscallErr) {
			why = syscallErr.Err.Error()
		}
		return nil, cannotConnect(path, why)
	}
	c := &conn{nc: nc.(*net.UnixConn)}
	stop := c.watch(ctx)
	greeting, err := c.readLine()
	stop()
	if err != nil {
		c.close()
		if errors.Is(err, os.ErrDeadlineExceeded) {
			<-ctx.Done() // The deadline was the context's: it ends at the same instant.
		}
		if ctx.Err() != nil {
			return nil, &CallError{Op: "connect", Err: fmt.Errorf("countdownd at %s accepted the connection but sent no greeting in time: %w", path, ctx.Err())}
		}
		return nil, err
	}
	parsed := parseLine(greeting)
	switch parsed.kind {
	case lineHello:
		c.daemonVersion = parsed.text
		return c, nil
	case lineErr:
		c.close()
		return nil, parsed.err // ERR limit: too many connections; a real answer.
	default:
		c.close()
		return nil, &Error{Code: "protocol-violation", Message: fmt.Sprintf("expected countdownd's HELLO greeting; is %s countdownd's socket?", path)}
	}
}

// watch makes reads and writes end when ctx does (its deadline, or a cancellation); the
// returned function stops watching and clears the deadline.
func (c *conn) watch(ctx context.Context) (stop func()) {
	if deadline, ok := ctx.Deadline(); ok {
		_ = c.nc.SetDeadline(deadline) // Fails only on a closed connection, which reads then say.
	}
	if ctx.Done() == nil {
		return func() {}
	}
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		select {
		case <-ctx.Done():
			_ = c.nc.SetDeadline(longAgo) // As above: a closed connection needs no waking.
		case <-done:
		}
	}()
	return func() {
		close(done)
		<-finished
		_ = c.nc.SetDeadline(time.Time{}) // As above.
	}
}

func (c *conn) close() {
	if !c.closed {
		c.closed = true
		_ = c.nc.Close() // Nothing to do about a failed close of a socket we are done with.
	}
}

// readLine reads one line (without LF); on any failure the connection is closed.
func (c *conn) readLine() (string, error) {
	for {
		if i := bytes.IndexByte(c.buf, '\n'); i >= 0 {
			text := string(c.buf[:i])
			c.buf = c.buf[i+1:]
			return text, nil
		}
		if c.closed {
			return "", lost("the connection is closed")
		}
		chunk := make([]byte, 65536)
		n, err := c.nc.Read(chunk)
		c.buf = append(c.buf, chunk[:n]...)
		if err != nil {
			if n > 0 {
				continue
			}
			if errors.Is(err, os.ErrDeadlineExceeded) {
				return "", err // The caller knows which context ended; the line so far is kept.
			}
			c.close()
			if c.shutdownReason != "" {
				return "", lost("countdownd is stopping (" + c.shutdownReason + ")")
			}
			return "", lost("countdownd closed the connection")
		}
	}
}

// idleAndOpen says whether a pooled connection may be used: nothing arrives unasked on an
// idle request connection but the daemon's goodbye (SHUTDOWN, then the end).
func (c *conn) idleAndOpen() bool {
	if c.closed || len(c.buf) > 0 {
		return false
	}
	raw, err := c.nc.SyscallConn()
	if err != nil {
		return false
	}
	alive := false
	probe := make([]byte, 1)
	err = raw.Read(func(fd uintptr) bool {
		n, _, recvErr := syscall.Recvfrom(int(fd), probe, syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		alive = n < 0 && (recvErr == syscall.EAGAIN || recvErr == syscall.EWOULDBLOCK)
		return true // Never wait: this is a look, not a read.
	})
	return err == nil && alive
}

// errNotSent: the daemon had closed this connection before the request; nothing ran.
type errNotSent struct{ cause error }

func (e errNotSent) Error() string { return e.cause.Error() }
func (e errNotSent) Unwrap() error { return e.cause }

// checkLine refuses a line that would be read as more than one request: a newline in any
// argument would be read as a second request, whose answer the next call would take.
func checkLine(line string) error {
	if strings.ContainsAny(line, "\r\n\x00") || !utf8.ValidString(line) {
		return &Error{Code: "bad-request", Message: fmt.Sprintf("a request's words cannot hold a newline or NUL and must be UTF-8: %q", line)}
	}
	return nil
}

// request sends line and reads its whole reply, within ctx.
func (c *conn) request(ctx context.Context, op string, line string, change bool) (reply, error) {
	if err := checkLine(line); err != nil {
		return reply{}, err
	}
	if c.closed {
		return reply{}, errNotSent{lost("the connection is closed")}
	}
	stop := c.watch(ctx)
	defer stop()
	if _, err := c.nc.Write([]byte(line + "\n")); err != nil {
		c.close()
		if ctx.Err() != nil {
			// A full socket that the context cut short: part of the line may be in; a line
			// without its end is never run, and nothing after it was sent.
			return reply{}, &CallError{Op: op, Err: ctx.Err()}
		}
		return reply{}, errNotSent{lost("lost the connection to countdownd (" + err.Error() + ")")}
	}
	result := reply{stats: map[string]string{}}
	for {
		text, err := c.readLine()
		if err != nil {
			c.close()
			if errors.Is(err, os.ErrDeadlineExceeded) {
				<-ctx.Done() // The deadline was the context's: it ends at the same instant.
			}
			if ctx.Err() != nil {
				return reply{}, &CallError{Op: op, MaybeApplied: change, Err: ctx.Err()}
			}
			if change {
				// Not the connection-lost error itself: errors.Is(err, ErrConnectionLost) means
				// nothing was carried out, and this change may have been.
				return reply{}, &CallError{Op: op, MaybeApplied: true, Err: &Error{Code: "outcome-unknown",
					Message: strings.TrimPrefix(err.Error(), "countdownd: ") + " after the request was sent"}}
			}
			return reply{}, err
		}
		parsed := parseLine(text)
		switch parsed.kind {
		case lineEvent:
			c.events = append(c.events, parsed.event)
		case lineCountdown:
			result.countdowns = append(result.countdowns, parsed.countdown)
		case lineStat:
			result.stats[parsed.statKey] = parsed.statValue
		case lineOK:
			result.text = parsed.text
			return result, nil
		case lineErr:
			return reply{}, parsed.err
		case lineShutdown:
			c.shutdownReason = parsed.text
		}
	}
}

// nextEvent reads the next event of a subscribed connection, within ctx. A context that ends
// leaves the connection usable: nothing is owed on it.
func (c *conn) nextEvent(ctx context.Context) (Event, error) {
	if len(c.events) > 0 {
		event := c.events[0]
		c.events = c.events[1:]
		return event, nil
	}
	stop := c.watch(ctx)
	defer stop()
	for {
		text, err := c.readLine()
		if err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) {
				<-ctx.Done() // The deadline was the context's: it ends at the same instant.
			}
			if ctx.Err() != nil {
				return Event{}, &CallError{Op: "next event", Err: ctx.Err()}
			}
			return Event{}, err
		}
		parsed := parseLine(text)
		switch parsed.kind {
		case lineEvent:
			return parsed.event, nil
		case lineErr:
			c.close()
			return Event{}, parsed.err // overflow: the daemon closes it.
		case lineShutdown:
			c.shutdownReason = parsed.text
		}
	}
}
