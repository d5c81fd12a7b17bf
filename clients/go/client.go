// Package countdownd is a client of countdownd, the daemon of named countdowns
// (docs/PROTOCOL.md in countdownd's sources), written with Go's standard library only.
//
//	client, err := countdownd.New(ctx, countdownd.Options{})
//	…
//	_, err = client.Start(ctx, "otp:+4915112345678", time.Minute)
//	var busy *countdownd.Error
//	if errors.As(err, &busy) && errors.Is(err, countdownd.ErrBusy) {
//		w.Header().Set("Retry-After", strconv.Itoa(int(busy.RetryAfter().Seconds())))
//	}
//
// A Client is safe for concurrent use: requests go over a small pool of connections, each used
// by one goroutine at a time. Every call takes a context; a call whose context ends before its
// answer closes its connection, so a late answer is never read as another call's.
package countdownd

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode"
)

// Options configure a Client; the zero value is the default.
type Options struct {
	// SocketPath is the daemon's socket; by default $COUNTDOWND_SOCKET, else the daemon's own default.
	SocketPath string
	// MaxConns bounds the pool (default 8); a call waits for a free connection within its context.
	MaxConns int
}

// Client is a client of countdownd, safe for concurrent use.
type Client struct {
	path  string
	slots chan struct{} // one token per connection that may exist
	mu    sync.Mutex
	idle  []*conn
	shut  bool
}

// The back-off between attempts to reach a daemon that is away: doubled each time up to the
// last, so a restarted daemon is found within half a second.
const (
	firstRetry = 10 * time.Millisecond
	lastRetry  = 500 * time.Millisecond
)

// New makes a client and connects once within ctx, so a wrong path or a stopped daemon is said
// at once (ErrConnectionLost).
func New(ctx context.Context, options Options) (*Client, error) {
	client := NewLazy(options)
	first, err := dial(ctx, client.path)
	if err != nil {
		return nil, err
	}
	client.idle = append(client.idle, first)
	return client, nil
}

// NewLazy makes a client that connects on its first call (a server that starts before the daemon).
func NewLazy(options Options) *Client {
	path := options.SocketPath
	if path == "" {
		path = DefaultSocketPath()
	}
	size := options.MaxConns
	if size <= 0 {
		size = 8
	}
	return &Client{path: path, slots: make(chan struct{}, size)}
}

// Close closes the pool's connections; requests after it fail with ErrConnectionLost. Wait and
// Subscribe use connections of their own, which their contexts and Subscription.Close end.
func (c *Client) Close() error {
	c.mu.Lock()
	idle := c.idle
	c.idle, c.shut = nil, true
	c.mu.Unlock()
	for _, connection := range idle {
		connection.close()
	}
	return nil
}

// connect dials, trying again with a growing pause while the daemon is away, until ctx ends.
func (c *Client) connect(ctx context.Context, op string) (*conn, error) {
	delay := firstRetry
	for {
		connection, err := dial(ctx, c.path)
		if err == nil || !isConnectionLost(err) {
			return connection, err
		}
		timer := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			timer.Stop()
			return nil, &CallError{Op: op, Unreached: true, Err: fmt.Errorf("%s; gave up when the context ended: %w",
				strings.TrimPrefix(err.Error(), "countdownd: "), ctx.Err())}
		case <-timer.C:
		}
		if delay *= 2; delay > lastRetry {
			delay = lastRetry
		}
	}
}

func (c *Client) checkout(ctx context.Context, op string) (*conn, error) {
	select {
	case c.slots <- struct{}{}:
	case <-ctx.Done():
		return nil, &CallError{Op: op, Err: fmt.Errorf("every connection stayed busy: %w", ctx.Err())}
	}
	c.mu.Lock()
	if c.shut {
		c.mu.Unlock()
		<-c.slots
		return nil, lost("the client is closed")
	}
	for len(c.idle) > 0 {
		connection := c.idle[len(c.idle)-1]
		c.idle = c.idle[:len(c.idle)-1]
		if connection.idleAndOpen() {
			c.mu.Unlock()
			return connection, nil
		}
		connection.close() // The daemon said goodbye while it sat in the pool.
	}
	c.mu.Unlock()
	connection, err := c.connect(ctx, op)
	if err != nil {
		<-c.slots
		return nil, err
	}
	return connection, nil
}

func (c *Client) checkin(connection *conn) {
	c.mu.Lock()
	if !connection.closed && !c.shut && len(connection.events) == 0 {
		c.idle = append(c.idle, connection)
	} else {
		connection.close()
	}
	c.mu.Unlock()
	<-c.slots
}

// request sends one request on a pooled connection. A request that never reached the daemon is
// sent again on a fresh connection; a read whose connection broke is asked again; a change is
// not (ErrOutcomeUnknown).
func (c *Client) request(ctx context.Context, line string, change bool) (reply, error) {
	op := strings.SplitN(line, " ", 2)[0]
	if err := checkLine(line); err != nil {
		return reply{}, err // Before any connection: a bad argument never waits for the daemon.
	}
	pause := time.Duration(0)
	for {
		connection, err := c.checkout(ctx, op)
		if err != nil {
			return reply{}, err
		}
		result, err := connection.request(ctx, op, line, change)
		c.checkin(connection)
		var notSent errNotSent
		switch {
		case err == nil:
			return result, nil
		case errors.As(err, &notSent):
			// The daemon had closed this connection (a restart): nothing ran. A daemon that
			// closes every connection at once is asked again with a growing pause, not in a loop.
			if pause > 0 {
				timer := time.NewTimer(pause)
				select {
				case <-ctx.Done():
					timer.Stop()
					return reply{}, &CallError{Op: op, Unreached: true, Err: ctx.Err()}
				case <-timer.C:
				}
			}
			if pause = pause*2 + firstRetry; pause > lastRetry {
				pause = lastRetry
			}
			continue
		case !change && isConnectionLost(err) && ctx.Err() == nil:
			continue // A read: asking again is harmless.
		default:
			return reply{}, err
		}
	}
}

func (c *Client) change(ctx context.Context, line string) (Countdown, error) {
	result, err := c.request(ctx, line, true)
	if err != nil {
		return Countdown{}, err
	}
	countdown, ok := parseCountdown(strings.Fields(result.text))
	if !ok {
		return Countdown{}, &Error{Code: "protocol-violation", Message: "unexpected answer: OK " + result.text}
	}
	return countdown, nil
}

// StartOptions are Start's less common settings.
type StartOptions struct {
	Duration       time.Duration // 0: the daemon's default, 60 s
	At             time.Time     // a wall-clock time instead of a duration
	Replace        bool          // cancel a running or paused one of that name instead of ErrBusy
	PauseOnSuspend bool          // stand still while the machine sleeps (a pomodoro)
	CountOnSuspend bool          // count on while it sleeps; with neither, a name started again keeps its setting
	// Cycle runs phases one after the other in the daemon (a pomodoro), instead of Duration:
	// each `<duration>[:<label>]`, such as "25m:work,5m:break".
	Cycle         string
	Repeat        int  // with Cycle: run it this many rounds
	RepeatForever bool // with Cycle: run it until it is cancelled
}

// Start starts a countdown of duration d (0: 60 s). While one of that name runs it fails with
// ErrBusy, whose *Error has RemainingMS and RetryAfter.
func (c *Client) Start(ctx context.Context, name string, d time.Duration) (Countdown, error) {
	return c.StartWith(ctx, name, StartOptions{Duration: d})
}

// StartWith starts a countdown with options.
func (c *Client) StartWith(ctx context.Context, name string, options StartOptions) (Countdown, error) {
	if err := checkName(name); err != nil {
		return Countdown{}, err
	}
	words := []string{"START", name}
	switch {
	case !options.At.IsZero() && options.Duration != 0:
		return Countdown{}, &Error{Code: "bad-request", Message: "give a duration or a time (At), not both"}
	case options.Cycle != "" && (options.Duration != 0 || !options.At.IsZero()):
		return Countdown{}, &Error{Code: "bad-request", Message: "a cycle's phases give its durations: give Cycle alone, without Duration or At"}
	case options.Cycle == "" && (options.Repeat != 0 || options.RepeatForever):
		return Countdown{}, &Error{Code: "bad-request", Message: "Repeat and RepeatForever repeat a cycle: give Cycle too"}
	case options.Cycle != "":
		if strings.IndexFunc(options.Cycle, unicode.IsSpace) >= 0 {
			return Countdown{}, &Error{Code: "bad-request", Message: fmt.Sprintf("a cycle is one word of <duration>[:<label>] phases separated by commas: %q", options.Cycle)}
		}
		words = append(words, "CYCLE", options.Cycle)
		switch {
		case options.RepeatForever:
			words = append(words, "REPEAT")
		case options.Repeat < 0:
			return Countdown{}, &Error{Code: "bad-request", Message: "Repeat is a number of rounds, 1 or more"}
		case options.Repeat > 0:
			words = append(words, "REPEAT", strconv.Itoa(options.Repeat))
		}
	case !options.At.IsZero():
		words = append(words, "AT", strconv.FormatInt(options.At.UnixMilli(), 10))
	case options.Duration != 0:
		text, err := durationText(options.Duration)
		if err != nil {
			return Countdown{}, err
		}
		words = append(words, text)
	}
	if options.Replace {
		words = append(words, "REPLACE")
	}
	switch {
	case options.PauseOnSuspend && options.CountOnSuspend:
		return Countdown{}, &Error{Code: "bad-request", Message: "PauseOnSuspend and CountOnSuspend exclude each other"}
	case options.PauseOnSuspend:
		words = append(words, "ON-SUSPEND", "pause")
	case options.CountOnSuspend && options.At.IsZero():
		words = append(words, "ON-SUSPEND", "count")
	}
	return c.change(ctx, strings.Join(words, " "))
}

// Status is the countdown's state now; ErrNotFound when there is none of that name.
func (c *Client) Status(ctx context.Context, name string) (Countdown, error) {
	if err := checkName(name); err != nil {
		return Countdown{}, err
	}
	result, err := c.request(ctx, "STATUS "+name, false)
	if err != nil {
		return Countdown{}, err
	}
	if len(result.countdowns) == 0 {
		return Countdown{}, &Error{Code: "protocol-violation", Message: "STATUS answered OK without a countdown"}
	}
	return result.countdowns[0], nil
}

// List is every countdown this user may see, optionally of some states and a name prefix.
func (c *Client) List(ctx context.Context, states []string, prefix string) ([]Countdown, error) {
	line := "LIST"
	if len(states) > 0 {
		line += " STATE " + strings.Join(states, ",")
	}
	if prefix != "" {
		if err := checkName(prefix); err != nil {
			return nil, err
		}
		line += " PREFIX " + prefix
	}
	result, err := c.request(ctx, line, false)
	return result.countdowns, err
}

func (c *Client) named(ctx context.Context, verb, name string) (Countdown, error) {
	if err := checkName(name); err != nil {
		return Countdown{}, err
	}
	return c.change(ctx, verb+" "+name)
}

// Cancel cancels a running or paused countdown.
func (c *Client) Cancel(ctx context.Context, name string) (Countdown, error) {
	return c.named(ctx, "CANCEL", name)
}

// Pause pauses a running countdown (ErrBusy if it is paused already).
func (c *Client) Pause(ctx context.Context, name string) (Countdown, error) {
	return c.named(ctx, "PAUSE", name)
}

// Resume resumes a paused countdown (ErrBusy if it is running).
func (c *Client) Resume(ctx context.Context, name string) (Countdown, error) {
	return c.named(ctx, "RESUME", name)
}

// SetPauseOnSuspend changes whether a running or paused countdown stands still while the
// machine sleeps (SET … ON-SUSPEND), without restarting it.
func (c *Client) SetPauseOnSuspend(ctx context.Context, name string, pause bool) (Countdown, error) {
	policy := "count"
	if pause {
		policy = "pause"
	}
	if err := checkName(name); err != nil {
		return Countdown{}, err
	}
	return c.change(ctx, "SET "+name+" ON-SUSPEND "+policy)
}

// Skip ends a cycle's running phase now and starts the next (a bad-request *Error for a plain
// countdown); after the last phase the cycle is done.
func (c *Client) Skip(ctx context.Context, name string) (Countdown, error) {
	return c.named(ctx, "SKIP", name)
}

// Remove forgets a finished countdown now.
func (c *Client) Remove(ctx context.Context, name string) (Countdown, error) {
	return c.named(ctx, "REMOVE", name)
}

// Extend adds d to a running or paused countdown.
func (c *Client) Extend(ctx context.Context, name string, d time.Duration) (Countdown, error) {
	if err := checkName(name); err != nil {
		return Countdown{}, err
	}
	text, err := durationText(d)
	if err != nil {
		return Countdown{}, err
	}
	return c.change(ctx, "EXTEND "+name+" "+text)
}

// Ping asks the daemon for OK pong.
func (c *Client) Ping(ctx context.Context) error {
	_, err := c.request(ctx, "PING", false)
	return err
}

// Stats are the daemon's figures (root: the whole daemon's; anyone else: their own).
func (c *Client) Stats(ctx context.Context) (map[string]string, error) {
	result, err := c.request(ctx, "STATS", false)
	return result.stats, err
}

// Wait blocks until the countdown is finished and returns how it ended (done or cancelled),
// riding through daemon restarts, until ctx ends. ErrNotFound if there is none of that name
// (or it is removed first).
func (c *Client) Wait(ctx context.Context, name string) (Countdown, error) {
	if err := checkName(name); err != nil {
		return Countdown{}, err
	}
	for {
		follower, err := c.connect(ctx, "WAIT")
		if err != nil {
			return Countdown{}, err
		}
		ended, err := waitOn(ctx, follower, name)
		follower.close()
		if err != nil && isConnectionLost(err) && ctx.Err() == nil {
			continue // A daemon restart: follow it again (SUBSCRIBE, then STATUS).
		}
		return ended, err
	}
}

func waitOn(ctx context.Context, follower *conn, name string) (Countdown, error) {
	// Subscribed first, then asked: a done between the two cannot be missed. With snapshots: in
	// cluster mode a RESYNC comes with a snapshot of each followed countdown, which may be the
	// only word of its end.
	if _, err := follower.request(ctx, "SUBSCRIBE", "SUBSCRIBE "+name+" EVENTS done,cancelled,removed,snapshot", false); err != nil {
		return Countdown{}, err
	}
	result, err := follower.request(ctx, "STATUS", "STATUS "+name, false)
	if err != nil {
		return Countdown{}, err
	}
	if len(result.countdowns) == 0 {
		return Countdown{}, &Error{Code: "protocol-violation", Message: "STATUS answered OK without a countdown"}
	}
	current := result.countdowns[0]
	if current.Finished() {
		return current, nil
	}
	for {
		event, err := follower.nextEvent(ctx)
		if err != nil {
			return Countdown{}, err
		}
		if event.Name != name {
			continue
		}
		state := event.Kind
		if event.Kind == "snapshot" {
			state = event.State
		}
		switch {
		case event.Kind == "removed":
			return Countdown{}, &Error{Code: "not-found", Message: fmt.Sprintf("'%s' was removed before it finished", name)}
		case state == "done" || state == "cancelled":
			ended := current
			ended.State, ended.RemainingMS, ended.TotalMS, ended.LateMS, ended.DeadlineUnixMS = state, event.RemainingMS, event.TotalMS, event.LateMS, 0
			return ended, nil
		}
	}
}
